//! The embedding pipeline of one model, mirroring sentence-transformers' modules.json:
//! tokenizer -> backbone -> pooling -> (projection heads) -> normalize.
//! Plain Rust: no pgrx here.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::Serialize;
use tokenizers::{PostProcessor, Tokenizer};

use crate::classifier::{Classifier, Problem};
use crate::error::{Error, Result};
use crate::kernels::{bf16, float32};

use crate::models::{Batch, Modality};
use crate::options::LongInput;
use crate::pooling::{self, PoolingMode};
use crate::processor::ImageProcessor;
use crate::stages::{time, Stage};

mod batch;
mod images;
mod input;
mod load;
mod multi;
mod outputs;
mod routes;
mod score;
mod sparse;
#[cfg(test)]
mod tests;
pub(crate) mod text;

pub use batch::length_batches;
pub use load::prepared_key;
pub use multi::AllOutputs;
use batch::{in_batches, Packed, CALLING_THREAD};
use outputs::{DenseOutput, Outputs};
use sparse::SparseStage;
use text::{encode, encode_typed, Encoded, Prompt, Text};

/// What `embed.model_info` shows: the pipeline as resolved from files and options.
#[derive(Debug, Clone, Serialize)]
pub struct PipelineInfo {
    /// "embed", "classify", or "sparse" (a sparse encoder: embed_sparse).
    pub task: &'static str,
    /// Sparse encoders: the MLM head, SpladePooling, the query route and the selection.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sparse: Option<serde_json::Value>,
    /// Late interaction (ColBERT, bge-m3): the token heads and settings (`embed_multi`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub multi: Option<serde_json::Value>,
    /// Classifiers: the head, labels in output order, and how scores come from logits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub classifier: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem_type: Option<Problem>,
    pub architecture: &'static str,
    /// What the model takes: text, image, or text and image (CLIP).
    pub modality: Modality,
    /// The image processor's settings (image models).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preprocessing: Option<serde_json::Value>,
    pub backbone: serde_json::Value,
    /// A sigmoid-loss dual encoder's zero-shot constants: `logit_scale` and `logit_bias` as
    /// the checkpoint stores them (see `Model::sigmoid_logits`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zero_shot: Option<serde_json::Value>,
    pub parameters: usize,
    /// What the backbone's linear layers compute with (`options.precision`).
    pub precision: crate::options::Precision,
    pub pooling: Vec<PoolingMode>,
    /// Where the pooling came from: a file, "options", or the default.
    pub pooling_from: String,
    pub heads: Vec<serde_json::Value>,
    /// An asymmetric model's Router: each route's heads, the default route, and where the
    /// routes run among `heads` (`after_heads`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub router: Option<serde_json::Value>,
    /// LoRA task adapters (`crate::lora`): each task's name, the prompt a call naming it
    /// prepends, the parameters its delta changes, and the bytes of its merged copy of the
    /// backbone in the shared file.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub adapters: Vec<serde_json::Value>,
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
    rows: Vec<Encoded>,
    spans: Vec<usize>,
}

/// The input stages: what turns a user's input into the backbone's tokens. Text goes
/// through the tokenizer, images through the image processor `preprocessor_config.json`
/// names; both end in the same backbone -> pooling -> heads stages. A CLIP model has both.
struct Input {
    text: Option<Text>,
    images: Option<ImageProcessor>,
}

/// Where a pipeline's weights are shared with other processes (see `crate::prepared`).
pub struct Share<'a> {
    pub store: &'a crate::prepared::Store,
    /// sha256 of the model folder's files by relative path, when known (a hub pin's);
    /// otherwise computed (and remembered in the store).
    pub files: Option<&'a BTreeMap<String, String>>,
    /// Labels written into a new file: the model name and source it was built for.
    pub model: &'a str,
    pub source: &'a str,
    /// Called while waiting for another process that builds the same file; an error ends
    /// the wait (a cancelled query).
    pub interrupt: &'a dyn Fn() -> Result<()>,
    /// Called before the weights are built (not when they are mapped): the admission of
    /// the build's memory (see `crate::prepared::budget`), held until the build ends.
    pub admit: Option<&'a dyn Fn() -> Result<crate::prepared::budget::Reservation>>,
}

