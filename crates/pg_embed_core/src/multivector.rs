//! The multi-vector layouts that sentence-transformers' `MultiVectorEncoder` (6.2) reads,
//! parsed as they are stored: its own saves (a Transformer whose sentence_bert_config.json
//! holds `query_length`, `document_length` and `query_expansion`, Dense modules of every
//! token, MultiVectorMask, HierarchicalTokenPooling, Normalize of the token embeddings) and
//! the Stanford ColBERT layout (colbert-ir: config.json naming `HF_ColBERT`, `linear.weight`
//! beside the `bert.` weights, artifact.metadata), which it reads as a legacy format.
//! Plain Rust: no pgrx here.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::files::{read_json, read_json_opt};

/// `query_expansion` of the Transformer module (`QueryExpansionConfig`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueryExpansion {
    /// "fixed": every query is cut at and filled up to `length` tokens; "min": `length` is
    /// only the floor (the query's own length cap, `query_length`, still applies).
    pub strategy: String,
    /// Whether the encoder attends to the expansion tokens.
    #[serde(default)]
    pub attend: bool,
    /// The expansion token (None: the mask token, else the end-of-sequence token).
    #[serde(default)]
    pub token: Option<String>,
    pub length: usize,
}

/// MultiVectorMask's config.json: the scoring mask.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaskConfig {
    #[serde(default)]
    pub skiplist_words: Vec<String>,
    /// The tasks the skiplist applies to (a string is one task; null: documents).
    #[serde(default)]
    pub skiplist_tasks: Option<OneOrMany>,
    /// Documents keep only these token ids (null: every token).
    #[serde(default)]
    pub keep_only_token_ids: Option<Vec<u32>>,
}

/// A string or a list of strings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn has(&self, name: &str) -> bool {
        match self {
            OneOrMany::One(s) => s == name,
            OneOrMany::Many(v) => v.iter().any(|s| s == name),
        }
    }
}

/// What a multi-vector layout computes, as `MultiVectorEncoder` reads it.
#[derive(Debug, Clone, Serialize)]
pub struct MultiVectorSettings {
    /// "MultiVectorEncoder" (its own save) or "Stanford ColBERT" (artifact.metadata).
    pub layout: &'static str,
    /// The text put before a query (a document): `prompts["query"]` (`["document"]`).
    pub query_prompt: Option<String>,
    pub document_prompt: Option<String>,
    /// The Transformer's per-task length caps (None: the model's max_seq_length).
    pub query_length: Option<usize>,
    pub document_length: Option<usize>,
    pub expansion: Option<QueryExpansion>,
    /// The scoring mask (None: no MultiVectorMask, the attention mask decides).
    pub mask: Option<MaskConfig>,
    /// Whether each side's token vectors are L2-normalised (a Normalize of the token
    /// embeddings, or a token pooling that only normalises).
    pub normalize_query: bool,
    pub normalize_document: bool,
    /// `similarity_fn_name`: "maxsim" or "meanmaxsim" (MaxSim over the query's rows).
    pub similarity: String,
    /// Prefix texts registered as special tokens when the tokenizer splits them (the legacy
    /// layouts' markers, as `_register_prefix_tokens` does).
    pub register_prefixes: Vec<String>,
}

/// Where the projections of the tokens come from.
#[derive(Debug, Clone)]
pub enum Projection {
    /// Dense module folders, in order.
    Folders(Vec<PathBuf>),
    /// `linear.weight` of the backbone's model.safetensors (Stanford ColBERT), and the
    /// `dim` artifact.metadata states.
    Inline { weights: PathBuf, dim: Option<usize> },
}

/// A multi-vector model as `MultiVectorEncoder` loads it.
#[derive(Debug, Clone)]
pub struct MultiVectorLayout {
    /// The Transformer's folder (config.json, weights, tokenizer).
    pub transformer_dir: PathBuf,
    pub projection: Projection,
    pub settings: MultiVectorSettings,
}

/// What the modules of a MultiVectorEncoder save may be.
const NATIVE_ORDER: &str = "Transformer (query_length, document_length, query_expansion), then Dense modules of the \
     token embeddings, then MultiVectorMask, HierarchicalTokenPooling (pool_factor 1) and a Normalize of the token \
     embeddings, each at most once";

