//! Budget signal: the share a request's tenant has left of its tightest budget (tokens,
//! requests or cost, whichever is closest to spent), read at admission. A policy can route a
//! tenant that is running out to a cheaper model before its requests are refused.

use super::{Evidence, SignalError};

/// Matches while the tenant has less than `below` of its tightest budget left.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetSignal {
    below: f64,
}

impl BudgetSignal {
    /// Builds the signal; `below` is a share in (0, 1].
    pub fn new(below: f64) -> Result<Self, SignalError> {
        if !(below > 0.0 && below <= 1.0) {
            return Err(SignalError::new(
                "below",
                format!("must be a share of the budget in (0, 1], e.g. 0.2 (got {below})"),
            ));
        }
        Ok(Self { below })
    }

    /// The evidence for a tenant with `share` left (`None`: no tenant, or no windowed limit):
    /// the share is the value; without one the signal does not match.
    pub fn evaluate(&self, share: Option<f64>) -> Evidence {
        Evidence {
            value: share,
            ..Evidence::certain(share.is_some_and(|share| share < self.below))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::BudgetSignal;

    #[test]
    fn it_matches_below_its_share_and_never_without_a_tenant() {
        let signal = BudgetSignal::new(0.2).unwrap();
        assert!(signal.evaluate(Some(0.1)).matched);
        assert!(!signal.evaluate(Some(0.2)).matched);
        assert!(!signal.evaluate(None).matched);
        assert_eq!(signal.evaluate(Some(0.5)).value, Some(0.5));
        assert!(BudgetSignal::new(0.0).is_err() && BudgetSignal::new(1.5).is_err());
    }
}
