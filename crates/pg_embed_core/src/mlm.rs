//! Masked-language-model heads, reproduced per architecture as transformers'
//! `*ForMaskedLM` computes them: a dense transform, its activation and a LayerNorm, then
//! the decoder onto the vocabulary (tied to the input embedding unless
//! `tie_word_embeddings` is false) plus its bias. SPLADE pools their logits
//! (see [`crate::sparse`]). Plain Rust: no pgrx here.
//!
//! One row per backbone `model_type`: BERT (`cls.predictions`, `hidden_act`), DistilBERT
//! (`vocab_transform`, `activation`), ModernBERT (`head`, `classifier_activation`, optional
//! biases), RoBERTa and XLM-RoBERTa (`lm_head`, always the exact GELU). The head's tensors
//! sit at the checkpoint's top level; a tied decoder reads the input embedding under the
//! backbone's prefix (`bert.`, `roberta.`, ...) or, failing that, without it.

use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::layers::{Activation, Linear, Norm};

/// The fields of config.json the heads read (transformers' names and defaults).
#[derive(Debug, Deserialize)]
pub struct MlmConfig {
    pub model_type: String,
    pub vocab_size: usize,
    #[serde(alias = "dim")]
    pub hidden_size: usize,
    #[serde(default = "yes")]
    pub tie_word_embeddings: bool,
    /// BERT's transform activation.
    pub hidden_act: Option<String>,
    /// DistilBERT's.
    pub activation: Option<String>,
    /// ModernBERT's head activation, dense bias, norm and decoder bias.
    pub classifier_activation: Option<String>,
    pub classifier_bias: Option<bool>,
    pub norm_eps: Option<f64>,
    pub norm_bias: Option<bool>,
    pub decoder_bias: Option<bool>,
    pub layer_norm_eps: Option<f64>,
}

fn yes() -> bool {
    true
}

