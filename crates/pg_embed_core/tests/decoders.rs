//! Decoder and XLNet models against transformers and sentence-transformers: tiny seeded
//! checkpoints from scripts/gen_decoder_fixtures.py with the reference outputs in
//! tests/fixtures/decoders/golden.json, one input at a time and as one padded batch (the
//! tokenizer's own padding side: left for XLNet and Qwen).

mod common;

use common::*;
use serde::Deserialize;

use pg_embed_core::error::Error;
use pg_embed_core::options::Options;
use pg_embed_core::pipeline::Pipeline;

#[derive(Deserialize)]
struct Golden {
    fixtures: std::collections::BTreeMap<String, Fixture>,
}

#[derive(Deserialize)]
struct Fixture {
    model_type: String,
    kind: String,
    hidden_size: usize,
    cases: Vec<Case>,
    /// The cases' outputs from one padded batch through the reference.
    #[serde(default)]
    batched: Option<Vec<Vec<f32>>>,
    /// Batch rows the reference reads at a padding position (an input of nothing but pad
    /// tokens, left-padded): a batch must give their single-input result instead.
    #[serde(default)]
    batched_all_pad_rows: Vec<usize>,
    /// Inputs the reference cannot run, with why.
    #[serde(default)]
    skipped: Vec<Skipped>,
    #[serde(default)]
    rerank: Option<Rerank>,
}

#[derive(Deserialize)]
struct Case {
    text: String,
    pair: Option<String>,
    prompt_name: Option<String>,
    input_ids: Vec<u32>,
    token_type_ids: Option<Vec<u32>>,
    #[serde(default)]
    hidden: Option<Vec<f32>>,
    /// The embedding or the logits (none for a backbone).
    #[serde(default)]
    output: Vec<f32>,
}

#[derive(Deserialize)]
struct Skipped {
    text: String,
}

#[derive(Deserialize)]
struct Rerank {
    query: String,
    documents: Vec<String>,
    input_ids: Vec<Vec<u32>>,
    scores: Vec<f32>,
}

/// Hidden states and logits: the references differ from themselves by up to 1.4e-5
/// between batched and single runs of these fixtures.
const TOL: f32 = 1e-4;

fn dir() -> std::path::PathBuf {
    root().join("tests/fixtures/decoders")
}

fn golden() -> Golden {
    serde_json::from_slice(&std::fs::read(dir().join("golden.json")).unwrap()).expect("golden.json parses")
}

fn load(name: &str) -> Pipeline {
    Pipeline::load(&dir().join(name), &Options::default()).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// |got - want| <= TOL * max(1, |want|) element-wise and cosine >= 0.9999; the largest
/// difference.
fn close(got: &[f32], want: &[f32], what: &str) -> f32 {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= TOL * w.abs().max(1.0), "{what}: element {i}: {g} vs {w}");
    }
    if want.len() > 1 && want.iter().any(|w| *w != 0.0) {
        assert!(cosine(got, want) >= 0.9999, "{what}: cosine {}", cosine(got, want));
    }
    max_abs_diff(got, want)
}

