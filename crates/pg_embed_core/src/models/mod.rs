//! Backbones: one architecture per file, each with a serde `Config`, `load(vb, &cfg)` and
//! `forward(ids, type_ids, mask) -> hidden states [batch, seq, hidden]`.
//! Architecture dispatch lives here and nowhere else.

use candle_core::Tensor;
use candle_nn::VarBuilder;
use serde::Deserialize;

use crate::error::{Error, Result};

pub mod bert;
pub mod clip;
pub mod deberta_v2;
pub mod distilbert;
pub mod electra;
pub mod encoder;
pub mod modernbert;
pub mod mpnet;
pub mod nomic_bert;
mod padded;
pub mod roberta;
pub mod t5;

const SUPPORTED: &str =
    "bert, clip_text_model, deberta-v2, distilbert, electra, modernbert, mpnet, nomic_bert, roberta, t5, xlm-roberta";

/// config.json, dispatched on `model_type`.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "model_type")]
pub enum BackboneConfig {
    #[serde(rename = "bert")]
    Bert(bert::Config),
    #[serde(rename = "roberta")]
    Roberta(roberta::Config),
    #[serde(rename = "xlm-roberta")]
    XlmRoberta(roberta::Config),
    #[serde(rename = "distilbert")]
    DistilBert(distilbert::Config),
    #[serde(rename = "electra")]
    Electra(electra::Config),
    #[serde(rename = "deberta-v2")]
    DebertaV2(deberta_v2::Config),
    #[serde(rename = "modernbert")]
    ModernBert(modernbert::Config),
    #[serde(rename = "mpnet")]
    Mpnet(mpnet::Config),
    #[serde(rename = "clip_text_model")]
    ClipText(clip::Config),
    #[serde(rename = "t5")]
    T5(t5::Config),
    #[serde(rename = "nomic_bert")]
    NomicBert(nomic_bert::Config),
}

impl BackboneConfig {
    /// Parses config.json; an unknown `model_type` is an error naming it.
    pub fn parse(path: &std::path::Path, bytes: &[u8]) -> Result<Self> {
        #[derive(Deserialize)]
        struct Tag {
            model_type: Option<String>,
        }
        let tag: Tag = serde_json::from_slice(bytes).map_err(|e| Error::invalid_file(path, e))?;
        let model_type = tag.model_type.unwrap_or_default();
        if !SUPPORTED.split(", ").any(|s| s == model_type) {
            return Err(Error::Unsupported {
                what: "model_type",
                value: model_type,
                path: path.into(),
                supported: SUPPORTED,
            });
        }
        serde_json::from_slice(bytes).map_err(|e| Error::invalid_file(path, e))
    }

    pub fn hidden_size(&self) -> usize {
        match self {
            BackboneConfig::Bert(c) => c.hidden_size,
            BackboneConfig::Roberta(c) | BackboneConfig::XlmRoberta(c) => c.bert.hidden_size,
            BackboneConfig::DistilBert(c) => c.dim,
            BackboneConfig::Electra(c) => c.bert.hidden_size,
            BackboneConfig::DebertaV2(c) => c.hidden_size,
            BackboneConfig::ModernBert(c) => c.hidden_size,
            BackboneConfig::Mpnet(c) => c.hidden_size,
            BackboneConfig::ClipText(c) => c.hidden_size,
            BackboneConfig::T5(c) => c.d_model,
            BackboneConfig::NomicBert(c) => c.hidden_size,
        }
    }

    /// Pooling when neither sentence-transformers' files nor the options name one: the mean,
    /// except for a CLIP text tower, whose embedding is its pooled, projected output.
    pub fn default_pooling(&self) -> crate::pooling::PoolingMode {
        match self {
            BackboneConfig::ClipText(_) => crate::pooling::PoolingMode::Pooler,
            _ => crate::pooling::PoolingMode::Mean,
        }
    }

