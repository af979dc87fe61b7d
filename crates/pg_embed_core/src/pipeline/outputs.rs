//! What a pipeline gives: one type for the outputs of a model, each kind built by its own
//! builder, and asked by each call for the output it returns.

use std::path::Path;

use tokenizers::Tokenizer;

use super::Weights;
use super::multi::{ColbertTokens, Late, Lexical};
use super::routes::{Routes, Routing};
use super::score::ScoreOutput;
use super::sparse::SparseStage;
use crate::classifier::{Classifier, HeadConfig};
use crate::error::{Error, Result};
use crate::heads::Dense;
use crate::late::{Colbert, SpecialTokens};
use crate::multivector::MultiVectorSettings;
use crate::st::ColbertConfig;
use crate::models::{BackboneConfig, Model};
use crate::options::{LongInput, Options};
use crate::pooling::{self, PoolingMode};
use crate::sparse::{Selection, SPARSEVEC_MAX_NNZ};
use crate::st::Layout;

/// The outputs of a pipeline: what the model gives ([`Gives`], one variant per kind of
/// model) and how a call picks a route of its Router (an asymmetric model), whichever
/// output that is. The weights of every output (heads, the MLM head, the classifier, the
/// token heads) are in [`Weights`], shared through the prepared file; these are the
/// settings, tokenizers and tables that make the outputs from them.
///
/// A call asks for the output it returns ([`Outputs::dense`], [`Outputs::sparse`],
/// [`Outputs::tokens`], [`Outputs::classifier`]) and gets it, or the error that says what
/// the model gives and which call gives it.
///
/// Each new kind of output is one more variant and its builder, as the causal-LM reranker's
/// `Gives::Score` is (its builder in `score.rs`, the LM head's rows in `Weights::score`,
/// asked for by `classify`/`rerank` through [`Outputs::score`]) and the sparse autoencoder's
/// sparse stage is (`Gives::Sparse`, [`super::sparse::SparseKind`]). To come:
/// - per-task adapters: beside `routing`, a property of every output: the adapter a call
///   names (as it names a route) picks the backbone's weights before any output runs.
pub(crate) struct Outputs {
    pub(super) gives: Gives,
    /// How a call picks a route of the Router of Dense heads (an asymmetric model).
    pub(super) routing: Option<Routing>,
}

/// What a model gives.
pub(crate) enum Gives {
    /// Pooled vectors (`embed`, `embed_images`): pooling, Dense heads, normalize, truncation.
    Dense(DenseOutput),
    /// Sparse vectors (`embed_sparse`): SPLADE over the MLM head's logits, an
    /// inference-free model's query route, or a dense output through a sparse autoencoder
    /// (CSR; see [`super::sparse::SparseKind`]).
    Sparse(Box<SparseStage>),
    /// Token vectors (`embed_multi`): a ColBERT model.
    Multi(Box<ColbertTokens>),
    /// Logits (`classify`, `rerank`): the classification head of the weights.
    Classify,
    /// bge-m3's three outputs of one pass (`encode_all`): dense vectors, lexical weights
    /// (`embed_sparse`) and token vectors (`embed_multi`).
    Three { dense: DenseOutput, lexical: Lexical },
    /// One score per (query, document) pair (`classify`, `rerank`): a causal-LM reranker's
    /// LogitScore, from the LM head's rows in the weights.
    Score(Box<ScoreOutput>),
}

/// The dense output: sentence-transformers' Pooling, the Dense heads (in the weights, a
/// Router's among them), Normalize, and `truncate_dim`.
#[derive(Clone)]
pub(crate) struct DenseOutput {
    pub(super) pooling: Vec<PoolingMode>,
    pub(super) normalize: bool,
    pub(super) dimensions: Option<usize>,
    pub(super) normalize_after_truncation: bool,
}

impl DenseOutput {
    /// Rows out of the heads normalized and truncated.
    pub(super) fn finish(&self, mut out: Vec<Vec<f32>>) -> Vec<Vec<f32>> {
        if self.normalize {
            pooling::l2_normalize(&mut out);
        }
        // sentence-transformers' truncate_dim: a plain slice after the last module.
        if let Some(k) = self.dimensions {
            out.iter_mut().for_each(|row| row.truncate(k));
            if self.normalize_after_truncation {
                pooling::l2_normalize(&mut out);
            }
        }
        out
    }

