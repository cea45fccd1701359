//! Classification quality: accuracy, per-label precision/recall/F1, macro-F1 and the confusion
//! matrix, as printed by `train` and `eval`.

use crate::signals::ABSTAIN;
use serde::Serialize;
use std::fmt;

/// Quality of predictions against the truth, over a fixed label set.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Labels, in matrix order.
    pub labels: Vec<String>,
    /// Examples scored.
    pub examples: usize,
    /// Share of correct predictions.
    pub accuracy: f64,
    /// Unweighted mean of the per-label F1 scores.
    pub macro_f1: f64,
    /// Per-label `(precision, recall, f1, support)`.
    pub per_label: Vec<(f64, f64, f64, usize)>,
    /// `confusion[truth][predicted]`.
    pub confusion: Vec<Vec<usize>>,
    /// Expected calibration error of the reported confidence, where it was measured.
    pub calibration_error: Option<f64>,
}

impl Report {
    /// Scores `(truth, predicted)` label indices.
    pub fn new(labels: Vec<String>, pairs: &[(usize, usize)]) -> Self {
        let k = labels.len();
        let mut confusion = vec![vec![0usize; k]; k];
        for &(truth, predicted) in pairs {
            confusion[truth][predicted] += 1;
        }
        let correct: usize = (0..k).map(|i| confusion[i][i]).sum();
        let ratio = |a: usize, b: usize| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        let per_label: Vec<(f64, f64, f64, usize)> = (0..k)
            .map(|i| {
                let support: usize = confusion[i].iter().sum();
                let predicted: usize = confusion.iter().map(|row| row[i]).sum();
                let precision = ratio(confusion[i][i], predicted);
                let recall = ratio(confusion[i][i], support);
                let f1 = if precision + recall == 0.0 {
                    0.0
                } else {
                    2.0 * precision * recall / (precision + recall)
                };
                (precision, recall, f1, support)
            })
            .collect();
        let present: Vec<f64> = per_label
            .iter()
            .filter(|(_, _, _, support)| *support > 0)
            .map(|(_, _, f1, _)| *f1)
            .collect();
        Self {
            labels,
            examples: pairs.len(),
            accuracy: ratio(correct, pairs.len()),
            macro_f1: present.iter().sum::<f64>() / present.len().max(1) as f64,
            per_label,
            confusion,
            calibration_error: None,
        }
    }

    /// How many examples were predicted as `label` when it is no example's truth (a classifier's
    /// `abstain`), and the accuracy over the others; `None` when no example was.
    pub fn selective(&self, label: &str) -> Option<(usize, f64)> {
        let index = self.labels.iter().position(|l| l == label)?;
        if self.per_label[index].3 > 0 {
            return None;
        }
        let withheld: usize = self.confusion.iter().map(|row| row[index]).sum();
        let answered = self.examples - withheld;
        if withheld == 0 || answered == 0 {
            return None;
        }
        let correct: usize = (0..self.labels.len()).map(|i| self.confusion[i][i]).sum();
        Some((withheld, correct as f64 / answered as f64))
    }

    /// F1 of one label (the positive class of a binary task).
    pub fn f1_of(&self, label: &str) -> Option<f64> {
        let index = self.labels.iter().position(|l| l == label)?;
        Some(self.per_label[index].2)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "examples {}  accuracy {:.4}  macro-F1 {:.4}",
            self.examples, self.accuracy, self.macro_f1
        )?;
        let width = self
            .labels
            .iter()
            .map(String::len)
            .max()
            .unwrap_or(5)
            .max(5);
        writeln!(f, "{:width$}  precision  recall  f1      support", "label")?;
        for (label, (p, r, f1, n)) in self.labels.iter().zip(&self.per_label) {
            writeln!(f, "{label:width$}  {p:.4}     {r:.4}  {f1:.4}  {n}")?;
        }
        writeln!(
            f,
            "confusion (rows: truth, columns: predicted, in label order)"
        )?;
        for (label, row) in self.labels.iter().zip(&self.confusion) {
            let cells: Vec<String> = row.iter().map(|c| format!("{c:5}")).collect();
            writeln!(f, "{label:width$} {}", cells.join(""))?;
        }
        if let Some(error) = self.calibration_error {
            writeln!(
                f,
                "expected calibration error of the reported confidence: {error:.4}"
            )?;
        }
        if let Some((withheld, accuracy)) = self.selective(ABSTAIN) {
            writeln!(
                f,
                "{ABSTAIN}: {withheld} of {} examples ({:.1} %); accuracy on the other {}: {accuracy:.4}",
                self.examples,
                100.0 * withheld as f64 / self.examples as f64,
                self.examples - withheld
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_a_small_confusion() {
        let labels = vec!["a".to_owned(), "b".to_owned()];
        // truth a: 3 right, 1 wrong; truth b: 1 right, 1 wrong.
        let pairs = [(0, 0), (0, 0), (0, 0), (0, 1), (1, 1), (1, 0)];
        let report = Report::new(labels, &pairs);
        assert!((report.accuracy - 4.0 / 6.0).abs() < 1e-12);
        let (p, r, f1, n) = report.per_label[1];
        assert_eq!(n, 2);
        assert!((p - 0.5).abs() < 1e-12 && (r - 0.5).abs() < 1e-12 && (f1 - 0.5).abs() < 1e-12);
        assert!((report.macro_f1 - (0.75 + 0.5) / 2.0).abs() < 1e-12);
        assert_eq!(report.confusion, vec![vec![3, 1], vec![1, 1]]);
        assert!(report.to_string().contains("accuracy 0.6667"));
    }

    #[test]
    fn abstentions_are_counted_apart_from_the_answers() {
        let labels = vec!["abstain".to_owned(), "a".to_owned(), "b".to_owned()];
        // Two abstentions; of the four answers, three are right.
        let pairs = [(1, 0), (2, 0), (1, 1), (1, 1), (2, 2), (2, 1)];
        let report = Report::new(labels, &pairs);
        let (withheld, accuracy) = report.selective("abstain").unwrap();
        assert_eq!(withheld, 2);
        assert!((accuracy - 0.75).abs() < 1e-12);
        assert!(report
            .to_string()
            .contains("abstain: 2 of 6 examples (33.3 %); accuracy on the other 4: 0.7500"));
        assert_eq!(
            report.selective("a"),
            None,
            "a label with support is not an abstention"
        );
    }
}
