//! Golden parity of the multi-vector layouts sentence-transformers' MultiVectorEncoder (6.2)
//! reads: its own saves (`mve`: prefix tokens, fixed query expansion not attended to, the
//! punctuation skiplist, Normalize; `mve_min`: text prompts, "min" expansion with [SEP]
//! attended to, a skiplist on both sides, two Dense modules, normalised documents only) and
//! the Stanford ColBERT layout (`stanford`, `stanford_attend`), against
//! `MultiVectorEncoder.encode_query` / `encode_document` and `similarity` on the tiny models
//! of scripts/gen_multivector_fixtures.py (tests/fixtures/multivector/golden.json). Layouts
//! pg_embed does not compute exactly, and half-present ones, are refused by name.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

use pg_embed_core::error::{Error, SqlState};
use pg_embed_core::late::MultiVector;
use pg_embed_core::options::Options;
use pg_embed_core::pipeline::Pipeline;

const MODELS: [&str; 4] = ["mve", "mve_min", "stanford", "stanford_attend"];

fn golden() -> Value {
    let path = root().join("tests/fixtures/multivector/golden.json");
    serde_json::from_slice(&std::fs::read(&path).unwrap()).expect("multivector golden parses")
}

fn dir(name: &str) -> PathBuf {
    root().join("tests/fixtures/multivector").join(name)
}

fn load(path: &Path) -> pg_embed_core::error::Result<Pipeline> {
    Pipeline::load(path, &Options::default())
}

/// The rows of `got` against the reference's [tokens][dim]: each value within
/// 1e-4 x max(1, |v|), each row's cosine at least 0.99999. The largest difference.
fn check_rows(got: &MultiVector, want: &Value, what: &str) -> f32 {
    let want: Vec<Vec<f32>> = serde_json::from_value(want.clone()).unwrap();
    assert_eq!(got.rows, want.len(), "{what}: rows");
    let mut worst = 0f32;
    for (i, w) in want.iter().enumerate() {
        assert_eq!(got.dim, w.len(), "{what}: width");
        let c = cosine(got.row(i), w);
        assert!(c >= 0.99999, "{what}: row {i} has cosine {c}");
        for (a, b) in got.row(i).iter().zip(w) {
            let d = (a - b).abs();
            assert!(d <= 1e-4 * b.abs().max(1.0), "{what}: row {i}: {a} vs {b}");
            worst = worst.max(d);
        }
    }
    worst
}

#[test]
fn multi_vector_layouts_match_multi_vector_encoder() {
    let g = golden();
    let (queries, documents) = (texts(&g, "queries"), texts(&g, "documents"));
    for name in MODELS {
        let p = load(&dir(name)).unwrap();
        let m = &g["models"][name];
        for (side, inputs, key) in [("query", &queries, "query"), ("document", &documents, "document")] {
            let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
            let batched = multi(&p, &refs, Some(side));
            let mut worst = 0f32;
            for (i, text) in refs.iter().enumerate() {
                let what = format!("{name} {side} {i} {text:?}");
                // The ids the backbone takes, and the rows kept, exactly.
                let (ids, kept) = p.multi_tokens(text, Some(side)).unwrap();
                let want_ids: Vec<u32> = serde_json::from_value(m[format!("{key}_ids")][i].clone()).unwrap();
                assert_eq!(ids, want_ids, "{what}: ids");
                let want_kept: Vec<u8> = serde_json::from_value(m[format!("{key}_kept_mask")][i].clone()).unwrap();
                assert_eq!(kept.iter().map(|&k| u8::from(k)).collect::<Vec<_>>(), want_kept, "{what}: kept");
                worst = worst.max(check_rows(&batched[i], &m[format!("{key}_vectors")][i], &what));
                let alone = multi(&p, &[text], Some(side)).pop().unwrap();
                check_rows(&alone, &m[format!("{key}_vectors")][i], &format!("{what} alone"));
            }
            eprintln!("{name} {side}: worst difference {worst:.2e}");
        }
        // The default side is the document side.
        let d = multi(&p, &[&documents[1]], None).pop().unwrap();
        check_rows(&d, &m["document_vectors"][1], &format!("{name} default side"));
    }
}

