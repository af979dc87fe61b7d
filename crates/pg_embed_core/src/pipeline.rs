//! The embedding pipeline of one model, mirroring sentence-transformers' modules.json:
//! tokenizer -> backbone -> pooling -> (projection heads) -> normalize.
//! Plain Rust: no pgrx here.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use serde::Serialize;
use tokenizers::{PostProcessor, Tokenizer, TruncationParams};

use crate::classifier::{Classifier, HeadConfig, Problem};
use crate::error::{Error, Result};
use crate::heads::Dense;
use crate::models::{Backbone, BackboneConfig};
use crate::options::{LongInput, Options};
use crate::pooling::{self, PoolingMode};
use crate::st::Layout;

/// What `embed.model_info` shows: the pipeline as resolved from files and options.
#[derive(Debug, Clone, Serialize)]
pub struct PipelineInfo {
    /// "embed" or "classify".
    pub task: &'static str,
    /// Classifiers: the head, labels in output order, and how scores come from logits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub classifier: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem_type: Option<Problem>,
    pub architecture: &'static str,
    pub backbone: serde_json::Value,
    pub parameters: usize,
    pub pooling: Vec<PoolingMode>,
    /// Where the pooling came from: a file, "options", or the default.
    pub pooling_from: String,
    pub heads: Vec<serde_json::Value>,
    /// Whether the output is L2-normalised (the Normalize module, or options).
    pub normalize: bool,
    /// Matryoshka truncation (`options.dimensions`), if any.
    pub dimensions: Option<usize>,
    /// Whether the truncated output is L2-normalised again (`normalize: true` with `dimensions`).
    pub normalize_after_truncation: bool,
    pub dim: usize,
    pub max_length: usize,
    pub lowercase: bool,
    pub prompts: BTreeMap<String, String>,
    pub default_prompt: Option<String>,
    pub include_prompt: bool,
    pub long_input: LongInput,
    pub directory: PathBuf,
}

/// Work done with a pipeline since it was loaded (what `embed.loaded_models()` shows).
#[derive(Debug, Default)]
pub struct Stats {
    /// Calls of embed / classify entry points.
    pub calls: AtomicU64,
    /// Inputs (texts or pairs) received.
    pub inputs: AtomicU64,
    /// Tokens run through the backbone (special tokens included, padding not).
    pub tokens: AtomicU64,
    /// Inputs cut at max_length.
    pub truncated: AtomicU64,
    /// Inputs longer than max_length embedded as the mean of their chunks.
    pub chunked: AtomicU64,
    /// Batches run through the backbone.
    pub forward_passes: AtomicU64,
}

/// Inputs prepared for the backbone: rows of (token ids, pooling skip), and how many
/// consecutive rows each input spans (more than one for an input embedded as the mean of
/// its chunks).
struct Prepared {
    rows: Vec<(Vec<u32>, usize)>,
    spans: Vec<usize>,
}

/// A named prompt and how many of its tokens pooling leaves out when
/// `include_prompt` is false.
struct Prompt {
    text: String,
    length: usize,
}

pub struct Pipeline {
    tokenizer: Tokenizer,
    /// The same tokenizer without truncation: token counts and offsets of whole texts.
    untruncated: Tokenizer,
    long_input: LongInput,
    stats: Stats,
    backbone: Backbone,
    /// The classification head, for task "classify".
    classifier: Option<Classifier>,
    heads: Vec<Dense>,
    pooling: Vec<PoolingMode>,
    normalize: bool,
    dimensions: Option<usize>,
    normalize_after_truncation: bool,
    lowercase: bool,
    prompts: BTreeMap<String, Prompt>,
    default_prompt: Option<String>,
    include_prompt: bool,
    pad_id: u32,
    device: Device,
    info: PipelineInfo,
}

impl Pipeline {
    /// Loads a model directory (sentence-transformers or plain Hugging Face layout).
    /// Head files named in the options must lie inside `dir`.
    pub fn load(dir: &Path, options: &Options) -> Result<Self> {
        Self::load_within(dir, dir, options)
    }

    /// As [`Pipeline::load`], with head files allowed anywhere inside `root`
    /// (pg_embed.model_dir); relative head paths are relative to `dir`.
    pub fn load_within(root: &Path, dir: &Path, options: &Options) -> Result<Self> {
        crate::threads::fix_mmap_threshold();
        let layout = Layout::read(dir)?;
        let bdir = layout.backbone_dir.as_path();

        let config_path = bdir.join("config.json");
        let config_bytes = std::fs::read(&config_path).map_err(|e| Error::io(&config_path, e))?;
        let config = BackboneConfig::parse(&config_path, &config_bytes)?;
        let head_config: HeadConfig =
            serde_json::from_slice(&config_bytes).map_err(|e| Error::invalid_file(&config_path, e))?;
        let classify = match options.task.as_deref() {
            Some("embed") => false,
            Some("classify") => true,
            None => head_config.classification_architecture().is_some(),
            Some(other) => {
                return Err(Error::InvalidOptions(format!(
                    "unknown task \"{other}\"; expected embed or classify"
                )))
            }
        };
        if classify {
            let embedding_only = [
                ("pooling", options.pooling.is_some()),
                ("normalize", options.normalize.is_some()),
                ("dimensions", options.dimensions.is_some()),
                ("heads", options.heads.is_some()),
                ("prompt", options.prompt.is_some()),
                ("prompts", options.prompts.is_some()),
                ("include_prompt", options.include_prompt.is_some()),
                ("long_input: mean_of_chunks", options.long_input == Some(LongInput::MeanOfChunks)),
            ];
            if let Some((key, _)) = embedding_only.iter().find(|(_, set)| *set) {
                return Err(Error::InvalidOptions(format!(
                    "option \"{key}\" applies to embedding models; this one is a classifier (add \"task\": \"embed\" to embed with its backbone)"
                )));
            }
        }

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
            // A classifier's head does its own pooling.
            _ if classify => (Vec::new(), "none (the classification head pools)".to_string()),
            (Some(spec), _) => (parse_pooling(&spec.to_vec())?, "options".to_string()),
            (None, Some(module)) => (module.modes.clone(), module.path.display().to_string()),
            (None, None) => {
                (vec![config.default_pooling()], "default (no sentence-transformers Pooling module)".into())
            }
        };
        let normalize = options.normalize.unwrap_or(layout.normalize) && !classify;

