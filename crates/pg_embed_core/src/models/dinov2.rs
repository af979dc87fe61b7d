//! DINOv2 (Dinov2Model): ViT-style patches with positions interpolated to every image's
//! patch grid (the checkpoints are trained at 518 pixels and used at 224), pre-LayerNorm
//! layers with LayerScale, a final LayerNorm. `pooling` = `cls` (pooler_output, the
//! layernormed [CLS]; the default) or `mean` (the mean of the patch tokens, [CLS] left out),
//! or both concatenated.

use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::checks::{bad_weights, check_heads, unsupported};
use super::vision::{self, Grid, LayerNames, Shape, StackShape};
use super::{Batch, Modality};
use crate::error::Result;
use crate::layers;
use crate::pooling::PoolingMode;
use crate::weights;

/// `transformers.Dinov2Config`
/// (https://huggingface.co/docs/transformers/model_doc/dinov2#transformers.Dinov2Config);
/// defaults are transformers' defaults.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    #[serde(default = "d::hidden_size")]
    pub hidden_size: usize,
    #[serde(default = "d::num_hidden_layers")]
    pub num_hidden_layers: usize,
    #[serde(default = "d::num_attention_heads")]
    pub num_attention_heads: usize,
    #[serde(default = "d::mlp_ratio")]
    pub mlp_ratio: f64,
    #[serde(default = "d::hidden_act")]
    pub hidden_act: String,
    #[serde(default = "d::layer_norm_eps")]
    pub layer_norm_eps: f64,
    #[serde(default = "d::image_size")]
    pub image_size: usize,
    #[serde(default = "d::patch_size")]
    pub patch_size: usize,
    #[serde(default = "d::num_channels")]
    pub num_channels: usize,
    #[serde(default = "d::qkv_bias")]
    pub qkv_bias: bool,
    #[serde(default)]
    pub use_swiglu_ffn: bool,
}

mod d {
    pub fn hidden_size() -> usize {
        768
    }
    pub fn num_hidden_layers() -> usize {
        12
    }
    pub fn num_attention_heads() -> usize {
        12
    }
    pub fn mlp_ratio() -> f64 {
        4.0
    }
    pub fn hidden_act() -> String {
        "gelu".into()
    }
    pub fn layer_norm_eps() -> f64 {
        1e-6
    }
    pub fn image_size() -> usize {
        224
    }
    pub fn patch_size() -> usize {
        14
    }
    pub fn num_channels() -> usize {
        3
    }
    pub fn qkv_bias() -> bool {
        true
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Model {
    embeddings: vision::Embeddings,
    stack: layers::Stack,
}

/// Dinov2Layer's weight names.
const LAYERS: LayerNames = LayerNames {
    layers: "encoder.layer",
    query: "attention.attention.query",
    key: "attention.attention.key",
    value: "attention.attention.value",
    out: "attention.output.dense",
    norm_before: "norm1",
    norm_after: "norm2",
    up: "mlp.fc1",
    down: "mlp.fc2",
    gate: None,
    layer_scale: Some(("layer_scale1", "layer_scale2")),
};

pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Model> {
    check_heads(cfg.hidden_size, cfg.num_attention_heads)?;
    if cfg.use_swiglu_ffn {
        return Err(unsupported("use_swiglu_ffn", "true", "false"));
    }
    let act = super::checks::activation("hidden_act", &cfg.hidden_act)?;
    let h = cfg.hidden_size;
    // Dinov2MLP: int(hidden_size * mlp_ratio).
    let intermediate = (h as f64 * cfg.mlp_ratio) as usize;
    let load = || -> candle_core::Result<Model> {
        let shape = Shape {
            hidden: h,
            channels: cfg.num_channels,
            image_size: cfg.image_size,
            patch_size: cfg.patch_size,
        };
        let embeddings = vision::Embeddings::load(&vb, &vision::VIT_EMBEDDINGS, &shape, Grid::Interpolated)?;
        let stack = vision::pre_norm_stack(
            &vb,
            &LAYERS,
            &StackShape {
                hidden: h,
                heads: cfg.num_attention_heads,
                intermediate,
                layers: cfg.num_hidden_layers,
                eps: cfg.layer_norm_eps,
                biases: vision::Biases::qkv(cfg.qkv_bias),
                activation: act,
            },
            Some(weights::layer_norm(&vb.pp("layernorm"), h, cfg.layer_norm_eps, true)?),
        )?;
        Ok(Model { embeddings, stack })
    };
    load().map_err(bad_weights)
}

impl super::Config for Config {
    fn dims(&self) -> super::Dims {
        super::Dims::image(self.hidden_size, vision::trained_tokens(self.image_size, self.patch_size))
    }
    /// pooler_output: the layernormed [CLS].
    fn default_pooling(&self) -> PoolingMode {
        PoolingMode::Cls
    }
    fn modality(&self) -> Modality {
        Modality::Image
    }
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn super::Model>> {
        Ok(Box::new(load(vb, self)?))
    }
}

impl super::Model for Model {
    fn forward(&self, batch: &Batch) -> candle_core::Result<Vec<f32>> {
        vision::forward(&self.embeddings, None, &self.stack, batch)
    }

    fn image_tokens(&self, height: usize, width: usize) -> std::result::Result<usize, String> {
        self.embeddings.tokens(height, width)
    }

    /// The mean is over the patch tokens: sentence-transformers' and DINOv2's own
    /// `x_norm_patchtokens.mean`.
    fn summary_tokens(&self) -> usize {
        1
    }
}
