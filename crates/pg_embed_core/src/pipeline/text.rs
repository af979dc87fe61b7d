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
    /// Characters kept of an input before it is tokenized (model2vec: max_length times the
    /// median token length).
    pub(super) char_cut: Option<usize>,
    /// Tokens kept after `drop_id` is left out, when the tokenizer does not truncate
    /// (model2vec folders of versions that drop the unknown token first).
    pub(super) keep_after_drop: Option<usize>,
}

/// The first `chars` characters (Unicode scalar values, as Python slices a str) of `text`.
pub(super) fn first_chars(text: &str, chars: usize) -> &str {
    text.char_indices().nth(chars).map_or(text, |(i, _)| &text[..i])
}

/// model2vec's `median_token_length`: the median length in characters of the tokenizer's
/// tokens, added tokens included, the mean of the two middle ones rounded down for an even
/// count (`int(np.median(...))`).
pub(super) fn median_token_length(tokenizer: &Tokenizer) -> usize {
    let mut lengths: Vec<usize> = tokenizer.get_vocab(true).keys().map(|t| t.chars().count()).collect();
    lengths.sort_unstable();
    match lengths.len() {
        0 => 0,
        n if n % 2 == 1 => lengths[n / 2],
        n => (lengths[n / 2 - 1] + lengths[n / 2]) / 2,
    }
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
    let enc = tokenizer.encode_fast(text.as_str(), true).map_err(|e| Error::Tokenize(e.to_string()))?;
    let cut = was_cut(tokenizer, &text, &enc)?;
    Ok((enc.get_ids().to_vec(), enc.get_type_ids().to_vec(), cut))
}

/// Whether the tokenizer cut `text` (one sequence) at its max length to give `enc`.
///
/// tokenizers stops tokenizing once it has max_length tokens and drops the pre-tokens after
/// them, so when the template adds no tokens and the limit falls between two pre-tokens,
/// the encoding shows no overflow although the text went on. Then (exactly max_length
/// tokens, no overflow) the text was cut when what follows the last token (precedes the
/// first, for left truncation) gives any token.
pub(super) fn was_cut(tokenizer: &Tokenizer, text: &str, enc: &tokenizers::Encoding) -> Result<bool> {
    use tokenizers::TruncationDirection;
    if !enc.get_overflowing().is_empty() {
        return Ok(true);
    }
    let Some(params) = tokenizer.get_truncation() else { return Ok(false) };
    if enc.len() < params.max_length {
        return Ok(false);
    }
    let tokenize_err = |e: tokenizers::Error| Error::Tokenize(e.to_string());
    let with_offsets = tokenizer.encode(text, false).map_err(tokenize_err)?;
    let offsets = with_offsets.get_offsets();
    // Byte offsets. tokenizers gives a byte-level token inside a character the whole
    // character's span; rounded outward all the same, so no slice falls inside one.
    let rest = match params.direction {
        TruncationDirection::Right => {
            &text[text.floor_char_boundary(offsets.iter().map(|o| o.1).max().unwrap_or(0).min(text.len()))..]
        }
        TruncationDirection::Left => {
            &text[..text.ceil_char_boundary(offsets.iter().map(|o| o.0).min().unwrap_or(text.len()).min(text.len()))]
        }
    };
    // In pieces (a word cut in two still gives a token), from the side next to the kept
    // tokens, until one gives a token.
    let mut rest = rest;
    while !rest.is_empty() {
        let piece = match params.direction {
            TruncationDirection::Right => &rest[..rest.ceil_char_boundary(rest.len().min(4096))],
            TruncationDirection::Left => &rest[rest.floor_char_boundary(rest.len().saturating_sub(4096))..],
        };
        if !tokenizer.encode_fast(piece, false).map_err(tokenize_err)?.is_empty() {
            return Ok(true);
        }
        rest = match params.direction {
            TruncationDirection::Right => &rest[piece.len()..],
            TruncationDirection::Left => &rest[..rest.len() - piece.len()],
        };
    }
    Ok(false)
}

