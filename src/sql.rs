//! The SQL surface: the inference and management functions (errors become ERRORs in
//! `crate::error`).

use pgrx::prelude::*;
use pgrx::JsonB;

use crate::cache;
use crate::error::{raise, OrRaise};
use crate::guc;
use pg_embed_core::error::{Error, Result};
use pg_embed_core::pipeline::Pipeline;
use pg_embed_core::threads;

/// A call of `function` on a registered model: its pipeline, counted in embed.stat_models
/// when the call ends (see `stats::Call`).
fn model_call(model: &str, function: &'static str) -> crate::stats::Call {
    let (pipeline, row) = cache::get(model).or_raise();
    crate::stats::Call::new(model, &row.source, function, pipeline)
}

fn required<'a>(value: Option<&'a str>, what: &'static str) -> Result<&'a str> {
    value.ok_or(Error::NullArgument { what })
}

/// `embed(model, input)`: the input's embedding as `real[]` (castable to pgvector's `vector`).
#[pg_extern(immutable, strict, parallel_safe)]
fn embed(model: &str, input: &str) -> Vec<f32> {
    embed_one(model, input, None)
}

/// `embed(model, input, prompt_name)`: with the named prompt of the model prepended, as
/// sentence-transformers' `encode(input, prompt_name=...)`; `''` means no prompt.
#[pg_extern(immutable, strict, parallel_safe, name = "embed")]
fn embed_with_prompt(model: &str, input: &str, prompt_name: &str) -> Vec<f32> {
    embed_one(model, input, Some(prompt_name))
}

fn embed_one(model: &str, input: &str, prompt_name: Option<&str>) -> Vec<f32> {
    let pipeline = model_call(model, "embed");
    crate::check_interrupts();
    let pipeline: &Pipeline = &pipeline;
    // A static model costs about what its tokenizer costs: no compute threads.
    let mut vectors = if pipeline.is_static() {
        pipeline.embed_with_prompt(&[input], prompt_name)
    } else {
        threads::run(guc::threads(), || pipeline.embed_with_prompt(&[input], prompt_name)).and_then(|r| r)
    }
    .or_raise();
    vectors.pop().unwrap_or_else(|| raise(Error::Inference("no output for the input".into())))
}

/// `embed_sparse(model, input)`: the input's sparse vector (a SPLADE, inference-free or CSR
/// sparse encoder) as pgvector's `sparsevec` text, `{id:weight,...}/dimension` (the
/// vocabulary; a CSR model's latents) with 1-based ids: cast it with `::sparsevec`.
#[pg_extern(immutable, strict, parallel_safe)]
fn embed_sparse(model: &str, input: &str) -> String {
    sparse_one(model, input, None)
}

/// `embed_sparse(model, input, prompt_name)`: for an inference-free model, `'query'` takes
/// the query route (sentence-transformers' `encode_query`: a weight per token, no model
/// run) and `'document'` the document route; otherwise a named prompt, as with `embed`.
#[pg_extern(immutable, strict, parallel_safe, name = "embed_sparse")]
fn embed_sparse_with_prompt(model: &str, input: &str, prompt_name: &str) -> String {
    sparse_one(model, input, Some(prompt_name))
}

fn sparse_one(model: &str, input: &str, prompt_name: Option<&str>) -> String {
    let pipeline = model_call(model, "embed_sparse");
    crate::check_interrupts();
    let mut vectors = sparse_batched(&pipeline, &[input], prompt_name);
    let vector = vectors.pop().unwrap_or_else(|| raise(Error::Inference("no output for the input".into())));
    vector.to_sparsevec_text()
}

/// Sparse vectors of `inputs` in batches of up to `pg_embed.max_batch_tokens` tokens on
/// `pg_embed.threads` threads, checking for cancel before each batch.
fn sparse_batched(
    pipeline: &Pipeline,
    inputs: &[&str],
    prompt_name: Option<&str>,
) -> Vec<pg_embed_core::sparse::SparseVector> {
    pipeline
        .embed_sparse(inputs, prompt_name, guc::max_batch_tokens(), guc::threads(), interrupts)
        .or_raise()
}

