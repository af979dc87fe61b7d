//! The compatibility matrix: model folders saved by sentence-transformers 3.4.1, 4.1.0, 5.7.0
//! and 6.2.0 and by model2vec 0.4.1 and 0.10.0 from the same seeded weights
//! (tests/fixtures/compat, made by `bash scripts/gen_compat.sh`), each compared with what the
//! version that wrote it computes for the same inputs (golden.json). A row the golden marks
//! `"expect": "refuse"` must be refused at load with SQLSTATE 0A000 and a message naming the
//! module's class path. Every row is checked and reported (with its largest difference)
//! before the test fails on the rows that do not hold.

mod common;

use common::*;
use serde_json::Value;

use pg_embed_core::error::SqlState;
use pg_embed_core::options::Options;
use pg_embed_core::pipeline::Pipeline;

/// Classifier logits within this of transformers' (tests/classify.rs).
const LOGIT_TOLERANCE: f32 = 1e-4;
/// Cross-encoder scores after the activation (tests/classify.rs' rerank check).
const SCORE_TOLERANCE: f32 = 1e-5;
/// Sparse weights (tests/sparse.rs).
const WEIGHT_TOLERANCE: f32 = 1e-4;
/// Asymmetric models (the router rows), on top of `close`'s bounds: each route's vector
/// within this of the reference's, with at least this cosine.
const ROUTE_ABS_TOLERANCE: f32 = 1e-4;
const ROUTE_COSINE_MIN: f32 = 0.99999;

fn compat() -> std::path::PathBuf {
    root().join("tests/fixtures/compat")
}

fn golden() -> Value {
    let path = compat().join("golden.json");
    serde_json::from_slice(&std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .expect("compat golden parses")
}

fn floats(v: &Value) -> Vec<f32> {
    serde_json::from_value(v.clone()).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    serde_json::from_value(v.clone()).unwrap()
}

type Check = Result<f32, String>;

/// `assert_close`'s bounds (cosine >= 0.9999 unless the reference is all zeros, each element
/// within FIXTURE_ABS_TOL * max(1, |want|) plus `extra(want)`) as a result; the max abs
/// difference.
fn close_plus(got: &[f32], want: &[f32], what: &str, extra: impl Fn(f32) -> f32) -> Check {
    if got.len() != want.len() {
        return Err(format!("{what}: {} values, the reference has {}", got.len(), want.len()));
    }
    let cos = cosine(got, want);
    if !(cos >= COSINE_MIN || want.iter().all(|x| *x == 0.0)) {
        return Err(format!("{what}: cosine {cos}"));
    }
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let tol = extra(*w) + FIXTURE_ABS_TOL * w.abs().max(1.0);
        if (g - w).abs() > tol {
            return Err(format!("{what}: element {i}: {g} vs {w} (diff {:e}, tolerance {tol:e})", (g - w).abs()));
        }
    }
    Ok(max_abs_diff(got, want))
}

fn close(got: &[f32], want: &[f32], what: &str) -> Check {
    close_plus(got, want, what, |_| 0.0)
}

/// The spacing of float16 values at |w| (its unit in the last place; subnormal spacing below
/// 2^-14).
fn f16_ulp(w: f32) -> f32 {
    let a = w.abs();
    if a < 2f32.powi(-14) {
        2f32.powi(-24)
    } else {
        2f32.powi(a.log2().floor() as i32 - 10)
    }
}

/// A reference that the library computed and returned in float16 (model2vec with a float16
/// table): pg_embed computes in float32 from the same float16 table, so each element may
/// differ by the reference's own rounding, up to 2 float16 ulps (measured: 1.13), besides
/// `close`'s float32 bound; the cosine bound still holds.
fn close_f16(got: &[f32], want: &[f32], what: &str) -> Check {
    close_plus(got, want, what, |w| 2.0 * f16_ulp(w))
}

fn within(got: &[f32], want: &[f32], tol: f32, what: &str) -> Check {
    if got.len() != want.len() {
        return Err(format!("{what}: {} values, the reference has {}", got.len(), want.len()));
    }
    let d = max_abs_diff(got, want);
    if d > tol {
        return Err(format!("{what}: max abs diff {d:e} over {tol:e} ({got:?} vs {want:?})"));
    }
    Ok(d)
}

