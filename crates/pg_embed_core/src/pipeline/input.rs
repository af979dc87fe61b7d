//! The input stages of a pipeline: the text input (tokenizer, max_length, prompts), the
//! image processor, and an inference-free model's query route, loaded from the model's
//! folder and the options.

use std::collections::BTreeMap;
use std::path::Path;

use tokenizers::{PostProcessor, Tokenizer, TruncationParams};

use super::known_prompts;
use super::text::{check_token_ids, prompt_length, Prompt, Text};
use crate::error::{Error, Result};
use crate::models::{BackboneConfig, Modality};
use crate::options::Options;
use crate::processor::ImageProcessor;
use crate::sparse::QueryRoute;
use crate::st::{Encoder, Layout};
use crate::tokenizer::{load_tokenizer, passes_attention_mask, passes_type_ids, tokenizer_max_length};

/// The text input (its max_length and the prompt texts as configured, for model_info).
pub(super) type TextInput = (Text, usize, BTreeMap<String, String>);

/// The input stages of a model: the text input and the image processor (as `modality`
/// says the model takes them), and an inference-free model's query route.
pub(super) struct Inputs {
    pub(super) text: Option<TextInput>,
    pub(super) images: Option<ImageProcessor>,
    pub(super) query: Option<QueryRoute>,
}

impl Inputs {
    /// Loads the input stages of the model in `bdir`.
    pub(super) fn load(bdir: &Path, config: &BackboneConfig, layout: &Layout, options: &Options) -> Result<Self> {
        let modality = config.modality();
        let text = if modality.takes_text() { Some(load_text(bdir, config, layout, options)?) } else { None };
        let query = match layout.sparse.as_ref().and_then(|s| s.query.as_ref()) {
            Some((name, folder)) => Some(QueryRoute::load(name, folder, config.vocab_size())?),
            None => None,
        };
        let images = if modality.takes_images() { Some(load_image_processor(bdir)?) } else { None };
        Ok(Inputs { text, images, query })
    }
}

/// The options that apply to text models only, refused for a model that takes images.
pub(super) fn check_input_options(options: &Options, modality: Modality) -> Result<()> {
    if !modality.takes_text() {
        let text_only = [
            ("max_length", options.max_length.is_some()),
            ("prompt", options.prompt.is_some()),
            ("prompts", options.prompts.is_some()),
            ("include_prompt", options.include_prompt.is_some()),
            ("long_input", options.long_input.is_some()),
        ];
        if let Some((key, _)) = text_only.iter().find(|(_, set)| *set) {
            return Err(Error::InvalidOptions(format!(
                "option \"{key}\" applies to text models; this one takes images"
            )));
        }
    }
    Ok(())
}