        let mut tokenizer = load_tokenizer(&bdir.join("tokenizer.json"))?;
        let (pad_id, pad_file) = match tokenizer.get_padding() {
            Some(p) => (p.pad_id, "tokenizer.json"),
            None => (config.pad_token_id(), "config.json"),
        };
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
        let mut untruncated = tokenizer.clone();
        untruncated.with_truncation(None).map_err(|e| Error::invalid_file(bdir.join("tokenizer.json"), e))?;
        tokenizer
            .with_truncation(Some(TruncationParams { max_length, ..Default::default() }))
            .map_err(|e| Error::invalid_file(bdir.join("tokenizer.json"), e))?;

        let device = Device::Cpu;
        let (vb, parameters) = load_weights(bdir, &device)?;
        let classifier = if classify {
            let Some(architecture) = head_config.classification_architecture() else {
                return Err(Error::InvalidOptions(format!(
                    "task \"classify\" needs a *ForSequenceClassification checkpoint; {} names architectures {:?}",
                    config_path.display(),
                    head_config.architectures
                )));
            };
            Some(Classifier::load(&vb, architecture, &head_config, &config).map_err(|e| e.in_dir(bdir))?)
        } else {
            None
        };
        let backbone = Backbone::load(vb, &config).map_err(|e| e.in_dir(bdir))?;
        // Batches are padded with this id: out of the vocabulary, every padded batch fails.
        if pad_id as usize >= config.vocab_size() {
            return Err(Error::invalid_file(
                bdir.join(pad_file),
                format!("pad_token_id {pad_id} is not below vocab_size {}", config.vocab_size()),
            ));
        }
        check_token_ids(&tokenizer, config.vocab_size(), &bdir.join("tokenizer.json"))?;
        if classifier.as_ref().is_some_and(Classifier::needs_pooler) && !backbone.has_pooler() {
            return Err(Error::invalid_file(
                bdir.join("model.safetensors"),
                "the classifier needs the pooler, which the checkpoint lacks",
            ));
        }
        if pooling.contains(&PoolingMode::Pooler) && !backbone.has_pooler() {
            return Err(Error::InvalidOptions(format!(
                "pooling mode \"pooler\" needs the backbone's pooler, and {} has no pooler weights",
                bdir.join("model.safetensors").display()
            )));
        }

