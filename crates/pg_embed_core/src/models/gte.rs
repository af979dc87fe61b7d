//! GTE (gte-multilingual-base, gte-base-en-v1.5, gte-large-en-v1.5,
//! snowflake-arctic-embed-m-v2.0): transformers' `GteModel`, jina-embeddings-v3's rotary
//! post-LayerNorm encoder ([`RopeEncoder`]) with a gated feed-forward (GELU on the gate,
//! gate and up without biases, down with one) and token type embeddings only when
//! `type_vocab_size` is above 0. Reads the config and weights transformers saves
//! (`model_type` "gte") and those Alibaba-NLP publishes (`model_type` "new": fused
//! `qkv_proj`, `up_gate_proj`, `attn_ln`, `mlp_ln`), which transformers maps to its own.

use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::checks::unsupported;
use super::jina_embeddings_v3::{self as jina, Defaults, Feedforward, Fields, Shape};
use crate::error::Result;

/// `transformers.GteConfig`'s defaults.
const GTE: Defaults = Defaults {
    vocab_size: 250048,
    hidden_size: 768,
    num_hidden_layers: 12,
    num_attention_heads: 12,
    intermediate_size: 3072,
    hidden_act: "gelu",
    max_position_embeddings: 8192,
    type_vocab_size: 1,
    layer_norm_eps: 1e-12,
    pad_token_id: 1,
    rope_theta: 160_000.0,
    rope_ntk: true,
    feedforward: Feedforward::Gated,
};

/// `transformers.GteConfig`, with the keys of Alibaba-NLP's `NewConfig`: the rotary
/// encoders' fields and settings of `NewConfig` that change the numbers, refused unless
/// they have the values every published checkpoint has.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    #[serde(flatten)]
    pub encoder: Fields,
    #[serde(default)]
    pub position_embedding_type: Option<String>,
    #[serde(default)]
    pub layer_norm_type: Option<String>,
    #[serde(default)]
    pub logn_attention_scale: Option<bool>,
}

impl Config {
    fn shape(&self) -> Result<Shape<'_>> {
        if let Some(t) = self.position_embedding_type.as_deref().filter(|t| *t != "rope") {
            return Err(unsupported("position_embedding_type", t, "rope"));
        }
        if let Some(t) = self.layer_norm_type.as_deref().filter(|t| *t != "layer_norm") {
            return Err(unsupported("layer_norm_type", t, "layer_norm"));
        }
        if self.logn_attention_scale == Some(true) {
            return Err(unsupported("logn_attention_scale", "true", "false"));
        }
        self.encoder.shape(&GTE)
    }
}

impl super::Config for Config {
    fn dims(&self) -> super::Dims {
        self.encoder.dims(&GTE)
    }
    fn fill_defaults(&mut self) {
        self.encoder.fill(&GTE);
    }
    fn default_pooling(&self) -> crate::pooling::PoolingMode {
        crate::pooling::PoolingMode::Cls
    }
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn super::Model>> {
        Ok(Box::new(jina::load(vb, &self.shape()?)?))
    }
}
