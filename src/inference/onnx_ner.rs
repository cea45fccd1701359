//! Token classifier (BERT for token classification, BIO labels) on ONNX Runtime, used for PII
//! entities. Long texts are scanned in overlapping windows of `max_tokens` so nothing past the
//! first window is missed; the result is the set of entity types found, never the text.

use super::onnx_session::open_session;
use super::worker::Batched;
use super::InferenceError;
use ort::session::Session;
use ort::value::Tensor;
use std::path::Path;
use tokenizers::Tokenizer;

/// An entity type found in a text, with the best token probability that supports it.
#[derive(Debug, Clone, PartialEq)]
pub struct EntityFound {
    /// The type without its B-/I- prefix, e.g. `GIVEN_NAME`.
    pub kind: String,
    /// Highest softmax probability among its tokens.
    pub score: f32,
}

/// The ONNX token classifier.
pub struct OnnxTokenClassifier {
    session: Session,
    tokenizer: Tokenizer,
    labels: Vec<String>,
    described: String,
    window: usize,
    cls: i64,
    sep: i64,
}

/// Everything needed to load a token classifier.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TokenClassifierSpec {
    /// The `.onnx` file.
    pub model: std::path::PathBuf,
    /// Directory with `tokenizer.json` and `config.json` (its `id2label`).
    pub model_dir: std::path::PathBuf,
    /// `libonnxruntime.so`.
    pub runtime_library: std::path::PathBuf,
    /// Execution providers in preference order.
    pub providers: Vec<String>,
    /// Fail when the first provider is unavailable.
    pub require_first: bool,
    /// Window length in tokens; windows overlap by a quarter.
    pub max_tokens: usize,
    /// Threads for one forward pass.
    pub threads: usize,
}

fn load_error(e: impl std::fmt::Display) -> InferenceError {
    InferenceError::Load(e.to_string())
}

/// The label names of a Hugging Face `config.json`, by id.
pub fn labels_of(config: &Path) -> Result<Vec<String>, InferenceError> {
    let text =
        std::fs::read(config).map_err(|e| load_error(format!("{}: {e}", config.display())))?;
    let json: serde_json::Value = serde_json::from_slice(&text)
        .map_err(|e| load_error(format!("{}: {e}", config.display())))?;
    let Some(map) = json["id2label"].as_object() else {
        return Err(load_error(format!("{}: no id2label", config.display())));
    };
    let mut labels = vec![String::new(); map.len()];
    for (id, label) in map {
        let index: usize = id.parse().map_err(|_| {
            load_error(format!(
                "{}: label id {id:?} is not a number",
                config.display()
            ))
        })?;
        let slot = labels
            .get_mut(index)
            .ok_or_else(|| load_error(format!("{}: label ids are not 0..n", config.display())))?;
        *slot = label.as_str().unwrap_or_default().to_owned();
    }
    Ok(labels)
}

impl OnnxTokenClassifier {
    /// Loads the model, its tokenizer and its labels.
    pub fn load(spec: &TokenClassifierSpec) -> Result<Self, InferenceError> {
        let tokenizer_path = spec.model_dir.join("tokenizer.json");
        let mut tokenizer = Tokenizer::from_file(&tokenizer_path)
            .map_err(|e| load_error(format!("{}: {e}", tokenizer_path.display())))?;
        tokenizer.with_truncation(None).map_err(load_error)?;
        tokenizer.with_padding(None);
        let special = |token: &str| {
            tokenizer.token_to_id(token).map(i64::from).ok_or_else(|| {
                load_error(format!("{}: no {token} token", tokenizer_path.display()))
            })
        };
        let (cls, sep) = (special("[CLS]")?, special("[SEP]")?);
        let labels = labels_of(&spec.model_dir.join("config.json"))?;
        let (session, described) = open_session(
            &spec.model,
            &spec.runtime_library,
            &spec.providers,
            spec.require_first,
            spec.threads,
            None,
        )?;
        Ok(Self {
            session,
            tokenizer,
            labels,
            described,
            window: spec.max_tokens.max(8),
            cls,
            sep,
        })
    }