        let mut heads = Vec::with_capacity(layout.dense.len());
        let pooler_size = backbone.pooler_size(&config);
        let mut dim: usize = pooling
            .iter()
            .map(|m| if *m == PoolingMode::Pooler { pooler_size } else { config.hidden_size() })
            .sum();
        // A classifier ends in its head: sentence-transformers' Dense modules do not apply.
        for folder in layout.dense.iter().filter(|_| !classify) {
            let head = Dense::load(folder)?;
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
        for (index, spec) in options.heads.iter().flatten().enumerate() {
            let file = crate::source::resolve_file(root, dir, &spec.path, "head file")?;
            let head = Dense::from_spec(spec, &file, index, dim)?;
            dim = head.out_features;
            heads.push(head);
        }
        let dimensions = match options.dimensions {
            Some(0) => return Err(Error::InvalidOptions("dimensions must be at least 1".into())),
            Some(n) if n > dim => {
                return Err(Error::InvalidOptions(format!(
                    "dimensions {n} exceeds the model's output dimension {dim}"
                )))
            }
            other => other,
        };
        let normalize_after_truncation = dimensions.is_some() && options.normalize == Some(true);

        // Prompts: the model's own, then the options' (which win); "" means no prompt.
        let mut prompt_texts = layout.prompts.prompts.clone();
        prompt_texts.extend(options.prompts.clone().unwrap_or_default());
        let include_prompt =
            options.include_prompt.or(layout.pooling.as_ref().map(|p| p.include_prompt)).unwrap_or(true);
        let lowercase = layout.transformer.do_lower_case;
        let mut prompts = BTreeMap::new();
        for (name, text) in &prompt_texts {
            let length = prompt_length(&tokenizer, lowercase, text)?;
            prompts.insert(name.clone(), Prompt { text: text.clone(), length });
        }
        let default_prompt = match (&options.prompt, &layout.prompts.default_prompt_name) {
            (Some(name), _) => Some(name.clone()),
            (None, Some(name)) => Some(name.clone()),
            (None, None) => None,
        };
        if let Some(name) = &default_prompt {
            if !name.is_empty() && !prompts.contains_key(name) {
                return Err(Error::UnknownPrompt { name: name.clone(), known: known_prompts(&prompt_texts) });
            }
        }

        let info = PipelineInfo {
            task: if classifier.is_some() { "classify" } else { "embed" },
            classifier: classifier.as_ref().map(Classifier::describe),
            labels: classifier.as_ref().map(|c| c.labels.clone()),
            problem_type: classifier.as_ref().map(|c| c.problem),
            architecture: config.architecture(),
            backbone: config.summary(),
            parameters: parameters + heads.iter().map(Dense::parameters).sum::<usize>(),
            pooling: pooling.clone(),
            pooling_from,
            heads: heads.iter().map(Dense::describe).collect(),
            normalize,
            dimensions,
            normalize_after_truncation,
            dim: classifier.as_ref().map_or(dimensions.unwrap_or(dim), |c| c.labels.len()),
            max_length,
            lowercase,
            prompts: prompt_texts,
            default_prompt: default_prompt.clone(),
            include_prompt,
            long_input: options.long_input.unwrap_or_default(),
            directory: dir.to_path_buf(),
        };
        Ok(Pipeline {
            tokenizer,
            untruncated,
            long_input: options.long_input.unwrap_or_default(),
            stats: Stats::default(),
            backbone,
            classifier,
            heads,
            pooling,
            normalize,
            dimensions,
            normalize_after_truncation,
            lowercase,
            prompts,
            default_prompt,
            include_prompt,
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

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Token ids for one input, exactly as sentence-transformers tokenizes it.
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>> {
        Ok(encode(&self.tokenizer, self.lowercase, text)?.0)
    }

    /// Tokens of `text` with special tokens, not truncated.
    fn count_tokens(&self, text: &str) -> Result<usize> {
        Ok(encode(&self.untruncated, self.lowercase, text)?.0.len())
    }

    /// `text` split into chunks of at most `max_tokens` tokens of this model's tokenizer
    /// (special tokens not counted), consecutive chunks sharing about `overlap` tokens;
    /// see [`crate::chunk::split`].
    pub fn chunk(&self, text: &str, max_tokens: usize, overlap: usize) -> Result<Vec<crate::chunk::Chunk>> {
        if max_tokens == 0 {
            return Err(Error::InvalidArgument { what: "max_tokens", reason: "it must be at least 1".into() });
        }
        if overlap >= max_tokens {
            return Err(Error::InvalidArgument {
                what: "overlap",
                reason: format!("{overlap} must be less than max_tokens {max_tokens}"),
            });
        }
        let enc = self.untruncated.encode(text, false).map_err(|e| Error::Tokenize(e.to_string()))?;
        Ok(crate::chunk::split(text, enc.get_offsets(), max_tokens, overlap))
    }

    /// The prompt text for `name`: `None` is the default prompt, `Some("")` no prompt.
    fn prompt(&self, name: Option<&str>) -> Result<Option<&Prompt>> {
        let Some(name) = name.or(self.default_prompt.as_deref()).filter(|n| !n.is_empty()) else {
            return Ok(None);
        };
        match self.prompts.get(name) {
            Some(p) if p.text.is_empty() => Ok(None),
            Some(p) => Ok(Some(p)),
            None => Err(Error::UnknownPrompt { name: name.into(), known: known_prompts(&self.info.prompts) }),
        }
    }

    /// Token ids of one input with a prompt (as [`Pipeline::embed_with_prompt`] takes it),
    /// and how many leading tokens pooling leaves out.
    pub fn tokenize_with_prompt(&self, text: &str, prompt_name: Option<&str>) -> Result<(Vec<u32>, usize)> {
        let (ids, skip, _) = self.encode_prompted(text, self.prompt(prompt_name)?)?;
        Ok((ids, skip))
    }

    /// sentence-transformers prepends the prompt to the text before tokenizing; with
    /// include_prompt false, pooling leaves out the prompt's tokens ([CLS] included).
    /// Also whether the input was cut at max_length.
    fn encode_prompted(&self, text: &str, prompt: Option<&Prompt>) -> Result<(Vec<u32>, usize, bool)> {
        match prompt {
            None => {
                let (ids, cut) = encode(&self.tokenizer, self.lowercase, text)?;
                Ok((ids, 0, cut))
            }
            Some(p) => {
                let (ids, cut) = encode(&self.tokenizer, self.lowercase, &format!("{}{text}", p.text))?;
                Ok((ids, if self.include_prompt { 0 } else { p.length }, cut))
            }
        }
    }

    /// Embeds a batch of inputs with the default prompt: one vector per input, in input order.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        self.embed_with_prompt(texts, None)
    }

    /// Embeds a batch of inputs with a named prompt prepended to each, as
    /// sentence-transformers' `encode(..., prompt_name=...)` does: `None` is the default
    /// prompt (if any), `Some("")` no prompt.
    pub fn embed_with_prompt(&self, texts: &[&str], prompt_name: Option<&str>) -> Result<Vec<Vec<f32>>> {
        let prepared = self.prepare(texts, prompt_name)?;
        let vectors = self.embed_encoded(&prepared.rows)?;
        Ok(self.combine(vectors, &prepared.spans))
    }

    /// Embeds many inputs (default prompt) in batches of at most `max_batch_tokens` padded
    /// tokens (a longer single input is its own batch), grouped by length so padding stays
    /// small, each computed on `threads` threads; `before_batch` runs on the calling thread
    /// before each batch (interrupt checks). One vector per input, in input order.
    pub fn embed_batched(
        &self,
        texts: &[&str],
        max_batch_tokens: usize,
        threads: usize,
        mut before_batch: impl FnMut() -> Result<()>,
    ) -> Result<Vec<Vec<f32>>> {
        let prepared = self.prepare(texts, None)?;
        let encoded = &prepared.rows;
        let lengths: Vec<usize> = encoded.iter().map(|(ids, _)| ids.len()).collect();
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); encoded.len()];
        for batch in length_batches(&lengths, max_batch_tokens) {
            before_batch()?;
            let rows: Vec<(Vec<u32>, usize)> = batch.iter().map(|&i| encoded[i].clone()).collect();
            let vectors = crate::threads::run(threads, || self.embed_encoded(&rows))??;
            for (i, v) in batch.into_iter().zip(vectors) {
                out[i] = v;
            }
        }
        Ok(self.combine(out, &prepared.spans))
    }

