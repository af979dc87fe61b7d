//! DeBERTa-v2 / DeBERTa-v3 (disentangled relative attention), as transformers'
//! `DebertaV2Model` computes it, on the layer library's post-norm stack over packed tokens:
//! the disentangled terms are the stack's score term.

use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::checks::{bad_weights, check_eps, check_heads, check_positions, unsupported, with_prefix};
use crate::error::{Error, Result};
use crate::layers::{self, Activation};
use crate::prepared::Floats;

/// `transformers.DebertaV2Config`
/// (https://huggingface.co/docs/transformers/model_doc/deberta-v2#transformers.DebertaV2Config);
/// defaults are transformers' defaults (including the attributes its model reads with
/// `getattr(config, ..., default)`).
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
    #[serde(default = "d::gelu")]
    pub hidden_act: String,
    #[serde(default = "d::max_position_embeddings")]
    pub max_position_embeddings: usize,
    #[serde(default)]
    pub type_vocab_size: usize,
    #[serde(default = "d::layer_norm_eps")]
    pub layer_norm_eps: f64,
    #[serde(default)]
    pub relative_attention: bool,
    #[serde(default = "d::minus_one")]
    pub max_relative_positions: isize,
    #[serde(default)]
    pub pad_token_id: usize,
    #[serde(default = "d::yes")]
    pub position_biased_input: bool,
    #[serde(default)]
    pub pos_att_type: Option<PosAttType>,
    #[serde(default = "d::minus_one")]
    pub position_buckets: isize,
    #[serde(default)]
    pub share_att_key: bool,
    #[serde(default)]
    pub norm_rel_ebd: Option<String>,
    #[serde(default)]
    pub embedding_size: Option<usize>,
    #[serde(default)]
    pub attention_head_size: Option<usize>,
    #[serde(default)]
    pub conv_kernel_size: usize,
    /// The ContextPooler of the classification head (default: hidden_size).
    #[serde(default)]
    pub pooler_hidden_size: Option<usize>,
    #[serde(default = "d::gelu")]
    pub pooler_hidden_act: String,
}

/// `pos_att_type` as a list or as transformers' older "p2c|c2p" string.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(untagged)]
pub enum PosAttType {
    List(Vec<String>),
    Joined(String),
}

impl PosAttType {
    fn to_vec(&self) -> Vec<String> {
        match self {
            PosAttType::List(v) => v.clone(),
            PosAttType::Joined(s) => {
                s.split('|').map(|p| p.trim().to_string()).filter(|p| !p.is_empty()).collect()
            }
        }
    }
}

