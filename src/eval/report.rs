//! The scorecard: assembled from the outcomes, written as `scorecard.json` (everything, each
//! answer's outcome included), `scorecard.md` (the tables a person reads) and `frontier.png`
//! (quality against cost per item: fixed models, their frontier, and each identity).

use super::score::{self, Comparison, Oracle, Outcome, Summary};
use super::Options;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Everything one run measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Scorecard {
    /// The suite file and its item count by kind.
    pub suite: String,
    /// Items.
    pub items: usize,
    /// Items by kind.
    pub kinds: Vec<(String, usize)>,
    /// Where the requests went.
    pub url: String,
    /// `max_tokens` of every request.
    pub max_tokens: u32,
    /// Per target, identities first.
    pub summaries: Vec<Summary>,
    /// The per-item oracle over the fixed models.
    pub oracle: Oracle,
    /// Each identity against the fixed models.
    pub comparisons: Vec<Comparison>,
    /// Every configuration version that answered (`x-mom-config-version`), sorted: what was
    /// measured, so a gate's verdict can be tied to a bundle.
    #[serde(default)]
    pub served_versions: Vec<String>,
    /// Every answer.
    pub outcomes: Vec<Outcome>,
}

/// Builds the scorecard of a finished run.
pub fn scorecard(
    suite: &str,
    items: &[super::suite::Item],
    options: &Options,
    outcomes: Vec<Outcome>,
) -> Scorecard {
    let summaries: Vec<Summary> = options
        .targets()
        .iter()
        .map(|(target, fixed)| {
            let mine: Vec<&Outcome> = outcomes.iter().filter(|o| &o.target == target).collect();
            score::summarise(target, *fixed, &mine)
        })
        .collect();
    let ids: Vec<String> = items.iter().map(|i| i.id.clone()).collect();
    let fixed_outcomes: Vec<Outcome> = outcomes
        .iter()
        .filter(|o| options.fixed.contains(&o.target))
        .cloned()
        .collect();
    let oracle = score::oracle(&ids, &fixed_outcomes);
    let fixed: Vec<Summary> = summaries.iter().filter(|s| s.fixed).cloned().collect();
    let comparisons = summaries
        .iter()
        .filter(|s| !s.fixed)
        .map(|s| score::compare(s, &fixed, &oracle))
        .collect();
    let mut kinds: Vec<(String, usize)> = Vec::new();
    for item in items {
        match kinds.iter_mut().find(|(k, _)| k == item.kind.name()) {
            Some((_, n)) => *n += 1,
            None => kinds.push((item.kind.name().to_owned(), 1)),
        }
    }
    let mut served_versions: Vec<String> = outcomes
        .iter()
        .filter(|o| !o.config_version.is_empty())
        .map(|o| o.config_version.clone())
        .collect();
    served_versions.sort();
    served_versions.dedup();
    Scorecard {
        suite: suite.to_owned(),
        items: items.len(),
        kinds,
        url: options.url.clone(),
        max_tokens: options.max_tokens,
        summaries,
        oracle,
        comparisons,
        served_versions,
        outcomes,
    }
}

/// The Markdown scorecard.
pub fn markdown(card: &Scorecard, plotted: Option<&str>) -> String {
    let kinds: Vec<String> = card.kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
    let mut out = format!(
        "# Scorecard: {}\n\n{} items ({}), through {}, max_tokens {}.\n\n",
        card.suite,
        card.items,
        kinds.join(", "),
        card.url,
        card.max_tokens
    );
    // Energy is a column only when some model declared its power.
    let energy = card.summaries.iter().any(|s| s.energy_joules > 0.0);
    let (energy_head, energy_rule) = if energy {
        (" energy J |", "---:|")
    } else {
        ("", "")
    };
    out.push_str(&format!("| target | kind | quality | calls/item | prompt tok | completion tok | cost |{energy_head} p50 ms | p99 ms | errors |\n"));
    out.push_str(&format!(
        "|---|---|---:|---:|---:|---:|---:|{energy_rule}---:|---:|---:|\n"
    ));
    for s in &card.summaries {
        let joules = if energy {
            format!(" {:.1} |", s.energy_joules)
        } else {
            String::new()
        };
        out.push_str(&format!(
            "| {} | {} | {:.3} | {:.2} | {} | {} | {:.6} |{joules} {:.0} | {:.0} | {} |\n",
            s.target,
            if s.fixed { "fixed" } else { "identity" },
            s.quality,
            s.calls_per_item,
            s.prompt_tokens,
            s.completion_tokens,
            s.cost,
            s.latency_p50_ms,
            s.latency_p99_ms,
            s.errors
        ));
    }
    let energy_blank = if energy { " — |" } else { "" };
    out.push_str(&format!(
        "| oracle (best fixed model per item) | — | {:.3} | — | — | — | {:.6} |{energy_blank} — | — | — |\n\n",
        card.oracle.quality, card.oracle.cost
    ));
    for c in &card.comparisons {
        out.push_str(&format!(
            "**{}**: routing regret {:+.3} against the oracle",
            c.identity, c.regret
        ));
        if let (Some(best), Some(gain)) = (&c.best_fixed, c.gain_over_best_fixed) {
            out.push_str(&format!(
                "; {gain:+.3} against the best fixed model ({}, {:.3} at cost {:.6})",
                best.target, best.quality, best.cost
            ));
        }
        if let (Some(matched), Some(gain)) = (&c.matched, c.gain_at_matched_compute) {
            if c.matched_compute {
                out.push_str(&format!(
                    "; **{gain:+.3} at matched compute** against {} ({:.3} at cost {:.6}, no more than the identity's)",
                    matched.target, matched.quality, matched.cost
                ));
            } else {
                out.push_str(&format!(
                    "; every fixed model costs more than the identity: {gain:+.3} against the cheapest, {} ({:.3} at cost {:.6})",
                    matched.target, matched.quality, matched.cost
                ));
            }
        }
        out.push_str(".\n\n");
    }
    match plotted {
        Some(file) => out.push_str(&format!("![quality against cost]({file})\n")),
        None => out.push_str(
            "(no plot: no font was found to label it; set MOM_PLOT_FONT to a .ttf file)\n",
        ),
    }
    out
}

