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
    /// Whether the tokenizer passes token type ids to the model (see
    /// [`crate::tokenizer::passes_type_ids`]).
    pub(super) type_ids: bool,
    /// Whether the tokenizer passes an attention mask (see
    /// [`crate::tokenizer::passes_attention_mask`]; [`crate::models::Batch::pads_attended`]).
    pub(super) attention_mask: bool,
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