mod d {
    pub fn vocab_size() -> usize {
        128100
    }
    pub fn hidden_size() -> usize {
        1536
    }
    pub fn num_hidden_layers() -> usize {
        24
    }
    pub fn num_attention_heads() -> usize {
        24
    }
    pub fn intermediate_size() -> usize {
        6144
    }
    pub fn gelu() -> String {
        "gelu".into()
    }
    pub fn max_position_embeddings() -> usize {
        512
    }
    pub fn layer_norm_eps() -> f64 {
        1e-7
    }
    pub fn minus_one() -> isize {
        -1
    }
    pub fn yes() -> bool {
        true
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Model {
    word: layers::Embedding,
    position: Option<layers::Embedding>,
    token_type: Option<layers::Embedding>,
    /// From embedding_size to hidden_size, when they differ.
    project: Option<layers::Linear>,
    norm: layers::Norm,
    stack: layers::Stack,
    /// Disentangled attention (relative_attention), a score term of every layer.
    terms: Option<Disentangled>,
}

fn act(name: &str) -> Result<Activation> {
    Ok(match name {
        "gelu" => Activation::Gelu,
        "gelu_new" | "gelu_pytorch_tanh" => Activation::GeluTanh,
        "relu" => Activation::Relu,
        other => return Err(unsupported("hidden_act", other, "gelu, gelu_new, gelu_pytorch_tanh, relu")),
    })
}

impl Config {
    pub fn pooler_hidden_size(&self) -> usize {
        self.pooler_hidden_size.unwrap_or(self.hidden_size)
    }
}

/// transformers' `make_log_bucket_position` of one relative position, in float32 as torch
/// computes it: exact within `bucket_size / 2`, logarithmic up to `max_position`.
fn log_bucket(relative: i64, bucket_size: i64, max_position: i64) -> i64 {
    let mid = bucket_size / 2;
    let abs = if relative < mid && relative > -mid { mid - 1 } else { relative.abs() };
    if abs <= mid {
        return relative;
    }
    // (Saturating: config numbers that make no sense still give a position, clamped later.)
    let log = ((abs as f32 / mid as f32).ln() / ((max_position as f32 - 1.0) / mid as f32).ln()
        * (mid - 1) as f32)
        .ceil() as i64;
    log.saturating_add(mid).saturating_mul(relative.signum())
}

/// DeBERTa's disentangled attention terms: content to position (c2p, each query against the
/// relative embeddings projected as keys) and position to content (p2c, each key against
/// them projected as queries), by the bucketed distance between query and key.
#[derive(serde::Serialize, serde::Deserialize)]
struct Disentangled {
    /// Per layer, the relative embeddings through its key projection [2 span, heads
    /// head_dim] (c2p) and through its query projection (p2c).
    c2p: Vec<Option<Floats>>,
    p2c: Vec<Option<Floats>>,
    span: i64,
    buckets: i64,
    max_relative: i64,
    head_dim: usize,
    width: usize,
    /// 1 / sqrt(head_dim scale_factor).
    scale: f32,
}

impl Disentangled {
    /// The bucketed query - key distance.
    fn relative(&self, distance: i64) -> i64 {
        if self.buckets > 0 && self.max_relative > 0 {
            log_bucket(distance, self.buckets, self.max_relative)
        } else {
            distance
        }
    }
}

impl layers::ScoreTerm for Disentangled {
    fn add(
        &self,
        layer: usize,
        head: usize,
        _offset: usize,
        q: &[f32],
        k: &[f32],
        stride: usize,
        len: usize,
        scores: &mut [f32],
    ) {
        let d = self.head_dim;
        let last = 2 * self.span - 1;
        // Row of the position table for query i and key j (by i - j + len - 1).
        let index: Vec<usize> = (0..2 * len.max(1) - 1)
            .map(|r| {
                self.relative(r as i64 - (len as i64 - 1)).saturating_add(self.span).clamp(0, last) as usize
            })
            .collect();
        let dot = |a: &[f32], table: &[f32], row: usize| -> f32 {
            let p = &table[row * self.width + head * d..][..d];
            a[..d].iter().zip(p).map(|(x, y)| x * y).sum()
        };
        if let Some(Some(pos_key)) = self.c2p.get(layer) {
            for i in 0..len {
                let qi = &q[i * stride..];
                for j in 0..len {
                    scores[i * len + j] += dot(qi, pos_key, index[i + len - 1 - j]) * self.scale;
                }
            }
        }
        if let Some(Some(pos_query)) = self.p2c.get(layer) {
            for j in 0..len {
                let kj = &k[j * stride..];
                for i in 0..len {
                    // transformers gathers at -relative(j - i) + span.
                    let r = self.relative(j as i64 - i as i64).saturating_neg().saturating_add(self.span);
                    let r = r.clamp(0, last) as usize;
                    scores[i * len + j] += dot(kj, pos_query, r) * self.scale;
                }
            }
        }
    }
}

pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Model> {
    check_heads(cfg.hidden_size, cfg.num_attention_heads)?;
    // Position ids and the relative position span come from these numbers: bounded
    // before anything is allocated.
    check_positions("max_position_embeddings", cfg.max_position_embeddings)?;
    check_positions("max_relative_positions", cfg.max_relative_positions.max(0) as usize)?;
    check_positions("position_buckets", cfg.position_buckets.max(0) as usize)?;
    check_eps("layer_norm_eps", cfg.layer_norm_eps)?;
    if cfg.conv_kernel_size > 0 {
        return Err(unsupported(
            "conv_kernel_size",
            &cfg.conv_kernel_size.to_string(),
            "0 (no convolution layer)",
        ));
    }
    let pos_att_type = cfg.pos_att_type.as_ref().map(PosAttType::to_vec).unwrap_or_default();
    if let Some(bad) = pos_att_type.iter().find(|p| !matches!(p.as_str(), "c2p" | "p2c")) {
        return Err(unsupported("pos_att_type", bad, "c2p, p2c"));
    }
    let activation = act(&cfg.hidden_act)?;
    act(&cfg.pooler_hidden_act)?;
    let vb = with_prefix(vb, &["", "deberta."], "embeddings.word_embeddings.weight");
    let c2p = pos_att_type.iter().any(|p| p == "c2p");
    let p2c = pos_att_type.iter().any(|p| p == "p2c");
    let h = cfg.hidden_size;
    let heads = cfg.num_attention_heads;
    let head_dim = cfg.attention_head_size.unwrap_or(h / heads);
    let eps = cfg.layer_norm_eps;
    let scale_factor = 1 + usize::from(c2p) + usize::from(p2c);
    let max_relative = if cfg.max_relative_positions < 1 {
        cfg.max_position_embeddings as i64
    } else {
        cfg.max_relative_positions as i64
    };
    let span = if cfg.position_buckets > 0 { cfg.position_buckets as i64 } else { max_relative };
    if cfg.relative_attention && span < 1 {
        return Err(Error::invalid_file(
            "config.json",
            "relative_attention needs position_buckets, max_relative_positions or max_position_embeddings above 0",
        ));
    }
    let scale = 1.0 / (head_dim as f32 * scale_factor as f32).sqrt();
    let load = || -> candle_core::Result<Model> {
        let all = heads
            .checked_mul(head_dim)
            .ok_or_else(|| candle_core::Error::Msg(format!("{heads} heads of {head_dim}")))?;
        let weight = |vb: &VarBuilder, o: usize, i: usize| -> candle_core::Result<Vec<f32>> {
            vb.get((o, i), "weight")?.flatten_all()?.to_vec1::<f32>()
        };
        let bias = |vb: &VarBuilder, o: usize| vb.get(o, "bias")?.to_vec1::<f32>();
        let linear = |vb: VarBuilder, o: usize, i: usize| -> candle_core::Result<layers::Linear> {
            layers::Linear::from_torch(weight(&vb, o, i)?, Some(bias(&vb, o)?), o, i)
        };
        let norm = |vb: VarBuilder, width: usize| -> candle_core::Result<layers::Norm> {
            layers::Norm::layer(
                vb.get(width, "weight")?.to_vec1::<f32>()?,
                Some(vb.get(width, "bias")?.to_vec1::<f32>()?),
                eps,
            )
        };
        // The relative embeddings, normed when norm_rel_ebd says so.
        let enc = vb.pp("encoder");
        let relative = if cfg.relative_attention {
            let rows = usize::try_from(2 * span)
                .map_err(|_| candle_core::Error::Msg(format!("a relative position span of {span}")))?;
            let mut table = enc.get((rows, h), "rel_embeddings.weight")?.flatten_all()?.to_vec1::<f32>()?;
            let norm_rel = cfg.norm_rel_ebd.as_deref().unwrap_or("none").to_lowercase();
            if norm_rel.split('|').any(|p| p.trim() == "layer_norm") {
                norm(enc.pp("LayerNorm"), h)?.forward(&mut table);
            }
            Some((table, rows))
        } else {
            None
        };
        let mut terms = Disentangled {
            c2p: Vec::new(),
            p2c: Vec::new(),
            span,
            buckets: cfg.position_buckets as i64,
            max_relative,
            head_dim,
            width: all,
            scale,
        };
        let mut stack = Vec::with_capacity(cfg.num_hidden_layers.min(1024));
        for i in 0..cfg.num_hidden_layers {
            let l = enc.pp(format!("layer.{i}"));
            let a = l.pp("attention.self");
            let (q, k, v) = (a.pp("query_proj"), a.pp("key_proj"), a.pp("value_proj"));
            let (qw, kw, vw) = (weight(&q, all, h)?, weight(&k, all, h)?, weight(&v, all, h)?);
            let (qb, kb, vb_) = (bias(&q, all)?, bias(&k, all)?, bias(&v, all)?);
            if let Some((table, _)) = &relative {
                let project = |w: &[f32], b: &[f32]| -> candle_core::Result<Vec<f32>> {
                    Ok(layers::Linear::from_torch(w.to_vec(), Some(b.to_vec()), all, h)?.apply(table))
                };
                let (pos_key, pos_query) = if cfg.share_att_key {
                    (c2p.then(|| project(&kw, &kb)).transpose()?, p2c.then(|| project(&qw, &qb)).transpose()?)
                } else {
                    let own = |name: &str| -> candle_core::Result<Vec<f32>> {
                        let p = a.pp(name);
                        project(&weight(&p, all, h)?, &bias(&p, all)?)
                    };
                    (
                        c2p.then(|| own("pos_key_proj")).transpose()?,
                        p2c.then(|| own("pos_query_proj")).transpose()?,
                    )
                };
                terms.c2p.push(pos_key.map(Into::into));
                terms.p2c.push(pos_query.map(Into::into));
            }
            let qkv = layers::Linear::side_by_side(vec![(qw, Some(qb)), (kw, Some(kb)), (vw, Some(vb_))], h)?;
            let ff = cfg.intermediate_size;
            stack.push(layers::Layer {
                qkv,
                attention_out: linear(l.pp("attention.output.dense"), h, all)?,
                attention_norm: norm(l.pp("attention.output.LayerNorm"), h)?,
                mlp: layers::Mlp::Plain {
                    up: linear(l.pp("intermediate.dense"), ff, h)?,
                    down: linear(l.pp("output.dense"), h, ff)?,
                },
                output_norm: norm(l.pp("output.LayerNorm"), h)?,
                qk_norms: None,
                post_norms: None,
            });
        }
        let e = vb.pp("embeddings");
        let width = cfg.embedding_size.unwrap_or(h);
        let table =
            |vb: VarBuilder, rows: usize| layers::Embedding::from_tensor(&vb.get((rows, width), "weight")?);
        let word = table(e.pp("word_embeddings"), cfg.vocab_size)?;
        let position = cfg
            .position_biased_input
            .then(|| table(e.pp("position_embeddings"), cfg.max_position_embeddings))
            .transpose()?;
        let token_type = (cfg.type_vocab_size > 0)
            .then(|| table(e.pp("token_type_embeddings"), cfg.type_vocab_size))
            .transpose()?;
        let project = (width != h)
            .then(|| layers::Linear::from_torch(weight(&e.pp("embed_proj"), h, width)?, None, h, width))
            .transpose()?;
        let spec = layers::StackSpec {
            head_dim,
            scale: Some(scale),
            ..layers::StackSpec::post_norm(h, heads, activation)
        };
        let norm = norm(e.pp("LayerNorm"), h)?;
        let terms = relative.is_some().then_some(terms);
        Ok(Model { word, position, token_type, project, norm, stack: layers::Stack::new(stack, spec)?, terms })
    };
    load().map_err(bad_weights)
}

impl Model {
    /// The last hidden states [tokens, hidden] of a packed batch: `ids` and `type_ids` of
    /// every sequence end to end, sequence i at tokens bounds[i]..bounds[i + 1]; positions
    /// 0.. within each.
    pub fn forward_packed(
        &self,
        ids: &[u32],
        type_ids: &[u32],
        bounds: &[usize],
    ) -> candle_core::Result<Vec<f32>> {
        let lengths = layers::lengths_of(bounds, ids.len())?;
        let mut x = self.word.gather(ids)?;
        if let Some(position) = &self.position {
            position.add(lengths.iter().flat_map(|&len| 0..len as u32), &mut x)?;
        }
        if let Some(token_type) = &self.token_type {
            if type_ids.len() != ids.len() {
                candle_core::bail!("{} token type ids for {} tokens", type_ids.len(), ids.len());
            }
            token_type.add(type_ids.iter().copied(), &mut x)?;
        }
        if let Some(project) = &self.project {
            x = project.apply(&x);
        }
        self.norm.forward(&mut x);
        let term = self.terms.as_ref().map(|t| t as &dyn layers::ScoreTerm);
        self.stack.try_forward_with(&mut x, &lengths, term)?;
        Ok(x)
    }
}

impl super::Config for Config {
    fn dims(&self) -> super::Dims {
        super::Dims::text(
            self.hidden_size,
            self.max_position_embeddings,
            self.vocab_size,
            self.pad_token_id as u32,
        )
    }
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn super::Model>> {
        Ok(Box::new(load(vb, self)?))
    }
}

impl super::Model for Model {
    fn forward(&self, batch: &super::Batch) -> candle_core::Result<Vec<f32>> {
        self.forward_packed(batch.ids, &batch.type_ids_or_zeros(), batch.bounds)
    }
}
