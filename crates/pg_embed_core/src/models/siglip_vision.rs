//! SigLIP's vision tower (SiglipVisionModel, and the image side of SiglipModel,
//! SiglipForImageClassification and SigLIP 2's fixed-resolution checkpoints): patches with
//! bias and learned positions, no [CLS] token, pre-LayerNorm layers, `post_layernorm` over
//! every token (transformers' `last_hidden_state`), and the attention-pooling head (MAP:
//! one learned probe attends over the tokens, then a residual MLP) as `pooler_output`,
//! what `get_image_features` returns.

use candle_core::Tensor;
use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::checks::{bad_weights, check_heads};
use super::vision::{self, EmbeddingNames, Grid, Shape, StackShape};
use super::{Batch, Modality, Pixels};
use crate::error::Result;
use crate::layers::{self, Activation, Linear, Norm};
use crate::pooling::PoolingMode;
use crate::prepared::Floats;
use crate::weights;

/// `transformers.SiglipVisionConfig`
/// (https://huggingface.co/docs/transformers/model_doc/siglip#transformers.SiglipVisionConfig);
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
    #[serde(default = "d::image_size")]
    pub image_size: usize,
    #[serde(default = "d::patch_size")]
    pub patch_size: usize,
    #[serde(default = "d::hidden_act")]
    pub hidden_act: String,
    #[serde(default = "d::layer_norm_eps")]
    pub layer_norm_eps: f64,
    #[serde(default = "d::vision_use_head")]
    pub vision_use_head: bool,
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
    pub fn image_size() -> usize {
        224
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
}

/// SiglipMultiheadAttentionPoolingHead: `probe` attends over a sequence's tokens
/// (torch's MultiheadAttention: packed in-projection, scaled dot products, out_proj), then
/// x + mlp(layernorm(x)).
#[derive(serde::Serialize, serde::Deserialize)]
pub struct AttentionPool {
    /// The probe's query, in_proj's first third applied to it once: [hidden].
    query: Floats,
    /// in_proj's key and value thirds side by side: [2 hidden, hidden].
    key_value: Linear,
    out: Linear,
    norm: Norm,
    up: Linear,
    down: Linear,
    activation: Activation,
    heads: usize,
}

impl AttentionPool {
    /// The head under `vb` (`head.*`).
    pub fn load(vb: &VarBuilder, h: usize, ff: usize, heads: usize, eps: f64, activation: Activation) -> candle_core::Result<Self> {
        let probe = vb.get((1, 1, h), "probe")?.flatten_all()?.to_vec1::<f32>()?;
        let a = vb.pp("attention");
        let weight = a.get((3 * h, h), "in_proj_weight")?.flatten_all()?.to_vec1::<f32>()?;
        let bias = a.get(3 * h, "in_proj_bias")?.to_vec1::<f32>()?;
        let query_proj = Linear::from_torch(weight[..h * h].to_vec(), Some(bias[..h].to_vec()), h, h)?;
        let query = query_proj.apply(&probe);
        Ok(AttentionPool {
            query: query.into(),
            key_value: Linear::from_torch(weight[h * h..].to_vec(), Some(bias[h..].to_vec()), 2 * h, h)?,
            out: weights::torch_linear(&a.pp("out_proj"), h, h, true)?,
            norm: weights::layer_norm(&vb.pp("layernorm"), h, eps, true)?,
            up: weights::torch_linear(&vb.pp("mlp.fc1"), ff, h, true)?,
            down: weights::torch_linear(&vb.pp("mlp.fc2"), h, ff, true)?,
            activation,
            heads,
        })
    }

