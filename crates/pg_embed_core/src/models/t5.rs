//! T5 encoder (sentence-t5, gtr-t5 with their Dense heads): RMS-norm before each block,
//! unscaled attention with a relative position bias from the first block, ReLU or gated
//! feed-forward, as transformers' `T5EncoderModel` computes it, on the layer library's
//! stack over packed tokens.

use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::checks::{bad_weights, check_buckets, check_eps, unsupported};
use crate::error::{Error, Result};
use crate::layers::{self, Activation};
use crate::weights;

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

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Model {
    embed: layers::Embedding,
    stack: layers::Stack,
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
    let load = || -> candle_core::Result<Model> {
        // T5EncoderModel stores the embedding as `shared` (tied to encoder.embed_tokens).
        let embed_name = if vb.contains_tensor("shared.weight") { "shared" } else { "encoder.embed_tokens" };
        let e = vb.pp("encoder");
        let weight =
            |vb: VarBuilder, o: usize, i: usize| weights::torch_parts(&vb, o, i, false).map(|(w, _)| w);
        let lin = |vb: VarBuilder, i: usize, o: usize| weights::torch_linear(&vb, o, i, false);
        let norm = |vb: &VarBuilder, name: &str| -> candle_core::Result<layers::Norm> {
            Ok(layers::Norm::rms(vb.get(d, name)?.to_vec1::<f32>()?, cfg.layer_norm_epsilon))
        };
        let blocks = (0..cfg.num_layers)
            .map(|i| {
                let b = e.pp(format!("block.{i}"));
                let a = b.pp("layer.0.SelfAttention");
                let f = b.pp("layer.1.DenseReluDense");
                let attention_norm = norm(&b, "layer.0.layer_norm.weight")?;
                let qkv = layers::Linear::side_by_side(
                    vec![
                        (weight(a.pp("q"), inner, d)?, None),
                        (weight(a.pp("k"), inner, d)?, None),
                        (weight(a.pp("v"), inner, d)?, None),
                    ],
                    d,
                )?;
                let attention_out = lin(a.pp("o"), inner, d)?;
                let output_norm = norm(&b, "layer.1.layer_norm.weight")?;
                // Gated: act(wi_0 x) * (wi_1 x), then wo.
                let mlp = if gated {
                    layers::Mlp::Gated {
                        gate_up: layers::Linear::side_by_side(
                            vec![(weight(f.pp("wi_0"), ff, d)?, None), (weight(f.pp("wi_1"), ff, d)?, None)],
                            d,
                        )?,
                        down: lin(f.pp("wo"), ff, d)?,
                    }
                } else {
                    layers::Mlp::Plain { up: lin(f.pp("wi"), d, ff)?, down: lin(f.pp("wo"), ff, d)? }
                };
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
        let embed = layers::Embedding::from_tensor(&vb.pp(embed_name).get((cfg.vocab_size, d), "weight")?)?;
        let table = e
            .pp("block.0.layer.0.SelfAttention.relative_attention_bias")
            .get((cfg.relative_attention_num_buckets, cfg.num_heads), "weight")?
            .flatten_all()?
            .to_vec1::<f32>()?;
        let spec = layers::StackSpec {
            hidden: d,
            heads: cfg.num_heads,
            kv_heads: cfg.num_heads,
            head_dim: cfg.d_kv,
            activation: act,
            norm_position: layers::NormPosition::Pre,
            final_norm: Some(norm(&e, "final_layer_norm.weight")?),
            // No 1/sqrt(d) scaling in T5.
            scaled: false,
            causal: false,
            rotary: None,
            // The position bias of the first block serves every block.
            relative_bias: Some(layers::RelativeBias::new(
                table,
                cfg.relative_attention_num_buckets,
                cfg.num_heads,
                cfg.relative_attention_max_distance,
            )?),
            sliding: None,
            scale: None,
            softcap: None,
        };
        Ok(Model { embed, stack: layers::Stack::new(blocks, spec)? })
    };
    load().map_err(bad_weights)
}

impl Model {
    /// The last hidden states [tokens, d_model] of a packed batch: `ids` of every sequence
    /// end to end, sequence i at tokens bounds[i]..bounds[i + 1]. T5 has no token types.
    pub fn forward_packed(
        &self,
        ids: &[u32],
        _type_ids: &[u32],
        bounds: &[usize],
    ) -> candle_core::Result<Vec<f32>> {
        let lengths = layers::lengths_of(bounds, ids.len())?;
        let mut x = self.embed.gather(ids)?;
        self.stack.try_forward(&mut x, &lengths)?;
        Ok(x)
    }
}

impl super::Config for Config {
    fn dims(&self) -> super::Dims {
        // Relative positions: no table bounds the length; sentence-transformers' T5
        // models set their own max_seq_length.
        super::Dims::text(self.d_model, 512, self.vocab_size, self.pad_token_id)
    }
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn super::Model>> {
        Ok(Box::new(load(vb, self)?))
    }
}

impl super::Model for Model {
    fn forward(&self, batch: &super::Batch) -> candle_core::Result<Vec<f32>> {
        self.forward_packed(batch.ids, batch.type_ids, batch.bounds)
    }
}
