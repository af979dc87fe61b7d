//! The BERT family's shared parts: embeddings (word + position + token type, LayerNorm, an
//! optional projection) and the post-LayerNorm encoder stack, which is candle-transformers'
//! `BertEncoder`. BERT, RoBERTa / XLM-RoBERTa, ELECTRA and DistilBERT differ only in how
//! they number positions, whether they have token types, an embedding projection, and the
//! names their checkpoints give the same weights.

use std::collections::HashMap;

use candle_core::{DType, Module, Tensor};
use candle_nn::{Embedding, LayerNorm, Linear, VarBuilder};
use candle_transformers::models::bert as cb;

use crate::error::{Error, Result};

/// How position ids are numbered.
#[derive(Debug, Clone, Copy)]
pub enum Positions {
    /// 0, 1, 2, ... (BERT, ELECTRA, DistilBERT).
    Absolute,
    /// RoBERTa: padding_idx + 1, padding_idx + 2, ... over non-padding tokens, padding_idx on
    /// padding (transformers' `create_position_ids_from_input_ids`).
    AfterPadding { padding_idx: u32 },
}

/// Sizes and settings of the shared encoder, filled in by each architecture's file.
pub struct Spec<'a> {
    pub vocab_size: usize,
    /// Width of the embeddings; projected to `hidden_size` when it differs (ELECTRA).
    pub embedding_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub hidden_act: &'a str,
    pub max_position_embeddings: usize,
    /// 0: no token type embeddings (DistilBERT).
    pub type_vocab_size: usize,
    pub layer_norm_eps: f64,
    pub positions: Positions,
}

pub struct Encoder {
    word: Embedding,
    position: Embedding,
    token_type: Option<Embedding>,
    norm: LayerNorm,
    project: Option<Linear>,
    positions: Positions,
    layers: cb::BertEncoder,
}

pub fn unsupported(what: &'static str, value: &str, supported: &'static str) -> Error {
    Error::Unsupported { what, value: value.into(), path: "config.json".into(), supported }
}

pub fn bad_weights(e: candle_core::Error) -> Error {
    Error::invalid_file("model.safetensors", e)
}

/// The activation of a transformers `hidden_act` string, as candle's BERT layers apply it.
pub fn hidden_act(name: &str) -> Result<cb::HiddenAct> {
    Ok(match name {
        "gelu" => cb::HiddenAct::Gelu,
        // transformers' gelu_new and gelu_pytorch_tanh are the tanh approximation.
        "gelu_new" | "gelu_pytorch_tanh" => cb::HiddenAct::GeluApproximate,
        "relu" => cb::HiddenAct::Relu,
        other => return Err(unsupported("hidden_act", other, "gelu, gelu_new, gelu_pytorch_tanh, relu")),
    })
}

pub fn check_heads(hidden_size: usize, heads: usize) -> Result<()> {
    if heads == 0 || hidden_size % heads != 0 {
        return Err(Error::invalid_file(
            "config.json",
            format!("hidden_size {hidden_size} is not a multiple of num_attention_heads {heads}"),
        ));
    }
    Ok(())
}

/// The first of `prefixes` under which the checkpoint has `probe` (e.g. "bert." for a
/// `BertForSequenceClassification`, "" for a bare `BertModel`).
pub fn with_prefix<'a>(vb: VarBuilder<'a>, prefixes: &[&str], probe: &str) -> VarBuilder<'a> {
    prefixes.iter().find(|p| vb.contains_tensor(&format!("{p}{probe}"))).map_or(vb.clone(), |p| {
        if p.is_empty() {
            vb.clone()
        } else {
            vb.pp(p.trim_end_matches('.'))
        }
    })
}

/// A checkpoint whose layers carry other names than BERT's, renamed into the shared layout:
/// `embeddings` (names kept), `<layers>.{i}.<from>` -> `encoder.layer.{i}.<to>` for every
/// (from, to) of `table`, and `extra` (from, to) pairs taken as they are.
pub fn renamed<'a>(
    vb: &VarBuilder<'a>,
    embeddings: &[&str],
    layers: &str,
    count: usize,
    table: &[(&str, &str)],
    extra: &[(&str, &str)],
) -> Result<VarBuilder<'a>> {
    let mut out = HashMap::new();
    let mut take = |from: String, to: String| -> candle_core::Result<()> {
        out.insert(to, vb.get_unchecked(&from)?);
        Ok(())
    };
    let mut rename = || -> candle_core::Result<()> {
        for name in embeddings {
            take(format!("embeddings.{name}"), format!("embeddings.{name}"))?;
        }
        for layer in 0..count {
            for (from, to) in table {
                for part in ["weight", "bias"] {
                    take(
                        format!("{layers}.{layer}.{from}.{part}"),
                        format!("encoder.layer.{layer}.{to}.{part}"),
                    )?;
                }
            }
        }
        for (from, to) in extra {
            take(from.to_string(), to.to_string())?;
        }
        Ok(())
    };
    rename().map_err(bad_weights)?;
    Ok(VarBuilder::from_tensors(out, DType::F32, vb.device()))
}