/// The class name a modules.json class path ends in, for the paths of sentence-transformers
/// (and PyLate's Dense, which MultiVectorEncoder reads as its own).
fn class_name(class: &str) -> Option<&str> {
    if class == "pylate.models.Dense.Dense" {
        return Some("Dense");
    }
    class.strip_prefix("sentence_transformers.")?.rsplit('.').next()
}

/// Whether a folder with modules.json listing `classes` is a MultiVectorEncoder save: its
/// config_sentence_transformers.json says so, or a module only a MultiVectorEncoder has.
pub fn is_native(dir: &Path, classes: &[&str]) -> Result<bool> {
    if classes.iter().any(|c| matches!(class_name(c), Some("MultiVectorMask" | "HierarchicalTokenPooling"))) {
        return Ok(true);
    }
    let config: Option<serde_json::Value> = read_json_opt(&dir.join("config_sentence_transformers.json"))?;
    Ok(config.as_ref().and_then(|c| c.get("model_type")).and_then(|t| t.as_str()) == Some("MultiVectorEncoder"))
}

/// The Transformer module's multi-vector settings (sentence_bert_config.json).
#[derive(Debug, Default, Deserialize)]
struct TransformerKnobs {
    query_length: Option<usize>,
    document_length: Option<usize>,
    query_expansion: Option<QueryExpansion>,
    /// Keys that change how text is tokenized or run: refused unless empty.
    #[serde(default)]
    processing_kwargs: Option<serde_json::Value>,
    #[serde(default)]
    transformer_task: Option<String>,
    #[serde(default)]
    module_output_name: Option<String>,
    #[serde(default)]
    modality_config: Option<serde_json::Value>,
}

/// config_sentence_transformers.json of a MultiVectorEncoder.
#[derive(Debug, Default, Deserialize)]
struct ModelConfig {
    #[serde(default)]
    prompts: std::collections::BTreeMap<String, Option<String>>,
    #[serde(default)]
    similarity_fn_name: Option<String>,
}

fn unsupported(what: &'static str, value: impl Into<String>, path: &Path, supported: &'static str) -> Error {
    Error::Unsupported { what, value: value.into(), path: path.to_path_buf(), supported }
}

/// A MultiVectorEncoder save: `modules` are modules.json's (folder, class path) pairs.
pub fn read_native(dir: &Path, modules: &[(PathBuf, String)], modules_path: &Path) -> Result<MultiVectorLayout> {
    let sequence = || format!("[{}]", modules.iter().map(|(_, c)| c.as_str()).collect::<Vec<_>>().join(", "));
    let refuse = |i: usize, class: &str| {
        unsupported("module sequence", format!("{class} at position {i} of {}", sequence()), modules_path, NATIVE_ORDER)
    };
    let Some((transformer_dir, first)) = modules.first() else {
        return Err(unsupported("module sequence", "[]", modules_path, NATIVE_ORDER));
    };
    if class_name(first) != Some("Transformer") {
        return Err(refuse(0, first));
    }
    let knobs_path = transformer_dir.join("sentence_bert_config.json");
    let knobs: TransformerKnobs = read_json_opt(&knobs_path)?.unwrap_or_default();
    check_knobs(&knobs, &knobs_path)?;
    let config_path = dir.join("config_sentence_transformers.json");
    let config: ModelConfig = read_json_opt(&config_path)?.unwrap_or_default();
    let similarity = config.similarity_fn_name.clone().unwrap_or_else(|| "maxsim".into());
    if !matches!(similarity.as_str(), "maxsim" | "meanmaxsim") {
        return Err(unsupported("similarity_fn_name", similarity, &config_path, "maxsim, meanmaxsim"));
    }
    let mut dense = Vec::new();
    let (mut mask, mut normalize, mut pooled) = (None, false, None::<(bool, bool)>);
    for (i, (folder, class)) in modules.iter().enumerate().skip(1) {
        match class_name(class) {
            Some("Dense") if !normalize && pooled.is_none() => dense.push(folder.clone()),
            Some("MultiVectorMask") if mask.is_none() => {
                let keys = ["skiplist_words", "skiplist_tasks", "keep_only_token_ids"];
                mask = Some(read_known(&folder.join("config.json"), "MultiVectorMask setting", &keys)?);
            }
            Some("Normalize") if !normalize => {
                let path = folder.join("config.json");
                let config: serde_json::Value = read_json_opt(&path)?.unwrap_or_default();
                let input = config.get("module_input_name").and_then(|v| v.as_str()).unwrap_or("sentence_embedding");
                let output = config.get("module_output_name").and_then(|v| v.as_str()).unwrap_or(input);
                if input != "token_embeddings" || output != "token_embeddings" {
                    return Err(unsupported(
                        "Normalize input/output",
                        format!("{input} -> {output}"),
                        &path,
                        "token_embeddings (a Normalize of another output does nothing in a MultiVectorEncoder)",
                    ));
                }
                normalize = true;
            }
            Some("HierarchicalTokenPooling") if pooled.is_none() => pooled = Some(token_pooling(&folder.join("config.json"))?),
            Some(_) => return Err(refuse(i, class)),
            None => {
                return Err(unsupported("MultiVectorEncoder module", class.clone(), modules_path, NATIVE_ORDER));
            }
        }
    }
    if dense.is_empty() {
        return Err(unsupported("module sequence", sequence(), modules_path, NATIVE_ORDER));
    }
    let (pool_query, pool_document) = pooled.unwrap_or((false, false));
    let prompt = |side: &str| config.prompts.get(side).cloned().flatten().filter(|p| !p.is_empty());
    Ok(MultiVectorLayout {
        transformer_dir: transformer_dir.clone(),
        projection: Projection::Folders(dense),
        settings: MultiVectorSettings {
            layout: "MultiVectorEncoder",
            query_prompt: prompt("query"),
            document_prompt: prompt("document"),
            query_length: knobs.query_length,
            document_length: knobs.document_length,
            expansion: knobs.query_expansion,
            mask,
            normalize_query: normalize || pool_query,
            normalize_document: normalize || pool_document,
            similarity,
            register_prefixes: Vec::new(),
        },
    })
}

