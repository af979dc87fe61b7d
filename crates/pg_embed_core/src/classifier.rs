//! Sequence-classification heads, reproduced per architecture as transformers'
//! `*ForSequenceClassification` computes them, with the labels and problem type of
//! config.json. Plain Rust: no pgrx here.

use std::collections::BTreeMap;

use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::layers::{Activation, Linear, Norm};
use crate::pooling::PoolingMode;

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
    /// DeBERTa-v2's ContextPooler activation (transformers' default "gelu").
    #[serde(default)]
    pub pooler_hidden_act: Option<String>,
    /// ModernBERT's head: "cls" or "mean" pooling (default "cls"), its activation (default
    /// "gelu") and the norm's epsilon and bias (defaults 1e-5, none). EuroBERT's: "bos",
    /// "mean" or "late" (the default).
    #[serde(default)]
    pub classifier_pooling: Option<String>,
    #[serde(default)]
    pub classifier_activation: Option<String>,
    #[serde(default)]
    pub norm_eps: Option<f64>,
    #[serde(default)]
    pub norm_bias: Option<bool>,
    /// The token GPT-2's and the decoders' heads look past when they read the last token.
    #[serde(default)]
    pub pad_token_id: Option<u32>,
    /// XLNet's SequenceSummary: which token ("last" by default), a projection or not, its
    /// activation (default "tanh" in XLNetConfig).
    #[serde(default)]
    pub summary_type: Option<String>,
    #[serde(default)]
    pub summary_use_proj: Option<bool>,
    #[serde(default)]
    pub summary_activation: Option<String>,
    /// Whether the LM head is the token embedding (a causal LM; transformers 5's default for
    /// the decoders pg_embed scores with is false).
    #[serde(default)]
    pub tie_word_embeddings: Option<bool>,
}

/// How a head is built: the token states it reads, its dense layer (weight name and
/// activation), the norm after it (name, epsilon, bias) and the output layer's name.
type Layout = (Pool, Option<(&'static str, Activation)>, Option<(&'static str, f64, bool)>, &'static str);

/// One `*ForSequenceClassification` class: the backbones (`model_type`) it sits on and its
/// layout, as transformers builds it.
struct HeadRow {
    architecture: &'static str,
    model_types: &'static [&'static str],
    layout: fn(&HeadConfig) -> Result<Layout>,
}

