//! Golden parity with sentence-transformers for the real all-MiniLM-L6-v2
//! (reference vectors made by scripts/gen_golden.py, committed in tests/golden/).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::options::Options;
use crate::pipeline::Pipeline;

#[derive(Deserialize)]
struct Golden {
    max_seq_length: usize,
    dim: usize,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    text: String,
    input_ids: Vec<u32>,
    embedding: Vec<f32>,
    /// Pooled output before the Normalize module (all-MiniLM-L6-v2 only).
    #[serde(default)]
    pooled: Vec<f32>,
}

const COSINE_MIN: f32 = 0.9999;
const ABS_TOL: f32 = 1e-4;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn golden() -> Golden {
    let path = root().join("tests/golden/all-minilm-l6-v2.json");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).expect("golden file parses")
}

fn minilm() -> Pipeline {
    let dir = root().join("models/all-MiniLM-L6-v2");
    assert!(
        Path::new(&dir).join("model.safetensors").exists(),
        "{} is missing: run scripts/fetch_model.sh",
        dir.display()
    );
    Pipeline::load(&dir, &Options::default()).expect("all-MiniLM-L6-v2 loads")
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (na * nb)
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

#[test]
fn minilm_pipeline_is_resolved_from_its_files() {
    let g = golden();
    let p = minilm();
    let info = p.info();
    assert_eq!(info.architecture, "bert");
    assert_eq!(info.dim, g.dim);
    assert_eq!(info.max_length, g.max_seq_length, "sentence_bert_config.json, not tokenizer.json's 128");
    assert_eq!(info.pooling, vec![crate::pooling::PoolingMode::Mean]);
    assert!(info.normalize, "modules.json names a Normalize module");
}

#[test]
fn minilm_tokenization_matches_sentence_transformers() {
    let g = golden();
    let p = minilm();
    assert!(g.cases.len() >= 60, "golden set has {} cases", g.cases.len());
    for case in &g.cases {
        assert_eq!(p.tokenize(&case.text).unwrap(), case.input_ids, "case {}", case.name);
    }
}

#[test]
fn minilm_embeddings_match_sentence_transformers_one_by_one() {
    let g = golden();
    let p = minilm();
    let mut worst = (1.0f32, 0.0f32);
    for case in &g.cases {
        let got = p.embed(&[case.text.as_str()]).unwrap().remove(0);
        assert_eq!(got.len(), case.embedding.len(), "case {}", case.name);
        let (cos, diff) = (cosine(&got, &case.embedding), max_abs_diff(&got, &case.embedding));
        assert!(cos >= COSINE_MIN, "case {}: cosine {cos}", case.name);
        assert!(diff <= ABS_TOL, "case {}: max abs diff {diff}", case.name);
        worst = (worst.0.min(cos), worst.1.max(diff));
    }
    eprintln!("all-MiniLM-L6-v2 parity: min cosine {}, max abs diff {:e}", worst.0, worst.1);
}

#[test]
fn minilm_padded_batch_matches_sentence_transformers() {
    let g = golden();
    let p = minilm();
    let texts: Vec<&str> = g.cases.iter().map(|c| c.text.as_str()).collect();
    let got = p.embed(&texts).unwrap();
    assert_eq!(got.len(), g.cases.len());
    for (case, v) in g.cases.iter().zip(&got) {
        assert!(cosine(v, &case.embedding) >= COSINE_MIN, "case {} in a batch", case.name);
        assert!(max_abs_diff(v, &case.embedding) <= ABS_TOL, "case {} in a batch", case.name);
    }
}

#[test]
fn minilm_without_normalize_matches_the_pooled_output() {
    let g = golden();
    let dir = root().join("models/all-MiniLM-L6-v2");
    let options = Options { normalize: Some(false), ..Options::default() };
    let p = Pipeline::load(&dir, &options).unwrap();
    for case in g.cases.iter().step_by(4) {
        let got = p.embed(&[case.text.as_str()]).unwrap().remove(0);
        assert!(cosine(&got, &case.pooled) >= COSINE_MIN, "case {}", case.name);
        assert!(max_abs_diff(&got, &case.pooled) <= ABS_TOL, "case {}", case.name);
    }
}

/// tests/fixtures: tiny seeded random sentence-transformers models made by
/// scripts/gen_fixtures.py, with sentence-transformers' outputs in golden.json.
#[derive(Deserialize)]
struct Fixtures {
    fixtures: std::collections::HashMap<String, Fixture>,
}

#[derive(Deserialize)]
struct Fixture {
    cases: Vec<Case>,
    #[serde(default)]
    batched_embeddings: Option<Vec<Vec<f32>>>,
}

fn fixtures() -> Fixtures {
    let path = root().join("tests/fixtures/golden.json");
    serde_json::from_slice(&std::fs::read(&path).unwrap()).expect("fixture golden file parses")
}

fn fixture(name: &str) -> Pipeline {
    Pipeline::load(&root().join("tests/fixtures").join(name), &Options::default())
        .unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

fn assert_close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let (cos, diff) = (cosine(got, want), max_abs_diff(got, want));
    assert!(cos >= COSINE_MIN || want.iter().all(|x| *x == 0.0), "{what}: cosine {cos}");
    assert!(diff <= ABS_TOL, "{what}: max abs diff {diff}");
}

#[test]
fn every_pooling_mode_matches_sentence_transformers() {
    let all = fixtures();
    let modes = ["cls", "mean", "max", "mean_sqrt_len_tokens", "weightedmean", "lasttoken", "concat"];
    for mode in modes {
        let name = format!("pool_{mode}");
        let p = fixture(&name);
        let fx = &all.fixtures[&name];
        assert!(fx.cases.len() >= 20, "{name}: {} cases", fx.cases.len());
        for case in &fx.cases {
            let what = format!("{name}/{}", case.name);
            assert_eq!(p.tokenize(&case.text).unwrap(), case.input_ids, "{what}: token ids");
            assert_close(&p.embed(&[case.text.as_str()]).unwrap()[0], &case.embedding, &what);
        }
    }
}

#[test]
fn concatenated_pooling_in_a_padded_batch_matches_sentence_transformers() {
    let all = fixtures();
    let fx = &all.fixtures["pool_concat"];
    let want = fx.batched_embeddings.as_ref().expect("pool_concat has batched_embeddings");
    let texts: Vec<&str> = fx.cases.iter().map(|c| c.text.as_str()).collect();
    let got = fixture("pool_concat").embed(&texts).unwrap();
    for ((case, g), w) in fx.cases.iter().zip(&got).zip(want) {
        assert_close(g, w, &format!("pool_concat/{} in a batch", case.name));
    }
}

#[test]
fn dense_heads_match_sentence_transformers() {
    let all = fixtures();
    for name in [
        "dense_tanh",
        "dense_chain",
        "dense_gelu",
        "dense_sigmoid",
        "dense_leakyrelu",
        "dense_silu",
        "dense_softplus",
    ] {
        let p = fixture(name);
        let fx = &all.fixtures[name];
        assert!(!p.info().heads.is_empty(), "{name}: heads resolved");
        for case in &fx.cases {
            assert_close(
                &p.embed(&[case.text.as_str()]).unwrap()[0],
                &case.embedding,
                &format!("{name}/{}", case.name),
            );
        }
    }
    let chain = fixture("dense_chain");
    assert_eq!(chain.dim(), 8);
    let backbone_only = fixture("pool_cls").info().parameters;
    assert_eq!(chain.info().parameters, backbone_only + 32 * 24 + (24 * 8 + 8), "heads counted");
    assert_eq!(chain.info().heads[0]["bias"], false);
    assert_eq!(chain.info().heads[1]["activation"], "torch.nn.modules.activation.ReLU");
}

#[test]
fn an_unknown_dense_activation_is_named() {
    let src = root().join("tests/fixtures/dense_tanh");
    let dir = std::env::temp_dir().join(format!("pg_embed_dense_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let copy = std::process::Command::new("cp").arg("-r").arg(&src).arg(&dir).status().unwrap();
    assert!(copy.success());
    let cfg = dir.join("2_Dense/config.json");
    let text = std::fs::read_to_string(&cfg).unwrap().replace("activation.Tanh", "activation.Mish");
    std::fs::write(&cfg, text).unwrap();
    let err = Pipeline::load(&dir, &Options::default()).err().expect("must fail").to_string();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(err.contains("unsupported activation_function \"torch.nn.modules.activation.Mish\""), "{err}");
}
