//! The router-owned allocation head: for each model of a pool, the probability that it answers a
//! request correctly and what answering costs it (latency, completion tokens), predicted from
//! the request's kind and a few cheap text features ([`super::router_input`]). `mom-router
//! train-router` fits it from evaluation traces; the `learned` selection algorithm reads it.
//!
//! File format (safetensors): tensors `kind.weight` (`[kinds, dims + features]`) and `.bias` (a
//! softmax classifier of the request's kind over the embedding and the cheap features); per
//! model `m` (index into the `models` metadata), `models.m.correct.weight` (`[2, in]`) and
//! `.bias` (a logistic head: wrong, right) and `models.m.cost.weight` (`[2, in]`) and `.bias` (a
//! linear head: ln latency in ms, ln(1 + completion tokens)), where `in` is
//! `kinds × (1 + features)`; `probe` as in [`super::Head`]. Metadata: `format`
//! (`mom-router-router/2`), `kinds`, `models` and `features` (JSON arrays), `encoder`,
//! `encoderSha256`, and the training provenance.

use super::head::{f32s_to_le, softmax, Dense, HeadError};
use super::head_file::{write_f32_tensors, HeadFile};
use super::router_input::{
    cheap_features, crossed, crossed_width, joined, kind_input_width, ROUTER_FEATURES,
};
use std::collections::HashMap;
use std::path::Path;

/// Format tag written into every router head file.
pub const ROUTER_FORMAT: &str = "mom-router-router/2";

/// What the head predicts for one model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prediction {
    /// Probability of a correct answer.
    pub correct: f64,
    /// Expected time to the complete answer, in milliseconds.
    pub latency_ms: f64,
    /// Expected completion tokens.
    pub completion_tokens: f64,
}

/// One model's two heads.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelHeads {
    /// The logical model name.
    pub model: String,
    /// Logistic head: logits of (wrong, right).
    pub correct: Dense,
    /// Linear head: (ln latency ms, ln(1 + completion tokens)).
    pub cost: Dense,
}

/// A trained allocation head over a pool of models.
#[derive(Debug, Clone, PartialEq)]
pub struct RouterHead {
    /// The request kinds the head tells apart, in the kind classifier's output order.
    pub kinds: Vec<String>,
    /// Softmax classifier of the request's kind (`kinds` outputs over the embedding and the
    /// cheap features).
    pub kind: Dense,
    /// Per model, in training order.
    pub models: Vec<ModelHeads>,
    /// The training encoder's embedding of [`super::PROBE_TEXT`].
    pub probe: Vec<f32>,
    /// What produced the training embeddings.
    pub encoder: String,
    /// SHA-256 of the training encoder's weights file.
    pub encoder_sha256: String,
}

impl RouterHead {
    /// Width of the embedding the head reads.
    pub fn dims(&self) -> usize {
        self.probe.len()
    }

    /// The index of `model` in [`RouterHead::models`].
    pub fn position(&self, model: &str) -> Option<usize> {
        self.models.iter().position(|m| m.model == model)
    }

    /// The names of the models the head predicts for.
    pub fn model_names(&self) -> Vec<&str> {
        self.models.iter().map(|m| m.model.as_str()).collect()
    }

    /// The probability of each of [`RouterHead::kinds`], from the embedding and the cheap
    /// features.
    fn probabilities(&self, embedding: &[f32], features: &[f32]) -> Vec<f32> {
        let mut logits = self.kind.apply(&joined(embedding, features));
        softmax(&mut logits);
        logits
    }

    /// The model heads' input for a request with this embedding and user text: its kind
    /// probabilities crossed with its cheap features.
    pub fn input(&self, embedding: &[f32], text: &str) -> Vec<f32> {
        self.input_and_kinds(embedding, text).0
    }

    /// [`RouterHead::input`] and the kind probabilities it was built from (one per
    /// [`RouterHead::kinds`]).
    pub fn input_and_kinds(&self, embedding: &[f32], text: &str) -> (Vec<f32>, Vec<f32>) {
        let features = cheap_features(text);
        let kinds = self.probabilities(embedding, &features);
        (crossed(&kinds, &features), kinds)
    }

