//! ModernBERT (gte-modernbert, modernbert-embed): rotary positions, GeGLU, global attention
//! every n-th layer and a sliding window in the others. The network is candle-transformers'
//! `ModernBert`; this file owns the config in both the transformers 5 form (`layer_types`,
//! `rope_parameters`) and the form on the Hub (`global_attn_every_n_layers`,
//! `global_rope_theta`, `local_rope_theta`).

use std::collections::BTreeMap;

use candle_core::Tensor;
use candle_nn::VarBuilder;
use candle_transformers::models::modernbert as cm;
use serde::{Deserialize, Serialize};

use super::encoder::{
    bad_weights, check_eps, check_heads, check_positions, check_rope_theta, unsupported, MAX_POSITIONS,
};
use crate::error::{Error, Result};

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
    pub rope_parameters: Option<BTreeMap<String, RopeParameters>>,
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

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct RopeParameters {
    #[serde(default)]
    pub rope_type: Option<String>,
    #[serde(default)]
    pub rope_theta: Option<f64>,
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

    /// (rope_type, theta) of "full_attention" or "sliding_attention".
    fn rope_theta(&self, kind: &str, legacy: Option<f64>, default: f64) -> Result<f64> {
        let params = self.rope_parameters.as_ref().and_then(|p| p.get(kind));
        if let Some(rope_type) = params.and_then(|p| p.rope_type.as_deref()).filter(|t| *t != "default") {
            return Err(unsupported("rope_type", rope_type, "default"));
        }
        let theta = params.and_then(|p| p.rope_theta).or(legacy).unwrap_or(default);
        check_rope_theta(&format!("rope_theta of {kind}"), theta)?;
        Ok(theta)
    }
}

pub struct Model {
    inner: cm::ModernBert,
}

pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Model> {
    check_heads(cfg.hidden_size, cfg.num_attention_heads)?;
    // candle's ModernBert has no biases in attention, MLP and norms, and GELU (erf) in the MLP.
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
    // candle sizes its rotary tables by max_position_embeddings and its layer list by
    // num_hidden_layers before reading a weight: both are checked first.
    check_positions("max_position_embeddings", cfg.max_position_embeddings)?;
    check_eps("norm_eps", cfg.norm_eps)?;
    // candle's MLP reads `Wi` as [2 * intermediate_size, hidden_size].
    if cfg.intermediate_size.checked_mul(2).is_none() {
        return Err(Error::invalid_file(
            "config.json",
            format!("intermediate_size {} is too large", cfg.intermediate_size),
        ));
    }
    let inner_cfg = cm::Config {
        vocab_size: cfg.vocab_size,
        hidden_size: cfg.hidden_size,
        num_hidden_layers: cfg.num_hidden_layers,
        num_attention_heads: cfg.num_attention_heads,
        intermediate_size: cfg.intermediate_size,
        max_position_embeddings: cfg.max_position_embeddings,
        layer_norm_eps: cfg.norm_eps,
        pad_token_id: cfg.pad_token_id,
        global_attn_every_n_layers: cfg.global_every()?,
        global_rope_theta: cfg.rope_theta("full_attention", cfg.global_rope_theta, 160_000.0)?,
        // candle compares distances with local_attention / 2 as i32, so a window of 2^32 or
        // more wrapped and masked every token (NaN). Inputs are at most MAX_POSITIONS long:
        // a window of twice that already reaches every token, and so does any wider one.
        local_attention: cfg.local_attention.min(2 * MAX_POSITIONS),
        local_rope_theta: cfg.rope_theta("sliding_attention", cfg.local_rope_theta, 10_000.0)?,
        classifier_config: None,
    };
    // candle reads `model.*`; a bare ModernBertModel checkpoint stores the same names without it.
    let vb = if !vb.contains_tensor("model.embeddings.tok_embeddings.weight")
        && vb.contains_tensor("embeddings.tok_embeddings.weight")
    {
        vb.rename_f(|name| name.strip_prefix("model.").unwrap_or(name).to_string())
    } else {
        vb
    };
    let last = cfg.num_hidden_layers - 1;
    if !vb.contains_tensor(&format!("model.layers.{last}.attn.Wqkv.weight")) {
        return Err(Error::invalid_file(
            "model.safetensors",
            format!("num_hidden_layers is {}, and the checkpoint has no layer {last}", cfg.num_hidden_layers),
        ));
    }
    let inner = cm::ModernBert::load(vb, &inner_cfg).map_err(bad_weights)?;
    Ok(Model { inner })
}

impl Model {
    /// ModernBERT has no token types.
    pub fn forward(&self, ids: &Tensor, _type_ids: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
        self.inner.forward(ids, mask)
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
