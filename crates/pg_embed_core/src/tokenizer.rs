//! A model folder's tokenizer files: tokenizer.json read into a tokenizer (with the largest
//! id of its model's vocabulary), and what tokenizer_config.json says of token type ids and
//! the maximum length.

use std::collections::BTreeMap;
use std::path::Path;

use tokenizers::Tokenizer;

use crate::error::{Error, Result};
use crate::files::read_json_opt;

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
pub(crate) fn passes_type_ids(path: &Path) -> Result<bool> {
    #[derive(serde::Deserialize)]
    struct TokenizerConfig {
        model_input_names: Option<Vec<String>>,
        tokenizer_class: Option<String>,
    }
    let cfg: Option<TokenizerConfig> = read_json_opt(path)?;
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

/// Whether transformers' tokenizer passes an attention mask to the model: when
/// tokenizer_config.json lists `model_input_names`, whether they include it; else yes (every
/// tokenizer class's default includes it).
pub(crate) fn passes_attention_mask(path: &Path) -> Result<bool> {
    #[derive(serde::Deserialize)]
    struct TokenizerConfig {
        model_input_names: Option<Vec<String>>,
    }
    let cfg: Option<TokenizerConfig> = read_json_opt(path)?;
    Ok(cfg.and_then(|c| c.model_input_names).is_none_or(|names| names.iter().any(|n| n == "attention_mask")))
}

/// `model_max_length` of tokenizer_config.json; transformers stores a huge float
/// (1e30) when the tokenizer sets no limit.
pub(crate) fn tokenizer_max_length(path: &Path) -> Result<Option<usize>> {
    #[derive(serde::Deserialize)]
    struct TokenizerConfig {
        model_max_length: Option<f64>,
    }
    let cfg: Option<TokenizerConfig> = read_json_opt(path)?;
    Ok(cfg.and_then(|c| c.model_max_length).filter(|n| *n >= 1.0 && *n < 1e9).map(|n| n as usize))
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
