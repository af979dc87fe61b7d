//! SigLIP 2's NaFlex vision tower (Siglip2VisionModel, the image side of Siglip2Model and
//! Siglip2ForImageClassification): each image at its own size (the processor's
//! `max_num_patches` rule), cut into patches flattened row by row with the channels last and
//! projected by a linear layer; the learned square position table resized to the image's
//! patch grid as transformers does it (separable triangle weights, widened when shrinking:
//! bilinear with antialiasing); then SigLIP's layers, `post_layernorm` and the
//! attention-pooling head.
//!
//! transformers pads every image to `max_num_patches` patches and masks the padding; pg_embed
//! packs the images' own patches, which gives the same states (a masked key is seen by no
//! query) without the padding.

use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::checks::bad_weights;
use super::siglip_vision::{self, Encoder, EncoderShape};
use super::{Modality, Pixels};
use crate::error::Result;
use crate::layers::Linear;
use crate::pooling::PoolingMode;
use crate::prepared::Floats;
use crate::weights;

/// `transformers.Siglip2VisionConfig`
/// (https://huggingface.co/docs/transformers/model_doc/siglip2#transformers.Siglip2VisionConfig);
/// defaults are transformers' defaults.
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
    #[serde(default = "d::num_channels")]
    pub num_channels: usize,
    #[serde(default = "d::patch_size")]
    pub patch_size: usize,
    #[serde(default = "d::hidden_act")]
    pub hidden_act: String,
    #[serde(default = "d::layer_norm_eps")]
    pub layer_norm_eps: f64,
    #[serde(default = "d::vision_use_head")]
    pub vision_use_head: bool,
    /// The position table's rows: a square grid.
    #[serde(default = "d::num_patches")]
    pub num_patches: usize,
}

mod d {
    pub fn hidden_size() -> usize {
        768
    }
    pub fn intermediate_size() -> usize {
        3072
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
    pub fn patch_size() -> usize {
        16
    }
    pub fn hidden_act() -> String {
        "gelu_pytorch_tanh".into()
    }
    pub fn layer_norm_eps() -> f64 {
        1e-6
    }
    pub fn vision_use_head() -> bool {
        true
    }
    pub fn num_patches() -> usize {
        256
    }
}

/// Patches and resized positions.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Embeddings {
    /// [hidden, patch * patch * channels]: inputs in (row, column, channel) order.
    patch: Linear,
    patch_size: usize,
    channels: usize,
    /// [side * side, hidden], the trained grid row by row.
    positions: Floats,
    side: usize,
}

/// Per output index along one axis of `size`, the weights of the `grid` source rows:
/// triangles 1 - |j - center| / support, support = max(1, grid / size), normalised, in
/// float32 as transformers' `resize_positional_embeddings` computes them.
fn axis_weights(grid: usize, size: usize) -> Vec<f32> {
    let scale = grid as f32 / size as f32;
    let support = scale.max(1.0);
    let mut out = Vec::with_capacity(size * grid);
    for i in 0..size {
        let center = (i as f32 + 0.5) * scale - 0.5;
        let row: Vec<f32> = (0..grid).map(|j| (1.0 - (j as f32 - center).abs() / support).max(0.0)).collect();
        let sum: f32 = row.iter().sum();
        out.extend(row.iter().map(|w| w / sum));
    }
    out
}

impl siglip_vision::Patches for Embeddings {
    fn embed(&self, images: &[Pixels], lengths: &[usize]) -> candle_core::Result<Vec<f32>> {
        self.forward(images, lengths)
    }
    fn tokens(&self, height: usize, width: usize) -> std::result::Result<usize, String> {
        Embeddings::tokens(self, height, width)
    }
}

impl Embeddings {
    fn grid_of(&self, height: usize, width: usize) -> (usize, usize) {
        (height / self.patch_size, width / self.patch_size)
    }

    fn tokens(&self, height: usize, width: usize) -> std::result::Result<usize, String> {
        let (rows, cols) = self.grid_of(height, width);
        if rows == 0 || cols == 0 {
            return Err(format!(
                "an image of {height}x{width} pixels is smaller than one {0}x{0} patch",
                self.patch_size
            ));
        }
        Ok(rows * cols)
    }

