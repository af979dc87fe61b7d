//! The late-interaction outputs of a pipeline: token vectors (`embed_multi`) of a ColBERT
//! model or of bge-m3, and bge-m3's lexical weights and its three outputs from one pass
//! (`encode_all`). See `crate::late`.

use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;

use tokenizers::{PostProcessor, Tokenizer, TruncationParams};

use super::batch::in_batches;
use super::text::{encode_typed, Encoded};
use super::Pipeline;
use crate::error::{Error, Result};
use crate::heads::Dense;
use crate::late::{lexical_weights, Colbert, MultiVector, Side, SpecialTokens};
use crate::models::{BackboneConfig, Model};
use crate::sparse::{Selection, SparseVector};
use crate::multivector::Projection;
use crate::st::Layout;

/// The weights of the token heads: the projections of every token (PyLate's Dense modules,
/// bge-m3's `colbert_linear`) and bge-m3's `sparse_linear`.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct LateHeads {
    pub(crate) project: Vec<Dense>,
    pub(crate) sparse: Option<Dense>,
    /// The projection is a tensor of the backbone's file (Stanford ColBERT's
    /// `linear.weight`), counted among the backbone's parameters.
    #[serde(default)]
    pub(crate) inline: bool,
}

impl LateHeads {
    /// The token heads of a late-interaction model: a ColBERT model's Dense modules (each
    /// checked against the width before it), bge-m3's `colbert_linear.pt` and
    /// `sparse_linear.pt` beside the backbone (`m3`); None for any other model.
    pub(crate) fn load(
        bdir: &Path,
        layout: &Layout,
        m3: bool,
        hidden: usize,
        vb: &candle_nn::VarBuilder,
    ) -> Result<Option<Self>> {
        let folders = match layout.multi_vector.as_ref().map(|m| &m.projection) {
            Some(Projection::Inline { weights, dim }) => {
                let name = "linear.weight";
                let weight = vb.get_unchecked(name).map_err(|e| Error::invalid_file(weights, e))?;
                let head = Dense::from_weight(&weight, hidden, weights, name)?;
                if let Some(dim) = dim.filter(|d| *d != head.out_features) {
                    return Err(Error::Unsupported {
                        what: "artifact.metadata dim",
                        value: format!("{dim} (linear.weight has {} rows)", head.out_features),
                        path: bdir.join("artifact.metadata"),
                        supported: "the dim of linear.weight (its rows)",
                    });
                }
                return Ok(Some(LateHeads { project: vec![head], sparse: None, inline: true }));
            }
            Some(Projection::Folders(folders)) => Some(folders),
            None => layout.colbert.as_ref().map(|(folders, _)| folders),
        };
        if let Some(folders) = folders {
            let tokens = layout.multi_vector.is_some();
            let mut project = Vec::with_capacity(folders.len());
            let mut dim = hidden;
            for folder in folders {
                let head = if tokens { Dense::load_tokens(folder)? } else { Dense::load(folder)? };
                if head.in_features != dim {
                    return Err(Error::invalid_file(
                        folder.join("config.json"),
                        format!("in_features {} does not match the previous stage's output dimension {dim}", head.in_features),
                    ));
                }
                dim = head.out_features;
                project.push(head);
            }
            return Ok(Some(LateHeads { project, sparse: None, inline: false }));
        }
        if !m3 {
            return Ok(None);
        }
        let colbert = Dense::from_torch_linear(&bdir.join("colbert_linear.pt"), hidden)?;
        let sparse = Dense::from_torch_linear(&bdir.join("sparse_linear.pt"), hidden)?;
        if sparse.out_features != 1 {
            return Err(Error::invalid_file(
                bdir.join("sparse_linear.pt"),
                format!("weight has {} outputs; a token weight head has 1", sparse.out_features),
            ));
        }
        Ok(Some(LateHeads { project: vec![colbert], sparse: Some(sparse), inline: false }))
    }

    pub(crate) fn parameters(&self) -> usize {
        if self.inline {
            return 0;
        }
        self.project.iter().chain(&self.sparse).map(Dense::parameters).sum()
    }

    /// The width of the token vectors.
    pub(crate) fn dim(&self) -> Option<usize> {
        self.project.last().map(|d| d.out_features)
    }
}

