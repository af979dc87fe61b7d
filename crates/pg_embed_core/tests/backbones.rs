//! Every backbone against transformers: tiny random checkpoints from
//! scripts/gen_backbone_fixtures.py, with last_hidden_state and pooled outputs in golden.json.

mod common;

use common::*;
use serde::Deserialize;

use pg_embed_core::options::Options;
use pg_embed_core::pipeline::Pipeline;

#[derive(Deserialize)]
struct Golden {
    fixtures: std::collections::BTreeMap<String, Fixture>,
}

#[derive(Deserialize)]
struct Fixture {
    model_type: String,
    pooled_by: String,
    hidden_size: usize,
    #[serde(default)]
    cases: Vec<BackboneCase>,
    /// Another layout of this fixture's weights, or a sentence-transformers model around
    /// it: its inputs and hidden states are the base fixture's.
    #[serde(default)]
    derived_from: Option<String>,
    /// A sentence-transformers model's own encode() outputs, per input.
    #[serde(default)]
    pooled: Option<Vec<Vec<f32>>>,
}

#[derive(Deserialize)]
struct BackboneCase {
    text: String,
    input_ids: Vec<u32>,
    hidden: Vec<f32>,
    pooled: Vec<f32>,
}

const HIDDEN_TOL: f32 = 1e-4;

fn rows(flat: &[f32], width: usize) -> Vec<Vec<f32>> {
    flat.chunks(width).map(<[f32]>::to_vec).collect()
}

fn worst(got: &[Vec<f32>], want: &[Vec<f32>], what: &str) -> f32 {
    assert_eq!(got.len(), want.len(), "{what}: tokens");
    got.iter().zip(want).map(|(g, w)| max_abs_diff(g, w)).fold(0f32, f32::max)
}

/// A copy of backbone fixture `name` with config.json edited, loaded.
fn edited(name: &str, edit: impl FnOnce(&mut serde_json::Value)) -> pg_embed_core::error::Result<Pipeline> {
    load_edited(&root().join("tests/fixtures/backbones").join(name), name, edit)
}

/// Settings the backbones do not implement are load errors naming the setting and the
/// value, never silently different numbers.
#[test]
fn unimplemented_settings_are_named() {
    use pg_embed_core::error::Error;
    let cases: [(&str, &str, serde_json::Value, &str); 6] = [
        ("nomic_bert_hub", "prenorm", true.into(), "prenorm"),
        ("nomic_bert_hub", "rotary_emb_fraction", 0.5.into(), "rotary_emb_fraction"),
        ("modernbert", "attention_bias", true.into(), "attention_bias"),
        ("deberta_v2", "conv_kernel_size", 3.into(), "conv_kernel_size"),
        ("t5", "feed_forward_proj", "gated-mish".into(), "feed_forward_proj"),
        ("clip", "hidden_act", "gelu".into(), "hidden_act"),
    ];
    for (name, key, value, what) in cases {
        let e = edited(name, |c| c[key] = value.clone())
            .err()
            .unwrap_or_else(|| panic!("{name}: {key} accepted"));
        assert!(matches!(e, Error::Unsupported { what: w, .. } if w == what), "{name}/{key}: {e}");
    }
    // Unchanged copies load.
    assert!(edited("nomic_bert_hub", |_| {}).is_ok());
}

/// The two families TEI serves that no released PyPI package computes as a reference are
/// refused by name: Jina BERT v2 (ALiBi positions in a BERT config) and
/// nomic-embed-text-v2-moe (mixture-of-experts layers in a NomicBERT config).
#[test]
fn jina_bert_v2_and_nomic_moe_are_refused_by_name() {
    use pg_embed_core::error::Error;
    // (Own copies: the test above edits these fixtures in parallel.)
    let fixture = |name: &str| root().join("tests/fixtures/backbones").join(name);
    let e = load_edited(&fixture("bert"), "alibi", |c| {
        c["position_embedding_type"] = "alibi".into();
        c["architectures"] = serde_json::json!(["JinaBertForMaskedLM"]);
    })
    .err()
    .expect("an ALiBi BERT config is refused");
    assert!(
        matches!(&e, Error::Unsupported { what: "position_embedding_type", value, supported, .. }
            if value == "alibi" && supported.contains("Jina BERT v2")),
        "{e:?}"
    );
    for (key, value) in [("moe_every_n_layers", 2), ("num_experts", 8)] {
        let e = load_edited(&fixture("nomic_bert_hub"), key, |c| c[key] = value.into())
            .err()
            .unwrap_or_else(|| panic!("{key} accepted"));
        assert!(
            matches!(&e, Error::Unsupported { what, supported, .. }
                if *what == key && supported.contains("nomic-embed-text-v2-moe")),
            "{key}: {e:?}"
        );
    }
}

