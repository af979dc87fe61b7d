//! Backbones: one architecture per file, each with a serde `Config` (implementing
//! [`Config`]: its [`Dims`] and `load`), `load(vb, &cfg)` and a [`Model`] whose forward
//! pass takes a packed batch and returns the hidden states of its tokens. Architecture
//! dispatch is the one table [`ARCHITECTURES`], a row per `model_type`: how to parse its
//! config.json and which [`Model`] the prepared file restores. What several files share:
//! `checks.rs` (the config checks and refusals of every architecture), `encoder.rs` (the
//! BERT family's embeddings and layers), `decoder.rs` (the rotary decoders' backbone and
//! config), `rotary.rs` (the one reader of rotary settings), `vision.rs` (the ViT-style
//! towers), `jina_embeddings_v3.rs` (the rotary encoders, GTE's too).
//!
//! Adding an architecture: its file, `<model_type>.rs`, with the `Config` transformers
//! saves (serde defaults, or a family's [`decoder::Defaults`] table filled in by
//! `fill_defaults`), checked with `checks.rs` before anything is allocated, its `load` and
//! its `Model`'s `forward` (on `crate::layers` over packed tokens); its row
//! `row::<x::Config, x::Model>("model_type")` in [`ARCHITECTURES`]; a tiny random
//! checkpoint with transformers' outputs, made by a fixture script in scripts/
//! (`gen_family_fixtures.py`, `gen_decoder_fixtures.py`, ...); and a golden
//! test comparing the two.

use candle_core::Tensor;
use candle_nn::VarBuilder;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub use crate::processor::Pixels;

use crate::error::{Error, Result};
use crate::pooling::PoolingMode;

pub mod bert;
pub mod checks;
pub mod clip;
pub mod clip_model;
pub mod clip_vision;
pub mod deberta_v2;
pub mod decoder;
pub mod dinov2;
pub mod dinov3;
pub mod distilbert;
pub mod electra;
pub mod encoder;
pub mod eurobert;
pub mod gemma2;
pub mod gemma3;
pub mod gpt2;
pub mod gte;
pub mod jina_embeddings_v3;
pub mod llama;
pub mod mistral;
pub mod modernbert;
pub mod mpnet;
pub mod nomic_bert;
pub mod qwen2;
pub mod qwen3;
pub mod roberta;
pub mod rotary;
pub mod siglip;
pub mod siglip2_vision;
pub mod siglip_text;
pub mod siglip_vision;
pub mod static_embedding;
pub mod t5;
pub mod vision;
pub mod vit;
pub mod xlnet;

/// A packed batch: the tokens of every sequence laid end to end, no padding. Sequence `i`
/// is tokens `bounds[i]..bounds[i + 1]` (`bounds[0]` is 0; text-embeddings-inference calls
/// them cumulative sequence lengths). A text batch carries token ids; an image batch carries
/// the images' pixels instead, sequence `i` being image `i`'s tokens ([CLS] and patches, as
/// many as the model's [`Model::image_tokens`] says).
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    pub ids: &'a [u32],
    /// Token type (segment) ids, one per token; empty when the tokenizer passes none
    /// (transformers' `model_input_names` without `token_type_ids`), and then each model
    /// does what transformers does without them (BERT: zeros; GPT-2: no token type term).
    pub type_ids: &'a [u32],
    pub bounds: &'a [usize],
    /// The images of an image batch (empty for text).
    pub images: &'a [Pixels],
    /// Per sequence, how many of its first tokens are attention keys: the rest are queries
    /// only, as transformers' attention mask hides padding (ColBERT's query expansion with
    /// `attend_to_expansion_tokens` false). Empty: every token is a key. Only models whose
    /// [`Model::hides_keys`] is true read it.
    pub keys: &'a [usize],
    /// The tokenizer passes no attention mask (its `model_input_names` leave it out): a model
    /// whose reference pads every input to its positions (SigLIP's text tower) then attends
    /// over that padding, as transformers does. Every other model computes each sequence
    /// alone, where the mask changes nothing.
    pub pads_attended: bool,
}

/// What a model takes as input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Modality {
    Text,
    Image,
    /// Text and images into one space (CLIP): `embed` and `embed_image` both work.
    Both,
}

impl Modality {
    pub fn takes_text(self) -> bool {
        self != Modality::Image
    }

