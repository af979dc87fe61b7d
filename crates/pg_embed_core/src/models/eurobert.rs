//! EuroBERT: transformers' `EuroBertModel`, Llama's layers (rotary, RMSNorm, SwiGLU,
//! grouped-query attention, a final norm) with bidirectional attention, on the decoder
//! family's backbone (`decoder.rs`). Its classification head (`classifier_pooling` bos,
//! mean or late) is in `classifier.rs`.

use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::decoder;
use super::llama::{Defaults, Fields};
use crate::error::Result;
use crate::pooling::PoolingMode;

/// `transformers.EuroBertConfig`'s defaults.
const EUROBERT: Defaults = Defaults {
    vocab_size: 128256,
    hidden_size: 768,
    intermediate_size: 3072,
    num_hidden_layers: 12,
    num_attention_heads: 12,
    num_key_value_heads: None,
    max_position_embeddings: 8192,
    rms_norm_eps: 1e-5,
    pad_token_id: Some(128001),
};

/// `transformers.EuroBertConfig`: Llama's fields (the head's `classifier_pooling` is read
/// by the classification head).
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    #[serde(flatten)]
    pub llama: Fields,
}

impl super::Config for Config {
    fn hidden_size(&self) -> usize {
        self.llama.hidden(&EUROBERT)
    }
    fn max_position_embeddings(&self) -> usize {
        self.llama.positions(&EUROBERT)
    }
    fn vocab_size(&self) -> usize {
        self.llama.vocab(&EUROBERT)
    }
    fn pad_token_id(&self) -> u32 {
        self.llama.pad(&EUROBERT)
    }
    fn default_pooling(&self) -> PoolingMode {
        PoolingMode::Mean
    }
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn super::Model>> {
        Ok(Box::new(decoder::load(vb, &self.llama.spec(&EUROBERT, false, None)?)?))
    }
    fn restore(&self, prepared: serde_json::Value) -> Result<Box<dyn super::Model>> {
        super::restore::<decoder::Model>(prepared)
    }
}