    /// One vector per input from one per row: an input spanning several rows (its chunks)
    /// gets their mean, L2-normalised again when the output is normalised.
    pub(super) fn combine(&self, vectors: Vec<Vec<f32>>, spans: &[usize]) -> Vec<Vec<f32>> {
        if spans.iter().all(|&n| n == 1) {
            return vectors;
        }
        let unit = self.normalize && (self.dimensions.is_none() || self.normalize_after_truncation);
        let mut rows = vectors.into_iter();
        spans
            .iter()
            .map(|&n| {
                let mut parts = rows.by_ref().take(n);
                let mut mean = parts.next().unwrap_or_default();
                for v in parts {
                    mean.iter_mut().zip(&v).for_each(|(m, x)| *m += x);
                }
                mean.iter_mut().for_each(|m| *m /= n as f32);
                if unit {
                    pooling::l2_normalize(std::slice::from_mut(&mut mean));
                }
                mean
            })
            .collect()
    }
}

impl Outputs {
    /// What the model gives, for errors.
    fn gives_name(&self) -> &'static str {
        match &self.gives {
            Gives::Classify => "classification logits",
            Gives::Score(_) => "relevance scores of (query, document) pairs",
            Gives::Sparse(_) => "sparse vectors",
            Gives::Multi(_) => "token vectors (late interaction)",
            Gives::Dense(_) | Gives::Three { .. } => "dense vectors",
        }
    }

    /// The call that gives the model's output.
    fn instead(&self) -> &'static str {
        match &self.gives {
            Gives::Classify => "classify",
            Gives::Score(_) => "rerank",
            Gives::Sparse(_) => "embed_sparse",
            Gives::Multi(_) => "embed_multi",
            Gives::Dense(_) | Gives::Three { .. } => "embed",
        }
    }

    /// The error for `call` on a model without its output.
    pub(super) fn wrong_output(&self, call: &'static str) -> Error {
        Error::WrongOutput { gives: self.gives_name(), call, instead: self.instead() }
    }

    /// The dense output, or the error for `call` (a call that returns dense vectors).
    pub(super) fn dense(&self, call: &'static str) -> Result<&DenseOutput> {
        match &self.gives {
            Gives::Dense(dense) | Gives::Three { dense, .. } => Ok(dense),
            Gives::Classify | Gives::Score(_) => Err(Error::WrongTask { task: "classify", call }),
            Gives::Sparse(_) | Gives::Multi(_) => Err(self.wrong_output(call)),
        }
    }

    /// The sparse output of a sparse encoder, or the error for `call`.
    pub(super) fn sparse(&self, call: &'static str) -> Result<&SparseStage> {
        match &self.gives {
            Gives::Sparse(sparse) => Ok(sparse),
            _ => Err(self.wrong_output(call)),
        }
    }

    /// bge-m3's lexical weights, its sparse output.
    pub(super) fn lexical(&self) -> Option<&Lexical> {
        match &self.gives {
            Gives::Three { lexical, .. } => Some(lexical),
            _ => None,
        }
    }

    /// bge-m3's dense output and lexical weights, or the error for `call`.
    pub(super) fn three(&self, call: &'static str) -> Result<(&DenseOutput, &Lexical)> {
        match &self.gives {
            Gives::Three { dense, lexical } => Ok((dense, lexical)),
            _ => Err(self.wrong_output(call)),
        }
    }

    /// How the model gives token vectors, or the error for `call`.
    pub(super) fn tokens(&self, call: &'static str) -> Result<Late<'_>> {
        match &self.gives {
            Gives::Multi(colbert) => Ok(Late::Colbert(colbert)),
            Gives::Three { lexical, .. } => Ok(Late::M3(lexical)),
            _ => Err(self.wrong_output(call)),
        }
    }

    /// The classifier of `weights`, for `classify`, `classify_labels` and `rerank`.
    pub(super) fn classifier<'a>(&self, weights: &'a Weights) -> Result<&'a Classifier> {
        match (&self.gives, &weights.classifier) {
            (Gives::Classify, Some(classifier)) => Ok(classifier),
            (Gives::Score(_), _) => Err(self.wrong_output("classify_labels")),
            _ => Err(Error::WrongTask { task: "embed", call: "classify" }),
        }
    }

    /// A causal-LM reranker's output.
    pub(super) fn score(&self) -> Option<&ScoreOutput> {
        match &self.gives {
            Gives::Score(score) => Some(score),
            _ => None,
        }
    }

    /// What `embed.model_info` shows under "multi" (token vectors).
    pub(super) fn describe_multi(&self, weights: &Weights) -> Option<serde_json::Value> {
        match (&self.gives, &weights.late) {
            (Gives::Multi(colbert), Some(heads)) => Some(colbert.describe(heads)),
            (Gives::Three { lexical, .. }, Some(heads)) => Some(lexical.describe(heads)),
            _ => None,
        }
    }
}

