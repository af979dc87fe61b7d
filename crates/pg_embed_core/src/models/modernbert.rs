//! ModernBERT (gte-modernbert, modernbert-embed): rotary positions, GeGLU, global attention
//! every n-th layer and a sliding window in the others, as transformers' `ModernBertModel`
//! computes it, on the layer library's pre-norm stack over packed tokens. The config is
//! read in both the transformers 5 form (`layer_types`, `rope_parameters`) and the form on
//! the Hub (`global_attn_every_n_layers`, `global_rope_theta`, `local_rope_theta`); a
//! `rope_scaling` applies to both layer types, as transformers merges it.


use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::checks::{
    bad_weights, check_eps, check_heads, check_positions, unsupported, MAX_POSITIONS,
};
use super::rotary;
use crate::error::{Error, Result};
use crate::layers;

/// `transformers.ModernBertConfig`
/// (https://huggingface.co/docs/transformers/model_doc/modernbert#transformers.ModernBertConfig);
/// defaults are transformers' defaults.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    #[serde(default = "d::vocab_size")]
    pub vocab_size: usize,
    #[serde(default = "d::hidden_size")]
    pub hidden_size: usize,
    #[serde(default = "d::intermediate_size")]
    pub intermediate_size: usize,
    #[serde(default = "d::num_hidden_layers")]
    pub num_hidden_layers: usize,
    #[serde(default = "d::num_attention_heads")]
    pub num_attention_heads: usize,
    #[serde(default = "d::gelu")]
    pub hidden_activation: String,
    #[serde(default = "d::max_position_embeddings")]
    pub max_position_embeddings: usize,
    #[serde(default = "d::norm_eps")]
    pub norm_eps: f64,
    #[serde(default)]
    pub norm_bias: bool,
    #[serde(default = "d::pad_token_id")]
    pub pad_token_id: u32,
    #[serde(default)]
    pub attention_bias: bool,
    #[serde(default)]
    pub mlp_bias: bool,
    #[serde(default = "d::local_attention")]
    pub local_attention: usize,
    #[serde(default)]
    pub layer_types: Option<Vec<String>>,
    #[serde(default = "d::global_attn_every_n_layers")]
    pub global_attn_every_n_layers: usize,
    #[serde(default)]
    pub rope_parameters: Option<serde_json::Value>,
    /// Applied to both layer types (transformers' `ModernBertConfig`).
    #[serde(default)]
    pub rope_scaling: Option<serde_json::Value>,
    #[serde(default)]
    pub global_rope_theta: Option<f64>,
    #[serde(default)]
    pub local_rope_theta: Option<f64>,
    /// The classification head: "cls" or "mean" pooling, its dense layer's bias and activation.
    #[serde(default = "d::cls")]
    pub classifier_pooling: String,
    #[serde(default)]
    pub classifier_bias: bool,
    #[serde(default = "d::gelu")]
    pub classifier_activation: String,
}

mod d {
    pub fn vocab_size() -> usize {
        50368
    }
    pub fn hidden_size() -> usize {
        768
    }
    pub fn intermediate_size() -> usize {
        1152
    }
    pub fn num_hidden_layers() -> usize {
        22
    }
    pub fn num_attention_heads() -> usize {
        12
    }
    pub fn gelu() -> String {
        "gelu".into()
    }
    pub fn max_position_embeddings() -> usize {
        8192
    }
    pub fn norm_eps() -> f64 {
        1e-5
    }
    pub fn pad_token_id() -> u32 {
        50283
    }
    pub fn local_attention() -> usize {
        128
    }
    pub fn global_attn_every_n_layers() -> usize {
        3
    }
    pub fn cls() -> String {
        "cls".into()
    }
}