fn same_ids(got: Vec<u32>, want: &Value, what: &str) -> Result<(), String> {
    let want = ids(want);
    if got != want {
        return Err(format!("{what}: token ids {got:?}, the reference has {want:?}"));
    }
    Ok(())
}

fn err<E: std::fmt::Display>(what: &str) -> impl Fn(E) -> String + '_ {
    move |e| format!("{what}: {e}")
}

struct Ctx<'a> {
    texts: &'a serde_json::Map<String, Value>,
    query: &'a str,
}

impl Ctx<'_> {
    fn text(&self, case: &Value) -> &str {
        self.texts[case["name"].as_str().unwrap()].as_str().unwrap()
    }
}

/// Sentence embeddings (every dense kind, StaticEmbedding, model2vec): one by one, the named
/// prompts, and all inputs in one batch.
fn check_dense(p: &Pipeline, row: &Value, ctx: &Ctx) -> Check {
    let f16 = row["description"]["output_dtypes"].as_array().is_some_and(|d| d.iter().any(|t| t == "float16"));
    let close = if f16 { close_f16 } else { close };
    let cases = row["cases"].as_array().unwrap();
    let mut worst = 0f32;
    let mut texts = Vec::new();
    for case in cases {
        let text = ctx.text(case);
        let what = case["name"].as_str().unwrap();
        if !case["input_ids"].is_null() {
            same_ids(p.tokenize(text).map_err(err(what))?, &case["input_ids"], what)?;
        }
        let got = p.embed(&[text]).map_err(err(what))?.remove(0);
        worst = worst.max(close(&got, &floats(&case["embedding"]), what)?);
        for (key, value) in case.as_object().unwrap() {
            let Some(prompt) = key.strip_prefix("embedding_prompt_") else { continue };
            let what = format!("{what} prompt {prompt:?}");
            if let Some(want_ids) = case.get(format!("input_ids_prompt_{prompt}")) {
                let (got_ids, _) = p.tokenize_with_prompt(text, Some(prompt)).map_err(err(&what))?;
                same_ids(got_ids, want_ids, &what)?;
            }
            let got = p.embed_with_prompt(&[text], Some(prompt)).map_err(err(&what))?.remove(0);
            worst = worst.max(close(&got, &floats(value), &what)?);
        }
        texts.push(text);
    }
    let batched = p.embed(&texts).map_err(err("batched"))?;
    for (got, case) in batched.iter().zip(cases) {
        worst = worst.max(close(got, &floats(&case["embedding"]), &format!("{} (batched)", case["name"]))?);
    }
    Ok(worst)
}

/// A one-label cross-encoder: the logit of (query, text), and the score `rerank` gives
/// against what CrossEncoder.predict returns.
fn check_cross_encoder(p: &Pipeline, row: &Value, ctx: &Ctx) -> Check {
    let classifier = p.classifier().map_err(err("classifier"))?;
    let mut worst = 0f32;
    for case in row["cases"].as_array().unwrap() {
        let pair = ctx.text(case);
        let what = case["name"].as_str().unwrap();
        // As rerank passes them: an empty document stays the second sequence, as in
        // CrossEncoder.predict (classify(model, input, '') would drop it, as transformers does).
        let (got_ids, _) = p.tokenize_pair(ctx.query, Some(pair)).map_err(err(what))?;
        same_ids(got_ids, &case["input_ids"], what)?;
        let logits = p.classify(&[(ctx.query, Some(pair))]).map_err(err(what))?.remove(0);
        worst = worst.max(within(&logits, &floats(&case["logits"]), LOGIT_TOLERANCE, &format!("{what} logits"))?);
        let score: Vec<f32> = logits
            .iter()
            .map(|&l| if classifier.rerank_sigmoid { pg_embed_core::classifier::sigmoid(l) } else { l })
            .collect();
        worst = worst.max(within(&score, &floats(&case["score"]), SCORE_TOLERANCE, &format!("{what} rerank score"))?);
    }
    Ok(worst)
}

