//! Qwen2 (gte-Qwen2; Qwen2 sequence classifiers): transformers' `Qwen2Model`, whose query,
//! key and value projections always carry biases and o_proj none, with a head width of
//! hidden / heads, on the rotary decoders' backbone (`decoder.rs`).

use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::checks::unsupported;
use super::decoder::{self, Defaults, Fields};
use crate::error::Result;

/// `transformers.Qwen2Config`'s defaults.
pub const QWEN2: Defaults = Defaults {
    vocab_size: 151936,
    hidden_size: 4096,
    intermediate_size: 22016,
    num_hidden_layers: 32,
    num_attention_heads: 32,
    num_key_value_heads: None,
    head_dim: None,
    activation: ("hidden_act", "silu"),
    max_position_embeddings: 32768,
    rms_norm_eps: 1e-6,
    attention_bias: None,
    mlp_bias: None,
    pad_token_id: None,
    rope_theta: 10_000.0,
};

/// `transformers.Qwen2Config`: the decoders' fields and the sliding-window switch.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    #[serde(flatten)]
    pub decoder: Fields,
    #[serde(default)]
    pub use_sliding_window: bool,
}

/// The backbone of Qwen2 and Qwen3: causal, every layer global. Sliding-window layers
/// (`use_sliding_window`, `layer_types`) are not implemented.
pub fn spec(fields: &Fields, d: &Defaults, use_sliding_window: bool) -> Result<decoder::Spec> {
    if use_sliding_window {
        return Err(unsupported("use_sliding_window", "true", "false"));
    }
    fields.full_attention_only()?;
    fields.spec(d)
}

impl super::Config for Config {
    fn dims(&self) -> super::Dims {
        self.decoder.dims(&QWEN2)
    }
    fn fill_defaults(&mut self) {
        self.decoder.fill(&QWEN2);
    }
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn super::Model>> {
        let spec = spec(&self.decoder, &QWEN2, self.use_sliding_window)?;
        Ok(Box::new(decoder::load(vb, &decoder::Spec { qkv_bias: true, o_bias: false, ..spec })?))
    }
}