    /// Token ids and the pooling skip of each input with the named prompt (see
    /// `embed_with_prompt`), an input longer than max_length handled as `long_input` says.
    fn prepare(&self, texts: &[&str], prompt_name: Option<&str>) -> Result<Prepared> {
        if self.classifier.is_some() {
            return Err(Error::WrongTask { task: "classify", call: "embed" });
        }
        let prompt = self.prompt(prompt_name)?;
        let mut prepared = Prepared { rows: Vec::with_capacity(texts.len()), spans: Vec::with_capacity(texts.len()) };
        let (mut truncated, mut chunked) = (0, 0);
        for text in texts {
            let (ids, skip, cut) = self.encode_prompted(text, prompt)?;
            if cut {
                match self.long_input {
                    LongInput::Truncate => truncated += 1,
                    LongInput::Error => {
                        let full = prompt.map_or_else(|| text.to_string(), |p| format!("{}{text}", p.text));
                        return Err(Error::InputTooLong {
                            tokens: self.count_tokens(&full)?,
                            max_length: self.info.max_length,
                        });
                    }
                    LongInput::MeanOfChunks => {
                        // Each chunk gets the prompt and the special tokens around it.
                        let overhead = self.encode_prompted("", prompt)?.0.len();
                        let budget = self.info.max_length.saturating_sub(overhead).max(1);
                        let chunks = self.chunk(text, budget, 0)?;
                        for c in &chunks {
                            let (ids, skip, _) = self.encode_prompted(&text[c.bytes.clone()], prompt)?;
                            prepared.rows.push((ids, skip));
                        }
                        prepared.spans.push(chunks.len());
                        chunked += 1;
                        continue;
                    }
                }
            }
            prepared.rows.push((ids, skip));
            prepared.spans.push(1);
        }
        let tokens: usize = prepared.rows.iter().map(|(ids, _)| ids.len()).sum();
        self.stats.calls.fetch_add(1, Relaxed);
        self.stats.inputs.fetch_add(texts.len() as u64, Relaxed);
        self.stats.tokens.fetch_add(tokens as u64, Relaxed);
        self.stats.truncated.fetch_add(truncated, Relaxed);
        self.stats.chunked.fetch_add(chunked, Relaxed);
        Ok(prepared)
    }

    /// One vector per input from one per row: an input spanning several rows (its chunks)
    /// gets their mean, L2-normalised again when the pipeline's output is normalised.
    fn combine(&self, vectors: Vec<Vec<f32>>, spans: &[usize]) -> Vec<Vec<f32>> {
        if spans.iter().all(|&n| n == 1) {
            return vectors;
        }
        let unit = self.normalize && (self.dimensions.is_none() || self.normalize_after_truncation);
        let mut rows = vectors.into_iter();
        spans
            .iter()
            .map(|&n| {
                let mut parts = rows.by_ref().take(n);
                let mut mean = parts.next().unwrap_or_default();
                for v in parts {
                    mean.iter_mut().zip(&v).for_each(|(m, x)| *m += x);
                }
                mean.iter_mut().for_each(|m| *m /= n as f32);
                if unit {
                    let norm = mean.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
                    mean.iter_mut().for_each(|m| *m /= norm);
                }
                mean
            })
            .collect()
    }

    /// One padded batch of encoded inputs through backbone, pooling, heads, normalize.
    fn embed_encoded(&self, encoded: &[(Vec<u32>, usize)]) -> Result<Vec<Vec<f32>>> {
        if encoded.is_empty() {
            return Ok(Vec::new());
        }
        self.stats.forward_passes.fetch_add(1, Relaxed);
        let rows: Vec<(&[u32], Option<&[u32]>, usize)> =
            encoded.iter().map(|(ids, skip)| (ids.as_slice(), None, *skip)).collect();
        let run = || -> candle_core::Result<Vec<Vec<f32>>> {
            let (ids, type_ids, mask, pool_mask) = self.batch(&rows)?;
            let hidden = self.backbone.forward(&ids, &type_ids, &mask)?;
            let pooler = if self.pooling.contains(&PoolingMode::Pooler) {
                self.backbone.pooler(&hidden, &ids)?
            } else {
                None
            };
            let mut out = pooling::pool(&hidden, &pool_mask, &self.pooling, pooler.as_ref())?;
            for head in &self.heads {
                out = head.forward(&out)?;
            }
            if self.normalize {
                out = pooling::l2_normalize(&out)?;
            }
            // sentence-transformers' truncate_dim: a plain slice after the last module.
            if let Some(k) = self.dimensions {
                out = out.narrow(1, 0, k)?;
                if self.normalize_after_truncation {
                    out = pooling::l2_normalize(&out)?;
                }
            }
            out.to_vec2()
        };
        run().map_err(Error::inference)
    }

