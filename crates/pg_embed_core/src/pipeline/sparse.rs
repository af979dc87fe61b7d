//! The sparse output of a pipeline (task "sparse"): SpladePooling over the MLM head's
//! logits, an inference-free model's query route, or a dense output through a sparse
//! autoencoder (CSR) (`embed_sparse`, `sparse_terms`).

use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;

use super::batch::in_batches;
use super::text::{Encoded, Prompt};
use super::{Pipeline, Weights};
use crate::autoencoder::SparseAutoEncoder;
use crate::error::{Error, Result};
use crate::mlm::MlmHead;
use crate::pooling::PoolingMode;
use crate::sparse::{QueryRoute, Selection, SparseVector, Splade};
use crate::st::SparseLayout;

/// What makes a sparse vector.
pub(crate) enum SparseKind {
    /// SpladePooling over the MLM head's logits (the weights' `mlm`).
    Splade(Splade),
    /// The dense output (`pooling`, the Dense heads of the weights, `normalize`) through
    /// the weights' SparseAutoEncoder, keeping `k` latents (sentence-transformers'
    /// `max_active_dims`).
    AutoEncoder { pooling: Vec<PoolingMode>, normalize: bool, k: usize },
}

/// The sparse output stage: what makes the vectors, `max_terms` and `min_weight`, and an
/// inference-free model's routes.
pub(crate) struct SparseStage {
    pub(crate) kind: SparseKind,
    /// The vectors' dimension: the vocabulary (SPLADE), the autoencoder's hidden_dim (CSR).
    pub(crate) dim: usize,
    pub(crate) selection: Selection,
    /// The query route's SparseStaticEmbedding (an inference-free model).
    pub(crate) query: Option<QueryRoute>,
    /// The Router's document route and default route (an inference-free model).
    pub(crate) document_route: Option<String>,
    pub(crate) default_route: Option<String>,
}

impl SparseStage {
    /// The builder of a sparse encoder's output: `layout`'s SpladePooling over the MLM head
    /// of the weights (`mlm`), `selection`, and an inference-free model's query route.
    pub(crate) fn load(
        layout: &SparseLayout,
        mlm: Option<&MlmHead>,
        selection: Selection,
        query: Option<QueryRoute>,
        bdir: &Path,
    ) -> Result<Self> {
        let Some(mlm) = mlm else {
            return Err(Error::invalid_file(bdir, "the sparse model's MLM head is missing from its weights"));
        };
        Ok(SparseStage {
            kind: SparseKind::Splade(Splade::from_config(&layout.pooling, &layout.pooling_path)?),
            dim: mlm.vocab_size(),
            selection,
            query,
            document_route: layout.document_route.clone(),
            default_route: layout.default_route.clone(),
        })
    }

    /// The builder of a CSR model's output: the dense output (`pooling`, the heads,
    /// `normalize`; never truncated) through the SparseAutoEncoder `sae`,
    /// keeping `max_terms` latents, else the model's `max_active_dims`
    /// (config_sentence_transformers.json), else the autoencoder's `k`, as
    /// `SparseEncoder.encode` does; more than its hidden_dim is refused.
    pub(crate) fn autoencoder(
        sae: &SparseAutoEncoder,
        (pooling, normalize): (Vec<PoolingMode>, bool),
        selection: Selection,
        max_active_dims: Option<usize>,
        config: &Path,
    ) -> Result<Self> {
        let k = match (selection.max_terms, max_active_dims) {
            (Some(k), _) if k > sae.hidden_dim => {
                return Err(Error::InvalidOptions(format!(
                    "max_terms {k} exceeds the sparse autoencoder's hidden_dim {}",
                    sae.hidden_dim
                )))
            }
            (Some(k), _) => k,
            (None, Some(k)) if k == 0 || k > sae.hidden_dim => {
                return Err(Error::invalid_file(
                    config,
                    format!("max_active_dims {k} is out of range: 1 to the autoencoder's hidden_dim {}", sae.hidden_dim),
                ))
            }
            (None, Some(k)) => k,
            (None, None) => sae.k,
        };
        Ok(SparseStage {
            kind: SparseKind::AutoEncoder { pooling, normalize, k },
            dim: sae.hidden_dim,
            selection,
            query: None,
            document_route: None,
            default_route: None,
        })
    }

