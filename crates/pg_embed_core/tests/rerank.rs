//! Causal-LM rerankers (CrossEncoder over a *ForCausalLM: Transformer(text-generation), then
//! LogitScore) against sentence-transformers' `CrossEncoder.predict`, on the tiny checkpoints
//! of scripts/gen_reranker_fixtures.py: the token ids exactly (chat template, truncation with
//! the closing tokens put back), the scores within 1e-4 x max(1, |value|), and the refusals
//! of half-present layouts.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde::Deserialize;

use pg_embed_core::error::Error;
use pg_embed_core::options::Options;
use pg_embed_core::pipeline::Pipeline;

#[derive(Deserialize)]
struct Golden {
    fixtures: std::collections::HashMap<String, Fixture>,
}

#[derive(Deserialize)]
struct Fixture {
    true_token_id: u32,
    false_token_id: Option<u32>,
    activation_fn: String,
    /// How far PyTorch's bfloat16 autocast run moves the raw scores from float32.
    torch_bf16_max_abs: f32,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    query: String,
    document: String,
    input_ids: Vec<u32>,
    truncated: bool,
    score: f32,
    raw: f32,
}

fn dir() -> PathBuf {
    root().join("tests/fixtures/rerank")
}

fn golden() -> Golden {
    serde_json::from_slice(&std::fs::read(dir().join("golden.json")).unwrap()).expect("rerank golden parses")
}