#[test]
fn multi_vector_settings_and_scores() {
    let g = golden();
    let (queries, documents) = (texts(&g, "queries"), texts(&g, "documents"));
    for name in MODELS {
        let p = load(&dir(name)).unwrap();
        let m = &g["models"][name];
        let s = &m["settings"];
        let info = serde_json::to_value(p.info()).unwrap();
        assert_eq!(info["task"], "multi", "{name}");
        assert_eq!(info["dim"], s["dim"], "{name}");
        assert_eq!(info["multi"]["similarity"], s["similarity_fn_name"], "{name}");
        assert_eq!(info["multi"]["settings"]["skiplist"], s["skiplist_ids"], "{name}");
        let scores = &m["scores"];
        let docs = multi(&p, &documents.iter().map(String::as_str).collect::<Vec<_>>(), None);
        for q in 0..3 {
            let qv = multi(&p, &[&queries[q]], Some("query")).pop().unwrap();
            for (j, d) in docs.iter().enumerate() {
                let want = scores["values"][q][j].as_f64().unwrap() as f32;
                let mut got = pg_embed_core::maxsim::maxsim(&qv.values, qv.rows, &d.values, d.rows, qv.dim);
                if scores["similarity_fn_name"] == "meanmaxsim" {
                    got /= qv.rows as f32;
                }
                assert!((got - want).abs() <= 1e-4 * want.abs().max(1.0), "{name} query {q} document {j}: {got} vs {want}");
            }
        }
    }
}

/// A multi-vector model gives token vectors only: embed() names embed_multi, as it does for
/// PyLate's ColBERT; the options of pooled outputs are refused.
#[test]
fn embed_of_a_multi_vector_model_names_embed_multi() {
    for name in MODELS {
        let p = load(&dir(name)).unwrap();
        let err = p.embed(&["x"]).unwrap_err();
        assert!(matches!(err, Error::WrongOutput { instead: "embed_multi", .. }), "{name}: {err}");
        assert_eq!(err.to_string(), "this model gives token vectors (late interaction): call embed_multi(), not embed()");
        let err = Pipeline::load(&dir(name), &Options::from_json(&serde_json::json!({"max_length": 8})).unwrap()).err().unwrap();
        assert!(matches!(err, Error::InvalidOptions(_)), "{name}: {err}");
    }
}

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pg_embed_mv_{name}_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A copy of fixture `name` with `edit` applied to its JSON file `file`.
fn edited(name: &str, case: &str, file: &str, edit: impl FnOnce(&mut Value)) -> PathBuf {
    let tmp = tempdir(case);
    copy_model(&dir(name), &tmp);
    let path = tmp.join(file);
    let mut v: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
    tmp
}

/// Refused with `state`, the message naming each of `names`.
fn refused(path: &Path, state: SqlState, names: &[&str]) {
    let err = load(path).err().unwrap_or_else(|| panic!("{}: loaded", path.display()));
    let message = err.to_string();
    assert_eq!(err.sqlstate(), state, "{message}");
    for n in names {
        assert!(message.contains(n), "{message} names {n}");
    }
    let _ = std::fs::remove_dir_all(path);
}