impl Encoder {
    /// `vb` holds `embeddings.*`, `encoder.layer.*` and, for a projection,
    /// `embeddings_project.*` (ELECTRA's names).
    pub fn load(vb: VarBuilder, spec: &Spec) -> Result<Self> {
        check_heads(spec.hidden_size, spec.num_attention_heads)?;
        let layer_cfg = cb::Config {
            vocab_size: spec.vocab_size,
            hidden_size: spec.hidden_size,
            num_hidden_layers: spec.num_hidden_layers,
            num_attention_heads: spec.num_attention_heads,
            intermediate_size: spec.intermediate_size,
            hidden_act: hidden_act(spec.hidden_act)?,
            hidden_dropout_prob: 0.0,
            max_position_embeddings: spec.max_position_embeddings,
            type_vocab_size: spec.type_vocab_size,
            initializer_range: 0.02,
            layer_norm_eps: spec.layer_norm_eps,
            pad_token_id: 0,
            position_embedding_type: cb::PositionEmbeddingType::Absolute,
            use_cache: false,
            classifier_dropout: None,
            model_type: None,
        };
        let e = vb.pp("embeddings");
        let width = spec.embedding_size;
        let load = || -> candle_core::Result<Self> {
            Ok(Encoder {
                word: candle_nn::embedding(spec.vocab_size, width, e.pp("word_embeddings"))?,
                position: candle_nn::embedding(
                    spec.max_position_embeddings,
                    width,
                    e.pp("position_embeddings"),
                )?,
                token_type: (spec.type_vocab_size > 0)
                    .then(|| candle_nn::embedding(spec.type_vocab_size, width, e.pp("token_type_embeddings")))
                    .transpose()?,
                norm: candle_nn::layer_norm(width, spec.layer_norm_eps, e.pp("LayerNorm"))?,
                project: (width != spec.hidden_size)
                    .then(|| candle_nn::linear(width, spec.hidden_size, vb.pp("embeddings_project")))
                    .transpose()?,
                positions: spec.positions,
                layers: cb::BertEncoder::load(vb.pp("encoder"), &layer_cfg)?,
            })
        };
        load().map_err(bad_weights)
    }

    /// ids, type_ids, mask: [batch, seq] u32 -> [batch, seq, hidden].
    pub fn forward(&self, ids: &Tensor, type_ids: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
        self.forward_with_bias(ids, type_ids, mask, None)
    }

    /// As `forward`, with `bias` [1 or batch, heads, seq, seq] added to every layer's
    /// attention scores (MPNet's relative position bias).
    pub fn forward_with_bias(
        &self,
        ids: &Tensor,
        type_ids: &Tensor,
        mask: &Tensor,
        bias: Option<&Tensor>,
    ) -> candle_core::Result<Tensor> {
        let (batch, seq) = ids.dims2()?;
        let position_ids = match self.positions {
            Positions::Absolute => Tensor::arange(0u32, seq as u32, ids.device())?.unsqueeze(0)?,
            Positions::AfterPadding { padding_idx } => {
                let ids_host = ids.flatten_all()?.to_vec1::<u32>()?;
                let mut positions = vec![padding_idx; batch * seq];
                for (row, chunk) in ids_host.chunks(seq.max(1)).enumerate() {
                    let mut count = 0;
                    for (col, id) in chunk.iter().enumerate() {
                        if *id != padding_idx {
                            count += 1;
                            positions[row * seq + col] = padding_idx + count;
                        }
                    }
                }
                Tensor::from_vec(positions, (batch, seq), ids.device())?
            }
        };
        // transformers' order: words + token types, then + positions.
        let mut x = self.word.forward(ids)?;
        if let Some(token_type) = &self.token_type {
            x = (x + token_type.forward(type_ids)?)?;
        }
        let x = x.broadcast_add(&self.position.forward(&position_ids)?)?;
        let mut x = self.norm.forward(&x)?;
        if let Some(project) = &self.project {
            x = project.forward(&x)?;
        }
        let mask = additive_mask(mask)?;
        let mask = match bias {
            // Padding stays at the float minimum: bias + minimum still masks.
            Some(bias) => mask.broadcast_add(bias)?,
            None => mask,
        };
        self.layers.forward(&x, &mask)
    }
}

/// [batch, seq] 1/0 -> [batch, 1, 1, seq] with 0 where attended and the float minimum where
/// not, as transformers extends an attention mask.
pub fn additive_mask(mask: &Tensor) -> candle_core::Result<Tensor> {
    let m = mask.to_dtype(DType::F32)?.unsqueeze(1)?.unsqueeze(1)?;
    (m.ones_like()? - m)? * f32::MIN as f64
}

/// The relative-position bucket of transformers' T5 and MPNet (bidirectional): half the
/// buckets for keys after the query, exact buckets for the nearest positions and
/// logarithmic ones up to `max_distance`. Computed in float32 as torch computes it, so the
/// bucket boundaries fall where transformers puts them.
pub fn relative_position_bucket(relative_position: i64, num_buckets: usize, max_distance: usize) -> u32 {
    let half = (num_buckets / 2) as i64;
    let mut bucket = if relative_position > 0 { half } else { 0 };
    let n = relative_position.abs();
    let max_exact = half / 2;
    bucket += if n < max_exact {
        n
    } else {
        let scaled = (n as f32 / max_exact as f32).ln() / (max_distance as f32 / max_exact as f32).ln()
            * (half - max_exact) as f32;
        (max_exact + scaled as i64).min(half - 1)
    };
    bucket as u32
}

/// [1, heads, seq, seq] bias of a relative-position table [buckets, heads] for key - query.
pub fn relative_position_bias(
    table: &Embedding,
    seq: usize,
    num_buckets: usize,
    max_distance: usize,
    device: &candle_core::Device,
) -> candle_core::Result<Tensor> {
    let buckets: Vec<u32> = (0..seq as i64)
        .flat_map(|q| {
            (0..seq as i64).map(move |k| relative_position_bucket(k - q, num_buckets, max_distance))
        })
        .collect();
    let buckets = Tensor::from_vec(buckets, (seq, seq), device)?;
    // [q, k, heads] -> [1, heads, q, k]
    table.forward(&buckets)?.permute((2, 0, 1))?.unsqueeze(0)
}