const HEADS: &[HeadRow] = &[
    // BERT: the backbone's pooler (dense + tanh over [CLS]), then the classifier.
    HeadRow {
        architecture: "BertForSequenceClassification",
        model_types: &["bert"],
        layout: |_| Ok((Pool::BackbonePooler, None, None, "classifier")),
    },
    // RoBERTa / XLM-R: dense, tanh, out_proj on <s>.
    HeadRow {
        architecture: "RobertaForSequenceClassification",
        model_types: &["roberta"],
        layout: |_| {
            Ok((Pool::First, Some(("classifier.dense", Activation::Tanh)), None, "classifier.out_proj"))
        },
    },
    HeadRow {
        architecture: "XLMRobertaForSequenceClassification",
        model_types: &["xlm-roberta"],
        layout: |_| {
            Ok((Pool::First, Some(("classifier.dense", Activation::Tanh)), None, "classifier.out_proj"))
        },
    },
    // ELECTRA: dense, GELU, out_proj on [CLS].
    HeadRow {
        architecture: "ElectraForSequenceClassification",
        model_types: &["electra"],
        layout: |_| {
            Ok((Pool::First, Some(("classifier.dense", Activation::Gelu)), None, "classifier.out_proj"))
        },
    },
    // DistilBERT: pre_classifier, ReLU, classifier on [CLS].
    HeadRow {
        architecture: "DistilBertForSequenceClassification",
        model_types: &["distilbert"],
        layout: |_| Ok((Pool::First, Some(("pre_classifier", Activation::Relu)), None, "classifier")),
    },
    // DeBERTa-v2: the ContextPooler (dense and its activation on [CLS]), classifier.
    // ViT: the classifier on the final-layernormed [CLS].
    HeadRow {
        architecture: "ViTForImageClassification",
        model_types: &["vit"],
        layout: |_| Ok((Pool::First, None, None, "classifier")),
    },
    // SigLIP and SigLIP 2: the classifier on the mean of the vision tower's layernormed
    // tokens (SigLIP 2's mean is over the image's own patches, its padding masked).
    HeadRow {
        architecture: "SiglipForImageClassification",
        model_types: &["siglip"],
        layout: |_| Ok((Pool::Mean, None, None, "classifier")),
    },
    HeadRow {
        architecture: "Siglip2ForImageClassification",
        model_types: &["siglip2"],
        layout: |_| Ok((Pool::Mean, None, None, "classifier")),
    },
    HeadRow {
        architecture: "DebertaV2ForSequenceClassification",
        model_types: &["deberta-v2"],
        layout: |c| {
            let activation = act("pooler_hidden_act", c.pooler_hidden_act.as_deref().unwrap_or("gelu"))?;
            Ok((Pool::First, Some(("pooler.dense", activation)), None, "classifier"))
        },
    },
    // GPT-2 and the decoders: `score` (no bias) on the last token that is not padding.
    HeadRow {
        architecture: "GPT2ForSequenceClassification",
        model_types: &["gpt2"],
        layout: |c| Ok((Pool::LastNonPadding(c.pad_token_id), None, None, "score")),
    },
    HeadRow {
        architecture: "Qwen2ForSequenceClassification",
        model_types: &["qwen2"],
        layout: |c| Ok((Pool::LastNonPadding(c.pad_token_id), None, None, "score")),
    },
    HeadRow {
        architecture: "Qwen3ForSequenceClassification",
        model_types: &["qwen3"],
        layout: |c| Ok((Pool::LastNonPadding(c.pad_token_id), None, None, "score")),
    },
    HeadRow {
        architecture: "MistralForSequenceClassification",
        model_types: &["mistral"],
        layout: |c| Ok((Pool::LastNonPadding(c.pad_token_id), None, None, "score")),
    },
    HeadRow {
        architecture: "LlamaForSequenceClassification",
        model_types: &["llama"],
        layout: |c| Ok((Pool::LastNonPadding(c.pad_token_id), None, None, "score")),
    },
    HeadRow {
        architecture: "Gemma2ForSequenceClassification",
        model_types: &["gemma2"],
        layout: |c| Ok((Pool::LastNonPadding(c.pad_token_id), None, None, "score")),
    },
    // EuroBERT: dense, GELU, classifier, on the first token, the mean, or every token with
    // the logits averaged ("late", the default).
    HeadRow {
        architecture: "EuroBertForSequenceClassification",
        model_types: &["eurobert"],
        layout: |c| {
            let pool = match c.classifier_pooling.as_deref().unwrap_or("late") {
                "bos" => Pool::First,
                "mean" => Pool::Mean,
                "late" => Pool::Late,
                other => {
                    return Err(Error::Unsupported {
                        what: "classifier_pooling",
                        value: other.into(),
                        path: "config.json".into(),
                        supported: "bos, mean, late",
                    })
                }
            };
            Ok((pool, Some(("dense", Activation::Gelu)), None, "classifier"))
        },
    },
    // GTE: BERT's head over GTE's pooler.
    HeadRow {
        architecture: "GteForSequenceClassification",
        model_types: &["gte", "new"],
        layout: |_| Ok((Pool::BackbonePooler, None, None, "classifier")),
    },
    // jina-embeddings-v3 and CamemBERT: XLM-RoBERTa's / RoBERTa's head.
    HeadRow {
        architecture: "JinaEmbeddingsV3ForSequenceClassification",
        model_types: &["jina_embeddings_v3"],
        layout: |_| {
            Ok((Pool::First, Some(("classifier.dense", Activation::Tanh)), None, "classifier.out_proj"))
        },
    },
    HeadRow {
        architecture: "CamembertForSequenceClassification",
        model_types: &["camembert"],
        layout: |_| {
            Ok((Pool::First, Some(("classifier.dense", Activation::Tanh)), None, "classifier.out_proj"))
        },
    },
    // XLNet: SequenceSummary (its token, projection and activation), then logits_proj.
    HeadRow {
        architecture: "XLNetForSequenceClassification",
        model_types: &["xlnet"],
        layout: sequence_summary,
    },
    // ModernBERT: cls or mean pooling, dense, activation, norm, classifier.
    HeadRow {
        architecture: "ModernBertForSequenceClassification",
        model_types: &["modernbert"],
        layout: |c| {
            let pool = match c.classifier_pooling.as_deref().unwrap_or("cls") {
                "cls" => Pool::First,
                "mean" => Pool::Mean,
                other => {
                    return Err(Error::Unsupported {
                        what: "classifier_pooling",
                        value: other.into(),
                        path: "config.json".into(),
                        supported: "cls, mean",
                    })
                }
            };
            let activation =
                act("classifier_activation", c.classifier_activation.as_deref().unwrap_or("gelu"))?;
            let norm = ("head.norm", c.norm_eps.unwrap_or(1e-5), c.norm_bias.unwrap_or(false));
            Ok((pool, Some(("head.dense", activation)), Some(norm), "classifier"))
        },
    },
];