    /// The backbone's last hidden states of each input (tokenized as `embed` tokenizes it,
    /// without a prompt), [tokens][hidden] per input, run as one padded batch: what
    /// transformers' `last_hidden_state` holds.
    pub fn hidden_states(&self, texts: &[&str]) -> Result<Vec<Vec<Vec<f32>>>> {
        let encoded = texts.iter().map(|t| self.tokenize(t)).collect::<Result<Vec<_>>>()?;
        if encoded.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<(&[u32], Option<&[u32]>, usize)> =
            encoded.iter().map(|ids| (ids.as_slice(), None, 0)).collect();
        let run = || -> candle_core::Result<Vec<Vec<Vec<f32>>>> {
            let (ids, type_ids, mask, _) = self.batch(&rows)?;
            let hidden = self.backbone.forward(&ids, &type_ids, &mask)?.to_vec3::<f32>()?;
            Ok(hidden
                .into_iter()
                .zip(&encoded)
                .map(|(mut h, ids)| {
                    h.truncate(ids.len());
                    h
                })
                .collect())
        };
        run().map_err(Error::inference)
    }

    /// The classifier, for `classify`, `classify_labels` and `rerank`.
    pub fn classifier(&self) -> Result<&Classifier> {
        self.classifier.as_ref().ok_or(Error::WrongTask { task: "embed", call: "classify" })
    }

    /// Token ids and token type ids of an input or a sentence pair, as transformers'
    /// `tokenizer(text, pair, truncation=True)` gives them (longest-first truncation).
    /// A tokenizer whose post-processor adds no special tokens to a pair has no pair template:
    /// the two texts would run together, so a pair is refused.
    pub fn tokenize_pair(&self, text: &str, pair: Option<&str>) -> Result<(Vec<u32>, Vec<u32>)> {
        if pair.is_some() && self.tokenizer.get_post_processor().map_or(0, |p| p.added_tokens(true)) == 0 {
            return Err(Error::NoPairTemplate);
        }
        let (enc, cut) = self.encode_pair(&self.tokenizer, text, pair)?;
        if cut {
            if self.long_input == LongInput::Error {
                return Err(Error::InputTooLong {
                    tokens: self.encode_pair(&self.untruncated, text, pair)?.0.len(),
                    max_length: self.info.max_length,
                });
            }
            self.stats.truncated.fetch_add(1, Relaxed);
        }
        Ok((enc.get_ids().to_vec(), enc.get_type_ids().to_vec()))
    }

    fn encode_pair(&self, tokenizer: &Tokenizer, text: &str, pair: Option<&str>) -> Result<(tokenizers::Encoding, bool)> {
        let enc = match pair {
            None => tokenizer.encode_fast(text, true),
            Some(p) => tokenizer.encode_fast((text, p), true),
        }
        .map_err(|e| Error::Tokenize(e.to_string()))?;
        let cut = !enc.get_overflowing().is_empty();
        Ok((enc, cut))
    }

    /// The pair argument of `classify(model, input, pair)`: transformers'
    /// `tokenizer(text, text_pair)` treats an empty `text_pair` as no pair at all, while
    /// sentence-transformers' CrossEncoder (and so `rerank`) keeps an empty document as
    /// the second sequence.
    pub fn pair_argument(pair: &str) -> Option<&str> {
        (!pair.is_empty()).then_some(pair)
    }

    /// Raw logits [num_labels] per input (or sentence pair), in input order, as one batch.
    pub fn classify(&self, inputs: &[(&str, Option<&str>)]) -> Result<Vec<Vec<f32>>> {
        self.classify_batched(inputs, usize::MAX, crate::threads::available(), || Ok(()))
    }

