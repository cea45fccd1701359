//! The release gate: criteria a scorecard must meet before a candidate policy ships, read from
//! a YAML file and checked against the identities' and fixed models' summaries. Each criterion
//! gives a verdict that names its path in the gate file, what was measured and the bound.
//!
//! ```yaml
//! criteria:
//!   - identity: mom/auto
//!     compute: latency               # or cost (priced tokens); default latency
//!     minQualityVsBestFixed: -0.01   # quality − the best fixed model's ≥ −0.01
//!     maxComputeVsBestFixed: 0.85    # compute ÷ the best fixed model's ≤ 0.85
//!     minGainAtMatchedCompute: 0.05  # quality − the best fixed model costing no more ≥ 0.05
//!   - identity: mom/light
//!     minQuality: 0.5
//! ```

use super::report::Scorecard;
use super::score::Summary;
use serde::{Deserialize, Serialize};

/// A gate file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gate {
    /// Every criterion must hold.
    pub criteria: Vec<Criterion>,
}

/// What compute means in a criterion.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Compute {
    /// The sum of client-side latencies.
    #[default]
    Latency,
    /// The configured prices times the tokens.
    Cost,
}

/// Bounds on one identity.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Criterion {
    /// The identity (a target of the scorecard).
    pub identity: String,
    /// How compute is measured.
    #[serde(default)]
    pub compute: Compute,
    /// Lowest quality.
    pub min_quality: Option<f64>,
    /// Lowest quality minus the best fixed model's (highest quality, the cheaper on a tie).
    pub min_quality_vs_best_fixed: Option<f64>,
    /// Largest compute as a share of the best fixed model's.
    pub max_compute_vs_best_fixed: Option<f64>,
    /// Lowest quality minus that of the best fixed model whose compute is no more than the
    /// identity's (fails when every fixed model needs more).
    pub min_gain_at_matched_compute: Option<f64>,
}

/// One bound's outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    /// The bound's path in the gate file, e.g. `criteria[0].maxComputeVsBestFixed`.
    pub path: String,
    /// Whether it holds.
    pub passed: bool,
    /// What was measured against what.
    pub detail: String,
}

/// Parses a gate file; errors name the field.
pub fn parse(text: &str) -> Result<Gate, String> {
    let gate: Gate = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
    if gate.criteria.is_empty() {
        return Err("criteria: list at least one criterion".to_owned());
    }
    Ok(gate)
}

fn compute_of(summary: &Summary, compute: Compute) -> f64 {
    match compute {
        Compute::Latency => summary.latency_total_ms,
        Compute::Cost => summary.cost,
    }
}

/// Checks every criterion against `card`; the run passes when every verdict does.
pub fn check(gate: &Gate, card: &Scorecard) -> Vec<Verdict> {
    let fixed: Vec<&Summary> = card.summaries.iter().filter(|s| s.fixed).collect();
    let mut verdicts = Vec::new();
    for (i, criterion) in gate.criteria.iter().enumerate() {
        let at = |field: &str| format!("criteria[{i}].{field}");
        let Some(me) = card
            .summaries
            .iter()
            .find(|s| !s.fixed && s.target == criterion.identity)
        else {
            verdicts.push(Verdict {
                path: at("identity"),
                passed: false,
                detail: format!("{} was not evaluated in this scorecard", criterion.identity),
            });
            continue;
        };
        let compute = |s: &Summary| compute_of(s, criterion.compute);
        let unit = match criterion.compute {
            Compute::Latency => "s of latency",
            Compute::Cost => "cost",
        };
        let shown = |s: &Summary| match criterion.compute {
            Compute::Latency => format!("{:.1}", compute(s) / 1000.0),
            Compute::Cost => format!("{:.6}", compute(s)),
        };
        let better = |a: &&&Summary, b: &&&Summary| {
            b.quality
                .total_cmp(&a.quality)
                .then(compute(a).total_cmp(&compute(b)))
        };
        let best = fixed.iter().min_by(better);
        let name = &criterion.identity;
        if let Some(min) = criterion.min_quality {
            verdicts.push(Verdict {
                path: at("minQuality"),
                passed: me.quality >= min,
                detail: format!("{name} quality {:.3} (bound ≥ {min})", me.quality),
            });
        }
        if let Some(min) = criterion.min_quality_vs_best_fixed {
            verdicts.push(match best {
                Some(b) => Verdict {
                    path: at("minQualityVsBestFixed"),
                    passed: me.quality - b.quality >= min - 1e-12,
                    detail: format!(
                        "{name} quality {:.3} vs {} {:.3}: {:+.3} (bound ≥ {min:+})",
                        me.quality,
                        b.target,
                        b.quality,
                        me.quality - b.quality
                    ),
                },
                None => no_fixed(at("minQualityVsBestFixed")),
            });
        }
        if let Some(max) = criterion.max_compute_vs_best_fixed {
            verdicts.push(match best {
                Some(b) if compute(b) > 0.0 => {
                    let ratio = compute(me) / compute(b);
                    Verdict {
                        path: at("maxComputeVsBestFixed"),
                        passed: ratio <= max + 1e-12,
                        detail: format!(
                            "{name} {} {unit} vs {} {}: {ratio:.3}× (bound ≤ {max}×)",
                            shown(me),
                            b.target,
                            shown(b)
                        ),
                    }
                }
                _ => no_fixed(at("maxComputeVsBestFixed")),
            });
        }
        if let Some(min) = criterion.min_gain_at_matched_compute {
            let path = at("minGainAtMatchedCompute");
            let affordable = fixed
                .iter()
                .filter(|f| compute(f) <= compute(me) * (1.0 + 1e-9))
                .min_by(better);
            verdicts.push(match affordable {
                Some(m) => Verdict {
                    passed: me.quality - m.quality >= min - 1e-12,
                    detail: format!(
                        "{name} quality {:.3} vs {} {:.3} at {} ≤ {} {unit}: {:+.3} (bound ≥ {min:+})",
                        me.quality,
                        m.target,
                        m.quality,
                        shown(m),
                        shown(me),
                        me.quality - m.quality
                    ),
                    path,
                },
                None => Verdict {
                    path,
                    passed: false,
                    detail: format!(
                        "every fixed model needs more than {name}'s {} {unit}: nothing to match",
                        shown(me)
                    ),
                },
            });
        }
    }
    verdicts
}

