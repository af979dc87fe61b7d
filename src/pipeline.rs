//! The embedding pipeline of one model, mirroring sentence-transformers' modules.json:
//! tokenizer -> backbone -> pooling -> (projection heads) -> normalize.
//! Plain Rust: no pgrx here.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use serde::Serialize;
use tokenizers::{PostProcessor, Tokenizer, TruncationParams};

use crate::error::{Error, Result};
use crate::heads::Dense;
use crate::models::{Backbone, BackboneConfig};
use crate::options::Options;
use crate::pooling::{self, PoolingMode};
use crate::st::Layout;

/// What `embed.model_info` shows: the pipeline as resolved from files and options.
#[derive(Debug, Clone, Serialize)]
pub struct PipelineInfo {
    pub task: &'static str,
    pub architecture: &'static str,
    pub backbone: serde_json::Value,
    pub parameters: usize,
    pub pooling: Vec<PoolingMode>,
    /// Where the pooling came from: a file, "options", or the default.
    pub pooling_from: String,
    pub heads: Vec<serde_json::Value>,
    pub normalize: bool,
    pub dim: usize,
    pub max_length: usize,
    pub lowercase: bool,
    pub directory: PathBuf,
}

pub struct Pipeline {
    tokenizer: Tokenizer,
    backbone: Backbone,
    heads: Vec<Dense>,
    pooling: Vec<PoolingMode>,
    normalize: bool,
    lowercase: bool,
    pad_id: u32,
    device: Device,
    info: PipelineInfo,
}

impl Pipeline {
    /// Loads a model directory (sentence-transformers or plain Hugging Face layout).
    pub fn load(dir: &Path, options: &Options) -> Result<Self> {
        let layout = Layout::read(dir)?;
        let bdir = layout.backbone_dir.as_path();

        let config_path = bdir.join("config.json");
        let config_bytes = std::fs::read(&config_path).map_err(|e| Error::io(&config_path, e))?;
        let config = BackboneConfig::parse(&config_path, &config_bytes)?;

        if let Some(module) = &layout.pooling {
            if let Some(dim) = module.dimension.filter(|d| *d != config.hidden_size()) {
                return Err(Error::invalid_file(
                    &module.path,
                    format!(
                        "word_embedding_dimension {dim} does not match the backbone's hidden_size {}",
                        config.hidden_size()
                    ),
                ));
            }
        }
        let (pooling, pooling_from) = match (&options.pooling, &layout.pooling) {
            (Some(spec), _) => (parse_pooling(&spec.to_vec())?, "options".to_string()),
            (None, Some(module)) => (module.modes.clone(), module.path.display().to_string()),
            (None, None) => {
                (vec![PoolingMode::Mean], "default (no sentence-transformers Pooling module)".into())
            }
        };
        let normalize = options.normalize.unwrap_or(layout.normalize);

        let mut tokenizer = load_tokenizer(&bdir.join("tokenizer.json"))?;
        let pad_id = tokenizer.get_padding().map(|p| p.pad_id).unwrap_or(0);
        let max_positions = config.max_position_embeddings();
        let max_length = match options.max_length {
            Some(n) if n > max_positions => {
                return Err(Error::InvalidOptions(format!(
                    "max_length {n} exceeds the model's max_position_embeddings {max_positions}"
                )))
            }
            Some(n) => n,
            // sentence-transformers: sentence_bert_config.json's max_seq_length, else the
            // tokenizer's model_max_length (where 6.x saves it), capped by the positions.
            None => layout
                .transformer
                .max_seq_length
                .or(tokenizer_max_length(&bdir.join("tokenizer_config.json"))?)
                .unwrap_or(max_positions)
                .min(max_positions),
        };
        let specials = tokenizer.get_post_processor().map(|p| p.added_tokens(false)).unwrap_or(0);
        if max_length <= specials {
            return Err(Error::InvalidOptions(format!(
                "max_length {max_length} leaves no room for text after {specials} special tokens"
            )));
        }
        // sentence-transformers ignores the padding and truncation stored in tokenizer.json:
        // it pads per batch and truncates at max_seq_length.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams { max_length, ..Default::default() }))
            .map_err(|e| Error::invalid_file(bdir.join("tokenizer.json"), e))?;

        let device = Device::Cpu;
        let (vb, parameters) = load_weights(bdir, &device)?;
        let backbone = Backbone::load(vb, &config).map_err(|e| e.in_dir(bdir))?;
        let mut heads = Vec::with_capacity(layout.dense.len());
        let mut dim = config.hidden_size() * pooling.len();
        for folder in &layout.dense {
            let head = Dense::load(folder, &device)?;
            if head.in_features != dim {
                return Err(Error::invalid_file(
                    folder.join("config.json"),
                    format!(
                        "in_features {} does not match the previous stage's output dimension {dim}",
                        head.in_features
                    ),
                ));
            }
            dim = head.out_features;
            heads.push(head);
        }

        let info = PipelineInfo {
            task: "embed",
            architecture: config.architecture(),
            backbone: config.summary(),
            parameters: parameters + heads.iter().map(Dense::parameters).sum::<usize>(),
            pooling: pooling.clone(),
            pooling_from,
            heads: heads.iter().map(Dense::describe).collect(),
            normalize,
            dim,
            max_length,
            lowercase: layout.transformer.do_lower_case,
            directory: dir.to_path_buf(),
        };
        Ok(Pipeline {
            tokenizer,
            backbone,
            heads,
            pooling,
            normalize,
            lowercase: layout.transformer.do_lower_case,
            pad_id,
            device,
            info,
        })
    }