    /// The pooled row [sequences, hidden] of every sequence of `hidden` [tokens, hidden]
    /// (sequence i at bounds[i]..bounds[i + 1]).
    pub fn forward(&self, hidden: &[f32], bounds: &[usize]) -> candle_core::Result<Vec<f32>> {
        let h = self.query.len();
        let tokens = hidden.len() / h.max(1);
        layers::lengths_of(bounds, tokens)?;
        let kv = self.key_value.apply(hidden);
        let d = h / self.heads;
        let scale = 1.0 / (d as f32).sqrt();
        let mut context = vec![0f32; bounds.len().saturating_sub(1) * h];
        for (s, w) in bounds.windows(2).enumerate() {
            if w[1] <= w[0] {
                candle_core::bail!("an empty sequence has no pooled output");
            }
            for head in 0..self.heads {
                let q = &self.query[head * d..(head + 1) * d];
                let mut scores: Vec<f32> = (w[0]..w[1])
                    .map(|t| q.iter().zip(&kv[t * 2 * h + head * d..][..d]).map(|(a, b)| a * b).sum::<f32>() * scale)
                    .collect();
                let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                scores.iter_mut().for_each(|x| *x = (*x - max).exp());
                let sum: f32 = scores.iter().sum();
                let out = &mut context[s * h + head * d..][..d];
                for (t, p) in (w[0]..w[1]).zip(&scores) {
                    let v = &kv[t * 2 * h + h + head * d..][..d];
                    out.iter_mut().zip(v).for_each(|(o, v)| *o += p / sum * v);
                }
            }
        }
        let mut x = self.out.apply(&context);
        let mut inner = x.clone();
        self.norm.forward(&mut inner);
        let mut inner = self.up.apply(&inner);
        self.activation.apply(&mut inner);
        let down = self.down.apply(&inner);
        x.iter_mut().zip(&down).for_each(|(a, b)| *a += b);
        Ok(x)
    }
}

/// What SigLIP's vision towers (fixed-size and NaFlex) share past their embeddings: the
/// layers, `post_layernorm` and the attention-pooling head when the checkpoint has one.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Encoder {
    stack: layers::Stack,
    head: Option<AttentionPool>,
}

/// The sizes of an [`Encoder`], from either tower's config.
pub struct EncoderShape<'a> {
    pub hidden: usize,
    pub heads: usize,
    pub intermediate: usize,
    pub layers: usize,
    pub hidden_act: &'a str,
    pub eps: f64,
    pub use_head: bool,
}

/// A tower's root: `vision_model.*` in a dual encoder and a classification model (and in a
/// vision model as transformers 4 saved it), bare names as transformers 5 saves the vision
/// model alone.
pub fn root(vb: VarBuilder) -> VarBuilder {
    if vb.contains_tensor("vision_model.embeddings.patch_embedding.weight") {
        vb.pp("vision_model")
    } else {
        vb
    }
}

impl Encoder {
    /// The encoder under the tower's `root`.
    pub fn load(root: &VarBuilder, shape: &EncoderShape) -> Result<Self> {
        check_heads(shape.hidden, shape.heads)?;
        let act = super::checks::activation("hidden_act", shape.hidden_act)?;
        let (h, eps) = (shape.hidden, shape.eps);
        let load = || -> candle_core::Result<Encoder> {
            let stack = vision::pre_norm_stack(
                root,
                &vision::CLIP_LAYERS,
                &StackShape {
                    hidden: h,
                    heads: shape.heads,
                    intermediate: shape.intermediate,
                    layers: shape.layers,
                    eps,
                    biases: vision::Biases::qkv(true),
                    activation: act,
                },
                Some(weights::layer_norm(&root.pp("post_layernorm"), h, eps, true)?),
            )?;
            let head = shape
                .use_head
                .then(|| AttentionPool::load(&root.pp("head"), h, shape.intermediate, shape.heads, eps, act))
                .transpose()?;
            Ok(Encoder { stack, head })
        };
        load().map_err(bad_weights)
    }

    /// last_hidden_state of the embedded tokens `x` (sequences of `lengths`).
    pub fn forward(&self, x: &mut [f32], lengths: &[usize]) -> candle_core::Result<()> {
        self.stack.try_forward(x, lengths)
    }