    /// The position table resized to `rows` x `cols`: [rows * cols, hidden].
    fn positions_for(&self, rows: usize, cols: usize) -> Vec<f32> {
        let (g, h) = (self.side, self.positions.len() / (self.side * self.side).max(1));
        let (wy, wx) = (axis_weights(g, rows), axis_weights(g, cols));
        let mut out = vec![0f32; rows * cols * h];
        for y in 0..rows {
            for x in 0..cols {
                let cell = &mut out[(y * cols + x) * h..][..h];
                for jy in 0..g {
                    for jx in 0..g {
                        let w = wy[y * g + jy] * wx[x * g + jx];
                        if w != 0.0 {
                            let source = &self.positions[(jy * g + jx) * h..][..h];
                            cell.iter_mut().zip(source).for_each(|(o, s)| *o += w * s);
                        }
                    }
                }
            }
        }
        out
    }

    fn forward(&self, images: &[Pixels], lengths: &[usize]) -> candle_core::Result<Vec<f32>> {
        let (p, c) = (self.patch_size, self.channels);
        let mut patches = Vec::new();
        let mut grids = Vec::with_capacity(images.len());
        for (image, &len) in images.iter().zip(lengths) {
            let plane = image.height * image.width;
            if image.data.len() != c * plane {
                candle_core::bail!("an image of {} values is not {c}x{}x{}", image.data.len(), image.height, image.width);
            }
            if self.tokens(image.height, image.width).map_err(candle_core::Error::Msg)? != len {
                candle_core::bail!("an image of {}x{} in a sequence of {len}", image.height, image.width);
            }
            let (rows, cols) = self.grid_of(image.height, image.width);
            grids.push((rows, cols));
            for gy in 0..rows {
                for gx in 0..cols {
                    for py in 0..p {
                        for px in 0..p {
                            let at = (gy * p + py) * image.width + gx * p + px;
                            patches.extend((0..c).map(|ch| image.data[ch * plane + at]));
                        }
                    }
                }
            }
        }
        let mut x = self.patch.apply(&patches);
        let mut first = 0;
        for (rows, cols) in grids {
            let positions = self.positions_for(rows, cols);
            x[first..first + positions.len()].iter_mut().zip(&positions).for_each(|(a, b)| *a += b);
            first += positions.len();
        }
        Ok(x)
    }
}

/// SigLIP 2's NaFlex tower.
pub type Model = siglip_vision::Tower<Embeddings>;

pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Model> {
    let (h, p, c) = (cfg.hidden_size, cfg.patch_size, cfg.num_channels);
    let side = (cfg.num_patches as f64).sqrt() as usize;
    let t = siglip_vision::root(vb);
    let encoder = Encoder::load(
        &t,
        &EncoderShape {
            hidden: h,
            heads: cfg.num_attention_heads,
            intermediate: cfg.intermediate_size,
            layers: cfg.num_hidden_layers,
            hidden_act: &cfg.hidden_act,
            eps: cfg.layer_norm_eps,
            use_head: cfg.vision_use_head,
        },
    )?;
    let load = || -> candle_core::Result<Embeddings> {
        if p == 0 || side * side != cfg.num_patches {
            candle_core::bail!("num_patches {} is not a square grid of patches of {p}", cfg.num_patches);
        }
        let e = t.pp("embeddings");
        let positions = e.get((cfg.num_patches, h), "position_embedding.weight")?.flatten_all()?.to_vec1::<f32>()?;
        Ok(Embeddings {
            patch: weights::torch_linear(&e.pp("patch_embedding"), h, c * p * p, true)?,
            patch_size: p,
            channels: c,
            positions: positions.into(),
            side,
        })
    };
    Ok(siglip_vision::Tower { embeddings: load().map_err(bad_weights)?, encoder })
}

impl super::Config for Config {
    /// The trained grid's patches (images may have other grids).
    fn dims(&self) -> super::Dims {
        super::Dims::image(self.hidden_size, self.num_patches)
    }
    fn default_pooling(&self) -> PoolingMode {
        if self.vision_use_head {
            PoolingMode::Pooler
        } else {
            PoolingMode::Mean
        }
    }
    fn modality(&self) -> Modality {
        Modality::Image
    }
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn super::Model>> {
        Ok(Box::new(load(vb, self)?))
    }
}

