//! The backbones that run on the layer library's packed stack (T5, CLIP-text, NomicBERT)
//! called directly through `forward_packed` / `pooler_packed` on the golden inputs of
//! scripts/gen_backbone_fixtures.py: one by one and as one packed batch, against
//! transformers' hidden states in tests/fixtures/backbones/golden.json, at the tolerance of
//! parity.rs' backbone test, and batched against one by one.

use std::path::PathBuf;

use serde::Deserialize;

const COSINE_MIN: f32 = 0.9999;
const HIDDEN_TOL: f32 = 1e-4;

#[derive(Deserialize)]
struct Golden {
    fixtures: std::collections::BTreeMap<String, Fixture>,
}

#[derive(Deserialize)]
struct Fixture {
    hidden_size: usize,
    #[serde(default)]
    cases: Vec<BackboneCase>,
    #[serde(default)]
    derived_from: Option<String>,
}

#[derive(Deserialize)]
struct BackboneCase {
    input_ids: Vec<u32>,
    hidden: Vec<f32>,
    pooled: Vec<f32>,
}

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (na * nb)
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "lengths");
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max)
}

fn rows(flat: &[f32], width: usize) -> Vec<Vec<f32>> {
    flat.chunks(width).map(<[f32]>::to_vec).collect()
}

fn worst(got: &[Vec<f32>], want: &[Vec<f32>], what: &str) -> f32 {
    assert_eq!(got.len(), want.len(), "{what}: tokens");
    got.iter().zip(want).map(|(g, w)| max_abs_diff(g, w)).fold(0f32, f32::max)
}

/// The golden cases of backbone fixture `name` (its base's for a derived one) and the
/// fixture's weights and config, for calling a model's `forward_packed` directly.
fn packed_fixture(
    g: &Golden,
    name: &str,
) -> (
    Vec<(Vec<u32>, Vec<Vec<f32>>, Vec<f32>)>,
    candle_nn::VarBuilder<'static>,
    pg_embed_core::models::BackboneConfig,
) {
    let dir = root().join("tests/fixtures/backbones").join(name);
    let fx = &g.fixtures[name];
    let cases = fx.derived_from.as_ref().map_or(&fx.cases, |base| &g.fixtures[base].cases);
    let cases = cases
        .iter()
        .map(|c| (c.input_ids.clone(), rows(&c.hidden, fx.hidden_size), c.pooled.clone()))
        .collect();
    let tensors = pg_embed_core::pipeline::read_safetensors(&dir.join("model.safetensors")).unwrap();
    let vb = candle_nn::VarBuilder::from_tensors(tensors, candle_core::DType::F32, &candle_core::Device::Cpu);
    let config_path = dir.join("config.json");
    let config =
        pg_embed_core::models::BackboneConfig::parse(&config_path, &std::fs::read(&config_path).unwrap())
            .unwrap();
    (cases, vb, config)
}

type Packed<'a> = &'a (dyn Fn(&[u32], &[u32], &[usize]) -> candle_core::Result<Vec<f32>> + Sync);