#[test]
fn hidden_states_and_pooled_outputs_match_transformers() {
    let path = root().join("tests/fixtures/backbones/golden.json");
    let g: Golden = serde_json::from_slice(&std::fs::read(&path).unwrap()).expect("backbone golden parses");
    let mut table = Vec::new();
    for (name, fx) in &g.fixtures {
        let options = match fx.pooled_by.as_str() {
            "mean" => serde_json::json!({"pooling": "mean", "normalize": false}),
            "text_embeds" => serde_json::json!({"pooling": "pooler", "normalize": false}),
            // The model's own files decide (modules.json, Pooling, Dense, Normalize).
            _ => serde_json::json!({}),
        };
        let p = Pipeline::load(
            &root().join("tests/fixtures/backbones").join(name),
            &Options::from_json(&options).unwrap(),
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(p.info().architecture, fx.model_type, "{name}");
        let cases = fx.derived_from.as_ref().map_or(&fx.cases, |base| &g.fixtures[base].cases);
        assert!(cases.len() >= 20, "{name}");
        let (mut hidden_worst, mut pooled_worst, mut batch_worst, mut cos_min) = (0f32, 0f32, 0f32, 1f32);
        let mut pooled_batch_worst = 0f32;
        let texts: Vec<&str> = cases.iter().map(|c| c.text.as_str()).collect();
        let batched = p.hidden_states(&texts).unwrap();
        let batched_pooled = p.embed(&texts).unwrap();
        for (i, ((c, in_batch), pooled_in_batch)) in
            cases.iter().zip(&batched).zip(&batched_pooled).enumerate()
        {
            let want_pooled = fx.pooled.as_ref().map_or(&c.pooled, |p| &p[i]);
            let what = format!("{name}/{:?}", c.text);
            assert_eq!(p.tokenize(&c.text).unwrap(), c.input_ids, "{what}: token ids");
            let want = rows(&c.hidden, fx.hidden_size);
            let one = p.hidden_states(&[c.text.as_str()]).unwrap().remove(0);
            let d = worst(&one, &want, &what);
            assert!(d <= HIDDEN_TOL, "{what}: hidden states max abs diff {d}");
            hidden_worst = hidden_worst.max(d);
            // Batched equals one by one within the reference tolerance: the random tiny
            // models amplify float32 summation-order noise (torch itself differs by up
            // to 2e-5 between its batched and single runs of these fixtures). On
            // all-MiniLM-L6-v2 `length_grouped_batches_equal_one_by_one` holds 1e-5.
            let d = worst(in_batch, &one, &what);
            assert!(d <= HIDDEN_TOL, "{what}: batched vs one by one {d}");
            batch_worst = batch_worst.max(d);
            let pooled = p.embed(&[c.text.as_str()]).unwrap().remove(0);
            let cos = cosine(&pooled, want_pooled);
            let d = max_abs_diff(&pooled, want_pooled);
            assert!(cos >= COSINE_MIN && d <= HIDDEN_TOL, "{what}: pooled cosine {cos}, max abs diff {d}");
            pooled_worst = pooled_worst.max(d);
            let d = max_abs_diff(pooled_in_batch, &pooled);
            assert!(d <= HIDDEN_TOL, "{what}: pooled in a batch {d}");
            cos_min = cos_min.min(cos);
            pooled_batch_worst = pooled_batch_worst.max(d);
        }
        table.push(format!(
            "{name:<14} {:<16} hidden {hidden_worst:.1e}  pooled {pooled_worst:.1e} (min cosine {cos_min:.7})  batched vs single: hidden {batch_worst:.1e}, pooled {pooled_batch_worst:.1e}",
            fx.model_type
        ));
    }
    for line in table {
        eprintln!("{line}");
    }
}
