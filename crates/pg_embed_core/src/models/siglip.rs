//! SigLIP and SigLIP 2 (SiglipModel, which SigLIP 2's fixed-resolution checkpoints use too,
//! and Siglip2Model, the NaFlex ones): a text tower and a vision tower trained with a
//! sigmoid loss into one space. `embed` runs the text tower (`get_text_features`),
//! `embed_image` the vision tower (`get_image_features`). The same `model_type`s serve
//! Siglip(2)ForImageClassification: the vision tower only, whose classifier reads the mean
//! of its tokens. The two differ in their vision tower only: [`VisionConfig`].

use candle_core::Tensor;
use candle_nn::VarBuilder;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::checks::bad_weights;
use super::{siglip2_vision, siglip_text, siglip_vision, Batch, Modality};
use crate::error::{Error, Result};
use crate::pooling::PoolingMode;

/// A vision tower's config: SiglipVisionConfig (fixed size) or Siglip2VisionConfig (NaFlex).
pub trait VisionConfig: super::Config + Clone + std::fmt::Debug + Serialize + DeserializeOwned + 'static {
    type Tower: super::Model + Serialize + DeserializeOwned + 'static;
    fn load_tower(&self, vb: VarBuilder) -> Result<Self::Tower>;
}

impl VisionConfig for siglip_vision::Config {
    type Tower = siglip_vision::Model;
    fn load_tower(&self, vb: VarBuilder) -> Result<Self::Tower> {
        siglip_vision::load(vb, self)
    }
}

impl VisionConfig for siglip2_vision::Config {
    type Tower = siglip2_vision::Model;
    fn load_tower(&self, vb: VarBuilder) -> Result<Self::Tower> {
        siglip2_vision::load(vb, self)
    }
}

/// `transformers.SiglipConfig`
/// (https://huggingface.co/docs/transformers/model_doc/siglip#transformers.SiglipConfig) and
/// `Siglip2Config`: the two towers' configs; `architectures` tells a classification
/// checkpoint (no text tower) from the dual encoder.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(try_from = "Raw", bound(deserialize = "V: DeserializeOwned"))]
pub struct Config<V> {
    pub text_config: siglip_text::Config,
    pub vision_config: V,
    pub architectures: Vec<String>,
}

/// config.json as written: a sub-config left out or null takes transformers' defaults.
#[derive(Deserialize)]
struct Raw {
    #[serde(default)]
    text_config: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default)]
    vision_config: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default)]
    architectures: Vec<String>,
}

impl<V: DeserializeOwned> TryFrom<Raw> for Config<V> {
    type Error = String;

    fn try_from(raw: Raw) -> std::result::Result<Self, String> {
        let text = serde_json::from_value(raw.text_config.unwrap_or_default().into())
            .map_err(|e| format!("text_config: {e}"))?;
        let vision = serde_json::from_value(raw.vision_config.unwrap_or_default().into())
            .map_err(|e| format!("vision_config: {e}"))?;
        Ok(Config { text_config: text, vision_config: vision, architectures: raw.architectures })
    }
}

impl<V> Config<V> {
    /// Siglip(2)ForImageClassification: the vision tower and a classifier, no text tower.
    fn image_only(&self) -> bool {
        self.architectures.iter().any(|a| a.ends_with("ForImageClassification"))
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Model<T> {
    text: Option<siglip_text::Model>,
    vision: T,
    /// `logit_scale` (the log of the temperature, as stored) and `logit_bias`.
    sigmoid_logits: Option<(f32, f32)>,
}

pub fn load<V: VisionConfig>(vb: VarBuilder, cfg: &Config<V>) -> Result<Model<V::Tower>> {
    let vision = cfg.vision_config.load_tower(vb.clone())?;
    if cfg.image_only() {
        return Ok(Model { text: None, vision, sigmoid_logits: None });
    }
    let text = siglip_text::load(vb.clone(), &cfg.text_config)?;
    let image_size = super::Model::pooler_size(&vision);
    if image_size != Some(text.pooled_size()) {
        return Err(Error::invalid_file(
            "model.safetensors",
            format!(
                "the text tower's output ({}) and the vision tower's attention-pooling head ({image_size:?}) differ",
                text.pooled_size()
            ),
        ));
    }
    let scalar = |name: &str| -> candle_core::Result<f32> { vb.get(1, name)?.to_vec1::<f32>().map(|v| v[0]) };
    let sigmoid_logits = if vb.contains_tensor("logit_scale") && vb.contains_tensor("logit_bias") {
        Some((scalar("logit_scale").map_err(bad_weights)?, scalar("logit_bias").map_err(bad_weights)?))
    } else {
        None
    };
    Ok(Model { text: Some(text), vision, sigmoid_logits })
}

impl<V: VisionConfig> super::Config for Config<V> {
    fn dims(&self) -> super::Dims {
        if self.image_only() {
            self.vision_config.dims()
        } else {
            let text = &self.text_config;
            let (vocab, pad) = (text.vocab_size, text.pad_token_id);
            super::Dims::text(text.hidden_size, text.max_position_embeddings, vocab, pad)
        }
    }
    fn default_pooling(&self) -> PoolingMode {
        if self.image_only() {
            PoolingMode::Mean
        } else {
            PoolingMode::Pooler
        }
    }
    fn modality(&self) -> Modality {
        if self.image_only() {
            Modality::Image
        } else {
            Modality::Both
        }
    }
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn super::Model>> {
        Ok(Box::new(load(vb, self)?))
    }
}

impl<T> Model<T> {
    fn text(&self) -> candle_core::Result<&siglip_text::Model> {
        self.text.as_ref().ok_or_else(|| candle_core::Error::Msg("this model takes images, not text".into()))
    }
}

impl<T: super::Model + Serialize> super::Model for Model<T> {
    fn forward(&self, batch: &Batch) -> candle_core::Result<Vec<f32>> {
        if batch.is_image() {
            self.vision.forward(batch)
        } else {
            super::Model::forward(self.text()?, batch)
        }
    }

    fn pooler_size(&self) -> Option<usize> {
        self.vision.pooler_size()
    }

    fn pooler(&self, hidden: &[f32], batch: &Batch) -> candle_core::Result<Option<Tensor>> {
        if batch.is_image() {
            self.vision.pooler(hidden, batch)
        } else {
            candle_core::bail!("the text tower's pooled output comes from forward_pooled")
        }
    }

    fn forward_pooled(&self, batch: &Batch, pooler: bool) -> candle_core::Result<(Vec<f32>, Option<Tensor>)> {
        if batch.is_image() {
            let hidden = self.vision.forward(batch)?;
            let pooled = if pooler { self.vision.pooler(&hidden, batch)? } else { None };
            Ok((hidden, pooled))
        } else {
            self.text()?.forward_pooled(batch, pooler)
        }
    }

    fn image_tokens(&self, height: usize, width: usize) -> std::result::Result<usize, String> {
        self.vision.image_tokens(height, width)
    }

    fn sigmoid_logits(&self) -> Option<(f32, f32)> {
        self.sigmoid_logits
    }
}
