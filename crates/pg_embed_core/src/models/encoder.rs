//! The BERT family's shared parts: embeddings (word + position + token type, LayerNorm, an
//! optional projection) and the post-LayerNorm encoder stack. BERT, RoBERTa / XLM-RoBERTa,
//! ELECTRA, DistilBERT and MPNet differ only in how they number positions, whether they
//! have token types, an embedding projection, an attention bias, and the names their
//! checkpoints give the same weights. The embeddings are looked up with candle; the
//! projection and the layers run on `crate::layers` over packed tokens (no padding
//! computed), so a sequence's result does not depend on the batch it runs in.

use std::collections::HashMap;

use candle_core::{DType, Module, Tensor};
use candle_nn::VarBuilder;

use super::checks::{bad_weights, check_eps, check_heads, unsupported};
use crate::error::Result;
use crate::layers;
use crate::prepared::Floats;
use crate::weights::{layer_norm, torch_linear, torch_parts};

use super::Batch;

/// How position ids are numbered.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
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

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Encoder {
    word: layers::Embedding,
    position: layers::Embedding,
    token_type: Option<layers::Embedding>,
    /// candle's LayerNorm, not the layer library's: on the tiny ELECTRA fixture (16-wide
    /// embeddings) the layer library's rounding order lands 1.4e-4 from transformers, candle's
    /// within the 1e-4 tolerance.
    norm: CandleLayerNorm,
    project: Option<layers::Linear>,
    positions: Positions,
    layers: layers::Stack,
}

/// A LayerNorm computed by candle's (see `Encoder::norm`), its weights kept as buffers.
#[derive(serde::Serialize, serde::Deserialize)]
struct CandleLayerNorm {
    weight: Floats,
    bias: Floats,
    eps: f64,
}

impl CandleLayerNorm {
    fn load(vb: &VarBuilder, width: usize, eps: f64) -> candle_core::Result<Self> {
        let weight = vb.get(width, "weight")?.to_vec1::<f32>()?.into();
        let bias = vb.get(width, "bias")?.to_vec1::<f32>()?.into();
        Ok(CandleLayerNorm { weight, bias, eps })
    }

    fn forward(&self, x: Tensor) -> candle_core::Result<Tensor> {
        let cpu = &candle_core::Device::Cpu;
        let weight = Tensor::from_slice(&self.weight, self.weight.len(), cpu)?;
        let bias = Tensor::from_slice(&self.bias, self.bias.len(), cpu)?;
        candle_nn::LayerNorm::new(weight, bias, self.eps).forward(&x)
    }
}

