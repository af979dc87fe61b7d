//! Golden parity of late interaction: ColBERT folders saved by PyLate 1.6 (queries with
//! prefix and [MASK] expansion, attended to or not; documents with the skiplist) against
//! `pylate.models.ColBERT.encode`, and a bge-m3 folder with FlagEmbedding's `.pt` heads
//! against `BGEM3FlagModel.encode` (dense, lexical weights, token vectors), on the tiny
//! models of scripts/gen_late_fixtures.py (tests/fixtures/late/golden.json). Hostile and
//! malformed `.pt` heads are refused.

mod common;

use std::path::PathBuf;

use common::*;
use serde_json::Value;

use pg_embed_core::error::{Error, SqlState};
use pg_embed_core::late::MultiVector;
use pg_embed_core::options::Options;
use pg_embed_core::pipeline::Pipeline;

/// Token vectors (unit length) within this of the reference's, value by value.
const TOLERANCE: f32 = 2e-5;
/// Lexical weights within this of FlagEmbedding's.
const WEIGHT_TOLERANCE: f32 = 1e-4;

fn golden() -> Value {
    let path = root().join("tests/fixtures/late/golden.json");
    serde_json::from_slice(&std::fs::read(&path).unwrap()).expect("late golden parses")
}

fn dir(name: &str) -> PathBuf {
    root().join("tests/fixtures/late").join(name)
}

fn load(name: &str, options: Value) -> pg_embed_core::error::Result<Pipeline> {
    Pipeline::load(&dir(name), &Options::from_json(&options)?)
}

/// The rows of `got` against the reference's [tokens][dim]; the largest difference.
fn check_rows(got: &MultiVector, want: &Value, what: &str) -> f32 {
    let want: Vec<Vec<f32>> = serde_json::from_value(want.clone()).unwrap();
    assert_eq!(got.rows, want.len(), "{what}: rows");
    let mut worst = 0f32;
    for (i, w) in want.iter().enumerate() {
        assert_eq!(got.dim, w.len(), "{what}: width");
        let c = cosine(got.row(i), w);
        assert!(c >= 0.9999, "{what}: row {i} has cosine {c}");
        worst = worst.max(max_abs_diff(got.row(i), w));
    }
    assert!(worst <= TOLERANCE, "{what}: values differ by {worst}");
    worst
}

const COLBERTS: [&str; 4] = ["colbert", "colbert_attend", "colbert_modern", "colbert_plain"];

#[test]
fn colbert_queries_and_documents_match_pylate() {
    let g = golden();
    let (queries, documents) = (texts(&g, "queries"), texts(&g, "documents"));
    for name in COLBERTS {
        let p = load(name, serde_json::json!({})).unwrap();
        let m = &g["models"][name];
        for (side, inputs, key) in [(Some("query"), &queries, "query_vectors"), (Some("document"), &documents, "document_vectors"), (None, &documents, "document_vectors")] {
            let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
            // One packed batch of every input (queries with and without expansion tokens
            // side by side), then each input alone: the same rows.
            let batched = multi(&p, &refs, side);
            let mut worst = 0f32;
            for (i, text) in refs.iter().enumerate() {
                let what = format!("{name} {side:?} {i} {text:?}");
                worst = worst.max(check_rows(&batched[i], &m[key][i], &what));
                let alone = multi(&p, &[text], side).pop().unwrap();
                check_rows(&alone, &m[key][i], &format!("{what} alone"));
            }
            eprintln!("{name} {side:?}: worst difference {worst:.2e}");
        }
    }
}

#[test]
fn colbert_settings_are_pylates() {
    let g = golden();
    for name in COLBERTS {
        let p = load(name, serde_json::json!({})).unwrap();
        let s = &g["models"][name]["settings"];
        let info = serde_json::to_value(p.info()).unwrap();
        assert_eq!(info["task"], "multi", "{name}");
        assert_eq!(info["dim"], s["dim"], "{name}");
        let mine = &info["multi"]["settings"];
        for (key, theirs) in [
            ("query_length", "query_length"),
            ("document_length", "document_length"),
            ("query_expansion", "do_query_expansion"),
            ("attend_to_expansion_tokens", "attend_to_expansion_tokens"),
            ("query_prefix", "query_prefix"),
            ("document_prefix", "document_prefix"),
            ("expansion_id", "mask_token_id"),
        ] {
            assert_eq!(mine[key], s[theirs], "{name}: {key}");
        }
        let mut skiplist: Vec<u64> = serde_json::from_value(s["skiplist_ids"].clone()).unwrap();
        skiplist.sort_unstable();
        skiplist.dedup();
        assert_eq!(mine["skiplist"], serde_json::json!(skiplist), "{name}: skiplist");
    }
}