    /// As `classify`, in length-grouped batches of at most `max_batch_tokens` padded tokens
    /// on `threads` threads, with `before_batch` on the calling thread before each batch.
    pub fn classify_batched(
        &self,
        inputs: &[(&str, Option<&str>)],
        max_batch_tokens: usize,
        threads: usize,
        mut before_batch: impl FnMut() -> Result<()>,
    ) -> Result<Vec<Vec<f32>>> {
        let classifier = self.classifier()?;
        let encoded = inputs.iter().map(|(t, p)| self.tokenize_pair(t, *p)).collect::<Result<Vec<_>>>()?;
        self.stats.calls.fetch_add(1, Relaxed);
        self.stats.inputs.fetch_add(inputs.len() as u64, Relaxed);
        self.stats.tokens.fetch_add(encoded.iter().map(|(ids, _)| ids.len() as u64).sum(), Relaxed);
        let lengths: Vec<usize> = encoded.iter().map(|(ids, _)| ids.len()).collect();
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); encoded.len()];
        for batch in length_batches(&lengths, max_batch_tokens) {
            before_batch()?;
            self.stats.forward_passes.fetch_add(1, Relaxed);
            let rows: Vec<(&[u32], Option<&[u32]>, usize)> =
                batch.iter().map(|&i| (encoded[i].0.as_slice(), Some(encoded[i].1.as_slice()), 0)).collect();
            let run = || -> candle_core::Result<Vec<Vec<f32>>> {
                let (ids, type_ids, mask, _) = self.batch(&rows)?;
                let hidden = self.backbone.forward(&ids, &type_ids, &mask)?;
                let pooler =
                    if classifier.needs_pooler() { self.backbone.pooler(&hidden, &ids)? } else { None };
                classifier.forward(&hidden, &mask, pooler.as_ref())?.to_vec2()
            };
            let logits = crate::threads::run(threads, || run().map_err(Error::inference))??;
            for (i, l) in batch.into_iter().zip(logits) {
                out[i] = l;
            }
        }
        Ok(out)
    }

    /// A right-padded batch: ids, type ids, attention mask, and the pooling mask (which
    /// leaves out each row's first `skip` tokens).
    fn batch(
        &self,
        rows: &[(&[u32], Option<&[u32]>, usize)],
    ) -> candle_core::Result<(Tensor, Tensor, Tensor, Tensor)> {
        let seq = rows.iter().map(|(ids, _, _)| ids.len()).max().unwrap_or(0);
        let batch = rows.len();
        let mut flat_ids = vec![self.pad_id; batch * seq];
        let mut flat_types = vec![0u32; batch * seq];
        let mut mask = vec![0u32; batch * seq];
        let mut pool_mask = vec![0u32; batch * seq];
        for (row, (ids, types, skip)) in rows.iter().enumerate() {
            let start = row * seq;
            flat_ids[start..start + ids.len()].copy_from_slice(ids);
            if let Some(types) = types {
                flat_types[start..start + types.len()].copy_from_slice(types);
            }
            mask[start..start + ids.len()].fill(1);
            pool_mask[start + (*skip).min(ids.len())..start + ids.len()].fill(1);
        }
        let shape = (batch, seq);
        Ok((
            Tensor::from_vec(flat_ids, shape, &self.device)?,
            Tensor::from_vec(flat_types, shape, &self.device)?,
            Tensor::from_vec(mask, shape, &self.device)?,
            Tensor::from_vec(pool_mask, shape, &self.device)?,
        ))
    }
}

/// Input indices grouped into batches by length: sorted by token count (ties in input
/// order), each batch as large as fits `max_batch_tokens` padded tokens (count x its
/// longest), at least one input each.
pub fn length_batches(lengths: &[usize], max_batch_tokens: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|&i| lengths[i]);
    let mut batches: Vec<Vec<usize>> = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    for i in order {
        // Sorted ascending: the newest input is the batch's longest.
        if !current.is_empty() && (current.len() + 1) * lengths[i] > max_batch_tokens {
            batches.push(std::mem::take(&mut current));
        }
        current.push(i);
    }
    if !current.is_empty() {
        batches.push(current);
    }
    batches
}

