//! Gemma 3's text model (EmbeddingGemma): transformers' `Gemma3TextModel`, on the decoder
//! family's backbone (`decoder.rs`): embeddings times sqrt(hidden), RMSNorms that scale by
//! 1 + weight, four norms per layer (the attention and the MLP each between two),
//! per-head q/k norms, GeGLU with tanh-GELU, scores scaled by query_pre_attn_scalar^-0.5,
//! sliding-window layers with their own rotary base between global ones, and attention that
//! is causal or, when the config says `use_bidirectional_attention` (EmbeddingGemma),
//! bidirectional. The config is read in the transformers 5 form (`rope_parameters` per
//! layer type) and the form on the Hub (`rope_theta`, `rope_local_base_freq`,
//! `sliding_window_pattern`).

use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::decoder;
use super::checks::unsupported;
use crate::error::Result;

/// `transformers.Gemma3TextConfig`; defaults are transformers' defaults.
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
    /// The window as config.json stores it (see `window`).
    #[serde(default = "d::sliding_window")]
    pub sliding_window: usize,
    #[serde(default)]
    pub layer_types: Option<Vec<String>>,
    #[serde(default, alias = "_sliding_window_pattern")]
    pub sliding_window_pattern: Option<usize>,
    #[serde(default)]
    pub use_bidirectional_attention: bool,
    #[serde(default)]
    pub attn_logit_softcapping: Option<f64>,
    #[serde(default)]
    pub rope_parameters: Option<Value>,
    #[serde(default)]
    pub rope_theta: Option<f64>,
    #[serde(default)]
    pub rope_local_base_freq: Option<f64>,
    #[serde(default)]
    pub rope_scaling: Option<Value>,
    #[serde(default = "d::pad_token_id")]
    pub pad_token_id: u32,
}

mod d {
    pub fn vocab_size() -> usize {
        262208
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
        131072
    }
    pub fn rms_norm_eps() -> f64 {
        1e-6
    }
    pub fn query_pre_attn_scalar() -> f64 {
        256.0
    }
    pub fn sliding_window() -> usize {
        4096
    }
    pub fn pad_token_id() -> u32 {
        0
    }
}

impl Config {
    /// Which layers slide: `layer_types`, else every layer but each `sliding_window_pattern`-th
    /// (default 6) counting from 1, as transformers derives them.
    fn sliding_layers(&self) -> Result<Vec<bool>> {
        match &self.layer_types {
            Some(types) => {
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
            None => {
                let pattern = self.sliding_window_pattern.unwrap_or(6).max(1);
                Ok((0..self.num_hidden_layers).map(|i| (i + 1) % pattern != 0).collect())
            }
        }
    }

    /// The farthest key a query of a sliding layer sees. Causal: the `sliding_window` last
    /// positions, itself included. Bidirectional: transformers holds `sliding_window // 2 + 1`
    /// and lets |query - key| stay below it, so half the stored window on each side.
    fn window(&self) -> usize {
        if self.use_bidirectional_attention {
            self.sliding_window / 2
        } else {
            self.sliding_window.saturating_sub(1)
        }
    }

    fn spec(&self) -> Result<decoder::Spec> {
        if self.query_pre_attn_scalar.is_nan() || self.query_pre_attn_scalar <= 0.0 {
            return Err(unsupported(
                "query_pre_attn_scalar",
                &self.query_pre_attn_scalar.to_string(),
                "a positive number",
            ));
        }
        let params = self.rope_parameters.as_ref();
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
            qk_norms: true,
            sandwich: true,
            norm_plus_one: true,
            // transformers: a float32 tensor of hidden_size ** 0.5.
            embed_scale: Some((self.hidden_size as f64).sqrt() as f32),
            scale: Some(self.query_pre_attn_scalar.powf(-0.5) as f32),
            softcap: self.attn_logit_softcapping.map(|c| c as f32),
            causal: !self.use_bidirectional_attention,
            rope_theta: decoder::rope_theta(
                params,
                self.rope_scaling.as_ref(),
                "full_attention",
                self.rope_theta,
                1_000_000.0,
            )?,
            sliding: Some((
                self.sliding_layers()?,
                self.window(),
                // rope_scaling applies to the global layers only (transformers).
                decoder::rope_theta(params, None, "sliding_attention", self.rope_local_base_freq, 10_000.0)?,
            )),
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