    /// The prediction for model `index` on an input built by [`RouterHead::input`].
    pub fn predict(&self, index: usize, input: &[f32]) -> Option<Prediction> {
        let heads = self.models.get(index)?;
        let mut logits = heads.correct.apply(input);
        softmax(&mut logits);
        let cost = heads.cost.apply(input);
        Some(Prediction {
            correct: f64::from(*logits.get(1)?),
            latency_ms: f64::from(*cost.first()?).clamp(-5.0, 15.0).exp(),
            completion_tokens: f64::from(*cost.get(1)?).clamp(0.0, 15.0).exp_m1(),
        })
    }

    /// Reads a router head file and checks that its shapes fit together.
    pub fn load(path: &Path) -> Result<Self, HeadError> {
        let bytes = std::fs::read(path).map_err(|e| HeadError::new(path, e.to_string()))?;
        let file = HeadFile::parse(path, &bytes, "router head")?;
        let bad = |m: String| file.error(m);
        let format = file.field("format")?;
        if format != ROUTER_FORMAT {
            return Err(bad(format!(
                "format {format:?} is not {ROUTER_FORMAT:?}; train it with `mom-router train-router`"
            )));
        }
        let features: Vec<String> = file.json("features")?;
        if features != ROUTER_FEATURES {
            return Err(bad(format!(
                "trained on features {features:?}, this build computes {ROUTER_FEATURES:?}; \
                 retrain it with `mom-router train-router`"
            )));
        }
        let names: Vec<String> = file.json("models")?;
        let kinds: Vec<String> = file.json("kinds")?;
        if kinds.is_empty() {
            return Err(bad(
                "a router head needs at least one request kind".to_owned()
            ));
        }
        let (_, probe) = file.f32("probe")?;
        let dense = |name: &str, outputs: usize, inputs: usize| -> Result<Dense, HeadError> {
            let (shape, weight) = file.f32(&format!("{name}.weight"))?;
            let (bias_shape, bias) = file.f32(&format!("{name}.bias"))?;
            if shape != [outputs, inputs] || bias_shape != [outputs] {
                return Err(bad(format!(
                    "{name} has shapes {shape:?} and {bias_shape:?}, expected \
                     [{outputs}, {inputs}] and [{outputs}]"
                )));
            }
            Ok(Dense {
                weight,
                bias,
                inputs,
            })
        };
        let kind = dense("kind", kinds.len(), kind_input_width(probe.len()))?;
        let inputs = crossed_width(kinds.len());
        if names.len() < 2 {
            return Err(bad("a router head needs at least two models".to_owned()));
        }
        let models = names
            .iter()
            .enumerate()
            .map(|(i, model)| {
                Ok(ModelHeads {
                    model: model.clone(),
                    correct: dense(&format!("models.{i}.correct"), 2, inputs)?,
                    cost: dense(&format!("models.{i}.cost"), 2, inputs)?,
                })
            })
            .collect::<Result<Vec<_>, HeadError>>()?;
        Ok(Self {
            kinds,
            kind,
            models,
            probe,
            encoder: file.field("encoder")?,
            encoder_sha256: file.field("encoderSha256")?,
        })
    }

