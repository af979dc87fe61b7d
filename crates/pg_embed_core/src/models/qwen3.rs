//! Qwen3 (Qwen3-Embedding; Qwen3-Reranker as a sequence classifier): transformers' `Qwen3Model`, with per-head q/k RMSNorms before the rotary positions and a head width of the config's `head_dim` (128 by default, not hidden / heads), on the decoder family's backbone
//! (`decoder.rs`).

use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::decoder::{self, QwenConfig};
use crate::error::Result;

/// `transformers.Qwen3Config`.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    #[serde(flatten)]
    pub qwen: QwenConfig,
    /// Biases on all four attention projections.
    #[serde(default)]
    pub attention_bias: bool,
}

impl super::Config for Config {
    fn hidden_size(&self) -> usize {
        self.qwen.hidden_size
    }
    fn max_position_embeddings(&self) -> usize {
        self.qwen.max_position_embeddings
    }
    fn vocab_size(&self) -> usize {
        self.qwen.vocab_size
    }
    fn pad_token_id(&self) -> u32 {
        self.qwen.pad_token_id.unwrap_or(0)
    }
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn super::Model>> {
        let spec = self.qwen.spec(128, self.attention_bias, self.attention_bias, true)?;
        Ok(Box::new(decoder::load(vb, &spec)?))
    }
    fn restore(&self, prepared: serde_json::Value) -> Result<Box<dyn super::Model>> {
        super::restore::<decoder::Model>(prepared)
    }
}