    pub(crate) fn describe(&self, weights: &Weights) -> serde_json::Value {
        let splade = match &self.kind {
            SparseKind::Splade(splade) => splade,
            SparseKind::AutoEncoder { pooling, normalize, k } => {
                return serde_json::json!({
                    "autoencoder": weights.sae.as_ref().map(SparseAutoEncoder::describe),
                    "max_active_dims": k,
                    "pooling": pooling,
                    "normalize": normalize,
                    "dim": self.dim,
                    "max_terms": self.selection.max_terms,
                    "min_weight": self.selection.min_weight,
                })
            }
        };
        serde_json::json!({
            "mlm_head": weights.mlm.as_ref().map(crate::mlm::MlmHead::describe),
            "pooling_strategy": splade.strategy,
            "activation_function": splade.activation,
            "vocab_size": self.dim,
            "max_terms": self.selection.max_terms,
            "min_weight": self.selection.min_weight,
            "query_route": self.query.as_ref().map(|q| q.name.clone()),
            "document_route": self.document_route,
            "default_route": self.default_route,
        })
    }
}

/// How many consecutive tokens' logits the MLM head computes at once ([tokens, vocab]
/// floats: 128 x 30,522 is 15.6 MB).
const LOGIT_ROWS: usize = 128;

impl Pipeline {
    /// Sparse vectors of the inputs, in input order, as sentence-transformers' SparseEncoder
    /// gives them, then `max_terms` and `min_weight` applied. `prompt_name`: for an
    /// inference-free model, the Router's route ("query" is `encode_query`'s, "document"
    /// `encode_document`'s; `None` the default route), with the prompt of that name if the
    /// model has one; otherwise a named prompt as for `embed` (`None`: the default prompt,
    /// `Some("")`: none). Batched as `embed_batched`.
    pub fn embed_sparse(
        &self,
        texts: &[&str],
        prompt_name: Option<&str>,
        max_batch_tokens: usize,
        threads: usize,
        mut before_batch: impl FnMut() -> Result<()>,
    ) -> Result<Vec<SparseVector>> {
        if self.outputs.lexical().is_some() {
            // bge-m3's lexical weights: one side for queries and documents ('' too).
            crate::late::Side::parse(prompt_name.filter(|n| !n.is_empty()))?;
            return self.m3_sparse(texts, max_batch_tokens, threads, before_batch);
        }
        let sparse = self.outputs.sparse("embed_sparse")?;
        let (query, prompt) = self.route(sparse, prompt_name)?;
        if let Some(query) = query {
            let mut tokens = 0;
            let out = texts
                .iter()
                .map(|text| {
                    let text = match prompt {
                        Some(p) => std::borrow::Cow::Owned(format!("{}{text}", p.text)),
                        None => std::borrow::Cow::Borrowed(*text),
                    };
                    let (v, n) = query.encode(&text)?;
                    tokens += n;
                    Ok(v.select(&sparse.selection))
                })
                .collect::<Result<Vec<_>>>()?;
            self.stats.count_call(texts.len(), tokens);
            return Ok(out);
        }
        let prepared = self.prepare_prompted(texts, prompt, threads)?;
        let encoded = &prepared.rows;
        let lengths: Vec<usize> = encoded.iter().map(|r| r.ids.len()).collect();
        in_batches(&lengths, max_batch_tokens, threads, &mut before_batch, |batch| {
            let rows: Vec<&Encoded> = batch.iter().map(|&i| &encoded[i]).collect();
            self.sparse_encoded(sparse, &rows)
        })
    }

