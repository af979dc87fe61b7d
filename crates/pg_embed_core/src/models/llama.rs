//! Llama (LLM2Vec-style and other Llama embedders; Llama sequence classifiers):
//! transformers' `LlamaModel` on the decoder family's backbone (`decoder.rs`): causal,
//! rotary, RMSNorm, SwiGLU, grouped-query attention, with optional biases on the attention
//! (`attention_bias`) and the MLP (`mlp_bias`). The config fields are shared with the
//! families built on Llama's (Mistral, EuroBERT), which differ in their defaults, their mask
//! and, for Mistral, a sliding window.

use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::decoder::{self, Spec};
use super::checks::unsupported;
use crate::error::Result;

/// The fields of `transformers.LlamaConfig` that Llama, Mistral and EuroBERT share. A field
/// missing from config.json takes the family's default ([`Defaults`]), as each family's
/// config class does.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Fields {
    #[serde(default)]
    pub vocab_size: Option<usize>,
    #[serde(default)]
    pub hidden_size: Option<usize>,
    #[serde(default)]
    pub intermediate_size: Option<usize>,
    #[serde(default)]
    pub num_hidden_layers: Option<usize>,
    #[serde(default)]
    pub num_attention_heads: Option<usize>,
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    #[serde(default)]
    pub head_dim: Option<usize>,
    #[serde(default)]
    pub hidden_act: Option<String>,
    #[serde(default)]
    pub max_position_embeddings: Option<usize>,
    #[serde(default)]
    pub rms_norm_eps: Option<f64>,
    #[serde(default)]
    pub rope_theta: Option<f64>,
    #[serde(default)]
    pub rope_scaling: Option<Value>,
    #[serde(default)]
    pub rope_parameters: Option<Value>,
    #[serde(default)]
    pub attention_bias: bool,
    #[serde(default)]
    pub mlp_bias: bool,
    #[serde(default)]
    pub pad_token_id: Option<u32>,
    /// Llama's tensor-parallel pretraining split: values other than 1 change nothing at
    /// inference in transformers 5 (the slices are summed back), so it is only recorded.
    #[serde(default)]
    pub pretraining_tp: Option<usize>,
}

/// A family's defaults for the fields config.json leaves out.
pub struct Defaults {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    /// None: as many as the query heads.
    pub num_key_value_heads: Option<usize>,
    pub max_position_embeddings: usize,
    pub rms_norm_eps: f64,
    pub pad_token_id: Option<u32>,
}

/// `transformers.LlamaConfig`'s defaults.
pub const LLAMA: Defaults = Defaults {
    vocab_size: 32000,
    hidden_size: 4096,
    intermediate_size: 11008,
    num_hidden_layers: 32,
    num_attention_heads: 32,
    num_key_value_heads: None,
    max_position_embeddings: 2048,
    rms_norm_eps: 1e-6,
    pad_token_id: None,
};

impl Fields {
    pub fn hidden(&self, d: &Defaults) -> usize {
        self.hidden_size.unwrap_or(d.hidden_size)
    }

    pub fn positions(&self, d: &Defaults) -> usize {
        self.max_position_embeddings.unwrap_or(d.max_position_embeddings)
    }

    pub fn vocab(&self, d: &Defaults) -> usize {
        self.vocab_size.unwrap_or(d.vocab_size)
    }

    pub fn pad(&self, d: &Defaults) -> u32 {
        self.pad_token_id.or(d.pad_token_id).unwrap_or(0)
    }

    /// The backbone: causal or bidirectional, every layer within `window` positions of
    /// each query when given (Mistral's sliding window, as transformers' mask counts it:
    /// the query and the window - 1 tokens before it).
    pub fn spec(&self, d: &Defaults, causal: bool, window: Option<usize>) -> Result<Spec> {
        let hidden = self.hidden(d);
        let heads = self.num_attention_heads.unwrap_or(d.num_attention_heads);
        let layers = self.num_hidden_layers.unwrap_or(d.num_hidden_layers);
        let theta =
            decoder::rope_theta(self.rope_parameters.as_ref(), self.rope_scaling.as_ref(), "full_attention", self.rope_theta, 10_000.0)?;
        if window == Some(0) {
            return Err(unsupported("sliding_window", "0", "a positive number of tokens, or null"));
        }
        Ok(Spec {
            vocab_size: self.vocab(d),
            hidden,
            intermediate: self.intermediate_size.unwrap_or(d.intermediate_size),
            layers,
            heads,
            kv_heads: self.num_key_value_heads.or(d.num_key_value_heads).unwrap_or(heads),
            head_dim: self.head_dim.unwrap_or(hidden.checked_div(heads).unwrap_or(0)),
            max_positions: self.positions(d),
            eps: self.rms_norm_eps.unwrap_or(d.rms_norm_eps),
            activation: super::checks::activation("hidden_act", self.hidden_act.as_deref().unwrap_or("silu"))?,
            qkv_bias: self.attention_bias,
            o_bias: self.attention_bias,
            mlp_bias: self.mlp_bias,
            qk_norms: false,
            sandwich: false,
            norm_plus_one: false,
            embed_scale: None,
            scale: None,
            softcap: None,
            causal,
            rope_theta: theta,
            sliding: window.map(|w| (vec![true; layers], w - 1, theta)),
        })
    }
}

/// `transformers.LlamaConfig`.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    #[serde(flatten)]
    pub llama: Fields,
}

impl super::Config for Config {
    fn hidden_size(&self) -> usize {
        self.llama.hidden(&LLAMA)
    }
    fn max_position_embeddings(&self) -> usize {
        self.llama.positions(&LLAMA)
    }
    fn vocab_size(&self) -> usize {
        self.llama.vocab(&LLAMA)
    }
    fn pad_token_id(&self) -> u32 {
        self.llama.pad(&LLAMA)
    }
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn super::Model>> {
        Ok(Box::new(decoder::load(vb, &self.llama.spec(&LLAMA, true, None)?)?))
    }
    fn restore(&self, prepared: serde_json::Value) -> Result<Box<dyn super::Model>> {
        super::restore::<decoder::Model>(prepared)
    }
}