fn known_prompts(prompts: &BTreeMap<String, String>) -> String {
    let names: Vec<&str> = prompts.keys().map(String::as_str).collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// Tokens of `text` as sentence-transformers 6 tokenizes an input: as it is (no strip),
/// lowercased when sentence_bert_config.json says `do_lower_case`.
/// Also whether the tokenizer cut the input at its max length.
fn encode(tokenizer: &Tokenizer, lowercase: bool, text: &str) -> Result<(Vec<u32>, bool)> {
    let text = if lowercase { text.to_lowercase() } else { text.to_string() };
    let enc = tokenizer.encode_fast(text, true).map_err(|e| Error::Tokenize(e.to_string()))?;
    Ok((enc.get_ids().to_vec(), !enc.get_overflowing().is_empty()))
}

/// sentence-transformers' prompt length: the tokens of the prompt alone, special tokens
/// included, less a trailing special token (the [SEP] / </s> that the text follows).
fn prompt_length(tokenizer: &Tokenizer, lowercase: bool, prompt: &str) -> Result<usize> {
    let (ids, _) = encode(tokenizer, lowercase, prompt)?;
    let specials = tokenizer.get_added_tokens_decoder();
    let trailing_special = ids.last().is_some_and(|id| specials.get(id).is_some_and(|t| t.special));
    Ok(ids.len() - usize::from(trailing_special))
}

fn parse_pooling(names: &[String]) -> Result<Vec<PoolingMode>> {
    if names.is_empty() {
        return Err(Error::InvalidOptions("pooling must name at least one mode".into()));
    }
    let mut modes = Vec::with_capacity(names.len());
    for n in names {
        let mode = PoolingMode::parse(n).ok_or_else(|| {
            Error::InvalidOptions(format!(
                "unknown pooling mode \"{n}\"; expected one of {}",
                PoolingMode::NAMES
            ))
        })?;
        if modes.contains(&mode) {
            return Err(Error::InvalidOptions(format!("pooling mode \"{n}\" is listed twice")));
        }
        modes.push(mode);
    }
    // Concatenated in the order listed, as sentence-transformers 6.x's Pooling(pooling_mode=[...]).
    Ok(modes)
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

/// Refuses a tokenizer that can emit a token id the embedding has no row for (any input
/// with that token, or every input for a special token the template adds, would fail in
/// the forward pass): the vocabulary with its added tokens, and the special tokens of the
/// post-processor's single and pair templates.
fn check_token_ids(tokenizer: &Tokenizer, vocab_size: usize, path: &Path) -> Result<()> {
    let mut tokens: Vec<(String, u32)> = tokenizer.get_vocab(true).into_iter().collect();
    let single = tokenizer.encode("", true).map_err(|e| Error::invalid_file(path, e))?;
    // A tokenizer that cannot encode pairs is refused only when a pair is given (classify).
    let pair = tokenizer.encode(("", ""), true).ok();
    for enc in std::iter::once(&single).chain(pair.as_ref()) {
        tokens.extend(enc.get_tokens().iter().cloned().zip(enc.get_ids().iter().copied()));
    }
    match tokens.into_iter().max_by_key(|(_, id)| *id) {
        Some((token, id)) if id as usize >= vocab_size => Err(Error::invalid_file(
            path,
            format!("token {token:?} has id {id}, not below the model's vocab_size {vocab_size}"),
        )),
        _ => Ok(()),
    }
}

fn load_tokenizer(path: &Path) -> Result<Tokenizer> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    // tokenizers panics (`expect`) on some malformed JSON, a truncated file among them:
    // the syntax is checked first.
    serde_json::from_slice::<serde::de::IgnoredAny>(&bytes).map_err(|e| Error::invalid_file(path, e))?;
    Tokenizer::from_bytes(&bytes).map_err(|e| Error::invalid_file(path, e))
}

/// Bytes the weights of the model directory `dir` take once loaded (every tensor of its
/// safetensors files, sub-folders included, as f32), read from the files' headers only:
/// nothing is allocated for the tensors.
pub fn weight_bytes(dir: &Path) -> Result<u64> {
    let mut total = 0u64;
    for path in crate::st::files_under(dir, |_| Ok(()))? {
        if path.extension().is_some_and(|e| e == "safetensors") {
            total = total.saturating_add(safetensors_f32_bytes(&path)?);
        }
    }
    Ok(total)
}

/// Bytes of all tensors of a safetensors file as f32, from its header: an 8-byte
/// little-endian length, then that many bytes of JSON naming each tensor's shape.
fn safetensors_f32_bytes(path: &Path) -> Result<u64> {
    use std::io::Read;
    /// Headers are kilobytes; a larger length is a corrupt file, not a reason to allocate.
    const MAX_HEADER: u64 = 100 << 20;
    #[derive(serde::Deserialize)]
    struct Entry {
        shape: Vec<u64>,
    }
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut len = [0u8; 8];
    file.read_exact(&mut len).map_err(|e| Error::invalid_file(path, format!("no safetensors header: {e}")))?;
    let len = u64::from_le_bytes(len);
    if len > MAX_HEADER {
        return Err(Error::invalid_file(path, format!("safetensors header length {len} is not plausible")));
    }
    let mut header = vec![0u8; len as usize];
    file.read_exact(&mut header).map_err(|e| Error::invalid_file(path, format!("truncated safetensors header: {e}")))?;
    let mut tensors: HashMap<String, serde_json::Value> =
        serde_json::from_slice(&header).map_err(|e| Error::invalid_file(path, e))?;
    tensors.remove("__metadata__");
    let mut total = 0u64;
    for (name, value) in tensors {
        let entry: Entry =
            serde_json::from_value(value).map_err(|e| Error::invalid_file(path, format!("{name}: {e}")))?;
        let elements = entry.shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
        total = elements.and_then(|n| n.checked_mul(4)).and_then(|b| total.checked_add(b)).ok_or_else(|| {
            Error::invalid_file(path, format!("{name}: shape {:?} overflows", entry.shape))
        })?;
    }
    Ok(total)
}

/// Reads a safetensors file into memory as f32 tensors (no mmap: a file changed under a
/// mapping would crash the backend).
pub fn read_safetensors(path: &Path) -> Result<HashMap<String, Tensor>> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let tensors = candle_core::safetensors::load_buffer(&bytes, &Device::Cpu)
        .map_err(|e| Error::invalid_file(path, e))?;
    tensors
        .into_iter()
        .map(|(name, t)| {
            let t = t.to_dtype(DType::F32).map_err(|e| Error::invalid_file(path, format!("{name}: {e}")))?;
            Ok((name, t))
        })
        .collect()
}

/// The backbone's model.safetensors and its parameter count.
pub(crate) fn load_weights(dir: &Path, device: &Device) -> Result<(VarBuilder<'static>, usize)> {
    let tensors = read_safetensors(&dir.join("model.safetensors"))?;
    let parameters = tensors.values().map(Tensor::elem_count).sum();
    Ok((VarBuilder::from_tensors(tensors, DType::F32, device), parameters))
}

#[cfg(test)]
mod tests {
    use super::length_batches;

