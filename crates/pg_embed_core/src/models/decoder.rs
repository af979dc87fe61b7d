//! The decoder family's backbone, shared by Qwen2, Qwen3 and Gemma 3 (one file each for
//! their configs): token embeddings (scaled, for Gemma), then pre-RMSNorm layers of
//! grouped-query attention with rotary positions and a gated MLP (gate_proj, up_proj,
//! down_proj), then a final RMSNorm, as transformers' `*Model` classes compute them, on the
//! layer library's stack over packed tokens. What differs between them is a field of
//! [`Spec`]: biases, per-head q/k norms, sandwich norms, Gemma's `1 + weight` norm scale,
//! the attention scale, causal or bidirectional masks and sliding-window layers with their
//! own rotary base. Also the reading of rotary settings, in the transformers 5 form
//! (`rope_parameters`, flat or per layer type) and the form on the Hub (`rope_theta`,
//! `rope_scaling`).

use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::checks::{activation, bad_weights, check_eps, check_positions, check_rope_theta, unsupported};
use crate::error::{Error, Result};
use crate::layers;
use crate::weights::torch_parts;

/// What a decoder backbone is, from its config.
pub struct Spec {
    pub vocab_size: usize,
    pub hidden: usize,
    pub intermediate: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub max_positions: usize,
    pub eps: f64,
    pub activation: layers::Activation,
    /// Biases on q_proj, k_proj and v_proj (Qwen2).
    pub qkv_bias: bool,
    /// A bias on o_proj.
    pub o_bias: bool,
    /// Biases on gate_proj, up_proj and down_proj (Llama's `mlp_bias`).
    pub mlp_bias: bool,
    /// q_norm and k_norm over each head (Qwen3, Gemma 3).
    pub qk_norms: bool,
    /// Gemma 3's four norms per layer: post_attention_layernorm after attention and
    /// pre_feedforward_layernorm / post_feedforward_layernorm around the MLP (otherwise
    /// post_attention_layernorm is the norm before the MLP, as in Llama and Qwen).
    pub sandwich: bool,
    /// Gemma's RMSNorm scales by 1 + weight.
    pub norm_plus_one: bool,
    /// Every token's embedding times this (Gemma: sqrt(hidden)).
    pub embed_scale: Option<f32>,
    /// The scale of the scores instead of 1 / sqrt(head_dim) (Gemma: query_pre_attn_scalar^-0.5).
    pub scale: Option<f32>,
    /// Soft-capping of the attention scores (Gemma 2's attn_logit_softcapping).
    pub softcap: Option<f32>,
    pub causal: bool,
    pub rope_theta: f64,
    /// Sliding-window layers: which layers slide, the window (each query sees the keys at
    /// most this many positions away) and their rotary base.
    pub sliding: Option<(Vec<bool>, usize, f64)>,
}

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Model {
    word: layers::Embedding,
    embed_scale: Option<f32>,
    stack: layers::Stack,
}

/// Checks what every decoder config shares before anything is allocated.
fn check(spec: &Spec) -> Result<()> {
    let bad = |msg: String| Err(Error::invalid_file("config.json", msg));
    if spec.layers == 0 {
        return bad("num_hidden_layers is 0".into());
    }
    if spec.heads == 0 || spec.kv_heads == 0 || spec.heads % spec.kv_heads != 0 {
        return bad(format!(
            "num_attention_heads {} is not a multiple of num_key_value_heads {}",
            spec.heads, spec.kv_heads
        ));
    }
    if spec.head_dim == 0 || spec.head_dim % 2 != 0 {
        return bad(format!("head_dim {} is not a positive even number (rotary positions)", spec.head_dim));
    }
    if spec.intermediate.checked_mul(2).is_none() || spec.heads.checked_mul(spec.head_dim).is_none() {
        return bad("intermediate_size or num_attention_heads x head_dim is too large".into());
    }
    check_positions("max_position_embeddings", spec.max_positions)?;
    check_eps("rms_norm_eps", spec.eps)?;
    check_rope_theta("rope_theta", spec.rope_theta)?;
    if let Some((_, _, theta)) = &spec.sliding {
        check_rope_theta("rope_theta of sliding_attention", *theta)?;
    }
    if let Some(cap) = spec.softcap.filter(|c| !(c.is_finite() && *c > 0.0)) {
        return bad(format!("attn_logit_softcapping {cap} is not a positive number"));
    }
    Ok(())
}