/// `embed_sparse(model, inputs text[])`: one row per input, in input order (a NULL element
/// gives a NULL row), batched as `embed(model, text[])`.
#[pg_extern(immutable, strict, parallel_safe, name = "embed_sparse")]
fn embed_sparse_array(model: &str, inputs: pgrx::Array<&str>) -> SetOfIterator<'static, Option<String>> {
    let pipeline = model_call(model, "embed_sparse");
    let all: Vec<Option<&str>> = inputs.iter().collect();
    let present: Vec<&str> = all.iter().flatten().copied().collect();
    let mut vectors = sparse_batched(&pipeline, &present, None).into_iter();
    let rows: Vec<Option<String>> =
        all.iter().map(|input| input.and_then(|_| vectors.next().map(|v| v.to_sparsevec_text()))).collect();
    SetOfIterator::new(rows)
}

/// `embed_multi(model, input)`: the input's token vectors (late interaction: ColBERT,
/// bge-m3) as a 2-D `real[]`, one row per kept token, as a document.
#[pg_extern(immutable, strict, parallel_safe)]
fn embed_multi(model: &str, input: &str) -> crate::late::Matrix {
    multi_one(model, input, None)
}

/// `embed_multi(model, input, prompt_name)`: `'query'` encodes the input as a ColBERT query
/// (its prefix, expanded to the query length), `'document'` as a document (the default).
#[pg_extern(immutable, strict, parallel_safe, name = "embed_multi")]
fn embed_multi_with_prompt(model: &str, input: &str, prompt_name: &str) -> crate::late::Matrix {
    multi_one(model, input, Some(prompt_name))
}

fn multi_one(model: &str, input: &str, prompt_name: Option<&str>) -> crate::late::Matrix {
    let pipeline = model_call(model, "embed_multi");
    crate::check_interrupts();
    let mut out = multi_batched(&pipeline, &[input], prompt_name);
    let m = out.pop().unwrap_or_else(|| raise(Error::Inference("no output for the input".into())));
    m.into()
}

/// Token vectors of `inputs` in batches of up to `pg_embed.max_batch_tokens` tokens on
/// `pg_embed.threads` threads, checking for cancel before each batch.
fn multi_batched(pipeline: &Pipeline, inputs: &[&str], prompt_name: Option<&str>) -> Vec<pg_embed_core::late::MultiVector> {
    pipeline
        .embed_multi(inputs, prompt_name, guc::max_batch_tokens(), guc::threads(), interrupts)
        .or_raise()
}

/// `embed_multi(model, inputs text[])`: one 2-D array per input (as documents), in input
/// order (a NULL element gives a NULL row), batched as `embed(model, text[])`.
#[pg_extern(immutable, strict, parallel_safe, name = "embed_multi")]
fn embed_multi_array(model: &str, inputs: pgrx::Array<&str>) -> SetOfIterator<'static, Option<crate::late::Matrix>> {
    let pipeline = model_call(model, "embed_multi");
    let all: Vec<Option<&str>> = inputs.iter().collect();
    let present: Vec<&str> = all.iter().flatten().copied().collect();
    let mut out = multi_batched(&pipeline, &present, None).into_iter();
    let rows: Vec<Option<crate::late::Matrix>> = all
        .iter()
        .map(|input| input.and_then(|_| out.next().map(crate::late::Matrix::from)))
        .collect();
    SetOfIterator::new(rows)
}

