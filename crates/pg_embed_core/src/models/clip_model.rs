//! CLIP (CLIPModel): a text tower and a vision tower whose projections put text and images
//! in one space. `embed` runs the text tower (transformers' `get_text_features`),
//! `embed_image` the vision tower (`get_image_features`); both from one registration, so
//! the two projections always belong together.

use candle_core::Tensor;
use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::{clip, clip_vision, Batch, Modality};
use crate::error::{Error, Result};
use crate::pooling::PoolingMode;

/// `transformers.CLIPConfig`
/// (https://huggingface.co/docs/transformers/model_doc/clip#transformers.CLIPConfig): the two
/// towers' configs, each given the shared `projection_dim`; defaults are transformers'.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(try_from = "Raw")]
pub struct Config {
    pub text_config: clip::Config,
    pub vision_config: clip_vision::Config,
    pub projection_dim: usize,
}

/// config.json as written.
#[derive(Deserialize)]
struct Raw {
    #[serde(default)]
    text_config: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    vision_config: serde_json::Map<String, serde_json::Value>,
    #[serde(default = "d::projection_dim")]
    projection_dim: usize,
}

mod d {
    pub fn projection_dim() -> usize {
        512
    }
}

impl TryFrom<Raw> for Config {
    type Error = String;

    fn try_from(raw: Raw) -> std::result::Result<Self, String> {
        let mut text: clip::Config =
            serde_json::from_value(raw.text_config.into()).map_err(|e| format!("text_config: {e}"))?;
        let mut vision: clip_vision::Config =
            serde_json::from_value(raw.vision_config.into()).map_err(|e| format!("vision_config: {e}"))?;
        text.projection_dim = raw.projection_dim;
        vision.projection_dim = raw.projection_dim;
        Ok(Config { text_config: text, vision_config: vision, projection_dim: raw.projection_dim })
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Model {
    text: clip::Model,
    vision: clip_vision::Model,
}

pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Model> {
    let text = clip::load(vb.clone(), &cfg.text_config)?;
    let vision = clip_vision::load(vb, &cfg.vision_config)?;
    if text.pooled_size() != vision.pooled_size() {
        return Err(Error::invalid_file(
            "model.safetensors",
            format!(
                "the text tower's output ({}) and the vision tower's ({}) differ: text_projection or visual_projection is missing",
                text.pooled_size(),
                vision.pooled_size()
            ),
        ));
    }
    Ok(Model { text, vision })
}

impl super::Config for Config {
    fn dims(&self) -> super::Dims {
        super::Dims::text(
            self.text_config.hidden_size,
            self.text_config.max_position_embeddings,
            self.text_config.vocab_size,
            self.text_config.pad_token_id,
        )
    }
    fn default_pooling(&self) -> PoolingMode {
        PoolingMode::Pooler
    }
    fn modality(&self) -> Modality {
        Modality::Both
    }
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn super::Model>> {
        Ok(Box::new(load(vb, self)?))
    }
}

impl super::Model for Model {
    fn forward(&self, batch: &Batch) -> candle_core::Result<Vec<f32>> {
        if batch.is_image() {
            self.vision.forward(batch)
        } else {
            super::Model::forward(&self.text, batch)
        }
    }

    fn pooler_size(&self) -> Option<usize> {
        Some(self.text.pooled_size())
    }

    fn pooler(&self, hidden: &[f32], batch: &Batch) -> candle_core::Result<Option<Tensor>> {
        if batch.is_image() {
            self.vision.pooler(hidden, batch)
        } else {
            super::Model::pooler(&self.text, hidden, batch)
        }
    }

    fn image_tokens(&self, height: usize, width: usize) -> std::result::Result<usize, String> {
        self.vision.image_tokens(height, width)
    }
}
