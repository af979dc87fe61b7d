//! SigLIP's text tower (SiglipTextModel, and the text side of SiglipModel and of SigLIP 2's
//! fixed-resolution checkpoints): token and learned position embeddings, pre-LayerNorm
//! layers with bidirectional attention, a final LayerNorm, and `head` (a linear layer) over
//! the state at the last of the `max_position_embeddings` positions, as transformers
//! computes `get_text_features` from the processor's `padding="max_length"` inputs.
//!
//! The processor pads every text to the positions with the pad token and passes the
//! attention mask, so the pads are keys that no query sees: the text's own tokens get the
//! states of the unpadded text, and the last pad's state is a reader of the text from
//! position L - 1. pg_embed runs each text packed with one extra token, the pad at position
//! L - 1, masked as a key for every query ([`Reader`]): the same numbers, without the
//! L - n tokens of padding. A text of L tokens (cut or exactly as long) has no pad and is
//! pooled at its own last token, as transformers does.

use candle_core::Tensor;
use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::checks::{bad_weights, check_heads};
use super::vision::{self, StackShape};
use crate::error::Result;
use crate::layers::{self, ScoreTerm};
use crate::pooling::PoolingMode;
use crate::weights;

/// `transformers.SiglipTextConfig`
/// (https://huggingface.co/docs/transformers/model_doc/siglip#transformers.SiglipTextConfig);
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
    #[serde(default = "d::max_position_embeddings")]
    pub max_position_embeddings: usize,
    #[serde(default = "d::hidden_act")]
    pub hidden_act: String,
    #[serde(default = "d::layer_norm_eps")]
    pub layer_norm_eps: f64,
    #[serde(default = "d::pad_token_id")]
    pub pad_token_id: u32,
    /// The head's width (transformers: hidden_size when null).
    #[serde(default)]
    pub projection_size: Option<usize>,
}

mod d {
    pub fn vocab_size() -> usize {
        32000
    }
    pub fn hidden_size() -> usize {
        768
    }
    pub fn intermediate_size() -> usize {
        3072
    }
    pub fn num_hidden_layers() -> usize {
        12
    }
    pub fn num_attention_heads() -> usize {
        12
    }
    pub fn max_position_embeddings() -> usize {
        64
    }
    pub fn hidden_act() -> String {
        "gelu_pytorch_tanh".into()
    }
    pub fn layer_norm_eps() -> f64 {
        1e-6
    }
    pub fn pad_token_id() -> u32 {
        1
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Model {
    token: layers::Embedding,
    position: layers::Embedding,
    stack: layers::Stack,
    head: layers::Linear,
    /// The token the processor pads with (the reader's id).
    pad_token_id: u32,
}

/// The tower under `vb`: `text_model.*` in a SiglipModel and in SiglipTextModel as
/// transformers 4 saved it, the bare names as transformers 5 saves SiglipTextModel.
pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Model> {
    check_heads(cfg.hidden_size, cfg.num_attention_heads)?;
    let act = super::checks::activation("hidden_act", &cfg.hidden_act)?;
    let h = cfg.hidden_size;
    let t = if vb.contains_tensor("text_model.embeddings.token_embedding.weight") { vb.pp("text_model") } else { vb };
    let load = || -> candle_core::Result<Model> {
        let e = t.pp("embeddings");
        let table =
            |vb: VarBuilder, rows: usize| layers::Embedding::from_tensor(&vb.get((rows, h), "weight")?);
        let stack = vision::pre_norm_stack(
            &t,
            &vision::CLIP_LAYERS,
            &StackShape {
                hidden: h,
                heads: cfg.num_attention_heads,
                intermediate: cfg.intermediate_size,
                layers: cfg.num_hidden_layers,
                eps: cfg.layer_norm_eps,
                biases: vision::Biases::qkv(true),
                activation: act,
            },
            Some(weights::layer_norm(&t.pp("final_layer_norm"), h, cfg.layer_norm_eps, true)?),
        )?;
        Ok(Model {
            token: table(e.pp("token_embedding"), cfg.vocab_size)?,
            position: table(e.pp("position_embedding"), cfg.max_position_embeddings)?,
            stack,
            head: weights::torch_linear(&t.pp("head"), cfg.projection_size.unwrap_or(h), h, true)?,
            pad_token_id: cfg.pad_token_id,
        })
    };
    load().map_err(bad_weights)
}

/// The scores term that hides each sequence's reader (its last token, where it has one) from
/// every query: transformers' attention mask over the pads, whose weights are 0.
struct Reader<'a> {
    /// The first token of every sequence that ends in a reader, ascending.
    offsets: &'a [usize],
}

/// Added to a hidden key's scores: its softmax weight underflows to 0 beside any seen key.
const HIDDEN_KEY: f32 = -1e30;

impl ScoreTerm for Reader<'_> {
    fn add(&self, _: usize, _: usize, offset: usize, _: &[f32], _: &[f32], _: usize, len: usize, scores: &mut [f32]) {
        if len > 1 && self.offsets.binary_search(&offset).is_ok() {
            for row in scores.chunks_exact_mut(len) {
                row[len - 1] += HIDDEN_KEY;
            }
        }
    }
}

