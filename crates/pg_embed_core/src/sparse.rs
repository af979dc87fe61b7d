//! Sparse outputs: SPLADE pooling of masked-language-model logits (sentence-transformers'
//! SpladePooling), the query side of inference-free encoders (SparseStaticEmbedding: one
//! weight per token, no model run), and the vectors they give: the non-zero weights over
//! the vocabulary. Plain Rust: no pgrx here.

use std::path::Path;

use serde::Serialize;
use tokenizers::Tokenizer;

use crate::error::{Error, Result};
use crate::st::SpladeConfig;

/// pgvector's limit on the non-zero elements of a `sparsevec`.
pub const SPARSEVEC_MAX_NNZ: usize = 16_000;

/// A sparse vector: the non-zero weights, by vocabulary id (0-based, ascending), over a
/// vocabulary of `dim` ids.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SparseVector {
    pub indices: Vec<u32>,
    pub values: Vec<f32>,
    pub dim: usize,
}

impl SparseVector {
    /// The non-zero entries of a dense vector.
    pub fn from_dense(dense: &[f32]) -> Self {
        let (indices, values) =
            dense.iter().enumerate().filter(|(_, v)| **v != 0.0).map(|(i, v)| (i as u32, *v)).unzip();
        SparseVector { indices, values, dim: dense.len() }
    }

    /// (id, weight) pairs, the largest weight first (ties: the smaller id first).
    pub fn ranked(&self) -> Vec<(u32, f32)> {
        let mut terms: Vec<(u32, f32)> = self.indices.iter().copied().zip(self.values.iter().copied()).collect();
        terms.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        terms
    }

    /// Keeps the weights of at least `min_weight`, then the `max_terms` largest of them
    /// (sentence-transformers' `max_active_dims` is the second), in id order.
    pub fn select(mut self, selection: &Selection) -> Self {
        if let Some(min) = selection.min_weight {
            let (indices, values) = self
                .indices
                .iter()
                .zip(&self.values)
                .filter(|(_, v)| **v >= min)
                .map(|(i, v)| (*i, *v))
                .unzip();
            (self.indices, self.values) = (indices, values);
        }
        if let Some(k) = selection.max_terms.filter(|k| *k < self.indices.len()) {
            let mut kept = self.ranked();
            kept.truncate(k);
            kept.sort_by_key(|(i, _)| *i);
            (self.indices, self.values) = kept.into_iter().unzip();
        }
        self
    }

    /// pgvector's text form of a `sparsevec`: `{index:value,...}/dim`, indices 1-based.
    /// Values print in the shortest form that reads back as the same float.
    pub fn to_sparsevec_text(&self) -> String {
        let mut s = String::with_capacity(self.indices.len() * 14 + 12);
        s.push('{');
        for (n, (i, v)) in self.indices.iter().zip(&self.values).enumerate() {
            if n > 0 {
                s.push(',');
            }
            s.push_str(&format!("{}:{v}", i + 1));
        }
        s.push_str(&format!("}}/{}", self.dim));
        s
    }
}

/// `max_terms` and `min_weight` of the options.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Selection {
    pub max_terms: Option<usize>,
    pub min_weight: Option<f32>,
}

/// SpladePooling: per vocabulary id, the max (or the sum) over a sequence's tokens of
/// log(1 + relu(logit)) ("relu"), or of log(1 + log(1 + relu(logit))) ("log1p_relu").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Splade {
    pub strategy: Strategy,
    pub activation: SpladeActivation,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    Max,
    Sum,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SpladeActivation {
    Relu,
    Log1pRelu,
}

impl Splade {
    pub fn from_config(config: &SpladeConfig, path: &Path) -> Result<Self> {
        let unsupported = |what, value: &str, supported| Error::Unsupported {
            what,
            value: value.into(),
            path: path.into(),
            supported,
        };
        let strategy = match config.pooling_strategy.as_str() {
            "max" => Strategy::Max,
            "sum" => Strategy::Sum,
            other => return Err(unsupported("pooling_strategy", other, "max, sum")),
        };
        let activation = match config.activation_function.as_str() {
            "relu" => SpladeActivation::Relu,
            "log1p_relu" => SpladeActivation::Log1pRelu,
            other => return Err(unsupported("activation_function", other, "relu, log1p_relu")),
        };
        Ok(Splade { strategy, activation })
    }