/// A TrueType font for the plot's labels: `$MOM_PLOT_FONT`, else DejaVu Sans or Liberation Sans
/// where distributions install them.
fn font() -> Option<&'static [u8]> {
    let candidates = std::env::var("MOM_PLOT_FONT")
        .ok()
        .into_iter()
        .map(PathBuf::from)
        .chain(
            [
                "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
                "/usr/share/fonts/TTF/DejaVuSans.ttf",
                "/usr/share/fonts/dejavu/DejaVuSans.ttf",
                "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
            ]
            .into_iter()
            .map(PathBuf::from),
        );
    for path in candidates {
        if let Ok(bytes) = std::fs::read(&path) {
            return Some(Box::leak(bytes.into_boxed_slice()));
        }
    }
    None
}

/// Draws quality against cost per item to `path`; `Ok(false)` when no font was found.
pub fn plot(card: &Scorecard, path: &Path) -> Result<bool, String> {
    use plotters::prelude::*;
    let Some(bytes) = font() else {
        return Ok(false);
    };
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| "the plot font is not a usable TrueType font".to_owned())?;
    let per_item = |s: &Summary| {
        if s.items == 0 {
            0.0
        } else {
            s.cost / s.items as f64
        }
    };
    let max_cost = card
        .summaries
        .iter()
        .map(per_item)
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.25;
    let root = BitMapBackend::new(path, (960, 640)).into_drawing_area();
    let draw = || -> Result<(), Box<dyn std::error::Error + '_>> {
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!("{}: quality against cost", card.suite),
                ("sans-serif", 22),
            )
            .margin(24)
            .x_label_area_size(48)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..max_cost, 0.0..1.05f64)?;
        chart
            .configure_mesh()
            .x_desc("cost per item (configured prices)")
            .y_desc("quality")
            .x_label_formatter(&|x| format!("{x:.2e}"))
            .draw()?;
        let fixed: Vec<Summary> = card.summaries.iter().filter(|s| s.fixed).cloned().collect();
        let frontier: Vec<(f64, f64)> = score::frontier(&fixed)
            .into_iter()
            .map(|i| (per_item(&fixed[i]), fixed[i].quality))
            .collect();
        chart
            .draw_series(LineSeries::new(frontier, BLUE.mix(0.6).stroke_width(2)))?
            .label("fixed-model frontier")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
        // Identities label below their point, fixed models above: a looper that lands on a
        // fixed model (routing everything to it) stays readable.
        for (fixed, label, color, offset) in [
            (true, "fixed model", BLUE, -16),
            (false, "identity", RED, 8),
        ] {
            let points = card.summaries.iter().filter(|s| s.fixed == fixed).map(|s| {
                EmptyElement::at((per_item(s), s.quality))
                    + Circle::new((0, 0), 6, color.filled())
                    + Text::new(
                        format!("{} ({:.2})", s.target, s.quality),
                        (9, offset),
                        ("sans-serif", 15),
                    )
            });
            chart
                .draw_series(points)?
                .label(label)
                .legend(move |(x, y)| Circle::new((x + 10, y), 5, color.filled()));
        }
        chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .draw()?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| format!("cannot draw {}: {e}", path.display()))?;
    Ok(true)
}

/// Writes `scorecard.json`, `scorecard.md` (with `appendix` at its end, e.g. the release
/// gate's verdicts) and `frontier.png` into `out`; returns the Markdown.
pub fn write(card: &Scorecard, out: &Path, appendix: &str) -> Result<String, String> {
    std::fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let json = serde_json::to_string_pretty(card).map_err(|e| e.to_string())?;
    let json_path = out.join("scorecard.json");
    std::fs::write(&json_path, json + "\n")
        .map_err(|e| format!("cannot write {}: {e}", json_path.display()))?;
    let png = out.join("frontier.png");
    let plotted = plot(card, &png)?;
    let text = markdown(card, plotted.then_some("frontier.png")) + appendix;
    let md_path = out.join("scorecard.md");
    std::fs::write(&md_path, &text)
        .map_err(|e| format!("cannot write {}: {e}", md_path.display()))?;
    Ok(text)
}