    pub fn info(&self) -> &PipelineInfo {
        &self.info
    }

    pub fn dim(&self) -> usize {
        self.info.dim
    }

    /// Token ids for one input, exactly as sentence-transformers tokenizes it.
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>> {
        let text = py_strip(text);
        let text = if self.lowercase { text.to_lowercase() } else { text.to_string() };
        let enc = self.tokenizer.encode_fast(text, true).map_err(|e| Error::Tokenize(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Embeds a batch of inputs: one vector per input, in input order.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let ids = texts.iter().map(|t| self.tokenize(t)).collect::<Result<Vec<_>>>()?;
        let seq = ids.iter().map(Vec::len).max().unwrap_or(0);
        let batch = ids.len();
        let mut flat_ids = vec![self.pad_id; batch * seq];
        let mut mask = vec![0u32; batch * seq];
        for (row, seq_ids) in ids.iter().enumerate() {
            flat_ids[row * seq..row * seq + seq_ids.len()].copy_from_slice(seq_ids);
            mask[row * seq..row * seq + seq_ids.len()].fill(1);
        }
        let run = || -> candle_core::Result<Vec<Vec<f32>>> {
            let ids = Tensor::from_vec(flat_ids, (batch, seq), &self.device)?;
            let mask = Tensor::from_vec(mask, (batch, seq), &self.device)?;
            let type_ids = ids.zeros_like()?;
            let hidden = self.backbone.forward(&ids, &type_ids, &mask)?;
            let mut out = pooling::pool(&hidden, &mask, &self.pooling)?;
            for head in &self.heads {
                out = head.forward(&out)?;
            }
            if self.normalize {
                out = pooling::l2_normalize(&out)?;
            }
            out.to_vec2()
        };
        run().map_err(Error::inference)
    }
}

fn parse_pooling(names: &[String]) -> Result<Vec<PoolingMode>> {
    if names.is_empty() {
        return Err(Error::InvalidOptions("pooling must name at least one mode".into()));
    }
    let modes = names
        .iter()
        .map(|n| {
            PoolingMode::parse(n).ok_or_else(|| {
                Error::InvalidOptions(format!(
                    "unknown pooling mode \"{n}\"; expected one of {}",
                    PoolingMode::NAMES
                ))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(pooling::canonical(modes))
}

/// `model_max_length` of tokenizer_config.json; transformers stores a huge float
/// (1e30) when the tokenizer sets no limit.
fn tokenizer_max_length(path: &Path) -> Result<Option<usize>> {
    #[derive(serde::Deserialize)]
    struct TokenizerConfig {
        model_max_length: Option<f64>,
    }
    let cfg: Option<TokenizerConfig> = crate::st::read_json_opt(path)?;
    Ok(cfg.and_then(|c| c.model_max_length).filter(|n| *n >= 1.0 && *n < 1e9).map(|n| n as usize))
}

fn load_tokenizer(path: &Path) -> Result<Tokenizer> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    Tokenizer::from_bytes(&bytes).map_err(|e| Error::invalid_file(path, e))
}

/// Reads model.safetensors into memory (no mmap: a file changed under a mapping would
/// crash the backend) and counts the parameters.
pub(crate) fn load_weights(dir: &Path, device: &Device) -> Result<(VarBuilder<'static>, usize)> {
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
    let tensors =
        candle_core::safetensors::load_buffer(&bytes, device).map_err(|e| Error::invalid_file(&path, e))?;
    let parameters = tensors.values().map(Tensor::elem_count).sum();
    Ok((VarBuilder::from_tensors(tensors, DType::F32, device), parameters))
}

/// Python's `str.strip()`: sentence-transformers strips every input before tokenizing.
fn py_strip(text: &str) -> &str {
    text.trim_matches(|c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strip_matches_python() {
        assert_eq!(py_strip(" \t\n\u{1c}\u{85}\u{a0}a b\u{3000}\u{2029}"), "a b");
        assert_eq!(py_strip("\u{200b}x"), "\u{200b}x", "zero-width space is not whitespace in Python");
    }
}

/// Broken and unsupported model directories: each is a clear error naming the file and
/// the offending value, never a panic. Fixtures are all-MiniLM-L6-v2 with one change.
#[cfg(test)]
mod load_errors {
    use super::*;
    use std::fs;

    fn minilm_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("models/all-MiniLM-L6-v2")
    }

    /// A copy of all-MiniLM-L6-v2 (weights linked, not copied) changed by `edit`.
    fn broken(name: &str, edit: impl FnOnce(&Path)) -> Result<Pipeline> {
        let dir = std::env::temp_dir().join(format!("pg_embed_broken_{}_{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("1_Pooling")).unwrap();
        let src = minilm_dir();
        for f in [
            "config.json",
            "modules.json",
            "sentence_bert_config.json",
            "tokenizer.json",
            "1_Pooling/config.json",
        ] {
            fs::copy(src.join(f), dir.join(f)).unwrap();
        }
        std::os::unix::fs::symlink(src.join("model.safetensors"), dir.join("model.safetensors")).unwrap();
        edit(&dir);
        let result = Pipeline::load(&dir, &Options::default());
        let _ = fs::remove_dir_all(&dir);
        result
    }

    fn edit_json(path: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
        let mut v: serde_json::Value = serde_json::from_slice(&fs::read(path).unwrap()).unwrap();
        edit(&mut v);
        fs::write(path, serde_json::to_vec(&v).unwrap()).unwrap();
    }

    fn replace_weights(dir: &Path, bytes: &[u8]) {
        fs::remove_file(dir.join("model.safetensors")).unwrap();
        fs::write(dir.join("model.safetensors"), bytes).unwrap();
    }

    fn message(r: Result<Pipeline>) -> (Error, String) {
        let e = r.err().expect("loading must fail");
        let m = e.to_string();
        (e, m)
    }

    #[test]
    fn the_unbroken_copy_loads() {
        assert!(broken("none", |_| {}).is_ok());
    }

    #[test]
    fn missing_tokenizer() {
        let (e, m) = message(broken("no_tokenizer", |d| fs::remove_file(d.join("tokenizer.json")).unwrap()));
        assert!(matches!(e, Error::MissingFile { .. }) && m.ends_with("tokenizer.json\" is missing"), "{m}");
    }

    #[test]
    fn malformed_config_json() {
        let (e, m) = message(broken("bad_json", |d| {
            fs::write(d.join("config.json"), "{\"model_type\": \"bert\",").unwrap()
        }));
        assert!(matches!(e, Error::InvalidFile { .. }) && m.contains("config.json"), "{m}");
    }

    #[test]
    fn malformed_modules_json() {
        let (e, m) =
            message(broken("bad_modules", |d| fs::write(d.join("modules.json"), "[{\"type\": 3}]").unwrap()));
        assert!(matches!(e, Error::InvalidFile { .. }) && m.contains("modules.json"), "{m}");
    }

    #[test]
    fn unsupported_model_type() {
        let (e, m) =
            message(broken("t5", |d| edit_json(&d.join("config.json"), |v| v["model_type"] = "t5".into())));
        assert!(matches!(e, Error::Unsupported { what: "model_type", .. }) && m.contains("\"t5\""), "{m}");
        assert_eq!(e.hint().unwrap(), "Supported: bert.");
    }

    #[test]
    fn unsupported_activation() {
        let (e, m) = message(broken("swish", |d| {
            edit_json(&d.join("config.json"), |v| v["hidden_act"] = "swish".into())
        }));
        assert!(matches!(e, Error::Unsupported { what: "hidden_act", .. }) && m.contains("\"swish\""), "{m}");
        assert!(m.contains("config.json"), "{m}");
    }

    #[test]
    fn unsupported_module() {
        let (e, m) = message(broken("dense", |d| {
            edit_json(&d.join("modules.json"), |v| {
                v.as_array_mut().unwrap().insert(
                    2,
                    serde_json::json!({"idx": 2, "name": "2", "path": "2_LSTM", "type": "sentence_transformers.models.LSTM"}),
                )
            })
        }));
        assert!(
            matches!(e, Error::Unsupported { .. }) && m.contains("sentence_transformers.models.LSTM"),
            "{m}"
        );
    }

    #[test]
    fn legacy_pooling_flags_concatenate_in_legacy_order() {
        let p = broken("legacy_flags", |d| {
            edit_json(&d.join("1_Pooling/config.json"), |v| {
                v["pooling_mode_lasttoken"] = true.into();
                v["pooling_mode_cls_token"] = true.into();
            })
        })
        .unwrap();
        assert_eq!(p.info().pooling, vec![PoolingMode::Cls, PoolingMode::Mean, PoolingMode::Lasttoken]);
        assert_eq!(p.info().dim, 3 * 384);
    }

    #[test]
    fn pooling_dimension_differs_from_backbone() {
        let (e, m) = message(broken("dim", |d| {
            edit_json(&d.join("1_Pooling/config.json"), |v| v["word_embedding_dimension"] = 768.into())
        }));
        assert!(matches!(e, Error::InvalidFile { .. }) && m.contains("word_embedding_dimension 768"), "{m}");
    }

    #[test]
    fn config_shape_differs_from_weights() {
        let (e, m) = message(broken("shape", |d| {
            edit_json(&d.join("config.json"), |v| v["intermediate_size"] = 1024.into())
        }));
        assert!(matches!(e, Error::InvalidFile { .. }) && m.contains("model.safetensors"), "{m}");
        assert!(m.contains("shape"), "{m}");
    }

    #[test]
    fn truncated_weights() {
        let head = fs::read(minilm_dir().join("model.safetensors")).unwrap()[..4096].to_vec();
        let (e, m) = message(broken("truncated", |d| replace_weights(d, &head)));
        assert!(matches!(e, Error::InvalidFile { .. }) && m.contains("model.safetensors"), "{m}");
    }

    #[test]
    fn safetensors_header_that_lies_about_sizes() {
        let header = br#"{"w":{"dtype":"F32","shape":[1000000],"data_offsets":[0,4000000]}}"#;
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header);
        bytes.extend_from_slice(&[0u8; 16]);
        let (e, m) = message(broken("lying", |d| replace_weights(d, &bytes)));
        assert!(matches!(e, Error::InvalidFile { .. }) && m.contains("model.safetensors"), "{m}");
        let (e, _) = message(broken("huge_header_len", |d| replace_weights(d, &u64::MAX.to_le_bytes())));
        assert!(matches!(e, Error::InvalidFile { .. }));
    }

    #[test]
    fn sentence_transformers_6_pooling_format() {
        let p = broken("st6", |d| {
            fs::write(
                d.join("1_Pooling/config.json"),
                r#"{"embedding_dimension": 384, "pooling_mode": ["mean", "cls"], "include_prompt": true}"#,
            )
            .unwrap()
        })
        .unwrap();
        assert_eq!(p.info().pooling, vec![PoolingMode::Mean, PoolingMode::Cls], "order as listed");
        assert_eq!(p.info().dim, 768);
        let (e, m) = message(broken("st6_dim", |d| {
            fs::write(
                d.join("1_Pooling/config.json"),
                r#"{"embedding_dimension": 10, "pooling_mode": "mean"}"#,
            )
            .unwrap()
        }));
        assert!(matches!(e, Error::InvalidFile { .. }) && m.contains("word_embedding_dimension 10"), "{m}");
        let (e, m) = message(broken("st6_unknown", |d| {
            fs::write(
                d.join("1_Pooling/config.json"),
                r#"{"embedding_dimension": 384, "pooling_mode": "median"}"#,
            )
            .unwrap()
        }));
        assert!(
            matches!(e, Error::Unsupported { what: "pooling mode", .. }) && m.contains("\"median\""),
            "{m}"
        );
    }

    #[test]
    fn missing_weights() {
        let (e, m) = message(broken("no_weights", |d| fs::remove_file(d.join("model.safetensors")).unwrap()));
        assert!(matches!(e, Error::MissingFile { .. }) && m.contains("model.safetensors"), "{m}");
    }
}
