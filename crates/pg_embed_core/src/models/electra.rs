//! ELECTRA discriminators: the BERT-family encoder whose embeddings may be narrower than the
//! hidden size and are then projected (`embeddings_project`).

use candle_core::Tensor;
use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::bert;
use super::encoder::{with_prefix, Encoder, Positions};
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

pub struct Model {
    encoder: Encoder,
}

pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Model> {
    let vb = with_prefix(vb, &["", "electra."], "embeddings.word_embeddings.weight");
    let spec = cfg.bert.spec(cfg.embedding_size, Positions::Absolute)?;
    Ok(Model { encoder: Encoder::load(vb, &spec)? })
}

impl Model {
    pub fn forward(&self, ids: &Tensor, type_ids: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
        self.encoder.forward(ids, type_ids, mask)
    }
}