#[test]
fn half_present_stanford_layouts_are_refused_by_name() {
    use SqlState::FeatureNotSupported as F;
    // No linear.weight beside the bert. weights.
    let tmp = tempdir("no_linear");
    copy_model(&dir("stanford"), &tmp);
    let weights = tmp.join("model.safetensors");
    let mut tensors = candle_core::safetensors::load(&weights, &candle_core::Device::Cpu).unwrap();
    tensors.remove("linear.weight").unwrap();
    candle_core::safetensors::save(&tensors, &weights).unwrap();
    refused(&tmp, F, &["HF_ColBERT without linear.weight"]);
    // artifact.metadata: a key colbert-ir does not have, settings that change the scores.
    let p = edited("stanford", "unknown_key", "artifact.metadata", |m| m["query_augmentation"] = Value::Bool(true));
    refused(&p, F, &["artifact.metadata key", "query_augmentation"]);
    let p = edited("stanford", "l2", "artifact.metadata", |m| m["similarity"] = "l2".into());
    refused(&p, F, &["similarity", "l2"]);
    let p = edited("stanford", "flipr", "artifact.metadata", |m| m["interaction"] = "flipr".into());
    refused(&p, F, &["interaction", "flipr"]);
    let p = edited("stanford", "dim", "artifact.metadata", |m| m["dim"] = 128.into());
    refused(&p, F, &["artifact.metadata dim", "128"]);
    // colbert-ir's files beside a config.json that does not name HF_ColBERT.
    let p = edited("stanford", "no_architecture", "config.json", |c| c["architectures"] = serde_json::json!(["BertModel"]));
    refused(&p, F, &["artifact.metadata without HF_ColBERT"]);
    let p = edited("stanford", "no_metadata", "config.json", |c| c["architectures"] = serde_json::json!(["BertModel"]));
    std::fs::remove_file(p.join("artifact.metadata")).unwrap();
    refused(&p, F, &["linear.weight without HF_ColBERT"]);
    // Without artifact.metadata, MultiVectorEncoder's defaults: queries of 32 tokens.
    let tmp = tempdir("defaults");
    copy_model(&dir("stanford"), &tmp);
    std::fs::remove_file(tmp.join("artifact.metadata")).unwrap();
    let p = load(&tmp).unwrap();
    assert_eq!(multi(&p, &["hello world"], Some("query"))[0].rows, 32);
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn native_layouts_pg_embed_does_not_compute_are_refused_by_name() {
    use SqlState::FeatureNotSupported as F;
    let pooled = |p: &mut Value| p["pool_factor"] = 2.into();
    let p = edited("mve_min", "pool2", "4_HierarchicalTokenPooling/config.json", pooled);
    refused(&p, F, &["HierarchicalTokenPooling pool_factor", "2"]);
    let p = edited("mve", "strategy", "sentence_bert_config.json", |c| c["query_expansion"]["strategy"] = "grow".into());
    refused(&p, F, &["query_expansion strategy", "grow"]);
    let p = edited("mve", "token", "sentence_bert_config.json", |c| c["query_expansion"]["token"] = "<nope>".into());
    refused(&p, F, &["query_expansion token", "<nope>"]);
    let p = edited("mve", "kwargs", "sentence_bert_config.json", |c| {
        c["processing_kwargs"] = serde_json::json!({"text": {"padding_side": "left"}})
    });
    refused(&p, F, &["processing_kwargs", "padding_side"]);
    let p = edited("mve", "normalize", "3_Normalize/config.json", |c| {
        *c = serde_json::json!({"module_input_name": "sentence_embedding"})
    });
    refused(&p, F, &["Normalize input/output", "sentence_embedding"]);
    let p = edited("mve", "similarity", "config_sentence_transformers.json", |c| c["similarity_fn_name"] = "cosine".into());
    refused(&p, F, &["similarity_fn_name", "cosine"]);
    let p = edited("mve", "mask_keys", "2_MultiVectorMask/config.json", |c| c["skiplist_regex"] = ".*".into());
    refused(&p, F, &["MultiVectorMask setting", "skiplist_regex"]);
    // A module after the Normalize, or one MultiVectorEncoder does not know.
    let p = edited("mve", "order", "modules.json", |m| {
        let dense = m[1].clone();
        m.as_array_mut().unwrap().push(dense);
    });
    refused(&p, F, &["Dense at position 4"]);
    let p = edited("mve", "unknown_module", "modules.json", |m| {
        m[2]["type"] = "sentence_transformers.multi_vector_encoder.modules.token_pooling.LambdaTokenPooling".into()
    });
    refused(&p, F, &["LambdaTokenPooling"]);
}

/// The token heads of both layouts travel in the shared prepared file: the second load maps
/// it and gives the same vectors bit for bit (Stanford's projection is a tensor of the
/// backbone's own file).
#[test]
fn multi_vector_heads_are_shared_through_the_prepared_file() {
    let texts = ["Hello, world! (a test) -- yes?", "data", ""];
    for name in ["mve_min", "stanford"] {
        let private = load(&dir(name)).unwrap();
        let (_, mapped) = built_and_mapped(&format!("mv_{name}"), &dir(name), &Options::default());
        for side in [Some("query"), None] {
            assert_eq!(multi(&mapped, &texts, side), multi(&private, &texts, side), "{name} {side:?}");
        }
        assert_eq!(mapped.info().parameters, private.info().parameters, "{name}");
    }
}