    #[test]
    fn weight_bytes_read_from_headers() {
        let dir = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("models/all-MiniLM-L6-v2");
        let bytes = super::weight_bytes(&dir).unwrap();
        // 22,713,216 parameters of the backbone (as transformers counts them) plus the
        // position ids buffer stored in this checkpoint, 4 bytes each.
        assert!((90_000_000..92_000_000).contains(&bytes), "{bytes}");
        let tmp = std::env::temp_dir().join(format!("pg_embed_wb_{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        std::fs::write(tmp.join("model.safetensors"), u64::MAX.to_le_bytes()).unwrap();
        assert!(matches!(super::weight_bytes(&tmp), Err(crate::error::Error::InvalidFile { .. })));
        let header = br#"{"w":{"dtype":"F16","shape":[4294967296,4294967296,16],"data_offsets":[0,2]}}"#;
        let mut lying = (header.len() as u64).to_le_bytes().to_vec();
        lying.extend_from_slice(header);
        std::fs::write(tmp.join("model.safetensors"), lying).unwrap();
        let err = super::weight_bytes(&tmp).unwrap_err().to_string();
        assert!(err.contains("overflows"), "{err}");
        let _ = std::fs::remove_dir_all(&tmp);
    }

    #[test]
    fn batches_group_by_length_under_the_budget() {
        let lengths = [5, 2, 9, 2, 3, 12];
        // Sorted: 2 (1), 2 (3), 3 (4), 5 (0), 9 (2), 12 (5); count x longest <= 12.
        assert_eq!(length_batches(&lengths, 12), vec![vec![1, 3, 4], vec![0], vec![2], vec![5]]);
        // Every input alone when the budget is below any length; all together when large.
        assert_eq!(length_batches(&lengths, 1).len(), 6);
        assert_eq!(length_batches(&lengths, 1000), vec![vec![1, 3, 4, 0, 2, 5]]);
        assert!(length_batches(&[], 10).is_empty());
    }
}

/// Property tests: any text (any Unicode, control characters and NUL included, empty,
/// long) through tokenizer and pipeline, under random pooling, normalisation, max_length
/// and Matryoshka options on a tiny fixture, gives finite vectors of the stated dimension,
/// and batching does not change them.
#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    const MODES: [&str; 6] = ["cls", "mean", "max", "mean_sqrt_len_tokens", "weightedmean", "lasttoken"];

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            "\\PC{0,80}",
            proptest::collection::vec(prop_oneof![Just("\u{301}"), Just("\u{200d}"), Just("👩"), Just("\u{5d0}"), Just(" "), Just("a")], 0..40)
                .prop_map(|parts| parts.concat()),
            (1usize..4000).prop_map(|n| "word ".repeat(n)),
        ]
    }

    proptest! {
        // A fixed seed: the same cases on every run (a failure is reproducible as it is).
        #![proptest_config(ProptestConfig {
            cases: 256,
            rng_seed: proptest::test_runner::RngSeed::Fixed(0x5eed_0e3b_ed00),
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn any_text_under_any_options_embeds(
            texts in proptest::collection::vec(text(), 1..6),
            modes in proptest::sample::subsequence(MODES.to_vec(), 1..3),
            normalize in any::<bool>(),
            max_length in 3usize..40,
            dimensions in proptest::option::of(1usize..16),
            budget in 1usize..200,
        ) {
            let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("tests/fixtures/pool_mean");
            let options = Options::from_json(&serde_json::json!({
                "pooling": modes, "normalize": normalize, "max_length": max_length, "dimensions": dimensions,
            })).unwrap();
            let p = Pipeline::load(&dir, &options).unwrap();
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let batched = p.embed_batched(&refs, budget, 2, || Ok(())).unwrap();
            prop_assert_eq!(batched.len(), texts.len());
            for (t, v) in refs.iter().zip(&batched) {
                prop_assert_eq!(v.len(), p.dim());
                prop_assert!(v.iter().all(|x| x.is_finite()), "{:?} -> {:?}", t, v);
                let single = p.embed(&[t]).unwrap().remove(0);
                let d = single.iter().zip(v).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                prop_assert!(d <= 1e-5, "{:?}: batched differs by {}", t, d);
            }
        }

        #[test]
        fn chunks_of_any_text_are_in_order_and_within_the_text(
            t in text(),
            max_tokens in 1usize..20,
            overlap in 0usize..20,
        ) {
            let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("tests/fixtures/pool_mean");
            let p = Pipeline::load(&dir, &Options::default()).unwrap();
            match p.chunk(&t, max_tokens, overlap) {
                Err(e) => prop_assert!(overlap >= max_tokens, "{}", e),
                Ok(chunks) => {
                    for c in &chunks {
                        prop_assert!(c.bytes.start <= c.bytes.end && c.bytes.end <= t.len());
                        prop_assert!(t.is_char_boundary(c.bytes.start) && t.is_char_boundary(c.bytes.end));
                        prop_assert!(c.tokens.len() <= max_tokens && !c.tokens.is_empty());
                    }
                    for w in chunks.windows(2) {
                        prop_assert!(w[1].tokens.start > w[0].tokens.start && w[1].tokens.start <= w[0].tokens.end);
                    }
                }
            }
        }
    }
}

/// Broken and unsupported model directories: each is a clear error naming the file and
/// the offending value, never a panic. Fixtures are all-MiniLM-L6-v2 with one change.
#[cfg(test)]
mod load_errors {
    use super::*;
    use std::fs;

    fn minilm_dir() -> PathBuf {
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("models/all-MiniLM-L6-v2")
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
        let (e, m) = message(broken("gpt2", |d| {
            edit_json(&d.join("config.json"), |v| v["model_type"] = "gpt2".into())
        }));
        assert!(matches!(e, Error::Unsupported { what: "model_type", .. }) && m.contains("\"gpt2\""), "{m}");
        assert_eq!(
            e.hint().unwrap(),
            "Supported: bert, clip_text_model, deberta-v2, distilbert, electra, modernbert, mpnet, nomic_bert, roberta, t5, xlm-roberta."
        );
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