/// Every case of fixture `name`, one by one and as one batch, against the reference; the
/// largest difference (single, batched).
fn check(name: &str) -> (f32, f32) {
    let g = golden();
    let fx = &g.fixtures[name];
    let p = load(name);
    assert_eq!(p.info().architecture, fx.model_type, "{name}");
    let (mut single, mut batched) = (0f32, 0f32);
    for c in &fx.cases {
        let what = format!("{name}/{:?}+{:?}/{:?}", c.text, c.pair, c.prompt_name);
        if fx.kind == "classify" {
            let pair = c.pair.as_deref().and_then(Pipeline::pair_argument);
            let (ids, types) = p.tokenize_pair(&c.text, pair).unwrap();
            assert_eq!(ids, c.input_ids, "{what}: tokens");
            assert_eq!(types, c.token_type_ids.clone().unwrap_or_default(), "{what}: type ids");
            let got = p.classify(&[(c.text.as_str(), pair)]).unwrap().remove(0);
            single = single.max(close(&got, &c.output, &what));
        } else {
            let (ids, _) = p.tokenize_with_prompt(&c.text, c.prompt_name.as_deref()).unwrap();
            assert_eq!(ids, c.input_ids, "{what}: tokens");
            if fx.kind == "backbone" {
                let hidden = p.hidden_states(&[c.text.as_str()]).unwrap().remove(0).concat();
                let want = c.hidden.as_ref().expect("a backbone case has hidden states");
                assert_eq!(hidden.len(), c.input_ids.len() * fx.hidden_size, "{what}");
                single = single.max(close(&hidden, want, &what));
            }
            let got = p.embed_with_prompt(&[c.text.as_str()], c.prompt_name.as_deref()).unwrap().remove(0);
            if fx.kind == "embed" {
                single = single.max(close(&got, &c.output, &what));
            }
        }
    }
    // Every case in one packed batch (per prompt for embedding models); a row the
    // reference read at a padding position, and every row of a model the reference cannot
    // batch, must equal its single-input reference.
    let want_batched =
        fx.batched.clone().unwrap_or_else(|| fx.cases.iter().map(|c| c.output.clone()).collect());
    let got: Vec<Vec<f32>> = match fx.kind.as_str() {
        "classify" => {
            let inputs: Vec<(&str, Option<&str>)> = fx
                .cases
                .iter()
                .map(|c| (c.text.as_str(), c.pair.as_deref().and_then(Pipeline::pair_argument)))
                .collect();
            p.classify(&inputs).unwrap()
        }
        "embed" => fx
            .cases
            .iter()
            .map(|c| {
                let texts: Vec<&str> = fx
                    .cases
                    .iter()
                    .filter(|o| o.prompt_name == c.prompt_name)
                    .map(|o| o.text.as_str())
                    .collect();
                let at = texts.iter().position(|t| *t == c.text).unwrap();
                p.embed_with_prompt(&texts, c.prompt_name.as_deref()).unwrap().remove(at)
            })
            .collect(),
        _ => {
            let texts: Vec<&str> = fx.cases.iter().map(|c| c.text.as_str()).collect();
            let hidden = p.hidden_states(&texts).unwrap();
            for (c, h) in fx.cases.iter().zip(hidden) {
                let what = format!("{name}/{:?} in a batch", c.text);
                batched = batched.max(close(&h.concat(), c.hidden.as_ref().unwrap(), &what));
            }
            eprintln!("{name}: largest difference {single:.2e} one by one, {batched:.2e} batched (hidden states)");
            return (single, batched);
        }
    };
    for (i, (got, c)) in got.iter().zip(&fx.cases).enumerate() {
        let what = format!("{name}/{:?} in a batch", c.text);
        let want = if fx.batched_all_pad_rows.contains(&i) { &c.output } else { &want_batched[i] };
        batched = batched.max(close(got, want, &what));
    }
    // Inputs the reference cannot run are a clear error here.
    for s in &fx.skipped {
        let e = match fx.kind.as_str() {
            "classify" => p.classify(&[(s.text.as_str(), None)]).unwrap_err(),
            _ => p.embed(&[s.text.as_str()]).unwrap_err(),
        };
        assert!(matches!(e, Error::EmptyInput { .. }), "{name}/{:?}: {e}", s.text);
    }
    if let Some(r) = &fx.rerank {
        let inputs: Vec<(&str, Option<&str>)> =
            r.documents.iter().map(|d| (r.query.as_str(), Some(d.as_str()))).collect();
        for ((_, d), ids) in inputs.iter().zip(&r.input_ids) {
            assert_eq!(&p.tokenize_pair(&r.query, *d).unwrap().0, ids, "{name}: rerank tokens of {d:?}");
        }
        let classifier = p.classifier().unwrap();
        assert!(classifier.rerank_sigmoid, "{name}: a one-label cross-encoder scores with a sigmoid");
        let scores: Vec<f32> =
            p.classify(&inputs).unwrap().iter().map(|l| pg_embed_core::classifier::sigmoid(l[0])).collect();
        close(&scores, &r.scores, &format!("{name}: rerank"));
    }
    eprintln!("{name}: largest difference {single:.2e} one by one, {batched:.2e} batched");
    (single, batched)
}

