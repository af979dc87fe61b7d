//! ViT (ViTModel, and the backbone of ViTForImageClassification): [CLS] + patches with
//! learned positions at the trained image size, pre-LayerNorm layers, a final LayerNorm,
//! and the optional pooler (dense + activation over [CLS]). Which feature a checkpoint was
//! trained to give, the layernormed [CLS] or pooler_output, is the `pooling` option's
//! choice (`cls`, the default, or `pooler`; `mean` averages all tokens).

use candle_core::Tensor;
use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::checks::{bad_weights, check_heads, with_prefix};
use super::vision::{self, Grid, LayerNames, Shape, StackShape};
use super::{Batch, Modality};
use crate::error::Result;
use crate::layers::{self, Activation, Linear};
use crate::pooling::PoolingMode;
use crate::weights;

/// `transformers.ViTConfig`
/// (https://huggingface.co/docs/transformers/model_doc/vit#transformers.ViTConfig);
/// defaults are transformers' defaults.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    #[serde(default = "d::hidden_size")]
    pub hidden_size: usize,
    #[serde(default = "d::num_hidden_layers")]
    pub num_hidden_layers: usize,
    #[serde(default = "d::num_attention_heads")]
    pub num_attention_heads: usize,
    #[serde(default = "d::intermediate_size")]
    pub intermediate_size: usize,
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
    /// The pooler's width (transformers: hidden_size when unset).
    #[serde(default)]
    pub pooler_output_size: Option<usize>,
    #[serde(default = "d::pooler_act")]
    pub pooler_act: String,
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
    pub fn intermediate_size() -> usize {
        3072
    }
    pub fn hidden_act() -> String {
        "gelu".into()
    }
    pub fn layer_norm_eps() -> f64 {
        1e-12
    }
    pub fn image_size() -> usize {
        224
    }
    pub fn patch_size() -> usize {
        16
    }
    pub fn num_channels() -> usize {
        3
    }
    pub fn qkv_bias() -> bool {
        true
    }
    pub fn pooler_act() -> String {
        "tanh".into()
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Model {
    embeddings: vision::Embeddings,
    stack: layers::Stack,
    /// ViTPooler: dense + activation over [CLS], when the checkpoint has one.
    pooler: Option<(Linear, Activation)>,
    hidden: usize,
}

pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Model> {
    check_heads(cfg.hidden_size, cfg.num_attention_heads)?;
    let act = super::checks::activation("hidden_act", &cfg.hidden_act)?;
    let pooler_act = super::checks::activation("pooler_act", &cfg.pooler_act)?;
    let h = cfg.hidden_size;
    // ViTForImageClassification keeps the backbone under "vit.".
    let vb = with_prefix(vb, &["", "vit."], "embeddings.cls_token");
    let load = || -> candle_core::Result<Model> {
        let shape = Shape {
            hidden: h,
            channels: cfg.num_channels,
            image_size: cfg.image_size,
            patch_size: cfg.patch_size,
        };
        let embeddings = vision::Embeddings::load(&vb, &vision::VIT_EMBEDDINGS, &shape, Grid::Fixed)?;
        let stack = vision::pre_norm_stack(
            &vb,
            &LAYERS,
            &StackShape {
                hidden: h,
                heads: cfg.num_attention_heads,
                intermediate: cfg.intermediate_size,
                layers: cfg.num_hidden_layers,
                eps: cfg.layer_norm_eps,
                biases: vision::Biases::qkv(cfg.qkv_bias),
                activation: act,
            },
            Some(weights::layer_norm(&vb.pp("layernorm"), h, cfg.layer_norm_eps, true)?),
        )?;
        let width = cfg.pooler_output_size.unwrap_or(h);
        let pooler = vb
            .contains_tensor("pooler.dense.weight")
            .then(|| weights::torch_linear(&vb.pp("pooler.dense"), width, h, true))
            .transpose()?
            .map(|dense| (dense, pooler_act));
        Ok(Model { embeddings, stack, pooler, hidden: h })
    };
    load().map_err(bad_weights)
}

/// ViTLayer's weight names.
const LAYERS: LayerNames = LayerNames {
    layers: "encoder.layer",
    query: "attention.attention.query",
    key: "attention.attention.key",
    value: "attention.attention.value",
    out: "attention.output.dense",
    norm_before: "layernorm_before",
    norm_after: "layernorm_after",
    up: "intermediate.dense",
    down: "output.dense",
    gate: None,
    layer_scale: None,
};

impl super::Config for Config {
    fn dims(&self) -> super::Dims {
        super::Dims::image(self.hidden_size, vision::trained_tokens(self.image_size, self.patch_size))
    }
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

    fn pooler_size(&self) -> Option<usize> {
        self.pooler.as_ref().map(|(dense, _)| dense.outputs())
    }

    /// transformers' ViTPooler: activation(dense(sequence_output[:, 0])).
    fn pooler(&self, hidden: &[f32], batch: &Batch) -> candle_core::Result<Option<Tensor>> {
        let Some((dense, act)) = &self.pooler else { return Ok(None) };
        let mut pooled = dense.apply(&vision::first_rows(hidden, self.hidden, batch.bounds)?);
        act.apply(&mut pooled);
        Tensor::from_vec(pooled, (batch.len(), dense.outputs()), &candle_core::Device::Cpu).map(Some)
    }

    fn image_tokens(&self, height: usize, width: usize) -> std::result::Result<usize, String> {
        self.embeddings.tokens(height, width)
    }
}