impl Model {
    /// The head's width.
    pub fn pooled_size(&self) -> usize {
        self.head.outputs()
    }

    /// The last hidden states [tokens, hidden] of a packed batch (`ids` of every sequence
    /// end to end, sequence i at bounds[i]..bounds[i + 1]) and, per sequence, the state
    /// the head reads [sequences, hidden]: the reader's, or the last token's.
    /// With `pads_attended` (a tokenizer that passes no attention mask) each text is padded
    /// to the positions with the pad token and every token attends to every other, the
    /// padding included, as transformers computes it without a mask.
    fn run(&self, ids: &[u32], bounds: &[usize], pads_attended: bool) -> candle_core::Result<(Vec<f32>, Vec<f32>)> {
        let lengths = layers::lengths_of(bounds, ids.len())?;
        let positions = self.position.rows();
        let mut packed = Vec::with_capacity(ids.len() + lengths.len());
        let mut at = Vec::with_capacity(ids.len() + lengths.len());
        let mut runs = Vec::with_capacity(lengths.len());
        let mut readers = Vec::new();
        for (&start, &len) in bounds.iter().zip(&lengths) {
            if len == 0 || len > positions {
                candle_core::bail!("a text of {len} tokens for a tower of {positions} positions");
            }
            if pads_attended {
                packed.extend_from_slice(&ids[start..start + len]);
                packed.extend(std::iter::repeat_n(self.pad_token_id, positions - len));
                at.extend(0..positions as u32);
                runs.push(positions);
                continue;
            }
            if len < positions {
                readers.push(packed.len());
            }
            packed.extend_from_slice(&ids[start..start + len]);
            at.extend(0..len as u32);
            if len < positions {
                packed.push(self.pad_token_id);
                at.push(positions as u32 - 1);
            }
            runs.push(len + usize::from(len < positions));
        }
        let mut x = self.token.gather(&packed)?;
        self.position.add(at, &mut x)?;
        self.stack.try_forward_with(&mut x, &runs, Some(&Reader { offsets: &readers }))?;
        let h = self.token.width();
        let mut hidden = Vec::with_capacity(ids.len() * h);
        let mut read = Vec::with_capacity(lengths.len() * h);
        let mut first = 0;
        for (&len, &run) in lengths.iter().zip(&runs) {
            hidden.extend_from_slice(&x[first * h..(first + len) * h]);
            read.extend_from_slice(&x[(first + run - 1) * h..(first + run) * h]);
            first += run;
        }
        Ok((hidden, read))
    }

    /// The hidden states of `batch` and, when `pooler`, `get_text_features` per sequence.
    pub fn forward_pooled(&self, batch: &super::Batch, pooler: bool) -> candle_core::Result<(Vec<f32>, Option<Tensor>)> {
        let (hidden, read) = self.run(batch.ids, batch.bounds, batch.pads_attended)?;
        let pooled = pooler
            .then(|| Tensor::from_vec(self.head.apply(&read), (batch.len(), self.pooled_size()), &candle_core::Device::Cpu))
            .transpose()?;
        Ok((hidden, pooled))
    }
}

impl super::Config for Config {
    fn dims(&self) -> super::Dims {
        super::Dims::text(self.hidden_size, self.max_position_embeddings, self.vocab_size, self.pad_token_id)
    }
    /// The text embedding is `get_text_features`: the head over the last position.
    fn default_pooling(&self) -> PoolingMode {
        PoolingMode::Pooler
    }
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn super::Model>> {
        Ok(Box::new(load(vb, self)?))
    }
}

impl super::Model for Model {
    fn forward(&self, batch: &super::Batch) -> candle_core::Result<Vec<f32>> {
        Ok(self.run(batch.ids, batch.bounds, batch.pads_attended)?.0)
    }

    fn pooler_size(&self) -> Option<usize> {
        Some(self.pooled_size())
    }

    fn forward_pooled(&self, batch: &super::Batch, pooler: bool) -> candle_core::Result<(Vec<f32>, Option<Tensor>)> {
        Model::forward_pooled(self, batch, pooler)
    }
}
