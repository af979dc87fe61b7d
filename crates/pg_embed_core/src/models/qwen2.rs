//! Qwen2 (gte-Qwen2; Qwen2 sequence classifiers): transformers' `Qwen2Model`, whose query, key and value projections always carry biases and o_proj none, with a head width of hidden / heads, on the decoder family's backbone
//! (`decoder.rs`).

use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::decoder::{self, QwenConfig};
use crate::error::Result;

/// `transformers.Qwen2Config`.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    #[serde(flatten)]
    pub qwen: QwenConfig,
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
        let heads = self.qwen.num_attention_heads.max(1);
        let spec = self.qwen.spec(self.qwen.hidden_size / heads, true, false, false)?;
        Ok(Box::new(decoder::load(vb, &spec)?))
    }
    fn restore(&self, prepared: serde_json::Value) -> Result<Box<dyn super::Model>> {
        super::restore::<decoder::Model>(prepared)
    }
}
