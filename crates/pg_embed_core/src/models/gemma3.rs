//! Gemma 3's text model (EmbeddingGemma): transformers' `Gemma3TextModel`, on the rotary
//! decoders' backbone (`decoder.rs`): embeddings times sqrt(hidden), RMSNorms that scale by
//! 1 + weight, four norms per layer (the attention and the MLP each between two),
//! per-head q/k norms, GeGLU with tanh-GELU, scores scaled by query_pre_attn_scalar^-0.5,
//! sliding-window layers with their own rotary base between global ones, and attention that
//! is causal or, when the config says `use_bidirectional_attention` (EmbeddingGemma),
//! bidirectional. The config is read in the transformers 5 form (`rope_parameters` per
//! layer type) and the form on the Hub (`rope_theta`, `rope_local_base_freq`,
//! `sliding_window_pattern`).

use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::decoder::{self, Defaults, Fields};
use super::rotary;
use crate::error::Result;

/// `transformers.Gemma3TextConfig`'s defaults.
const GEMMA3: Defaults = Defaults {
    vocab_size: 262208,
    max_position_embeddings: 131072,
    rope_theta: 1_000_000.0,
    ..super::gemma2::GEMMA2
};

/// `transformers.Gemma3TextConfig`: the decoders' fields and Gemma's own.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    #[serde(flatten)]
    pub decoder: Fields,
    #[serde(default = "d::query_pre_attn_scalar")]
    pub query_pre_attn_scalar: f64,
    /// The window as config.json stores it (see `window`).
    #[serde(default = "d::sliding_window")]
    pub sliding_window: usize,
    #[serde(default, alias = "_sliding_window_pattern")]
    pub sliding_window_pattern: Option<usize>,
    #[serde(default)]
    pub use_bidirectional_attention: bool,
    #[serde(default)]
    pub attn_logit_softcapping: Option<f64>,
    #[serde(default)]
    pub rope_local_base_freq: Option<f64>,
}

mod d {
    pub fn query_pre_attn_scalar() -> f64 {
        256.0
    }
    pub fn sliding_window() -> usize {
        4096
    }
}

impl Config {
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
        let scale = decoder::gemma_scale(self.query_pre_attn_scalar)?;
        let spec = self.decoder.spec(&GEMMA3)?;
        // Which layers slide: `layer_types`, else every layer but each
        // `sliding_window_pattern`-th (default 6) counting from 1, as transformers derives them.
        let pattern = self.sliding_window_pattern.unwrap_or(6).max(1);
        let layers = self.decoder.sliding_layers(&GEMMA3, |i| (i + 1) % pattern != 0)?;
        // rope_scaling applies to the global layers only (transformers).
        let family = rotary::Family { theta: 10_000.0, ..self.decoder.rotary_family(&GEMMA3, false) };
        let local = self.decoder.rope.rope("sliding_attention", false, self.rope_local_base_freq, family)?;
        Ok(decoder::Spec {
            qk_norms: true,
            sandwich: true,
            norm_plus_one: true,
            // transformers: a float32 tensor of hidden_size ** 0.5.
            embed_scale: Some((spec.hidden as f64).sqrt() as f32),
            scale: Some(scale),
            softcap: self.attn_logit_softcapping.map(|c| c as f32),
            causal: !self.use_bidirectional_attention,
            sliding: Some((layers, self.window(), local)),
            ..spec
        })
    }
}

impl super::Config for Config {
    fn dims(&self) -> super::Dims {
        self.decoder.dims(&GEMMA3)
    }
    fn fill_defaults(&mut self) {
        self.decoder.fill(&GEMMA3);
    }
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn super::Model>> {
        Ok(Box::new(decoder::load(vb, &self.spec()?)?))
    }
}