/// Sparse vectors: the same non-zero ids, weights within WEIGHT_TOLERANCE; an inference-free
/// model through its query and document routes.
fn check_sparse(p: &Pipeline, row: &Value, ctx: &Ctx) -> Check {
    let routes: &[(&str, Option<&str>)] =
        if row["kind"] == "inference_free" { &[("_query", Some("query")), ("_document", Some("document"))] } else { &[("", None)] };
    let mut worst = 0f32;
    for case in row["cases"].as_array().unwrap() {
        let text = ctx.text(case);
        for (suffix, route) in routes {
            let what = format!("{}{suffix}", case["name"].as_str().unwrap());
            let got = p.embed_sparse(&[text], *route, usize::MAX, 1, || Ok(())).map_err(err(&what))?.remove(0);
            let want_ids = ids(&case[format!("indices{suffix}")]);
            if got.indices != want_ids {
                let (g, w): (Vec<_>, Vec<_>) = (got.indices.iter().collect(), want_ids.iter().collect());
                return Err(format!("{what}: non-zero ids {g:?}, the reference has {w:?}"));
            }
            worst = worst.max(within(&got.values, &floats(&case[format!("values{suffix}")]), WEIGHT_TOLERANCE, &what)?);
        }
    }
    Ok(worst)
}

/// `close`, and the router rows' stricter cosine and absolute bounds.
fn close_route(got: &[f32], want: &[f32], what: &str) -> Check {
    let worst = close(got, want, what)?;
    let cos = cosine(got, want);
    if cos < ROUTE_COSINE_MIN || worst > ROUTE_ABS_TOLERANCE {
        return Err(format!("{what}: cosine {cos}, max abs diff {worst:e} (bounds {ROUTE_COSINE_MIN}, {ROUTE_ABS_TOLERANCE:e})"));
    }
    Ok(worst)
}

/// An asymmetric model (a Router of Dense heads after pooling; models.Asym before 5.0): the
/// query route (`embed(m, t, 'query')`, `encode_query`) against `embedding_query`; the
/// document route (`'document'`, `encode_document`) against `embedding_document`, one by one
/// and in one batch. Without a route: a Router (5.x, 6.x) takes its default_route, here
/// "document", as `encode` does; an Asym folder (3.x, 4.x, where `encode(text)` without a
/// route key runs no route's heads) takes its document route, as `encode_document` does.
fn check_router(p: &Pipeline, name: &str, row: &Value, ctx: &Ctx) -> Check {
    let want_dim = row["description"]["dim"].as_u64().unwrap() as usize;
    if p.dim() != want_dim {
        return Err(format!("dim {}, the reference's is {want_dim}", p.dim()));
    }
    let with_default = |route: &str| {
        let options = Options::from_json(&serde_json::json!({ "prompt": route })).unwrap();
        Pipeline::load(&compat().join(name), &options).map_err(err("load with options.prompt"))
    };
    let document_default = with_default("document")?;
    let query_default = with_default("query")?;
    let cases = row["cases"].as_array().unwrap();
    let mut worst = 0f32;
    let mut texts = Vec::new();
    for case in cases {
        let text = ctx.text(case);
        let what = case["name"].as_str().unwrap();
        let (want_q, want_d) = (floats(&case["embedding_query"]), floats(&case["embedding_document"]));
        let query = p.embed_with_prompt(&[text], Some("query")).map_err(err(what))?.remove(0);
        worst = worst.max(close_route(&query, &want_q, &format!("{what} query"))?);
        let document = p.embed_with_prompt(&[text], Some("document")).map_err(err(what))?.remove(0);
        worst = worst.max(close_route(&document, &want_d, &format!("{what} document"))?);
        if query == document {
            return Err(format!("{what}: the query and document routes give the same vector"));
        }
        // No route named: the document route, in the Router (its default_route) and the
        // Asym layout alike.
        let got = p.embed(&[text]).map_err(err(what))?.remove(0);
        worst = worst.max(close_route(&got, &want_d, &format!("{what} default route"))?);
        let got = document_default.embed(&[text]).map_err(err(what))?.remove(0);
        worst = worst.max(close_route(&got, &want_d, &format!("{what} options.prompt document"))?);
        let got = query_default.embed(&[text]).map_err(err(what))?.remove(0);
        worst = worst.max(close_route(&got, &want_q, &format!("{what} options.prompt query"))?);
        texts.push(text);
    }
    let queries = p.embed_with_prompt(&texts, Some("query")).map_err(err("batched query"))?;
    let documents = document_default.embed_batched(&texts, 1 << 20, 1, || Ok(())).map_err(err("batched document"))?;
    for ((q, d), case) in queries.iter().zip(&documents).zip(cases) {
        let what = case["name"].as_str().unwrap();
        worst = worst.max(close_route(q, &floats(&case["embedding_query"]), &format!("{what} query (batched)"))?);
        worst = worst.max(close_route(d, &floats(&case["embedding_document"]), &format!("{what} document (batched)"))?);
    }
    Ok(worst)
}

