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
use serde_json::Value;

use super::bert::{load_pooler, tanh_pooler};
use super::checks::{bad_weights, check_eps, check_heads, check_positions, with_prefix};
use super::Batch;
use crate::error::{Error, Result};
use crate::layers;
use crate::weights::{layer_norm, torch_linear, torch_parts};

/// `transformers.JinaEmbeddingsV3Config`; defaults are transformers' defaults.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    #[serde(default = "d::vocab_size")]
    pub vocab_size: usize,
    #[serde(default = "d::hidden_size")]
    pub hidden_size: usize,
    #[serde(default = "d::num_hidden_layers")]
    pub num_hidden_layers: usize,
    #[serde(default = "d::num_attention_heads")]
    pub num_attention_heads: usize,
    #[serde(default = "d::intermediate_size")]
    pub intermediate_size: usize,
    #[serde(default = "d::hidden_act")]
    pub hidden_act: String,
    #[serde(default = "d::max_position_embeddings")]
    pub max_position_embeddings: usize,
    #[serde(default = "d::type_vocab_size")]
    pub type_vocab_size: usize,
    #[serde(default = "d::layer_norm_eps")]
    pub layer_norm_eps: f64,
    #[serde(default = "d::pad_token_id")]
    pub pad_token_id: u32,
    #[serde(default)]
    pub rope_parameters: Option<Value>,
    #[serde(default)]
    pub rope_theta: Option<f64>,
    #[serde(default)]
    pub rope_scaling: Option<Value>,
}

mod d {
    pub fn vocab_size() -> usize {
        250002
    }
    pub fn hidden_size() -> usize {
        1024
    }
    pub fn num_hidden_layers() -> usize {
        24
    }
    pub fn num_attention_heads() -> usize {
        16
    }
    pub fn intermediate_size() -> usize {
        4096
    }
    pub fn hidden_act() -> String {
        "gelu".into()
    }
    pub fn max_position_embeddings() -> usize {
        8194
    }
    pub fn type_vocab_size() -> usize {
        1
    }
    pub fn layer_norm_eps() -> f64 {
        1e-5
    }
    pub fn pad_token_id() -> u32 {
        1
    }
}

/// The feed-forward block of a rotary encoder.
#[derive(Clone, Copy, PartialEq, Eq)]
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
    pub rope_theta: f64,
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
            rotary: Some(layers::Rotary::new(head_dim, s.rope_theta)),
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

impl Config {
    fn shape(&self) -> Result<Shape<'_>> {
        Ok(Shape {
            vocab_size: self.vocab_size,
            hidden: self.hidden_size,
            layers: self.num_hidden_layers,
            heads: self.num_attention_heads,
            intermediate: self.intermediate_size,
            type_vocab_size: self.type_vocab_size,
            eps: self.layer_norm_eps,
            hidden_act: &self.hidden_act,
            max_positions: self.max_position_embeddings,
            rope_theta: super::decoder::rope_theta(
                self.rope_parameters.as_ref(),
                self.rope_scaling.as_ref(),
                "full_attention",
                self.rope_theta,
                20_000.0,
            )?,
            feedforward: Feedforward::Plain,
        })
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
        Ok(Box::new(load(vb, &self.shape()?)?))
    }
    fn restore(&self, prepared: serde_json::Value) -> Result<Box<dyn super::Model>> {
        super::restore::<RopeEncoder>(prepared)
    }
}
