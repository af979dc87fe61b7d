//! NomicBERT (nomic-embed-text-v1 / v1.5): BERT-style post-LayerNorm layers with rotary
//! positions, bias-free attention and a SwiGLU feed-forward, as transformers'
//! `NomicBertModel` computes it. Reads both transformers' names and the names of the
//! checkpoints nomic-ai publishes (fused `Wqkv`, `fc11`/`fc12`/`fc2`, `norm1`/`norm2`,
//! `emb_ln`, config keys `n_embd`, `n_layer`, ...). Written here: candle-transformers has
//! no NomicBERT.

use candle_core::{DType, Module, Tensor};
use candle_nn::{Embedding, LayerNorm, Linear, VarBuilder};
use serde::{Deserialize, Serialize};

use super::encoder::{additive_mask, bad_weights, check_eps, check_heads, check_rope_theta, unsupported};
use crate::error::Result;
use crate::heads::Activation;

/// `transformers.NomicBertConfig`, with the key names of nomic-ai's own config as aliases;
/// defaults are transformers' defaults.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    #[serde(default = "d::vocab_size")]
    pub vocab_size: usize,
    #[serde(default = "d::hidden_size", alias = "n_embd")]
    pub hidden_size: usize,
    #[serde(default = "d::num_hidden_layers", alias = "n_layer")]
    pub num_hidden_layers: usize,
    #[serde(default = "d::num_attention_heads", alias = "n_head")]
    pub num_attention_heads: usize,
    #[serde(default = "d::intermediate_size", alias = "n_inner")]
    pub intermediate_size: usize,
    #[serde(default = "d::hidden_act", alias = "activation_function")]
    pub hidden_act: String,
    #[serde(default = "d::max_position_embeddings", alias = "n_positions")]
    pub max_position_embeddings: usize,
    #[serde(default = "d::type_vocab_size")]
    pub type_vocab_size: usize,
    #[serde(default = "d::layer_norm_eps", alias = "layer_norm_epsilon")]
    pub layer_norm_eps: f64,
    #[serde(default)]
    pub pad_token_id: u32,
    #[serde(default)]
    pub head_dim: Option<usize>,
    #[serde(default)]
    pub rope_parameters: Option<RopeParameters>,
    /// nomic-ai's name for the rotary base.
    #[serde(default)]
    pub rotary_emb_base: Option<f64>,
    #[serde(default)]
    pub rotary_emb_fraction: Option<f64>,
    #[serde(default)]
    pub rotary_emb_interleaved: Option<bool>,
    #[serde(default)]
    pub prenorm: Option<bool>,
    #[serde(default)]
    pub qkv_proj_bias: Option<bool>,
    #[serde(default)]
    pub mlp_fc1_bias: Option<bool>,
    #[serde(default)]
    pub mlp_fc2_bias: Option<bool>,
    #[serde(default)]
    pub rotary_scaling_factor: Option<f64>,
    #[serde(default)]
    pub causal: Option<bool>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct RopeParameters {
    #[serde(default)]
    pub rope_type: Option<String>,
    #[serde(default)]
    pub rope_theta: Option<f64>,
}

mod d {
    pub fn vocab_size() -> usize {
        30528
    }
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
        "silu".into()
    }
    pub fn max_position_embeddings() -> usize {
        2048
    }
    pub fn type_vocab_size() -> usize {
        2
    }
    pub fn layer_norm_eps() -> f64 {
        1e-12
    }
}

struct Layer {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    attn_norm: LayerNorm,
    gate: Linear,
    up: Linear,
    down: Linear,
    mlp_norm: LayerNorm,
}

pub struct Model {
    word: Embedding,
    token_type: Option<Embedding>,
    norm: LayerNorm,
    layers: Vec<Layer>,
    heads: usize,
    head_dim: usize,
    act: Activation,
    /// 1 / theta^(2i / head_dim)
    inv_freq: Vec<f32>,
}

