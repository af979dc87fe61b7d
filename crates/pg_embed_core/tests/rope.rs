//! Rotary scaling against transformers 5.24: tiny seeded checkpoints from
//! scripts/gen_rope_fixtures.py (every rotary type transformers computes, and GTE's ntk, on
//! Qwen3, Llama, Gemma 3, GTE and ModernBERT) with the last hidden state of each input run
//! alone in tests/fixtures/rope/golden.json. The backbone is run on the fixtures' token ids:
//! each input alone and all of them as one packed batch, in two orders; the length-dependent
//! types (dynamic, longrope) must give each row of a batch what its input gives alone.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use common::*;
use serde::Deserialize;

use pg_embed_core::error::{Error, Result};
use pg_embed_core::models::{BackboneConfig, Batch, Model};

/// Parity bounds: cosine per token, and |got - want| <= TOLERANCE * max(1, |want|).
const COSINE: f32 = 0.99999;
const TOLERANCE: f32 = 1e-4;

#[derive(Deserialize)]
struct Golden {
    fixtures: BTreeMap<String, Fixture>,
}

#[derive(Deserialize)]
struct Fixture {
    model_type: String,
    hidden_size: usize,
    length_dependent: bool,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    input_ids: Vec<u32>,
    hidden: Vec<f32>,
}

fn dir() -> PathBuf {
    root().join("tests/fixtures/rope")
}

fn golden() -> Golden {
    let path = dir().join("golden.json");
    serde_json::from_slice(&std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .expect("golden.json parses")
}

/// The backbone of fixture `name`, its config.json edited by `edit` (the weights are the
/// fixture's own).
fn load_with(
    name: &str,
    edit: impl FnOnce(&mut serde_json::Value),
) -> Result<(BackboneConfig, Box<dyn Model>)> {
    let d: &Path = &dir().join(name);
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("config.json")).unwrap()).unwrap();
    edit(&mut config);
    let config = BackboneConfig::parse(&d.join("config.json"), &serde_json::to_vec(&config).unwrap())?;
    let (vb, _) = pg_embed_core::weights::load_weights(d, &candle_core::Device::Cpu)?;
    let model = config.load(vb)?;
    Ok((config, model))
}

/// The last hidden states of `inputs` run as one packed batch, per input [tokens x hidden].
fn forward(model: &dyn Model, inputs: &[&[u32]], hidden: usize) -> Vec<Vec<f32>> {
    let ids: Vec<u32> = inputs.iter().flat_map(|i| i.iter().copied()).collect();
    let mut bounds = vec![0];
    for i in inputs {
        bounds.push(bounds.last().unwrap() + i.len());
    }
    let out = model.forward(&Batch::text(&ids, &[], &bounds)).unwrap();
    bounds.windows(2).map(|b| out[b[0] * hidden..b[1] * hidden].to_vec()).collect()
}

/// The worst token of `got` against `want` ([tokens x width]): (scaled difference, cosine).
fn compare(got: &[f32], want: &[f32], width: usize) -> (f32, f32) {
    assert_eq!(got.len(), want.len(), "tokens");
    let scaled = got.iter().zip(want).map(|(g, w)| (g - w).abs() / w.abs().max(1.0)).fold(0f32, f32::max);
    let cos = got.chunks(width).zip(want.chunks(width)).map(|(g, w)| cosine(g, w)).fold(1f32, f32::min);
    (scaled, cos)
}