/// As [`encode_typed`] for a long text of a tokenizer whose tokens never cross whitespace
/// (a BERT, Whitespace or WhitespaceSplit pre-tokenizer, a normalizer that maps each
/// character on its own) and that adds no special tokens: the text tokenized in pieces of
/// about `piece_bytes` cut just before a whitespace character, the ids joined and truncated
/// as the tokenizer truncates. The same ids as the whole text gives, with the tokenizer's
/// working memory bounded by a piece (whole, it takes tens of bytes per byte of text). None
/// when the tokenizer is not of that kind.
pub(super) fn encode_in_pieces(
    tokenizer: &Tokenizer,
    lowercase: bool,
    text: &str,
    piece_bytes: usize,
) -> Result<Option<(Vec<u32>, Vec<u32>, bool)>> {
    use tokenizers::{NormalizerWrapper as N, PostProcessor, PreTokenizerWrapper as P};
    let splits_on_whitespace =
        matches!(tokenizer.get_pre_tokenizer(), Some(P::BertPreTokenizer(_) | P::Whitespace(_) | P::WhitespaceSplit(_)));
    let char_local = matches!(
        tokenizer.get_normalizer(),
        None | Some(N::BertNormalizer(_) | N::Lowercase(_) | N::StripAccents(_) | N::NFC(_) | N::NFD(_) | N::NFKC(_) | N::NFKD(_))
    );
    let no_specials = tokenizer.get_post_processor().is_none_or(|p| p.added_tokens(false) == 0);
    if !(splits_on_whitespace && char_local && no_specials) || tokenizer.get_padding().is_some() {
        return Ok(None);
    }
    let limit = tokenizer.get_truncation().map(|t| t.max_length);
    let mut ids = Vec::new();
    let mut cut = false;
    let mut rest = text;
    while !rest.is_empty() && limit.is_none_or(|m| ids.len() <= m) {
        let mut end = piece_bytes.min(rest.len());
        while !rest.is_char_boundary(end) {
            end += 1;
        }
        // Just before the next whitespace character (the whole rest when there is none).
        if end < rest.len() {
            end = rest[end..].find(char::is_whitespace).map_or(rest.len(), |i| end + i);
        }
        let piece = if lowercase { rest[..end].to_lowercase() } else { rest[..end].to_string() };
        let enc = tokenizer.encode_fast(piece.as_str(), false).map_err(|e| Error::Tokenize(e.to_string()))?;
        // The tokenizer truncates each piece too: a piece cut at the limit is a cut text.
        cut |= was_cut(tokenizer, &piece, &enc)?;
        ids.extend_from_slice(enc.get_ids());
        rest = &rest[end..];
    }
    let cut = cut || limit.is_some_and(|m| ids.len() > m);
    if let Some(m) = limit {
        ids.truncate(m);
    }
    let types = vec![0; ids.len()];
    Ok(Some((ids, types, cut)))
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
/// post-processor's single and pair templates. `largest` is the largest id the model's
/// vocabulary has in its file, when known (`largest_model_id`): below `vocab_size`, the
/// model's vocabulary is not listed (a copy of every token: a third of a first call).
pub(super) fn check_token_ids(tokenizer: &Tokenizer, vocab_size: usize, largest: Option<u32>, path: &Path) -> Result<()> {
    let mut tokens: Vec<(String, u32)> = match largest {
        Some(id) if (id as usize) < vocab_size => {
            tokenizer.get_added_vocabulary().get_vocab().iter().map(|(t, id)| (t.clone(), *id)).collect()
        }
        _ => tokenizer.get_vocab(true).into_iter().collect(),
    };
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

/// The largest id of a model's vocabulary (`model`: the JSON of tokenizer.json's "model"),
/// read without building anything: the largest value of its `vocab` object (WordPiece,
/// BPE, WordLevel), or the last index of its `vocab` list (Unigram). None when it has no
/// such vocabulary. (A key given twice counts with both ids: the answer may be larger than
/// the model's, never smaller.)
pub(crate) fn largest_model_id(model: &str) -> Option<u32> {
    use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
    struct Largest(Option<u32>);
    impl<'de> serde::Deserialize<'de> for Largest {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
            struct Ids;
            impl<'de> Visitor<'de> for Ids {
                type Value = Largest;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a vocabulary: an object of ids or a list")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Largest, A::Error> {
                    let mut largest = None;
                    while let Some((IgnoredAny, id)) = map.next_entry::<IgnoredAny, u32>()? {
                        largest = largest.max(Some(id));
                    }
                    Ok(Largest(largest))
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Largest, A::Error> {
                    let mut count = 0u32;
                    while seq.next_element::<IgnoredAny>()?.is_some() {
                        count += 1;
                    }
                    Ok(Largest(count.checked_sub(1)))
                }
            }
            d.deserialize_any(Ids)
        }
    }
    #[derive(serde::Deserialize)]
    struct Model {
        vocab: Option<Largest>,
    }
    serde_json::from_str::<Model>(model).ok()?.vocab?.0
}

/// The top-level parts of a tokenizer.json, each as its JSON (None: not a JSON object).
pub(crate) type Parts<'a> = BTreeMap<String, &'a serde_json::value::RawValue>;

pub(crate) fn tokenizer_parts(bytes: &[u8]) -> Option<Parts<'_>> {
    serde_json::from_slice(bytes).ok()
}

