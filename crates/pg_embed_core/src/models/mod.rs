//! Backbones: one architecture per file, each with a serde `Config` (implementing
//! [`Config`]), `load(vb, &cfg)` and a [`Model`] whose forward pass takes a packed batch
//! and returns the hidden states of its tokens. Architecture dispatch is the one table
//! [`ARCHITECTURES`]: adding an architecture is its file and one row here.

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
        Batch { ids, type_ids, bounds, images: &[], keys: &[] }
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

/// What the pipeline needs to know of an architecture's config.json.
pub trait Config: Send + Sync {
    fn hidden_size(&self) -> usize;
    /// The longest input the position embeddings allow, in tokens.
    fn max_position_embeddings(&self) -> usize;
    /// Rows of the token embedding (the backbone checks them against the checkpoint).
    fn vocab_size(&self) -> usize;
    /// The token id batches are padded with when the tokenizer names none.
    fn pad_token_id(&self) -> u32;
    /// Pooling when neither sentence-transformers' files nor the options name one.
    fn default_pooling(&self) -> PoolingMode {
        PoolingMode::Mean
    }
    /// What the model takes: text (a tokenizer), images (an image processor) or both.
    fn modality(&self) -> Modality {
        Modality::Text
    }
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn Model>>;
    /// The backbone [`Model::prepared`] described, its buffers in a mapped prepared file.
    fn restore(&self, prepared: serde_json::Value) -> Result<Box<dyn Model>>;
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

/// A backbone of type `M` from its description (see [`Config::restore`]).
pub(crate) fn restore<M: Model + DeserializeOwned + 'static>(prepared: serde_json::Value) -> Result<Box<dyn Model>> {
    let model: M = serde_json::from_value(prepared)
        .map_err(|e| Error::invalid_file("prepared weights", format!("cannot restore the backbone: {e}")))?;
    Ok(Box::new(model))
}

/// One row of the architecture table: config.json's `model_type` and how to parse it.
pub struct Architecture {
    pub model_type: &'static str,
    parse: fn(&[u8]) -> serde_json::Result<(Box<dyn Config>, serde_json::Value)>,
}

fn parse_as<C: Config + DeserializeOwned + serde::Serialize + 'static>(
    bytes: &[u8],
) -> serde_json::Result<(Box<dyn Config>, serde_json::Value)> {
    let config: C = serde_json::from_slice(bytes)?;
    let summary = serde_json::to_value(&config)?;
    Ok((Box::new(config), summary))
}

/// Every supported architecture, by `model_type`.
pub const ARCHITECTURES: &[Architecture] = &[
    Architecture { model_type: "bert", parse: parse_as::<bert::Config> },
    Architecture { model_type: "camembert", parse: parse_as::<roberta::Config> },
    Architecture { model_type: "clip", parse: parse_as::<clip_model::Config> },
    Architecture { model_type: "clip_text_model", parse: parse_as::<clip::Config> },
    Architecture { model_type: "clip_vision_model", parse: parse_as::<clip_vision::Config> },
    Architecture { model_type: "deberta-v2", parse: parse_as::<deberta_v2::Config> },
    Architecture { model_type: "dinov2", parse: parse_as::<dinov2::Config> },
    Architecture { model_type: "dinov3_vit", parse: parse_as::<dinov3::Config> },
    Architecture { model_type: "distilbert", parse: parse_as::<distilbert::Config> },
    Architecture { model_type: "electra", parse: parse_as::<electra::Config> },
    Architecture { model_type: "eurobert", parse: parse_as::<eurobert::Config> },
    Architecture { model_type: "gemma2", parse: parse_as::<gemma2::Config> },
    Architecture { model_type: "gemma3_text", parse: parse_as::<gemma3::Config> },
    Architecture { model_type: "gpt2", parse: parse_as::<gpt2::Config> },
    Architecture { model_type: "gte", parse: parse_as::<gte::Config> },
    Architecture { model_type: "jina_embeddings_v3", parse: parse_as::<jina_embeddings_v3::Config> },
    Architecture { model_type: "llama", parse: parse_as::<llama::Config> },
    Architecture { model_type: "mistral", parse: parse_as::<mistral::Config> },
    Architecture { model_type: "modernbert", parse: parse_as::<modernbert::Config> },
    Architecture { model_type: "mpnet", parse: parse_as::<mpnet::Config> },
    // Alibaba-NLP's GTE checkpoints as published (transformers maps them to "gte").
    Architecture { model_type: "new", parse: parse_as::<gte::Config> },
    Architecture { model_type: "nomic_bert", parse: parse_as::<nomic_bert::Config> },
    Architecture { model_type: "qwen2", parse: parse_as::<qwen2::Config> },
    Architecture { model_type: "qwen3", parse: parse_as::<qwen3::Config> },
    Architecture { model_type: "roberta", parse: parse_as::<roberta::Config> },
    Architecture { model_type: "siglip", parse: parse_as::<siglip::Config<siglip_vision::Config>> },
    Architecture { model_type: "siglip2", parse: parse_as::<siglip::Config<siglip2_vision::Config>> },
    Architecture { model_type: "siglip2_text_model", parse: parse_as::<siglip_text::Config> },
    Architecture { model_type: "siglip2_vision_model", parse: parse_as::<siglip2_vision::Config> },
    Architecture { model_type: "siglip_text_model", parse: parse_as::<siglip_text::Config> },
    Architecture { model_type: "siglip_vision_model", parse: parse_as::<siglip_vision::Config> },
    Architecture { model_type: "t5", parse: parse_as::<t5::Config> },
    Architecture { model_type: "vit", parse: parse_as::<vit::Config> },
    Architecture { model_type: "xlm-roberta", parse: parse_as::<roberta::Config> },
    Architecture { model_type: "xlnet", parse: parse_as::<xlnet::Config> },
];