/// Every case of fixture `name` alone against transformers, then all cases as one batch (in
/// case order and reversed) and the last two as one, against the lone runs; the worst
/// differences (alone, batched).
fn check(name: &str) -> (f32, f32) {
    let golden = golden();
    let fx = &golden.fixtures[name];
    let (config, model) = load_with(name, |_| {}).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(config.architecture(), fx.model_type, "{name}");
    let h = fx.hidden_size;
    let mut alone = Vec::new();
    let mut worst = (0f32, 0f32);
    for (i, c) in fx.cases.iter().enumerate() {
        let got = forward(model.as_ref(), &[&c.input_ids], h).remove(0);
        let (d, cos) = compare(&got, &c.hidden, h);
        assert!(
            d <= TOLERANCE && cos >= COSINE,
            "{name} case {i} ({} tokens): difference {d}, cosine {cos}",
            c.input_ids.len()
        );
        worst.0 = worst.0.max(d);
        alone.push(got);
    }
    let inputs: Vec<&[u32]> = fx.cases.iter().map(|c| &c.input_ids[..]).collect();
    let reversed: Vec<&[u32]> = inputs.iter().rev().copied().collect();
    // Two inputs: a batch too small to be split into chunks of sequences.
    let pair: Vec<&[u32]> = inputs[inputs.len() - 2..].to_vec();
    for (order, batch) in [("in order", &inputs), ("reversed", &reversed), ("last two", &pair)] {
        let mut rows = forward(model.as_ref(), batch, h);
        if order == "reversed" {
            rows.reverse();
        }
        let first = inputs.len() - rows.len();
        for (i, (row, one)) in rows.iter().zip(&alone[first..]).enumerate().map(|(i, r)| (i + first, r)) {
            let (d, cos) = compare(row, one, h);
            assert!(
                d <= TOLERANCE && cos >= COSINE,
                "{name} case {i} in a batch ({order}): difference {d}, cosine {cos}"
            );
            worst.1 = worst.1.max(d);
            let (d, _) = compare(row, &fx.cases[i].hidden, h);
            assert!(d <= TOLERANCE, "{name} case {i} in a batch ({order}) against transformers: {d}");
        }
    }
    eprintln!("{name:<20} alone {:.1e}  batched vs alone {:.1e}", worst.0, worst.1);
    worst
}

/// The fixtures this file has a test for: every one of golden.json.
const FIXTURES: &[&str] = &[
    "qwen3_linear",
    "qwen3_dynamic",
    "qwen3_yarn",
    "llama_yarn_mscale",
    "qwen3_longrope",
    "llama_llama3",
    "qwen3_proportional",
    "gemma3_linear",
    "gte_ntk",
    "gte_ntk_mixed_b",
    "modernbert_yarn",
    "modernbert_dynamic",
];

#[test]
fn every_fixture_has_a_test() {
    let golden = golden();
    let have: BTreeSet<&str> = golden.fixtures.keys().map(String::as_str).collect();
    assert_eq!(have, FIXTURES.iter().copied().collect(), "golden.json vs this file's tests");
    let length_dependent: BTreeSet<&str> =
        golden.fixtures.iter().filter(|(_, f)| f.length_dependent).map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        length_dependent,
        ["modernbert_dynamic", "qwen3_dynamic", "qwen3_longrope"].into_iter().collect()
    );
}

#[test]
fn linear() {
    check("qwen3_linear");
}

#[test]
fn proportional_over_the_whole_head() {
    check("qwen3_proportional");
}

#[test]
fn dynamic_ntk_per_input_length() {
    check("qwen3_dynamic");
}

#[test]
fn yarn_truncated() {
    check("qwen3_yarn");
}

#[test]
fn yarn_with_mscale_untruncated() {
    check("llama_yarn_mscale");
}

#[test]
fn longrope_short_and_long_factors_per_input() {
    check("qwen3_longrope");
}

#[test]
fn llama3() {
    check("llama_llama3");
}

#[test]
fn gemma3_scales_its_global_layers_only() {
    check("gemma3_linear");
}

#[test]
fn gte_ntk() {
    check("gte_ntk");
}

#[test]
fn gte_ntk_mixed_b() {
    check("gte_ntk_mixed_b");
}

#[test]
fn modernbert_yarn_on_both_layer_types() {
    check("modernbert_yarn");
}

#[test]
fn modernbert_dynamic_on_both_layer_types() {
    check("modernbert_dynamic");
}

/// Fixture `name` with config.json edited by `edit` gives its golden longest case.
fn same_as_golden(name: &str, edit: &dyn Fn(&mut serde_json::Value)) {
    let golden = golden();
    let fx = &golden.fixtures[name];
    let (_, model) = load_with(name, edit).unwrap_or_else(|e| panic!("{name}: {e}"));
    let last = fx.cases.last().unwrap();
    let got = forward(model.as_ref(), &[&last.input_ids], fx.hidden_size).remove(0);
    let (d, _) = compare(&got, &last.hidden, fx.hidden_size);
    assert!(d <= TOLERANCE, "{name} edited: {d}");
}

