//! EuroBERT: transformers' `EuroBertModel`, Llama's layers (rotary, RMSNorm, SwiGLU,
//! grouped-query attention, a final norm) with bidirectional attention, on the rotary
//! decoders' backbone (`decoder.rs`). Its classification head (`classifier_pooling` bos,
//! mean or late) is in `classifier.rs`.

use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::decoder::{self, Defaults, Fields};
use crate::error::Result;

/// `transformers.EuroBertConfig`'s defaults.
const EUROBERT: Defaults = Defaults {
    vocab_size: 128256,
    hidden_size: 768,
    intermediate_size: 3072,
    num_hidden_layers: 12,
    num_attention_heads: 12,
    max_position_embeddings: 8192,
    rms_norm_eps: 1e-5,
    pad_token_id: Some(128001),
    ..super::llama::LLAMA
};

/// `transformers.EuroBertConfig`: the decoders' fields (the head's `classifier_pooling`
/// is read by the classification head).
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    #[serde(flatten)]
    pub decoder: Fields,
}

impl super::Config for Config {
    fn dims(&self) -> super::Dims {
        self.decoder.dims(&EUROBERT)
    }
    fn fill_defaults(&mut self) {
        self.decoder.fill(&EUROBERT);
    }
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn super::Model>> {
        let spec = decoder::Spec { causal: false, ..self.decoder.spec(&EUROBERT)? };
        Ok(Box::new(decoder::load(vb, &spec)?))
    }
}