/// The expansion tokens of `colbert` are hidden as keys: attending to them (the folder's
/// setting flipped) moves every query row away from PyLate's.
#[test]
fn colbert_expansion_tokens_unattended_matter() {
    let g = golden();
    let tmp = tempdir("colbert_attend_flipped");
    copy_model(&dir("colbert"), &tmp);
    let path = tmp.join("config_sentence_transformers.json");
    let mut config: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    config["attend_to_expansion_tokens"] = Value::Bool(true);
    std::fs::write(&path, serde_json::to_vec(&config).unwrap()).unwrap();
    let p = Pipeline::load(&tmp, &Options::default()).unwrap();
    let got = multi(&p, &["hello world"], Some("query")).pop().unwrap();
    let want: Vec<Vec<f32>> = serde_json::from_value(g["models"]["colbert"]["query_vectors"][0].clone()).unwrap();
    let worst = (0..got.rows).map(|i| max_abs_diff(got.row(i), &want[i])).fold(0f32, f32::max);
    assert!(worst > 1e-2, "attending to the expansion tokens changed nothing ({worst})");
}

#[test]
fn colbert_scores_match_pylate() {
    let g = golden();
    let (queries, documents) = (texts(&g, "queries"), texts(&g, "documents"));
    let p = load("colbert", serde_json::json!({})).unwrap();
    let scores = &g["models"]["colbert"]["scores"];
    let qs: Vec<usize> = serde_json::from_value(scores["queries"].clone()).unwrap();
    let docs = multi(&p, &documents.iter().map(String::as_str).collect::<Vec<_>>(), None);
    for (row, &qi) in qs.iter().enumerate() {
        let q = multi(&p, &[&queries[qi]], Some("query")).pop().unwrap();
        for (j, d) in docs.iter().enumerate() {
            let want = scores["values"][row][j].as_f64().unwrap() as f32;
            let got = pg_embed_core::maxsim::maxsim(&q.values, q.rows, &d.values, d.rows, q.dim);
            assert!((got - want).abs() <= 1e-4 * want.abs().max(1.0), "query {qi} document {j}: {got} vs {want}");
        }
    }
}

const M3S: [&str; 2] = ["bge_m3", "bge_m3_metadata"];

#[test]
fn bge_m3_three_outputs_match_flagembedding() {
    let g = golden();
    for name in M3S {
        let p = load(name, serde_json::json!({})).unwrap();
        let info = serde_json::to_value(p.info()).unwrap();
        assert_eq!(info["task"], "embed", "{name}");
        for side in ["queries", "documents"] {
            let inputs = texts(&g, side);
            let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
            let want = &g["models"][name][side];
            let dense = p.embed(&refs).unwrap();
            let sparse = p.embed_sparse(&refs, None, usize::MAX, 2, || Ok(())).unwrap();
            let multis = multi(&p, &refs, None);
            for (i, text) in refs.iter().enumerate() {
                let what = format!("{name} {side} {i} {text:?}");
                let dense_want: Vec<f32> = serde_json::from_value(want["dense_vecs"][i].clone()).unwrap();
                assert_close(&dense[i], &dense_want, &format!("{what} dense"));
                check_rows(&multis[i], &want["colbert_vecs"][i], &format!("{what} multi"));
                let lexical = want["lexical_weights"][i].as_object().unwrap();
                let mut expected: Vec<(u32, f32)> =
                    lexical.iter().map(|(k, v)| (k.parse().unwrap(), v.as_f64().unwrap() as f32)).collect();
                expected.sort_by_key(|(k, _)| *k);
                let (ids, weights): (Vec<u32>, Vec<f32>) = expected.into_iter().unzip();
                assert_eq!(sparse[i].indices, ids, "{what}: lexical ids");
                let worst = max_abs_diff(&sparse[i].values, &weights);
                assert!(worst <= WEIGHT_TOLERANCE, "{what}: lexical weights differ by {worst}");
                assert_eq!(sparse[i].dim, g["models"][name]["settings"]["vocab_size"].as_u64().unwrap() as usize);
                // One pass gives the same three.
                let all = p.encode_outputs(text).unwrap();
                assert_close(&all.dense, &dense_want, &format!("{what} encode_all dense"));
                // (One input in its own pass: within the references' bounds, as the batch is.)
                assert_eq!(all.sparse.indices, ids, "{what}: encode_all lexical ids");
                let worst = max_abs_diff(&all.sparse.values, &weights);
                assert!(worst <= WEIGHT_TOLERANCE, "{what}: encode_all lexical weights differ by {worst}");
                check_rows(&all.multi, &want["colbert_vecs"][i], &format!("{what} encode_all multi"));
            }
        }
    }
}