/// Where one architecture keeps its head, and how it computes.
struct Layout {
    /// The transform's dense layer and whether it has a bias.
    dense: (&'static str, bool),
    activation: Activation,
    /// The LayerNorm: name, epsilon, bias.
    norm: (&'static str, f64, bool),
    /// The untied decoder's weight.
    decoder: &'static str,
    /// The input embedding a tied decoder reads (with and without the backbone's prefix).
    embedding: [&'static str; 2],
    /// The decoder's bias, by the names checkpoints use; None: no bias.
    bias: Option<&'static [&'static str]>,
}

/// One `*ForMaskedLM` class per backbone `model_type`.
struct Row {
    model_type: &'static str,
    architecture: &'static str,
    layout: fn(&MlmConfig) -> Result<Layout>,
}

const HEADS: &[Row] = &[
    // BERT: cls.predictions.transform (dense, hidden_act, LayerNorm), decoder + bias.
    Row {
        model_type: "bert",
        architecture: "BertForMaskedLM",
        layout: |c| {
            Ok(Layout {
                dense: ("cls.predictions.transform.dense", true),
                activation: act("hidden_act", c.hidden_act.as_deref().unwrap_or("gelu"))?,
                norm: ("cls.predictions.transform.LayerNorm", c.layer_norm_eps.unwrap_or(1e-12), true),
                decoder: "cls.predictions.decoder.weight",
                embedding: ["bert.embeddings.word_embeddings.weight", "embeddings.word_embeddings.weight"],
                // transformers 5 keeps decoder.bias (what the forward adds) and ties it to
                // `bias` in a tied checkpoint, which then stores only `bias`.
                bias: Some(&["cls.predictions.decoder.bias", "cls.predictions.bias"]),
            })
        },
    },
    // DistilBERT: vocab_transform, activation, vocab_layer_norm (eps 1e-12), vocab_projector.
    Row {
        model_type: "distilbert",
        architecture: "DistilBertForMaskedLM",
        layout: |c| {
            Ok(Layout {
                dense: ("vocab_transform", true),
                activation: act("activation", c.activation.as_deref().unwrap_or("gelu"))?,
                norm: ("vocab_layer_norm", 1e-12, true),
                decoder: "vocab_projector.weight",
                embedding: ["distilbert.embeddings.word_embeddings.weight", "embeddings.word_embeddings.weight"],
                bias: Some(&["vocab_projector.bias"]),
            })
        },
    },
    // ModernBERT: head (dense, classifier_activation, norm), decoder (+ bias if decoder_bias).
    Row {
        model_type: "modernbert",
        architecture: "ModernBertForMaskedLM",
        layout: |c| {
            Ok(Layout {
                dense: ("head.dense", c.classifier_bias.unwrap_or(false)),
                activation: act("classifier_activation", c.classifier_activation.as_deref().unwrap_or("gelu"))?,
                norm: ("head.norm", c.norm_eps.unwrap_or(1e-5), c.norm_bias.unwrap_or(false)),
                decoder: "decoder.weight",
                embedding: ["model.embeddings.tok_embeddings.weight", "embeddings.tok_embeddings.weight"],
                bias: c.decoder_bias.unwrap_or(true).then_some(&["decoder.bias"][..]),
            })
        },
    },
    // RoBERTa and XLM-RoBERTa: lm_head (dense, gelu, layer_norm), decoder + bias.
    Row { model_type: "roberta", architecture: "RobertaForMaskedLM", layout: roberta },
    Row { model_type: "xlm-roberta", architecture: "XLMRobertaForMaskedLM", layout: roberta },
];

const SUPPORTED: &str =
    "BertForMaskedLM, DistilBertForMaskedLM, ModernBertForMaskedLM, RobertaForMaskedLM, XLMRobertaForMaskedLM";

/// RobertaLMHead and XLMRobertaLMHead, which compute alike. Their activation is always the
/// exact (erf) GELU: transformers calls `gelu` there whatever `hidden_act` says (that one
/// is the backbone's).
fn roberta(c: &MlmConfig) -> Result<Layout> {
    Ok(Layout {
        dense: ("lm_head.dense", true),
        activation: Activation::Gelu,
        norm: ("lm_head.layer_norm", c.layer_norm_eps.unwrap_or(1e-12), true),
        decoder: "lm_head.decoder.weight",
        embedding: ["roberta.embeddings.word_embeddings.weight", "embeddings.word_embeddings.weight"],
        // The forward adds decoder.bias. transformers 5 ties it to `lm_head.bias` when the
        // embeddings are tied, and a tied checkpoint then stores only `lm_head.bias`; an
        // untied one stores both, and `lm_head.bias` is then unused. (Checkpoints of
        // transformers 4, where the two were always one parameter, may store only
        // `lm_head.bias` even untied: it is what the model was trained with.)
        bias: Some(&["lm_head.decoder.bias", "lm_head.bias"]),
    })
}

fn act(field: &'static str, name: &str) -> Result<Activation> {
    Activation::from_hidden_act(name).ok_or_else(|| Error::Unsupported {
        what: field,
        value: name.into(),
        path: "config.json".into(),
        supported: "gelu, gelu_new, relu, silu, tanh and the other activations of the backbones",
    })
}

/// A masked-language-model head: logits over the vocabulary for each token's hidden state.
#[derive(Serialize, Deserialize)]
pub struct MlmHead {
    architecture: String,
    transform: Linear,
    activation: Activation,
    norm: Norm,
    decoder: Linear,
}

impl MlmHead {
    /// The head of a `*ForMaskedLM` checkpoint (`vb`: its tensors, unprefixed).
    pub fn load(vb: &VarBuilder, config: &MlmConfig) -> Result<Self> {
        let Some(row) = HEADS.iter().find(|r| r.model_type == config.model_type) else {
            return Err(Error::Unsupported {
                what: "masked-language-model head for model_type",
                value: config.model_type.clone(),
                path: "config.json".into(),
                supported: SUPPORTED,
            });
        };
        let l = (row.layout)(config)?;
        let (h, v) = (config.hidden_size, config.vocab_size);
        let missing = |name: &str| {
            Error::invalid_file(
                "model.safetensors",
                format!("{} has no {name}: not a {} checkpoint", config.model_type, row.architecture),
            )
        };
        if !vb.contains_tensor(&format!("{}.weight", l.dense.0)) {
            return Err(missing(&format!("{}.weight", l.dense.0)));
        }
        let bad = |e: candle_core::Error| Error::invalid_file("model.safetensors", e);
        let transform = crate::weights::torch_linear(&vb.pp(l.dense.0), h, h, l.dense.1).map_err(bad)?;
        let norm = crate::weights::layer_norm(&vb.pp(l.norm.0), h, l.norm.1, l.norm.2).map_err(bad)?;
        let decoder_weight = if config.tie_word_embeddings {
            let Some(name) = l.embedding.iter().find(|n| vb.contains_tensor(n)) else {
                return Err(missing(l.embedding[0]));
            };
            vb.get((v, h), name).map_err(bad)?
        } else {
            if !vb.contains_tensor(l.decoder) {
                return Err(missing(l.decoder));
            }
            vb.get((v, h), l.decoder).map_err(bad)?
        };
        let bias = match l.bias {
            None => None,
            Some(names) => match names.iter().find(|n| vb.contains_tensor(n)) {
                Some(name) => Some(vb.get(v, name).map_err(bad)?),
                None => return Err(missing(names[0])),
            },
        };
        let decoder = crate::weights::linear_of(&decoder_weight, bias.as_ref()).map_err(bad)?;
        Ok(MlmHead { architecture: row.architecture.into(), transform, activation: l.activation, norm, decoder })
    }

    /// The vocabulary size: the logits' width.
    pub fn vocab_size(&self) -> usize {
        self.decoder.outputs()
    }

    /// Logits [rows, vocab] of hidden states [rows, hidden].
    pub fn logits(&self, hidden: &[f32]) -> Vec<f32> {
        let mut x = self.transform.apply(hidden);
        self.activation.apply(&mut x);
        self.norm.forward(&mut x);
        self.decoder.apply(&x)
    }

    pub fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "architecture": self.architecture,
            "activation": self.activation.name(),
            "vocab_size": self.vocab_size(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(config: serde_json::Value) -> Layout {
        let c: MlmConfig = serde_json::from_value(config).unwrap();
        let row = HEADS.iter().find(|r| r.model_type == c.model_type).unwrap();
        (row.layout)(&c).unwrap()
    }

    #[test]
    fn roberta_heads_use_the_exact_gelu_whatever_hidden_act_says() {
        for model_type in ["roberta", "xlm-roberta"] {
            for hidden_act in ["gelu", "gelu_new", "relu"] {
                let config = serde_json::json!({"model_type": model_type, "vocab_size": 10, "hidden_size": 4,
                                                "hidden_act": hidden_act, "layer_norm_eps": 1e-5});
                let l = layout(config);
                assert_eq!(l.activation, Activation::Gelu, "{model_type} with hidden_act {hidden_act}");
                assert_eq!(l.dense, ("lm_head.dense", true));
                assert_eq!(l.norm, ("lm_head.layer_norm", 1e-5, true));
                // The bias the forward adds first; the tied checkpoint's only one second.
                assert_eq!(l.bias, Some(&["lm_head.decoder.bias", "lm_head.bias"][..]));
            }
            let l = layout(serde_json::json!({"model_type": model_type, "vocab_size": 10, "hidden_size": 4}));
            assert_eq!(l.norm.1, 1e-12, "transformers' default layer_norm_eps");
            assert_eq!(l.embedding[0], "roberta.embeddings.word_embeddings.weight");
        }
    }
}