    /// The route and the prompt of `prompt_name` (see `embed_sparse`): the query route's
    /// SparseStaticEmbedding, or None for the MLM side.
    fn route<'a>(
        &'a self,
        sparse: &'a SparseStage,
        prompt_name: Option<&str>,
    ) -> Result<(Option<&'a QueryRoute>, Option<&'a Prompt>)> {
        let routes = [sparse.query.as_ref().map(|q| q.name.as_str()), sparse.document_route.as_deref()];
        let route_name = prompt_name.filter(|n| routes.contains(&Some(*n)));
        let Some(route) = route_name.or(prompt_name.is_none().then_some(sparse.default_route.as_deref()).flatten())
        else {
            return Ok((None, self.prompt(prompt_name)?));
        };
        // A route's prompt, when the model names one (sentence-transformers' encode_query
        // uses the "query" prompt if there is one).
        let prompt = match self.text()?.prompts.get(route) {
            Some(p) if !p.text.is_empty() => Some(p),
            _ => None,
        };
        let query = sparse.query.as_ref().filter(|q| q.name == route);
        Ok((query, prompt))
    }

    /// One batch through the backbone, the MLM head (in pieces of `LOGIT_ROWS` tokens) and
    /// SpladePooling, or through the dense output and the sparse autoencoder: one sparse
    /// vector per row.
    fn sparse_encoded(&self, sparse: &SparseStage, rows: &[&Encoded]) -> Result<Vec<SparseVector>> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let splade = match &sparse.kind {
            SparseKind::Splade(splade) => splade,
            SparseKind::AutoEncoder { pooling, normalize, k } => {
                let Some(sae) = self.weights.sae.as_ref() else {
                    return Err(Error::Inference("the sparse model has no sparse autoencoder".into()));
                };
                let mut embedded = self.apply_heads(self.forward_pooled(rows, pooling, self.weights.backbone.as_ref())?, None)?;
                if *normalize {
                    crate::pooling::l2_normalize(&mut embedded);
                }
                return Ok(sae.encode(&embedded, *k).into_iter().map(|v| v.select(&sparse.selection)).collect());
            }
        };
        let Some(head) = self.weights.mlm.as_ref() else {
            return Err(Error::Inference("the sparse model has no MLM head".into()));
        };
        let packed = self.packed(rows);
        let batch = packed.batch();
        self.stats.forward_passes.fetch_add(1, Relaxed);
        let hidden = self.weights.backbone.forward(&batch).map_err(Error::inference)?;
        let h = self.hidden_size;
        Ok((0..batch.len())
            .map(|i| {
                let tokens = &hidden[batch.sequence(i).start * h..batch.sequence(i).end * h];
                let pooled = splade.pool(sparse.dim, tokens.chunks(LOGIT_ROWS * h).map(|x| head.logits(x)));
                SparseVector::from_dense(&pooled).select(&sparse.selection)
            })
            .collect())
    }

    /// The terms of an input's sparse vector (default route), best first: each vocabulary
    /// id's token and weight, after `max_terms` and `min_weight`. A CSR model's latents are
    /// no tokens (sentence-transformers' `decode` looks their ids up in the vocabulary all
    /// the same): its terms are the latent ids, 0-based as sentence-transformers numbers
    /// them.
    pub fn sparse_terms(&self, text: &str, threads: usize) -> Result<Vec<(String, f32)>> {
        if self.outputs.lexical().is_some() {
            let mut vectors = self.m3_sparse(&[text], usize::MAX, threads, || Ok(()))?;
            let vector = vectors.pop().ok_or_else(|| Error::Inference("no output for the input".into()))?;
            let token = |id: u32| self.text().ok().and_then(|t| t.tokenizer.id_to_token(id));
            return Ok(vector.ranked().into_iter().map(|(id, w)| (token(id).unwrap_or_else(|| format!("[{id}]")), w)).collect());
        }
        let sparse = self.outputs.sparse("embed.sparse_terms")?;
        let (query, _) = self.route(sparse, None)?;
        let mut vectors = self.embed_sparse(&[text], None, usize::MAX, threads, || Ok(()))?;
        let vector = vectors.pop().ok_or_else(|| Error::Inference("no output for the input".into()))?;
        if let SparseKind::AutoEncoder { .. } = sparse.kind {
            return Ok(vector.ranked().into_iter().map(|(id, w)| (id.to_string(), w)).collect());
        }
        let token = |id: u32| match query {
            Some(q) => q.token(id),
            None => self.text().ok().and_then(|t| t.tokenizer.id_to_token(id)),
        };
        Ok(vector.ranked().into_iter().map(|(id, w)| (token(id).unwrap_or_else(|| format!("[{id}]")), w)).collect())
    }
}
