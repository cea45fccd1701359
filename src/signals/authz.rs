//! Authz signal: roles carried in a trusted identity header. The header must be set by an
//! authentication filter in front of mom-router (and stripped from client requests by Envoy);
//! mom-router trusts it as given.

use super::{Evidence, SignalError};
use crate::llm::Headers;

/// Matches when the caller holds any of the configured roles.
#[derive(Debug, Clone)]
pub struct AuthzSignal {
    header: String,
    roles: Vec<String>,
}

impl AuthzSignal {
    /// Builds the signal.
    pub fn new(header: &str, roles: &[String]) -> Result<Self, SignalError> {
        if header.trim().is_empty() {
            return Err(SignalError::new("header", "name the trusted roles header"));
        }
        if roles.is_empty() {
            return Err(SignalError::new("roles", "list at least one role"));
        }
        Ok(Self {
            header: header.to_ascii_lowercase(),
            roles: roles.to_vec(),
        })
    }

    pub(super) fn evaluate(&self, headers: &Headers) -> Evidence {
        let held = headers.get(&self.header).unwrap_or_default();
        let role = held
            .split(',')
            .map(str::trim)
            .find(|role| self.roles.iter().any(|wanted| wanted == role));
        Evidence {
            label: role.map(str::to_owned),
            ..Evidence::certain(role.is_some())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_any_listed_role_in_a_comma_separated_header() {
        let signal = AuthzSignal::new("x-mom-user-roles", &["admin".to_owned()]).unwrap();
        let headers = Headers::new([("X-Mom-User-Roles".to_owned(), "dev, admin".to_owned())]);
        let e = signal.evaluate(&headers);
        assert!(e.matched);
        assert_eq!(e.label.as_deref(), Some("admin"));
        assert!(!signal.evaluate(&Headers::default()).matched);
    }
}
