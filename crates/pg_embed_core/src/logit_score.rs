//! The LogitScore module of a causal-LM reranker (sentence-transformers' CrossEncoder over a
//! `*ForCausalLM`: a Transformer module with transformer_task "text-generation", then
//! LogitScore), as saved. Its head's weights are `crate::score_head`.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::files::read_json;

/// The LogitScore module's config.json (`sentence_transformers.cross_encoder.modules.LogitScore`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogitScoreConfig {
    pub true_token_id: u32,
    #[serde(default)]
    pub false_token_id: Option<u32>,
    /// The feature it reads: the causal LM's logits.
    #[serde(default = "causal_logits")]
    pub module_input_name: String,
}

fn causal_logits() -> String {
    "causal_logits".into()
}

/// A LogitScore module: its config and where it was read.
#[derive(Debug, Clone)]
pub struct LogitScoreModule {
    pub config: LogitScoreConfig,
    pub path: PathBuf,
}

impl LogitScoreModule {
    /// The module in `folder`; a config with keys LogitScore does not have, or one reading
    /// another feature than the causal LM's logits, is refused naming it.
    pub fn read(folder: &Path) -> Result<Self> {
        let path = folder.join("config.json");
        let config: LogitScoreConfig = read_json(&path)?;
        if config.module_input_name != "causal_logits" {
            return Err(Error::Unsupported {
                what: "LogitScore module_input_name",
                value: config.module_input_name,
                path,
                supported: "causal_logits (the logits of the Transformer module's causal LM)",
            });
        }
        Ok(LogitScoreModule { config, path })
    }
}