/// A module's config.json whose keys are all among `keys` (another key is refused by name:
/// it could change the results).
fn read_known<T: serde::de::DeserializeOwned>(path: &Path, what: &'static str, keys: &[&str]) -> Result<T> {
    let value: serde_json::Value = read_json(path)?;
    if let Some(other) = value.as_object().and_then(|o| o.keys().find(|k| !keys.contains(&k.as_str()))) {
        return Err(unsupported(what, other.clone(), path, "the settings sentence-transformers 6.2 saves for the module"));
    }
    serde_json::from_value(value).map_err(|e| Error::invalid_file(path, e))
}

/// The Transformer's settings checked as sentence-transformers checks them.
fn check_knobs(knobs: &TransformerKnobs, path: &Path) -> Result<()> {
    if let Some(task) = knobs.transformer_task.as_deref().filter(|t| *t != "feature-extraction") {
        return Err(unsupported("transformer_task", task, path, "feature-extraction (the hidden states of every token)"));
    }
    if let Some(name) = knobs.module_output_name.as_deref().filter(|n| *n != "token_embeddings") {
        return Err(unsupported("Transformer module_output_name", name, path, "token_embeddings"));
    }
    let text_forward = serde_json::json!({"text": {"method": "forward", "method_output_name": "last_hidden_state"}});
    if let Some(modality) = knobs.modality_config.as_ref().filter(|m| !m.is_null() && **m != text_forward) {
        return Err(unsupported("Transformer modality_config", modality.to_string(), path, "text through forward's last_hidden_state"));
    }
    if let Some(kwargs) = knobs.processing_kwargs.as_ref().filter(|v| !v.is_null() && **v != serde_json::json!({})) {
        return Err(unsupported("processing_kwargs", kwargs.to_string(), path, "none (the tokenizer's own settings)"));
    }
    if let Some(e) = &knobs.query_expansion {
        if !matches!(e.strategy.as_str(), "fixed" | "min") {
            return Err(unsupported("query_expansion strategy", e.strategy.clone(), path, "fixed, min"));
        }
        if e.length < 1 {
            return Err(Error::invalid_file(path, "query_expansion length must be at least 1"));
        }
        if let Some(q) = knobs.query_length.filter(|q| *q < e.length) {
            return Err(Error::invalid_file(
                path,
                format!("query_length {q} is smaller than query_expansion length {}", e.length),
            ));
        }
    }
    Ok(())
}