/// XLNet's head: transformers' SequenceSummary over the token `summary_type` names (with no
/// `cls_index` given, "cls_index" is the last token), `summary.dense` and its activation
/// when `summary_use_proj`, then `logits_proj`.
fn sequence_summary(c: &HeadConfig) -> Result<Layout> {
    let unsupported = |what, value: &str, supported| Error::Unsupported {
        what,
        value: value.into(),
        path: "config.json".into(),
        supported,
    };
    let pool = match c.summary_type.as_deref().unwrap_or("last") {
        "last" | "cls_index" => Pool::Last,
        "first" => Pool::First,
        "mean" => Pool::Mean,
        other => return Err(unsupported("summary_type", other, "last, first, mean, cls_index")),
    };
    let activation = match c.summary_activation.as_deref() {
        None => Activation::Identity,
        Some(name) => act("summary_activation", name)?,
    };
    if !c.summary_use_proj.unwrap_or(true) {
        if activation != Activation::Identity {
            return Err(unsupported(
                "summary_use_proj",
                "false",
                "true, or false with no summary_activation",
            ));
        }
        return Ok((pool, None, None, "logits_proj"));
    }
    Ok((pool, Some(("sequence_summary.summary", activation)), None, "logits_proj"))
}

#[derive(Debug, Default, Deserialize)]
pub struct CrossEncoderConfig {
    #[serde(default)]
    pub activation_fn: Option<String>,
}

impl HeadConfig {
    /// The `*ForSequenceClassification` architecture the checkpoint was saved as, if any.
    pub fn classification_architecture(&self) -> Option<&str> {
        self.architectures
            .iter()
            .map(String::as_str)
            .find(|a| a.ends_with("ForSequenceClassification") || a.ends_with("ForImageClassification"))
    }
}

/// How scores come from logits (`config.problem_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Problem {
    /// softmax over the labels
    SingleLabelClassification,
    /// a sigmoid per label
    MultiLabelClassification,
    /// one raw value (num_labels = 1)
    Regression,
}

pub const SUPPORTED: &str = "BertForSequenceClassification, CamembertForSequenceClassification, \
DebertaV2ForSequenceClassification, DistilBertForSequenceClassification, ElectraForSequenceClassification, \
EuroBertForSequenceClassification, GPT2ForSequenceClassification, Gemma2ForSequenceClassification, \
GteForSequenceClassification, JinaEmbeddingsV3ForSequenceClassification, LlamaForSequenceClassification, \
MistralForSequenceClassification, ModernBertForSequenceClassification, Qwen2ForSequenceClassification, \
Qwen3ForSequenceClassification, RobertaForSequenceClassification, Siglip2ForImageClassification, SiglipForImageClassification, ViTForImageClassification, \
XLMRobertaForSequenceClassification, XLNetForSequenceClassification";