#[test]
fn gpt2_backbone() {
    check("gpt2");
}

#[test]
fn gpt2_classifier_reads_the_last_non_padding_token() {
    check("gpt2_classify");
}

#[test]
fn gpt2_classifier_without_a_pad_token_batches_as_single_inputs() {
    check("gpt2_classify_nopad");
}

#[test]
fn xlnet_backbone() {
    check("xlnet");
}

#[test]
fn xlnet_classifier_singles_and_pairs() {
    check("xlnet_classify");
}

#[test]
fn xlnet_classifier_with_token_type_ids() {
    check("xlnet_classify_types");
}

#[test]
fn qwen3_embedder_with_prompts() {
    check("qwen3_embed");
}

#[test]
fn qwen2_embedder_with_prompts() {
    check("qwen2_embed");
}

#[test]
fn qwen3_classifier_and_reranker() {
    check("qwen3_classify");
}

#[test]
fn qwen2_classifier() {
    check("qwen2_classify");
}

#[test]
fn embeddinggemma_with_dense_heads_and_prompts() {
    check("embeddinggemma");
}

/// Settings the decoders do not implement are load errors naming the setting.
#[test]
fn unimplemented_settings_are_named() {
    let cases: [(&str, &str, serde_json::Value, &str); 7] = [
        (
            "qwen3_embed",
            "rope_scaling",
            serde_json::json!({"rope_type": "yarn", "factor": 4.0}),
            "rope_scaling",
        ),
        (
            "qwen3_embed",
            "rope_parameters",
            serde_json::json!({"rope_type": "linear", "factor": 2.0}),
            "rope_type",
        ),
        ("qwen2_embed", "use_sliding_window", true.into(), "use_sliding_window"),
        ("embeddinggemma", "attn_logit_softcapping", 50.0.into(), "attn_logit_softcapping"),
        ("embeddinggemma", "hidden_activation", "gelu_fast_fake".into(), "hidden_activation"),
        ("gpt2", "scale_attn_by_inverse_layer_idx", true.into(), "scale_attn_by_inverse_layer_idx"),
        ("gpt2_classify", "activation_function", "swiglu".into(), "activation_function"),
    ];
    for (name, key, value, what) in cases {
        let e = load_edited(&dir().join(name), name, |c| c[key] = value.clone())
            .err()
            .unwrap_or_else(|| panic!("{name}: {key} accepted"));
        assert!(matches!(e, Error::Unsupported { what: w, .. } if w == what), "{name}/{key}: {e}");
    }
    // Unchanged copies load.
    assert!(load_edited(&dir().join("qwen3_embed"), "qwen3_embed", |_| {}).is_ok());
}

/// A batch of a model whose config names no pad token cannot be padded by transformers;
/// pg_embed never pads, and its batches give the single-input results (checked above);
/// an input longer than the positions follows long_input.
#[test]
fn inputs_longer_than_the_positions_follow_long_input() {
    let long = "word ".repeat(200);
    let p = Pipeline::load(
        &dir().join("gpt2_classify"),
        &Options::from_json(&serde_json::json!({"long_input": "error"})).unwrap(),
    )
    .unwrap();
    assert!(matches!(p.classify(&[(long.as_str(), None)]), Err(Error::InputTooLong { .. })));
    let truncated = load("gpt2_classify").classify(&[(long.as_str(), None)]).unwrap();
    assert_eq!(truncated[0].len(), 3);
}