/// The tokenizer of a tokenizer.json, and the largest id of its model's vocabulary when
/// the file gives it (`largest_model_id`).
pub(crate) fn load_tokenizer(path: &Path) -> Result<(Tokenizer, Option<u32>)> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    // tokenizers panics (`expect`) on some malformed JSON, a truncated file among them:
    // the syntax is checked first.
    serde_json::from_slice::<serde::de::IgnoredAny>(&bytes).map_err(|e| Error::invalid_file(path, e))?;
    let parts = tokenizer_parts(&bytes);
    let tokenizer = match parts.as_ref().and_then(read_tokenizer) {
        Some(read) => read.map_err(|e| Error::invalid_file(path, e))?,
        None => Tokenizer::from_bytes(&bytes).map_err(|e| Error::invalid_file(path, e))?,
    };
    let largest = parts.as_ref().and_then(|p| p.get("model")).and_then(|model| largest_model_id(model.get()));
    Ok((tokenizer, largest))
}

/// A WordPiece model as tokenizers' reader reads it (the same four fields, all required;
/// other keys passed over), with the vocabulary's table sized from the JSON's length up
/// front: grown entry by entry, its rehashing was a fifth of reading MiniLM's tokenizer.
fn read_word_piece(raw: &str) -> serde_json::Result<tokenizers::models::wordpiece::WordPiece> {
    use serde::de::{DeserializeSeed, Error as _, IgnoredAny, MapAccess, Visitor};
    struct Vocab(usize);
    impl<'de> DeserializeSeed<'de> for Vocab {
        type Value = ahash::AHashMap<String, u32>;
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
            struct Entries(usize);
            impl<'de> Visitor<'de> for Entries {
                type Value = ahash::AHashMap<String, u32>;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a map of tokens to ids")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Self::Value, A::Error> {
                    let mut vocab = ahash::AHashMap::with_capacity(self.0);
                    while let Some((token, id)) = map.next_entry::<String, u32>()? {
                        vocab.insert(token, id);
                    }
                    Ok(vocab)
                }
            }
            d.deserialize_map(Entries(self.0))
        }
    }
    struct Fields(usize);
    impl<'de> Visitor<'de> for Fields {
        type Value = tokenizers::models::wordpiece::WordPiece;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("struct WordPiece")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Self::Value, A::Error> {
            let (mut unk, mut prefix, mut max_chars, mut vocab) = (None, None, None, None);
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                match key.as_ref() {
                    "unk_token" => unk = Some(map.next_value::<String>()?),
                    "continuing_subword_prefix" => prefix = Some(map.next_value::<String>()?),
                    "max_input_chars_per_word" => max_chars = Some(map.next_value::<usize>()?),
                    "vocab" => vocab = Some(map.next_value_seed(Vocab(self.0))?),
                    "type" => {
                        let kind = map.next_value::<std::borrow::Cow<'de, str>>()?;
                        if kind != "WordPiece" {
                            return Err(A::Error::invalid_value(serde::de::Unexpected::Str(&kind), &"WordPiece"));
                        }
                    }
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            let (Some(unk), Some(prefix), Some(max_chars), Some(vocab)) = (unk, prefix, max_chars, vocab) else {
                return Err(A::Error::custom("a WordPiece model needs unk_token, continuing_subword_prefix, max_input_chars_per_word and vocab"));
            };
            tokenizers::models::wordpiece::WordPiece::builder()
                .vocab(vocab)
                .unk_token(unk)
                .continuing_subword_prefix(prefix)
                .max_input_chars_per_word(max_chars)
                .build()
                .map_err(A::Error::custom)
        }
    }
    // About 20 bytes of JSON per entry in the vocabularies seen (MiniLM: 23).
    let mut de = serde_json::Deserializer::from_str(raw);
    let model = serde::Deserializer::deserialize_map(&mut de, Fields(raw.len() / 20))?;
    de.end()?;
    Ok(model)
}

