//! The rotary decoders' backbone and config, shared by Qwen2, Qwen3, Gemma 2, Gemma 3,
//! Llama, Mistral and EuroBERT (one file each for what is their own): token embeddings
//! (scaled, for Gemma), then pre-RMSNorm layers of grouped-query attention with rotary
//! positions and a gated MLP (gate_proj, up_proj, down_proj), then a final RMSNorm, as
//! transformers' `*Model` classes compute them, on the layer library's stack over packed
//! tokens. What differs between them is a field of [`Spec`]: biases, per-head q/k norms,
//! sandwich norms, Gemma's `1 + weight` norm scale, the attention scale, causal or
//! bidirectional masks and sliding-window layers with their own rotary base. The config
//! fields they share are [`Fields`], each family's defaults a [`Defaults`] table, filled
//! in when config.json is parsed; rotary settings are read by `rotary.rs`.

use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::checks::{activation, bad_weights, check_eps, check_positions, unsupported};
use super::rotary;
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
    /// The global layers' rotary positions.
    pub rope: rotary::Rope,
    /// Sliding-window layers: which layers slide, the window (each query sees the keys at
    /// most this many positions away) and their rotary positions.
    pub sliding: Option<(Vec<bool>, usize, rotary::Rope)>,
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
    let rotary = spec.rope.rotary(d)?;
    let local_rotary = spec.sliding.as_ref().map(|(_, _, rope)| rope.rotary(d)).transpose()?;
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
            rotary: Some(rotary),
            relative_bias: None,
            sliding: spec.sliding.as_ref().zip(local_rotary).map(|((which, window, _), rotary)| layers::Sliding {
                layers: which.clone(),
                window: *window,
                rotary: Some(rotary),
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


/// The config fields the rotary decoders share, under transformers' names. A field
/// config.json leaves out takes the family's default ([`Defaults`]), filled in when parsed
/// (`fill`) as each family's config class does; the keys a family does not have
/// (`hidden_activation` but for Gemma, `mlp_bias` but for the Llama family, ...) stay
/// out of its summary unless config.json names them.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Fields {
    #[serde(default)]
    pub vocab_size: Option<usize>,
    #[serde(default)]
    pub hidden_size: Option<usize>,
    #[serde(default)]
    pub intermediate_size: Option<usize>,
    #[serde(default)]
    pub num_hidden_layers: Option<usize>,
    #[serde(default)]
    pub num_attention_heads: Option<usize>,
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    #[serde(default)]
    pub head_dim: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden_act: Option<String>,
    /// Gemma's name for the MLP's activation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden_activation: Option<String>,
    #[serde(default)]
    pub max_position_embeddings: Option<usize>,
    #[serde(default)]
    pub rms_norm_eps: Option<f64>,
    /// Biases on all four attention projections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_bias: Option<bool>,
    /// Biases on gate_proj, up_proj and down_proj.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mlp_bias: Option<bool>,
    /// Per layer, "full_attention" or "sliding_attention" ([`sliding_layers`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer_types: Option<Vec<String>>,
    #[serde(flatten)]
    pub rope: rotary::Fields,
    #[serde(default)]
    pub pad_token_id: Option<u32>,
}

/// A family's defaults for the fields config.json leaves out (transformers' defaults).
pub struct Defaults {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    /// None: as many as the query heads.
    pub num_key_value_heads: Option<usize>,
    /// None: hidden_size / num_attention_heads.
    pub head_dim: Option<usize>,
    /// The key naming the MLP's activation (`hidden_act`, Gemma's `hidden_activation`)
    /// and its default.
    pub activation: (&'static str, &'static str),
    pub max_position_embeddings: usize,
    pub rms_norm_eps: f64,
    /// None where the family has no such setting (Qwen2's biases are fixed).
    pub attention_bias: Option<bool>,
    pub mlp_bias: Option<bool>,
    pub pad_token_id: Option<u32>,
    /// The rotary base of the global layers when config.json names none.
    pub rope_theta: f64,
}

impl Fields {
    fn hidden(&self, d: &Defaults) -> usize {
        self.hidden_size.unwrap_or(d.hidden_size)
    }

    fn heads(&self, d: &Defaults) -> usize {
        self.num_attention_heads.unwrap_or(d.num_attention_heads)
    }

    fn layers(&self, d: &Defaults) -> usize {
        self.num_hidden_layers.unwrap_or(d.num_hidden_layers)
    }

    fn activation_name<'a>(&'a self, d: &'a Defaults) -> &'a str {
        let gemma = d.activation.0 == "hidden_activation";
        let named = if gemma { &self.hidden_activation } else { &self.hidden_act };
        named.as_deref().unwrap_or(d.activation.1)
    }

    /// The sizes the pipeline reads.
    pub fn dims(&self, d: &Defaults) -> super::Dims {
        super::Dims::text(
            self.hidden(d),
            self.max_position_embeddings.unwrap_or(d.max_position_embeddings),
            self.vocab_size.unwrap_or(d.vocab_size),
            self.pad_token_id.or(d.pad_token_id).unwrap_or(0),
        )
    }

    /// Every field config.json left out set to the family's default, for the summary (the
    /// backbone reads the same values either way).
    pub fn fill(&mut self, d: &Defaults) {
        let (hidden, heads) = (self.hidden(d), self.heads(d));
        self.vocab_size.get_or_insert(d.vocab_size);
        self.hidden_size = Some(hidden);
        self.intermediate_size.get_or_insert(d.intermediate_size);
        self.num_hidden_layers.get_or_insert(d.num_hidden_layers);
        self.num_attention_heads = Some(heads);
        self.num_key_value_heads.get_or_insert(d.num_key_value_heads.unwrap_or(heads));
        self.head_dim.get_or_insert(d.head_dim.unwrap_or(hidden.checked_div(heads).unwrap_or(0)));
        let gemma = d.activation.0 == "hidden_activation";
        let named = if gemma { &mut self.hidden_activation } else { &mut self.hidden_act };
        named.get_or_insert_with(|| d.activation.1.to_string());
        self.max_position_embeddings.get_or_insert(d.max_position_embeddings);
        self.rms_norm_eps.get_or_insert(d.rms_norm_eps);
        self.attention_bias = self.attention_bias.or(d.attention_bias);
        self.mlp_bias = self.mlp_bias.or(d.mlp_bias);
        self.pad_token_id = self.pad_token_id.or(d.pad_token_id);
    }

    /// The backbone as the shared fields describe it: causal, every layer global, biases
    /// as `attention_bias` and `mlp_bias` say, the global rotary base; each family changes
    /// what is its own.
    pub fn spec(&self, d: &Defaults) -> Result<Spec> {
        let (hidden, heads, layers) = (self.hidden(d), self.heads(d), self.layers(d));
        let attention_bias = self.attention_bias.or(d.attention_bias).unwrap_or(false);
        Ok(Spec {
            vocab_size: self.vocab_size.unwrap_or(d.vocab_size),
            hidden,
            intermediate: self.intermediate_size.unwrap_or(d.intermediate_size),
            layers,
            heads,
            kv_heads: self.num_key_value_heads.or(d.num_key_value_heads).unwrap_or(heads),
            head_dim: self.head_dim.or(d.head_dim).unwrap_or(hidden.checked_div(heads).unwrap_or(0)),
            max_positions: self.max_position_embeddings.unwrap_or(d.max_position_embeddings),
            eps: self.rms_norm_eps.unwrap_or(d.rms_norm_eps),
            activation: activation(d.activation.0, self.activation_name(d))?,
            qkv_bias: attention_bias,
            o_bias: attention_bias,
            mlp_bias: self.mlp_bias.or(d.mlp_bias).unwrap_or(false),
            qk_norms: false,
            sandwich: false,
            norm_plus_one: false,
            embed_scale: None,
            scale: None,
            softcap: None,
            causal: true,
            rope: self.rope.full_attention(self.rotary_family(d, false))?,
            sliding: None,
        })
    }

    /// Where this family's rotary settings may say what (`ntk`: GTE's type).
    pub fn rotary_family(&self, d: &Defaults, ntk: bool) -> rotary::Family {
        let max_positions = self.max_position_embeddings.unwrap_or(d.max_position_embeddings);
        rotary::Family { theta: d.rope_theta, max_positions, ntk }
    }

    /// Refuses sliding-window layers where the family implements none (Qwen2, Qwen3):
    /// every `layer_types` entry must be "full_attention".
    pub fn full_attention_only(&self) -> Result<()> {
        if let Some(t) = self.layer_types.iter().flatten().find(|t| *t != "full_attention") {
            return Err(unsupported("layer_types", t, "full_attention"));
        }
        Ok(())
    }

    /// Which of the layers slide: `layer_types` (one entry per layer) when config.json
    /// lists them, else `fallback` of each layer's index (the family's pattern).
    pub fn sliding_layers(&self, d: &Defaults, fallback: impl Fn(usize) -> bool) -> Result<Vec<bool>> {
        let layers = self.layers(d);
        let Some(types) = &self.layer_types else {
            return Ok((0..layers).map(fallback).collect());
        };
        if types.len() != layers {
            return Err(unsupported(
                "layer_types",
                &format!("{} entries for {layers} layers", types.len()),
                "one entry per layer",
            ));
        }
        types
            .iter()
            .map(|t| match t.as_str() {
                "sliding_attention" => Ok(true),
                "full_attention" => Ok(false),
                other => Err(unsupported("layer_types", other, "sliding_attention, full_attention")),
            })
            .collect()
    }
}

/// A causal sliding window as config.json names it (null: none): the query and the
/// `window - 1` tokens before it, so 0 is refused.
pub fn causal_window(window: Option<usize>) -> Result<Option<usize>> {
    if window == Some(0) {
        return Err(unsupported("sliding_window", "0", "a positive number of tokens, or null"));
    }
    Ok(window.map(|w| w - 1))
}

/// Gemma's attention scale, query_pre_attn_scalar^-0.5, of a positive scalar.
pub fn gemma_scale(query_pre_attn_scalar: f64) -> Result<f32> {
    if query_pre_attn_scalar.is_nan() || query_pre_attn_scalar <= 0.0 {
        let value = query_pre_attn_scalar.to_string();
        return Err(unsupported("query_pre_attn_scalar", &value, "a positive number"));
    }
    Ok(query_pre_attn_scalar.powf(-0.5) as f32)
}
