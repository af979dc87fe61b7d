//! The sentence-transformers directory layout, parsed as it is stored:
//! modules.json, sentence_bert_config.json and each module's folder.
//! A directory without modules.json is a plain Hugging Face backbone.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::pooling::PoolingMode;

/// Reads and parses a JSON file; a missing file is `Ok(None)`.
pub fn read_json_opt<T: DeserializeOwned>(path: &Path) -> Result<Option<T>> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| Error::invalid_file(path, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(path, e)),
    }
}

pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T> {
    read_json_opt(path)?.ok_or_else(|| Error::MissingFile { path: path.into() })
}

/// Every file under `dir`, sub-folders and links followed, as paths under `dir`. `admit`
/// sees each entry (file or folder) before it is used and may refuse it, which ends the walk.
pub fn files_under(dir: &Path, mut admit: impl FnMut(&Path) -> Result<()>) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).map_err(|e| Error::io(&d, e))? {
            let path = entry.map_err(|e| Error::io(&d, e))?.path();
            admit(&path)?;
            if path.is_dir() {
                pending.push(path);
            } else {
                files.push(path);
            }
        }
    }
    Ok(files)
}

/// One entry of modules.json.
#[derive(Debug, Deserialize)]
struct ModuleEntry {
    #[serde(default)]
    path: String,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Transformer,
    Pooling,
    Dense,
    Normalize,
}

/// Module class paths as modules.json stores them: sentence-transformers < 6 and 6.x.
const MODULES: &[(&str, Kind)] = &[
    ("sentence_transformers.models.Transformer", Kind::Transformer),
    ("sentence_transformers.base.modules.transformer.Transformer", Kind::Transformer),
    ("sentence_transformers.models.Pooling", Kind::Pooling),
    ("sentence_transformers.sentence_transformer.modules.pooling.Pooling", Kind::Pooling),
    ("sentence_transformers.models.Dense", Kind::Dense),
    ("sentence_transformers.base.modules.dense.Dense", Kind::Dense),
    ("sentence_transformers.models.Normalize", Kind::Normalize),
    ("sentence_transformers.base.modules.normalize.Normalize", Kind::Normalize),
];
const SUPPORTED_MODULES: &str =
    "Transformer, Pooling, Dense, Normalize (sentence_transformers.models.* or their 6.x paths)";

/// sentence_bert_config.json (the Transformer module's own settings).
#[derive(Debug, Default, Deserialize)]
pub struct TransformerConfig {
    pub max_seq_length: Option<usize>,
    #[serde(default)]
    pub do_lower_case: bool,
}

/// 1_Pooling/config.json (`sentence_transformers.models.Pooling`).
#[derive(Debug, Deserialize)]
/// Two formats exist: sentence-transformers < 6 stores one boolean per mode
/// (`pooling_mode_cls_token`, ...), concatenated in a fixed order; 6.x stores
/// `pooling_mode` (a name or a list, concatenated in the order listed) and renames
/// `word_embedding_dimension` to `embedding_dimension`.
pub struct PoolingConfig {
    #[serde(alias = "embedding_dimension")]
    pub word_embedding_dimension: Option<usize>,
    #[serde(default)]
    pub pooling_mode: Option<crate::options::OneOrMany>,
    #[serde(default)]
    pub pooling_mode_cls_token: bool,
    #[serde(default)]
    pub pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pub pooling_mode_max_tokens: bool,
    #[serde(default)]
    pub pooling_mode_mean_sqrt_len_tokens: bool,
    #[serde(default)]
    pub pooling_mode_weightedmean_tokens: bool,
    #[serde(default)]
    pub pooling_mode_lasttoken: bool,
    /// Whether prompt tokens take part in pooling (instructor-style models say false).
    #[serde(default = "yes")]
    pub include_prompt: bool,
}

fn yes() -> bool {
    true
}

/// config_sentence_transformers.json: the model's named prompts.
#[derive(Debug, Default, Deserialize)]
pub struct ModelConfig {
    #[serde(default)]
    pub prompts: BTreeMap<String, String>,
    #[serde(default)]
    pub default_prompt_name: Option<String>,
}

/// A Pooling module as resolved from its config.json.
#[derive(Debug)]
pub struct PoolingModule {
    pub modes: Vec<PoolingMode>,
    /// `word_embedding_dimension`: must equal the backbone's hidden size.
    pub dimension: Option<usize>,
    pub include_prompt: bool,
    pub path: PathBuf,
}

/// What a sentence-transformers directory says about the pipeline.
#[derive(Debug)]
pub struct Layout {
    /// Folder holding config.json, the weights and the tokenizer.
    pub backbone_dir: PathBuf,
    pub transformer: TransformerConfig,
    /// The Pooling module, if there is one.
    pub pooling: Option<PoolingModule>,
    /// Dense module folders, in pipeline order.
    pub dense: Vec<PathBuf>,
    pub normalize: bool,
    /// Named prompts and the default prompt name (config_sentence_transformers.json).
    pub prompts: ModelConfig,
}