/// bge-m3 as FlagEmbedding's trainer saves it: the backbone and its two `.pt` heads, no
/// sentence-transformers modules. `BGEM3FlagModel` reads only those files (the
/// sentence-transformers ones are left out here), so its golden dense vectors (the [CLS]
/// token, normalised) are this folder's too; a plain folder's mean pooling would differ.
#[test]
fn bge_m3_as_flagembedding_saves_it_gives_its_cls_dense_vectors() {
    let g = golden();
    for name in M3S {
        let tmp = tempdir(&format!("trainer_{name}"));
        copy_model(&dir(name), &tmp);
        for st in ["modules.json", "sentence_bert_config.json", "config_sentence_transformers.json"] {
            let _ = std::fs::remove_file(tmp.join(st));
        }
        let _ = std::fs::remove_dir_all(tmp.join("1_Pooling"));
        let p = Pipeline::load(&tmp, &Options::default()).unwrap();
        let info = serde_json::to_value(p.info()).unwrap();
        assert_eq!(info["pooling"], serde_json::json!(["cls"]), "{name}: {info}");
        assert_eq!(info["normalize"], true, "{name}");
        assert!(info["pooling_from"].as_str().unwrap().contains("BGEM3FlagModel"), "{name}: {info}");
        for side in ["queries", "documents"] {
            let inputs = texts(&g, side);
            let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
            let want = &g["models"][name][side];
            let dense = p.embed(&refs).unwrap();
            for (i, text) in refs.iter().enumerate() {
                let what = format!("{name} trainer layout {side} {i} {text:?}");
                let dense_want: Vec<f32> = serde_json::from_value(want["dense_vecs"][i].clone()).unwrap();
                assert_close(&dense[i], &dense_want, &format!("{what} dense"));
                assert_close(&p.encode_outputs(text).unwrap().dense, &dense_want, &format!("{what} encode_all"));
                check_rows(&multi(&p, &[text], None)[0], &want["colbert_vecs"][i], &format!("{what} multi"));
            }
        }
        // Options still decide where they are given.
        let p = Pipeline::load(&tmp, &Options::from_json(&serde_json::json!({"pooling": "mean"})).unwrap()).unwrap();
        let info = serde_json::to_value(p.info()).unwrap();
        assert_eq!((info["pooling"].clone(), info["normalize"].clone()), (serde_json::json!(["mean"]), serde_json::json!(false)));
        let _ = std::fs::remove_dir_all(&tmp);
    }
}

#[test]
fn bge_m3_task_picks_the_default_output() {
    let p = load("bge_m3", serde_json::json!({"task": "multi"})).unwrap();
    let info = serde_json::to_value(p.info()).unwrap();
    assert_eq!((info["task"].as_str(), info["dim"].as_u64()), (Some("multi"), Some(32)));
    let p = load("bge_m3", serde_json::json!({"task": "sparse", "max_terms": 3})).unwrap();
    let info = serde_json::to_value(p.info()).unwrap();
    assert_eq!((info["task"].as_str(), info["dim"].as_u64()), (Some("sparse"), Some(402)));
    let v = p.embed_sparse(&["Search engines rank each document by its similarity"], None, usize::MAX, 1, || Ok(())).unwrap();
    assert!(v[0].indices.len() <= 3 && !v[0].indices.is_empty());
    // The dense output is still there.
    assert_eq!(p.embed(&["data"]).unwrap()[0].len(), 32);
}

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pg_embed_late_{name}_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// bge_m3 with one of its `.pt` heads replaced by `bad_pt/<case>/<file>`.
fn with_bad_head(case: &str, file: &str) -> PathBuf {
    let tmp = tempdir(case);
    copy_model(&dir("bge_m3"), &tmp);
    std::fs::copy(dir("bad_pt").join(case).join(file), tmp.join(file)).unwrap();
    tmp
}

#[test]
fn hostile_or_malformed_pt_heads_are_refused() {
    let g = golden();
    for (case, spec) in g["bad_pt"].as_object().unwrap() {
        let file = spec["file"].as_str().unwrap();
        let tmp = with_bad_head(case, file);
        let err = Pipeline::load(&tmp, &Options::default()).err().unwrap_or_else(|| panic!("{case}: loaded"));
        let message = err.to_string();
        let want = if case == "shape" { SqlState::DataCorrupted } else { SqlState::FeatureNotSupported };
        assert_eq!(err.sqlstate(), want, "{case}: {message}");
        assert!(message.contains(file), "{case}: {message}");
        if case == "global" {
            assert!(message.contains("getcwd"), "{case} names the global: {message}");
        }
        let _ = std::fs::remove_dir_all(&tmp);
    }
}