/// HierarchicalTokenPooling's config.json: which sides it normalises. Merging tokens
/// (`pool_factor` above 1: Ward clustering) is refused by name.
fn token_pooling(path: &Path) -> Result<(bool, bool)> {
    /// (`num_protected_tokens` matters only when tokens are merged.)
    #[derive(Deserialize)]
    struct Config {
        #[serde(default = "one")]
        pool_factor: f64,
        /// Saved configurations without it load with false.
        #[serde(default)]
        normalize_embeddings: bool,
        #[serde(default)]
        tasks: Option<OneOrMany>,
    }
    fn one() -> f64 {
        1.0
    }
    let keys = ["pool_factor", "num_protected_tokens", "normalize_embeddings", "tasks"];
    let config: Config = read_known(path, "HierarchicalTokenPooling setting", &keys)?;
    if config.pool_factor > 1.0 {
        return Err(unsupported(
            "HierarchicalTokenPooling pool_factor",
            config.pool_factor.to_string(),
            path,
            "pool_factor 1 (Ward clustering of the tokens is not reproduced)",
        ));
    }
    let tasks = config.tasks.unwrap_or(OneOrMany::One("document".into()));
    let n = config.normalize_embeddings;
    Ok((n && tasks.has("query"), n && tasks.has("document")))
}

impl MaskConfig {
    /// Whether the skiplist applies to `task` ("query" or "document").
    pub fn skips(&self, task: &str) -> bool {
        match &self.skiplist_tasks {
            None => task == "document",
            Some(tasks) => tasks.has(task),
        }
    }
}

/// The keys of artifact.metadata (colbert-ir's ColBERTConfig) that change no token vector:
/// training, indexing, search and run settings, and the marker names.
const STANFORD_INERT: &[&str] = &[
    "ncells", "centroid_score_threshold", "ndocs", "load_index_with_mmap", "index_path", "index_bsize", "nbits",
    "kmeans_niters", "resume", "clustering_mode", "protected_tokens", "bsize", "accumsteps", "lr", "maxsteps",
    "save_every", "warmup", "warmup_bert", "nway", "use_ib_negatives", "reranker", "distillation_alpha",
    "ignore_scores", "model_name", "checkpoint", "triples", "collection", "queries", "index_name", "overwrite",
    "root", "experiment", "index_root", "name", "rank", "nranks", "amp", "gpus", "avoid_fork_if_possible",
    "query_token", "doc_token", "meta", "schedule_free", "schedule_free_wd",
];
/// The keys MultiVectorEncoder reads.
const STANFORD_READ: &[&str] =
    &["query_token_id", "doc_token_id", "query_maxlen", "doc_maxlen", "attend_to_mask_tokens", "mask_punctuation"];
const STANFORD_SUPPORTED: &str = "colbert-ir's ColBERTConfig keys: those MultiVectorEncoder reads (query_token_id, doc_token_id, \
     query_maxlen, doc_maxlen, attend_to_mask_tokens, mask_punctuation), dim, similarity \"cosine\", interaction \"colbert\", \
     relu false, pool_factor 1, and its training, indexing, search and run settings";

/// Python's `string.punctuation`, one word per character (Stanford ColBERT's mask_punctuation).
const PUNCTUATION: &str = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";

