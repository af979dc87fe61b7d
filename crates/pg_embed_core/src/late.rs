//! Late interaction: one vector per token. ColBERT as PyLate saves and encodes it (a
//! Transformer, then Dense projections of every token, then per-token L2 normalisation;
//! prefix tokens, query expansion, a document skiplist), and bge-m3's three outputs as
//! FlagEmbedding's `BGEM3FlagModel` gives them (dense [CLS], lexical weights from
//! `sparse_linear`, token vectors from `colbert_linear`). Plain Rust: no pgrx here.

use std::path::Path;

use serde::{Deserialize, Serialize};
use tokenizers::Tokenizer;

use crate::error::{Error, Result};
use crate::files::read_json_opt;
use crate::multivector::MultiVectorSettings;
use crate::st::ColbertConfig;

/// Which side of a ColBERT model an input is encoded as (`embed_multi`'s prompt_name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Query,
    Document,
}

impl Side {
    /// `'query'` or `'document'`; `None` is the document side.
    pub fn parse(name: Option<&str>) -> Result<Self> {
        match name {
            None | Some("document") => Ok(Side::Document),
            Some("query") => Ok(Side::Query),
            Some(other) => Err(Error::UnknownPrompt { name: other.into(), known: "query, document".into() }),
        }
    }
}

/// ColBERT's settings resolved against the tokenizer, as PyLate resolves them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Colbert {
    pub query_prefix: String,
    pub document_prefix: String,
    /// The prefix token inserted after the first token (none for an empty prefix).
    pub query_prefix_id: Option<u32>,
    pub document_prefix_id: Option<u32>,
    /// Tokens of a query (its prefix and special tokens included); with query expansion a
    /// shorter query is filled up to it with `expansion_id`.
    pub query_length: usize,
    /// Tokens a document is cut at (its prefix and special tokens included).
    pub document_length: usize,
    pub query_expansion: bool,
    /// Whether the query's other tokens attend to the expansion tokens.
    pub attend_to_expansion_tokens: bool,
    /// The token a query is expanded with: the mask token (else end of sequence, else padding).
    pub expansion_id: u32,
    /// Tokens left out of the output on the sides the skiplist applies to (PyLate's:
    /// punctuation by default, documents only), sorted.
    pub skiplist: Vec<u32>,
    /// Where the settings come from: "PyLate", "MultiVectorEncoder" or "Stanford ColBERT".
    #[serde(default)]
    pub layout: String,
    /// The text put before an input of each side (MultiVectorEncoder's prompts; PyLate
    /// inserts its prefix token instead).
    #[serde(default)]
    pub query_prompt: String,
    #[serde(default)]
    pub document_prompt: String,
    /// Tokens a shorter query is filled up to with `expansion_id` (PyLate: query_length).
    #[serde(default)]
    pub expansion_length: usize,
    /// Whether the expansion tokens have vectors (a MultiVectorEncoder without a
    /// MultiVectorMask keeps them only when they are attended to).
    #[serde(default = "yes")]
    pub expansion_kept: bool,
    /// The sides the skiplist applies to.
    #[serde(default)]
    pub skip_queries: bool,
    #[serde(default = "yes")]
    pub skip_documents: bool,
    /// Documents keep only these tokens (MultiVectorMask's keep_only_token_ids), sorted.
    #[serde(default)]
    pub keep_only: Option<Vec<u32>>,
    /// Whether each side's vectors are L2-normalised.
    #[serde(default = "yes")]
    pub normalize_query: bool,
    #[serde(default = "yes")]
    pub normalize_document: bool,
    /// How the model scores a query against a document: "maxsim" (`embed.maxsim`) or
    /// "meanmaxsim" (that divided by the query's rows).
    #[serde(default = "maxsim")]
    pub similarity: String,
    /// Prefix texts registered as special tokens of the tokenizer where it splits them.
    #[serde(default)]
    pub register_prefixes: Vec<String>,
}

fn yes() -> bool {
    true
}

fn maxsim() -> String {
    "maxsim".into()
}