impl Config {
    /// Every n-th layer (from layer 0) is global, the others slide; from `layer_types` when
    /// the config lists them.
    fn global_every(&self) -> Result<usize> {
        let Some(types) = &self.layer_types else { return Ok(self.global_attn_every_n_layers.max(1)) };
        let n =
            types.iter().skip(1).position(|t| t == "full_attention").map_or(types.len().max(1), |i| i + 1);
        for (i, t) in types.iter().enumerate() {
            let want = if i % n == 0 { "full_attention" } else { "sliding_attention" };
            if t != want {
                return Err(unsupported(
                    "layer_types",
                    &format!("{types:?}"),
                    "full_attention every n-th layer from layer 0, sliding_attention between",
                ));
            }
        }
        Ok(n)
    }

    /// The rotary of "full_attention" or "sliding_attention" layers: its `rope_parameters`
    /// entry with `rope_scaling`, its base else the Hub's key (`legacy`) else `theta`.
    fn rope(&self, kind: &str, legacy: Option<f64>, theta: f64) -> Result<rotary::Rope> {
        let (own, _) = rotary::parameters(self.rope_parameters.as_ref(), self.rope_scaling.as_ref(), kind);
        let family = rotary::Family { theta, max_positions: self.max_position_embeddings, ntk: false };
        rotary::read(&own, &format!("rope_theta of {kind}"), legacy, family, None)
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Model {
    word: layers::Embedding,
    norm: layers::Norm,
    stack: layers::Stack,
}

pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Model> {
    check_heads(cfg.hidden_size, cfg.num_attention_heads)?;
    // No biases in attention, MLP and norms, and GELU (erf) in the MLP.
    for (what, set) in
        [("attention_bias", cfg.attention_bias), ("mlp_bias", cfg.mlp_bias), ("norm_bias", cfg.norm_bias)]
    {
        if set {
            return Err(unsupported(what, "true", "false"));
        }
    }
    if cfg.hidden_activation != "gelu" {
        return Err(unsupported("hidden_activation", &cfg.hidden_activation, "gelu"));
    }
    if cfg.num_hidden_layers == 0 {
        return Err(Error::invalid_file("config.json", "num_hidden_layers is 0"));
    }
    // The layer list is sized by num_hidden_layers, checked against the checkpoint below
    // before any weight is read; positions are bounded like every architecture's.
    check_positions("max_position_embeddings", cfg.max_position_embeddings)?;
    check_eps("norm_eps", cfg.norm_eps)?;
    // `Wi` is [2 * intermediate_size, hidden_size].
    if cfg.intermediate_size.checked_mul(2).is_none() {
        return Err(Error::invalid_file(
            "config.json",
            format!("intermediate_size {} is too large", cfg.intermediate_size),
        ));
    }
    let global_every = cfg.global_every()?;
    let global = cfg.rope("full_attention", cfg.global_rope_theta, 160_000.0)?;
    let local = cfg.rope("sliding_attention", cfg.local_rope_theta, 10_000.0)?;
    // Inputs are at most MAX_POSITIONS long: a window of twice that already reaches every
    // token, and so does any wider one.
    let window = cfg.local_attention.min(2 * MAX_POSITIONS) / 2;
    // Weights are read under `model.*`; a bare ModernBertModel checkpoint stores the same
    // names without it.
    let vb = if vb.contains_tensor("model.embeddings.tok_embeddings.weight") { vb.pp("model") } else { vb };
    let last = cfg.num_hidden_layers - 1;
    if !vb.contains_tensor(&format!("layers.{last}.attn.Wqkv.weight")) {
        return Err(Error::invalid_file(
            "model.safetensors",
            format!("num_hidden_layers is {}, and the checkpoint has no layer {last}", cfg.num_hidden_layers),
        ));
    }
    let (h, ff) = (cfg.hidden_size, cfg.intermediate_size);
    let head_dim = h / cfg.num_attention_heads;
    let eps = cfg.norm_eps;
    let (global, local) = (global.rotary(head_dim)?, local.rotary(head_dim)?);
    let load = || -> candle_core::Result<Model> {
        let linear = |vb: VarBuilder, o: usize, i: usize| -> candle_core::Result<layers::Linear> {
            let w = vb.get((o, i), "weight")?.flatten_all()?.to_vec1::<f32>()?;
            layers::Linear::from_torch(w, None, o, i)
        };
        let norm = |vb: VarBuilder| -> candle_core::Result<layers::Norm> {
            layers::Norm::layer(vb.get(h, "weight")?.to_vec1::<f32>()?, None, eps)
        };
        let stack = (0..cfg.num_hidden_layers)
            .map(|i| -> candle_core::Result<layers::Layer> {
                let l = vb.pp(format!("layers.{i}"));
                // Layer 0 has no attention norm: the embeddings' norm precedes it.
                let attention_norm =
                    if i == 0 { layers::Norm::Identity { width: h } } else { norm(l.pp("attn_norm"))? };
                Ok(layers::Layer {
                    // Q, K and V side by side, each [heads head_dim, hidden].
                    qkv: linear(l.pp("attn.Wqkv"), 3 * h, h)?,
                    attention_out: linear(l.pp("attn.Wo"), h, h)?,
                    attention_norm,
                    // GeGLU: `Wi` is the activated input half, then the gate half.
                    mlp: layers::Mlp::Gated {
                        gate_up: linear(l.pp("mlp.Wi"), 2 * ff, h)?,
                        down: linear(l.pp("mlp.Wo"), h, ff)?,
                    },
                    output_norm: norm(l.pp("mlp_norm"))?,
                    qk_norms: None,
                    post_norms: None,
                })
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        let word = layers::Embedding::from_tensor(
            &vb.pp("embeddings.tok_embeddings").get((cfg.vocab_size, h), "weight")?,
        )?;
        let spec = layers::StackSpec {
            norm_position: layers::NormPosition::Pre,
            final_norm: Some(norm(vb.pp("final_norm"))?),
            rotary: Some(global),
            sliding: Some(layers::Sliding::between_global(
                global_every,
                cfg.num_hidden_layers,
                window,
                Some(local),
            )),
            ..layers::StackSpec::post_norm(h, cfg.num_attention_heads, layers::Activation::Gelu)
        };
        let norm = norm(vb.pp("embeddings.norm"))?;
        Ok(Model { word, norm, stack: layers::Stack::new(stack, spec)? })
    };
    load().map_err(bad_weights)
}

impl Model {
    /// The last hidden states [tokens, hidden] of a packed batch: `ids` of every sequence
    /// end to end, sequence i at tokens bounds[i]..bounds[i + 1]; rotary positions 0..
    /// within each. ModernBERT has no token types.
    pub fn forward_packed(&self, ids: &[u32], bounds: &[usize]) -> candle_core::Result<Vec<f32>> {
        self.forward_keyed(ids, bounds, None)
    }

    /// As `forward_packed`, with each sequence's keys kept to its first tokens (`keys`:
    /// `Batch::keys`), in global and sliding-window layers alike.
    fn forward_keyed(
        &self,
        ids: &[u32],
        bounds: &[usize],
        keys: Option<&layers::KeyLimits>,
    ) -> candle_core::Result<Vec<f32>> {
        let lengths = layers::lengths_of(bounds, ids.len())?;
        let mut x = self.word.gather(ids)?;
        self.norm.forward(&mut x);
        self.stack.try_forward_with(&mut x, &lengths, keys.map(|k| k as &dyn layers::ScoreTerm))?;
        Ok(x)
    }
}

impl super::Config for Config {
    fn dims(&self) -> super::Dims {
        super::Dims::text(self.hidden_size, self.max_position_embeddings, self.vocab_size, self.pad_token_id)
    }
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn super::Model>> {
        Ok(Box::new(load(vb, self)?))
    }
}

impl super::Model for Model {
    fn forward(&self, batch: &super::Batch) -> candle_core::Result<Vec<f32>> {
        self.forward_keyed(batch.ids, batch.bounds, batch.key_limits()?.as_ref())
    }

    /// Tokens that are queries only are hidden as keys (`Batch::keys`).
    fn hides_keys(&self) -> bool {
        true
    }

    fn sliding_window(&self) -> Option<usize> {
        self.stack.sliding_window()
    }
}