/// How a pipeline's weights are held: mapped from a shared file, or private.
#[derive(Debug, Clone, Default)]
pub struct Sharing {
    /// The prepared file mapped, if any.
    pub file: Option<PathBuf>,
    /// Bytes of weights in the shared mapping.
    pub shared_bytes: usize,
    /// What was replaced (a damaged or foreign file).
    pub note: Option<String>,
    /// The file being written from these weights (when this load built them).
    pub writing: Option<crate::prepared::Writing>,
}

impl Sharing {
    /// Whether this load built the weights from the model's files for the shared file.
    pub fn built(&self) -> bool {
        self.writing.is_some()
    }
}

/// The parts of a pipeline that hold weights: what a prepared file shares between processes.
#[derive(serde::Serialize)]
pub(crate) struct Weights {
    pub backbone: Box<dyn crate::models::Model>,
    /// LoRA task adapters: a copy of the backbone per task, its delta merged (`crate::lora`).
    pub adapters: Vec<Adapted>,
    pub classifier: Option<Classifier>,
    pub heads: Vec<crate::heads::Dense>,
    /// Parameters of the backbone's checkpoint and the heads.
    pub parameters: usize,
    /// A sparse encoder's masked-language-model head.
    pub mlm: Option<crate::mlm::MlmHead>,
    /// An asymmetric model's Router: each route's heads, run among `heads`.
    pub routes: Option<routes::Routes>,
    /// Late interaction: the token heads (ColBERT's Dense modules, bge-m3's .pt heads).
    pub late: Option<multi::LateHeads>,
    /// A CSR model's sparse autoencoder (after the heads).
    pub sae: Option<crate::autoencoder::SparseAutoEncoder>,
    /// A causal-LM reranker's LM-head rows of its true and false tokens.
    pub score: Option<crate::score_head::ScoreHead>,
}

/// The backbone of one LoRA task: its delta merged into the weights once.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct Adapted<B = Box<dyn crate::models::Model>> {
    /// The task's name (the adapter's folder, or jinaai's task name).
    pub name: String,
    /// Elements of the weights the task's delta changes.
    pub changed: usize,
    pub backbone: B,
}

impl Weights {
    /// The width the heads give (None: no heads, the pooling's width).
    pub(crate) fn output_dim(&self) -> Option<usize> {
        match &self.routes {
            Some(r) => Some(self.heads.get(r.at..).and_then(<[crate::heads::Dense]>::last).map_or(r.dim, |h| h.out_features)),
            None => self.heads.last().map(|h| h.out_features),
        }
    }
}

pub struct Pipeline {
    input: Input,
    /// What the model gives: its outputs and how a call picks a route among them.
    outputs: Outputs,
    /// A static embedding model: no transformer, and no compute threads.
    is_static: bool,
    long_input: LongInput,
    stats: Stats,
    hidden_size: usize,
    /// The backbone and the weights of the outputs (the classification head, the projection
    /// heads, the MLM head, the token heads): mapped from the shared file, or built here (and
    /// shared with the thread writing it).
    weights: std::sync::Arc<Weights>,
    info: PipelineInfo,
    sharing: Sharing,
}

/// A static model tokenizes an input longer than this in pieces of about this size
/// (`text::encode_in_pieces`): a 10 MB input then takes tens of MB, not hundreds.
const STATIC_PIECE_BYTES: usize = 1 << 16;

impl Pipeline {
    /// The text input stage; an error for an image model.
    fn text(&self) -> Result<&Text> {
        self.input.text.as_ref().ok_or(Error::WrongModality { model: "image", call: "text" })
    }

    /// Encoded rows laid end to end for the backbone, with whether the tokenizer passes an
    /// attention mask ([`crate::models::Batch::pads_attended`]).
    fn packed(&self, rows: &[&Encoded]) -> Packed {
        let mut packed = Packed::of(rows);
        packed.pads_attended = self.text().is_ok_and(|t| !t.attention_mask);
        packed
    }

    /// The image input stage; an error for a text model.
    fn image_processor(&self) -> Result<&ImageProcessor> {
        self.input.images.as_ref().ok_or(Error::WrongModality { model: "text", call: "image" })
    }

    /// What the model takes: text, images or both.
    pub fn modality(&self) -> Modality {
        self.info.modality
    }