fn load(name: &str) -> Pipeline {
    Pipeline::load(&dir().join(name), &Options::default()).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn near(got: f32, want: f32, what: &str) {
    assert!((got - want).abs() <= 1e-4 * want.abs().max(1.0), "{what}: {got} vs {want}");
}

const NAMES: [&str; 2] = ["qwen3_reranker", "qwen3_reranker_true"];

#[test]
fn token_ids_are_crossencoders() {
    let g = golden();
    for name in NAMES {
        let p = load(name);
        let fx = &g.fixtures[name];
        assert!(fx.cases.iter().any(|c| c.truncated), "{name}: no case is cut");
        for (i, c) in fx.cases.iter().enumerate() {
            let ids = p.tokenize_scored_pair(&c.query, &c.document).unwrap();
            assert_eq!(ids, c.input_ids, "{name} case {i}");
        }
    }
}

#[test]
fn classify_gives_the_logit_score_and_rerank_its_activation() {
    let g = golden();
    for name in NAMES {
        let p = load(name);
        let fx = &g.fixtures[name];
        let pairs: Vec<(&str, Option<&str>)> = fx.cases.iter().map(|c| (c.query.as_str(), Some(c.document.as_str()))).collect();
        // One batch, then one by one: the same values (each input's own last token).
        let batched = p.classify(&pairs).unwrap();
        for (i, c) in fx.cases.iter().enumerate() {
            assert_eq!(batched[i].len(), 1);
            near(batched[i][0], c.raw, &format!("{name} case {i} batched"));
            let one = p.classify(&[pairs[i]]).unwrap();
            near(one[0][0], c.raw, &format!("{name} case {i}"));
            let sigmoid = p.rerank_sigmoid().unwrap();
            assert_eq!(sigmoid, fx.activation_fn == "Sigmoid", "{name}");
            let activated = if sigmoid { 1.0 / (1.0 + (-batched[i][0]).exp()) } else { batched[i][0] };
            near(activated, c.score, &format!("{name} case {i} activated"));
        }
        let info = p.info();
        assert_eq!(info.task, "classify");
        assert_eq!(info.dim, 1);
        let described = info.classifier.as_ref().unwrap();
        assert_eq!(described["true_token_id"], fx.true_token_id);
        assert_eq!(described["false_token_id"], serde_json::json!(fx.false_token_id));
    }
}

/// `precision: "bfloat16"` moves the raw scores no more than 2.5x what PyTorch's own
/// bfloat16 run moves them (the bound of tests/bf16.rs); the score head stays float32.
#[test]
fn bfloat16_moves_the_scores_no_more_than_pytorch_bfloat16_does() {
    let g = golden();
    let options = Options::from_json(&serde_json::json!({"precision": "bfloat16"})).unwrap();
    for name in NAMES {
        let fx = &g.fixtures[name];
        let p = Pipeline::load(&dir().join(name), &options).unwrap();
        let pairs: Vec<(&str, Option<&str>)> = fx.cases.iter().map(|c| (c.query.as_str(), Some(c.document.as_str()))).collect();
        let got = p.classify(&pairs).unwrap();
        let max_abs = got.iter().zip(&fx.cases).map(|(g, c)| (g[0] - c.raw).abs()).fold(0f32, f32::max);
        eprintln!("{name} ({}): max abs {max_abs:.2e} (torch {:.2e})", p.kernel(), fx.torch_bf16_max_abs);
        assert!(max_abs > 0.0 && max_abs <= 2.5 * fx.torch_bf16_max_abs, "{name}: {max_abs} vs torch {}", fx.torch_bf16_max_abs);
    }
}

#[test]
fn a_single_input_and_the_other_calls_are_refused() {
    let p = load("qwen3_reranker");
    let e = p.classify(&[("only a query", None)]).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let e = p.embed(&["x"]).unwrap_err();
    assert_eq!(e.to_string(), "model is for classify, not embed");
    let e = p.classifier().err().unwrap();
    assert!(e.to_string().contains("call rerank()"), "{e}");
}

#[test]
fn long_input_error_refuses_a_cut_pair() {
    let g = golden();
    let c = g.fixtures["qwen3_reranker"].cases.iter().find(|c| c.truncated).unwrap();
    let p = Pipeline::load(&dir().join("qwen3_reranker"), &Options::from_json(&serde_json::json!({"long_input": "error"})).unwrap()).unwrap();
    let e = p.classify(&[(c.query.as_str(), Some(c.document.as_str()))]).unwrap_err();
    assert!(matches!(e, Error::InputTooLong { max_length: 200, .. }), "{e}");
}

/// A copy of a fixture with `edit` applied to its files.
fn edited(name: &str, tag: &str, edit: impl FnOnce(&Path)) -> pg_embed_core::error::Result<Pipeline> {
    let to = std::env::temp_dir().join(format!("pg_embed_rerank_{tag}_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&to);
    copy_model(&dir().join(name), &to);
    edit(&to);
    let r = Pipeline::load(&to, &Options::default());
    let _ = std::fs::remove_dir_all(&to);
    r
}

fn write_json(path: &Path, value: serde_json::Value) {
    std::fs::write(path, serde_json::to_vec(&value).unwrap()).unwrap();
}

fn err(r: pg_embed_core::error::Result<Pipeline>) -> Error {
    match r {
        Ok(_) => panic!("loaded"),
        Err(e) => e,
    }
}

#[test]
fn logit_score_without_its_config_is_refused() {
    let e = err(edited("qwen3_reranker", "noconfig", |d| std::fs::remove_file(d.join("1_LogitScore/config.json")).unwrap()));
    assert!(e.to_string().contains("1_LogitScore/config.json"), "{e}");
}

#[test]
fn a_token_outside_the_vocabulary_is_refused_naming_it() {
    let e = err(edited("qwen3_reranker", "vocab", |d| {
        write_json(&d.join("1_LogitScore/config.json"), serde_json::json!({"true_token_id": 480, "false_token_id": 266}))
    }));
    assert!(matches!(e, Error::InvalidFile { .. }), "{e}");
    assert!(e.to_string().contains("token id 480 is not in the vocabulary of 480 tokens"), "{e}");
}

#[test]
fn an_unknown_option_is_refused_naming_it() {
    let e = err(edited("qwen3_reranker", "option", |d| {
        write_json(
            &d.join("1_LogitScore/config.json"),
            serde_json::json!({"true_token_id": 267, "false_token_id": 266, "temperature": 2.0}),
        )
    }));
    assert!(e.to_string().contains("temperature"), "{e}");
    let e = err(edited("qwen3_reranker", "input", |d| {
        write_json(
            &d.join("1_LogitScore/config.json"),
            serde_json::json!({"true_token_id": 267, "module_input_name": "token_embeddings"}),
        )
    }));
    assert!(matches!(&e, Error::Unsupported { value, .. } if value == "token_embeddings"), "{e}");
    let e = err(edited("qwen3_reranker", "restore", |d| {
        let path = d.join("sentence_bert_config.json");
        let mut cfg: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        cfg["processing_kwargs"] = serde_json::json!({"chat_template": {"restore_suffix": false}});
        write_json(&path, cfg);
    }));
    assert!(matches!(&e, Error::Unsupported { what: "chat_template restore_suffix", .. }), "{e}");
}

#[test]
fn half_present_layouts_are_refused() {
    // text-generation without LogitScore.
    let e = err(edited("qwen3_reranker", "alone", |d| {
        let modules: serde_json::Value = serde_json::from_slice(&std::fs::read(d.join("modules.json")).unwrap()).unwrap();
        write_json(&d.join("modules.json"), serde_json::json!([modules[0]]));
    }));
    assert!(matches!(&e, Error::Unsupported { what: "module sequence", .. }), "{e}");
    // LogitScore after a feature-extraction Transformer.
    let e = err(edited("qwen3_reranker", "features", |d| {
        let path = d.join("sentence_bert_config.json");
        let mut cfg: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        cfg["transformer_task"] = "feature-extraction".into();
        write_json(&path, cfg);
    }));
    assert!(matches!(&e, Error::Unsupported { what: "module sequence", .. }), "{e}");
    // A template that does not render the document.
    let e = err(edited("qwen3_reranker", "template", |d| {
        std::fs::write(d.join("chat_template.jinja"), "{{ messages | selectattr('role', 'eq', 'query') | map(attribute='content') | first }}").unwrap()
    }));
    assert!(e.to_string().contains("chat template") && format!("{e:?}").contains("'document'"), "{e:?}");
    // No chat template at all.
    let e = err(edited("qwen3_reranker", "notemplate", |d| std::fs::remove_file(d.join("chat_template.jinja")).unwrap()));
    assert!(matches!(&e, Error::MissingFile { .. }), "{e}");
    // Untied without lm_head: the checkpoint of the tied model, said to be untied.
    let e = err(edited("qwen3_reranker", "untied", |d| {
        let path = d.join("config.json");
        let mut cfg: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        cfg["tie_word_embeddings"] = false.into();
        write_json(&path, cfg);
    }));
    assert!(e.to_string().contains("no lm_head.weight"), "{e}");
    // A causal LM whose head pg_embed does not compute (an unknown architecture name).
    let e = err(edited("qwen3_reranker", "arch", |d| {
        let path = d.join("config.json");
        let mut cfg: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        cfg["architectures"] = serde_json::json!(["Qwen3ForTokenClassification"]);
        write_json(&path, cfg);
    }));
    assert!(matches!(&e, Error::Unsupported { value, .. } if value == "Qwen3ForTokenClassification"), "{e}");
}

/// A second load maps the score head from the prepared file the first one wrote, and
/// scores as the private load does, bit for bit.
#[test]
fn the_score_head_is_shared_through_the_prepared_file() {
    let g = golden();
    for name in NAMES {
        let pairs: Vec<(&str, Option<&str>)> =
            g.fixtures[name].cases.iter().map(|c| (c.query.as_str(), Some(c.document.as_str()))).collect();
        let want = load(name).classify(&pairs).unwrap();
        let (_, mapped) = built_and_mapped(&format!("rerank_{name}"), &dir().join(name), &Options::default());
        assert_eq!(mapped.classify(&pairs).unwrap(), want, "{name}");
    }
}