/// A tokenizer.json read as tokenizers' own reader reads it (`Tokenizer::from_bytes`: each
/// part into the builder, the model, then the added tokens added to the built tokenizer),
/// except that the model is read straight as the type its `"type"` names. The library
/// reads it through two generic representations first (an untagged enum, then a JSON
/// value), which was two thirds of a backend's first call (MiniLM's 30,522-token
/// vocabulary: 13 ms of 19). None for what only the library reads (a model without a
/// `"type"`, from the oldest tokenizers): the caller falls back to it.
pub(crate) fn read_tokenizer(parts: &Parts) -> Option<std::result::Result<Tokenizer, String>> {
    use tokenizers::models::{bpe::BPE, unigram::Unigram, wordlevel::WordLevel};
    use tokenizers::{AddedToken, ModelWrapper, TokenizerBuilder};

    #[derive(serde::Deserialize)]
    struct Kind<'a> {
        #[serde(rename = "type", borrow)]
        kind: Option<std::borrow::Cow<'a, str>>,
    }
    let raw = parts.get("model")?.get();
    let model = |kind: &str| -> serde_json::Result<ModelWrapper> {
        Ok(match kind {
            "WordPiece" => read_word_piece(raw)?.into(),
            "BPE" => serde_json::from_str::<BPE>(raw)?.into(),
            "Unigram" => serde_json::from_str::<Unigram>(raw)?.into(),
            _ => serde_json::from_str::<WordLevel>(raw)?.into(),
        })
    };
    let model = match serde_json::from_str::<Kind>(raw).ok()?.kind?.as_ref() {
        kind @ ("WordPiece" | "BPE" | "Unigram" | "WordLevel") => model(kind),
        _ => return None,
    };
    let read = || -> std::result::Result<Tokenizer, Box<dyn std::error::Error + Send + Sync>> {
        fn part<T: serde::de::DeserializeOwned>(parts: &Parts, key: &str) -> serde_json::Result<Option<T>> {
            parts.get(key).map_or(Ok(None), |raw| serde_json::from_str(raw.get()))
        }
        if let Some(version) = part::<String>(&parts, "version")? {
            if version != "1.0" {
                return Err(format!("Unknown tokenizer version '{version}'").into());
            }
        }
        let builder: TokenizerBuilder<
            ModelWrapper,
            tokenizers::NormalizerWrapper,
            tokenizers::PreTokenizerWrapper,
            tokenizers::PostProcessorWrapper,
            tokenizers::DecoderWrapper,
        > = TokenizerBuilder::new();
        let mut tokenizer: Tokenizer = builder
            .with_model(model?)
            .with_normalizer(part(&parts, "normalizer")?.flatten())
            .with_pre_tokenizer(part(&parts, "pre_tokenizer")?.flatten())
            .with_post_processor(part(&parts, "post_processor")?.flatten())
            .with_decoder(part(&parts, "decoder")?.flatten())
            .with_truncation(part(&parts, "truncation")?.flatten())
            .with_padding(part(&parts, "padding")?.flatten())
            .build()?
            .into();
        let added: Vec<AddedToken> = part(&parts, "added_tokens")?.unwrap_or_default();
        tokenizer.add_tokens(added)?;
        Ok(tokenizer)
    };
    Some(read().map_err(|e| e.to_string()))
}
