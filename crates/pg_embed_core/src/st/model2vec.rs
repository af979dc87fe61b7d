//! model2vec's folder as sentence-transformers' layout reader sees it: its config.json and
//! how a folder is told to be model2vec's.

use std::path::Path;

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::files::read_json_opt;

/// model2vec's config.json.
#[derive(Debug, Clone, Deserialize)]
pub struct Model2VecConfig {
    /// Whether `encode` L2-normalises (model2vec's default: false).
    #[serde(default)]
    pub normalize: bool,
    /// Tokens kept per input; null: all (model2vec's default when the key is missing: 512).
    #[serde(default = "model2vec_max_length")]
    pub max_length: Option<usize>,
    /// config.json has no `max_length` key: written by a model2vec that did not store it
    /// (0.4 among them), which leaves the unknown token out before it keeps `max_length`
    /// tokens (0.10 keeps them first, the unknown ones counted, then leaves those out).
    #[serde(skip)]
    pub unknown_dropped_first: bool,
}

fn model2vec_max_length() -> Option<usize> {
    Some(512)
}

/// A model2vec folder: the table under model2vec's tensor name `embeddings`
/// (sentence-transformers' StaticEmbedding saves `embedding.weight` and no config.json) and
/// a config.json that is model2vec's: no `model_type` (`StaticModel.save_pretrained`),
/// `"model_type": "model2vec"` or `"architectures": ["StaticModel"]` (`distill()`).
pub(super) fn model2vec_config(dir: &Path) -> Result<Option<Model2VecConfig>> {
    #[derive(Deserialize)]
    struct Tag {
        model_type: Option<String>,
        architectures: Option<Vec<String>>,
    }
    let path = dir.join("config.json");
    let Some(config) = read_json_opt::<serde_json::Value>(&path)? else { return Ok(None) };
    let parse_err = |e| Error::invalid_file(&path, e);
    let tag: Tag = serde_json::from_value(config.clone()).map_err(parse_err)?;
    let is_model2vec = matches!(tag.model_type.as_deref(), None | Some("model2vec"))
        || tag.architectures.unwrap_or_default().iter().any(|a| a == "StaticModel");
    if !is_model2vec {
        return Ok(None);
    }
    let weights = dir.join("model.safetensors");
    if !weights.exists() || !crate::safetensors_io::safetensors_shapes(&weights)?.contains_key("embeddings") {
        return Ok(None);
    }
    let unknown_dropped_first = config.get("max_length").is_none();
    let parsed: Model2VecConfig = serde_json::from_value(config).map_err(parse_err)?;
    Ok(Some(Model2VecConfig { unknown_dropped_first, ..parsed }))
}