impl Layout {
    pub fn read(dir: &Path) -> Result<Self> {
        let modules_path = dir.join("modules.json");
        let Some(modules) = read_json_opt::<Vec<ModuleEntry>>(&modules_path)? else {
            return Ok(Layout {
                backbone_dir: dir.to_path_buf(),
                transformer: read_json_opt(&dir.join("sentence_bert_config.json"))?.unwrap_or_default(),
                pooling: None,
                dense: Vec::new(),
                normalize: false,
                prompts: ModelConfig::default(),
            });
        };
        let mut layout = Layout {
            backbone_dir: dir.to_path_buf(),
            transformer: TransformerConfig::default(),
            pooling: None,
            dense: Vec::new(),
            normalize: false,
            prompts: read_json_opt(&dir.join("config_sentence_transformers.json"))?.unwrap_or_default(),
        };
        let mut seen_transformer = false;
        for (i, module) in modules.iter().enumerate() {
            let folder = safe_join(dir, &module.path, &modules_path)?;
            let kind = MODULES.iter().find(|(path, _)| *path == module.kind).map(|(_, k)| *k);
            match kind {
                Some(Kind::Transformer) if i == 0 => {
                    seen_transformer = true;
                    layout.transformer =
                        read_json_opt(&folder.join("sentence_bert_config.json"))?.unwrap_or_default();
                    layout.backbone_dir = folder;
                }
                Some(Kind::Pooling) if seen_transformer && layout.pooling.is_none() && !layout.normalize => {
                    let path = folder.join("config.json");
                    let cfg: PoolingConfig = read_json(&path)?;
                    let modes = pooling_modes(&cfg, &path)?;
                    layout.pooling = Some(PoolingModule {
                        modes,
                        dimension: cfg.word_embedding_dimension,
                        include_prompt: cfg.include_prompt,
                        path,
                    });
                }
                Some(Kind::Dense) if layout.pooling.is_some() && !layout.normalize => {
                    layout.dense.push(folder)
                }
                // Sentence-transformers builds Normalize without reading its folder,
                // which released models often do not ship.
                Some(Kind::Normalize) if seen_transformer => layout.normalize = true,
                Some(_) => {
                    return Err(Error::invalid_file(
                        &modules_path,
                        format!("module {} at position {i} is out of order", module.kind),
                    ))
                }
                None => {
                    let other = module.kind.as_str();
                    return Err(Error::Unsupported {
                        what: "sentence-transformers module",
                        value: other.to_string(),
                        path: modules_path,
                        supported: SUPPORTED_MODULES,
                    });
                }
            }
        }
        if !seen_transformer {
            return Err(Error::invalid_file(&modules_path, "the first module is not a Transformer"));
        }
        Ok(layout)
    }
}

fn safe_join(dir: &Path, sub: &str, file: &Path) -> Result<PathBuf> {
    let p = Path::new(sub);
    if p.components().all(|c| matches!(c, std::path::Component::Normal(_))) {
        Ok(dir.join(p))
    } else {
        Err(Error::invalid_file(file, format!("module path \"{sub}\" leaves the model directory")))
    }
}

fn pooling_modes(cfg: &PoolingConfig, path: &Path) -> Result<Vec<PoolingMode>> {
    // The legacy flags, in sentence-transformers' legacy concatenation order.
    let legacy = [
        (cfg.pooling_mode_cls_token, "cls"),
        (cfg.pooling_mode_max_tokens, "max"),
        (cfg.pooling_mode_mean_tokens, "mean"),
        (cfg.pooling_mode_mean_sqrt_len_tokens, "mean_sqrt_len_tokens"),
        (cfg.pooling_mode_weightedmean_tokens, "weightedmean"),
        (cfg.pooling_mode_lasttoken, "lasttoken"),
    ];
    let names: Vec<String> = match &cfg.pooling_mode {
        Some(listed) => listed.to_vec(),
        None => legacy.iter().filter(|(on, _)| *on).map(|(_, name)| name.to_string()).collect(),
    };
    if names.is_empty() {
        return Err(Error::invalid_file(path, "no pooling mode is enabled"));
    }
    let mut modes = Vec::with_capacity(names.len());
    for name in names {
        let Some(mode) = PoolingMode::parse(&name) else {
            return Err(Error::Unsupported {
                what: "pooling mode",
                value: name,
                path: path.into(),
                supported: PoolingMode::NAMES,
            });
        };
        if !modes.contains(&mode) {
            modes.push(mode);
        }
    }
    Ok(modes)
}