    /// The head's width, if the tower has its head.
    pub fn pooler_size(&self) -> Option<usize> {
        self.head.as_ref().map(|h| h.query.len())
    }

    /// pooler_output: the attention-pooling head over each sequence's tokens.
    pub fn pooler(&self, hidden: &[f32], batch: &Batch) -> candle_core::Result<Option<Tensor>> {
        let (Some(head), Some(width)) = (&self.head, self.pooler_size()) else { return Ok(None) };
        Tensor::from_vec(head.forward(hidden, batch.bounds)?, (batch.len(), width), &candle_core::Device::Cpu).map(Some)
    }
}

/// What a tower's embeddings give: the packed tokens of its images, and how many tokens an
/// image of a size makes (SigLIP's fixed grid, or SigLIP 2's NaFlex patches).
pub trait Patches {
    fn embed(&self, images: &[Pixels], lengths: &[usize]) -> candle_core::Result<Vec<f32>>;
    fn tokens(&self, height: usize, width: usize) -> std::result::Result<usize, String>;
}

impl Patches for vision::Embeddings {
    fn embed(&self, images: &[Pixels], lengths: &[usize]) -> candle_core::Result<Vec<f32>> {
        self.forward(images, lengths)
    }
    fn tokens(&self, height: usize, width: usize) -> std::result::Result<usize, String> {
        vision::Embeddings::tokens(self, height, width)
    }
}

/// A vision tower: embeddings, then the [`Encoder`].
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Tower<E> {
    pub(super) embeddings: E,
    pub(super) encoder: Encoder,
}

/// SigLIP's fixed-size tower.
pub type Model = Tower<vision::Embeddings>;

pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Model> {
    let t = root(vb);
    let names = EmbeddingNames {
        cls: None,
        patch: "embeddings.patch_embedding",
        registers: None,
        positions: Some("embeddings.position_embedding.weight"),
        patch_bias: true,
    };
    let shape = Shape {
        hidden: cfg.hidden_size,
        channels: cfg.num_channels,
        image_size: cfg.image_size,
        patch_size: cfg.patch_size,
    };
    let encoder = Encoder::load(&t, &cfg.encoder_shape())?;
    let embeddings = vision::Embeddings::load(&t, &names, &shape, Grid::Fixed).map_err(bad_weights)?;
    Ok(Model { embeddings, encoder })
}

impl Config {
    fn encoder_shape(&self) -> EncoderShape<'_> {
        EncoderShape {
            hidden: self.hidden_size,
            heads: self.num_attention_heads,
            intermediate: self.intermediate_size,
            layers: self.num_hidden_layers,
            hidden_act: &self.hidden_act,
            eps: self.layer_norm_eps,
            use_head: self.vision_use_head,
        }
    }
}

impl super::Config for Config {
    fn dims(&self) -> super::Dims {
        super::Dims::image(self.hidden_size, vision::trained_patches(self.image_size, self.patch_size))
    }
    /// `get_image_features`: the attention-pooling head; the mean of the tokens without it.
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

impl<E: Patches + Send + Sync + serde::Serialize> super::Model for Tower<E> {
    /// last_hidden_state: the stack's output through `post_layernorm`.
    fn forward(&self, batch: &Batch) -> candle_core::Result<Vec<f32>> {
        if !batch.is_image() {
            candle_core::bail!("this model takes images, not text");
        }
        let lengths = batch.lengths()?;
        let mut x = self.embeddings.embed(batch.images, &lengths)?;
        self.encoder.forward(&mut x, &lengths)?;
        Ok(x)
    }

    fn pooler_size(&self) -> Option<usize> {
        self.encoder.pooler_size()
    }

    /// pooler_output: the attention-pooling head over every token.
    fn pooler(&self, hidden: &[f32], batch: &Batch) -> candle_core::Result<Option<Tensor>> {
        self.encoder.pooler(hidden, batch)
    }

    fn image_tokens(&self, height: usize, width: usize) -> std::result::Result<usize, String> {
        self.embeddings.tokens(height, width)
    }
}