/// `embed(model, inputs text[])`: one row per input, in input order (a NULL element gives a
/// NULL row), computed in batches of up to `pg_embed.max_batch_tokens` tokens grouped by
/// length; cancel and statement_timeout are checked between batches.
#[pg_extern(immutable, strict, parallel_safe, name = "embed")]
fn embed_array(model: &str, inputs: pgrx::Array<&str>) -> SetOfIterator<'static, Option<Vec<f32>>> {
    let pipeline = model_call(model, "embed");
    let all: Vec<Option<&str>> = inputs.iter().collect();
    let present: Vec<&str> = all.iter().flatten().copied().collect();
    let mut vectors = pipeline
        .embed_batched(&present, guc::max_batch_tokens(), guc::threads(), interrupts)
        .or_raise()
        .into_iter();
    let rows: Vec<Option<Vec<f32>>> = all.iter().map(|input| input.and_then(|_| vectors.next())).collect();
    SetOfIterator::new(rows)
}

/// `classify(model, input)`: the raw logits of a sequence-classification model.
#[pg_extern(immutable, strict, parallel_safe)]
fn classify(model: &str, input: &str) -> Vec<f32> {
    logits(model, input, None)
}

/// `classify(model, input, pair)`: the raw logits for a sentence pair; for a causal-LM
/// reranker (input the query, pair the document) its raw LogitScore.
#[pg_extern(immutable, strict, parallel_safe, name = "classify")]
fn classify_pair(model: &str, input: &str, pair: &str) -> Vec<f32> {
    logits(model, input, Some(pair))
}

/// `pair`: None for a single input; Some("") is no pair for a sequence-pair classifier (see
/// `Pipeline::pair_argument`), an empty document for a causal-LM reranker (as CrossEncoder).
fn logits(model: &str, input: &str, pair: Option<&str>) -> Vec<f32> {
    let pipeline = model_call(model, "classify");
    let pair = match pair {
        Some(p) if !pipeline.scores_pairs() => Pipeline::pair_argument(p),
        other => other,
    };
    let mut out = classify_batched(&pipeline, &[(input, pair)]);
    out.pop().unwrap_or_else(|| raise(Error::Inference("no output for the input".into())))
}

/// Logits of `inputs` in batches of up to `pg_embed.max_batch_tokens` tokens on
/// `pg_embed.threads` threads, checking for cancel before each batch.
fn classify_batched(pipeline: &Pipeline, inputs: &[(&str, Option<&str>)]) -> Vec<Vec<f32>> {
    pipeline
        .classify_batched(inputs, guc::max_batch_tokens(), guc::threads(), interrupts)
        .or_raise()
}

/// `classify_labels(model, input)`: (label, score) best first; softmax for
/// single-label, sigmoid for multi-label classification, the raw value for regression.
#[pg_extern(immutable, strict, parallel_safe)]
fn classify_labels(
    model: &str,
    input: &str,
) -> TableIterator<'static, (name!(label, String), name!(score, f32))> {
    label_scores(model, input, None)
}

/// `classify_labels(model, input, pair)`: the same for a sentence pair.
#[pg_extern(immutable, strict, parallel_safe, name = "classify_labels")]
fn classify_labels_pair(
    model: &str,
    input: &str,
    pair: &str,
) -> TableIterator<'static, (name!(label, String), name!(score, f32))> {
    label_scores(model, input, Pipeline::pair_argument(pair))
}

fn label_scores(model: &str, input: &str, pair: Option<&str>) -> TableIterator<'static, (String, f32)> {
    let pipeline = model_call(model, "classify_labels");
    let classifier = pipeline.classifier().or_raise();
    let logits = classify_batched(&pipeline, &[(input, pair)]);
    TableIterator::new(logits.first().map(|l| classifier.scores(l)).unwrap_or_default())
}

