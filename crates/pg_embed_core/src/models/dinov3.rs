//! DINOv3 (DINOv3ViTModel): patches behind a [CLS] token and `num_register_tokens` register
//! tokens, no position table: 2-D rotary positions over each image's patch grid (the patch
//! centres normalised to [-1, 1], so any grid works), applied to the patch tokens' queries
//! and keys and not to [CLS] and the registers; pre-LayerNorm layers with LayerScale, a plain
//! or gated MLP, a final LayerNorm. `pooling` = `cls` (pooler_output, the normed [CLS]; the
//! default) or `mean` (the mean of the patch tokens, [CLS] and registers left out), or both
//! concatenated.

use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::checks::{bad_weights, check_heads};
use super::vision::{self, Biases, EmbeddingNames, Grid, LayerNames, Shape, StackShape};
use super::{Batch, Modality};
use crate::error::{Error, Result};
use crate::layers;
use crate::pooling::PoolingMode;
use crate::prepared::Floats;
use crate::weights;

/// `transformers.DINOv3ViTConfig`
/// (https://huggingface.co/docs/transformers/model_doc/dinov3#transformers.DINOv3ViTConfig);
/// defaults are transformers' defaults. The position augmentations (`pos_embed_shift`,
/// `pos_embed_jitter`, `pos_embed_rescale`) and `drop_path_rate` act in training only.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    #[serde(default = "d::hidden_size")]
    pub hidden_size: usize,
    #[serde(default = "d::intermediate_size")]
    pub intermediate_size: usize,
    #[serde(default = "d::num_hidden_layers")]
    pub num_hidden_layers: usize,
    #[serde(default = "d::num_attention_heads")]
    pub num_attention_heads: usize,
    #[serde(default = "d::hidden_act")]
    pub hidden_act: String,
    #[serde(default = "d::layer_norm_eps")]
    pub layer_norm_eps: f64,
    #[serde(default = "d::rope_theta")]
    pub rope_theta: f64,
    #[serde(default = "d::image_size")]
    pub image_size: usize,
    #[serde(default = "d::patch_size")]
    pub patch_size: usize,
    #[serde(default = "d::num_channels")]
    pub num_channels: usize,
    #[serde(default = "d::yes")]
    pub query_bias: bool,
    #[serde(default)]
    pub key_bias: bool,
    #[serde(default = "d::yes")]
    pub value_bias: bool,
    #[serde(default = "d::yes")]
    pub proj_bias: bool,
    #[serde(default = "d::yes")]
    pub mlp_bias: bool,
    #[serde(default)]
    pub use_gated_mlp: bool,
    #[serde(default)]
    pub num_register_tokens: usize,
}