    /// Entity types (without B-/I-) this model can report.
    pub fn entity_types(&self) -> Vec<String> {
        let mut types: Vec<String> = self
            .labels
            .iter()
            .filter_map(|l| l.strip_prefix("B-").map(str::to_owned))
            .collect();
        types.dedup();
        types
    }
}

impl OnnxTokenClassifier {
    /// One forward pass over `rows` (windows with their masks, padded here to the longest),
    /// adding the entities found to their texts' (`owner`) lists.
    fn pass(
        &mut self,
        rows: &[(Vec<i64>, Vec<i64>)],
        owner: &[usize],
        found: &mut [Vec<EntityFound>],
    ) -> Result<(), InferenceError> {
        let run = |e: String| InferenceError::Run(e);
        let tokens = rows.iter().map(|(ids, _)| ids.len()).max().unwrap_or(0);
        let batch = rows.len();
        let mut ids = Vec::with_capacity(batch * tokens);
        let mut mask = Vec::with_capacity(batch * tokens);
        for (row_ids, row_mask) in rows {
            ids.extend(row_ids);
            ids.extend(std::iter::repeat_n(0, tokens - row_ids.len()));
            mask.extend(row_mask);
            mask.extend(std::iter::repeat_n(0, tokens - row_mask.len()));
        }
        let shape = [batch, tokens];
        let types = vec![0i64; batch * tokens];
        let tensor =
            |data: Vec<i64>| Tensor::from_array((shape, data)).map_err(|e| run(e.to_string()));
        let outputs = self
            .session
            .run(ort::inputs![
                "input_ids" => tensor(ids)?,
                "attention_mask" => tensor(mask.clone())?,
                "token_type_ids" => tensor(types)?,
            ])
            .map_err(|e| run(e.to_string()))?;
        let (_, logits) = outputs[0]
            .try_extract_tensor::<f32>()
            .map_err(|e| run(e.to_string()))?;
        let classes = self.labels.len();
        if logits.len() != batch * tokens * classes {
            return Err(run(format!(
                "logits hold {} values, expected {batch} x {tokens} x {classes}",
                logits.len()
            )));
        }
        for row in 0..batch {
            for t in 0..tokens {
                if mask[row * tokens + t] == 0 {
                    continue;
                }
                let scores =
                    &logits[(row * tokens + t) * classes..(row * tokens + t + 1) * classes];
                let (best, probability) = softmax_argmax(scores);
                let label = &self.labels[best];
                let Some(kind) = label
                    .strip_prefix("B-")
                    .or_else(|| label.strip_prefix("I-"))
                else {
                    continue;
                };
                let entities = &mut found[owner[row]];
                match entities.iter_mut().find(|e| e.kind == kind) {
                    Some(entity) => entity.score = entity.score.max(probability),
                    None => entities.push(EntityFound {
                        kind: kind.to_owned(),
                        score: probability,
                    }),
                }
            }
        }
        Ok(())
    }
}

impl Batched for OnnxTokenClassifier {
    type Output = Vec<EntityFound>;

    fn run(&mut self, texts: &[&str]) -> Result<Vec<Vec<EntityFound>>, InferenceError> {
        let run = |e: String| InferenceError::Run(e);
        // Every window of every text is one row; `owner` maps rows back to texts.
        let mut rows: Vec<(Vec<i64>, Vec<i64>)> = Vec::new();
        let mut owner: Vec<usize> = Vec::new();
        for (i, text) in texts.iter().enumerate() {
            let encoding = self
                .tokenizer
                .encode(ends_of(text, MAX_TEXT_BYTES), false)
                .map_err(|e| run(format!("tokenizer: {e}")))?;
            for window in windows(encoding.get_ids(), self.window, self.cls, self.sep) {
                let mask = vec![1; window.len()];
                rows.push((window, mask));
                owner.push(i);
            }
        }
        let mut found: Vec<Vec<EntityFound>> = vec![Vec::new(); texts.len()];
        // A bounded number of windows per forward pass: the pass's memory grows with its rows.
        for (rows, owner) in rows.chunks(ROWS_PER_PASS).zip(owner.chunks(ROWS_PER_PASS)) {
            self.pass(rows, owner, &mut found)?;
        }
        Ok(found)
    }

