//! Every backbone through the `Model` trait on packed batches: the golden inputs of
//! scripts/gen_backbone_fixtures.py one by one and as one packed batch (on 1 and 2 compute
//! threads), against transformers' hidden states in tests/fixtures/backbones/golden.json at
//! the backbone test's tolerance, and batched against one by one (batch invariance). A
//! backbone with a pooler (CLIP's text_embeds) is checked the same way.

mod common;

use common::*;
use serde::Deserialize;

use pg_embed_core::models::{BackboneConfig, Batch, Model};

const HIDDEN_TOL: f32 = 1e-4;

#[derive(Deserialize)]
struct Golden {
    fixtures: std::collections::BTreeMap<String, Fixture>,
}

#[derive(Deserialize)]
struct Fixture {
    hidden_size: usize,
    pooled_by: String,
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

fn rows(flat: &[f32], width: usize) -> Vec<Vec<f32>> {
    flat.chunks(width).map(<[f32]>::to_vec).collect()
}

fn worst(got: &[Vec<f32>], want: &[Vec<f32>], what: &str) -> f32 {
    assert_eq!(got.len(), want.len(), "{what}: tokens");
    got.iter().zip(want).map(|(g, w)| max_abs_diff(g, w)).fold(0f32, f32::max)
}

/// The backbone of fixture `name`, loaded through the architecture table.
fn load(name: &str) -> Box<dyn Model> {
    let dir = root().join("tests/fixtures/backbones").join(name);
    let tensors = pg_embed_core::safetensors_io::read_safetensors(&dir.join("model.safetensors")).unwrap();
    let vb = candle_nn::VarBuilder::from_tensors(tensors, candle_core::DType::F32, &candle_core::Device::Cpu);
    let config_path = dir.join("config.json");
    let config = BackboneConfig::parse(&config_path, &std::fs::read(&config_path).unwrap()).unwrap();
    config.load(vb).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn batch<'a>(ids: &'a [u32], types: &'a [u32], bounds: &'a [usize]) -> Batch<'a> {
    Batch::text(ids, types, bounds)
}

#[test]
fn every_backbone_packed_matches_transformers_and_is_batch_invariant() {
    let path = root().join("tests/fixtures/backbones/golden.json");
    let g: Golden = serde_json::from_slice(&std::fs::read(&path).unwrap()).expect("backbone golden parses");
    for (name, fx) in &g.fixtures {
        let model = load(name);
        let cases = fx.derived_from.as_ref().map_or(&fx.cases, |base| &g.fixtures[base].cases);
        let width = fx.hidden_size;
        // One by one.
        let mut ones = Vec::new();
        let mut hidden_worst = 0f32;
        for c in cases {
            let types = vec![0u32; c.input_ids.len()];
            let bounds = [0, c.input_ids.len()];
            let got = rows(&model.forward(&batch(&c.input_ids, &types, &bounds)).unwrap(), width);
            let d = worst(&got, &rows(&c.hidden, width), name);
            assert!(d <= HIDDEN_TOL, "{name}/{:?}: hidden states max abs diff {d}", c.input_ids);
            hidden_worst = hidden_worst.max(d);
            ones.push(got);
        }
        // All of them as one packed batch, on 1 and 2 compute threads.
        let ids: Vec<u32> = cases.iter().flat_map(|c| c.input_ids.iter().copied()).collect();
        let types = vec![0u32; ids.len()];
        let mut bounds = vec![0];
        for c in cases {
            bounds.push(bounds.last().unwrap() + c.input_ids.len());
        }
        let packed = batch(&ids, &types, &bounds);
        let mut batch_worst = 0f32;
        for threads in [1, 2] {
            let hidden = pg_embed_core::threads::run(threads, || model.forward(&packed)).unwrap().unwrap();
            for (i, one) in ones.iter().enumerate() {
                let part = rows(&hidden[bounds[i] * width..bounds[i + 1] * width], width);
                let d = worst(&part, one, name);
                assert!(
                    d <= HIDDEN_TOL,
                    "{name}: input {i} in a packed batch on {threads} threads vs alone: {d}"
                );
                batch_worst = batch_worst.max(d);
            }
            // The pooler output (CLIP's text_embeds), batched and alone.
            if fx.pooled_by == "text_embeds" {
                let pooled = model.pooler(&hidden, &packed).unwrap().unwrap().to_vec2::<f32>().unwrap();
                assert_eq!(pooled.len(), cases.len(), "{name}");
                for (i, c) in cases.iter().enumerate() {
                    let d = max_abs_diff(&pooled[i], &c.pooled);
                    assert!(
                        cosine(&pooled[i], &c.pooled) >= COSINE_MIN && d <= HIDDEN_TOL,
                        "{name} input {i}: pooled {d}"
                    );
                }
            }
        }
        eprintln!("{name:<16} packed: hidden {hidden_worst:.1e}, batched vs single {batch_worst:.1e}");
    }
}
