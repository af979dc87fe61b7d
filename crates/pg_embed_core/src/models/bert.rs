//! BERT encoder (MiniLM, bge, e5, all-MiniLM-*): the shared BERT-family encoder with
//! absolute positions and token types, and BERT's pooler.

use candle_core::Tensor;
use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::encoder::{bad_weights, unsupported, with_prefix, Encoder, Positions, Spec};
use crate::error::Result;

/// `transformers.BertConfig`
/// (https://huggingface.co/docs/transformers/model_doc/bert#transformers.BertConfig);
/// defaults are transformers' defaults.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    #[serde(default = "d::vocab_size")]
    pub vocab_size: usize,
    #[serde(default = "d::hidden_size")]
    pub hidden_size: usize,
    #[serde(default = "d::num_hidden_layers")]
    pub num_hidden_layers: usize,
    #[serde(default = "d::num_attention_heads")]
    pub num_attention_heads: usize,
    #[serde(default = "d::intermediate_size")]
    pub intermediate_size: usize,
    #[serde(default = "d::hidden_act")]
    pub hidden_act: String,
    #[serde(default = "d::max_position_embeddings")]
    pub max_position_embeddings: usize,
    #[serde(default = "d::type_vocab_size")]
    pub type_vocab_size: usize,
    #[serde(default = "d::layer_norm_eps")]
    pub layer_norm_eps: f64,
    #[serde(default)]
    pub pad_token_id: usize,
    #[serde(default = "d::position_embedding_type")]
    pub position_embedding_type: String,
}

mod d {
    pub fn vocab_size() -> usize {
        30522
    }
    pub fn hidden_size() -> usize {
        768
    }
    pub fn num_hidden_layers() -> usize {
        12
    }
    pub fn num_attention_heads() -> usize {
        12
    }
    pub fn intermediate_size() -> usize {
        3072
    }
    pub fn hidden_act() -> String {
        "gelu".into()
    }
    pub fn max_position_embeddings() -> usize {
        512
    }
    pub fn type_vocab_size() -> usize {
        2
    }
    pub fn layer_norm_eps() -> f64 {
        1e-12
    }
    pub fn position_embedding_type() -> String {
        "absolute".into()
    }
}

pub struct Model {
    encoder: Encoder,
    /// `BertPooler` (dense + tanh over [CLS]), when the checkpoint carries one.
    pooler: Option<candle_nn::Linear>,
}

impl Config {
    /// The shared encoder's settings for a config of the BERT family (RoBERTa and ELECTRA
    /// configs carry the same fields).
    pub fn spec(&self, embedding_size: usize, positions: Positions) -> Result<Spec<'_>> {
        if self.position_embedding_type != "absolute" {
            return Err(unsupported("position_embedding_type", &self.position_embedding_type, "absolute"));
        }
        Ok(Spec {
            vocab_size: self.vocab_size,
            embedding_size,
            hidden_size: self.hidden_size,
            num_hidden_layers: self.num_hidden_layers,
            num_attention_heads: self.num_attention_heads,
            intermediate_size: self.intermediate_size,
            hidden_act: &self.hidden_act,
            max_position_embeddings: self.max_position_embeddings,
            type_vocab_size: self.type_vocab_size,
            layer_norm_eps: self.layer_norm_eps,
            positions,
        })
    }
}

pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Model> {
    let vb = with_prefix(vb, &["", "bert."], "embeddings.word_embeddings.weight");
    let encoder = Encoder::load(vb.clone(), &cfg.spec(cfg.hidden_size, Positions::Absolute)?)?;
    let pooler = vb
        .contains_tensor("pooler.dense.weight")
        .then(|| candle_nn::linear(cfg.hidden_size, cfg.hidden_size, vb.pp("pooler.dense")))
        .transpose()
        .map_err(bad_weights)?;
    Ok(Model { encoder, pooler })
}

impl Model {
    pub fn forward(&self, ids: &Tensor, type_ids: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
        self.encoder.forward(ids, type_ids, mask)
    }

    pub fn has_pooler(&self) -> bool {
        self.pooler.is_some()
    }

    /// transformers' `BertPooler`: tanh(dense(hidden[:, 0])) -> [batch, hidden].
    pub fn pooler(&self, hidden: &Tensor) -> candle_core::Result<Option<Tensor>> {
        use candle_core::{IndexOp, Module};
        self.pooler.as_ref().map(|dense| dense.forward(&hidden.i((.., 0))?)?.tanh()).transpose()
    }
}
