//! Gemma 2 (bge-multilingual-gemma2; Gemma 2 sequence classifiers): transformers'
//! `Gemma2Model` on the decoder family's backbone (`decoder.rs`): embeddings times
//! sqrt(hidden), RMSNorms that scale by 1 + weight, four norms per layer, GeGLU with
//! tanh-GELU, scores scaled by query_pre_attn_scalar^-0.5 and soft-capped by
//! `attn_logit_softcapping`, causal attention with sliding-window layers (every other one
//! by default, from the first) between global ones, one rotary base for both.

use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::decoder;
use super::checks::unsupported;
use crate::error::Result;

/// `transformers.Gemma2Config`; defaults are transformers' defaults.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    #[serde(default = "d::vocab_size")]
    pub vocab_size: usize,
    #[serde(default = "d::hidden_size")]
    pub hidden_size: usize,
    #[serde(default = "d::intermediate_size")]
    pub intermediate_size: usize,
    #[serde(default = "d::num_hidden_layers")]
    pub num_hidden_layers: usize,
    #[serde(default = "d::num_attention_heads")]
    pub num_attention_heads: usize,
    #[serde(default = "d::num_key_value_heads")]
    pub num_key_value_heads: usize,
    #[serde(default = "d::head_dim")]
    pub head_dim: usize,
    #[serde(default = "d::gelu_tanh")]
    pub hidden_activation: String,
    #[serde(default = "d::max_position_embeddings")]
    pub max_position_embeddings: usize,
    #[serde(default = "d::rms_norm_eps")]
    pub rms_norm_eps: f64,
    #[serde(default)]
    pub attention_bias: bool,
    #[serde(default = "d::query_pre_attn_scalar")]
    pub query_pre_attn_scalar: f64,
    /// Null: no layer slides.
    #[serde(default = "d::sliding_window")]
    pub sliding_window: Option<usize>,
    #[serde(default)]
    pub layer_types: Option<Vec<String>>,
    #[serde(default = "d::attn_logit_softcapping")]
    pub attn_logit_softcapping: Option<f64>,
    /// The language-model head's cap: no part of the hidden states.
    #[serde(default)]
    pub final_logit_softcapping: Option<f64>,
    #[serde(default)]
    pub use_bidirectional_attention: Option<bool>,
    #[serde(default)]
    pub rope_parameters: Option<Value>,
    #[serde(default)]
    pub rope_theta: Option<f64>,
    #[serde(default)]
    pub rope_scaling: Option<Value>,
    #[serde(default = "d::pad_token_id")]
    pub pad_token_id: u32,
}

mod d {
    pub fn vocab_size() -> usize {
        256000
    }
    pub fn hidden_size() -> usize {
        2304
    }
    pub fn intermediate_size() -> usize {
        9216
    }
    pub fn num_hidden_layers() -> usize {
        26
    }
    pub fn num_attention_heads() -> usize {
        8
    }
    pub fn num_key_value_heads() -> usize {
        4
    }
    pub fn head_dim() -> usize {
        256
    }
    pub fn gelu_tanh() -> String {
        "gelu_pytorch_tanh".into()
    }
    pub fn max_position_embeddings() -> usize {
        8192
    }
    pub fn rms_norm_eps() -> f64 {
        1e-6
    }
    pub fn query_pre_attn_scalar() -> f64 {
        256.0
    }
    pub fn sliding_window() -> Option<usize> {
        Some(4096)
    }
    pub fn attn_logit_softcapping() -> Option<f64> {
        Some(50.0)
    }
    pub fn pad_token_id() -> u32 {
        0
    }
}

impl Config {
    /// Which layers slide: `layer_types`, else layer i when i is even (transformers'
    /// `(i + 1) % 2`).
    fn sliding_layers(&self) -> Result<Vec<bool>> {
        let Some(types) = &self.layer_types else {
            return Ok((0..self.num_hidden_layers).map(|i| (i + 1) % 2 == 1).collect());
        };
        if types.len() != self.num_hidden_layers {
            return Err(unsupported(
                "layer_types",
                &format!("{} entries for {} layers", types.len(), self.num_hidden_layers),
                "one entry per layer",
            ));
        }
        types
            .iter()
            .map(|t| match t.as_str() {
                "sliding_attention" => Ok(true),
                "full_attention" => Ok(false),
                other => Err(unsupported("layer_types", other, "sliding_attention, full_attention")),
            })
            .collect()
    }

    fn spec(&self) -> Result<decoder::Spec> {
        if self.use_bidirectional_attention == Some(true) {
            return Err(unsupported("use_bidirectional_attention", "true", "null or false (causal Gemma 2)"));
        }
        if self.query_pre_attn_scalar.is_nan() || self.query_pre_attn_scalar <= 0.0 {
            return Err(unsupported(
                "query_pre_attn_scalar",
                &self.query_pre_attn_scalar.to_string(),
                "a positive number",
            ));
        }
        if self.sliding_window == Some(0) {
            return Err(unsupported("sliding_window", "0", "a positive number of tokens, or null"));
        }
        let theta = decoder::rope_theta(
            self.rope_parameters.as_ref(),
            self.rope_scaling.as_ref(),
            "full_attention",
            self.rope_theta,
            10_000.0,
        )?;
        let sliding = match self.sliding_window {
            // A causal window of w: the query and the w - 1 tokens before it.
            Some(w) => Some((self.sliding_layers()?, w - 1, theta)),
            None => None,
        };
        Ok(decoder::Spec {
            vocab_size: self.vocab_size,
            hidden: self.hidden_size,
            intermediate: self.intermediate_size,
            layers: self.num_hidden_layers,
            heads: self.num_attention_heads,
            kv_heads: self.num_key_value_heads,
            head_dim: self.head_dim,
            max_positions: self.max_position_embeddings,
            eps: self.rms_norm_eps,
            activation: super::checks::activation("hidden_activation", &self.hidden_activation)?,
            qkv_bias: self.attention_bias,
            o_bias: self.attention_bias,
            mlp_bias: false,
            qk_norms: false,
            sandwich: true,
            norm_plus_one: true,
            // transformers: a tensor of hidden_size ** 0.5 in the embeddings' dtype.
            embed_scale: Some((self.hidden_size as f64).sqrt() as f32),
            scale: Some(self.query_pre_attn_scalar.powf(-0.5) as f32),
            softcap: self.attn_logit_softcapping.map(|c| c as f32),
            causal: true,
            rope_theta: theta,
            sliding,
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
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn super::Model>> {
        Ok(Box::new(decoder::load(vb, &self.spec()?)?))
    }
    fn restore(&self, prepared: serde_json::Value) -> Result<Box<dyn super::Model>> {
        super::restore::<decoder::Model>(prepared)
    }
}