    /// Writes the head file; `extra` adds metadata (the training report).
    pub fn save(&self, path: &Path, extra: &[(&str, String)]) -> Result<(), HeadError> {
        let mut buffers: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
        let mut push = |name: String, dense: &Dense| {
            buffers.push((
                format!("{name}.weight"),
                vec![dense.bias.len(), dense.inputs],
                f32s_to_le(&dense.weight),
            ));
            buffers.push((
                format!("{name}.bias"),
                vec![dense.bias.len()],
                f32s_to_le(&dense.bias),
            ));
        };
        push("kind".to_owned(), &self.kind);
        for (i, heads) in self.models.iter().enumerate() {
            push(format!("models.{i}.correct"), &heads.correct);
            push(format!("models.{i}.cost"), &heads.cost);
        }
        buffers.push((
            "probe".to_owned(),
            vec![self.probe.len()],
            f32s_to_le(&self.probe),
        ));
        let json = |names: &[&str]| serde_json::to_string(names).unwrap_or_default();
        let mut info: HashMap<String, String> = [
            ("format", ROUTER_FORMAT.to_owned()),
            ("task", "router".to_owned()),
            ("models", json(&self.model_names())),
            (
                "kinds",
                json(&self.kinds.iter().map(String::as_str).collect::<Vec<_>>()),
            ),
            ("features", json(&ROUTER_FEATURES)),
            ("encoder", self.encoder.clone()),
            ("encoderSha256", self.encoder_sha256.clone()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        info.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
        write_f32_tensors(path, &buffers, info)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two models whose predictions do not depend on the input: "small" is right with
    /// probability sigmoid(-1) in 100 ms, "large" with sigmoid(1) in 2 s.
    fn toy() -> RouterHead {
        let inputs = crossed_width(1);
        let constant = |bias: [f32; 2]| Dense {
            weight: vec![0.0; 2 * inputs],
            bias: bias.to_vec(),
            inputs,
        };
        let model = |name: &str, right: f32, latency_ms: f32, tokens: f32| ModelHeads {
            model: name.to_owned(),
            correct: constant([0.0, right]),
            cost: constant([latency_ms.ln(), tokens]),
        };
        RouterHead {
            kinds: vec!["any".to_owned()],
            kind: Dense {
                weight: vec![0.0; kind_input_width(2)],
                bias: vec![0.0],
                inputs: kind_input_width(2),
            },
            models: vec![
                model("small", -1.0, 100.0, 3.0),
                model("large", 1.0, 2000.0, 5.0),
            ],
            probe: vec![0.6, 0.8],
            encoder: "test".to_owned(),
            encoder_sha256: "00".to_owned(),
        }
    }

    #[test]
    fn predictions_round_trip_through_the_file() {
        let head = toy();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("router.safetensors");
        head.save(&path, &[("dataSha256", "ab".to_owned())])
            .unwrap();
        let loaded = RouterHead::load(&path).unwrap();
        assert_eq!(loaded, head);
        let input = loaded.input(&[0.6, 0.8], "What is 2 + 2? Reply with the number only.");
        assert_eq!(input.len(), crossed_width(1));
        assert_eq!(input[0], 1.0, "one kind: probability 1");
        let small = loaded.predict(0, &input).unwrap();
        let large = loaded.predict(1, &input).unwrap();
        // sigmoid(-1) and sigmoid(1); exp(ln 100) and exp(ln 2000).
        assert!((small.correct - 0.2689).abs() < 1e-3, "{small:?}");
        assert!((large.correct - 0.7311).abs() < 1e-3, "{large:?}");
        assert!((small.latency_ms - 100.0).abs() < 0.1, "{small:?}");
        assert!((large.latency_ms - 2000.0).abs() < 1.0, "{large:?}");
        assert!((small.completion_tokens - 19.09).abs() < 0.01, "{small:?}");
        assert!(loaded.predict(2, &input).is_none());
    }

    #[test]
    fn a_classifier_head_is_not_a_router_head() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("domain.safetensors");
        let head = super::super::Head {
            task: "domain".to_owned(),
            labels: vec!["a".into(), "b".into()],
            layers: vec![Dense {
                weight: vec![1.0, 0.0, 0.0, 1.0],
                bias: vec![0.0, 0.0],
                inputs: 2,
            }],
            probe: vec![0.6, 0.8],
            encoder: "test".to_owned(),
            encoder_sha256: "00".to_owned(),
        };
        head.save(&path, &[]).unwrap();
        let error = RouterHead::load(&path).unwrap_err().to_string();
        assert!(
            error.contains("no \"features\"") || error.contains("is not \"mom-router-router/2\""),
            "{error}"
        );
    }
}
