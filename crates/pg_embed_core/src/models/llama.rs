//! Llama (LLM2Vec-style and other Llama embedders; Llama sequence classifiers):
//! transformers' `LlamaModel` on the rotary decoders' backbone (`decoder.rs`): causal,
//! rotary, RMSNorm, SwiGLU, grouped-query attention, with optional biases on the attention
//! (`attention_bias`) and the MLP (`mlp_bias`). The families built on Llama's (Mistral,
//! EuroBERT) differ in their defaults, their mask and, for Mistral, a sliding window.

use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::decoder::{self, Defaults, Fields};
use crate::error::Result;

/// `transformers.LlamaConfig`'s defaults.
pub const LLAMA: Defaults = Defaults {
    vocab_size: 32000,
    hidden_size: 4096,
    intermediate_size: 11008,
    num_hidden_layers: 32,
    num_attention_heads: 32,
    num_key_value_heads: None,
    head_dim: None,
    activation: ("hidden_act", "silu"),
    max_position_embeddings: 2048,
    rms_norm_eps: 1e-6,
    attention_bias: Some(false),
    mlp_bias: Some(false),
    pad_token_id: None,
    rope_theta: 10_000.0,
};

/// `transformers.LlamaConfig`.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    #[serde(flatten)]
    pub decoder: Fields,
    /// Llama's tensor-parallel pretraining split: values other than 1 change nothing at
    /// inference in transformers 5 (the slices are summed back), so it is only recorded.
    #[serde(default)]
    pub pretraining_tp: Option<usize>,
}

impl super::Config for Config {
    fn dims(&self) -> super::Dims {
        self.decoder.dims(&LLAMA)
    }
    fn fill_defaults(&mut self) {
        self.decoder.fill(&LLAMA);
    }
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn super::Model>> {
        Ok(Box::new(decoder::load(vb, &self.decoder.spec(&LLAMA)?)?))
    }
}