/// The text input stage of a model directory: the tokenizer as sentence-transformers uses
/// it, max_length, and the prompts (with the prompt texts as configured, for model_info).
fn load_text(
    bdir: &Path,
    config: &BackboneConfig,
    layout: &Layout,
    options: &Options,
) -> Result<TextInput> {
    let (mut tokenizer, largest_id) = read_tokenizer(bdir)?;
    let (pad_id, pad_file) = match tokenizer.get_padding() {
        Some(p) => (p.pad_id, "tokenizer.json"),
        None => (config.pad_token_id(), "config.json"),
    };
    let is_static = matches!(layout.encoder, Encoder::Static | Encoder::Model2Vec);
    let max_length = max_length(options, config, layout, &tokenizer, bdir)?;
    if is_static {
        // Static models tokenize without special tokens.
        tokenizer.with_post_processor(None::<tokenizers::PostProcessorWrapper>);
    }
    let specials = tokenizer.get_post_processor().map(|p| p.added_tokens(false)).unwrap_or(0);
    if max_length.is_some_and(|m| m <= specials) {
        return Err(Error::InvalidOptions(format!(
            "max_length {} leaves no room for text after {specials} special tokens",
            max_length.unwrap_or_default()
        )));
    }
    // A model2vec folder of the versions that leave the unknown token out before they keep
    // max_length tokens: the tokenizer does not truncate, the ids are cut after the drop.
    let keep_after_drop = match &layout.model2vec {
        Some(m) if m.unknown_dropped_first => max_length,
        _ => None,
    };
    // sentence-transformers ignores the padding and truncation stored in tokenizer.json:
    // it pads per batch and truncates at max_seq_length.
    tokenizer.with_padding(None);
    tokenizer
        .with_truncation(
            max_length
                .filter(|_| keep_after_drop.is_none())
                .map(|max_length| TruncationParams { max_length, ..Default::default() }),
        )
        .map_err(|e| Error::invalid_file(bdir.join("tokenizer.json"), e))?;
    // model2vec leaves the unknown token out of the mean.
    let drop_id = if layout.encoder == Encoder::Model2Vec { unknown_token_id(&tokenizer) } else { None };
    // model2vec cuts the text before it tokenizes: max_length times the median token length.
    let char_cut = match (layout.encoder, max_length) {
        (Encoder::Model2Vec, Some(m)) => Some(m.saturating_mul(super::text::median_token_length(&tokenizer))),
        _ => None,
    };
    let max_length = max_length.unwrap_or(0);

    // A pad id out of the vocabulary is a broken model (transformers would fail on
    // every padded batch), though pg_embed's packed batches never pad.
    if pad_id as usize >= config.vocab_size() {
        return Err(Error::invalid_file(
            bdir.join(pad_file),
            format!("pad_token_id {pad_id} is not below vocab_size {}", config.vocab_size()),
        ));
    }
    check_token_ids(&tokenizer, config.vocab_size(), largest_id, &bdir.join("tokenizer.json"))?;
    let lowercase = layout.transformer.do_lower_case;
    let (prompts, prompt_texts, default_prompt) = load_prompts(&tokenizer, lowercase, layout, options)?;
    let include_prompt =
        options.include_prompt.or(layout.pooling.as_ref().map(|p| p.include_prompt)).unwrap_or(true);

    let type_ids = passes_type_ids(&bdir.join("tokenizer_config.json"))?;
    let attention_mask = passes_attention_mask(&bdir.join("tokenizer_config.json"))?;
    let untruncated = std::sync::OnceLock::new();
    let text = Text {
        tokenizer,
        untruncated,
        lowercase,
        prompts,
        default_prompt,
        include_prompt,
        type_ids,
        attention_mask,
        drop_id,
        char_cut,
        keep_after_drop,
    };
    Ok((text, max_length, prompt_texts))
}

/// The tokenizer of the model in `bdir` and the largest id its file names (see
/// `check_token_ids`).
fn read_tokenizer(bdir: &Path) -> Result<(Tokenizer, Option<u32>)> {
    // A SentencePiece model alone: SigLIP's SiglipTokenizer is rebuilt from it
    // (`sentencepiece`); other slow tokenizers are refused by name.
    Ok(if !bdir.join("tokenizer.json").exists() && bdir.join("spiece.model").exists() {
        let tokenizer = crate::sentencepiece::siglip_tokenizer(bdir)?.ok_or_else(|| Error::Unsupported {
            what: "tokenizer",
            value: "spiece.model without tokenizer.json".into(),
            path: bdir.join("spiece.model"),
            supported: "SiglipTokenizer, or a tokenizer.json (tokenizers' format, as fast tokenizers save it)",
        })?;
        (tokenizer, None)
    } else {
        load_tokenizer(&bdir.join("tokenizer.json"))?
    })
}