    pub fn takes_images(self) -> bool {
        self != Modality::Text
    }

    /// As embed.models and embed.model_info show it: text, image or both.
    pub fn name(self) -> &'static str {
        match self {
            Modality::Text => "text",
            Modality::Image => "image",
            Modality::Both => "both",
        }
    }
}

impl<'a> Batch<'a> {
    /// The number of sequences.
    pub fn len(&self) -> usize {
        self.bounds.len().saturating_sub(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn tokens(&self) -> usize {
        self.bounds.last().copied().unwrap_or(0)
    }

    /// The token range of sequence `i`.
    pub fn sequence(&self, i: usize) -> std::ops::Range<usize> {
        self.bounds[i]..self.bounds[i + 1]
    }

    /// The length of every sequence; boundaries that do not run from 0 to the last token
    /// (of the ids; of the bounds themselves in an image batch) are an error.
    pub fn lengths(&self) -> candle_core::Result<Vec<usize>> {
        let tokens = if self.is_image() { self.tokens() } else { self.ids.len() };
        crate::layers::lengths_of(self.bounds, tokens)
    }

    /// Whether this is an image batch.
    pub fn is_image(&self) -> bool {
        !self.images.is_empty()
    }

    /// The token type ids transformers' BERT family uses: the given ones, or zeros when
    /// the tokenizer passes none.
    pub fn type_ids_or_zeros(&self) -> std::borrow::Cow<'a, [u32]> {
        if self.type_ids.is_empty() {
            std::borrow::Cow::Owned(vec![0; self.ids.len()])
        } else {
            std::borrow::Cow::Borrowed(self.type_ids)
        }
    }

    /// A text batch.
    pub fn text(ids: &'a [u32], type_ids: &'a [u32], bounds: &'a [usize]) -> Self {
        Batch { ids, type_ids, bounds, images: &[], keys: &[], pads_attended: false }
    }

    /// The sequences' key counts, one per sequence (see `keys`).
    pub fn key_limits(&self) -> candle_core::Result<Option<crate::layers::KeyLimits>> {
        if self.keys.is_empty() {
            return Ok(None);
        }
        if self.keys.len() != self.len() {
            candle_core::bail!("{} key counts for {} sequences", self.keys.len(), self.len());
        }
        Ok(Some(crate::layers::KeyLimits::new(self.bounds, self.keys)))
    }
}

/// A loaded backbone. Its weights are serializable (`serde`), with every buffer a
/// [`crate::prepared::Shared`]: that is how it is written into, and restored from, the
/// shared prepared file.
pub trait Model: Send + Sync + Prepare {
    /// The last hidden states [tokens, hidden] of every token of `batch`, row-major, in the
    /// batch's order. A sequence's result does not depend on the others in its batch.
    fn forward(&self, batch: &Batch) -> candle_core::Result<Vec<f32>>;

    /// Whether `forward` honours [`Batch::keys`] (tokens that are queries only).
    fn hides_keys(&self) -> bool {
        false
    }

    /// The window of the sliding-window layers, if the model has any: keys at most this
    /// many positions from each query.
    fn sliding_window(&self) -> Option<usize> {
        None
    }

    /// The width of the pooler output (transformers' `pooler_output`), if the checkpoint
    /// carries a pooler.
    fn pooler_size(&self) -> Option<usize> {
        None
    }

    /// The pooler output [sequences, pooler size] from `forward`'s hidden states.
    fn pooler(&self, _hidden: &[f32], _batch: &Batch) -> candle_core::Result<Option<Tensor>> {
        Ok(None)
    }

    /// The hidden states and, when `pooler`, the pooler output: `forward` then `pooler`,
    /// unless the pooler reads a state that is not among the batch's tokens (SigLIP's text
    /// tower reads the last padding position's) and the model computes both in one pass.
    fn forward_pooled(&self, batch: &Batch, pooler: bool) -> candle_core::Result<(Vec<f32>, Option<Tensor>)> {
        let hidden = self.forward(batch)?;
        let pooled = if pooler { self.pooler(&hidden, batch)? } else { None };
        Ok((hidden, pooled))
    }

    /// The tokens an image of `height` x `width` pixels (as the image processor gives it)
    /// becomes, or why the model cannot take it; an error for a text model.
    fn image_tokens(&self, _height: usize, _width: usize) -> std::result::Result<usize, String> {
        Err("this model takes text, not images".into())
    }

