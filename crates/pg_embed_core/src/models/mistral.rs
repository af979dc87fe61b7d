//! Mistral (e5-mistral-7b-instruct, SFR-Embedding-Mistral, Linq-Embed-Mistral; Mistral
//! sequence classifiers): transformers' `MistralModel`, Llama's layers without biases and,
//! when config.json names a `sliding_window`, every layer attending to that many tokens
//! (the query and the ones before it), on the decoder family's backbone (`decoder.rs`).

use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::decoder;
use super::llama::{Defaults, Fields};
use crate::error::Result;

/// `transformers.MistralConfig`'s defaults.
const MISTRAL: Defaults = Defaults {
    vocab_size: 32000,
    hidden_size: 4096,
    intermediate_size: 14336,
    num_hidden_layers: 32,
    num_attention_heads: 32,
    num_key_value_heads: Some(8),
    max_position_embeddings: 4096 * 32,
    rms_norm_eps: 1e-6,
    pad_token_id: None,
};

/// `transformers.MistralConfig`: Llama's fields and the sliding window (null: none).
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    #[serde(flatten)]
    pub llama: Fields,
    #[serde(default = "window")]
    pub sliding_window: Option<usize>,
}

fn window() -> Option<usize> {
    Some(4096)
}

impl super::Config for Config {
    fn hidden_size(&self) -> usize {
        self.llama.hidden(&MISTRAL)
    }
    fn max_position_embeddings(&self) -> usize {
        self.llama.positions(&MISTRAL)
    }
    fn vocab_size(&self) -> usize {
        self.llama.vocab(&MISTRAL)
    }
    fn pad_token_id(&self) -> u32 {
        self.llama.pad(&MISTRAL)
    }
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn super::Model>> {
        // MistralAttention has no biases whatever the config says.
        let fields = Fields { attention_bias: false, mlp_bias: false, ..self.llama.clone() };
        Ok(Box::new(decoder::load(vb, &fields.spec(&MISTRAL, true, self.sliding_window)?)?))
    }
    fn restore(&self, prepared: serde_json::Value) -> Result<Box<dyn super::Model>> {
        super::restore::<decoder::Model>(prepared)
    }
}
