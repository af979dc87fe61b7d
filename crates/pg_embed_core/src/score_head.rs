//! The score head of a causal-LM reranker: the language-model head's rows of the true and
//! false tokens of its LogitScore module only. The score of a pair is logit(true) -
//! logit(false) at its last token (or logit(true) alone when there is no false token); the
//! final-normed last hidden state times those two rows is that, without a vocabulary-sized
//! product.

use std::path::Path;

use candle_nn::VarBuilder;

use crate::error::{Error, Result};
use crate::layers::Linear;
use crate::logit_score::LogitScoreModule;

/// The architectures whose causal LM is the backbone pg_embed computes then one linear
/// layer (`lm_head`, no bias, no soft-capping of the logits).
pub const CAUSAL_LMS: &[(&str, &str)] = &[
    ("Qwen3ForCausalLM", "qwen3"),
    ("Qwen2ForCausalLM", "qwen2"),
    ("LlamaForCausalLM", "llama"),
    ("MistralForCausalLM", "mistral"),
];
const SUPPORTED_CAUSAL_LMS: &str = "Qwen3ForCausalLM, Qwen2ForCausalLM, LlamaForCausalLM, MistralForCausalLM";

/// The score head: the rows of the LM head (or of the tied token embedding) for the true
/// token and, if any, the false token.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct ScoreHead {
    rows: Linear,
    pub true_token_id: u32,
    pub false_token_id: Option<u32>,
    /// Where the rows came from: "lm_head" or "embed_tokens (tied)".
    pub from: String,
}

impl ScoreHead {
    /// The rows of the ids `module` names from the checkpoint: `lm_head.weight`, or the token
    /// embedding when `tie_word_embeddings` (transformers then ties the head to it). An id
    /// outside the vocabulary is refused naming it.
    pub fn load(
        vb: &VarBuilder,
        module: &LogitScoreModule,
        (architectures, model_type, tied): (&[String], &str, bool),
        (vocab_size, hidden): (usize, usize),
        config_path: &Path,
    ) -> Result<Self> {
        let arch = architectures.first().map(String::as_str).unwrap_or_default();
        match CAUSAL_LMS.iter().find(|(a, _)| *a == arch) {
            Some((_, t)) if *t == model_type => {}
            Some(_) => {
                return Err(Error::invalid_file(config_path, format!("architecture {arch} does not match model_type \"{model_type}\"")))
            }
            None => {
                return Err(Error::Unsupported {
                    what: "architecture of a LogitScore reranker",
                    value: arch.to_string(),
                    path: config_path.into(),
                    supported: SUPPORTED_CAUSAL_LMS,
                })
            }
        }
        let c = &module.config;
        for id in std::iter::once(c.true_token_id).chain(c.false_token_id) {
            if id as usize >= vocab_size {
                return Err(Error::invalid_file(
                    &module.path,
                    format!("token id {id} is not in the vocabulary of {vocab_size} tokens"),
                ));
            }
        }
        let (name, from) = if tied {
            let name = if vb.contains_tensor("model.embed_tokens.weight") { "model.embed_tokens.weight" } else { "embed_tokens.weight" };
            (name, "embed_tokens (tied)")
        } else {
            ("lm_head.weight", "lm_head")
        };
        if !vb.contains_tensor(name) {
            return Err(Error::invalid_file(
                config_path.with_file_name("model.safetensors"),
                format!("tie_word_embeddings is false and the checkpoint has no {name}"),
            ));
        }
        let bad = |e: candle_core::Error| Error::invalid_file(config_path.with_file_name("model.safetensors"), e);
        let weight = vb.get((vocab_size, hidden), name).map_err(bad)?;
        let ids: Vec<u32> = std::iter::once(c.true_token_id).chain(c.false_token_id).collect();
        let index = candle_core::Tensor::new(ids.as_slice(), weight.device()).map_err(bad)?;
        let picked = weight.index_select(&index, 0).map_err(bad)?;
        let rows = crate::weights::linear_of(&picked, None).map_err(bad)?;
        Ok(ScoreHead { rows, true_token_id: c.true_token_id, false_token_id: c.false_token_id, from: from.into() })
    }

    /// LogitScore's value per row of `last` [rows, hidden] (each input's final-normed last
    /// hidden state): logit(true) - logit(false), or logit(true).
    pub fn scores(&self, last: &[f32]) -> Vec<f32> {
        let logits = self.rows.apply(last);
        match self.false_token_id {
            Some(_) => logits.chunks_exact(2).map(|l| l[0] - l[1]).collect(),
            None => logits,
        }
    }

    pub fn parameters(&self) -> usize {
        self.rows.outputs() * self.rows.inputs()
    }
}
