//! SigLIP's own tokenizer (transformers' `SiglipTokenizer`: a SentencePiece model,
//! `spiece.model`, and no tokenizer.json) as a tokenizers `Tokenizer` that gives the same ids.
//!
//! What `SiglipTokenizer` does, step by step, and the piece of the tokenizer that does it here:
//! 1. `canonicalize_text`: lowercase (`do_lower_case`), every ASCII punctuation character
//!    (`string.punctuation`) removed, runs of whitespace made one space, the ends stripped:
//!    normalizers (Lowercase, then regex replacements).
//! 2. SentencePiece's own normalisation: the model's precompiled character map (NFKC and
//!    friends), then its extra whitespace removed: Precompiled, then the same replacements.
//! 3. A word-boundary mark before the text and at each space, and the Unigram model's best
//!    segmentation under the pieces' scores: Metaspace and Unigram.
//! 4. `</s>` appended: a template post-processor. The special tokens of tokenizer_config.json
//!    written in a text are matched as themselves, as transformers splits on them.
//!
//! Checked against `SiglipTokenizer` on a trained SentencePiece model: every id equal over
//! 400 seeded random texts of words, punctuation and Unicode spaces, case and compatibility forms
//! (`scripts/gen_siglip_fixtures.py`, `tests/siglip.rs`). What differs is rare in real text:
//! a combining mark right after removed punctuation (SentencePiece keeps it as a piece, the
//! Precompiled normaliser drops it); a special token's text inside the input (`a </s> b`:
//! the word after it gets a word-boundary mark here, not in transformers) or at its end
//! (transformers adds no second `</s>`).
//!
//! `spiece.model` is a protobuf `ModelProto`, read here field by field: the pieces with their
//! scores, the trainer's model type and unknown id, the normaliser's character map and flags.

use std::path::Path;

use tokenizers::models::unigram::Unigram;
use tokenizers::normalizers::{replace::Replace, utils::Lowercase, NormalizerWrapper, Precompiled, Sequence};
use tokenizers::pre_tokenizers::metaspace::{Metaspace, PrependScheme};
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, Tokenizer};

use crate::error::{Error, Result};

/// What is read of a `ModelProto`.
#[derive(Debug, Default)]
struct Model {
    pieces: Vec<(String, f64)>,
    /// TrainerSpec.model_type: 1 = Unigram (the default).
    model_type: u64,
    unk_id: usize,
    byte_fallback: bool,
    charsmap: Vec<u8>,
    remove_extra_whitespaces: bool,
}

/// A protobuf message's fields: (number, wire type, the value as an integer or bytes).
fn fields(mut bytes: &[u8]) -> std::result::Result<Vec<(u64, u64, u64, &[u8])>, String> {
    fn take<'a>(bytes: &mut &'a [u8], n: usize, number: u64) -> std::result::Result<&'a [u8], String> {
        if bytes.len() < n {
            return Err(format!("field {number} runs past the end"));
        }
        let (value, rest) = bytes.split_at(n);
        *bytes = rest;
        Ok(value)
    }
    fn varint(bytes: &mut &[u8]) -> std::result::Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = bytes.split_first().ok_or("a truncated varint")?;
            *bytes = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("a varint of more than 64 bits".into())
    }
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let key = varint(&mut bytes)?;
        let (number, wire) = (key >> 3, key & 7);
        match wire {
            0 => out.push((number, wire, varint(&mut bytes)?, &[][..])),
            1 => out.push((number, wire, 0, take(&mut bytes, 8, number)?)),
            2 => {
                let n = usize::try_from(varint(&mut bytes)?).map_err(|_| "a length beyond memory")?;
                out.push((number, wire, 0, take(&mut bytes, n, number)?));
            }
            5 => out.push((number, wire, 0, take(&mut bytes, 4, number)?)),
            other => return Err(format!("wire type {other} of field {number}")),
        }
    }
    Ok(out)
}