    /// The activation of one logit.
    #[inline]
    fn activate(self, x: f32) -> f32 {
        let y = x.max(0.0).ln_1p();
        match self.activation {
            SpladeActivation::Relu => y,
            SpladeActivation::Log1pRelu => y.ln_1p(),
        }
    }

    /// The pooled vector of one sequence, its tokens' logits [tokens, vocab] given in
    /// consecutive pieces by `pieces` (the logits of a long sequence need not be held at
    /// once). The activation is monotonic, so the max of the activated logits is the
    /// activation of the max logit: "max" activates each id once.
    pub fn pool(self, vocab: usize, pieces: impl IntoIterator<Item = Vec<f32>>) -> Vec<f32> {
        match self.strategy {
            Strategy::Max => {
                let mut max = vec![f32::NEG_INFINITY; vocab];
                for logits in pieces {
                    for row in logits.chunks_exact(vocab) {
                        max.iter_mut().zip(row).for_each(|(m, x)| *m = m.max(*x));
                    }
                }
                max.into_iter().map(|m| if m == f32::NEG_INFINITY { 0.0 } else { self.activate(m) }).collect()
            }
            Strategy::Sum => {
                let mut sum = vec![0f32; vocab];
                for logits in pieces {
                    for row in logits.chunks_exact(vocab) {
                        sum.iter_mut().zip(row).for_each(|(s, x)| *s += self.activate(*x));
                    }
                }
                sum
            }
        }
    }
}

/// The query side of an inference-free sparse encoder (SparseStaticEmbedding): the input's
/// tokens (no special tokens, truncated at the tokenizer's `model_max_length`), each
/// distinct token once, weighted by its learned weight.
pub struct QueryRoute {
    pub name: String,
    tokenizer: Tokenizer,
    weights: Vec<f32>,
}

impl QueryRoute {
    /// The SparseStaticEmbedding folder: tokenizer.json, tokenizer_config.json and the
    /// weights (`weight`, one per vocabulary id) in model.safetensors.
    pub fn load(name: &str, dir: &Path, vocab: usize) -> Result<Self> {
        let (mut tokenizer, _) = crate::tokenizer::load_tokenizer(&dir.join("tokenizer.json"))?;
        let max_length = crate::tokenizer::tokenizer_max_length(&dir.join("tokenizer_config.json"))?;
        tokenizer.with_padding(None);
        let truncation = max_length.map(|max_length| tokenizers::TruncationParams { max_length, ..Default::default() });
        tokenizer.with_truncation(truncation).map_err(|e| Error::invalid_file(dir.join("tokenizer.json"), e))?;
        let path = dir.join("model.safetensors");
        let mut tensors = crate::safetensors_io::read_safetensors(&path)?;
        let weights = tensors
            .remove("weight")
            .ok_or_else(|| Error::invalid_file(&path, "no \"weight\" tensor"))?
            .to_vec1::<f32>()
            .map_err(|e| Error::invalid_file(&path, e))?;
        if weights.len() != vocab {
            return Err(Error::invalid_file(
                &path,
                format!("{} weights, but the document side's vocabulary has {vocab} ids", weights.len()),
            ));
        }
        let max_id = tokenizer.get_vocab_size(true);
        if max_id > vocab {
            return Err(Error::invalid_file(
                dir.join("tokenizer.json"),
                format!("{max_id} tokens, more than the {vocab} weights"),
            ));
        }
        Ok(QueryRoute { name: name.into(), tokenizer, weights })
    }

    /// The input's vector, and its token count.
    pub fn encode(&self, text: &str) -> Result<(SparseVector, usize)> {
        let enc = self.tokenizer.encode_fast(text, false).map_err(|e| Error::Tokenize(e.to_string()))?;
        let mut ids = enc.get_ids().to_vec();
        let tokens = ids.len();
        ids.sort_unstable();
        ids.dedup();
        let (indices, values) = ids
            .into_iter()
            .filter_map(|id| self.weights.get(id as usize).filter(|w| **w != 0.0).map(|w| (id, *w)))
            .unzip();
        Ok((SparseVector { indices, values, dim: self.weights.len() }, tokens))
    }

    /// The token of a vocabulary id.
    pub fn token(&self, id: u32) -> Option<String> {
        self.tokenizer.id_to_token(id)
    }
}
