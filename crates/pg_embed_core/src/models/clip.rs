//! CLIP text tower (CLIPTextModel / CLIPTextModelWithProjection, the text side of
//! clip-ViT-* and multilingual CLIP students): causal attention, pooled at the first EOS
//! token and projected by `text_projection`, as transformers computes `text_embeds`. The
//! network is candle-transformers' `ClipTextTransformer`; pooling and projection are here.

use candle_core::{IndexOp, Module, Tensor};
use candle_nn::{Linear, VarBuilder};
use candle_transformers::models::clip::text_model as ct;
use serde::{Deserialize, Serialize};

use super::encoder::{bad_weights, check_heads, unsupported};
use crate::error::Result;

/// `transformers.CLIPTextConfig`
/// (https://huggingface.co/docs/transformers/model_doc/clip#transformers.CLIPTextConfig);
/// defaults are transformers' defaults.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    #[serde(default = "d::vocab_size")]
    pub vocab_size: usize,
    #[serde(default = "d::hidden_size")]
    pub hidden_size: usize,
    #[serde(default = "d::intermediate_size")]
    pub intermediate_size: usize,
    #[serde(default = "d::hidden_size")]
    pub projection_dim: usize,
    #[serde(default = "d::num_hidden_layers")]
    pub num_hidden_layers: usize,
    #[serde(default = "d::num_attention_heads")]
    pub num_attention_heads: usize,
    #[serde(default = "d::max_position_embeddings")]
    pub max_position_embeddings: usize,
    #[serde(default = "d::hidden_act")]
    pub hidden_act: String,
    #[serde(default = "d::layer_norm_eps")]
    pub layer_norm_eps: f64,
    #[serde(default = "d::pad_token_id")]
    pub pad_token_id: u32,
    #[serde(default = "d::eos_token_id")]
    pub eos_token_id: u32,
}

mod d {
    pub fn vocab_size() -> usize {
        49408
    }
    pub fn hidden_size() -> usize {
        512
    }
    pub fn intermediate_size() -> usize {
        2048
    }
    pub fn num_hidden_layers() -> usize {
        12
    }
    pub fn num_attention_heads() -> usize {
        8
    }
    pub fn max_position_embeddings() -> usize {
        77
    }
    pub fn hidden_act() -> String {
        "quick_gelu".into()
    }
    pub fn layer_norm_eps() -> f64 {
        1e-5
    }
    pub fn pad_token_id() -> u32 {
        1
    }
    pub fn eos_token_id() -> u32 {
        49407
    }
}

pub struct Model {
    inner: ct::ClipTextTransformer,
    projection: Option<Linear>,
    eos_token_id: u32,
    /// Width of the pooled output: projection_dim with `text_projection`, else hidden_size.
    pooled_size: usize,
}

pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Model> {
    check_heads(cfg.hidden_size, cfg.num_attention_heads)?;
    if cfg.hidden_act != "quick_gelu" {
        return Err(unsupported("hidden_act", &cfg.hidden_act, "quick_gelu"));
    }
    // candle's CLIP layers fix their LayerNorm epsilon at transformers' default.
    if cfg.layer_norm_eps != 1e-5 {
        return Err(unsupported("layer_norm_eps", &cfg.layer_norm_eps.to_string(), "1e-05"));
    }
    let inner_cfg = ct::ClipTextConfig {
        vocab_size: cfg.vocab_size,
        embed_dim: cfg.hidden_size,
        activation: ct::Activation::QuickGelu,
        intermediate_size: cfg.intermediate_size,
        max_position_embeddings: cfg.max_position_embeddings,
        pad_with: None,
        num_hidden_layers: cfg.num_hidden_layers,
        num_attention_heads: cfg.num_attention_heads,
        projection_dim: cfg.projection_dim,
    };
    let inner = ct::ClipTextTransformer::new(vb.pp("text_model"), &inner_cfg).map_err(bad_weights)?;
    let projection = vb
        .contains_tensor("text_projection.weight")
        .then(|| candle_nn::linear_no_bias(cfg.hidden_size, cfg.projection_dim, vb.pp("text_projection")))
        .transpose()
        .map_err(bad_weights)?;
    let pooled_size = if projection.is_some() { cfg.projection_dim } else { cfg.hidden_size };
    Ok(Model { inner, projection, eos_token_id: cfg.eos_token_id, pooled_size })
}

impl Model {
    pub fn pooled_size(&self) -> usize {
        self.pooled_size
    }

    /// Causal self-attention: with right padding no real token sees a pad, so the padding
    /// mask is not needed. CLIP has no token types.
    pub fn forward(&self, ids: &Tensor, _type_ids: &Tensor, _mask: &Tensor) -> candle_core::Result<Tensor> {
        self.inner.forward_with_mask(ids, usize::MAX)
    }

    /// transformers' pooled output: the hidden state at the first `eos_token_id` of each row
    /// (at the largest id when eos_token_id is 2, as configs from before transformers
    /// #24773 are read), then `text_projection` when the checkpoint has it (`text_embeds`).
    pub fn pooler(&self, hidden: &Tensor, ids: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let rows = ids
            .to_vec2::<u32>()?
            .iter()
            .enumerate()
            .map(|(b, row)| {
                let pos = if self.eos_token_id == 2 {
                    // torch.argmax: the first of the largest.
                    row.iter().enumerate().fold(0, |best, (i, id)| if *id > row[best] { i } else { best })
                } else {
                    row.iter().position(|id| *id == self.eos_token_id).unwrap_or(0)
                };
                hidden.i((b, pos))
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        let pooled = Tensor::stack(&rows, 0)?;
        match &self.projection {
            Some(p) => p.forward(&pooled).map(Some),
            None => Ok(Some(pooled)),
        }
    }
}

impl super::Config for Config {
    fn hidden_size(&self) -> usize {
        self.hidden_size
    }
    fn max_position_embeddings(&self) -> usize {
        self.max_position_embeddings
    }
    fn vocab_size(&self) -> usize {
        self.vocab_size
    }
    fn pad_token_id(&self) -> u32 {
        self.pad_token_id
    }
    /// A CLIP text tower's embedding is its pooled, projected output.
    fn default_pooling(&self) -> crate::pooling::PoolingMode {
        crate::pooling::PoolingMode::Pooler
    }
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn super::Model>> {
        Ok(Box::new(load(vb, self)?))
    }
}

impl super::Model for Model {
    /// One sequence at a time through the padded forward pass.
    fn forward(&self, batch: &super::Batch) -> candle_core::Result<Vec<f32>> {
        super::one_by_one(batch, |ids, types, mask| Model::forward(self, ids, types, mask))
    }

    fn pooler_size(&self) -> Option<usize> {
        Some(self.pooled_size)
    }

    fn pooler(&self, hidden: &[f32], batch: &super::Batch) -> candle_core::Result<Option<Tensor>> {
        let width = hidden.len() / batch.tokens().max(1);
        let device = candle_core::Device::Cpu;
        let mut rows = Vec::with_capacity(batch.len());
        for i in 0..batch.len() {
            let range = batch.sequence(i);
            let len = range.len();
            let states = Tensor::from_slice(&hidden[range.start * width..range.end * width], (1, len, width), &device)?;
            let ids = Tensor::from_slice(&batch.ids[range], (1, len), &device)?;
            if let Some(row) = Model::pooler(self, &states, &ids)? {
                rows.push(row);
            }
        }
        if rows.is_empty() {
            return Ok(None);
        }
        Tensor::cat(&rows, 0).map(Some)
    }
}
