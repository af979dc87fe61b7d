//! Backbones: one architecture per file, each with a serde `Config`, `load(vb, &cfg)` and
//! `forward(ids, type_ids, mask) -> hidden states [batch, seq, hidden]`.
//! Architecture dispatch lives here and nowhere else.

use candle_core::Tensor;
use candle_nn::VarBuilder;
use serde::Deserialize;

use crate::error::{Error, Result};

pub mod bert;

const SUPPORTED: &str = "bert";

/// config.json, dispatched on `model_type`.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "model_type", rename_all = "snake_case")]
pub enum BackboneConfig {
    Bert(bert::Config),
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
        }
    }

    pub fn max_position_embeddings(&self) -> usize {
        match self {
            BackboneConfig::Bert(c) => c.max_position_embeddings,
        }
    }

    pub fn architecture(&self) -> &'static str {
        match self {
            BackboneConfig::Bert(_) => "bert",
        }
    }

    pub fn summary(&self) -> serde_json::Value {
        match self {
            BackboneConfig::Bert(c) => serde_json::json!({
                "hidden_size": c.hidden_size,
                "layers": c.num_hidden_layers,
                "attention_heads": c.num_attention_heads,
                "intermediate_size": c.intermediate_size,
                "hidden_act": c.hidden_act,
                "vocab_size": c.vocab_size,
            }),
        }
    }
}

pub enum Backbone {
    Bert(bert::Model),
}

impl Backbone {
    pub fn load(vb: VarBuilder, cfg: &BackboneConfig) -> Result<Self> {
        Ok(match cfg {
            BackboneConfig::Bert(c) => Backbone::Bert(bert::load(vb, c)?),
        })
    }

    /// ids, type_ids, mask: [batch, seq] u32. Returns [batch, seq, hidden] f32.
    pub fn forward(&self, ids: &Tensor, type_ids: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Backbone::Bert(m) => m.forward(ids, type_ids, mask),
        }
    }

    /// Whether the checkpoint carries a pooler (transformers' `pooler_output`).
    pub fn has_pooler(&self) -> bool {
        match self {
            Backbone::Bert(m) => m.has_pooler(),
        }
    }

    /// The pooler output [batch, hidden] from `forward`'s hidden states, if there is a pooler.
    pub fn pooler(&self, hidden: &Tensor) -> candle_core::Result<Option<Tensor>> {
        match self {
            Backbone::Bert(m) => m.pooler(hidden),
        }
    }
}
