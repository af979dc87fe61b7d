//! T5 encoder (sentence-t5, gtr-t5 with their Dense heads): RMS-norm before each block,
//! unscaled attention with a relative position bias from the first block, ReLU or gated
//! feed-forward, as transformers' `T5EncoderModel` computes it. Written here:
//! candle-transformers' T5 encoder takes no attention mask, so a padded batch would differ
//! from one input at a time.

use candle_core::{DType, Module, Tensor};
use candle_nn::{Embedding, Linear, VarBuilder};
use serde::{Deserialize, Serialize};

use super::encoder::{
    additive_mask, bad_weights, check_buckets, check_eps, relative_position_bias, unsupported,
};
use crate::error::{Error, Result};
use crate::heads::Activation;

/// `transformers.T5Config` (https://huggingface.co/docs/transformers/model_doc/t5#transformers.T5Config);
/// defaults are transformers' defaults.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    #[serde(default = "d::vocab_size")]
    pub vocab_size: usize,
    #[serde(default = "d::d_model")]
    pub d_model: usize,
    #[serde(default = "d::d_kv")]
    pub d_kv: usize,
    #[serde(default = "d::d_ff")]
    pub d_ff: usize,
    #[serde(default = "d::num_layers")]
    pub num_layers: usize,
    #[serde(default = "d::num_heads")]
    pub num_heads: usize,
    #[serde(default = "d::relative_attention_num_buckets")]
    pub relative_attention_num_buckets: usize,
    #[serde(default = "d::relative_attention_max_distance")]
    pub relative_attention_max_distance: usize,
    #[serde(default = "d::layer_norm_epsilon")]
    pub layer_norm_epsilon: f64,
    #[serde(default = "d::feed_forward_proj")]
    pub feed_forward_proj: String,
    #[serde(default)]
    pub pad_token_id: u32,
}

mod d {
    pub fn vocab_size() -> usize {
        32128
    }
    pub fn d_model() -> usize {
        512
    }
    pub fn d_kv() -> usize {
        64
    }
    pub fn d_ff() -> usize {
        2048
    }
    pub fn num_layers() -> usize {
        6
    }
    pub fn num_heads() -> usize {
        8
    }
    pub fn relative_attention_num_buckets() -> usize {
        32
    }
    pub fn relative_attention_max_distance() -> usize {
        128
    }
    pub fn layer_norm_epsilon() -> f64 {
        1e-6
    }
    pub fn feed_forward_proj() -> String {
        "relu".into()
    }
}

struct Block {
    attn_norm: Tensor,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    ff_norm: Tensor,
    /// wi (or wi_0 when gated), the gate wi_1, wo
    wi: Linear,
    gate: Option<Linear>,
    wo: Linear,
}

pub struct Model {
    embed: Embedding,
    relative_attention_bias: Embedding,
    blocks: Vec<Block>,
    final_norm: Tensor,
    heads: usize,
    d_kv: usize,
    eps: f64,
    act: Activation,
    buckets: usize,
    max_distance: usize,
}

/// `feed_forward_proj`: "relu", "gelu", "gated-gelu" (which T5 runs as gelu_new), ... ->
/// (activation, gated).
fn feed_forward(name: &str) -> Result<(Activation, bool)> {
    let (gated, act) = match name.strip_prefix("gated-") {
        Some(act) => (true, act),
        None => (false, name),
    };
    let act = match (act, gated) {
        ("relu", _) => Activation::Relu,
        ("gelu", true) | ("gelu_new", _) | ("gelu_pytorch_tanh", _) => Activation::GeluTanh,
        ("gelu", false) => Activation::Gelu,
        ("silu" | "swish", _) => Activation::Silu,
        _ => {
            return Err(unsupported(
                "feed_forward_proj",
                name,
                "relu, gelu, gated-gelu, gated-relu, gated-silu",
            ))
        }
    };
    Ok((act, gated))
}

pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Model> {
    let (act, gated) = feed_forward(&cfg.feed_forward_proj)?;
    if cfg.num_heads == 0 || cfg.num_layers == 0 {
        return Err(Error::invalid_file("config.json", "num_heads and num_layers must be at least 1"));
    }
    let inner = cfg.num_heads.checked_mul(cfg.d_kv).ok_or_else(|| {
        Error::invalid_file(
            "config.json",
            format!("num_heads {} times d_kv {} overflows", cfg.num_heads, cfg.d_kv),
        )
    })?;
    check_eps("layer_norm_epsilon", cfg.layer_norm_epsilon)?;
    check_buckets(cfg.relative_attention_num_buckets, cfg.relative_attention_max_distance)?;
    let (d, ff) = (cfg.d_model, cfg.d_ff);
    let lin = |vb: VarBuilder, i: usize, o: usize| candle_nn::linear_no_bias(i, o, vb);
    let load = || -> candle_core::Result<Model> {
        // T5EncoderModel stores the embedding as `shared` (tied to encoder.embed_tokens).
        let embed_name = if vb.contains_tensor("shared.weight") { "shared" } else { "encoder.embed_tokens" };
        let e = vb.pp("encoder");
        let blocks = (0..cfg.num_layers)
            .map(|i| {
                let b = e.pp(format!("block.{i}"));
                let a = b.pp("layer.0.SelfAttention");
                let f = b.pp("layer.1.DenseReluDense");
                Ok(Block {
                    attn_norm: b.get(d, "layer.0.layer_norm.weight")?,
                    q: lin(a.pp("q"), d, inner)?,
                    k: lin(a.pp("k"), d, inner)?,
                    v: lin(a.pp("v"), d, inner)?,
                    o: lin(a.pp("o"), inner, d)?,
                    ff_norm: b.get(d, "layer.1.layer_norm.weight")?,
                    wi: lin(f.pp(if gated { "wi_0" } else { "wi" }), d, ff)?,
                    gate: gated.then(|| lin(f.pp("wi_1"), d, ff)).transpose()?,
                    wo: lin(f.pp("wo"), ff, d)?,
                })
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok(Model {
            embed: candle_nn::embedding(cfg.vocab_size, d, vb.pp(embed_name))?,
            relative_attention_bias: candle_nn::embedding(
                cfg.relative_attention_num_buckets,
                cfg.num_heads,
                e.pp("block.0.layer.0.SelfAttention.relative_attention_bias"),
            )?,
            blocks,
            final_norm: e.get(d, "final_layer_norm.weight")?,
            heads: cfg.num_heads,
            d_kv: cfg.d_kv,
            eps: cfg.layer_norm_epsilon,
            act,
            buckets: cfg.relative_attention_num_buckets,
            max_distance: cfg.relative_attention_max_distance,
        })
    };
    load().map_err(bad_weights)
}

impl Model {
    /// T5's LayerNorm: no mean, no bias (an RMS norm).
    fn norm(&self, x: &Tensor, weight: &Tensor) -> candle_core::Result<Tensor> {
        candle_nn::ops::rms_norm(x, weight, self.eps as f32)
    }

    /// T5 has no token types.
    pub fn forward(&self, ids: &Tensor, _type_ids: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
        let (b, s) = ids.dims2()?;
        // The position bias of the first block, with padding masked, serves every block.
        let bias = relative_position_bias(
            &self.relative_attention_bias,
            s,
            self.buckets,
            self.max_distance,
            ids.device(),
        )?
        .broadcast_add(&additive_mask(mask)?)?;
        let split = |x: Tensor| x.reshape((b, s, self.heads, self.d_kv))?.transpose(1, 2)?.contiguous();
        let mut h = self.embed.forward(ids)?;
        for block in &self.blocks {
            let x = self.norm(&h, &block.attn_norm)?;
            let (q, k, v) =
                (split(block.q.forward(&x)?)?, split(block.k.forward(&x)?)?, split(block.v.forward(&x)?)?);
            // No 1/sqrt(d) scaling in T5.
            let scores = q.matmul(&k.t()?)?.broadcast_add(&bias)?;
            let probs = candle_nn::ops::softmax_last_dim(&scores.to_dtype(DType::F32)?)?;
            let ctx = probs.matmul(&v)?.transpose(1, 2)?.reshape((b, s, self.heads * self.d_kv))?;
            h = (h + block.o.forward(&ctx)?)?;
            let x = self.norm(&h, &block.ff_norm)?;
            let mut y = self.act.apply(&block.wi.forward(&x)?)?;
            if let Some(gate) = &block.gate {
                y = (y * gate.forward(&x)?)?;
            }
            h = (h + block.wo.forward(&y)?)?;
        }
        self.norm(&h, &self.final_norm)
    }
}

impl super::Config for Config {
    fn hidden_size(&self) -> usize {
        self.d_model
    }
    fn max_position_embeddings(&self) -> usize {
        // Relative positions: no table bounds the length; sentence-transformers' T5
        // models set their own max_seq_length.
        512
    }
    fn vocab_size(&self) -> usize {
        self.vocab_size
    }
    fn pad_token_id(&self) -> u32 {
        self.pad_token_id
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
}