/// The activation of a transformers `hidden_act` string, among those the BERT family's
/// fixtures check.
pub fn hidden_act(name: &str) -> Result<layers::Activation> {
    const BERT_FAMILY: &str = "gelu, gelu_new, gelu_pytorch_tanh, relu";
    match layers::Activation::from_hidden_act(name) {
        Some(act) if BERT_FAMILY.split(", ").any(|n| n == name) => Ok(act),
        _ => Err(unsupported("hidden_act", name, BERT_FAMILY)),
    }
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
        check_eps("layer_norm_eps", spec.layer_norm_eps)?;
        let activation = hidden_act(spec.hidden_act)?;
        let e = vb.pp("embeddings");
        let width = spec.embedding_size;
        let table = |rows: usize, name: &str| layers::Embedding::from_tensor(&e.get((rows, width), name)?);
        let load = || -> candle_core::Result<Self> {
            Ok(Encoder {
                word: table(spec.vocab_size, "word_embeddings.weight")?,
                position: table(spec.max_position_embeddings, "position_embeddings.weight")?,
                token_type: (spec.type_vocab_size > 0)
                    .then(|| table(spec.type_vocab_size, "token_type_embeddings.weight"))
                    .transpose()?,
                norm: CandleLayerNorm::load(&e.pp("LayerNorm"), width, spec.layer_norm_eps)?,
                project: (width != spec.hidden_size)
                    .then(|| linear(vb.pp("embeddings_project"), spec.hidden_size, width))
                    .transpose()?,
                positions: spec.positions,
                layers: load_layers(vb.pp("encoder.layer"), spec, activation)?,
            })
        };
        load().map_err(bad_weights)
    }

    /// The packed batch's hidden states [tokens, hidden].
    pub fn forward(&self, batch: &Batch) -> candle_core::Result<Vec<f32>> {
        self.forward_with_bias(batch, None)
    }

    /// As `forward`, with `bias` [heads, size, size] (size at least the longest sequence)
    /// added to every layer's attention scores, the top-left block for each sequence
    /// (MPNet's relative position bias).
    pub fn forward_with_bias(
        &self,
        batch: &Batch,
        bias: Option<(&[f32], usize)>,
    ) -> candle_core::Result<Vec<f32>> {
        let width = self.word.width();
        let lengths = batch.lengths()?;
        // transformers' order: words + token types, then + positions.
        let mut packed = self.word.gather(batch.ids)?;
        if let Some(token_type) = &self.token_type {
            token_type.add(batch.type_ids_or_zeros().iter().copied(), &mut packed)?;
        }
        let mut positions = Vec::with_capacity(batch.tokens());
        for i in 0..batch.len() {
            let mut counted = 0u32;
            for (at, &id) in batch.ids[batch.sequence(i)].iter().enumerate() {
                positions.push(match self.positions {
                    Positions::Absolute => at as u32,
                    // transformers' create_position_ids_from_input_ids: a padding id keeps
                    // padding_idx and does not advance the count.
                    Positions::AfterPadding { padding_idx } if id == padding_idx => padding_idx,
                    Positions::AfterPadding { padding_idx } => {
                        counted += 1;
                        padding_idx + counted
                    }
                });
            }
        }
        self.position.add(positions, &mut packed)?;
        let tokens = packed.len() / width.max(1);
        let mut packed: Vec<f32> = self
            .norm
            .forward(Tensor::from_vec(packed, (tokens, width), &candle_core::Device::Cpu)?)?
            .flatten_all()?
            .to_vec1()?;
        if let Some(project) = &self.project {
            packed = project.apply(&packed);
        }
        let bias = bias.map(|(values, size)| layers::AttentionBias { values, size });
        let keys = batch.key_limits()?;
        self.layers.forward_with(&mut packed, &lengths, bias.as_ref(), keys.as_ref().map(|k| k as &dyn layers::ScoreTerm));
        Ok(packed)
    }
}

fn linear(vb: VarBuilder, outputs: usize, inputs: usize) -> candle_core::Result<layers::Linear> {
    torch_linear(&vb, outputs, inputs, true)
}

/// The BERT layer stack under `vb` (`{i}.attention.self.query`, ...), for the layer library:
/// post-LayerNorm, biased, scaled and bidirectional.
fn load_layers(
    vb: VarBuilder,
    spec: &Spec,
    activation: layers::Activation,
) -> candle_core::Result<layers::Stack> {
    let h = spec.hidden_size;
    let norm = |vb: VarBuilder| layer_norm(&vb, h, spec.layer_norm_eps, true);
    let part = |vb: VarBuilder| torch_parts(&vb, h, h, true);
    let layers = (0..spec.num_hidden_layers)
        .map(|i| {
            let l = vb.pp(i.to_string());
            let a = l.pp("attention");
            Ok(layers::Layer {
                qkv: layers::Linear::side_by_side(
                    vec![part(a.pp("self.query"))?, part(a.pp("self.key"))?, part(a.pp("self.value"))?],
                    h,
                )?,
                attention_out: linear(a.pp("output.dense"), h, h)?,
                attention_norm: norm(a.pp("output.LayerNorm"))?,
                mlp: layers::Mlp::Plain {
                    up: linear(l.pp("intermediate.dense"), spec.intermediate_size, h)?,
                    down: linear(l.pp("output.dense"), h, spec.intermediate_size)?,
                },
                output_norm: norm(l.pp("output.LayerNorm"))?,
                qk_norms: None,
                post_norms: None,
            })
        })
        .collect::<candle_core::Result<Vec<_>>>()?;
    layers::Stack::new(layers, layers::StackSpec::post_norm(h, spec.num_attention_heads, activation))
}

pub use crate::layers::relative_position_bucket;
