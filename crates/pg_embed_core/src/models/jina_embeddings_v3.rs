//! jina-embeddings-v3: transformers' `JinaEmbeddingsV3Model`, XLM-RoBERTa with rotary
//! positions instead of position embeddings: word + token type embeddings and a LayerNorm,
//! then post-LayerNorm layers (q, k, v and o with biases, rotary positions 0.. within each
//! sequence, a plain fc1 / fc2 MLP), as transformers computes it, on the layer library's
//! stack over packed tokens. Reads transformers' names and those of the checkpoints jinaai
//! publishes (`emb_ln`, `encoder.layers`, a fused `mixer.Wqkv`, `mixer.out_proj`,
//! `norm1`/`norm2`), which transformers maps to its own. GTE (`gte.rs`) is the same stack
//! with a gated MLP: [`RopeEncoder`] serves both.

use candle_core::Tensor;
use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::bert::{load_pooler, tanh_pooler};
use super::checks::{bad_weights, check_eps, check_heads, check_positions, with_prefix};
use super::{rotary, Batch};
use crate::error::{Error, Result};
use crate::layers;
use crate::weights::{layer_norm, torch_linear, torch_parts};

/// The config fields of the rotary encoders (jina-embeddings-v3, GTE), under
/// transformers' names. A field config.json leaves out takes the family's default
/// ([`Defaults`]), filled in when parsed (`fill`).
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Fields {
    #[serde(default)]
    pub vocab_size: Option<usize>,
    #[serde(default)]
    pub hidden_size: Option<usize>,
    #[serde(default)]
    pub num_hidden_layers: Option<usize>,
    #[serde(default)]
    pub num_attention_heads: Option<usize>,
    #[serde(default)]
    pub intermediate_size: Option<usize>,
    #[serde(default)]
    pub hidden_act: Option<String>,
    #[serde(default)]
    pub max_position_embeddings: Option<usize>,
    #[serde(default)]
    pub type_vocab_size: Option<usize>,
    #[serde(default)]
    pub layer_norm_eps: Option<f64>,
    #[serde(default)]
    pub pad_token_id: Option<u32>,
    #[serde(flatten)]
    pub rope: rotary::Fields,
}

/// A rotary encoder family's defaults (transformers').
pub struct Defaults {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub hidden_act: &'static str,
    pub max_position_embeddings: usize,
    pub type_vocab_size: usize,
    pub layer_norm_eps: f64,
    pub pad_token_id: u32,
    pub rope_theta: f64,
    /// GTE's `ntk` rotary type is known.
    pub rope_ntk: bool,
    pub feedforward: Feedforward,
}

/// `transformers.JinaEmbeddingsV3Config`'s defaults.
const JINA: Defaults = Defaults {
    vocab_size: 250002,
    hidden_size: 1024,
    num_hidden_layers: 24,
    num_attention_heads: 16,
    intermediate_size: 4096,
    hidden_act: "gelu",
    max_position_embeddings: 8194,
    type_vocab_size: 1,
    layer_norm_eps: 1e-5,
    pad_token_id: 1,
    rope_theta: 20_000.0,
    rope_ntk: false,
    feedforward: Feedforward::Plain,
};

impl Fields {
    pub fn dims(&self, d: &Defaults) -> super::Dims {
        super::Dims::text(
            self.hidden_size.unwrap_or(d.hidden_size),
            self.max_position_embeddings.unwrap_or(d.max_position_embeddings),
            self.vocab_size.unwrap_or(d.vocab_size),
            self.pad_token_id.unwrap_or(d.pad_token_id),
        )
    }

    /// Every field config.json left out set to the family's default, for the summary.
    pub fn fill(&mut self, d: &Defaults) {
        self.vocab_size.get_or_insert(d.vocab_size);
        self.hidden_size.get_or_insert(d.hidden_size);
        self.num_hidden_layers.get_or_insert(d.num_hidden_layers);
        self.num_attention_heads.get_or_insert(d.num_attention_heads);
        self.intermediate_size.get_or_insert(d.intermediate_size);
        self.hidden_act.get_or_insert_with(|| d.hidden_act.to_string());
        self.max_position_embeddings.get_or_insert(d.max_position_embeddings);
        self.type_vocab_size.get_or_insert(d.type_vocab_size);
        self.layer_norm_eps.get_or_insert(d.layer_norm_eps);
        self.pad_token_id.get_or_insert(d.pad_token_id);
    }

