//! The SQL surface. The only place that turns `Error` into `ereport`.

use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use pgrx::JsonB;

use crate::cache;
use crate::error::{Error, Result, SqlState};
use crate::guc;
use crate::pipeline::Pipeline;
use crate::threads;

fn sqlerrcode(state: SqlState) -> PgSqlErrorCode {
    use PgSqlErrorCode::*;
    match state {
        SqlState::InvalidParameterValue => ERRCODE_INVALID_PARAMETER_VALUE,
        SqlState::UndefinedObject => ERRCODE_UNDEFINED_OBJECT,
        SqlState::InsufficientPrivilege => ERRCODE_INSUFFICIENT_PRIVILEGE,
        SqlState::ObjectNotInPrerequisiteState => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        SqlState::UndefinedFile => ERRCODE_UNDEFINED_FILE,
        SqlState::IoError => ERRCODE_IO_ERROR,
        SqlState::DataCorrupted => ERRCODE_DATA_CORRUPTED,
        SqlState::FeatureNotSupported => ERRCODE_FEATURE_NOT_SUPPORTED,
        SqlState::NullValueNotAllowed => ERRCODE_NULL_VALUE_NOT_ALLOWED,
        SqlState::DataException => ERRCODE_DATA_EXCEPTION,
        SqlState::WrongObjectType => ERRCODE_WRONG_OBJECT_TYPE,
        SqlState::InternalError => ERRCODE_INTERNAL_ERROR,
    }
}

/// Raises `err` as a Postgres ERROR with its SQLSTATE, message and hint.
fn raise(err: Error) -> ! {
    let mut report = ErrorReport::new(sqlerrcode(err.sqlstate()), err.to_string(), "pg_embed");
    if let Some(hint) = err.hint() {
        report = report.set_hint(hint);
    }
    report.report(PgLogLevel::ERROR);
    unreachable!("ereport(ERROR) returned")
}

trait OrRaise<T> {
    fn or_raise(self) -> T;
}

impl<T> OrRaise<T> for Result<T> {
    fn or_raise(self) -> T {
        self.unwrap_or_else(|e| raise(e))
    }
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
    let (pipeline, _) = cache::get(model).or_raise();
    pgrx::check_for_interrupts!();
    let pipeline: &Pipeline = &pipeline;
    let mut vectors = threads::run(guc::threads(), || pipeline.embed_with_prompt(&[input], prompt_name))
        .and_then(|r| r)
        .or_raise();
    vectors.pop().unwrap_or_else(|| raise(Error::Inference("no output for the input".into())))
}

/// `embed(model, inputs text[])`: one row per input, in input order (a NULL element gives a
/// NULL row), computed in batches of up to `pg_embed.max_batch_tokens` tokens grouped by
/// length; cancel and statement_timeout are checked between batches.
#[pg_extern(immutable, strict, parallel_safe, name = "embed")]
fn embed_array(model: &str, inputs: pgrx::Array<&str>) -> SetOfIterator<'static, Option<Vec<f32>>> {
    let (pipeline, _) = cache::get(model).or_raise();
    let all: Vec<Option<&str>> = inputs.iter().collect();
    let present: Vec<&str> = all.iter().flatten().copied().collect();
    let mut vectors = pipeline
        .embed_batched(&present, guc::max_batch_tokens(), guc::threads(), || {
            pgrx::check_for_interrupts!();
            Ok(())
        })
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

/// `classify(model, input, pair)`: the raw logits for a sentence pair.
#[pg_extern(immutable, strict, parallel_safe, name = "classify")]
fn classify_pair(model: &str, input: &str, pair: &str) -> Vec<f32> {
    logits(model, input, Pipeline::pair_argument(pair))
}

fn logits(model: &str, input: &str, pair: Option<&str>) -> Vec<f32> {
    let (pipeline, _) = cache::get(model).or_raise();
    let mut out = classify_batched(&pipeline, &[(input, pair)]);
    out.pop().unwrap_or_else(|| raise(Error::Inference("no output for the input".into())))
}

/// Logits of `inputs` in batches of up to `pg_embed.max_batch_tokens` tokens on
/// `pg_embed.threads` threads, checking for cancel before each batch.
fn classify_batched(pipeline: &Pipeline, inputs: &[(&str, Option<&str>)]) -> Vec<Vec<f32>> {
    pipeline
        .classify_batched(inputs, guc::max_batch_tokens(), guc::threads(), || {
            pgrx::check_for_interrupts!();
            Ok(())
        })
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
    let (pipeline, _) = cache::get(model).or_raise();
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
    let (pipeline, _) = cache::get(model).or_raise();
    let classifier = pipeline.classifier().or_raise();
    if classifier.labels.len() != 1 {
        raise(Error::NotACrossEncoder { labels: classifier.labels.len() });
    }
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
            (i as i32 + 1, if classifier.rerank_sigmoid { crate::classifier::sigmoid(s) } else { s })
        })
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    TableIterator::new(scored)
}

#[pg_schema]
mod embed {
    use super::*;
    use crate::catalog;
    use crate::options::Options;

    fn require_superuser(action: &'static str) -> Result<()> {
        // SAFETY: superuser() only reads the current user's role flags.
        if unsafe { pg_sys::superuser() } {
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

    fn describe(name: &str, source: &str, revision: i64, pipeline: &Pipeline) -> JsonB {
        let mut info = serde_json::to_value(pipeline.info()).unwrap_or_default();
        if let Some(obj) = info.as_object_mut() {
            obj.insert("name".into(), name.into());
            obj.insert("source".into(), source.into());
            obj.insert("revision".into(), revision.into());
        }
        JsonB(info)
    }

    /// Registers (or re-registers) a model under `name`, loading it once to validate it.
    /// Returns the resolved pipeline, as `embed.model_info` shows it.
    #[pg_extern(volatile, parallel_unsafe)]
    fn register_model(
        name: Option<&str>,
        source: Option<&str>,
        options: default!(Option<JsonB>, "'{}'"),
    ) -> JsonB {
        require_superuser("register models").or_raise();
        let name = valid_name(name).or_raise();
        let source = required(source, "source").or_raise();
        let options_json = options.map(|o| o.0).ok_or(Error::NullArgument { what: "options" }).or_raise();
        let parsed = Options::from_json(&options_json).or_raise();
        let pipeline = cache::load(source, &parsed).or_raise();
        let revision = catalog::upsert(name, source, &options_json, pipeline.info()).or_raise();
        let pipeline = cache::insert(name, revision, pipeline);
        describe(name, source, revision, &pipeline)
    }

    /// Removes a registration. Rows embedded with it keep their vectors.
    #[pg_extern(volatile, parallel_unsafe)]
    fn drop_model(name: Option<&str>) {
        require_superuser("drop models").or_raise();
        let name = required(name, "model name").or_raise();
        if !catalog::delete(name).or_raise() {
            raise(Error::ModelNotRegistered(name.into()));
        }
        cache::evict(name);
    }

    /// The resolved pipeline of a registered model: architecture, pooling, heads,
    /// normalize, dim, max_length, parameters.
    #[pg_extern(volatile, strict, parallel_restricted)]
    fn model_info(name: &str) -> JsonB {
        let (pipeline, row) = cache::get(name).or_raise();
        describe(name, &row.source, row.revision, &pipeline)
    }
}
