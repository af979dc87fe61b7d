//! The checker of a fixture set laid out as tests/fixtures/decoders/golden.json (see
//! scripts/gen_decoder_fixtures.py): every case one by one and as one padded batch against
//! transformers / sentence-transformers, with its token ids. Used by tests/decoders.rs and
//! tests/families.rs.

use std::path::Path;

use serde::Deserialize;

use pg_embed_core::error::Error;
use pg_embed_core::options::Options;
use pg_embed_core::pipeline::Pipeline;

use super::{cosine, max_abs_diff};

#[derive(Deserialize)]
pub struct Golden {
    pub fixtures: std::collections::BTreeMap<String, Fixture>,
}

#[derive(Deserialize)]
pub struct Fixture {
    pub model_type: String,
    pub kind: String,
    pub hidden_size: usize,
    pub cases: Vec<Case>,
    /// The cases' outputs from one padded batch through the reference.
    #[serde(default)]
    pub batched: Option<Vec<Vec<f32>>>,
    /// Batch rows the reference reads at a padding position (an input of nothing but pad
    /// tokens, left-padded): a batch must give their single-input result instead.
    #[serde(default)]
    pub batched_all_pad_rows: Vec<usize>,
    /// Inputs the reference cannot run, with why.
    #[serde(default)]
    pub skipped: Vec<Skipped>,
    #[serde(default)]
    pub rerank: Option<Rerank>,
    /// Embedding models: the prompts by name (config_sentence_transformers.json).
    #[serde(default)]
    pub prompts: std::collections::BTreeMap<String, String>,
}

#[derive(Deserialize)]
pub struct Case {
    pub text: String,
    pub pair: Option<String>,
    pub prompt_name: Option<String>,
    pub input_ids: Vec<u32>,
    pub token_type_ids: Option<Vec<u32>>,
    #[serde(default)]
    pub hidden: Option<Vec<f32>>,
    /// The embedding or the logits (none for a backbone).
    #[serde(default)]
    pub output: Vec<f32>,
}

#[derive(Deserialize)]
pub struct Skipped {
    pub text: String,
}

#[derive(Deserialize)]
pub struct Rerank {
    pub query: String,
    pub documents: Vec<String>,
    pub input_ids: Vec<Vec<u32>>,
    pub scores: Vec<f32>,
}

/// Hidden states and logits: the references differ from themselves by up to 1.4e-5
/// (decoders) and 3.3e-5 (families) between batched and single runs of these fixtures.
pub const TOL: f32 = 1e-4;

/// `dir`/golden.json.
pub fn golden(dir: &Path) -> Golden {
    serde_json::from_slice(&std::fs::read(dir.join("golden.json")).unwrap()).expect("golden.json parses")
}

pub fn load(dir: &Path, name: &str) -> Pipeline {
    Pipeline::load(&dir.join(name), &Options::default()).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// |got - want| <= TOL * max(1, |want|) element-wise and cosine >= `cosine_min`; the largest
/// difference.
pub fn close(got: &[f32], want: &[f32], cosine_min: f32, what: &str) -> f32 {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= TOL * w.abs().max(1.0), "{what}: element {i}: {g} vs {w}");
    }
    if want.len() > 1 && want.iter().any(|w| *w != 0.0) {
        assert!(cosine(got, want) >= cosine_min, "{what}: cosine {}", cosine(got, want));
    }
    max_abs_diff(got, want)
}

/// Every case of fixture `name` of the set in `dir`, one by one and as one batch, against
/// the reference (cosine at least `cosine_min`); the largest difference (single, batched).
pub fn check(dir: &Path, name: &str, cosine_min: f32) -> (f32, f32) {
    let g = golden(dir);
    let fx = &g.fixtures[name];
    let p = load(dir, name);
    assert_eq!(p.info().architecture, fx.model_type, "{name}");
    let close = |got: &[f32], want: &[f32], what: &str| close(got, want, cosine_min, what);
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
            eprintln!(
                "{name}: largest difference {single:.2e} one by one, {batched:.2e} batched (hidden states)"
            );
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