    pub fn shape<'a>(&'a self, d: &'a Defaults) -> Result<Shape<'a>> {
        let max_positions = self.max_position_embeddings.unwrap_or(d.max_position_embeddings);
        let family = rotary::Family { theta: d.rope_theta, max_positions, ntk: d.rope_ntk };
        Ok(Shape {
            vocab_size: self.vocab_size.unwrap_or(d.vocab_size),
            hidden: self.hidden_size.unwrap_or(d.hidden_size),
            layers: self.num_hidden_layers.unwrap_or(d.num_hidden_layers),
            heads: self.num_attention_heads.unwrap_or(d.num_attention_heads),
            intermediate: self.intermediate_size.unwrap_or(d.intermediate_size),
            type_vocab_size: self.type_vocab_size.unwrap_or(d.type_vocab_size),
            eps: self.layer_norm_eps.unwrap_or(d.layer_norm_eps),
            hidden_act: self.hidden_act.as_deref().unwrap_or(d.hidden_act),
            max_positions,
            rope: self.rope.full_attention(family)?,
            feedforward: d.feedforward,
        })
    }
}

/// `transformers.JinaEmbeddingsV3Config`.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    #[serde(flatten)]
    pub encoder: Fields,
}

/// The feed-forward block of a rotary encoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feedforward {
    /// fc1, activation, fc2, both with biases (jina-embeddings-v3).
    Plain,
    /// down(act(gate(x)) * up(x)), gate and up without biases, down with one (GTE).
    Gated,
}

/// What a rotary encoder is, from its config.
pub struct Shape<'a> {
    pub vocab_size: usize,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub intermediate: usize,
    pub type_vocab_size: usize,
    pub eps: f64,
    pub hidden_act: &'a str,
    pub max_positions: usize,
    pub rope: rotary::Rope,
    pub feedforward: Feedforward,
}

/// A post-LayerNorm encoder with rotary positions (jina-embeddings-v3, GTE), and BERT's
/// pooler when the checkpoint carries one (a sequence classifier's head reads it).
#[derive(Serialize, Deserialize)]
pub struct RopeEncoder {
    word: layers::Embedding,
    token_type: Option<layers::Embedding>,
    norm: layers::Norm,
    stack: layers::Stack,
    pooler: Option<(layers::Linear, usize)>,
}

/// The weight names a checkpoint uses.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Names {
    /// transformers': `layers.{i}.self_attn.q_proj`, `post_attention_layernorm`, ...
    Transformers,
    /// jinaai's: `encoder.layers.{i}.mixer.Wqkv`, `mixer.out_proj`, `norm1`, `norm2`, `emb_ln`.
    Jina,
    /// Alibaba-NLP's GTE (`NewModel`): `encoder.layer.{i}.attention.qkv_proj`, `attention.o_proj`,
    /// `attn_ln`, `mlp.up_gate_proj` (up, then gate), `mlp_ln`.
    New,
}