/// Where the tokenizer cuts an input: `options.max_length` (at most the positions), else
/// as sentence-transformers, model2vec or a static model does; None: it does not cut.
fn max_length(
    options: &Options,
    config: &BackboneConfig,
    layout: &Layout,
    tokenizer: &Tokenizer,
    bdir: &Path,
) -> Result<Option<usize>> {
    let is_static = matches!(layout.encoder, Encoder::Static | Encoder::Model2Vec);
    let max_positions = config.max_position_embeddings();
    Ok(match options.max_length {
        Some(n) if n > max_positions => {
            return Err(Error::InvalidOptions(format!(
                "max_length {n} exceeds the model's max_position_embeddings {max_positions}"
            )))
        }
        Some(n) => Some(n),
        // A static model: model2vec truncates at its config's max_length; sentence-transformers'
        // StaticEmbedding keeps the tokenizer's own truncation, if any.
        None if is_static => match &layout.model2vec {
            Some(m) => m.max_length,
            None => tokenizer.get_truncation().map(|t| t.max_length),
        },
        // sentence-transformers: sentence_bert_config.json's max_seq_length, else the
        // tokenizer's model_max_length (where 6.x saves it), capped by the positions.
        None => Some(
            layout
                .transformer
                .max_seq_length
                .or(tokenizer_max_length(&bdir.join("tokenizer_config.json"))?)
                .unwrap_or(max_positions)
                .min(max_positions),
        ),
    })
}

/// The prompts with their token lengths (the model's own, then the options', which win;
/// "" means no prompt), the prompt texts, and the default prompt's name (checked: a
/// prompt, or a route of an asymmetric model).
#[allow(clippy::type_complexity)]
fn load_prompts(
    tokenizer: &Tokenizer,
    lowercase: bool,
    layout: &Layout,
    options: &Options,
) -> Result<(BTreeMap<String, Prompt>, BTreeMap<String, String>, Option<String>)> {
    let mut prompt_texts = layout.prompts.prompts.clone();
    prompt_texts.extend(options.prompts.clone().unwrap_or_default());
    let mut prompts = BTreeMap::new();
    for (name, text) in &prompt_texts {
        let length = prompt_length(tokenizer, lowercase, text)?;
        prompts.insert(name.clone(), Prompt { text: text.clone(), length });
    }
    let default_prompt = match (&options.prompt, &layout.prompts.default_prompt_name) {
        (Some(name), _) => Some(name.clone()),
        (None, Some(name)) => Some(name.clone()),
        (None, None) => None,
    };
    // options.prompt may name a route of an asymmetric model instead (its default route).
    let is_route = |name: &str| layout.router.as_ref().is_some_and(|r| r.routes.iter().any(|(n, _)| n == name));
    if let Some(name) = &default_prompt {
        if !name.is_empty() && !prompts.contains_key(name) && !is_route(name) {
            return Err(Error::UnknownPrompt { name: name.clone(), known: known_prompts(&prompt_texts) });
        }
    }
    Ok((prompts, prompt_texts, default_prompt))
}

/// The tokenizer model's unknown token, as model2vec finds it: `unk_token` (WordPiece, BPE,
/// WordLevel) or `unk_id` (Unigram).
fn unknown_token_id(tokenizer: &tokenizers::Tokenizer) -> Option<u32> {
    let model = serde_json::to_value(tokenizer.get_model()).ok()?;
    match (model.get("unk_token").and_then(|t| t.as_str()), model.get("unk_id").and_then(|i| i.as_u64())) {
        (Some(token), _) => tokenizer.token_to_id(token),
        (None, Some(id)) => u32::try_from(id).ok(),
        (None, None) => None,
    }
}

/// The image processor of a model directory: preprocessor_config.json as transformers saves
/// it, else processor_config.json (where sentence-transformers 6 saves a CLIP model's
/// processor, the image processor's settings under `image_processor`).
fn load_image_processor(bdir: &Path) -> Result<ImageProcessor> {
    let preprocessor = bdir.join("preprocessor_config.json");
    let processor = bdir.join("processor_config.json");
    match (preprocessor.exists(), processor.exists()) {
        (false, true) => ImageProcessor::load(&processor),
        _ => ImageProcessor::load(&preprocessor),
    }
}
