//! CLIP's vision tower (CLIPVisionModel / CLIPVisionModelWithProjection, and the image
//! side of a full CLIPModel): [CLS] (`class_embedding`) + bias-free patches + learned
//! positions, `pre_layrnorm`, pre-LayerNorm layers with QuickGELU; the pooled output is
//! `post_layernorm` over [CLS], projected by `visual_projection` when the checkpoint has
//! it: transformers' `image_embeds` / `get_image_features`.

use candle_core::Tensor;
use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::checks::{bad_weights, check_heads};
use super::vision::{self, EmbeddingNames, Grid, Shape, StackShape};
use super::{Batch, Modality};
use crate::error::Result;
use crate::layers::{self, Linear, Norm};
use crate::pooling::PoolingMode;
use crate::weights;

/// `transformers.CLIPVisionConfig`
/// (https://huggingface.co/docs/transformers/model_doc/clip#transformers.CLIPVisionConfig);
/// defaults are transformers' defaults.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    #[serde(default = "d::hidden_size")]
    pub hidden_size: usize,
    #[serde(default = "d::intermediate_size")]
    pub intermediate_size: usize,
    #[serde(default = "d::projection_dim")]
    pub projection_dim: usize,
    #[serde(default = "d::num_hidden_layers")]
    pub num_hidden_layers: usize,
    #[serde(default = "d::num_attention_heads")]
    pub num_attention_heads: usize,
    #[serde(default = "d::num_channels")]
    pub num_channels: usize,
    #[serde(default = "d::image_size")]
    pub image_size: usize,
    #[serde(default = "d::patch_size")]
    pub patch_size: usize,
    #[serde(default = "d::hidden_act")]
    pub hidden_act: String,
    #[serde(default = "d::layer_norm_eps")]
    pub layer_norm_eps: f64,
}

mod d {
    pub fn hidden_size() -> usize {
        768
    }
    pub fn intermediate_size() -> usize {
        3072
    }
    pub fn projection_dim() -> usize {
        512
    }
    pub fn num_hidden_layers() -> usize {
        12
    }
    pub fn num_attention_heads() -> usize {
        12
    }
    pub fn num_channels() -> usize {
        3
    }
    pub fn image_size() -> usize {
        224
    }
    pub fn patch_size() -> usize {
        32
    }
    pub fn hidden_act() -> String {
        "quick_gelu".into()
    }
    pub fn layer_norm_eps() -> f64 {
        1e-5
    }
}

/// The vision tower, with its projection when the checkpoint has one.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Model {
    embeddings: vision::Embeddings,
    pre_norm: Norm,
    stack: layers::Stack,
    post_norm: Norm,
    projection: Option<Linear>,
    hidden: usize,
}

/// The tower under `vb` (`vision_model.*` and `visual_projection` beside it).
pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Model> {
    check_heads(cfg.hidden_size, cfg.num_attention_heads)?;
    let act = super::checks::activation("hidden_act", &cfg.hidden_act)?;
    let h = cfg.hidden_size;
    let root = vb;
    let load = || -> candle_core::Result<Model> {
        let t = root.pp("vision_model");
        let names = EmbeddingNames {
            cls: Some("embeddings.class_embedding"),
            patch: "embeddings.patch_embedding",
            positions: Some("embeddings.position_embedding.weight"),
            registers: None,
            patch_bias: false,
        };
        let shape = Shape {
            hidden: h,
            channels: cfg.num_channels,
            image_size: cfg.image_size,
            patch_size: cfg.patch_size,
        };
        let embeddings = vision::Embeddings::load(&t, &names, &shape, Grid::Fixed)?;
        let eps = cfg.layer_norm_eps;
        let stack = vision::pre_norm_stack(
            &t,
            &vision::CLIP_LAYERS,
            &StackShape {
                hidden: h,
                heads: cfg.num_attention_heads,
                intermediate: cfg.intermediate_size,
                layers: cfg.num_hidden_layers,
                eps,
                biases: vision::Biases::qkv(true),
                activation: act,
            },
            None,
        )?;
        let projection = root
            .contains_tensor("visual_projection.weight")
            .then(|| weights::torch_linear(&root.pp("visual_projection"), cfg.projection_dim, h, false))
            .transpose()?;
        Ok(Model {
            embeddings,
            pre_norm: weights::layer_norm(&t.pp("pre_layrnorm"), h, eps, true)?,
            stack,
            post_norm: weights::layer_norm(&t.pp("post_layernorm"), h, eps, true)?,
            projection,
            hidden: h,
        })
    };
    load().map_err(bad_weights)
}

impl Model {
    /// Width of the pooled output: projection_dim with `visual_projection`, else hidden_size.
    pub fn pooled_size(&self) -> usize {
        self.projection.as_ref().map_or(self.hidden, Linear::outputs)
    }
}

impl super::Config for Config {
    fn dims(&self) -> super::Dims {
        super::Dims::image(self.hidden_size, vision::trained_tokens(self.image_size, self.patch_size))
    }
    /// A CLIP tower's embedding is its pooled, projected output.
    fn default_pooling(&self) -> PoolingMode {
        PoolingMode::Pooler
    }
    fn modality(&self) -> Modality {
        Modality::Image
    }
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn super::Model>> {
        Ok(Box::new(load(vb, self)?))
    }
}

impl super::Model for Model {
    /// last_hidden_state: the stack's output, before `post_layernorm`.
    fn forward(&self, batch: &Batch) -> candle_core::Result<Vec<f32>> {
        vision::forward(&self.embeddings, Some(&self.pre_norm), &self.stack, batch)
    }

    fn pooler_size(&self) -> Option<usize> {
        Some(self.pooled_size())
    }

    /// image_embeds: visual_projection(post_layernorm(last_hidden_state[:, 0])).
    fn pooler(&self, hidden: &[f32], batch: &Batch) -> candle_core::Result<Option<Tensor>> {
        let mut pooled = vision::first_rows(hidden, self.hidden, batch.bounds)?;
        self.post_norm.forward(&mut pooled);
        if let Some(p) = &self.projection {
            pooled = p.apply(&pooled);
        }
        Tensor::from_vec(pooled, (batch.len(), self.pooled_size()), &candle_core::Device::Cpu).map(Some)
    }

    fn image_tokens(&self, height: usize, width: usize) -> std::result::Result<usize, String> {
        self.embeddings.tokens(height, width)
    }
}