/// `forward` on every golden input one by one, then on all of them as one packed batch
/// (on 1 and 2 threads): each against transformers' hidden states at the backbone
/// test's tolerance, and the batch against one by one. Returns the packed batch's
/// hidden states and its ids and bounds.
fn check_packed(
    name: &str,
    cases: &[(Vec<u32>, Vec<Vec<f32>>, Vec<f32>)],
    forward: Packed,
) -> (Vec<f32>, Vec<u32>, Vec<usize>) {
    let mut ones = Vec::new();
    let (mut hidden_worst, mut batch_worst) = (0f32, 0f32);
    for (ids, want, _) in cases {
        let types = vec![0u32; ids.len()];
        let got = forward(ids, &types, &[0, ids.len()]).unwrap();
        let got = rows(&got, want[0].len());
        let d = worst(&got, want, name);
        assert!(d <= HIDDEN_TOL, "{name}/{ids:?}: hidden states max abs diff {d}");
        hidden_worst = hidden_worst.max(d);
        ones.push(got);
    }
    let ids: Vec<u32> = cases.iter().flat_map(|(ids, _, _)| ids.iter().copied()).collect();
    let mut bounds = vec![0];
    for (case_ids, _, _) in cases {
        bounds.push(bounds.last().unwrap() + case_ids.len());
    }
    let types = vec![0u32; ids.len()];
    let width = cases[0].1[0].len();
    let mut batch = Vec::new();
    for threads in [1, 2] {
        batch = pg_embed_core::threads::run(threads, || forward(&ids, &types, &bounds)).unwrap().unwrap();
        for (i, one) in ones.iter().enumerate() {
            let part = rows(&batch[bounds[i] * width..bounds[i + 1] * width], width);
            let d = worst(&part, one, name);
            assert!(
                d <= HIDDEN_TOL,
                "{name}: input {i} in a packed batch on {threads} threads vs alone: {d}"
            );
            batch_worst = batch_worst.max(d);
            let d = worst(&part, &cases[i].1, name);
            assert!(d <= HIDDEN_TOL, "{name}: input {i} in a packed batch: hidden states max abs diff {d}");
        }
    }
    eprintln!("{name:<14} forward_packed: hidden {hidden_worst:.1e}, batched vs single {batch_worst:.1e}");
    (batch, ids, bounds)
}

fn golden_backbones() -> Golden {
    let path = root().join("tests/fixtures/backbones/golden.json");
    serde_json::from_slice(&std::fs::read(&path).unwrap()).expect("backbone golden parses")
}

#[test]
fn t5_forward_packed_matches_transformers() {
    let g = golden_backbones();
    let (cases, vb, config) = packed_fixture(&g, "t5");
    let pg_embed_core::models::BackboneConfig::T5(cfg) = config else { panic!("t5 fixture") };
    let model = pg_embed_core::models::t5::load(vb, &cfg).unwrap();
    check_packed("t5", &cases, &|ids, types, bounds| model.forward_packed(ids, types, bounds));
}

#[test]
fn nomic_bert_forward_packed_matches_transformers() {
    let g = golden_backbones();
    for name in ["nomic_bert", "nomic_bert_hub"] {
        let (cases, vb, config) = packed_fixture(&g, name);
        let pg_embed_core::models::BackboneConfig::NomicBert(cfg) = config else { panic!("{name} fixture") };
        let model = pg_embed_core::models::nomic_bert::load(vb, &cfg).unwrap();
        check_packed(name, &cases, &|ids, types, bounds| model.forward_packed(ids, types, bounds));
    }
}

#[test]
fn clip_forward_packed_and_pooler_packed_match_transformers() {
    let g = golden_backbones();
    let (cases, vb, config) = packed_fixture(&g, "clip");
    let pg_embed_core::models::BackboneConfig::ClipText(cfg) = config else { panic!("clip fixture") };
    let model = pg_embed_core::models::clip::load(vb, &cfg).unwrap();
    let (hidden, ids, bounds) =
        check_packed("clip", &cases, &|ids, types, bounds| model.forward_packed(ids, types, bounds));
    // text_embeds of the packed batch, and of each input alone.
    let pooled = model.pooler_packed(&hidden, &ids, &bounds).unwrap().unwrap().to_vec2::<f32>().unwrap();
    assert_eq!(pooled.len(), cases.len());
    for (i, (case_ids, _, want)) in cases.iter().enumerate() {
        let d = max_abs_diff(&pooled[i], want);
        assert!(
            cosine(&pooled[i], want) >= COSINE_MIN && d <= HIDDEN_TOL,
            "clip input {i}: pooled max abs diff {d}"
        );
        let alone = model.forward_packed(case_ids, &[], &[0, case_ids.len()]).unwrap();
        let one = model
            .pooler_packed(&alone, case_ids, &[0, case_ids.len()])
            .unwrap()
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        assert!(
            max_abs_diff(&one[0], &pooled[i]) <= HIDDEN_TOL,
            "clip input {i}: pooled alone vs in a batch"
        );
    }
}