/// A ColBERT model's token-vector output (`embed_multi`): PyLate's settings and the
/// tokenizer of each side cut at its length.
pub(crate) struct ColbertTokens {
    pub(crate) settings: Colbert,
    query: Tokenizer,
    document: Tokenizer,
}

impl ColbertTokens {
    /// The builder of a ColBERT model's output: its PyLate settings (`colbert`) resolved
    /// against the tokenizer (and its special tokens, `specials`) and checked against what
    /// the backbone computes. `dirs`: the backbone's folder and the model's.
    pub(crate) fn load(
        settings: Colbert,
        tokenizer: &Tokenizer,
        backbone: &dyn Model,
        (bdir, dir): (&Path, &Path),
        config: &BackboneConfig,
    ) -> Result<Self> {
        let hidden_expansion = settings.query_expansion && !settings.attend_to_expansion_tokens;
        if hidden_expansion && !backbone.hides_keys() {
            return Err(Error::Unsupported {
                what: "ColBERT backbone with query expansion tokens not attended to",
                value: config.architecture().to_string(),
                path: bdir.join("config.json"),
                supported: "BERT, RoBERTa, XLM-RoBERTa, DistilBERT, ELECTRA, MPNet, ModernBERT (or attend_to_expansion_tokens true)",
            });
        }
        // A sliding window that leaves the last expansion token of the shortest query (its
        // special tokens and prefix) with only expansion tokens to see: transformers then
        // attends uniformly to every token of the row, which is not reproduced.
        if let Some(window) = backbone.sliding_window().filter(|_| hidden_expansion) {
            let specials = tokenizer.get_post_processor().map_or(0, |p| p.added_tokens(false));
            let fewest = (specials + usize::from(settings.query_prefix_id.is_some())).max(1);
            if settings.query_length - 1 >= window + fewest {
                return Err(Error::Unsupported {
                    what: "ColBERT query expansion beyond the sliding window",
                    value: format!(
                        "query_length {} with sliding-window layers of {window} tokens each side",
                        settings.query_length
                    ),
                    path: dir.join("config_sentence_transformers.json"),
                    supported: "a window that reaches from every expansion token back to the query's own tokens (query_length - 1 < window + the query's special and prefix tokens), as the published models have",
                });
            }
        }
        ColbertTokens::cut(settings, tokenizer)
    }

    /// `tokenizer` (padding off) cut at each side's length, with the prefixes the
    /// settings register (as MultiVectorEncoder's `_register_prefix_tokens`: a prefix, or
    /// its first word, that is a token the tokenizer splits becomes a special token, not
    /// normalized).
    fn cut(settings: Colbert, tokenizer: &Tokenizer) -> Result<Self> {
        let mut registered = tokenizer.clone();
        for value in &settings.register_prefixes {
            let Some(word) = value.split_whitespace().next() else { continue };
            for prefix in [value.as_str(), word] {
                if tokenizer.token_to_id(prefix).is_none() {
                    continue;
                }
                let pieces = tokenizer.encode(prefix, false).map_err(|e| Error::Tokenize(e.to_string()))?;
                if pieces.get_tokens() != [prefix] {
                    registered
                        .add_special_tokens([tokenizers::AddedToken::from(prefix, true).normalized(false)])
                        .map_err(|e| Error::Tokenize(e.to_string()))?;
                }
                break;
            }
        }
        let cut = |side| -> Result<Tokenizer> {
            let mut t = registered.clone();
            let max_length = settings.tokenizer_length(side);
            t.with_truncation(Some(TruncationParams { max_length, ..Default::default() }))
                .map_err(|e| Error::Tokenize(e.to_string()))?;
            Ok(t)
        };
        Ok(ColbertTokens { query: cut(Side::Query)?, document: cut(Side::Document)?, settings })
    }

    /// What `embed.model_info` shows under "multi".
    pub(crate) fn describe(&self, heads: &LateHeads) -> serde_json::Value {
        let project: Vec<_> = heads.project.iter().map(Dense::describe).collect();
        serde_json::json!({
            "kind": "colbert",
            "dim": heads.dim(),
            "project": project,
            "normalize": {"query": self.settings.normalize_query, "document": self.settings.normalize_document},
            "similarity": self.settings.similarity,
            "settings": self.settings,
        })
    }
}