/// The Stanford ColBERT layout of `dir`, when its config.json names `HF_ColBERT` (and no
/// modules.json is there): BERT weights under `bert.`, the projection `linear.weight`, and
/// artifact.metadata, read as `MultiVectorEncoder` reads them. Keys of artifact.metadata
/// that would change the results otherwise, and unknown keys, are refused by name.
pub fn read_stanford(dir: &Path) -> Result<Option<MultiVectorLayout>> {
    let config_path = dir.join("config.json");
    let Some(config) = read_json_opt::<serde_json::Value>(&config_path)? else { return Ok(None) };
    let names = config.get("architectures").and_then(|a| a.as_array()).cloned().unwrap_or_default();
    let weights = dir.join("model.safetensors");
    if !names.iter().any(|a| a.as_str() == Some("HF_ColBERT")) {
        // Half of the layout: colbert-ir's files beside a config.json that does not name
        // HF_ColBERT (MultiVectorEncoder would add a random projection; a plain embedder
        // would mean-pool).
        let linear = weights.exists() && crate::safetensors_io::safetensors_shapes(&weights)?.contains_key("linear.weight");
        let half = [(dir.join("artifact.metadata").exists(), "artifact.metadata"), (linear, "linear.weight")];
        if let Some((_, what)) = half.iter().find(|(present, _)| *present) {
            return Err(unsupported(
                "Stanford ColBERT layout",
                format!("{what} without HF_ColBERT in config.json's architectures"),
                &config_path,
                "HF_ColBERT checkpoints (architectures [\"HF_ColBERT\"], bert. weights, linear.weight, artifact.metadata)",
            ));
        }
        return Ok(None);
    }
    let has_linear = weights.exists() && crate::safetensors_io::safetensors_shapes(&weights)?.contains_key("linear.weight");
    if !has_linear {
        return Err(unsupported(
            "Stanford ColBERT layout",
            "HF_ColBERT without linear.weight in model.safetensors",
            &config_path,
            "HF_ColBERT checkpoints with the projection linear.weight beside the bert. weights in model.safetensors",
        ));
    }
    let meta_path = dir.join("artifact.metadata");
    // MultiVectorEncoder uses its defaults when the file is missing.
    let meta: serde_json::Map<String, serde_json::Value> = read_json_opt(&meta_path)?.unwrap_or_default();
    for (key, value) in &meta {
        let k = key.as_str();
        if STANFORD_INERT.contains(&k) || STANFORD_READ.contains(&k) || k == "dim" {
            continue;
        }
        let fine = match k {
            "similarity" => value.as_str() == Some("cosine"),
            "interaction" => value.as_str() == Some("colbert"),
            "relu" => value.as_bool() == Some(false) || value.is_null(),
            "pool_factor" => value.as_f64().is_some_and(|f| f <= 1.0) || value.is_null(),
            _ => false,
        };
        if !fine {
            let what = if ["similarity", "interaction", "relu", "pool_factor"].contains(&k) {
                "artifact.metadata setting"
            } else {
                "artifact.metadata key"
            };
            return Err(unsupported(what, format!("{k}: {value}"), &meta_path, STANFORD_SUPPORTED));
        }
    }
    let text = |key: &str| meta.get(key).and_then(|v| v.as_str()).filter(|s| !s.is_empty()).map(String::from);
    let number = |key: &str| -> Result<Option<usize>> {
        match meta.get(key) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(v) => match v.as_u64() {
                Some(0) => Ok(None),
                Some(n) => Ok(Some(n as usize)),
                None => Err(Error::invalid_file(&meta_path, format!("{key} {v} is not a positive integer"))),
            },
        }
    };
    let dim = number("dim")?;
    let query_prompt = format!("{} ", text("query_token_id").unwrap_or_else(|| "[unused0]".into()));
    let document_prompt = format!("{} ", text("doc_token_id").unwrap_or_else(|| "[unused1]".into()));
    let truthy = |key: &str, default: bool| match meta.get(key) {
        None => default,
        Some(serde_json::Value::Bool(b)) => *b,
        Some(serde_json::Value::Null) => false,
        Some(serde_json::Value::Number(n)) => n.as_f64() != Some(0.0),
        Some(serde_json::Value::String(s)) => !s.is_empty(),
        Some(_) => true,
    };
    // `mask_punctuation` is read with a default of true; `bool(attend_to_mask_tokens)`.
    let skiplist_words = if truthy("mask_punctuation", true) { PUNCTUATION.chars().map(String::from).collect() } else { Vec::new() };
    let expansion = QueryExpansion {
        strategy: "fixed".into(),
        attend: truthy("attend_to_mask_tokens", false),
        token: None,
        length: number("query_maxlen")?.unwrap_or(32),
    };
    Ok(Some(MultiVectorLayout {
        transformer_dir: dir.to_path_buf(),
        projection: Projection::Inline { weights, dim },
        settings: MultiVectorSettings {
            layout: "Stanford ColBERT",
            register_prefixes: vec![query_prompt.clone(), document_prompt.clone()],
            query_prompt: Some(query_prompt),
            document_prompt: Some(document_prompt),
            query_length: None,
            document_length: number("doc_maxlen")?,
            expansion: Some(expansion),
            mask: Some(MaskConfig { skiplist_words, skiplist_tasks: None, keep_only_token_ids: None }),
            normalize_query: true,
            normalize_document: true,
            similarity: "maxsim".into(),
        },
    }))
}
