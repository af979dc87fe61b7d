//! The text input stage: the tokenizer as sentence-transformers uses it.

use std::collections::BTreeMap;
use std::path::Path;

use tokenizers::Tokenizer;

use crate::error::{Error, Result};

/// The text input stage: the tokenizer as sentence-transformers uses it (no padding,
/// truncation at max_length), the same tokenizer untruncated (token counts and offsets of
/// whole texts), lowercasing, and the prompts with how pooling treats them.
pub(super) struct Text {
    pub(super) tokenizer: Tokenizer,
    /// Made on first use (chunks, token counts): most models never need it.
    pub(super) untruncated: std::sync::OnceLock<Tokenizer>,
    pub(super) lowercase: bool,
    pub(super) prompts: BTreeMap<String, Prompt>,
    pub(super) default_prompt: Option<String>,
    pub(super) include_prompt: bool,
    /// Whether the tokenizer passes token type ids to the model (see [`passes_type_ids`]).
    pub(super) type_ids: bool,
    /// A token left out of every input (model2vec's unknown token).
    pub(super) drop_id: Option<u32>,
}

impl Text {
    /// The tokenizer without truncation.
    pub(super) fn untruncated(&self) -> Result<&Tokenizer> {
        if let Some(t) = self.untruncated.get() {
            return Ok(t);
        }
        let mut untruncated = self.tokenizer.clone();
        untruncated.with_truncation(None).map_err(|e| Error::Tokenize(e.to_string()))?;
        Ok(self.untruncated.get_or_init(|| untruncated))
    }
}

/// An input as the backbone takes it: token ids, token type ids (empty when the tokenizer
/// passes none) and how many leading tokens pooling leaves out.
#[derive(Debug, Clone)]
pub(super) struct Encoded {
    pub(super) ids: Vec<u32>,
    pub(super) types: Vec<u32>,
    pub(super) skip: usize,
}

/// Tokenizer classes of transformers 5 whose `model_input_names` list `token_type_ids`
/// (every other class's default leaves them out).
const TYPE_ID_CLASSES: &[&str] = &[
    "BertTokenizer",
    "CanineTokenizer",
    "ConvBertTokenizer",
    "DPRContextEncoderTokenizer",
    "DPRQuestionEncoderTokenizer",
    "DebertaTokenizer",
    "DebertaV2Tokenizer",
    "ElectraTokenizer",
    "FNetTokenizer",
    "LayoutLMv2Tokenizer",
    "MarkupLMTokenizer",
    "MobileBertTokenizer",
    "SqueezeBertTokenizer",
    "TapasTokenizer",
];

/// Whether transformers' tokenizer passes `token_type_ids` to the model: when
/// tokenizer_config.json lists `model_input_names`, whether they include them; else
/// whether the tokenizer class's default does (`TYPE_ID_CLASSES`, with or without `Fast`).
/// A model directory without tokenizer_config.json or a tokenizer class keeps them
/// (the tokenizer's own type ids, zeros for a single text).
pub(super) fn passes_type_ids(path: &Path) -> Result<bool> {
    #[derive(serde::Deserialize)]
    struct TokenizerConfig {
        model_input_names: Option<Vec<String>>,
        tokenizer_class: Option<String>,
    }
    let cfg: Option<TokenizerConfig> = crate::st::read_json_opt(path)?;
    Ok(match cfg {
        Some(TokenizerConfig { model_input_names: Some(names), .. }) => {
            names.iter().any(|n| n == "token_type_ids")
        }
        Some(TokenizerConfig { tokenizer_class: Some(class), .. }) => {
            TYPE_ID_CLASSES.contains(&class.strip_suffix("Fast").unwrap_or(&class))
        }
        _ => true,
    })
}

/// A named prompt and how many of its tokens pooling leaves out when `include_prompt` is
/// false.
pub(super) struct Prompt {
    pub(super) text: String,
    pub(super) length: usize,
}

/// Tokens of `text` as sentence-transformers 6 tokenizes an input: as it is (no strip),
/// lowercased when sentence_bert_config.json says `do_lower_case`.
/// Also whether the tokenizer cut the input at its max length.
pub(super) fn encode(tokenizer: &Tokenizer, lowercase: bool, text: &str) -> Result<(Vec<u32>, bool)> {
    let (ids, _, cut) = encode_typed(tokenizer, lowercase, text)?;
    Ok((ids, cut))
}

/// As [`encode`], with the token type ids the tokenizer's template gives.
pub(super) fn encode_typed(
    tokenizer: &Tokenizer,
    lowercase: bool,
    text: &str,
) -> Result<(Vec<u32>, Vec<u32>, bool)> {
    let text = if lowercase { text.to_lowercase() } else { text.to_string() };
    let enc = tokenizer.encode_fast(text, true).map_err(|e| Error::Tokenize(e.to_string()))?;
    Ok((enc.get_ids().to_vec(), enc.get_type_ids().to_vec(), !enc.get_overflowing().is_empty()))
}

/// sentence-transformers' prompt length: the tokens of the prompt alone, special tokens
/// included, less a trailing special token (the [SEP] / </s> that the text follows).
pub(super) fn prompt_length(tokenizer: &Tokenizer, lowercase: bool, prompt: &str) -> Result<usize> {
    let (ids, _) = encode(tokenizer, lowercase, prompt)?;
    let specials = tokenizer.get_added_tokens_decoder();
    let trailing_special = ids.last().is_some_and(|id| specials.get(id).is_some_and(|t| t.special));
    Ok(ids.len() - usize::from(trailing_special))
}

/// `model_max_length` of tokenizer_config.json; transformers stores a huge float
/// (1e30) when the tokenizer sets no limit.
pub(crate) fn tokenizer_max_length(path: &Path) -> Result<Option<usize>> {
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
pub(super) fn check_token_ids(tokenizer: &Tokenizer, vocab_size: usize, path: &Path) -> Result<()> {
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

pub(crate) fn load_tokenizer(path: &Path) -> Result<Tokenizer> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    // tokenizers panics (`expect`) on some malformed JSON, a truncated file among them:
    // the syntax is checked first.
    serde_json::from_slice::<serde::de::IgnoredAny>(&bytes).map_err(|e| Error::invalid_file(path, e))?;
    Tokenizer::from_bytes(&bytes).map_err(|e| Error::invalid_file(path, e))
}
