//! Decoder and XLNet models against transformers and sentence-transformers: tiny seeded
//! checkpoints from scripts/gen_decoder_fixtures.py with the reference outputs in
//! tests/fixtures/decoders/golden.json, one input at a time and as one padded batch (the
//! tokenizer's own padding side: left for XLNet and Qwen).

mod common;

use common::*;

use pg_embed_core::error::Error;
use pg_embed_core::options::Options;
use pg_embed_core::pipeline::Pipeline;

fn dir() -> std::path::PathBuf {
    root().join("tests/fixtures/decoders")
}

fn load(name: &str) -> Pipeline {
    golden_set::load(&dir(), name)
}

/// Every case of fixture `name`, one by one and as one batch, against the reference
/// (cosine >= 0.9999, see common/golden_set.rs); the largest difference (single, batched).
fn check(name: &str) -> (f32, f32) {
    golden_set::check(&dir(), name, 0.9999)
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
        // Rotary scaling is computed (tests/rope.rs); an unknown type or a missing key is not.
        ("qwen3_embed", "rope_scaling", serde_json::json!({"rope_type": "su", "factor": 4.0}), "rope_type"),
        ("qwen3_embed", "rope_parameters", serde_json::json!({"rope_type": "linear"}), "factor"),
        ("qwen2_embed", "use_sliding_window", true.into(), "use_sliding_window"),
        ("embeddinggemma", "query_pre_attn_scalar", (-1.0).into(), "query_pre_attn_scalar"),
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