fn no_fixed(path: String) -> Verdict {
    Verdict {
        path,
        passed: false,
        detail: "no fixed model with a non-zero measurement to compare with".to_owned(),
    }
}

/// The verdicts as Markdown lines.
pub fn render(verdicts: &[Verdict]) -> String {
    let mut text = String::from("## Release gate\n\n");
    for v in verdicts {
        let mark = if v.passed { "pass" } else { "FAIL" };
        text.push_str(&format!("- {mark} `{}`: {}\n", v.path, v.detail));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::score::Oracle;

    fn summary(target: &str, fixed: bool, quality: f64, latency_s: f64, cost: f64) -> Summary {
        Summary {
            target: target.to_owned(),
            fixed,
            items: 10,
            quality,
            errors: 0,
            calls: 10,
            calls_per_item: 1.0,
            prompt_tokens: 0,
            completion_tokens: 0,
            cost,
            energy_joules: 0.0,
            latency_p50_ms: 0.0,
            latency_p99_ms: 0.0,
            ttft_p50_ms: 0.0,
            latency_total_ms: latency_s * 1000.0,
        }
    }

    fn card() -> Scorecard {
        Scorecard {
            suite: "s".to_owned(),
            items: 10,
            kinds: Vec::new(),
            url: String::new(),
            max_tokens: 0,
            summaries: vec![
                summary("mom/auto", false, 0.75, 70.0, 3.0),
                summary("coder", true, 0.73, 100.0, 2.0),
                summary("small", true, 0.40, 30.0, 1.0),
            ],
            oracle: Oracle {
                quality: 0.8,
                cost: 1.0,
                picks: Vec::new(),
            },
            comparisons: Vec::new(),
            served_versions: Vec::new(),
            outcomes: Vec::new(),
        }
    }

    #[test]
    fn a_candidate_that_meets_every_bound_passes() {
        let gate = parse(
            "criteria:\n  - identity: mom/auto\n    minQualityVsBestFixed: -0.01\n    \
             maxComputeVsBestFixed: 0.85\n    minGainAtMatchedCompute: 0.3\n",
        )
        .unwrap();
        let verdicts = check(&gate, &card());
        assert_eq!(verdicts.len(), 3);
        assert!(verdicts.iter().all(|v| v.passed), "{verdicts:?}");
        // 70 s against the coder's 100 s; matched compute: the small model (30 s ≤ 70 s).
        assert!(
            verdicts[1].detail.contains("0.700×"),
            "{}",
            verdicts[1].detail
        );
        assert!(
            verdicts[2].detail.contains("vs small 0.400"),
            "{}",
            verdicts[2].detail
        );
    }

    #[test]
    fn the_failed_bound_is_named_with_its_measurement() {
        let gate = parse(
            "criteria:\n  - identity: mom/auto\n    compute: cost\n    maxComputeVsBestFixed: 0.85\n  \
             - identity: mom/light\n    minQuality: 0.5\n",
        )
        .unwrap();
        let verdicts = check(&gate, &card());
        assert_eq!(verdicts[0].path, "criteria[0].maxComputeVsBestFixed");
        assert!(!verdicts[0].passed);
        assert!(
            verdicts[0].detail.contains("1.500×"),
            "{}",
            verdicts[0].detail
        );
        assert_eq!(verdicts[1].path, "criteria[1].identity");
        assert!(!verdicts[1].passed);
        assert!(render(&verdicts).contains("FAIL `criteria[0].maxComputeVsBestFixed`"));
    }

    #[test]
    fn a_gate_file_with_an_unknown_bound_is_refused() {
        let error = parse("criteria:\n  - identity: mom/auto\n    maxCompute: 1\n").unwrap_err();
        assert!(error.contains("unknown field `maxCompute`"), "{error}");
        assert!(parse("criteria: []\n")
            .unwrap_err()
            .contains("at least one"));
    }
}