fn parse(bytes: &[u8]) -> std::result::Result<Model, String> {
    let mut model = Model { model_type: 1, remove_extra_whitespaces: true, ..Model::default() };
    for (number, wire, _, value) in fields(bytes)? {
        match (number, wire) {
            (1, 2) => {
                let (mut piece, mut score) = (None, 0f32);
                for (n, w, _, v) in fields(value)? {
                    match (n, w) {
                        (1, 2) => piece = Some(String::from_utf8(v.to_vec()).map_err(|_| "a piece that is not UTF-8")?),
                        (2, 5) => score = f32::from_le_bytes([v[0], v[1], v[2], v[3]]),
                        _ => {}
                    }
                }
                model.pieces.push((piece.ok_or("a piece without its text")?, f64::from(score)));
            }
            (2, 2) => {
                for (n, w, x, _) in fields(value)? {
                    match (n, w) {
                        (3, 0) => model.model_type = x,
                        (40, 0) => model.unk_id = usize::try_from(x).map_err(|_| "unk_id")?,
                        (35, 0) => model.byte_fallback = x != 0,
                        _ => {}
                    }
                }
            }
            (3, 2) => {
                for (n, w, x, v) in fields(value)? {
                    match (n, w) {
                        (2, 2) => model.charsmap = v.to_vec(),
                        (4, 0) => model.remove_extra_whitespaces = x != 0,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Ok(model)
}

/// What tokenizer_config.json says of a SiglipTokenizer.
#[derive(serde::Deserialize)]
struct Config {
    #[serde(default)]
    tokenizer_class: Option<String>,
    #[serde(default = "yes")]
    do_lower_case: bool,
    #[serde(default)]
    eos_token: Option<TokenName>,
    #[serde(default)]
    unk_token: Option<TokenName>,
    #[serde(default)]
    pad_token: Option<TokenName>,
}

fn yes() -> bool {
    true
}

/// A special token as tokenizer_config.json writes it: its text, or an AddedToken object.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum TokenName {
    Text(String),
    Added { content: String },
}

impl TokenName {
    fn text(&self) -> &str {
        match self {
            TokenName::Text(t) | TokenName::Added { content: t } => t,
        }
    }
}

/// Whitespace as Python's `str.split()` and `re`'s `\s` see it (Unicode White_Space and the
/// four information separators).
const SPACE: &str = r"[\s\x1c-\x1f]";

/// The tokenizer of a model folder that has `spiece.model` and no tokenizer.json, when its
/// tokenizer_config.json names SiglipTokenizer; None for any other tokenizer class.
pub fn siglip_tokenizer(dir: &Path) -> Result<Option<Tokenizer>> {
    let config_path = dir.join("tokenizer_config.json");
    let config: Config = match std::fs::read(&config_path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| Error::invalid_file(&config_path, e))?,
        Err(_) => return Ok(None),
    };
    if config.tokenizer_class.as_deref() != Some("SiglipTokenizer") {
        return Ok(None);
    }
    let path = dir.join("spiece.model");
    let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
    let model = parse(&bytes).map_err(|e| Error::invalid_file(&path, e))?;
    if model.model_type != 1 {
        return Err(Error::Unsupported {
            what: "SentencePiece model type",
            value: model.model_type.to_string(),
            path,
            supported: "1 (Unigram)",
        });
    }
    let invalid = |e: &dyn std::fmt::Display| Error::invalid_file(&path, e.to_string());
    let id_of = |name: &str| model.pieces.iter().position(|(p, _)| p == name);
    let eos = config.eos_token.as_ref().map_or("</s>", TokenName::text).to_string();
    let eos_id = id_of(&eos).ok_or_else(|| invalid(&format!("the end token {eos} is not a piece")))?;
    if model.unk_id >= model.pieces.len() {
        return Err(invalid(&format!("unk_id {} is not a piece", model.unk_id)));
    }

    let unigram = Unigram::from(model.pieces.clone(), Some(model.unk_id), model.byte_fallback).map_err(|e| invalid(&e))?;
    let mut tokenizer = Tokenizer::new(unigram);
    let replace = |pattern: &str, with: &str| -> Result<NormalizerWrapper> {
        Ok(Replace::new(tokenizers::normalizers::replace::ReplacePattern::Regex(pattern.into()), with)
            .map_err(|e| invalid(&e))?
            .into())
    };
    let punctuation = format!("[{}]", regex_escape(r##"!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~"##));
    let mut steps = vec![replace("\u{2581}", " ")?];
    if config.do_lower_case {
        steps.push(Lowercase.into());
    }
    steps.push(replace(&punctuation, "")?);
    steps.push(replace(&format!("{SPACE}+"), " ")?);
    steps.push(replace("^ | $", "")?);
    if !model.charsmap.is_empty() {
        steps.push(Precompiled::from(&model.charsmap).map_err(|e| invalid(&e))?.into());
    }
    if model.remove_extra_whitespaces {
        steps.push(replace(" {2,}", " ")?);
        steps.push(replace("^ +| +$", "")?);
    }
    tokenizer.with_normalizer(Some(Sequence::new(steps))).map_err(|e| invalid(&e))?;
    // transformers puts the mark before the text, then removes punctuation: a mark before
    // each section (tokenizers' "first" would skip a text that starts with punctuation).
    tokenizer.with_pre_tokenizer(Some(Metaspace::new('\u{2581}', PrependScheme::Always, true)));
    let template = TemplateProcessing::builder()
        .try_single(format!("$A {eos}"))
        .and_then(|b| b.special_tokens(vec![(eos.clone(), eos_id as u32)]).build().map_err(|e| e.to_string()))
        .map_err(|e| invalid(&e))?;
    tokenizer.with_post_processor(Some(template));
    let specials: Vec<AddedToken> = [Some(eos.as_str()), config.unk_token.as_ref().map(TokenName::text), config.pad_token.as_ref().map(TokenName::text)]
        .into_iter()
        .flatten()
        .filter(|t| id_of(t).is_some())
        .map(|t| AddedToken::from(t.to_string(), true).lstrip(true).rstrip(true).normalized(false))
        .collect();
    tokenizer.add_special_tokens(specials).map_err(|e| invalid(&e))?;
    Ok(Some(tokenizer))
}

/// `text` with every regex metacharacter escaped.
fn regex_escape(text: &str) -> String {
    text.chars().flat_map(|c| if c.is_ascii_punctuation() { vec!['\\', c] } else { vec![c] }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protobuf_fields_are_read_and_damage_is_refused() {
        // pieces "a" (score -1.5) and "b"; trainer: model_type 1, unk_id 1; normaliser: no map.
        let piece = |text: &str, score: f32| {
            let mut p = vec![0x0a, text.len() as u8];
            p.extend(text.as_bytes());
            p.push(0x15);
            p.extend(score.to_le_bytes());
            let mut field = vec![0x0a, p.len() as u8];
            field.extend(p);
            field
        };
        let mut bytes = piece("a", -1.5);
        bytes.extend(piece("b", -2.0));
        bytes.extend([0x12, 0x05, 0x18, 0x01, 0xc0, 0x02, 0x01]);
        let model = parse(&bytes).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(model.pieces, vec![("a".to_string(), -1.5), ("b".to_string(), -2.0)]);
        assert_eq!((model.model_type, model.unk_id), (1, 1));
        assert!(parse(&bytes[..5]).is_err(), "a truncated piece");
        assert!(parse(&[0x0b]).is_err(), "wire type 3");
    }
}