/// The token outputs of a model with token heads, as their builder makes them.
pub(super) enum TokenOutput {
    Colbert(Box<ColbertTokens>),
    M3(Lexical),
}

impl TokenOutput {
    /// The builder of the token outputs: ColBERT's (`colbert`: its PyLate settings; `mv`: a
    /// layout MultiVectorEncoder reads, with the model's `max_length`), else bge-m3's lexical
    /// weights (with `selection`). `dirs`: the backbone's folder and the model's.
    pub(super) fn load(
        (colbert, mv): (Option<&ColbertConfig>, Option<&MultiVectorSettings>),
        (tokenizer, max_length): (&Tokenizer, usize),
        backbone: &dyn Model,
        (bdir, dir): (&Path, &Path),
        config: &BackboneConfig,
        selection: Selection,
    ) -> Result<Self> {
        let specials = SpecialTokens::read(&bdir.join("tokenizer_config.json"))?;
        let settings = match (colbert, mv) {
            (_, Some(mv)) => Colbert::resolve_multi_vector(mv, tokenizer, &specials, max_length, &dir.join("modules.json"))?,
            (Some(colbert), None) => {
                Colbert::resolve(colbert, tokenizer, &specials, &dir.join("config_sentence_transformers.json"))?
            }
            (None, None) => return Ok(TokenOutput::M3(Lexical::load(&specials, tokenizer, config, selection))),
        };
        Ok(TokenOutput::Colbert(Box::new(ColbertTokens::load(settings, tokenizer, backbone, (bdir, dir), config)?)))
    }
}

impl Gives {
    /// What a model gives from the outputs built for it: a classifier its logits (token
    /// heads beside its checkpoint are not its output), a sparse encoder its sparse vectors,
    /// a model with token heads its token vectors (bge-m3 its three outputs), any other
    /// model `dense`.
    pub(super) fn of(classify: bool, sparse: Option<SparseStage>, tokens: Option<TokenOutput>, dense: &DenseOutput) -> Self {
        match (sparse, tokens) {
            _ if classify => Gives::Classify,
            (Some(sparse), _) => Gives::Sparse(Box::new(sparse)),
            (None, Some(TokenOutput::Colbert(colbert))) => Gives::Multi(colbert),
            (None, Some(TokenOutput::M3(lexical))) => Gives::Three { dense: dense.clone(), lexical },
            (None, None) => Gives::Dense(dense.clone()),
        }
    }
}

/// The weights builder of the classification output: the head `head_config` names.
pub(super) fn classifier_head(
    vb: &candle_nn::VarBuilder,
    config: &BackboneConfig,
    head_config: &HeadConfig,
    (config_path, bdir): (&Path, &Path),
) -> Result<Classifier> {
    let Some(architecture) = head_config.classification_architecture() else {
        return Err(Error::InvalidOptions(format!(
            "task \"classify\" needs a *ForSequenceClassification checkpoint; {} names architectures {:?}",
            config_path.display(),
            head_config.architectures
        )));
    };
    Classifier::load(vb, architecture, head_config, config.architecture(), config.hidden_size()).map_err(|e| e.in_dir(bdir))
}

/// The weights builder of the dense output: the Dense modules of `layout` (with a Router's
/// routes where it stands among them), then the heads the options name, each checked
/// against the width before it (`dim`: the pooling's). The heads, the routes, and the
/// width they give.
pub(super) fn dense_heads(
    layout: &Layout,
    options: &Options,
    (root, dir): (&Path, &Path),
    mut dim: usize,
) -> Result<(Vec<Dense>, Option<Routes>)> {
    let mut heads = Vec::with_capacity(layout.dense.len());
    let mut routes = None;
    for i in 0..=layout.dense.len() {
        // An asymmetric model's Router, where it stands among the Dense modules.
        if let Some(router) = layout.router.as_ref().filter(|r| r.after_dense == i) {
            let loaded = Routes::load(router, dim, heads.len())?;
            dim = loaded.dim;
            routes = Some(loaded);
        }
        let Some(folder) = layout.dense.get(i) else { break };
        let head = Dense::load(folder)?;
        if head.in_features != dim {
            return Err(Error::invalid_file(
                folder.join("config.json"),
                format!(
                    "in_features {} does not match the previous stage's output dimension {dim}",
                    head.in_features
                ),
            ));
        }
        dim = head.out_features;
        heads.push(head);
    }
    for (index, spec) in options.heads.iter().flatten().enumerate() {
        let file = crate::source::resolve_file(root, dir, &spec.path, "head file")?;
        let head = Dense::from_spec(spec, &file, index, dim)?;
        dim = head.out_features;
        heads.push(head);
    }
    Ok((heads, routes))
}