/// PyLate's default skiplist: Python's `string.punctuation`, one word per character.
const PUNCTUATION: &str = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";

impl Colbert {
    /// The settings of `config` (PyLate's defaults for what it leaves out) with the token
    /// ids of `tokenizer`; `specials` are the tokenizer's special tokens.
    pub fn resolve(config: &ColbertConfig, tokenizer: &Tokenizer, specials: &SpecialTokens, path: &Path) -> Result<Self> {
        let prefix_id = |prefix: &str, what: &str| -> Result<Option<u32>> {
            if prefix.is_empty() {
                return Ok(None);
            }
            tokenizer.token_to_id(prefix).map(Some).ok_or_else(|| {
                Error::invalid_file(path, format!("the {what} prefix \"{prefix}\" is not a token of the tokenizer"))
            })
        };
        let query_prefix = config.query_prefix.clone().unwrap_or_else(|| "[Q] ".into());
        let document_prefix = config.document_prefix.clone().unwrap_or_else(|| "[D] ".into());
        let query_prefix_id = prefix_id(&query_prefix, "query")?;
        let document_prefix_id = prefix_id(&document_prefix, "document")?;
        let query_expansion = config.do_query_expansion.unwrap_or(true);
        let attend_to_expansion_tokens = query_expansion && config.attend_to_expansion_tokens.unwrap_or(false);
        let expansion_id = [&specials.mask, &specials.eos, &specials.pad]
            .into_iter()
            .find_map(|t| t.as_deref().and_then(|t| tokenizer.token_to_id(t)))
            .ok_or_else(|| Error::invalid_file(path, "the tokenizer has no mask, end-of-sequence or padding token to expand queries with"))?;
        let words: Vec<String> = match &config.skiplist_words {
            Some(words) => words.clone(),
            None => PUNCTUATION.chars().map(String::from).collect(),
        };
        // transformers' convert_tokens_to_ids: a word that is not a token is the unknown token.
        let unknown = specials.unk.as_deref().and_then(|t| tokenizer.token_to_id(t));
        let mut skiplist: Vec<u32> = words.iter().filter_map(|w| tokenizer.token_to_id(w).or(unknown)).collect();
        skiplist.sort_unstable();
        skiplist.dedup();
        let length = |n: Option<usize>, default: usize, what: &str| -> Result<usize> {
            match n.unwrap_or(default) {
                n if n < 3 => Err(Error::invalid_file(path, format!("{what} {n} leaves no room for text"))),
                n => Ok(n),
            }
        };
        let query_length = length(config.query_length, 32, "query_length")?;
        Ok(Colbert {
            layout: "PyLate".into(),
            query_prompt: String::new(),
            document_prompt: String::new(),
            expansion_length: query_length,
            expansion_kept: true,
            skip_queries: false,
            skip_documents: true,
            keep_only: None,
            normalize_query: true,
            normalize_document: true,
            similarity: maxsim(),
            register_prefixes: Vec::new(),
            query_length,
            document_length: length(config.document_length, 180, "document_length")?,
            query_prefix,
            document_prefix,
            query_prefix_id,
            document_prefix_id,
            query_expansion,
            attend_to_expansion_tokens,
            expansion_id,
            skiplist,
        })
    }

