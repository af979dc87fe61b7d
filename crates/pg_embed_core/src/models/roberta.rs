//! RoBERTa and XLM-RoBERTa (multilingual-e5, bge-m3's dense part, paraphrase-multilingual-*):
//! the BERT-family encoder with positions numbered after the padding index.

use candle_core::Tensor;
use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::bert;
use super::encoder::{with_prefix, Encoder, Positions};
use crate::error::Result;

/// `transformers.RobertaConfig` / `XLMRobertaConfig`
/// (https://huggingface.co/docs/transformers/model_doc/roberta#transformers.RobertaConfig):
/// BERT's fields, with padding at id 1 unless the config says otherwise.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    #[serde(flatten)]
    pub bert: bert::Config,
    /// Also `padding_idx` of the position embeddings.
    #[serde(default = "one")]
    pub pad_token_id: u32,
}

fn one() -> u32 {
    1
}

pub struct Model {
    encoder: Encoder,
}

pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Model> {
    let vb = with_prefix(vb, &["", "roberta."], "embeddings.word_embeddings.weight");
    let spec =
        cfg.bert.spec(cfg.bert.hidden_size, Positions::AfterPadding { padding_idx: cfg.pad_token_id })?;
    Ok(Model { encoder: Encoder::load(vb, &spec)? })
}

impl Model {
    pub fn forward(&self, ids: &Tensor, type_ids: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
        self.encoder.forward(ids, type_ids, mask)
    }
}