#[test]
fn wrong_calls_name_the_right_one() {
    let colbert = load("colbert", serde_json::json!({})).unwrap();
    let err = colbert.embed(&["x"]).unwrap_err();
    assert!(matches!(err, Error::WrongOutput { instead: "embed_multi", .. }), "{err}");
    let err = colbert.encode_outputs("x").err().unwrap();
    assert!(matches!(err, Error::WrongOutput { .. }), "{err}");
    let err = colbert.embed_sparse(&["x"], None, usize::MAX, 1, || Ok(())).unwrap_err();
    assert!(matches!(err, Error::WrongOutput { instead: "embed_multi", .. }), "{err}");
    let err = colbert.embed_multi(&["x"], Some("passage"), usize::MAX, 1, || Ok(())).unwrap_err();
    assert!(matches!(err, Error::UnknownPrompt { .. }), "{err}");
    let dense = fixture("pool_mean");
    let err = dense.embed_multi(&["x"], None, usize::MAX, 1, || Ok(())).unwrap_err();
    assert!(matches!(err, Error::WrongOutput { instead: "embed", .. }), "{err}");
    for options in [serde_json::json!({"task": "embed"}), serde_json::json!({"max_length": 8}), serde_json::json!({"task": "sparse"})] {
        let err = load("colbert", options.clone()).err().unwrap();
        assert!(matches!(err, Error::InvalidOptions(_)), "{options}: {err}");
    }
    let err = Pipeline::load(&root().join("tests/fixtures/pool_mean"), &Options::from_json(&serde_json::json!({"task": "multi"})).unwrap())
        .err()
        .unwrap();
    assert!(matches!(err, Error::InvalidOptions(_)), "{err}");
}

/// The token heads travel in the shared prepared file: a second load maps the file the
/// first one wrote and gives the same token vectors and lexical weights, bit for bit.
#[test]
fn token_heads_are_shared_through_the_prepared_file() {
    let texts = ["Hello, world! (a test) -- yes?", "data", ""];
    for name in ["colbert", "colbert_attend", "bge_m3"] {
        let private = Pipeline::load(&dir(name), &Options::default()).unwrap();
        let (_, mapped) = built_and_mapped(&format!("late_{name}"), &dir(name), &Options::default());
        for side in [Some("query"), None] {
            let want = multi(&private, &texts, side);
            assert_eq!(multi(&mapped, &texts, side), want, "{name} {side:?}");
        }
        if name == "bge_m3" {
            let sparse = |p: &Pipeline| p.embed_sparse(&texts, None, usize::MAX, 1, || Ok(())).unwrap();
            assert_eq!(sparse(&mapped), sparse(&private), "{name}: lexical weights");
        }
        assert_eq!(mapped.info().parameters, private.info().parameters, "{name}");
    }
}

/// A document whose every token is in the skiplist (here the special tokens too, as a
/// configured skiplist may say) has no token vectors: an empty matrix, and MaxSim over it
/// is 0 (`embed.maxsim`'s rule for a side without rows). The other documents of the batch
/// keep theirs.
#[test]
fn a_document_without_kept_tokens_is_empty() {
    let tmp = tempdir("skip_all");
    copy_model(&dir("colbert_plain"), &tmp);
    let path = tmp.join("config_sentence_transformers.json");
    let mut config: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    config["skiplist_words"] = serde_json::json!([".", ",", "the", "[CLS]", "[SEP]"]);
    std::fs::write(&path, serde_json::to_vec(&config).unwrap()).unwrap();
    let p = Pipeline::load(&tmp, &Options::default()).unwrap();
    let docs = multi(&p, &["the.", "the data", ""], None);
    assert_eq!((docs[0].rows, docs[0].values.len()), (0, 0));
    assert_eq!(docs[1].rows, 1, "only \"data\" is kept");
    assert_eq!(docs[2].rows, 0);
    let q = multi(&p, &["data"], Some("query")).pop().unwrap();
    assert!(q.rows > 0);
    assert_eq!(pg_embed_core::maxsim::maxsim(&q.values, q.rows, &docs[0].values, 0, q.dim), 0.0);
    let _ = std::fs::remove_dir_all(&tmp);
}

/// ModernBERT's sliding-window layers with a window that leaves the last expansion tokens of
/// a short query nothing but expansion tokens to see are refused by name (transformers then
/// attends uniformly to the whole row); the fixture's window (8 each side) passes.
#[test]
fn a_sliding_window_short_of_the_expansion_is_refused() {
    let tmp = tempdir("narrow_window");
    copy_model(&dir("colbert_modern"), &tmp);
    let path = tmp.join("config.json");
    let mut config: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    config["local_attention"] = serde_json::json!(8);
    std::fs::write(&path, serde_json::to_vec(&config).unwrap()).unwrap();
    let err = Pipeline::load(&tmp, &Options::default()).err().expect("refused");
    assert_eq!(err.sqlstate(), SqlState::FeatureNotSupported, "{err}");
    assert!(err.to_string().contains("query_length 11 with sliding-window layers of 4 tokens each side"), "{err}");
    let _ = std::fs::remove_dir_all(&tmp);
}