/// `rerank(model, query, documents)`: (idx, score) best first, idx 1-based into
/// `documents`; scores as sentence-transformers' CrossEncoder.predict reports them.
/// The documents are scored in batches of up to `pg_embed.max_batch_tokens` tokens.
#[pg_extern(immutable, strict, parallel_safe)]
fn rerank(
    model: &str,
    query: &str,
    documents: pgrx::Array<&str>,
) -> TableIterator<'static, (name!(idx, i32), name!(score, f32))> {
    let pipeline = model_call(model, "rerank");
    let sigmoid = pipeline.rerank_sigmoid().or_raise();
    let mut inputs: Vec<(&str, Option<&str>)> = Vec::with_capacity(documents.len());
    for (i, doc) in documents.iter().enumerate() {
        match doc {
            Some(doc) => inputs.push((query, Some(doc))),
            None => raise(Error::NullElement { what: "documents", index: i + 1 }),
        }
    }
    let logits = classify_batched(&pipeline, &inputs);
    let mut scored: Vec<(i32, f32)> = logits
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let s = l[0];
            (i as i32 + 1, if sigmoid { pg_embed_core::classifier::sigmoid(s) } else { s })
        })
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    TableIterator::new(scored)
}

/// Checks for cancel and statement_timeout, between batches (the `before_batch` of the
/// batched pipeline calls).
fn interrupts() -> Result<()> {
    crate::check_interrupts();
    Ok(())
}

/// `images` (image files: PNG, JPEG, WebP, GIF, BMP, TIFF) through an image model, batched
/// under `pg_embed.max_batch_tokens` (patches count as tokens), refusing any larger than
/// `pg_embed.max_image_pixels` from its header.
fn run_images(pipeline: &Pipeline, images: &[&[u8]], classify: bool) -> Vec<Vec<f32>> {
    let (pixels, tokens, threads) = (guc::max_image_pixels(), guc::max_batch_tokens(), guc::threads());
    if classify {
        pipeline.classify_images(images, pixels, tokens, threads, interrupts)
    } else {
        pipeline.embed_images(images, pixels, tokens, threads, interrupts)
    }
    .or_raise()
}

/// `embed_image(model, image)`: the image's embedding as `real[]`; on a CLIP model in the
/// same space as `embed(model, text)`.
#[pg_extern(immutable, strict, parallel_safe)]
fn embed_image(model: &str, image: &[u8]) -> Vec<f32> {
    let pipeline = model_call(model, "embed_image");
    let mut out = run_images(&pipeline, &[image], false);
    out.pop().unwrap_or_else(|| raise(Error::Inference("no output for the image".into())))
}

/// `embed_image(model, images bytea[])`: one row per image, in input order (a NULL element
/// gives a NULL row), in batches with cancel checked between them.
#[pg_extern(immutable, strict, parallel_safe, name = "embed_image")]
fn embed_image_array(model: &str, images: pgrx::Array<&[u8]>) -> SetOfIterator<'static, Option<Vec<f32>>> {
    let pipeline = model_call(model, "embed_image");
    let all: Vec<Option<&[u8]>> = images.iter().collect();
    let present: Vec<&[u8]> = all.iter().flatten().copied().collect();
    let mut vectors = run_images(&pipeline, &present, false).into_iter();
    let rows: Vec<Option<Vec<f32>>> = all.iter().map(|image| image.and_then(|_| vectors.next())).collect();
    SetOfIterator::new(rows)
}

/// `classify_image(model, image)`: the raw logits of an image-classification model.
#[pg_extern(immutable, strict, parallel_safe)]
fn classify_image(model: &str, image: &[u8]) -> Vec<f32> {
    let pipeline = model_call(model, "classify_image");
    let mut out = run_images(&pipeline, &[image], true);
    out.pop().unwrap_or_else(|| raise(Error::Inference("no output for the image".into())))
}

/// `classify_image_labels(model, image)`: (label, score) best first, scored as
/// `classify_labels` scores text.
#[pg_extern(immutable, strict, parallel_safe)]
fn classify_image_labels(
    model: &str,
    image: &[u8],
) -> TableIterator<'static, (name!(label, String), name!(score, f32))> {
    let pipeline = model_call(model, "classify_image_labels");
    let classifier = pipeline.classifier().or_raise();
    let logits = run_images(&pipeline, &[image], true);
    TableIterator::new(logits.first().map(|l| classifier.scores(l)).unwrap_or_default())
}