    /// The settings of a layout `MultiVectorEncoder` reads (`mv`) with the token ids of
    /// `tokenizer` (`specials`: its special tokens); `max_length`: where the model's
    /// tokenizer cuts an input otherwise. `path` names the layout in errors.
    pub fn resolve_multi_vector(
        mv: &MultiVectorSettings,
        tokenizer: &Tokenizer,
        specials: &SpecialTokens,
        max_length: usize,
        path: &Path,
    ) -> Result<Self> {
        let expansion = mv.expansion.as_ref();
        let expansion_id = match expansion.map(|e| &e.token) {
            None => 0,
            Some(Some(token)) => tokenizer.token_to_id(token).ok_or_else(|| Error::Unsupported {
                what: "query_expansion token",
                value: token.clone(),
                path: path.to_path_buf(),
                supported: "a token of the tokenizer's vocabulary",
            })?,
            // The mask token, else the end-of-sequence token.
            Some(None) => [&specials.mask, &specials.eos]
                .into_iter()
                .find_map(|t| t.as_deref().and_then(|t| tokenizer.token_to_id(t)))
                .ok_or_else(|| Error::invalid_file(path, "query_expansion needs a mask or end-of-sequence token, and the tokenizer has neither"))?,
        };
        let or_max = |n: Option<usize>| n.unwrap_or(max_length);
        // "fixed" cuts every query at the expansion length; "min" only fills up to it.
        let query_length = match expansion {
            Some(e) if e.strategy == "fixed" => e.length,
            _ => or_max(mv.query_length),
        };
        // MultiVectorMask's skiplist: a word that is not one token is dropped from it.
        let mask = mv.mask.as_ref();
        let mut skiplist: Vec<u32> =
            mask.map(|m| m.skiplist_words.iter().filter_map(|w| tokenizer.token_to_id(w)).collect()).unwrap_or_default();
        skiplist.sort_unstable();
        skiplist.dedup();
        let keep_only = mask.and_then(|m| m.keep_only_token_ids.clone()).filter(|k| !k.is_empty()).map(|mut k| {
            k.sort_unstable();
            k.dedup();
            k
        });
        let attend = expansion.is_some_and(|e| e.attend);
        Ok(Colbert {
            layout: mv.layout.into(),
            query_prefix: String::new(),
            document_prefix: String::new(),
            query_prefix_id: None,
            document_prefix_id: None,
            query_prompt: mv.query_prompt.clone().unwrap_or_default(),
            document_prompt: mv.document_prompt.clone().unwrap_or_default(),
            query_length,
            document_length: or_max(mv.document_length),
            query_expansion: expansion.is_some(),
            attend_to_expansion_tokens: attend,
            expansion_id,
            expansion_length: expansion.map_or(0, |e| e.length),
            expansion_kept: mask.is_some() || attend,
            skiplist,
            skip_queries: mask.is_some_and(|m| m.skips("query")),
            skip_documents: mask.is_some_and(|m| m.skips("document")),
            keep_only,
            normalize_query: mv.normalize_query,
            normalize_document: mv.normalize_document,
            similarity: mv.similarity.clone(),
            register_prefixes: mv.register_prefixes.clone(),
        })
    }

    /// The text put before an input of `side`.
    pub fn prompt(&self, side: Side) -> &str {
        match side {
            Side::Query => &self.query_prompt,
            Side::Document => &self.document_prompt,
        }
    }

    /// Whether the token vectors of `side` are L2-normalised.
    pub fn normalizes(&self, side: Side) -> bool {
        match side {
            Side::Query => self.normalize_query,
            Side::Document => self.normalize_document,
        }
    }

    /// Tokens the tokenizer may give for `side` (special tokens included), before the prefix.
    pub fn tokenizer_length(&self, side: Side) -> usize {
        match side {
            Side::Query => self.query_length - usize::from(self.query_prefix_id.is_some()),
            Side::Document => self.document_length - usize::from(self.document_prefix_id.is_some()),
        }
    }

    /// The backbone's input for tokenized `ids` (and type ids, when the model takes them) of
    /// `side`, as PyLate's `tokenize` builds it: the prefix token after the first token; a
    /// query expanded to `expansion_length`. Also how many leading tokens are attention
    /// keys (fewer than all when expansion tokens are not attended to), and how many are
    /// the input's own (the rest are expansion tokens).
    pub fn input(&self, side: Side, ids: &mut Vec<u32>, types: &mut Vec<u32>) -> (usize, usize) {
        let prefix = match side {
            Side::Query => self.query_prefix_id,
            Side::Document => self.document_prefix_id,
        };
        if let Some(prefix) = prefix {
            let at = ids.len().min(1);
            ids.insert(at, prefix);
            if !types.is_empty() {
                types.insert(at.min(types.len()), 0);
            }
        }
        let real = ids.len();
        if side == Side::Query && self.query_expansion && ids.len() < self.expansion_length {
            let typed = !types.is_empty();
            ids.resize(self.expansion_length, self.expansion_id);
            if typed {
                types.resize(self.expansion_length, 0);
            }
        }
        (if self.attend_to_expansion_tokens { ids.len() } else { real }, real)
    }