/// CLIP: texts through the text tower, image files through the vision tower.
fn check_clip(p: &Pipeline, row: &Value) -> Check {
    let mut worst = 0f32;
    for case in row["cases"].as_array().unwrap() {
        let what = case["name"].as_str().unwrap();
        let got = if let Some(text) = case["text"].as_str() {
            same_ids(p.tokenize(text).map_err(err(what))?, &case["input_ids"], what)?;
            p.embed(&[text]).map_err(err(what))?.remove(0)
        } else {
            let file = root().join("tests/fixtures/images/inputs").join(case["image"].as_str().unwrap());
            let bytes = std::fs::read(&file).unwrap();
            p.embed_images(&[&bytes], 1 << 26, 1 << 20, 1, || Ok(())).map_err(err(what))?.remove(0)
        };
        worst = worst.max(close(&got, &floats(&case["embedding"]), what)?);
    }
    Ok(worst)
}

/// Loads the row's folder and checks it as its golden entry says: the same numbers, or a
/// refusal with 0A000 that names the module.
fn check_row(name: &str, row: &Value, ctx: &Ctx) -> Result<String, String> {
    let loaded = Pipeline::load(&compat().join(name), &Options::from_json(&serde_json::json!({})).unwrap());
    if row["expect"] == "refuse" {
        let names = row["names"].as_str().unwrap();
        return match loaded {
            Ok(_) => Err(format!("loaded; expected a refusal naming {names}")),
            Err(e) => {
                let (state, message) = (e.sqlstate(), e.to_string());
                if state != SqlState::FeatureNotSupported {
                    Err(format!("refused with {state:?}, not FeatureNotSupported (0A000): {message}"))
                } else if !message.contains(names) {
                    Err(format!("refused with 0A000 but the message does not name {names}: {message}"))
                } else {
                    Ok(format!("refused 0A000: {message}"))
                }
            }
        };
    }
    let p = loaded.map_err(|e| format!("load failed ({:?}): {e}", e.sqlstate()))?;
    let worst = match row["kind"].as_str().unwrap() {
        "cross_encoder" => check_cross_encoder(&p, row, ctx),
        "splade_mlm" | "splade_fillmask" | "inference_free" => check_sparse(&p, row, ctx),
        "clip" => check_clip(&p, row),
        "router" => check_router(&p, name, row, ctx),
        _ => check_dense(&p, row, ctx),
    }?;
    Ok(format!("same numbers, max abs diff {worst:.1e}"))
}

#[test]
fn every_saved_folder_matches_the_version_that_wrote_it() {
    let g = golden();
    let ctx = Ctx {
        texts: g["inputs"]["cases"].as_object().unwrap(),
        query: g["inputs"]["cross_encoder_query"].as_str().unwrap(),
    };
    let rows = g["rows"].as_object().unwrap();
    assert!(rows.len() >= 60, "{} rows", rows.len());
    let mut failures = Vec::new();
    let mut checked = 0;
    for (name, row) in rows {
        if row["saved"] != true {
            eprintln!("{name:<32} not saved by {} {}: {}", row["library"], row["version"], row["reason"]);
            continue;
        }
        assert!(compat().join(name).is_dir(), "{name}: folder missing");
        checked += 1;
        let started = std::time::Instant::now();
        match check_row(name, row, &ctx) {
            Ok(summary) => eprintln!("{name:<32} ok     {summary} ({} ms)", started.elapsed().as_millis()),
            Err(message) => {
                eprintln!("{name:<32} FAILED {message}");
                failures.push(format!("{name}: {message}"));
            }
        }
    }
    // Every folder on disk has a row.
    for entry in std::fs::read_dir(compat()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            let dir = path.file_name().unwrap().to_str().unwrap().to_string();
            assert!(rows.get(&dir).is_some_and(|r| r["saved"] == true), "{dir}: no saved row in golden.json");
        }
    }
    eprintln!("{checked} folders checked, {} failed", failures.len());
    assert!(failures.is_empty(), "{} of {checked} folders fail:\n{}", failures.len(), failures.join("\n"));
}
