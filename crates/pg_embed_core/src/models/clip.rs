//! CLIP text tower (CLIPTextModel / CLIPTextModelWithProjection, the text side of
//! clip-ViT-* and multilingual CLIP students): causal attention, pooled at the first EOS
//! token and projected by `text_projection`, as transformers computes `text_embeds`:
//! pre-LayerNorm layers with QuickGELU and a final LayerNorm, on the layer library's stack
//! over packed tokens.

use candle_core::Tensor;
use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::checks::{bad_weights, check_heads, unsupported};
use crate::error::Result;
use crate::layers;
use crate::weights;

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

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Model {
    token: layers::Embedding,
    position: layers::Embedding,
    stack: layers::Stack,
    projection: Option<layers::Linear>,
    eos_token_id: u32,
    /// Width of the pooled output: projection_dim with `text_projection`, else hidden_size.
    pooled_size: usize,
}

/// transformers' CLIP LayerNorm epsilon (the only one accepted, see `load`).
const EPS: f64 = 1e-5;

pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Model> {
    check_heads(cfg.hidden_size, cfg.num_attention_heads)?;
    if cfg.hidden_act != "quick_gelu" {
        return Err(unsupported("hidden_act", &cfg.hidden_act, "quick_gelu"));
    }
    // The CLIP layers were written with transformers' default LayerNorm epsilon.
    if cfg.layer_norm_eps != 1e-5 {
        return Err(unsupported("layer_norm_eps", &cfg.layer_norm_eps.to_string(), "1e-05"));
    }
    let (h, ff) = (cfg.hidden_size, cfg.intermediate_size);
    let t = vb.pp("text_model");
    let load = || -> candle_core::Result<(layers::Embedding, layers::Embedding, layers::Stack)> {
        let e = t.pp("embeddings");
        let table =
            |vb: VarBuilder, rows: usize| layers::Embedding::from_tensor(&vb.get((rows, h), "weight")?);
        let token = table(e.pp("token_embedding"), cfg.vocab_size)?;
        let position = table(e.pp("position_embedding"), cfg.max_position_embeddings)?;
        let torch = |vb: VarBuilder, o: usize, i: usize| weights::torch_parts(&vb, o, i, true);
        let lin = |vb: VarBuilder, o: usize, i: usize| weights::torch_linear(&vb, o, i, true);
        let norm = |vb: VarBuilder| weights::layer_norm(&vb, h, EPS, true);
        let stack = (0..cfg.num_hidden_layers)
            .map(|i| {
                let l = t.pp(format!("encoder.layers.{i}"));
                let a = l.pp("self_attn");
                let (k, v, q) = (
                    torch(a.pp("k_proj"), h, h)?,
                    torch(a.pp("v_proj"), h, h)?,
                    torch(a.pp("q_proj"), h, h)?,
                );
                let qkv = layers::Linear::side_by_side(vec![q, k, v], h)?;
                let attention_out = lin(a.pp("out_proj"), h, h)?;
                let attention_norm = norm(l.pp("layer_norm1"))?;
                let mlp = layers::Mlp::Plain {
                    up: lin(l.pp("mlp.fc1"), ff, h)?,
                    down: lin(l.pp("mlp.fc2"), h, ff)?,
                };
                let output_norm = norm(l.pp("layer_norm2"))?;
                Ok(layers::Layer {
                    qkv,
                    attention_out,
                    attention_norm,
                    mlp,
                    output_norm,
                    qk_norms: None,
                    post_norms: None,
                })
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        let spec = layers::StackSpec {
            norm_position: layers::NormPosition::Pre,
            final_norm: Some(norm(t.pp("final_layer_norm"))?),
            causal: true,
            ..layers::StackSpec::post_norm(h, cfg.num_attention_heads, layers::Activation::QuickGelu)
        };
        Ok((token, position, layers::Stack::new(stack, spec)?))
    };
    let (token, position, stack) = load().map_err(bad_weights)?;
    let projection = vb
        .contains_tensor("text_projection.weight")
        .then(|| weights::torch_linear(&vb.pp("text_projection"), cfg.projection_dim, h, false))
        .transpose()
        .map_err(bad_weights)?;
    let pooled_size = if projection.is_some() { cfg.projection_dim } else { cfg.hidden_size };
    Ok(Model { token, position, stack, projection, eos_token_id: cfg.eos_token_id, pooled_size })
}

impl Model {
    pub fn pooled_size(&self) -> usize {
        self.pooled_size
    }

    /// The last hidden states [tokens, hidden] of a packed batch: `ids` of every sequence
    /// end to end, sequence i at tokens bounds[i]..bounds[i + 1], positions 0.. within
    /// each. Causal self-attention. CLIP has no token types.
    pub fn forward_packed(
        &self,
        ids: &[u32],
        _type_ids: &[u32],
        bounds: &[usize],
    ) -> candle_core::Result<Vec<f32>> {
        let lengths = layers::lengths_of(bounds, ids.len())?;
        if let Some(len) = lengths.iter().find(|l| **l > self.position.rows()) {
            candle_core::bail!(
                "a sequence of {len} tokens is longer than the {} positions",
                self.position.rows()
            );
        }
        let mut x = self.token.gather(ids)?;
        self.position.add(lengths.iter().flat_map(|&len| 0..len as u32), &mut x)?;
        self.stack.try_forward(&mut x, &lengths)?;
        Ok(x)
    }

    /// Where a sequence is pooled: at its first `eos_token_id` (at the largest id when
    /// eos_token_id is 2, as configs from before transformers #24773 are read).
    fn eos_position(&self, row: &[u32]) -> usize {
        if self.eos_token_id == 2 {
            // torch.argmax: the first of the largest.
            row.iter().enumerate().fold(0, |best, (i, id)| if *id > row[best] { i } else { best })
        } else {
            row.iter().position(|id| *id == self.eos_token_id).unwrap_or(0)
        }
    }

    /// `rows` pooled hidden states, [rows, hidden], through `text_projection` when the
    /// checkpoint has it.
    fn project(
        &self,
        pooled: Vec<f32>,
        rows: usize,
        device: &candle_core::Device,
    ) -> candle_core::Result<Tensor> {
        match &self.projection {
            Some(p) => Tensor::from_vec(p.apply(&pooled), (rows, p.outputs()), device),
            None => Tensor::from_vec(pooled, (rows, self.token.width()), device),
        }
    }

    /// transformers' pooled output (`text_embeds`) [sequences, pooled size] of a packed
    /// batch's hidden states (from `forward_packed`): each sequence's hidden state at its
    /// `eos_position`, then `text_projection` when the checkpoint has it.
    pub fn pooler_packed(
        &self,
        hidden: &[f32],
        ids: &[u32],
        bounds: &[usize],
    ) -> candle_core::Result<Option<Tensor>> {
        let lengths = layers::lengths_of(bounds, ids.len())?;
        let h = self.token.width();
        if hidden.len() != ids.len() * h {
            candle_core::bail!("{} hidden values for {} tokens of width {h}", hidden.len(), ids.len());
        }
        let mut pooled = Vec::with_capacity(lengths.len() * h);
        for (&start, &len) in bounds.iter().zip(&lengths) {
            if len == 0 {
                candle_core::bail!("an empty sequence has no pooled output");
            }
            let at = start + self.eos_position(&ids[start..start + len]);
            pooled.extend_from_slice(&hidden[at * h..(at + 1) * h]);
        }
        self.project(pooled, lengths.len(), &candle_core::Device::Cpu).map(Some)
    }
}

impl super::Config for Config {
    fn dims(&self) -> super::Dims {
        super::Dims::text(self.hidden_size, self.max_position_embeddings, self.vocab_size, self.pad_token_id)
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
    fn forward(&self, batch: &super::Batch) -> candle_core::Result<Vec<f32>> {
        self.forward_packed(batch.ids, batch.type_ids, batch.bounds)
    }

    fn pooler_size(&self) -> Option<usize> {
        Some(self.pooled_size)
    }

    fn pooler(&self, hidden: &[f32], batch: &super::Batch) -> candle_core::Result<Option<Tensor>> {
        self.pooler_packed(hidden, batch.ids, batch.bounds)
    }
}