pub fn load(vb: VarBuilder, spec: &Spec) -> Result<Model> {
    check(spec)?;
    // Weights are read under `model.*` (saved from a *ForCausalLM or
    // *ForSequenceClassification); a bare *Model checkpoint stores the same names without it.
    let vb = if vb.contains_tensor("model.embed_tokens.weight") { vb.pp("model") } else { vb };
    let last = spec.layers - 1;
    if !vb.contains_tensor(&format!("layers.{last}.self_attn.q_proj.weight")) {
        return Err(Error::invalid_file(
            "model.safetensors",
            format!("num_hidden_layers is {}, and the checkpoint has no layer {last}", spec.layers),
        ));
    }
    let (h, ff, d) = (spec.hidden, spec.intermediate, spec.head_dim);
    let load = || -> candle_core::Result<Model> {
        let norm = |vb: VarBuilder, width: usize| -> candle_core::Result<layers::Norm> {
            let mut weight = vb.get(width, "weight")?.to_vec1::<f32>()?;
            if spec.norm_plus_one {
                weight.iter_mut().for_each(|w| *w += 1.0);
            }
            Ok(layers::Norm::rms(weight, spec.eps))
        };
        let linear = |vb: VarBuilder, o: usize, i: usize, bias: bool| {
            let (w, b) = torch_parts(&vb, o, i, bias)?;
            layers::Linear::from_torch(w, b, o, i)
        };
        let stack = (0..spec.layers)
            .map(|i| -> candle_core::Result<layers::Layer> {
                let l = vb.pp(format!("layers.{i}"));
                let a = l.pp("self_attn");
                let part = |name: &str, o: usize| torch_parts(&a.pp(name), o, h, spec.qkv_bias);
                let qkv = layers::Linear::side_by_side(
                    vec![
                        part("q_proj", spec.heads * d)?,
                        part("k_proj", spec.kv_heads * d)?,
                        part("v_proj", spec.kv_heads * d)?,
                    ],
                    h,
                )?;
                let m = l.pp("mlp");
                let gate_up = layers::Linear::side_by_side(
                    vec![
                        torch_parts(&m.pp("gate_proj"), ff, h, spec.mlp_bias)?,
                        torch_parts(&m.pp("up_proj"), ff, h, spec.mlp_bias)?,
                    ],
                    h,
                )?;
                let qk_norms = spec.qk_norms.then(|| {
                    Ok::<_, candle_core::Error>((norm(a.pp("q_norm"), d)?, norm(a.pp("k_norm"), d)?))
                });
                let (output_norm, post_norms) = if spec.sandwich {
                    let post = (
                        norm(l.pp("post_attention_layernorm"), h)?,
                        norm(l.pp("post_feedforward_layernorm"), h)?,
                    );
                    (norm(l.pp("pre_feedforward_layernorm"), h)?, Some(post))
                } else {
                    (norm(l.pp("post_attention_layernorm"), h)?, None)
                };
                Ok(layers::Layer {
                    qkv,
                    attention_out: linear(a.pp("o_proj"), h, spec.heads * d, spec.o_bias)?,
                    attention_norm: norm(l.pp("input_layernorm"), h)?,
                    mlp: layers::Mlp::Gated { gate_up, down: linear(m.pp("down_proj"), h, ff, spec.mlp_bias)? },
                    output_norm,
                    qk_norms: qk_norms.transpose()?,
                    post_norms,
                })
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        let word =
            layers::Embedding::from_tensor(&vb.pp("embed_tokens").get((spec.vocab_size, h), "weight")?)?;
        let stack_spec = layers::StackSpec {
            hidden: h,
            heads: spec.heads,
            kv_heads: spec.kv_heads,
            head_dim: d,
            activation: spec.activation,
            norm_position: layers::NormPosition::Pre,
            final_norm: Some(norm(vb.pp("norm"), h)?),
            scaled: true,
            causal: spec.causal,
            rotary: Some(layers::Rotary::new(d, spec.rope_theta)),
            relative_bias: None,
            sliding: spec.sliding.as_ref().map(|(which, window, theta)| layers::Sliding {
                layers: which.clone(),
                window: *window,
                rotary: Some(layers::Rotary::new(d, *theta)),
            }),
            scale: spec.scale,
            softcap: spec.softcap,
        };
        Ok(Model { word, embed_scale: spec.embed_scale, stack: layers::Stack::new(stack, stack_spec)? })
    };
    load().map_err(bad_weights)
}

impl super::Model for Model {
    /// The last hidden states [tokens, hidden] of a packed batch; rotary positions 0..
    /// within each sequence. The decoders take no token types.
    fn forward(&self, batch: &super::Batch) -> candle_core::Result<Vec<f32>> {
        let lengths = batch.lengths()?;
        let mut x = self.word.gather(batch.ids)?;
        if let Some(scale) = self.embed_scale {
            x.iter_mut().for_each(|v| *v *= scale);
        }
        self.stack.try_forward(&mut x, &lengths)?;
        Ok(x)
    }
}

/// The rotary base of a config's layers (of `kind`, "full_attention" or
/// "sliding_attention", where the settings are per layer type): `rope_parameters` as
/// transformers 5 saves it (flat, or one entry per layer type), else the Hub's `legacy`
/// theta (`rope_theta`, Gemma's `rope_local_base_freq`), else `default`. Only the default
/// rotary type is implemented: any scaling (`rope_scaling`, another `rope_type`, a
/// `partial_rotary_factor`) is refused by name.
pub fn rope_theta(
    parameters: Option<&Value>,
    scaling: Option<&Value>,
    kind: &str,
    legacy: Option<f64>,
    default: f64,
) -> Result<f64> {
    if let Some(scaling) = scaling.filter(|s| !s.is_null()) {
        let kind = scaling.get("rope_type").or(scaling.get("type")).and_then(Value::as_str);
        if kind != Some("default") {
            return Err(unsupported("rope_scaling", &scaling.to_string(), "null (no rotary scaling)"));
        }
    }
    let parameters = parameters.filter(|p| !p.is_null());
    let own = parameters.and_then(|p| p.get(kind)).or(parameters);
    let rope_type = own.and_then(|p| p.get("rope_type").or(p.get("type"))).and_then(Value::as_str);
    if let Some(t) = rope_type.filter(|t| *t != "default") {
        return Err(unsupported("rope_type", t, "default"));
    }
    if let Some(f) =
        own.and_then(|p| p.get("partial_rotary_factor")).and_then(Value::as_f64).filter(|f| *f != 1.0)
    {
        return Err(unsupported("partial_rotary_factor", &f.to_string(), "1.0"));
    }
    let theta = own.and_then(|p| p.get("rope_theta")).and_then(Value::as_f64).or(legacy).unwrap_or(default);
    check_rope_theta(&format!("rope_theta of {kind}"), theta)?;
    Ok(theta)
}

/// The config fields Qwen2 and Qwen3 share (`transformers.Qwen2Config`,
/// `transformers.Qwen3Config`); defaults are transformers' defaults. Rotary settings are
/// read in both the transformers 5 form (`rope_parameters`) and the Hub's (`rope_theta`,
/// `rope_scaling`).
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct QwenConfig {
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
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    #[serde(default)]
    pub head_dim: Option<usize>,
    #[serde(default = "d::silu")]
    pub hidden_act: String,
    #[serde(default = "d::max_position_embeddings")]
    pub max_position_embeddings: usize,
    #[serde(default = "d::rms_norm_eps")]
    pub rms_norm_eps: f64,
    #[serde(default)]
    pub rope_theta: Option<f64>,
    #[serde(default)]
    pub rope_scaling: Option<Value>,
    #[serde(default)]
    pub rope_parameters: Option<Value>,
    #[serde(default)]
    pub use_sliding_window: bool,
    #[serde(default)]
    pub layer_types: Option<Vec<String>>,
    #[serde(default)]
    pub pad_token_id: Option<u32>,
}

mod d {
    pub fn vocab_size() -> usize {
        151936
    }
    pub fn hidden_size() -> usize {
        4096
    }
    pub fn intermediate_size() -> usize {
        22016
    }
    pub fn num_hidden_layers() -> usize {
        32
    }
    pub fn num_attention_heads() -> usize {
        32
    }
    pub fn silu() -> String {
        "silu".into()
    }
    pub fn max_position_embeddings() -> usize {
        32768
    }
    pub fn rms_norm_eps() -> f64 {
        1e-6
    }
}

impl QwenConfig {
    /// The backbone: causal, rotary, RMSNorm, SwiGLU, with the given head width (when the
    /// config names none), biases and q/k norms.
    pub fn spec(&self, head_dim: usize, qkv_bias: bool, o_bias: bool, qk_norms: bool) -> Result<Spec> {
        // Sliding-window layers (use_sliding_window) are not implemented: every layer is
        // causal over the whole input.
        if self.use_sliding_window {
            return Err(unsupported("use_sliding_window", "true", "false"));
        }
        if let Some(t) = self.layer_types.iter().flatten().find(|t| *t != "full_attention") {
            return Err(unsupported("layer_types", t, "full_attention"));
        }
        let heads = self.num_attention_heads;
        Ok(Spec {
            vocab_size: self.vocab_size,
            hidden: self.hidden_size,
            intermediate: self.intermediate_size,
            layers: self.num_hidden_layers,
            heads,
            kv_heads: self.num_key_value_heads.unwrap_or(heads),
            head_dim: self.head_dim.unwrap_or(head_dim),
            max_positions: self.max_position_embeddings,
            eps: self.rms_norm_eps,
            activation: activation("hidden_act", &self.hidden_act)?,
            qkv_bias,
            o_bias,
            mlp_bias: false,
            qk_norms,
            sandwich: false,
            norm_plus_one: false,
            embed_scale: None,
            scale: None,
            softcap: None,
            causal: true,
            rope_theta: rope_theta(
                self.rope_parameters.as_ref(),
                self.rope_scaling.as_ref(),
                "full_attention",
                self.rope_theta,
                10_000.0,
            )?,
            sliding: None,
        })
    }
}