/// Test builds only (`pg_test` feature): panics on the backend's thread, on a compute
/// thread, or in one chunk of a team step, to show that a panic anywhere becomes an ERROR of
/// the statement and the session goes on.
#[cfg(feature = "pg_test")]
#[pg_extern(name = "_panic_for_test")]
fn panic_for_test(place: &str) -> i32 {
    match place {
        "backend" => panic!("test panic on the backend thread"),
        "compute" => threads::run(2, || -> i32 { panic!("test panic on a compute thread") }).or_raise(),
        "team" => threads::run(2, || {
            threads::team(2, |m| {
                m.step(4, |c| {
                    if c == 3 {
                        panic!("test panic in a team step");
                    }
                })
            });
            0
        })
        .or_raise(),
        other => {
            raise(Error::InvalidArgument { what: "place", reason: format!("unknown place \"{other}\"") })
        }
    }
}

#[pg_schema]
mod embed {
    use super::*;
    use crate::catalog;
    use pg_embed_core::hub::Pin;
    use pg_embed_core::options::Options;

    fn require_admin(action: &'static str) -> Result<()> {
        if catalog::is_admin() {
            Ok(())
        } else {
            Err(Error::PermissionDenied { action })
        }
    }

    fn valid_name(name: Option<&str>) -> Result<&str> {
        let name = required(name, "model name")?;
        if name.trim().is_empty() || name.trim() != name || name.chars().any(char::is_control) {
            return Err(Error::InvalidModelName(name.into()));
        }
        Ok(name)
    }

    fn describe(name: &str, source: &str, revision: i64, pin: Option<&Pin>, pipeline: &Pipeline) -> JsonB {
        let mut info = serde_json::to_value(pipeline.info()).unwrap_or_default();
        if let Some(obj) = info.as_object_mut() {
            obj.insert("name".into(), name.into());
            obj.insert("source".into(), source.into());
            obj.insert("revision".into(), revision.into());
            if let Some(pin) = pin {
                obj.insert("resolved_revision".into(), pin.commit.clone().into());
                obj.insert("file_sha256".into(), serde_json::json!(pin.files));
            }
        }
        JsonB(info)
    }