/// The forms on the Hub (`rope_scaling` beside `rope_theta`, Gemma 3's
/// `rope_local_base_freq`) give what transformers 5's `rope_parameters` give.
#[test]
fn hub_forms_read_as_rope_parameters() {
    same_as_golden("gte_ntk", &|c| {
        c.as_object_mut().unwrap().remove("rope_parameters");
        c["rope_theta"] = 10000.0.into();
        c["rope_scaling"] = serde_json::json!({"type": "ntk", "factor": 2.0});
    });
    same_as_golden("qwen3_yarn", &|c| {
        let mut p = c.as_object_mut().unwrap().remove("rope_parameters").unwrap();
        c["rope_theta"] = p.as_object_mut().unwrap().remove("rope_theta").unwrap();
        c["rope_scaling"] = p;
    });
    same_as_golden("gemma3_linear", &|c| {
        c.as_object_mut().unwrap().remove("rope_parameters");
        c["rope_theta"] = 1_000_000.0.into();
        c["rope_local_base_freq"] = 10000.0.into();
        c["rope_scaling"] = serde_json::json!({"rope_type": "linear", "factor": 8.0});
    });
}

/// transformers reads YaRN's `truncate` from the top of `rope_parameters`: in a nested one
/// (ModernBERT's) an entry's `truncate` changes nothing.
#[test]
fn yarn_truncate_in_a_nested_entry_changes_nothing() {
    same_as_golden("modernbert_yarn", &|c| {
        for kind in ["full_attention", "sliding_attention"] {
            c["rope_parameters"][kind]["truncate"] = false.into();
        }
    });
}

/// A rotary type that is unknown (to the family), or that lacks a key it needs, or whose
/// key is not a number, is refused at load, naming the key and the value.
#[test]
fn unknown_and_half_present_rotary_settings_are_named() {
    let set = |key: &'static str, value: serde_json::Value| {
        move |c: &mut serde_json::Value| c["rope_parameters"][key] = value.clone()
    };
    let drop = |key: &'static str| {
        move |c: &mut serde_json::Value| {
            c["rope_parameters"].as_object_mut().unwrap().remove(key);
        }
    };
    let cases: Vec<(&str, Box<dyn Fn(&mut serde_json::Value)>, &str, &str)> = vec![
        ("qwen3_linear", Box::new(set("rope_type", "su".into())), "rope_type", "su"),
        ("qwen3_linear", Box::new(set("rope_type", "ntk".into())), "rope_type", "ntk"),
        ("qwen3_linear", Box::new(drop("factor")), "factor", "missing (rope_type linear)"),
        ("qwen3_linear", Box::new(set("factor", "2".into())), "factor", "\"2\""),
        ("qwen3_linear", Box::new(set("factor", 0.0.into())), "factor", "0"),
        ("qwen3_yarn", Box::new(drop("factor")), "factor", "missing (rope_type yarn)"),
        ("llama_llama3", Box::new(drop("low_freq_factor")), "low_freq_factor", "missing (rope_type llama3)"),
        ("qwen3_longrope", Box::new(drop("long_factor")), "long_factor", "missing (rope_type longrope)"),
        (
            "qwen3_longrope",
            Box::new(set("short_factor", serde_json::json!([1.0, 2.0]))),
            "short_factor",
            "2 numbers for heads of 16",
        ),
        ("qwen3_dynamic", Box::new(set("partial_rotary_factor", 0.5.into())), "partial_rotary_factor", "0.5"),
        ("gte_ntk", Box::new(set("mixed_b", "x".into())), "mixed_b", "\"x\""),
        (
            "modernbert_yarn",
            Box::new(|c: &mut serde_json::Value| {
                c["rope_parameters"]["sliding_attention"]["rope_type"] = "ntk".into()
            }),
            "rope_type",
            "ntk",
        ),
    ];
    for (name, edit, what, value) in cases {
        let e = load_with(name, |c| edit(c)).err().unwrap_or_else(|| panic!("{name}: {what} accepted"));
        assert!(
            matches!(&e, Error::Unsupported { what: w, value: v, .. } if *w == what && v == value),
            "{name}/{what}: {e}"
        );
    }
}

/// model_info's backbone shows the rotary type and its factor as config.json gives them.
#[test]
fn the_summary_shows_the_rotary_type_and_factor() {
    for (name, key) in [("qwen3_yarn", "rope_parameters"), ("gte_ntk", "rope_parameters")] {
        let (config, _) = load_with(name, |_| {}).unwrap();
        let summary = config.summary();
        assert!(
            summary[key]["rope_type"].is_string() && summary[key]["factor"].is_number(),
            "{name}: {summary}"
        );
    }
}