    pub fn info(&self) -> &PipelineInfo {
        &self.info
    }

    /// The kernel the backbone's linear layers run on in this process: "avx512-float32" or
    /// "gemm-float32"; in bfloat16 the dispatched one ("amx-bf16", "avx512-bf16",
    /// "portable"), with why a faster one is not used when that is worth saying.
    pub fn kernel(&self) -> String {
        match self.info.precision {
            crate::options::Precision::Float32 if float32::available() => "avx512-float32".into(),
            crate::options::Precision::Float32 => "gemm-float32".into(),
            crate::options::Precision::Bfloat16 => bf16::dispatch().describe(),
            crate::options::Precision::Int8 => crate::kernels::int8::dispatch().describe(),
        }
    }

    pub fn dim(&self) -> usize {
        self.info.dim
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Adds `old`'s counters to this pipeline's (the same model reloaded: mapped from the
    /// file `old` wrote).
    pub fn carry_stats(&self, old: &Pipeline) {
        let (a, b) = (&self.stats, &old.stats);
        for (to, from) in [
            (&a.calls, &b.calls),
            (&a.inputs, &b.inputs),
            (&a.tokens, &b.tokens),
            (&a.truncated, &b.truncated),
            (&a.chunked, &b.chunked),
            (&a.forward_passes, &b.forward_passes),
        ] {
            to.fetch_add(from.load(Relaxed), Relaxed);
        }
    }

    /// Whether the weights are mapped from a shared prepared file, and which.
    pub fn sharing(&self) -> &Sharing {
        &self.sharing
    }

    /// Token ids for one input, exactly as sentence-transformers tokenizes it.
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>> {
        Ok(self.encode_prompted(text, None)?.0.ids)
    }

    /// Tokens of `text` with special tokens, not truncated.
    fn count_tokens(&self, text: &str) -> Result<usize> {
        Ok(encode(self.text()?.untruncated()?, self.text()?.lowercase, text)?.0.len())
    }

    /// `text` split into chunks of at most `max_tokens` tokens of this model's tokenizer
    /// (special tokens not counted), consecutive chunks sharing about `overlap` tokens;
    /// see [`crate::chunk::split`].
    pub fn chunk(&self, text: &str, max_tokens: usize, overlap: usize) -> Result<Vec<crate::chunk::Chunk>> {
        if max_tokens == 0 {
            return Err(Error::InvalidArgument {
                what: "max_tokens",
                reason: "it must be at least 1".into(),
            });
        }
        if overlap >= max_tokens {
            return Err(Error::InvalidArgument {
                what: "overlap",
                reason: format!("{overlap} must be less than max_tokens {max_tokens}"),
            });
        }
        let enc = self.text()?.untruncated()?.encode(text, false).map_err(|e| Error::Tokenize(e.to_string()))?;
        Ok(crate::chunk::split(text, enc.get_offsets(), max_tokens, overlap))
    }

    /// The prompt text for `name`: `None` is the default prompt, `Some("")` no prompt.
    fn prompt(&self, name: Option<&str>) -> Result<Option<&Prompt>> {
        let Some(name) = name.or(self.text()?.default_prompt.as_deref()).filter(|n| !n.is_empty()) else {
            return Ok(None);
        };
        let prompts = &self.text()?.prompts;
        let task = self.adapter_of(Some(name)).is_some();
        // A LoRA task's name: its prompt under either spelling (`retrieval_query` is
        // jinaai's `retrieval.query`), or none.
        let task_prompt =
            || task.then(|| prompts.iter().find(|(k, _)| crate::lora::same_task(k, name)).map(|(_, p)| p)).flatten();
        match prompts.get(name).or_else(task_prompt) {
            Some(p) if p.text.is_empty() => Ok(None),
            Some(p) => Ok(Some(p)),
            // A route's name (an asymmetric model) need not be a prompt too, nor a task's.
            None if self.is_route(name) || task => Ok(None),
            None => Err(Error::UnknownPrompt { name: name.into(), known: known_prompts(&self.info.prompts) }),
        }
    }

    /// Token ids of one input with a prompt (as [`Pipeline::embed_with_prompt`] takes it),
    /// and how many leading tokens pooling leaves out.
    pub fn tokenize_with_prompt(&self, text: &str, prompt_name: Option<&str>) -> Result<(Vec<u32>, usize)> {
        let (row, _) = self.encode_prompted(text, self.prompt(prompt_name)?)?;
        Ok((row.ids, row.skip))
    }

    /// sentence-transformers prepends the prompt to the text before tokenizing; with
    /// include_prompt false, pooling leaves out the prompt's tokens ([CLS] included).
    /// Also whether the input was cut at max_length.
    fn encode_prompted(&self, text: &str, prompt: Option<&Prompt>) -> Result<(Encoded, bool)> {
        let t = self.text()?;
        let prompted;
        let full = match prompt {
            None => text,
            Some(p) => {
                prompted = format!("{}{text}", p.text);
                &prompted
            }
        };
        let full = match t.char_cut {
            Some(chars) => text::first_chars(full, chars),
            None => full,
        };
        // A static model's long input in pieces (the same ids, in bounded memory).
        let pieces = if self.is_static && full.len() > STATIC_PIECE_BYTES {
            text::encode_in_pieces(&t.tokenizer, t.lowercase, full, STATIC_PIECE_BYTES)?
        } else {
            None
        };
        let (ids, types, cut) = match pieces {
            Some(encoded) => encoded,
            None => encode_typed(&t.tokenizer, t.lowercase, full)?,
        };
        let skip = match prompt {
            Some(p) if !t.include_prompt => p.length,
            _ => 0,
        };
        let types = if t.type_ids { types } else { Vec::new() };
        let (mut ids, mut types) = match t.drop_id {
            Some(drop) if types.len() == ids.len() => ids.into_iter().zip(types).filter(|(id, _)| *id != drop).unzip(),
            Some(drop) => (ids.into_iter().filter(|id| *id != drop).collect(), types),
            None => (ids, types),
        };
        let mut cut = cut;
        if let Some(keep) = t.keep_after_drop.filter(|keep| ids.len() > *keep) {
            ids.truncate(keep);
            types.truncate(keep);
            cut = true;
        }
        Ok((Encoded { ids, types, skip }, cut))
    }

    /// Embeds a batch of inputs with the default prompt: one vector per input, in input order.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        self.embed_with_prompt(texts, None)
    }

    /// Embeds a batch of inputs with a named prompt prepended to each, as
    /// sentence-transformers' `encode(..., prompt_name=...)` does: `None` is the default
    /// prompt (if any), `Some("")` no prompt.
    /// For an asymmetric model, `prompt_name` also picks the route (see `routes`).
    pub fn embed_with_prompt(&self, texts: &[&str], prompt_name: Option<&str>) -> Result<Vec<Vec<f32>>> {
        let (route, backbone) = (self.route_of(prompt_name)?, self.backbone_of(prompt_name));
        let (dense, prepared) = self.prepare(texts, prompt_name, 1)?;
        let vectors = self.embed_encoded(dense, &prepared.rows.iter().collect::<Vec<_>>(), route, backbone)?;
        Ok(dense.combine(vectors, &prepared.spans))
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
        let (route, backbone) = (self.route_of(None)?, self.backbone_of(None));
        let (dense, prepared) = self.prepare(texts, None, threads)?;
        let encoded = &prepared.rows;
        let lengths: Vec<usize> = encoded.iter().map(|r| r.ids.len()).collect();
        let threads = self.compute_threads(threads);
        let out = in_batches(&lengths, max_batch_tokens, threads, &mut before_batch, |batch| {
            let rows: Vec<&Encoded> = batch.iter().map(|&i| &encoded[i]).collect();
            self.embed_encoded(dense, &rows, route, backbone)
        })?;
        Ok(dense.combine(out, &prepared.spans))
    }

    /// The dense output, and the token ids and the pooling skip of each input with the
    /// named prompt (see `embed_with_prompt`), an input longer than max_length handled as
    /// `long_input` says.
    fn prepare(&self, texts: &[&str], prompt_name: Option<&str>, threads: usize) -> Result<(&DenseOutput, Prepared)> {
        let dense = self.outputs.dense("embed")?;
        Ok((dense, self.prepare_prompted(texts, self.prompt(prompt_name)?, threads)?))
    }

    /// Whether this is a static embedding model: its calls run on the calling thread, as
    /// they cost about what tokenizing costs.
    pub fn is_static(&self) -> bool {
        self.is_static
    }

    /// The compute threads of a call: `threads`, or none for a static model.
    fn compute_threads(&self, threads: usize) -> usize {
        if self.is_static { CALLING_THREAD } else { threads }
    }

    /// Every input tokenized (`encode_prompted`): many inputs on `threads` threads (an
    /// array's tokenizing is most of a static model's work), few on the calling thread.
    fn encode_all(&self, texts: &[&str], prompt: Option<&Prompt>, threads: usize) -> Result<Vec<(Encoded, bool)>> {
        /// Fewer inputs than this are tokenized on the calling thread.
        const PARALLEL_FROM: usize = 64;
        if threads <= 1 || texts.len() < PARALLEL_FROM {
            return texts.iter().map(|t| time(Stage::Tokenize, || self.encode_prompted(t, prompt))).collect();
        }
        use rayon::prelude::*;
        crate::threads::run(threads, || {
            texts.par_iter().with_min_len(16).map(|t| time(Stage::Tokenize, || self.encode_prompted(t, prompt))).collect()
        })?
    }

    /// As `prepare`, with the prompt resolved; tokenizing on `threads` threads (see `encode_all`).
    fn prepare_prompted(&self, texts: &[&str], prompt: Option<&Prompt>, threads: usize) -> Result<Prepared> {
        let mut prepared =
            Prepared { rows: Vec::with_capacity(texts.len()), spans: Vec::with_capacity(texts.len()) };
        let (mut truncated, mut chunked) = (0, 0);
        for (text, (row, cut)) in texts.iter().zip(self.encode_all(texts, prompt, threads)?) {
            // A static model's input without tokens is a zero vector, as its mean is in
            // sentence-transformers and model2vec.
            if row.ids.is_empty() && !self.is_static {
                return Err(Error::EmptyInput { input: text.to_string() });
            }
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
                        let overhead = self.encode_prompted("", prompt)?.0.ids.len();
                        let budget = self.info.max_length.saturating_sub(overhead).max(1);
                        let chunks = self.chunk(text, budget, 0)?;
                        for c in &chunks {
                            prepared.rows.push(self.encode_prompted(&text[c.bytes.clone()], prompt)?.0);
                        }
                        prepared.spans.push(chunks.len());
                        chunked += 1;
                        continue;
                    }
                }
            }
            prepared.rows.push(row);
            prepared.spans.push(1);
        }
        let tokens: usize = prepared.rows.iter().map(|r| r.ids.len()).sum();
        self.stats.count_call(texts.len(), tokens);
        self.stats.truncated.fetch_add(truncated, Relaxed);
        self.stats.chunked.fetch_add(chunked, Relaxed);
        Ok(prepared)
    }

    /// One batch of encoded inputs through backbone, pooling, heads (of `route`, for an
    /// asymmetric model), normalize.
    fn embed_encoded(
        &self,
        dense: &DenseOutput,
        rows: &[&Encoded],
        route: Option<&routes::Route>,
        backbone: &dyn crate::models::Model,
    ) -> Result<Vec<Vec<f32>>> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let pooled = self.forward_pooled(rows, &dense.pooling, backbone)?;
        self.finish(dense, pooled, route)
    }

    /// Pooled rows through the projection heads (those of `route`, for an asymmetric
    /// model), normalize and truncation.
    fn finish(&self, dense: &DenseOutput, pooled: Vec<Vec<f32>>, route: Option<&routes::Route>) -> Result<Vec<Vec<f32>>> {
        Ok(dense.finish(self.apply_heads(pooled, route)?))
    }

    /// One forward pass of the backbone over encoded `rows`, packed, pooled with `modes`:
    /// one row per input.
    fn forward_pooled(&self, rows: &[&Encoded], modes: &[PoolingMode], backbone: &dyn crate::models::Model) -> Result<Vec<Vec<f32>>> {
        let packed = self.packed(rows);
        self.pool_batch(&packed.batch(), &packed.skips, modes, &[], backbone)
    }

    /// One forward pass of the backbone over a packed batch (text or images), pooled with
    /// `modes` (`skips`: each sequence's excluded prompt): one row per sequence.
    /// `lasts`: the token `lasttoken` reads per sequence where not its last (see
    /// `pooling::Sequences`).
    fn pool_batch(
        &self,
        batch: &Batch,
        skips: &[usize],
        modes: &[PoolingMode],
        lasts: &[usize],
        backbone: &dyn crate::models::Model,
    ) -> Result<Vec<Vec<f32>>> {
        self.stats.forward_passes.fetch_add(1, Relaxed);
        if let Some(table) = backbone.token_table().filter(|_| !modes.contains(&PoolingMode::Pooler)) {
            let token = table.rows_of(batch.ids).map_err(Error::inference)?;
            let sequences = pooling::Sequences { bounds: batch.bounds, skips, summary: 0, lasts };
            return pooling::pool_rows(token, self.hidden_size, sequences, modes, None).map_err(Error::Inference);
        }
        let (hidden, pooler) =
            backbone.forward_pooled(batch, modes.contains(&PoolingMode::Pooler)).map_err(Error::inference)?;
        let pooler = pooler.map(|t| t.to_vec2::<f32>()).transpose().map_err(Error::inference)?;
        let summary = if batch.is_image() { backbone.summary_tokens() } else { 0 };
        let sequences = pooling::Sequences { bounds: batch.bounds, skips, summary, lasts };
        pooling::pool(&hidden, self.hidden_size, sequences, modes, pooler.as_deref())
            .map_err(Error::Inference)
    }


    /// The projection heads, in order, over pooled rows (with `route`'s among them).
    fn apply_heads(&self, rows: Vec<Vec<f32>>, route: Option<&routes::Route>) -> Result<Vec<Vec<f32>>> {
        let heads = self.heads_of(route);
        let Some(last) = heads.last() else { return Ok(rows) };
        let mut x = rows.concat();
        for head in &heads {
            x = head.forward(&x);
        }
        Ok(x.chunks(last.out_features.max(1)).map(<[f32]>::to_vec).collect())
    }

    /// The backbone's last hidden states of each input (tokenized as `embed` tokenizes it,
    /// without a prompt), [tokens][hidden] per input, run as one packed batch: what
    /// transformers' `last_hidden_state` holds.
    pub fn hidden_states(&self, texts: &[&str]) -> Result<Vec<Vec<Vec<f32>>>> {
        let encoded = texts
            .iter()
            .map(|t| match self.encode_prompted(t, None)?.0 {
                row if row.ids.is_empty() => Err(Error::EmptyInput { input: t.to_string() }),
                row => Ok(row),
            })
            .collect::<Result<Vec<_>>>()?;
        if encoded.is_empty() {
            return Ok(Vec::new());
        }
        let packed = self.packed(&encoded.iter().collect::<Vec<_>>());
        let batch = packed.batch();
        let hidden = self.weights.backbone.forward(&batch).map_err(Error::inference)?;
        let h = self.hidden_size;
        Ok((0..batch.len())
            .map(|i| batch.sequence(i).map(|t| hidden[t * h..(t + 1) * h].to_vec()).collect())
            .collect())
    }


    /// The classifier, for `classify`, `classify_labels` and `rerank`.
    pub fn classifier(&self) -> Result<&Classifier> {
        self.outputs.classifier(&self.weights)
    }

    /// Whether `rerank` reports sigmoid(score) (sentence-transformers' CrossEncoder's
    /// activation) or the score; an error for a model without one score per pair.
    pub fn rerank_sigmoid(&self) -> Result<bool> {
        if let Some(score) = self.outputs.score() {
            return Ok(score.sigmoid);
        }
        let classifier = self.classifier()?;
        match classifier.labels.len() {
            1 => Ok(classifier.rerank_sigmoid),
            labels => Err(Error::NotACrossEncoder { labels }),
        }
    }

    /// Whether the model scores (query, document) pairs through a chat template (a causal-LM
    /// reranker): an empty document is then a document, not a missing pair.
    pub fn scores_pairs(&self) -> bool {
        self.outputs.score().is_some()
    }

    /// Token ids and token type ids of an input or a sentence pair, as transformers'
    /// `tokenizer(text, pair, truncation=True)` gives them (longest-first truncation); the
    /// type ids are empty when the tokenizer passes none to the model.
    /// A tokenizer whose post-processor adds no special tokens to a pair has no pair template:
    /// the two texts would run together, so a pair is refused.
    pub fn tokenize_pair(&self, text: &str, pair: Option<&str>) -> Result<(Vec<u32>, Vec<u32>)> {
        if pair.is_some()
            && self.text()?.tokenizer.get_post_processor().map_or(0, |p| p.added_tokens(true)) == 0
        {
            return Err(Error::NoPairTemplate);
        }
        let (enc, cut) = self.encode_pair(&self.text()?.tokenizer, text, pair)?;
        if enc.get_ids().is_empty() {
            return Err(Error::EmptyInput { input: text.to_string() });
        }
        if cut {
            if self.long_input == LongInput::Error {
                return Err(Error::InputTooLong {
                    tokens: self.encode_pair(self.text()?.untruncated()?, text, pair)?.0.len(),
                    max_length: self.info.max_length,
                });
            }
            self.stats.truncated.fetch_add(1, Relaxed);
        }
        let types = if self.text()?.type_ids { enc.get_type_ids().to_vec() } else { Vec::new() };
        Ok((enc.get_ids().to_vec(), types))
    }

    fn encode_pair(
        &self,
        tokenizer: &Tokenizer,
        text: &str,
        pair: Option<&str>,
    ) -> Result<(tokenizers::Encoding, bool)> {
        let enc = match pair {
            None => tokenizer.encode_fast(text, true),
            Some(p) => tokenizer.encode_fast((text, p), true),
        }
        .map_err(|e| Error::Tokenize(e.to_string()))?;
        // A pair's template adds tokens (checked by the caller): a cut pair shows overflow.
        let cut = match pair {
            None => text::was_cut(tokenizer, text, &enc)?,
            Some(_) => !enc.get_overflowing().is_empty(),
        };
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
        if let Some(score) = self.outputs.score() {
            return self.score_batched(score, inputs, max_batch_tokens, threads, &mut before_batch);
        }
        let classifier = self.classifier()?;
        let encoded = inputs.iter().map(|(t, p)| self.tokenize_pair(t, *p)).collect::<Result<Vec<_>>>()?;
        let lengths: Vec<usize> = encoded.iter().map(|(ids, _)| ids.len()).collect();
        self.stats.count_call(inputs.len(), lengths.iter().sum());
        in_batches(&lengths, max_batch_tokens, threads, &mut before_batch, |batch| {
            let rows: Vec<Encoded> = batch
                .iter()
                .map(|&i| Encoded { ids: encoded[i].0.clone(), types: encoded[i].1.clone(), skip: 0 })
                .collect();
            self.classify_encoded(classifier, &rows.iter().collect::<Vec<_>>())
        })
    }

    /// One batch of encoded inputs (or pairs) through backbone and classification head.
    fn classify_encoded(&self, classifier: &Classifier, rows: &[&Encoded]) -> Result<Vec<Vec<f32>>> {
        let packed = self.packed(rows);
        if classifier.reads_every_token() {
            let batch = packed.batch();
            self.stats.forward_passes.fetch_add(1, Relaxed);
            let hidden = self.weights.backbone.forward(&batch).map_err(Error::inference)?;
            return Ok(classifier.late_logits(&hidden, batch.bounds));
        }
        let lasts: Vec<usize> = match classifier.reads_last_non_padding() {
            Some(pad) => rows.iter().map(|r| last_non_padding(&r.ids, pad)).collect(),
            None => Vec::new(),
        };
        let pooled =
            self.pool_batch(&packed.batch(), &packed.skips, &[classifier.pooling()], &lasts, self.weights.backbone.as_ref())?;
        Ok(classifier.logits(&pooled))
    }
}

/// The token a GPT-2-style head reads: the rightmost whose id is not `pad` (transformers:
/// the argmax of position x (id != pad), so 0 when every token is the pad token); the last
/// token when the config names no pad token.
fn last_non_padding(ids: &[u32], pad: Option<u32>) -> usize {
    match pad {
        Some(pad) => ids.iter().rposition(|&id| id != pad).unwrap_or(0),
        None => ids.len().saturating_sub(1),
    }
}

fn known_prompts(prompts: &BTreeMap<String, String>) -> String {
    let names: Vec<&str> = prompts.keys().map(String::as_str).collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}