/// bge-m3's lexical weights (its sparse output, `embed_sparse`): `sparse_linear` over the
/// tokens of the model's tokenizer, over `vocab` ids, leaving out the `unused` ones, then
/// `max_terms` and `min_weight`. Its token vectors are every token but the first.
pub(crate) struct Lexical {
    unused: Vec<u32>,
    vocab: usize,
    selection: Selection,
}

impl Lexical {
    /// The builder of bge-m3's lexical weights: the ids they leave out (`specials` as the
    /// tokenizer has them).
    pub(crate) fn load(specials: &SpecialTokens, tokenizer: &Tokenizer, config: &BackboneConfig, selection: Selection) -> Self {
        Lexical { unused: specials.unused_ids(tokenizer), vocab: config.vocab_size(), selection }
    }

    /// What `embed.model_info` shows under "multi": the token vectors and lexical weights.
    pub(crate) fn describe(&self, heads: &LateHeads) -> serde_json::Value {
        let project: Vec<_> = heads.project.iter().map(Dense::describe).collect();
        serde_json::json!({
            "kind": "bge-m3",
            "dim": heads.dim(),
            "project": project,
            "normalize": true,
            "first_token": "left out",
            "sparse": heads.sparse.as_ref().map(Dense::describe),
            "vocab_size": self.vocab,
            "sparse_leaves_out": self.unused,
            "max_terms": self.selection.max_terms,
            "min_weight": self.selection.min_weight,
        })
    }
}

