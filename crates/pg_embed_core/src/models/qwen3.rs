//! Qwen3 (Qwen3-Embedding; Qwen3-Reranker as a sequence classifier): transformers'
//! `Qwen3Model`, with per-head q/k RMSNorms before the rotary positions and a head width of
//! the config's `head_dim` (128 by default, not hidden / heads), on the rotary decoders'
//! backbone (`decoder.rs`).

use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::decoder::{self, Defaults, Fields};
use crate::error::Result;

/// `transformers.Qwen3Config`'s defaults.
const QWEN3: Defaults = Defaults { head_dim: Some(128), attention_bias: Some(false), ..super::qwen2::QWEN2 };

/// `transformers.Qwen3Config`: Qwen2's fields, `attention_bias` on all four projections.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    #[serde(flatten)]
    pub decoder: Fields,
    #[serde(default)]
    pub use_sliding_window: bool,
}

impl super::Config for Config {
    fn dims(&self) -> super::Dims {
        self.decoder.dims(&QWEN3)
    }
    fn fill_defaults(&mut self) {
        self.decoder.fill(&QWEN3);
    }
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn super::Model>> {
        let spec = super::qwen2::spec(&self.decoder, &QWEN3, self.use_sliding_window)?;
        Ok(Box::new(decoder::load(vb, &decoder::Spec { qk_norms: true, ..spec })?))
    }
}