mod d {
    pub fn hidden_size() -> usize {
        384
    }
    pub fn intermediate_size() -> usize {
        1536
    }
    pub fn num_hidden_layers() -> usize {
        12
    }
    pub fn num_attention_heads() -> usize {
        6
    }
    pub fn hidden_act() -> String {
        "gelu".into()
    }
    pub fn layer_norm_eps() -> f64 {
        1e-5
    }
    pub fn rope_theta() -> f64 {
        100.0
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
    pub fn yes() -> bool {
        true
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Model {
    embeddings: vision::Embeddings,
    stack: layers::Stack,
    /// 1 / rope_theta^(4i / head_dim) for i < head_dim / 4, as transformers computes it.
    inv_freq: Floats,
}

/// DINOv3ViTLayer's weight names (`layer.{i}`, as save_pretrained writes them).
const LAYERS: LayerNames = LayerNames {
    layers: "layer",
    query: "attention.q_proj",
    key: "attention.k_proj",
    value: "attention.v_proj",
    out: "attention.o_proj",
    norm_before: "norm1",
    norm_after: "norm2",
    up: "mlp.up_proj",
    down: "mlp.down_proj",
    gate: None,
    layer_scale: Some(("layer_scale1", "layer_scale2")),
};

const EMBEDDINGS: EmbeddingNames = EmbeddingNames {
    cls: Some("embeddings.cls_token"),
    registers: Some("embeddings.register_tokens"),
    patch: "embeddings.patch_embeddings",
    positions: None,
    patch_bias: true,
};

pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Model> {
    check_heads(cfg.hidden_size, cfg.num_attention_heads)?;
    let head_dim = cfg.hidden_size / cfg.num_attention_heads;
    if head_dim % 4 != 0 {
        // Two axes, each rotating half of a head's two halves.
        return Err(Error::invalid_file(
            "config.json",
            format!("2-D rotary positions need a head width that is a multiple of 4, not {head_dim}"),
        ));
    }
    if !(cfg.rope_theta.is_finite() && cfg.rope_theta > 0.0) {
        return Err(Error::invalid_file("config.json", format!("rope_theta {} is not positive", cfg.rope_theta)));
    }
    let act = super::checks::activation("hidden_act", &cfg.hidden_act)?;
    let h = cfg.hidden_size;
    let load = || -> candle_core::Result<Model> {
        let shape = Shape {
            hidden: h,
            channels: cfg.num_channels,
            image_size: cfg.image_size,
            patch_size: cfg.patch_size,
        };
        let embeddings = vision::Embeddings::load(&vb, &EMBEDDINGS, &shape, Grid::Rotary)?;
        if embeddings.prefix() != 1 + cfg.num_register_tokens {
            candle_core::bail!(
                "{} register tokens, num_register_tokens is {}",
                embeddings.prefix() - 1,
                cfg.num_register_tokens
            );
        }
        let names = LayerNames { gate: cfg.use_gated_mlp.then_some("mlp.gate_proj"), ..LAYERS };
        let stack = vision::pre_norm_stack(
            &vb,
            &names,
            &StackShape {
                hidden: h,
                heads: cfg.num_attention_heads,
                intermediate: cfg.intermediate_size,
                layers: cfg.num_hidden_layers,
                eps: cfg.layer_norm_eps,
                biases: Biases {
                    query: cfg.query_bias,
                    key: cfg.key_bias,
                    value: cfg.value_bias,
                    out: cfg.proj_bias,
                    mlp: cfg.mlp_bias,
                },
                activation: act,
            },
            Some(weights::layer_norm(&vb.pp("norm"), h, cfg.layer_norm_eps, true)?),
        )?;
        Ok(Model { embeddings, stack, inv_freq: inv_freq(head_dim, cfg.rope_theta).into() })
    };
    load().map_err(bad_weights)
}

/// DINOv3ViTRopePositionEmbedding's `1 / base ** arange(0, 1, 4 / head_dim)` in float32 (the
/// power in float64, rounded once).
fn inv_freq(head_dim: usize, base: f64) -> Vec<f32> {
    let step = 4.0 / head_dim as f64;
    (0..head_dim / 4)
        .map(|i| {
            let exponent = (i as f64 * step) as f32;
            1.0 / base.powf(f64::from(exponent)) as f32
        })
        .collect()
}

impl Model {
    /// The rotary table of a batch and each token's row in it: row 0 leaves a token as it is
    /// ([CLS] and registers); then, per image, a row per patch. A patch at grid (y, x) of
    /// rows x cols has the centre (2 (y + 0.5) / rows - 1, 2 (x + 0.5) / cols - 1); its
    /// angles are 2 pi * centre * inv_freq, the y axis's then the x axis's (half a head),
    /// all in float32 as transformers computes them.
    fn rotary(&self, images: &[super::Pixels]) -> (Vec<f32>, Vec<f32>, Vec<u32>) {
        let quarter = self.inv_freq.len();
        let half = 2 * quarter;
        let prefix = self.embeddings.prefix();
        let (mut cos, mut sin) = (vec![1.0; half], vec![0.0; half]);
        let mut rows = Vec::new();
        let two_pi = (2.0 * std::f64::consts::PI) as f32;
        for image in images {
            let (grid_rows, grid_cols) = self.embeddings.grid_of(image.height, image.width);
            let first = (cos.len() / half) as u32;
            rows.extend(std::iter::repeat_n(0, prefix));
            rows.extend(first..first + (grid_rows * grid_cols) as u32);
            let centre = |i: usize, n: usize| 2.0 * ((i as f32 + 0.5) / n as f32) - 1.0;
            for y in 0..grid_rows {
                for x in 0..grid_cols {
                    for c in [centre(y, grid_rows), centre(x, grid_cols)] {
                        for f in self.inv_freq.iter() {
                            let angle = two_pi * c * f;
                            cos.push(angle.cos());
                            sin.push(angle.sin());
                        }
                    }
                }
            }
        }
        (cos, sin, rows)
    }
}

impl super::Config for Config {
    /// The tokens of an image at the trained size (any other grid works too).
    fn dims(&self) -> super::Dims {
        let tokens = vision::trained_tokens(self.image_size, self.patch_size) + self.num_register_tokens;
        super::Dims::image(self.hidden_size, tokens)
    }
    /// pooler_output: the normed [CLS].
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
        if !batch.is_image() {
            candle_core::bail!("this model takes images, not text");
        }
        let lengths = batch.lengths()?;
        let mut x = self.embeddings.forward(batch.images, &lengths)?;
        let (cos, sin, rows) = self.rotary(batch.images);
        self.stack.try_forward_rotated(&mut x, &lengths, &cos, &sin, &rows)?;
        Ok(x)
    }

    fn image_tokens(&self, height: usize, width: usize) -> std::result::Result<usize, String> {
        self.embeddings.tokens(height, width)
    }

    /// The mean is over the patch tokens, as the DINOv3 model card's patch features
    /// (`last_hidden_state[:, 1 + num_register_tokens:]`).
    fn summary_tokens(&self) -> usize {
        self.embeddings.prefix()
    }
}
