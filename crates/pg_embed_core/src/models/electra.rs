//! ELECTRA discriminators: the BERT-family encoder whose embeddings may be narrower than the
//! hidden size and are then projected (`embeddings_project`).

use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::bert;
use super::checks::with_prefix;
use super::encoder::{Encoder, Positions};
use crate::error::Result;

/// `transformers.ElectraConfig`
/// (https://huggingface.co/docs/transformers/model_doc/electra#transformers.ElectraConfig):
/// BERT's fields plus `embedding_size`.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    #[serde(flatten)]
    pub bert: bert::Config,
    #[serde(default = "embedding_size")]
    pub embedding_size: usize,
}

fn embedding_size() -> usize {
    128
}

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Model {
    encoder: Encoder,
}

pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Model> {
    let vb = with_prefix(vb, &["", "electra."], "embeddings.word_embeddings.weight");
    let spec = cfg.bert.spec(cfg.embedding_size, Positions::Absolute)?;
    Ok(Model { encoder: Encoder::load(vb, &spec)? })
}

impl super::Config for Config {
    fn dims(&self) -> super::Dims {
        super::Dims::text(self.bert.hidden_size, self.bert.max_position_embeddings, self.bert.vocab_size, 0)
    }
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn super::Model>> {
        Ok(Box::new(load(vb, self)?))
    }
}

impl super::Model for Model {
    /// Tokens that are queries only are hidden as keys (`Batch::keys`).
    fn hides_keys(&self) -> bool {
        true
    }

    fn forward(&self, batch: &super::Batch) -> candle_core::Result<Vec<f32>> {
        self.encoder.forward(batch)
    }
}
