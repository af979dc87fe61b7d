//! Sequence-classification heads, reproduced per architecture as transformers'
//! `*ForSequenceClassification` computes them, with the labels and problem type of
//! config.json. Plain Rust: no pgrx here.

use std::collections::BTreeMap;

use candle_core::{Module, Tensor};
use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The classification fields of config.json (`transformers.PretrainedConfig`).
#[derive(Debug, Default, Deserialize)]
pub struct HeadConfig {
    #[serde(default)]
    pub architectures: Vec<String>,
    #[serde(default)]
    pub id2label: BTreeMap<String, String>,
    #[serde(default)]
    pub problem_type: Option<String>,
    /// sentence-transformers' CrossEncoder activation (`sentence_transformers.activation_fn`).
    #[serde(default)]
    pub sentence_transformers: Option<CrossEncoderConfig>,
    /// The same before sentence-transformers 4.
    #[serde(default)]
    pub sbert_ce_default_activation_function: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct CrossEncoderConfig {
    #[serde(default)]
    pub activation_fn: Option<String>,
}

impl HeadConfig {
    /// The `*ForSequenceClassification` architecture the checkpoint was saved as, if any.
    pub fn classification_architecture(&self) -> Option<&str> {
        self.architectures.iter().map(String::as_str).find(|a| a.ends_with("ForSequenceClassification"))
    }
}

/// How scores come from logits (`config.problem_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Problem {
    /// softmax over the labels
    SingleLabelClassification,
    /// a sigmoid per label
    MultiLabelClassification,
    /// one raw value (num_labels = 1)
    Regression,
}

const SUPPORTED: &str = "BertForSequenceClassification";

enum Head {
    /// BERT: the pooler (dense + tanh over [CLS], part of the backbone) then `classifier`.
    Bert { classifier: candle_nn::Linear },
}

pub struct Classifier {
    head: Head,
    pub architecture: String,
    pub labels: Vec<String>,
    pub problem: Problem,
    /// Whether `rerank` applies a sigmoid (sentence-transformers' CrossEncoder default for
    /// one label) or reports the raw logit (an Identity activation_fn in config.json).
    pub rerank_sigmoid: bool,
}

impl Classifier {
    /// Loads the head of `architecture` from the checkpoint's weights.
    pub fn load(vb: &VarBuilder, architecture: &str, cfg: &HeadConfig, hidden: usize) -> Result<Self> {
        let bad = |e: candle_core::Error| Error::invalid_file("model.safetensors", e);
        let (head, num_labels) = match architecture {
            "BertForSequenceClassification" => {
                let n = vb.get_unchecked("classifier.weight").map_err(bad)?.dim(0).map_err(bad)?;
                (
                    Head::Bert {
                        classifier: candle_nn::linear(hidden, n, vb.pp("classifier")).map_err(bad)?,
                    },
                    n,
                )
            }
            other => {
                return Err(Error::Unsupported {
                    what: "architecture",
                    value: other.into(),
                    path: "config.json".into(),
                    supported: SUPPORTED,
                })
            }
        };
        let labels = labels(cfg, num_labels)?;
        let problem = match (cfg.problem_type.as_deref(), num_labels) {
            (Some("multi_label_classification"), _) => Problem::MultiLabelClassification,
            (Some("regression"), _) | (None, 1) => Problem::Regression,
            (Some("single_label_classification") | None, _) => Problem::SingleLabelClassification,
            (Some(other), _) => {
                return Err(Error::Unsupported {
                    what: "problem_type",
                    value: other.into(),
                    path: "config.json".into(),
                    supported: "single_label_classification, multi_label_classification, regression",
                })
            }
        };
        let activation = cfg
            .sentence_transformers
            .as_ref()
            .and_then(|s| s.activation_fn.clone())
            .or_else(|| cfg.sbert_ce_default_activation_function.clone());
        let rerank_sigmoid = match activation.as_deref() {
            None => num_labels == 1,
            Some("torch.nn.modules.activation.Sigmoid") => true,
            Some("torch.nn.modules.linear.Identity") => false,
            Some(other) => {
                return Err(Error::Unsupported {
                    what: "cross-encoder activation_fn",
                    value: other.into(),
                    path: "config.json".into(),
                    supported: "torch.nn.modules.activation.Sigmoid, torch.nn.modules.linear.Identity",
                })
            }
        };
        Ok(Classifier { head, architecture: architecture.into(), labels, problem, rerank_sigmoid })
    }

    /// Logits [batch, num_labels] from the backbone's hidden states and pooler output.
    pub fn forward(&self, _hidden: &Tensor, pooler: Option<&Tensor>) -> candle_core::Result<Tensor> {
        match &self.head {
            Head::Bert { classifier } => {
                let pooled = pooler
                    .ok_or_else(|| candle_core::Error::Msg("BERT classifier needs the pooler".into()))?;
                classifier.forward(pooled)
            }
        }
    }

    /// Whether the head reads the backbone's pooler output.
    pub fn needs_pooler(&self) -> bool {
        matches!(self.head, Head::Bert { .. })
    }

    /// (label, score) best first: softmax, sigmoid or the raw value, per problem type.
    pub fn scores(&self, logits: &[f32]) -> Vec<(String, f32)> {
        let scores: Vec<f32> = match self.problem {
            Problem::SingleLabelClassification => {
                let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let exp: Vec<f32> = logits.iter().map(|x| (x - max).exp()).collect();
                let sum: f32 = exp.iter().sum();
                exp.iter().map(|e| e / sum).collect()
            }
            Problem::MultiLabelClassification => logits.iter().map(|x| sigmoid(*x)).collect(),
            Problem::Regression => logits.to_vec(),
        };
        let mut out: Vec<(String, f32)> = self.labels.iter().cloned().zip(scores).collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1));
        out
    }

    pub fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "sequence_classification",
            "architecture": self.architecture,
            "num_labels": self.labels.len(),
            "rerank_activation": if self.rerank_sigmoid { "sigmoid" } else { "identity" },
        })
    }
}

pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// Labels from id2label, one per output; without id2label, LABEL_i as transformers names them.
fn labels(cfg: &HeadConfig, num_labels: usize) -> Result<Vec<String>> {
    if cfg.id2label.is_empty() {
        return Ok((0..num_labels).map(|i| format!("LABEL_{i}")).collect());
    }
    (0..num_labels)
        .map(|i| {
            cfg.id2label.get(&i.to_string()).cloned().ok_or_else(|| {
                Error::invalid_file(
                    "config.json",
                    format!("id2label has no entry for label {i} of the classifier's {num_labels}"),
                )
            })
        })
        .collect()
}