    /// `embed.encode_all(model, input)`: bge-m3's three outputs from one forward pass: the
    /// dense vector (as `embed`), the lexical weights as `sparsevec` text (as `embed_sparse`)
    /// and the token vectors as a 2-D array (as `embed_multi`).
    #[pg_extern(immutable, strict, parallel_safe)]
    fn encode_all(
        model: &str,
        input: &str,
    ) -> TableIterator<'static, (name!(dense, Vec<f32>), name!(sparse, String), name!(multi, crate::late::Matrix))> {
        let pipeline = model_call(model, "encode_all");
        crate::check_interrupts();
        let pipeline: &Pipeline = &pipeline;
        let all = threads::run(guc::threads(), || pipeline.encode_outputs(input)).and_then(|r| r).or_raise();
        TableIterator::once((all.dense, all.sparse.to_sparsevec_text(), all.multi.into()))
    }

    /// Registers (or re-registers) a model under `name`, loading it once to validate it.
    /// Returns the resolved pipeline, as `embed.model_info` shows it.
    #[pg_extern(volatile, parallel_unsafe)]
    fn register_model(
        name: Option<&str>,
        source: Option<&str>,
        options: default!(Option<crate::jsonb::JsonbArg>, "'{}'"),
    ) -> JsonB {
        require_admin("register models").or_raise();
        catalog::require_primary("embed.register_model").or_raise();
        let name = valid_name(name).or_raise();
        let source = required(source, "source").or_raise();
        let options_json = match options.map(|o| o.0) {
            None => raise(Error::NullArgument { what: "options" }),
            Some(Ok(json)) => json,
            Some(Err((text, why))) => {
                let shown: String = text.chars().take(80).collect();
                let more = if shown.len() < text.len() { "..." } else { "" };
                raise(Error::InvalidOptions(format!("{why}: {shown}{more}")))
            }
        };
        let parsed = Options::from_json(&options_json).or_raise();
        let fresh = cache::load(name, source, &parsed, None).or_raise();
        // The shared file is in place when registration returns.
        cache::wait_written(name, &fresh);
        let pin = fresh.pin.clone();
        let user = catalog::current_user().or_raise();
        let revision =
            catalog::upsert(name, source, &options_json, fresh.pipeline.info(), pin.as_ref(), &user)
                .or_raise();
        catalog::cluster_apply("register", name, Some(source), Some(&options_json)).or_raise();
        let pipeline = cache::insert(name, revision, fresh);
        remove_unneeded_files();
        describe(name, source, revision, pin.as_ref(), &pipeline)
    }

    /// Removes the shared weight files no registration needs any more (a dropped or
    /// re-registered model's); a failure is a warning, never the caller's error.
    fn remove_unneeded_files() {
        if let Err(e) = cache::cleanup() {
            pgrx::warning!("pg_embed: shared weight files were not cleaned up: {e}");
        }
    }

    /// Removes a registration. Rows embedded with it keep their vectors.
    #[pg_extern(volatile, parallel_unsafe)]
    fn drop_model(name: Option<&str>) {
        require_admin("drop models").or_raise();
        catalog::require_primary("embed.drop_model").or_raise();
        let name = required(name, "model name").or_raise();
        if !catalog::delete(name).or_raise() {
            raise(Error::ModelNotRegistered(name.into()));
        }
        catalog::cluster_apply("drop", name, None, None).or_raise();
        cache::evict(name);
        remove_unneeded_files();
    }

    /// Run by the upgrade to 0.7.0 (`ALTER EXTENSION pg_embed UPDATE`): each registration
    /// of a folder that this version computes differently from 0.6
    /// (`pg_embed_core::changes`) is named in a WARNING and marked, so that its calls fail
    /// until it is registered again, and vectors stored from it are never silently mixed
    /// with different new ones. A folder that cannot be read is left as it is (its calls
    /// say why), with a WARNING. Returns how many registrations were marked.
    #[pg_extern(volatile, parallel_unsafe, name = "_mark_changed_registrations")]
    fn mark_changed_registrations() -> i32 {
        let mut marked = 0;
        for (name, row) in catalog::all_rows().or_raise() {
            let reason = Options::from_json(&row.options).and_then(|options| {
                Ok(pg_embed_core::changes::since_0_6(&cache::folder_of(&row)?, &options))
            });
            match reason {
                Ok(Some(reason)) => {
                    catalog::mark_register_again(&name, &reason).or_raise();
                    // A WARNING: PostgreSQL runs an extension script with client_min_messages
                    // at warning or above, so a NOTICE would never reach the one upgrading.
                    pgrx::warning!(
                        "pg_embed: model \"{name}\" must be registered again (SELECT embed.register_model('{name}', source, options) with its source and options): {reason}; vectors stored from it were computed by 0.6"
                    );
                    marked += 1;
                }
                Ok(None) => {}
                Err(e) => pgrx::warning!("pg_embed: could not check model \"{name}\" for the upgrade: {e}"),
            }
        }
        marked
    }

    /// The files of a registered model's folder and the sha256 of each, as this server
    /// reads them now (`embed.cluster_check` compares them between the nodes of a cluster).
    #[pg_extern(volatile, strict, parallel_restricted)]
    fn model_files(name: &str) -> TableIterator<'static, (name!(file, String), name!(sha256, String))> {
        let row = catalog::lookup(name).or_raise();
        TableIterator::new(cache::file_digests(&row).or_raise())
    }

    /// The resolved pipeline of a registered model: architecture, pooling, heads,
    /// normalize, dim, max_length, parameters.
    /// `embed.sparse_terms(model, input)`: the terms of the input's sparse vector, best
    /// first: each vocabulary id's token and weight (why a document matched); a CSR
    /// model's latent ids (0-based), its latents being no tokens.
    #[pg_extern(immutable, strict, parallel_safe)]
    fn sparse_terms(
        model: &str,
        input: &str,
    ) -> TableIterator<'static, (name!(token, String), name!(weight, f32))> {
        let pipeline = model_call(model, "sparse_terms");
        crate::check_interrupts();
        TableIterator::new(pipeline.sparse_terms(input, guc::threads()).or_raise())
    }

    #[pg_extern(volatile, strict, parallel_restricted)]
    fn model_info(name: &str) -> JsonB {
        let (pipeline, row) = cache::get(name).or_raise();
        describe(name, &row.source, row.revision, row.pin.as_ref(), &pipeline)
    }

    /// The models loaded in this backend's cache, with what they cost and how much they
    /// were used since they were loaded.
    #[pg_extern(volatile, parallel_restricted)]
    fn loaded_models() -> TableIterator<
        'static,
        (
            name!(name, String),
            name!(task, String),
            name!(dim, i32),
            name!(parameters, i64),
            name!(bytes_resident, i64),
            name!(bytes_shared, i64),
            name!(bytes_private, i64),
            name!(shared_file, Option<String>),
            name!(precision, String),
            name!(kernel, String),
            name!(load_ms, f64),
            name!(calls, i64),
            name!(inputs, i64),
            name!(tokens, i64),
            name!(truncated_inputs, i64),
            name!(chunked_inputs, i64),
            name!(forward_passes, i64),
            name!(revision, i64),
        ),
    > {
        let count = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed) as i64;
        let rows: Vec<_> = cache::loaded()
            .into_iter()
            .map(|m| {
                let (info, stats) = (m.pipeline.info(), m.pipeline.stats());
                (
                    m.name,
                    info.task.to_string(),
                    info.dim as i32,
                    info.parameters as i64,
                    m.bytes_resident as i64,
                    m.pipeline.sharing().shared_bytes as i64,
                    m.bytes_private as i64,
                    m.pipeline.sharing().file.as_ref().map(|f| f.display().to_string()),
                    info.precision.name().to_string(),
                    m.pipeline.kernel(),
                    m.load_ms,
                    count(&stats.calls),
                    count(&stats.inputs),
                    count(&stats.tokens),
                    count(&stats.truncated),
                    count(&stats.chunked),
                    count(&stats.forward_passes),
                    m.revision,
                )
            })
            .collect();
        TableIterator::new(rows)
    }

    /// The shared prepared-weights files of `pg_embed.cache_dir`: the model and source each
    /// was built for, its size, when it was written, whether some backend maps it now and
    /// whether a registered model needs it. Temporary files of a write in progress (or of
    /// one that died) are listed with no model.
    #[pg_extern(volatile, parallel_restricted)]
    fn cache_files() -> TableIterator<
        'static,
        (
            name!(file, String),
            name!(model, Option<String>),
            name!(source, Option<String>),
            name!(bytes, i64),
            name!(created, Option<pgrx::datum::TimestampWithTimeZone>),
            name!(in_use, bool),
            name!(needed, bool),
        ),
    > {
        require_admin("list the shared weight files").or_raise();
        let Some(store) = cache::store().or_raise() else { return TableIterator::new(Vec::new()) };
        // A directory this server cannot write shares nothing: say so (58030), not "no files".
        store.check_writable().or_raise();
        let needed = cache::needed_keys(&store).or_raise();
        let rows: Vec<_> = store
            .list()
            .or_raise()
            .into_iter()
            .filter(|f| !f.path.extension().is_some_and(|e| e == "lock"))
            .map(|f| {
                let header = f.header.clone();
                (
                    f.path.display().to_string(),
                    header.as_ref().map(|h| h.model.clone()),
                    header.as_ref().map(|h| h.source.clone()),
                    f.bytes as i64,
                    header.as_ref().and_then(|h| timestamp(h.created)),
                    f.in_use,
                    f.key().is_some_and(|k| needed.contains(k)),
                )
            })
            .collect();
        TableIterator::new(rows)
    }

    /// Removes the shared weight files no registered model needs (and temporary files no
    /// backend is writing); returns what it removed. Backends that still map a removed
    /// file keep using it until they reload.
    #[pg_extern(volatile, parallel_unsafe)]
    fn cache_cleanup() -> TableIterator<'static, (name!(file, String), name!(model, Option<String>), name!(bytes, i64))> {
        require_admin("clean up the shared weight files").or_raise();
        let removed = cache::cleanup().or_raise();
        TableIterator::new(
            removed
                .into_iter()
                .map(|f| (f.path.display().to_string(), f.header.map(|h| h.model), f.bytes as i64))
                .collect::<Vec<_>>(),
        )
    }

    /// Seconds since the Unix epoch as a timestamptz.
    fn timestamp(unix: u64) -> Option<pgrx::datum::TimestampWithTimeZone> {
        const POSTGRES_EPOCH: i64 = 946_684_800;
        let micros = (i64::try_from(unix).ok()? - POSTGRES_EPOCH).checked_mul(1_000_000)?;
        pgrx::datum::TimestampWithTimeZone::try_from(micros).ok()
    }

    /// Drops `name` (all models when NULL) from this backend's cache; returns how many were
    /// dropped. Other sessions and the registration are not affected; the next call loads
    /// the model again.
    #[pg_extern(volatile, parallel_restricted)]
    fn unload(name: default!(Option<&str>, "NULL")) -> i32 {
        cache::unload(name) as i32
    }

    /// Loads the models named in pg_embed.preload into this backend's cache (the login event
    /// trigger `embed_preload` calls it); returns how many are loaded.
    #[pg_extern(volatile, parallel_restricted)]
    fn preload() -> i32 {
        let names = guc::preload();
        for name in &names {
            cache::get(name).or_raise();
        }
        names.len() as i32
    }

    /// `input` split into chunks of at most `max_tokens` tokens of the model's tokenizer
    /// (special tokens not counted), cut at sentence ends or between words where possible;
    /// consecutive chunks share about `overlap` tokens. `start_char` and `end_char` are
    /// 0-based character offsets, end exclusive: `chunk = substr(input, start_char + 1,
    /// end_char - start_char)`.
    #[pg_extern(immutable, strict, parallel_safe)]
    fn chunk(
        model: &str,
        input: &str,
        max_tokens: i32,
        overlap: default!(i32, 0),
    ) -> TableIterator<
        'static,
        (name!(idx, i32), name!(chunk, String), name!(start_char, i32), name!(end_char, i32)),
    > {
        let (pipeline, _) = cache::get(model).or_raise();
        if overlap < 0 {
            raise(Error::InvalidArgument { what: "overlap", reason: format!("{overlap} is negative") });
        }
        let chunks = pipeline.chunk(input, max_tokens.max(0) as usize, overlap as usize).or_raise();
        // Starts and ends both increase from chunk to chunk: one pass each.
        let (mut starts, mut ends) = (CharIndex::new(input), CharIndex::new(input));
        let rows: Vec<_> = chunks
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                let (start, end) = (starts.at(c.bytes.start), ends.at(c.bytes.end));
                (i as i32 + 1, input[c.bytes].to_string(), start as i32, end as i32)
            })
            .collect();
        TableIterator::new(rows)
    }

    /// Character offsets of byte offsets (on character boundaries), asked in increasing order.
    struct CharIndex<'a> {
        text: &'a str,
        byte: usize,
        chars: usize,
    }

    impl<'a> CharIndex<'a> {
        fn new(text: &'a str) -> Self {
            CharIndex { text, byte: 0, chars: 0 }
        }

        fn at(&mut self, byte: usize) -> usize {
            if byte < self.byte {
                (self.byte, self.chars) = (0, 0);
            }
            self.chars += self.text[self.byte..byte].chars().count();
            self.byte = byte;
            self.chars
        }
    }
}