    /// A sigmoid-loss dual encoder's `logit_scale` (the log of the temperature, as stored)
    /// and `logit_bias`: text i matches image j with probability
    /// sigmoid(exp(logit_scale) * cos(text_i, image_j) + logit_bias) (SigLIP).
    fn sigmoid_logits(&self) -> Option<(f32, f32)> {
        None
    }

    /// Leading tokens of an image sequence that `cls` reads and the averaging modes leave
    /// out (DINOv2's mean is over the patch tokens only); 0 for text.
    fn summary_tokens(&self) -> usize {
        0
    }

    /// The table whose rows are `forward`'s hidden states (a static model: token `t`'s
    /// state is the row of its id), so that pooling reads them in place instead of a
    /// [tokens, width] copy; None for a model that computes its states.
    fn token_table(&self) -> Option<&crate::layers::Embedding> {
        None
    }
}

/// The sizes the pipeline reads of a config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dims {
    pub hidden_size: usize,
    /// The longest input the position embeddings allow, in tokens (an image model: the
    /// tokens of an image at the trained size).
    pub max_positions: usize,
    /// The token side of a model that takes text; None for an image model.
    pub text: Option<TextDims>,
}

/// What a text model's config says of its tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextDims {
    /// Rows of the token embedding (the backbone checks them against the checkpoint).
    pub vocab_size: usize,
    /// The token id batches are padded with when the tokenizer names none.
    pub pad_token_id: u32,
}

impl Dims {
    pub fn text(hidden_size: usize, max_positions: usize, vocab_size: usize, pad_token_id: u32) -> Self {
        Dims { hidden_size, max_positions, text: Some(TextDims { vocab_size, pad_token_id }) }
    }

    /// An image model's: no vocabulary, no padding.
    pub fn image(hidden_size: usize, max_positions: usize) -> Self {
        Dims { hidden_size, max_positions, text: None }
    }
}

/// What the pipeline needs to know of an architecture's config.json (how to restore its
/// backbone from the prepared file is the architecture's row in [`ARCHITECTURES`]).
pub trait Config: Send + Sync {
    fn dims(&self) -> Dims;
    /// Fills in, after parsing, what config.json left out and the family defaults, so that
    /// the summary shows it (`BackboneConfig::summary`); most configs have serde fill them.
    fn fill_defaults(&mut self) {}
    /// Pooling when neither sentence-transformers' files nor the options name one.
    fn default_pooling(&self) -> PoolingMode {
        PoolingMode::Mean
    }
    /// What the model takes: text (a tokenizer), images (an image processor) or both.
    fn modality(&self) -> Modality {
        Modality::Text
    }
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn Model>>;
}

/// A backbone's weights as the prepared file describes them (every serializable model has it).
pub trait Prepare {
    fn prepared(&self) -> serde_json::Result<serde_json::Value>;
}

impl<T: Serialize> Prepare for T {
    fn prepared(&self) -> serde_json::Result<serde_json::Value> {
        serde_json::to_value(self)
    }
}

impl Serialize for dyn Model {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        self.prepared().map_err(serde::ser::Error::custom)?.serialize(serializer)
    }
}

/// A backbone of type `M` from its description ([`Model::prepared`]), its buffers in a
/// mapped prepared file.
pub(crate) fn restore<M: Model + DeserializeOwned + 'static>(
    prepared: serde_json::Value,
) -> Result<Box<dyn Model>> {
    let model: M = serde_json::from_value(prepared)
        .map_err(|e| Error::invalid_file("prepared weights", format!("cannot restore the backbone: {e}")))?;
    Ok(Box::new(model))
}

type Restore = fn(serde_json::Value) -> Result<Box<dyn Model>>;

/// One row of the architecture table: config.json's `model_type`, how to parse it (as a
/// [`Config`]) and how to restore its backbone from the prepared file.
pub struct Architecture {
    pub model_type: &'static str,
    parse: fn(&[u8]) -> serde_json::Result<(Box<dyn Config>, serde_json::Value)>,
    restore: Restore,
}