/// The supported `model_type`s, for messages.
pub fn supported() -> &'static str {
    static NAMES: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| ARCHITECTURES.iter().map(|a| a.model_type).collect::<Vec<_>>().join(", "))
}

/// A parsed config.json: its architecture and settings.
pub struct BackboneConfig {
    architecture: &'static str,
    config: Box<dyn Config>,
    /// The config as parsed (transformers' field names, defaults filled in), for model_info.
    summary: serde_json::Value,
}

impl BackboneConfig {
    /// Parses config.json; an unknown `model_type` is an error naming it.
    pub fn parse(path: &std::path::Path, bytes: &[u8]) -> Result<Self> {
        #[derive(Deserialize)]
        struct Tag {
            model_type: Option<String>,
        }
        let tag: Tag = serde_json::from_slice(bytes).map_err(|e| Error::invalid_file(path, e))?;
        let model_type = tag.model_type.unwrap_or_default();
        let Some(row) = ARCHITECTURES.iter().find(|a| a.model_type == model_type) else {
            return Err(Error::Unsupported {
                what: "model_type",
                value: model_type,
                path: path.into(),
                supported: supported(),
            });
        };
        let (config, summary) = (row.parse)(bytes).map_err(|e| Error::invalid_file(path, e))?;
        Ok(BackboneConfig { architecture: row.model_type, config, summary })
    }

    /// A static embedding model (no config.json): the table's shape from the safetensors
    /// header of `dir`; `architecture` names the layout ("static_embedding", "model2vec").
    pub fn static_embedding(dir: &std::path::Path, architecture: &'static str) -> Result<Self> {
        let config = static_embedding::Config::read(dir)?;
        let summary = serde_json::to_value(&config).map_err(|e| Error::invalid_file(dir, e))?;
        Ok(BackboneConfig { architecture, config: Box::new(config), summary })
    }

    /// config.json's `model_type`.
    pub fn architecture(&self) -> &'static str {
        self.architecture
    }

    pub fn summary(&self) -> serde_json::Value {
        self.summary.clone()
    }

    pub fn hidden_size(&self) -> usize {
        self.config.hidden_size()
    }

    pub fn max_position_embeddings(&self) -> usize {
        self.config.max_position_embeddings()
    }

    pub fn vocab_size(&self) -> usize {
        self.config.vocab_size()
    }

    pub fn pad_token_id(&self) -> u32 {
        self.config.pad_token_id()
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

    pub fn restore(&self, prepared: serde_json::Value) -> Result<Box<dyn Model>> {
        self.config.restore(prepared)
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