    /// The longest input the position embeddings allow, in tokens.
    pub fn max_position_embeddings(&self) -> usize {
        match self {
            BackboneConfig::Bert(c) => c.max_position_embeddings,
            // RoBERTa's first padding_idx + 1 positions are never used by text.
            BackboneConfig::Roberta(c) | BackboneConfig::XlmRoberta(c) => {
                c.bert.max_position_embeddings.saturating_sub(c.pad_token_id as usize + 1)
            }
            BackboneConfig::DistilBert(c) => c.max_position_embeddings,
            BackboneConfig::Electra(c) => c.bert.max_position_embeddings,
            BackboneConfig::DebertaV2(c) => c.max_position_embeddings,
            BackboneConfig::ModernBert(c) => c.max_position_embeddings,
            BackboneConfig::Mpnet(c) => c.max_position_embeddings.saturating_sub(c.pad_token_id as usize + 1),
            BackboneConfig::ClipText(c) => c.max_position_embeddings,
            // Relative positions: no table bounds the length; sentence-transformers' T5
            // models set their own max_seq_length.
            BackboneConfig::T5(_) => 512,
            // Rotary positions: the config's length is what the model was trained for.
            BackboneConfig::NomicBert(c) => c.max_position_embeddings,
        }
    }

    /// Rows of the token embedding (the backbone checks them against the checkpoint).
    pub fn vocab_size(&self) -> usize {
        match self {
            BackboneConfig::Bert(c) => c.vocab_size,
            BackboneConfig::Roberta(c) | BackboneConfig::XlmRoberta(c) => c.bert.vocab_size,
            BackboneConfig::DistilBert(c) => c.vocab_size,
            BackboneConfig::Electra(c) => c.bert.vocab_size,
            BackboneConfig::DebertaV2(c) => c.vocab_size,
            BackboneConfig::ModernBert(c) => c.vocab_size,
            BackboneConfig::Mpnet(c) => c.vocab_size,
            BackboneConfig::ClipText(c) => c.vocab_size,
            BackboneConfig::T5(c) => c.vocab_size,
            BackboneConfig::NomicBert(c) => c.vocab_size,
        }
    }

    /// The token id batches are padded with when the tokenizer names none.
    pub fn pad_token_id(&self) -> u32 {
        match self {
            BackboneConfig::Bert(c) => c.pad_token_id as u32,
            BackboneConfig::Roberta(c) | BackboneConfig::XlmRoberta(c) => c.pad_token_id,
            BackboneConfig::DistilBert(_) | BackboneConfig::Electra(_) => 0,
            BackboneConfig::DebertaV2(c) => c.pad_token_id as u32,
            BackboneConfig::ModernBert(c) => c.pad_token_id,
            BackboneConfig::Mpnet(c) => c.pad_token_id,
            BackboneConfig::ClipText(c) => c.pad_token_id,
            BackboneConfig::T5(c) => c.pad_token_id,
            BackboneConfig::NomicBert(c) => c.pad_token_id,
        }
    }

    pub fn architecture(&self) -> &'static str {
        match self {
            BackboneConfig::Bert(_) => "bert",
            BackboneConfig::Roberta(_) => "roberta",
            BackboneConfig::XlmRoberta(_) => "xlm-roberta",
            BackboneConfig::DistilBert(_) => "distilbert",
            BackboneConfig::Electra(_) => "electra",
            BackboneConfig::DebertaV2(_) => "deberta-v2",
            BackboneConfig::ModernBert(_) => "modernbert",
            BackboneConfig::Mpnet(_) => "mpnet",
            BackboneConfig::ClipText(_) => "clip_text_model",
            BackboneConfig::T5(_) => "t5",
            BackboneConfig::NomicBert(_) => "nomic_bert",
        }
    }

    /// The config as parsed (transformers' field names, defaults filled in), for model_info.
    pub fn summary(&self) -> serde_json::Value {
        let value = match self {
            BackboneConfig::Bert(c) => serde_json::to_value(c),
            BackboneConfig::Roberta(c) | BackboneConfig::XlmRoberta(c) => serde_json::to_value(c),
            BackboneConfig::DistilBert(c) => serde_json::to_value(c),
            BackboneConfig::Electra(c) => serde_json::to_value(c),
            BackboneConfig::DebertaV2(c) => serde_json::to_value(c),
            BackboneConfig::ModernBert(c) => serde_json::to_value(c),
            BackboneConfig::Mpnet(c) => serde_json::to_value(c),
            BackboneConfig::ClipText(c) => serde_json::to_value(c),
            BackboneConfig::T5(c) => serde_json::to_value(c),
            BackboneConfig::NomicBert(c) => serde_json::to_value(c),
        };
        value.unwrap_or(serde_json::Value::Null)
    }
}