/// The row of `model_type`: config.json parsed as `C`, the backbone a `M`.
const fn row<C, M>(model_type: &'static str) -> Architecture
where
    C: Config + DeserializeOwned + Serialize + 'static,
    M: Model + DeserializeOwned + 'static,
{
    Architecture { model_type, parse: parse_as::<C>, restore: restore::<M> }
}

fn parse_as<C: Config + DeserializeOwned + serde::Serialize + 'static>(
    bytes: &[u8],
) -> serde_json::Result<(Box<dyn Config>, serde_json::Value)> {
    let mut config: C = serde_json::from_slice(bytes)?;
    config.fill_defaults();
    let summary = serde_json::to_value(&config)?;
    Ok((Box::new(config), summary))
}

/// Every supported architecture, by `model_type`.
pub const ARCHITECTURES: &[Architecture] = &[
    row::<bert::Config, bert::Model>("bert"),
    row::<roberta::Config, roberta::Model>("camembert"),
    row::<clip_model::Config, clip_model::Model>("clip"),
    row::<clip::Config, clip::Model>("clip_text_model"),
    row::<clip_vision::Config, clip_vision::Model>("clip_vision_model"),
    row::<deberta_v2::Config, deberta_v2::Model>("deberta-v2"),
    row::<dinov2::Config, dinov2::Model>("dinov2"),
    row::<dinov3::Config, dinov3::Model>("dinov3_vit"),
    row::<distilbert::Config, distilbert::Model>("distilbert"),
    row::<electra::Config, electra::Model>("electra"),
    row::<eurobert::Config, decoder::Model>("eurobert"),
    row::<gemma2::Config, decoder::Model>("gemma2"),
    row::<gemma3::Config, decoder::Model>("gemma3_text"),
    row::<gpt2::Config, gpt2::Model>("gpt2"),
    row::<gte::Config, jina_embeddings_v3::RopeEncoder>("gte"),
    row::<jina_embeddings_v3::Config, jina_embeddings_v3::RopeEncoder>("jina_embeddings_v3"),
    row::<llama::Config, decoder::Model>("llama"),
    row::<mistral::Config, decoder::Model>("mistral"),
    row::<modernbert::Config, modernbert::Model>("modernbert"),
    row::<mpnet::Config, mpnet::Model>("mpnet"),
    // Alibaba-NLP's GTE checkpoints as published (transformers maps them to "gte").
    row::<gte::Config, jina_embeddings_v3::RopeEncoder>("new"),
    row::<nomic_bert::Config, nomic_bert::Model>("nomic_bert"),
    row::<qwen2::Config, decoder::Model>("qwen2"),
    row::<qwen3::Config, decoder::Model>("qwen3"),
    row::<roberta::Config, roberta::Model>("roberta"),
    row::<siglip::Config<siglip_vision::Config>, siglip::Model<siglip_vision::Model>>("siglip"),
    row::<siglip::Config<siglip2_vision::Config>, siglip::Model<siglip2_vision::Model>>("siglip2"),
    row::<siglip_text::Config, siglip_text::Model>("siglip2_text_model"),
    row::<siglip2_vision::Config, siglip2_vision::Model>("siglip2_vision_model"),
    row::<siglip_text::Config, siglip_text::Model>("siglip_text_model"),
    row::<siglip_vision::Config, siglip_vision::Model>("siglip_vision_model"),
    row::<t5::Config, t5::Model>("t5"),
    row::<vit::Config, vit::Model>("vit"),
    row::<roberta::Config, roberta::Model>("xlm-roberta"),
    row::<xlnet::Config, xlnet::Model>("xlnet"),
];

/// jinaai's original jina-embeddings-v3 config.json (`model_type` xlm-roberta with
/// `position_embedding_type` rotary) as transformers' jina_embeddings_v3 config: the
/// rotary base `rotary_emb_base` under `rope_theta`.
fn jina_original(bytes: &[u8]) -> serde_json::Result<Vec<u8>> {
    let mut c: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(bytes)?;
    if let Some(base) = c.get("rotary_emb_base").cloned() {
        c.entry("rope_theta").or_insert(base);
    }
    c.insert("model_type".into(), "jina_embeddings_v3".into());
    serde_json::to_vec(&c)
}

/// The supported `model_type`s, for messages.
pub fn supported() -> &'static str {
    static NAMES: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| ARCHITECTURES.iter().map(|a| a.model_type).collect::<Vec<_>>().join(", "))
}

/// A parsed config.json: its architecture and settings.
pub struct BackboneConfig {
    architecture: &'static str,
    config: Box<dyn Config>,
    restore: Restore,
    /// The config as parsed (transformers' field names, defaults filled in), for model_info.
    summary: serde_json::Value,
}

