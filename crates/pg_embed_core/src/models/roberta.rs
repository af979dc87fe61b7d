//! RoBERTa and XLM-RoBERTa (multilingual-e5, bge-m3's dense part, paraphrase-multilingual-*):
//! the BERT-family encoder with positions numbered after the padding index.

use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::bert;
use super::checks::with_prefix;
use super::encoder::{Encoder, Positions};
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

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Model {
    encoder: Encoder,
}

pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Model> {
    let vb = with_prefix(vb, &["", "roberta."], "embeddings.word_embeddings.weight");
    let spec =
        cfg.bert.spec(cfg.bert.hidden_size, Positions::AfterPadding { padding_idx: cfg.pad_token_id })?;
    Ok(Model { encoder: Encoder::load(vb, &spec)? })
}

impl super::Config for Config {
    fn dims(&self) -> super::Dims {
        // RoBERTa's first padding_idx + 1 positions are never used by text.
        let positions = self.bert.max_position_embeddings.saturating_sub(self.pad_token_id as usize + 1);
        super::Dims::text(self.bert.hidden_size, positions, self.bert.vocab_size, self.pad_token_id)
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
