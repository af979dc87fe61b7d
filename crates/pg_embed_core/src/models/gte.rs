//! GTE (gte-multilingual-base, gte-base-en-v1.5, gte-large-en-v1.5,
//! snowflake-arctic-embed-m-v2.0): transformers' `GteModel`, jina-embeddings-v3's rotary
//! post-LayerNorm encoder ([`RopeEncoder`]) with a gated feed-forward (GELU on the gate,
//! gate and up without biases, down with one) and token type embeddings only when
//! `type_vocab_size` is above 0. Reads the config and weights transformers saves
//! (`model_type` "gte") and those Alibaba-NLP publishes (`model_type` "new": fused
//! `qkv_proj`, `up_gate_proj`, `attn_ln`, `mlp_ln`), which transformers maps to its own.

use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::checks::unsupported;
use super::jina_embeddings_v3::{self as jina, Feedforward, RopeEncoder, Shape};
use crate::error::Result;

/// `transformers.GteConfig`, with the keys of Alibaba-NLP's `NewConfig`; defaults are
/// transformers' defaults.
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
    #[serde(default = "d::pad_token_id")]
    pub pad_token_id: u32,
    #[serde(default)]
    pub rope_parameters: Option<Value>,
    #[serde(default)]
    pub rope_theta: Option<f64>,
    #[serde(default)]
    pub rope_scaling: Option<Value>,
    /// `NewConfig` settings that change the numbers: refused unless they have the values
    /// every published checkpoint has.
    #[serde(default)]
    pub position_embedding_type: Option<String>,
    #[serde(default)]
    pub layer_norm_type: Option<String>,
    #[serde(default)]
    pub logn_attention_scale: Option<bool>,
}

mod d {
    pub fn vocab_size() -> usize {
        250048
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
        8192
    }
    pub fn type_vocab_size() -> usize {
        1
    }
    pub fn layer_norm_eps() -> f64 {
        1e-12
    }
    pub fn pad_token_id() -> u32 {
        1
    }
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
        Ok(Shape {
            vocab_size: self.vocab_size,
            hidden: self.hidden_size,
            layers: self.num_hidden_layers,
            heads: self.num_attention_heads,
            intermediate: self.intermediate_size,
            type_vocab_size: self.type_vocab_size,
            eps: self.layer_norm_eps,
            hidden_act: &self.hidden_act,
            max_positions: self.max_position_embeddings,
            rope_theta: super::decoder::rope_theta(
                self.rope_parameters.as_ref(),
                self.rope_scaling.as_ref(),
                "full_attention",
                self.rope_theta,
                160_000.0,
            )?,
            feedforward: Feedforward::Gated,
        })
    }
}

impl super::Config for Config {
    fn hidden_size(&self) -> usize {
        self.hidden_size
    }
    fn max_position_embeddings(&self) -> usize {
        self.max_position_embeddings
    }
    fn vocab_size(&self) -> usize {
        self.vocab_size
    }
    fn pad_token_id(&self) -> u32 {
        self.pad_token_id
    }
    fn default_pooling(&self) -> crate::pooling::PoolingMode {
        crate::pooling::PoolingMode::Cls
    }
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn super::Model>> {
        Ok(Box::new(jina::load(vb, &self.shape()?)?))
    }
    fn restore(&self, prepared: serde_json::Value) -> Result<Box<dyn super::Model>> {
        super::restore::<RopeEncoder>(prepared)
    }
}