impl BackboneConfig {
    /// Parses config.json; an unknown `model_type` is an error naming it.
    pub fn parse(path: &std::path::Path, bytes: &[u8]) -> Result<Self> {
        #[derive(Deserialize)]
        struct Tag {
            model_type: Option<String>,
            position_embedding_type: Option<String>,
        }
        let tag: Tag = serde_json::from_slice(bytes).map_err(|e| Error::invalid_file(path, e))?;
        let mut model_type = tag.model_type.unwrap_or_default();
        // jinaai's original jina-embeddings-v3 config: XLM-RoBERTa with rotary positions
        // (`rotary_emb_base`), which transformers reads as jina_embeddings_v3; its task
        // adapters are read by `crate::lora`.
        let original_jina;
        let bytes = if matches!(model_type.as_str(), "xlm-roberta" | "XLMRoberta")
            && tag.position_embedding_type.as_deref() == Some("rotary")
        {
            model_type = "jina_embeddings_v3".into();
            original_jina = jina_original(bytes).map_err(|e| Error::invalid_file(path, e))?;
            original_jina.as_slice()
        } else {
            bytes
        };
        let Some(row) = ARCHITECTURES.iter().find(|a| a.model_type == model_type) else {
            return Err(Error::Unsupported {
                what: "model_type",
                value: model_type,
                path: path.into(),
                supported: supported(),
            });
        };
        let (config, summary) = (row.parse)(bytes).map_err(|e| Error::invalid_file(path, e))?;
        Ok(BackboneConfig { architecture: row.model_type, config, restore: row.restore, summary })
    }

    /// A static embedding model (no config.json): the table's shape from the safetensors
    /// header of `dir`; `architecture` names the layout ("static_embedding", "model2vec").
    pub fn static_embedding(dir: &std::path::Path, architecture: &'static str) -> Result<Self> {
        let config = static_embedding::Config::read(dir)?;
        let summary = serde_json::to_value(&config).map_err(|e| Error::invalid_file(dir, e))?;
        let restore = restore::<static_embedding::Model>;
        Ok(BackboneConfig { architecture, config: Box::new(config), restore, summary })
    }

    /// config.json's `model_type`.
    pub fn architecture(&self) -> &'static str {
        self.architecture
    }

    pub fn summary(&self) -> serde_json::Value {
        self.summary.clone()
    }

    pub fn hidden_size(&self) -> usize {
        self.config.dims().hidden_size
    }

    pub fn max_position_embeddings(&self) -> usize {
        self.config.dims().max_positions
    }

    /// Rows of the token embedding; 0 for an image model (no tokens).
    pub fn vocab_size(&self) -> usize {
        self.config.dims().text.map_or(0, |t| t.vocab_size)
    }

    /// The token id batches are padded with when the tokenizer names none; 0 for an image
    /// model (never padded).
    pub fn pad_token_id(&self) -> u32 {
        self.config.dims().text.map_or(0, |t| t.pad_token_id)
    }

    pub fn default_pooling(&self) -> PoolingMode {
        self.config.default_pooling()
    }

    pub fn modality(&self) -> Modality {
        self.config.modality()
    }

    pub fn load(&self, vb: VarBuilder) -> Result<Box<dyn Model>> {
        self.config.load(vb)
    }

    /// The backbone [`Model::prepared`] described, its buffers in a mapped prepared file.
    pub fn restore(&self, prepared: serde_json::Value) -> Result<Box<dyn Model>> {
        (self.restore)(prepared)
    }
}

/// The first token of each sequence of `hidden` [tokens, width], as a [sequences, width]
/// tensor (what a pooler or a classification head over [CLS] reads).
pub(crate) fn first_tokens(hidden: &[f32], width: usize, batch: &Batch) -> candle_core::Result<Tensor> {
    let mut rows = Vec::with_capacity(batch.len() * width);
    for i in 0..batch.len() {
        let start = batch.bounds[i] * width;
        let row = hidden
            .get(start..start + width)
            .ok_or_else(|| candle_core::Error::Msg(format!("sequence {i} has no tokens")))?;
        rows.extend_from_slice(row);
    }
    Tensor::from_vec(rows, (batch.len(), width), &candle_core::Device::Cpu)
}