impl Config {
    fn check(&self) -> Result<(Activation, f64)> {
        let act = match self.hidden_act.as_str() {
            // nomic-ai's "swiglu" is SiLU on the gate.
            "silu" | "swish" | "swiglu" => Activation::Silu,
            "gelu" | "geglu" => Activation::Gelu,
            other => return Err(unsupported("hidden_act", other, "silu, swiglu, gelu, geglu")),
        };
        // Settings of nomic-ai's config that would change the numbers: refused unless they
        // have the values of the published models.
        let bad = |set: bool, value: String| set.then_some(value);
        let head_dim_differs = self.head_dim.is_some_and(|d| {
            self.num_attention_heads == 0 || d != self.hidden_size / self.num_attention_heads
        });
        let flags = [
            (
                "rotary_emb_fraction",
                bad(
                    self.rotary_emb_fraction.is_some_and(|f| f != 1.0),
                    format!("{:?}", self.rotary_emb_fraction),
                ),
            ),
            ("rotary_emb_interleaved", bad(self.rotary_emb_interleaved == Some(true), "true".into())),
            ("prenorm", bad(self.prenorm == Some(true), "true".into())),
            ("qkv_proj_bias", bad(self.qkv_proj_bias == Some(true), "true".into())),
            ("mlp_fc1_bias", bad(self.mlp_fc1_bias == Some(true), "true".into())),
            ("mlp_fc2_bias", bad(self.mlp_fc2_bias == Some(true), "true".into())),
            (
                "rotary_scaling_factor",
                bad(self.rotary_scaling_factor.is_some(), format!("{:?}", self.rotary_scaling_factor)),
            ),
            ("causal", bad(self.causal == Some(true), "true".into())),
            ("head_dim", bad(head_dim_differs, format!("{:?}", self.head_dim))),
        ];
        if let Some((what, Some(value))) = flags.iter().find(|(_, v)| v.is_some()) {
            return Err(unsupported(
                what,
                value,
                "the published nomic-embed-text settings: rotary_emb_fraction 1.0, head_dim hidden_size / heads, the others false or null",
            ));
        }
        if let Some(t) =
            self.rope_parameters.as_ref().and_then(|p| p.rope_type.as_deref()).filter(|t| *t != "default")
        {
            return Err(unsupported("rope_type", t, "default"));
        }
        let theta = self
            .rope_parameters
            .as_ref()
            .and_then(|p| p.rope_theta)
            .or(self.rotary_emb_base)
            .unwrap_or(1000.0);
        Ok((act, theta))
    }
}

pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Model> {
    let (act, theta) = cfg.check()?;
    check_heads(cfg.hidden_size, cfg.num_attention_heads)?;
    check_eps("layer_norm_eps", cfg.layer_norm_eps)?;
    check_rope_theta("rope_theta", theta)?;
    let (h, ff) = (cfg.hidden_size, cfg.intermediate_size);
    let head_dim = h / cfg.num_attention_heads;
    let eps = cfg.layer_norm_eps;
    // nomic-ai's checkpoints fuse q, k and v into `attn.Wqkv` and name layers differently.
    let hub = vb.contains_tensor("encoder.layers.0.attn.Wqkv.weight");
    let load = || -> candle_core::Result<Model> {
        let no_bias = |vb: VarBuilder, i, o| candle_nn::linear_no_bias(i, o, vb);
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| -> candle_core::Result<Layer> {
                if hub {
                    let l = vb.pp(format!("encoder.layers.{i}"));
                    let qkv = l.get((3 * h, h), "attn.Wqkv.weight")?;
                    let part =
                        |n: usize| Ok::<_, candle_core::Error>(Linear::new(qkv.narrow(0, n * h, h)?, None));
                    Ok(Layer {
                        q: part(0)?,
                        k: part(1)?,
                        v: part(2)?,
                        o: no_bias(l.pp("attn.out_proj"), h, h)?,
                        attn_norm: candle_nn::layer_norm(h, eps, l.pp("norm1"))?,
                        up: no_bias(l.pp("mlp.fc11"), h, ff)?,
                        gate: no_bias(l.pp("mlp.fc12"), h, ff)?,
                        down: no_bias(l.pp("mlp.fc2"), ff, h)?,
                        mlp_norm: candle_nn::layer_norm(h, eps, l.pp("norm2"))?,
                    })
                } else {
                    let l = vb.pp(format!("layers.{i}"));
                    Ok(Layer {
                        q: no_bias(l.pp("self_attn.q_proj"), h, h)?,
                        k: no_bias(l.pp("self_attn.k_proj"), h, h)?,
                        v: no_bias(l.pp("self_attn.v_proj"), h, h)?,
                        o: no_bias(l.pp("self_attn.o_proj"), h, h)?,
                        attn_norm: candle_nn::layer_norm(h, eps, l.pp("post_attention_layernorm"))?,
                        gate: no_bias(l.pp("mlp.gate_proj"), h, ff)?,
                        up: no_bias(l.pp("mlp.up_proj"), h, ff)?,
                        down: no_bias(l.pp("mlp.down_proj"), ff, h)?,
                        mlp_norm: candle_nn::layer_norm(h, eps, l.pp("post_mlp_layernorm"))?,
                    })
                }
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        let e = vb.pp("embeddings");
        Ok(Model {
            word: candle_nn::embedding(cfg.vocab_size, h, e.pp("word_embeddings"))?,
            token_type: (cfg.type_vocab_size > 0)
                .then(|| candle_nn::embedding(cfg.type_vocab_size, h, e.pp("token_type_embeddings")))
                .transpose()?,
            norm: candle_nn::layer_norm(h, eps, if hub { vb.pp("emb_ln") } else { e.pp("LayerNorm") })?,
            layers,
            heads: cfg.num_attention_heads,
            head_dim,
            act,
            inv_freq: (0..head_dim)
                .step_by(2)
                .map(|i| 1.0 / (theta as f32).powf(i as f32 / head_dim as f32))
                .collect(),
        })
    };
    load().map_err(bad_weights)
}

impl Model {
    pub fn forward(&self, ids: &Tensor, type_ids: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
        let (b, s) = ids.dims2()?;
        let mut x = self.word.forward(ids)?;
        if let Some(tt) = &self.token_type {
            x = (x + tt.forward(type_ids)?)?;
        }
        let mut x = self.norm.forward(&x)?;
        // cos / sin [s, head_dim / 2] for positions 0..s (non-interleaved halves, rotate_half).
        let freqs: Vec<f32> = (0..s).flat_map(|p| self.inv_freq.iter().map(move |f| p as f32 * f)).collect();
        let freqs = Tensor::from_vec(freqs, (s, self.inv_freq.len()), ids.device())?;
        let (cos, sin) = (freqs.cos()?, freqs.sin()?);
        let mask = additive_mask(mask)?;
        let split = |t: Tensor| t.reshape((b, s, self.heads, self.head_dim))?.transpose(1, 2)?.contiguous();
        let scale = (self.head_dim as f64).powf(-0.5);
        for layer in &self.layers {
            let q = candle_nn::rotary_emb::rope(&split(layer.q.forward(&x)?)?, &cos, &sin)?;
            let k = candle_nn::rotary_emb::rope(&split(layer.k.forward(&x)?)?, &cos, &sin)?;
            let v = split(layer.v.forward(&x)?)?;
            let scores = (q.matmul(&k.t()?)? * scale)?.broadcast_add(&mask)?;
            let probs = candle_nn::ops::softmax_last_dim(&scores.to_dtype(DType::F32)?)?;
            let ctx = probs.matmul(&v)?.transpose(1, 2)?.reshape((b, s, self.heads * self.head_dim))?;
            x = layer.attn_norm.forward(&(x + layer.o.forward(&ctx)?)?)?;
            let y = (self.act.apply(&layer.gate.forward(&x)?)? * layer.up.forward(&x)?)?;
            x = layer.mlp_norm.forward(&(x + layer.down.forward(&y)?)?)?;
        }
        Ok(x)
    }
}

impl super::Config for Config {
    fn hidden_size(&self) -> usize {
        self.hidden_size
    }
    fn max_position_embeddings(&self) -> usize {
        // Rotary positions: the config's length is what the model was trained for.
        self.max_position_embeddings
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