    /// Which tokens of an input of `side` (`ids`, the first `real` its own, the rest
    /// expansion tokens) have a vector: PyLate keeps every query token (expansion tokens
    /// included) and a document's tokens but those of the skiplist; MultiVectorMask leaves
    /// out the skiplist on the sides it names and keeps only `keep_only` of a document.
    pub fn kept(&self, side: Side, ids: &[u32], real: usize) -> Vec<bool> {
        let skips = match side {
            Side::Query => self.skip_queries,
            Side::Document => self.skip_documents,
        };
        let keep_only = self.keep_only.as_ref().filter(|_| side == Side::Document);
        ids.iter()
            .enumerate()
            .map(|(i, id)| {
                (i < real || self.expansion_kept)
                    && !(skips && self.skiplist.binary_search(id).is_ok())
                    && keep_only.is_none_or(|k| k.binary_search(id).is_ok())
            })
            .collect()
    }
}

/// The special tokens tokenizer_config.json names (a string, or an added token's `content`).
#[derive(Debug, Default, Clone)]
pub struct SpecialTokens {
    pub mask: Option<String>,
    pub eos: Option<String>,
    pub pad: Option<String>,
    pub unk: Option<String>,
    pub cls: Option<String>,
}

impl SpecialTokens {
    pub fn read(path: &Path) -> Result<Self> {
        let Some(config) = read_json_opt::<serde_json::Value>(path)? else {
            return Ok(SpecialTokens::default());
        };
        let token = |key: &str| match config.get(key) {
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(serde_json::Value::Object(o)) => o.get("content").and_then(|c| c.as_str()).map(String::from),
            _ => None,
        };
        Ok(SpecialTokens {
            mask: token("mask_token"),
            eos: token("eos_token"),
            pad: token("pad_token"),
            unk: token("unk_token"),
            cls: token("cls_token"),
        })
    }

    /// The ids bge-m3's lexical weights leave out: the [CLS], end-of-sequence, padding and
    /// unknown tokens (FlagEmbedding's `unused_tokens`), sorted.
    pub fn unused_ids(&self, tokenizer: &Tokenizer) -> Vec<u32> {
        let mut ids: Vec<u32> = [&self.cls, &self.eos, &self.pad, &self.unk]
            .into_iter()
            .filter_map(|t| t.as_deref().and_then(|t| tokenizer.token_to_id(t)))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }
}

/// Token vectors: `rows` rows of `dim` values, row-major (`embed_multi`'s 2-D array).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MultiVector {
    pub values: Vec<f32>,
    pub rows: usize,
    pub dim: usize,
}

impl MultiVector {
    pub fn row(&self, i: usize) -> &[f32] {
        &self.values[i * self.dim..(i + 1) * self.dim]
    }
}

/// bge-m3's lexical weights of one input: per token id, the largest `relu` weight of its
/// tokens (`weights`, one per token of `ids`), leaving out `unused` ids and zero weights,
/// over a vocabulary of `vocab` ids.
pub fn lexical_weights(ids: &[u32], weights: &[f32], unused: &[u32], vocab: usize) -> crate::sparse::SparseVector {
    let mut best: std::collections::BTreeMap<u32, f32> = std::collections::BTreeMap::new();
    for (&id, &w) in ids.iter().zip(weights) {
        let w = w.max(0.0);
        if w > 0.0 && unused.binary_search(&id).is_err() {
            let e = best.entry(id).or_insert(0.0);
            if w > *e {
                *e = w;
            }
        }
    }
    let (indices, values) = best.into_iter().unzip();
    crate::sparse::SparseVector { indices, values, dim: vocab }
}