/// Which token states a head reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
enum Pool {
    /// The backbone's pooler output (BERT: dense + tanh over [CLS]).
    BackbonePooler,
    /// The first token ([CLS] / <s>).
    First,
    /// The attention-masked mean over tokens (ModernBERT's `classifier_pooling = "mean"`).
    Mean,
    /// The last token (XLNet's SequenceSummary: XLNet puts `<cls>` last).
    Last,
    /// The last token whose id is not the pad token (GPT-2 and the decoders; with no pad
    /// token, the last).
    LastNonPadding(Option<u32>),
    /// Every token through the head, then the mean of their logits (EuroBERT's
    /// `classifier_pooling = "late"`).
    Late,
}

/// A `*ForSequenceClassification` head: pool, then optionally dense -> activation -> norm,
/// then the output projection. Each architecture is one row of names in `Classifier::load`.
#[derive(serde::Serialize, serde::Deserialize)]
struct Head {
    pool: Pool,
    dense: Option<(Linear, Activation, Option<Norm>)>,
    out: Linear,
}

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Classifier {
    head: Head,
    pub architecture: String,
    pub labels: Vec<String>,
    pub problem: Problem,
    /// Whether `rerank` applies a sigmoid (sentence-transformers' CrossEncoder default for
    /// one label) or reports the raw logit (an Identity activation_fn in config.json).
    pub rerank_sigmoid: bool,
}

/// An activation named as transformers' ACT2FN names it in config.json (`what`).
fn act(what: &'static str, name: &str) -> Result<Activation> {
    Activation::from_hidden_act(name).ok_or_else(|| Error::Unsupported {
        what,
        value: name.into(),
        path: "config.json".into(),
        supported: Activation::HIDDEN_ACT_NAMES,
    })
}

/// A linear layer `name` whose output width the checkpoint decides; with a bias when the
/// checkpoint has one.
fn linear(vb: &VarBuilder, name: &str, in_features: usize) -> candle_core::Result<Linear> {
    let weight = vb.get_unchecked(&format!("{name}.weight"))?;
    let (out_features, found_in) = weight.dims2()?;
    if found_in != in_features {
        candle_core::bail!("{name}.weight has {found_in} input features, expected {in_features}");
    }
    let bias = vb
        .contains_tensor(&format!("{name}.bias"))
        .then(|| vb.get(out_features, &format!("{name}.bias")))
        .transpose()?;
    crate::weights::linear_of(&weight, bias.as_ref())
}