/// The option checks of each output: those a sparse model has no use for, `max_terms` and
/// `min_weight` (sparse models and bge-m3 only), those that do not apply to a ColBERT
/// model, those that apply to embedding models only (a classifier). The selection of the
/// sparse output. `sparse`: the kind of a sparse model ("SPLADE", "CSR").
pub(super) fn check_output_options(
    options: &Options,
    (sparse, m3, colbert, classify): (Option<&str>, bool, bool, bool),
) -> Result<Selection> {
    let selection = check_sparse_options(options, sparse, m3)?;
    if colbert {
        let pooled_only = [
            ("pooling", options.pooling.is_some()),
            ("normalize", options.normalize.is_some()),
            ("dimensions", options.dimensions.is_some()),
            ("heads", options.heads.is_some()),
            ("long_input", options.long_input.is_some()),
            ("max_length", options.max_length.is_some()),
        ];
        if let Some((key, _)) = pooled_only.iter().find(|(_, set)| *set) {
            return Err(Error::InvalidOptions(format!(
                "option \"{key}\" does not apply to a ColBERT model: its lengths and token heads come from config_sentence_transformers.json and its Dense modules"
            )));
        }
    }
    if classify {
        let embedding_only = [
            ("pooling", options.pooling.is_some()),
            ("normalize", options.normalize.is_some()),
            ("dimensions", options.dimensions.is_some()),
            ("heads", options.heads.is_some()),
            ("prompt", options.prompt.is_some()),
            ("prompts", options.prompts.is_some()),
            ("include_prompt", options.include_prompt.is_some()),
            ("long_input: mean_of_chunks", options.long_input == Some(LongInput::MeanOfChunks)),
        ];
        if let Some((key, _)) = embedding_only.iter().find(|(_, set)| *set) {
            return Err(Error::InvalidOptions(format!(
                "option \"{key}\" applies to embedding models; this one is a classifier (add \"task\": \"embed\" to embed with its backbone)"
            )));
        }
    }
    Ok(selection)
}

/// `max_terms` and `min_weight` checked (sparse models only), and the options a sparse
/// model has no use for refused.
fn check_sparse_options(options: &Options, sparse: Option<&str>, m3: bool) -> Result<Selection> {
    if m3 {
        // bge-m3: the selection applies to its lexical weights; the other options to its dense output.
        return check_selection(options);
    }
    let Some(kind) = sparse else {
        if let Some(key) = [("max_terms", options.max_terms.is_some()), ("min_weight", options.min_weight.is_some())]
            .iter()
            .find_map(|(k, set)| set.then_some(*k))
        {
            return Err(Error::InvalidOptions(format!(
                "option \"{key}\" applies to sparse models (SPLADE); this one gives dense vectors"
            )));
        }
        return Ok(Selection::default());
    };
    let dense_only = [
        ("pooling", options.pooling.is_some()),
        ("normalize", options.normalize.is_some()),
        ("dimensions", options.dimensions.is_some()),
        ("heads", options.heads.is_some()),
        ("include_prompt", options.include_prompt.is_some()),
        ("precision", options.precision.is_some_and(|p| p != crate::options::Precision::Float32)),
        ("long_input: mean_of_chunks", options.long_input == Some(LongInput::MeanOfChunks)),
    ];
    if let Some((key, _)) = dense_only.iter().find(|(_, set)| *set) {
        return Err(Error::InvalidOptions(format!(
            "option \"{key}\" applies to dense embedding models; this one is sparse ({kind})"
        )));
    }
    check_selection(options)
}

/// `max_terms` and `min_weight` checked.
fn check_selection(options: &Options) -> Result<Selection> {
    if let Some(k) = options.max_terms.filter(|k| !(1..=SPARSEVEC_MAX_NNZ).contains(k)) {
        return Err(Error::InvalidOptions(format!(
            "max_terms {k} is out of range: 1 to {SPARSEVEC_MAX_NNZ} (pgvector's limit for a sparsevec; its HNSW index takes at most 1000)"
        )));
    }
    if let Some(w) = options.min_weight.filter(|w| !(w.is_finite() && *w >= 0.0)) {
        return Err(Error::InvalidOptions(format!("min_weight {w} is out of range: a finite number, at least 0")));
    }
    Ok(Selection { max_terms: options.max_terms, min_weight: options.min_weight })
}
