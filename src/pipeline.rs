//! The embedding pipeline of one model, mirroring sentence-transformers' modules.json:
//! tokenizer -> backbone -> pooling -> (projection heads) -> normalize.
//! Plain Rust: no pgrx here.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use serde::Serialize;
use tokenizers::{PostProcessor, Tokenizer, TruncationParams};

use crate::error::{Error, Result};
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

        let (pooling, pooling_from) = match (&options.pooling, &layout.pooling) {
            (Some(spec), _) => (parse_pooling(&spec.to_vec())?, "options".to_string()),
            (None, Some((modes, path))) => (pooling::canonical(modes.clone()), path.display().to_string()),
            (None, None) => (vec![PoolingMode::Mean], "default (no sentence-transformers Pooling module)".into()),
        };
        let normalize = options.normalize.unwrap_or(layout.normalize);
        let dim = config.hidden_size() * pooling.len();

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
            None => layout.transformer.max_seq_length.unwrap_or(max_positions).min(max_positions),
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

        let info = PipelineInfo {
            task: "embed",
            architecture: config.architecture(),
            backbone: config.summary(),
            parameters,
            pooling: pooling.clone(),
            pooling_from,
            heads: Vec::new(),
            normalize,
            dim,
            max_length,
            lowercase: layout.transformer.do_lower_case,
            directory: dir.to_path_buf(),
        };
        Ok(Pipeline {
            tokenizer,
            backbone,
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
                Error::InvalidOptions(format!("unknown pooling mode \"{n}\"; expected one of {}", PoolingMode::NAMES))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(pooling::canonical(modes))
}

fn load_tokenizer(path: &Path) -> Result<Tokenizer> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    Tokenizer::from_bytes(&bytes).map_err(|e| Error::invalid_file(path, e))
}

/// Reads model.safetensors into memory (no mmap: a file changed under a mapping would
/// crash the backend) and counts the parameters.
fn load_weights(dir: &Path, device: &Device) -> Result<(VarBuilder<'static>, usize)> {
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
    let tensors = candle_core::safetensors::load_buffer(&bytes, device).map_err(|e| Error::invalid_file(&path, e))?;
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