impl Classifier {
    /// Loads the head of `architecture` from the checkpoint's weights; `backbone` is the
    /// parsed config.json, which must be of the architecture's family.
    pub fn load(
        vb: &VarBuilder,
        architecture: &str,
        cfg: &HeadConfig,
        model_type: &str,
        hidden: usize,
    ) -> Result<Self> {
        let Some(row) = HEADS.iter().find(|r| r.architecture == architecture) else {
            return Err(Error::Unsupported {
                what: "architecture",
                value: architecture.into(),
                path: "config.json".into(),
                supported: SUPPORTED,
            });
        };
        if !row.model_types.contains(&model_type) {
            return Err(Error::invalid_file(
                "config.json",
                format!("architecture {architecture} does not match model_type \"{model_type}\""),
            ));
        }
        let (pool, dense, norm, out) = (row.layout)(cfg)?;
        let bad = |e: candle_core::Error| Error::invalid_file("model.safetensors", e);
        let dense = dense
            .map(|(name, activation)| -> candle_core::Result<_> {
                let layer = linear(vb, name, hidden)?;
                let width = layer.outputs();
                let norm = norm
                    .map(|(name, eps, bias)| crate::weights::layer_norm(&vb.pp(name), width, eps, bias))
                    .transpose()?;
                Ok((layer, activation, norm))
            })
            .transpose()
            .map_err(bad)?;
        let out_in = match &dense {
            Some((layer, _, _)) => layer.outputs(),
            None => hidden,
        };
        let out = linear(vb, out, out_in).map_err(bad)?;
        let num_labels = out.outputs();
        let head = Head { pool, dense, out };
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

    /// What the head reads of the backbone's token states, as a pooling mode: the pooler
    /// output, the first token or the mean.
    pub fn pooling(&self) -> PoolingMode {
        match self.head.pool {
            Pool::BackbonePooler => PoolingMode::Pooler,
            Pool::First => PoolingMode::Cls,
            Pool::Mean | Pool::Late => PoolingMode::Mean,
            Pool::Last | Pool::LastNonPadding(_) => PoolingMode::Lasttoken,
        }
    }

    /// Whether the head reads every token and averages their logits (`Pool::Late`):
    /// then [`Classifier::late_logits`] takes the hidden states instead of pooled rows.
    pub fn reads_every_token(&self) -> bool {
        self.head.pool == Pool::Late
    }

    /// Logits [num_labels] per sequence: the head over every token of `hidden` [tokens,
    /// width] (sequence i at tokens bounds[i]..bounds[i + 1]), then the mean of each
    /// sequence's token logits.
    pub fn late_logits(&self, hidden: &[f32], bounds: &[usize]) -> Vec<Vec<f32>> {
        let labels = self.num_labels().max(1);
        let per_token = self.forward(hidden);
        bounds
            .windows(2)
            .map(|w| {
                let mut sum = vec![0f32; labels];
                for row in per_token[w[0] * labels..w[1] * labels].chunks_exact(labels) {
                    sum.iter_mut().zip(row).for_each(|(s, x)| *s += x);
                }
                let n = (w[1] - w[0]).max(1) as f32;
                sum.iter().map(|s| s / n).collect()
            })
            .collect()
    }

    /// `Some(pad token)` when the head reads the last token that is not padding (see
    /// `Pool::LastNonPadding`).
    pub fn reads_last_non_padding(&self) -> Option<Option<u32>> {
        match self.head.pool {
            Pool::LastNonPadding(pad) => Some(pad),
            _ => None,
        }
    }

    /// Logits [rows, num_labels] from what the head reads ([rows, hidden], pooled as
    /// [`Classifier::pooling`] says), row-major.
    pub fn forward(&self, pooled: &[f32]) -> Vec<f32> {
        let head = &self.head;
        match &head.dense {
            Some((dense, activation, norm)) => {
                let mut x = dense.apply(pooled);
                activation.apply(&mut x);
                if let Some(norm) = norm {
                    norm.forward(&mut x);
                }
                head.out.apply(&x)
            }
            None => head.out.apply(pooled),
        }
    }

    /// Logits [num_labels] per pooled row (see [`Classifier::forward`]).
    pub fn logits(&self, pooled: &[Vec<f32>]) -> Vec<Vec<f32>> {
        self.forward(&pooled.concat()).chunks(self.num_labels().max(1)).map(<[f32]>::to_vec).collect()
    }

    pub fn num_labels(&self) -> usize {
        self.head.out.outputs()
    }

    /// Whether the head reads the backbone's pooler output.
    pub fn needs_pooler(&self) -> bool {
        self.head.pool == Pool::BackbonePooler
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
            "pooling": match self.head.pool {
                Pool::BackbonePooler => "pooler",
                Pool::First => "first token",
                Pool::Mean => "mean",
                Pool::Last => "last token",
                Pool::LastNonPadding(_) => "last non-padding token",
                Pool::Late => "every token, logits averaged",
            },
            "dense_activation": self.head.dense.as_ref().map(|(_, a, _)| a.name()),
            "norm": self.head.dense.as_ref().is_some_and(|(_, _, n)| n.is_some()),
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