pub fn load(vb: VarBuilder, s: &Shape) -> Result<RopeEncoder> {
    check_heads(s.hidden, s.heads)?;
    check_eps("layer_norm_eps", s.eps)?;
    check_positions("max_position_embeddings", s.max_positions)?;
    let act = super::checks::activation("hidden_act", s.hidden_act)?;
    let vb = with_prefix(vb, &["", "roberta.", "gte.", "new.", "model."], "embeddings.word_embeddings.weight");
    let names = if vb.contains_tensor("layers.0.self_attn.q_proj.weight") {
        Names::Transformers
    } else if vb.contains_tensor("encoder.layers.0.mixer.Wqkv.weight") {
        Names::Jina
    } else if vb.contains_tensor("encoder.layer.0.attention.qkv_proj.weight") {
        Names::New
    } else {
        return Err(Error::invalid_file(
            "model.safetensors",
            "no layer 0 under the names of transformers (layers.0.self_attn.q_proj), jinaai (encoder.layers.0.mixer.Wqkv) or GTE (encoder.layer.0.attention.qkv_proj)",
        ));
    };
    let (h, ff) = (s.hidden, s.intermediate);
    let head_dim = h / s.heads;
    let rotary = s.rope.rotary(head_dim)?;
    let load = || -> candle_core::Result<RopeEncoder> {
        let norm = |vb: VarBuilder| layer_norm(&vb, h, s.eps, true);
        let layer = |i: usize| -> candle_core::Result<layers::Layer> {
            let (l, qkv, attention_out, attention_norm, output_norm) = match names {
                Names::Transformers => {
                    let l = vb.pp(format!("layers.{i}"));
                    let a = l.pp("self_attn");
                    let part = |name: &str| torch_parts(&a.pp(name), h, h, true);
                    let qkv = layers::Linear::side_by_side(vec![part("q_proj")?, part("k_proj")?, part("v_proj")?], h)?;
                    let out = torch_linear(&a.pp("o_proj"), h, h, true)?;
                    let (an, on) = (norm(l.pp("post_attention_layernorm"))?, norm(l.pp("post_mlp_layernorm"))?);
                    (l, qkv, out, an, on)
                }
                Names::Jina => {
                    let l = vb.pp(format!("encoder.layers.{i}"));
                    let qkv = torch_linear(&l.pp("mixer.Wqkv"), 3 * h, h, true)?;
                    let out = torch_linear(&l.pp("mixer.out_proj"), h, h, true)?;
                    (l.clone(), qkv, out, norm(l.pp("norm1"))?, norm(l.pp("norm2"))?)
                }
                Names::New => {
                    let l = vb.pp(format!("encoder.layer.{i}"));
                    let qkv = torch_linear(&l.pp("attention.qkv_proj"), 3 * h, h, true)?;
                    let out = torch_linear(&l.pp("attention.o_proj"), h, h, true)?;
                    (l.clone(), qkv, out, norm(l.pp("attn_ln"))?, norm(l.pp("mlp_ln"))?)
                }
            };
            let mlp = match s.feedforward {
                Feedforward::Plain => layers::Mlp::Plain {
                    up: torch_linear(&l.pp("mlp.fc1"), ff, h, true)?,
                    down: torch_linear(&l.pp("mlp.fc2"), h, ff, true)?,
                },
                Feedforward::Gated => {
                    let (gate, up) = if names == Names::New {
                        // One [2 ff, hidden] product: the up rows, then the gate rows.
                        let (both, _) = torch_parts(&l.pp("mlp.up_gate_proj"), 2 * ff, h, false)?;
                        let (up, gate) = both.split_at(ff * h);
                        (gate.to_vec(), up.to_vec())
                    } else {
                        (torch_parts(&l.pp("mlp.gate_proj"), ff, h, false)?.0, torch_parts(&l.pp("mlp.up_proj"), ff, h, false)?.0)
                    };
                    layers::Mlp::Gated {
                        gate_up: layers::Linear::side_by_side(vec![(gate, None), (up, None)], h)?,
                        down: torch_linear(&l.pp("mlp.down_proj"), h, ff, true)?,
                    }
                }
            };
            Ok(layers::Layer { qkv, attention_out, attention_norm, mlp, output_norm, qk_norms: None, post_norms: None })
        };
        let stack = (0..s.layers).map(layer).collect::<candle_core::Result<Vec<_>>>()?;
        let e = vb.pp("embeddings");
        let table = |vb: VarBuilder, rows: usize| layers::Embedding::from_tensor(&vb.get((rows, h), "weight")?);
        let word = table(e.pp("word_embeddings"), s.vocab_size)?;
        let token_type = (s.type_vocab_size > 0)
            .then(|| table(e.pp("token_type_embeddings"), s.type_vocab_size))
            .transpose()?;
        let norm = norm(if names == Names::Jina { vb.pp("emb_ln") } else { e.pp("LayerNorm") })?;
        let spec = layers::StackSpec {
            head_dim,
            rotary: Some(rotary),
            ..layers::StackSpec::post_norm(h, s.heads, act)
        };
        Ok(RopeEncoder { word, token_type, norm, stack: layers::Stack::new(stack, spec)?, pooler: None })
    };
    let mut model = load().map_err(bad_weights)?;
    model.pooler = load_pooler(&vb, h)?;
    Ok(model)
}

impl super::Model for RopeEncoder {
    /// The last hidden states [tokens, hidden] of a packed batch; rotary positions 0..
    /// within each sequence; token types as the tokenizer gives them, else zeros.
    fn forward(&self, batch: &Batch) -> candle_core::Result<Vec<f32>> {
        let lengths = batch.lengths()?;
        let mut x = self.word.gather(batch.ids)?;
        if let Some(token_type) = &self.token_type {
            token_type.add(batch.type_ids_or_zeros().iter().copied(), &mut x)?;
        }
        self.norm.forward(&mut x);
        self.stack.try_forward(&mut x, &lengths)?;
        Ok(x)
    }

    fn pooler_size(&self) -> Option<usize> {
        self.pooler.as_ref().map(|(_, width)| *width)
    }

    fn pooler(&self, hidden: &[f32], batch: &Batch) -> candle_core::Result<Option<Tensor>> {
        tanh_pooler(self.pooler.as_ref(), hidden, batch)
    }
}

impl super::Config for Config {
    fn dims(&self) -> super::Dims {
        self.encoder.dims(&JINA)
    }
    fn fill_defaults(&mut self) {
        self.encoder.fill(&JINA);
    }
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn super::Model>> {
        Ok(Box::new(load(vb, &self.encoder.shape(&JINA)?)?))
    }
}