pub enum Backbone {
    Bert(bert::Model),
    Roberta(roberta::Model),
    DistilBert(distilbert::Model),
    Electra(electra::Model),
    DebertaV2(deberta_v2::Model),
    ModernBert(modernbert::Model),
    Mpnet(mpnet::Model),
    ClipText(clip::Model),
    T5(t5::Model),
    NomicBert(nomic_bert::Model),
}

impl Backbone {
    pub fn load(vb: VarBuilder, cfg: &BackboneConfig) -> Result<Self> {
        Ok(match cfg {
            BackboneConfig::Bert(c) => Backbone::Bert(bert::load(vb, c)?),
            BackboneConfig::Roberta(c) | BackboneConfig::XlmRoberta(c) => {
                Backbone::Roberta(roberta::load(vb, c)?)
            }
            BackboneConfig::DistilBert(c) => Backbone::DistilBert(distilbert::load(vb, c)?),
            BackboneConfig::Electra(c) => Backbone::Electra(electra::load(vb, c)?),
            BackboneConfig::DebertaV2(c) => Backbone::DebertaV2(deberta_v2::load(vb, c)?),
            BackboneConfig::ModernBert(c) => Backbone::ModernBert(modernbert::load(vb, c)?),
            BackboneConfig::Mpnet(c) => Backbone::Mpnet(mpnet::load(vb, c)?),
            BackboneConfig::ClipText(c) => Backbone::ClipText(clip::load(vb, c)?),
            BackboneConfig::T5(c) => Backbone::T5(t5::load(vb, c)?),
            BackboneConfig::NomicBert(c) => Backbone::NomicBert(nomic_bert::load(vb, c)?),
        })
    }

    /// ids, type_ids, mask: [batch, seq] u32. Returns [batch, seq, hidden] f32.
    pub fn forward(&self, ids: &Tensor, type_ids: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Backbone::Bert(m) => m.forward(ids, type_ids, mask),
            Backbone::Roberta(m) => m.forward(ids, type_ids, mask),
            Backbone::DistilBert(m) => m.forward(ids, type_ids, mask),
            Backbone::Electra(m) => m.forward(ids, type_ids, mask),
            Backbone::DebertaV2(m) => m.forward(ids, type_ids, mask),
            Backbone::ModernBert(m) => m.forward(ids, type_ids, mask),
            Backbone::Mpnet(m) => m.forward(ids, type_ids, mask),
            Backbone::ClipText(m) => m.forward(ids, type_ids, mask),
            Backbone::T5(m) => m.forward(ids, type_ids, mask),
            Backbone::NomicBert(m) => m.forward(ids, type_ids, mask),
        }
    }

    /// Width of the pooler output (`pooling: "pooler"`): a CLIP text tower's projection_dim
    /// when the checkpoint has `text_projection` (else its hidden size, as transformers'
    /// CLIPTextModel pools), the hidden size elsewhere.
    pub fn pooler_size(&self, cfg: &BackboneConfig) -> usize {
        match self {
            Backbone::ClipText(m) => m.pooled_size(),
            _ => cfg.hidden_size(),
        }
    }

    /// Whether the checkpoint carries a pooler (transformers' `pooler_output`).
    pub fn has_pooler(&self) -> bool {
        match self {
            Backbone::Bert(m) => m.has_pooler(),
            Backbone::Mpnet(m) => m.has_pooler(),
            Backbone::ClipText(_) => true,
            _ => false,
        }
    }

    /// The pooler output [batch, pooler size] from `forward`'s hidden states and the input
    /// ids, if there is a pooler.
    pub fn pooler(&self, hidden: &Tensor, ids: &Tensor) -> candle_core::Result<Option<Tensor>> {
        match self {
            Backbone::Bert(m) => m.pooler(hidden),
            Backbone::Mpnet(m) => m.pooler(hidden),
            Backbone::ClipText(m) => m.pooler(hidden, ids),
            _ => Ok(None),
        }
    }
}
