//! Gemma 2 (bge-multilingual-gemma2; Gemma 2 sequence classifiers): transformers'
//! `Gemma2Model` on the rotary decoders' backbone (`decoder.rs`): embeddings times
//! sqrt(hidden), RMSNorms that scale by 1 + weight, four norms per layer, GeGLU with
//! tanh-GELU, scores scaled by query_pre_attn_scalar^-0.5 and soft-capped by
//! `attn_logit_softcapping`, causal attention with sliding-window layers (every other one
//! by default, from the first) between global ones, one rotary base for both.

use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::checks::unsupported;
use super::decoder::{self, Defaults, Fields};
use crate::error::Result;

/// `transformers.Gemma2Config`'s defaults.
pub const GEMMA2: Defaults = Defaults {
    vocab_size: 256000,
    hidden_size: 2304,
    intermediate_size: 9216,
    num_hidden_layers: 26,
    num_attention_heads: 8,
    num_key_value_heads: Some(4),
    head_dim: Some(256),
    activation: ("hidden_activation", "gelu_pytorch_tanh"),
    max_position_embeddings: 8192,
    rms_norm_eps: 1e-6,
    attention_bias: Some(false),
    mlp_bias: None,
    pad_token_id: Some(0),
    rope_theta: 10_000.0,
};

/// `transformers.Gemma2Config`: the decoders' fields and Gemma's own.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    #[serde(flatten)]
    pub decoder: Fields,
    #[serde(default = "d::query_pre_attn_scalar")]
    pub query_pre_attn_scalar: f64,
    /// Null: no layer slides.
    #[serde(default = "d::sliding_window")]
    pub sliding_window: Option<usize>,
    #[serde(default = "d::attn_logit_softcapping")]
    pub attn_logit_softcapping: Option<f64>,
    /// The language-model head's cap: no part of the hidden states.
    #[serde(default)]
    pub final_logit_softcapping: Option<f64>,
    #[serde(default)]
    pub use_bidirectional_attention: Option<bool>,
}

mod d {
    pub fn query_pre_attn_scalar() -> f64 {
        256.0
    }
    pub fn sliding_window() -> Option<usize> {
        Some(4096)
    }
    pub fn attn_logit_softcapping() -> Option<f64> {
        Some(50.0)
    }
}

impl Config {
    fn spec(&self) -> Result<decoder::Spec> {
        if self.use_bidirectional_attention == Some(true) {
            return Err(unsupported("use_bidirectional_attention", "true", "null or false (causal Gemma 2)"));
        }
        let scale = decoder::gemma_scale(self.query_pre_attn_scalar)?;
        let window = decoder::causal_window(self.sliding_window)?;
        let spec = self.decoder.spec(&GEMMA2)?;
        let sliding = match window {
            // Which layers slide: `layer_types`, else layer i when i is even (transformers'
            // `(i + 1) % 2`); one rotary base for all.
            Some(w) => {
                let layers = self.decoder.sliding_layers(&GEMMA2, |i| (i + 1) % 2 == 1)?;
                Some((layers, w, spec.rope.clone()))
            }
            None => None,
        };
        Ok(decoder::Spec {
            sandwich: true,
            norm_plus_one: true,
            // transformers: a tensor of hidden_size ** 0.5 in the embeddings' dtype.
            embed_scale: Some((spec.hidden as f64).sqrt() as f32),
            scale: Some(scale),
            softcap: self.attn_logit_softcapping.map(|c| c as f32),
            sliding,
            ..spec
        })
    }
}

impl super::Config for Config {
    fn dims(&self) -> super::Dims {
        self.decoder.dims(&GEMMA2)
    }
    fn fill_defaults(&mut self) {
        self.decoder.fill(&GEMMA2);
    }
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn super::Model>> {
        Ok(Box::new(decoder::load(vb, &self.spec()?)?))
    }
}