    fn describe(&self) -> String {
        self.described.clone()
    }
}

/// The most windows one text is read in: past it, the first half and the last half of them
/// (the rule the jailbreak signal's windows follow), so one request is a bounded batch.
pub const MAX_WINDOWS: usize = 32;

/// Windows run in one forward pass; more are run in several passes.
pub const ROWS_PER_PASS: usize = 8;

/// Text tokenized per message: longer text is read at its two ends, half of this each. Each
/// end holds several times the tokens of the [`MAX_WINDOWS`] / 2 windows read there.
pub const MAX_TEXT_BYTES: usize = 64 * 1024;

/// `text`, or its first and last `max / 2` bytes (cut on character boundaries) when longer.
fn ends_of(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return text.into();
    }
    let mut head = max / 2;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - max / 2;
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    format!("{}\n{}", &text[..head], &text[tail..]).into()
}

/// Splits token ids into windows of at most `window` tokens including [CLS] and [SEP], each
/// overlapping the previous by a quarter, so an entity cut at one edge is whole in the next;
/// at most [`MAX_WINDOWS`] of them.
fn windows(ids: &[u32], window: usize, cls: i64, sep: i64) -> Vec<Vec<i64>> {
    let body = window - 2;
    let step = (body - body / 4).max(1);
    let mut starts = vec![0];
    while starts[starts.len() - 1] + body < ids.len() {
        starts.push(starts[starts.len() - 1] + step);
    }
    if starts.len() > MAX_WINDOWS {
        let last = starts.split_off(starts.len() - MAX_WINDOWS / 2);
        starts.truncate(MAX_WINDOWS / 2);
        starts.extend(last);
    }
    starts
        .into_iter()
        .map(|start| {
            let end = (start + body).min(ids.len());
            let mut row = Vec::with_capacity(end - start + 2);
            row.push(cls);
            row.extend(ids[start..end].iter().map(|&x| i64::from(x)));
            row.push(sep);
            row
        })
        .collect()
}

fn softmax_argmax(scores: &[f32]) -> (usize, f32) {
    let max = scores.iter().copied().fold(f32::MIN, f32::max);
    let sum: f32 = scores.iter().map(|s| (s - max).exp()).sum();
    let (best, top) =
        scores.iter().enumerate().fold(
            (0, f32::MIN),
            |acc, (i, s)| if *s > acc.1 { (i, *s) } else { acc },
        );
    (best, (top - max).exp() / sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_cover_every_token_up_to_the_cap_then_the_two_ends() {
        let ids: Vec<u32> = (0..500).collect();
        let rows = windows(&ids, 10, -1, -2);
        // Body 8 tokens, step 6: every token lies in some window, each framed by CLS and SEP.
        let mut seen = vec![false; ids.len()];
        for row in &rows {
            assert_eq!((row[0], row[row.len() - 1]), (-1, -2));
            for &id in &row[1..row.len() - 1] {
                seen[id as usize] = true;
            }
        }
        assert_eq!(rows.len(), MAX_WINDOWS);
        assert_eq!(rows[0][1..9], [0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(rows[MAX_WINDOWS - 1][rows[MAX_WINDOWS - 1].len() - 2], 499);
        assert!(seen[..90].iter().all(|s| *s) && seen[450..].iter().all(|s| *s));
        let short: Vec<u32> = (0..20).collect();
        let rows = windows(&short, 10, -1, -2);
        assert_eq!(rows.len(), 3);
        assert!(windows(&[], 10, -1, -2) == [vec![-1, -2]]);
    }

    #[test]
    fn a_long_text_is_read_at_its_two_ends_on_character_boundaries() {
        assert_eq!(ends_of("short", 16), "short");
        let text = format!("{}{}", "é".repeat(100), "z".repeat(100));
        let cut = ends_of(&text, 101);
        assert!(cut.starts_with('é') && cut.ends_with('z') && cut.contains('\n'));
        assert!(cut.len() <= 102, "{}", cut.len());
    }
}
