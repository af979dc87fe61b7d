//! Mistral (e5-mistral-7b-instruct, SFR-Embedding-Mistral, Linq-Embed-Mistral; Mistral
//! sequence classifiers): transformers' `MistralModel`, Llama's layers without biases and,
//! when config.json names a `sliding_window`, every layer attending to that many tokens
//! (the query and the ones before it), on the rotary decoders' backbone (`decoder.rs`).

use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::decoder::{self, Defaults, Fields};
use crate::error::Result;

/// `transformers.MistralConfig`'s defaults.
const MISTRAL: Defaults = Defaults {
    intermediate_size: 14336,
    num_key_value_heads: Some(8),
    max_position_embeddings: 4096 * 32,
    ..super::llama::LLAMA
};

/// `transformers.MistralConfig`: the decoders' fields and the sliding window (null: none).
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    #[serde(flatten)]
    pub decoder: Fields,
    #[serde(default = "window")]
    pub sliding_window: Option<usize>,
}

fn window() -> Option<usize> {
    Some(4096)
}

impl super::Config for Config {
    fn dims(&self) -> super::Dims {
        self.decoder.dims(&MISTRAL)
    }
    fn fill_defaults(&mut self) {
        self.decoder.fill(&MISTRAL);
    }
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn super::Model>> {
        let window = decoder::causal_window(self.sliding_window)?;
        let spec = self.decoder.spec(&MISTRAL)?;
        // MistralAttention has no biases whatever the config says.
        let spec = decoder::Spec {
            qkv_bias: false,
            o_bias: false,
            mlp_bias: false,
            sliding: window.map(|w| (vec![true; spec.layers], w, spec.rope.clone())),
            ..spec
        };
        Ok(Box::new(decoder::load(vb, &spec)?))
    }
}