/// How a model gives token vectors (see `Outputs::tokens`).
#[derive(Clone, Copy)]
pub(super) enum Late<'a> {
    /// PyLate's ColBERT: the tokenizer of each side.
    Colbert(&'a ColbertTokens),
    /// bge-m3: the model's tokenizer; every token but the first.
    M3(&'a Lexical),
}

/// One input ready for the backbone, and what of it the output keeps.
struct Row {
    encoded: Encoded,
    /// Leading tokens that are attention keys.
    keys: usize,
    /// The tokens whose vectors are output.
    kept: Vec<bool>,
}

/// A bge-m3 pass's three outputs of one input.
pub struct AllOutputs {
    pub dense: Vec<f32>,
    pub sparse: SparseVector,
    pub multi: MultiVector,
}

impl Pipeline {
    /// How the model gives token vectors and their heads, or the error for `call` on this
    /// model.
    fn late(&self, call: &'static str) -> Result<(Late<'_>, &LateHeads)> {
        match (self.outputs.tokens(call), &self.weights.late) {
            (Ok(late), Some(heads)) => Ok((late, heads)),
            _ => Err(self.outputs.wrong_output(call)),
        }
    }

    /// Token vectors of the inputs, in input order, as PyLate's `ColBERT.encode(...,
    /// is_query=...)` (`prompt_name` `'query'` or `'document'`, the default) or bge-m3's
    /// `colbert_vecs` give them: one L2-normalised row per kept token. Batched as
    /// `embed_batched`.
    pub fn embed_multi(
        &self,
        texts: &[&str],
        prompt_name: Option<&str>,
        max_batch_tokens: usize,
        threads: usize,
        mut before_batch: impl FnMut() -> Result<()>,
    ) -> Result<Vec<MultiVector>> {
        let (late, heads) = self.late("embed_multi")?;
        let side = Side::parse(prompt_name)?;
        let normalize = match late {
            Late::Colbert(c) => c.settings.normalizes(side),
            Late::M3(_) => true,
        };
        self.late_batched(late, side, texts, (max_batch_tokens, threads), &mut before_batch, |rows, hidden| {
            self.token_vectors(heads, rows, hidden, normalize)
        })
    }

    /// The token ids the backbone takes for `text` on the side `prompt_name` names (as
    /// `embed_multi`), and which of them have a vector.
    pub fn multi_tokens(&self, text: &str, prompt_name: Option<&str>) -> Result<(Vec<u32>, Vec<bool>)> {
        let (late, _) = self.late("embed_multi")?;
        let row = self.late_rows(late, Side::parse(prompt_name)?, &[text])?.pop();
        let row = row.ok_or_else(|| Error::Inference("no tokens".into()))?;
        Ok((row.encoded.ids, row.kept))
    }

    /// The inputs tokenized for `side` (`late_rows`) and run through the backbone in
    /// length-grouped batches of at most `max_batch_tokens` on `threads` threads (as
    /// `embed_batched`); `each` turns a batch's rows and hidden states into an output per
    /// row. In input order.
    fn late_batched<T: Send>(
        &self,
        late: Late,
        side: Side,
        texts: &[&str],
        (max_batch_tokens, threads): (usize, usize),
        before_batch: &mut dyn FnMut() -> Result<()>,
        each: impl Fn(&[&Row], &[Vec<f32>]) -> Vec<T> + Sync,
    ) -> Result<Vec<T>> {
        let rows = self.late_rows(late, side, texts)?;
        let lengths: Vec<usize> = rows.iter().map(|r| r.encoded.ids.len()).collect();
        in_batches(&lengths, max_batch_tokens, threads, before_batch, |batch| {
            let rows: Vec<&Row> = batch.iter().map(|&i| &rows[i]).collect();
            let hidden = self.late_forward(&rows)?;
            Ok(each(&rows, &hidden))
        })
    }

    /// bge-m3's dense vector, lexical weights and token vectors of `text`, from one pass.
    pub fn encode_outputs(&self, text: &str) -> Result<AllOutputs> {
        const CALL: &str = "embed.encode_all";
        let (late, heads) = self.late(CALL)?;
        let (Ok((dense, lexical)), Some(sparse)) = (self.outputs.three(CALL), &heads.sparse) else {
            return Err(self.outputs.wrong_output(CALL));
        };
        let rows = self.late_rows(late, Side::Document, &[text])?;
        let rows: Vec<&Row> = rows.iter().collect();
        let hidden = self.late_forward(&rows)?;
        let (row, h) = (rows[0], &hidden[0]);
        let multi = self.token_vectors(heads, &rows, &hidden, true).pop().ok_or_else(|| Error::Inference("no token vectors".into()))?;
        let weights = lexical_weights(&row.encoded.ids, &sparse.forward(h), &lexical.unused, lexical.vocab);
        let pooled = crate::pooling::pool(
            h,
            self.hidden_size,
            crate::pooling::Sequences { bounds: &[0, row.encoded.ids.len()], skips: &[0], summary: 0, lasts: &[] },
            &dense.pooling,
            None,
        )
        .map_err(Error::Inference)?;
        let dense = self.finish(dense, pooled, None)?.pop().ok_or_else(|| Error::Inference("no dense output".into()))?;
        Ok(AllOutputs { dense, sparse: weights.select(&lexical.selection), multi })
    }

    /// bge-m3's lexical weights of the inputs, in input order (`embed_sparse`), batched as
    /// `embed_batched`.
    pub(super) fn m3_sparse(
        &self,
        texts: &[&str],
        max_batch_tokens: usize,
        threads: usize,
        mut before_batch: impl FnMut() -> Result<()>,
    ) -> Result<Vec<SparseVector>> {
        let (late, heads) = self.late("embed_sparse")?;
        let (Late::M3(Lexical { unused, vocab, selection }), Some(sparse)) = (late, &heads.sparse) else {
            return Err(self.outputs.wrong_output("embed_sparse"));
        };
        self.late_batched(late, Side::Document, texts, (max_batch_tokens, threads), &mut before_batch, |rows, hidden| {
            rows.iter()
                .zip(hidden)
                .map(|(row, h)| lexical_weights(&row.encoded.ids, &sparse.forward(h), unused, *vocab).select(selection))
                .collect()
        })
    }

    /// The inputs tokenized for `side`.
    fn late_rows(&self, late: Late, side: Side, texts: &[&str]) -> Result<Vec<Row>> {
        let text = self.text()?;
        let mut truncated = 0;
        let rows = texts
            .iter()
            .map(|t| {
                let row = match late {
                    Late::Colbert(ColbertTokens { settings, query, document }) => {
                        let tokenizer = if side == Side::Query { query } else { document };
                        let prompted = match settings.prompt(side) {
                            "" => std::borrow::Cow::Borrowed(*t),
                            prompt => std::borrow::Cow::Owned(format!("{prompt}{t}")),
                        };
                        let (mut ids, mut types, cut) = encode_typed(tokenizer, text.lowercase, &prompted)?;
                        truncated += usize::from(cut);
                        if !text.type_ids {
                            types.clear();
                        }
                        let (keys, real) = settings.input(side, &mut ids, &mut types);
                        let kept = settings.kept(side, &ids, real);
                        Row { encoded: Encoded { ids, types, skip: 0 }, keys, kept }
                    }
                    Late::M3(_) => {
                        let (encoded, cut) = self.encode_prompted(t, None)?;
                        truncated += usize::from(cut);
                        let kept = (0..encoded.ids.len()).map(|i| i > 0).collect();
                        Row { keys: encoded.ids.len(), encoded, kept }
                    }
                };
                // A ColBERT input without tokens (a tokenizer that adds none, an empty
                // text) has no token vectors: an empty array, not an error.
                if row.encoded.ids.is_empty() && matches!(late, Late::M3(_)) {
                    return Err(Error::EmptyInput { input: t.to_string() });
                }
                Ok(row)
            })
            .collect::<Result<Vec<_>>>()?;
        self.stats.count_call(texts.len(), rows.iter().map(|r| r.encoded.ids.len()).sum());
        self.stats.truncated.fetch_add(truncated as u64, Relaxed);
        Ok(rows)
    }

    /// One packed pass of the backbone over `rows`: each row's hidden states [tokens,
    /// hidden] (none for a row without tokens).
    fn late_forward(&self, rows: &[&Row]) -> Result<Vec<Vec<f32>>> {
        let present: Vec<&Row> = rows.iter().copied().filter(|r| !r.encoded.ids.is_empty()).collect();
        if present.len() < rows.len() {
            let mut hidden = self.late_forward(&present)?.into_iter();
            return Ok(rows.iter().map(|r| if r.encoded.ids.is_empty() { Vec::new() } else { hidden.next().unwrap_or_default() }).collect());
        }
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let encoded: Vec<&Encoded> = rows.iter().map(|r| &r.encoded).collect();
        let packed = self.packed(&encoded);
        let keys: Vec<usize> = rows.iter().map(|r| r.keys).collect();
        let hides = rows.iter().any(|r| r.keys < r.encoded.ids.len());
        let batch = crate::models::Batch { keys: if hides { &keys } else { &[] }, ..packed.batch() };
        self.stats.forward_passes.fetch_add(1, Relaxed);
        let hidden = self.weights.backbone.forward(&batch).map_err(Error::inference)?;
        let h = self.hidden_size;
        Ok((0..batch.len()).map(|i| hidden[batch.sequence(i).start * h..batch.sequence(i).end * h].to_vec()).collect())
    }

    /// The kept tokens of each of `rows` (hidden states `hidden`) through the projections,
    /// each token's vector L2-normalised (torch's `F.normalize`) when `normalize`: the
    /// batch's kept tokens as one matrix, so the projections run on the compute threads.
    fn token_vectors(&self, heads: &LateHeads, rows: &[&Row], hidden: &[Vec<f32>], normalize: bool) -> Vec<MultiVector> {
        let h = self.hidden_size.max(1);
        let mut x = Vec::new();
        let mut counts = Vec::with_capacity(rows.len());
        for (row, states) in rows.iter().zip(hidden) {
            let before = x.len();
            for (t, _) in states.chunks_exact(h).zip(&row.kept).filter(|(_, k)| **k) {
                x.extend_from_slice(t);
            }
            counts.push((x.len() - before) / h);
        }
        for head in &heads.project {
            x = head.forward(&x);
        }
        let dim = heads.dim().unwrap_or(h).max(1);
        if normalize {
            crate::pooling::l2_normalize_rows(&mut x, dim);
        }
        let mut at = 0;
        counts
            .into_iter()
            .map(|n| {
                let values = x[at * dim..(at + n) * dim].to_vec();
                at += n;
                MultiVector { values, rows: n, dim }
            })
            .collect()
    }
}
