//! The GTE, Jina v3, Mistral, Llama, Gemma 2, CamemBERT and EuroBERT families against
//! transformers 5.24 and sentence-transformers 6.2: tiny seeded checkpoints from
//! scripts/gen_family_fixtures.py with the reference outputs in
//! tests/fixtures/families/golden.json (the layout of tests/fixtures/decoders/golden.json,
//! checked by common/golden_set.rs), one input at a time and as one padded batch, with
//! cosine >= 0.99999 and |got - want| <= 1e-4 * max(1, |want|).

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;

use common::*;

/// The parity bound of these fixtures (the decoders' is 0.9999).
const COSINE: f32 = 0.99999;

fn dir() -> PathBuf {
    root().join("tests/fixtures/families")
}

fn check(name: &str) -> (f32, f32) {
    golden_set::check(&dir(), name, COSINE)
}

/// The fixtures this file has a test for: every one of golden.json.
const FIXTURES: &[&str] = &[
    "gte_embed",
    "gte_new",
    "gte_classify",
    "jina_v3_embed",
    "jina_v3_hub",
    "jina_v3_classify",
    "mistral_embed",
    "mistral_classify",
    "llama_embed",
    "llama_classify",
    "gemma2_embed",
    "gemma2_classify",
    "camembert_embed",
    "camembert_classify",
    "eurobert_embed",
    "eurobert_classify_late",
    "eurobert_classify_bos",
    "eurobert_classify_mean",
];

#[test]
fn every_fixture_has_a_test() {
    let golden = golden_set::golden(&dir());
    let have: BTreeSet<&str> = golden.fixtures.keys().map(String::as_str).collect();
    assert_eq!(have, FIXTURES.iter().copied().collect(), "golden.json vs this file's tests");
}

/// What pg_embed's tokenizer crate makes of each fixture's tokenizer.json, truncated at the
/// fixture's max length, is what transformers gave the model: the token ids of every case
/// (prompt included) and of every rerank pair. This needs no model support.
#[test]
fn tokenizer_json_gives_the_golden_ids() {
    use tokenizers::{Tokenizer, TruncationParams, TruncationStrategy};

    let golden = golden_set::golden(&dir());
    let mut checked = 0;
    for (name, fx) in &golden.fixtures {
        let path = dir().join(name);
        let config: serde_json::Value =
            serde_json::from_slice(&std::fs::read(path.join("tokenizer_config.json")).unwrap()).unwrap();
        let max_length = config["model_max_length"].as_u64().expect("model_max_length") as usize;
        let mut t = Tokenizer::from_file(path.join("tokenizer.json")).unwrap();
        t.with_truncation(Some(TruncationParams {
            max_length,
            strategy: TruncationStrategy::LongestFirst,
            ..Default::default()
        }))
        .unwrap();
        let encode = |text: &str, pair: Option<&str>| -> Vec<u32> {
            match pair {
                Some(p) => t.encode((text, p), true),
                None => t.encode(text, true),
            }
            .unwrap()
            .get_ids()
            .to_vec()
        };
        let mut cut = 0;
        for c in &fx.cases {
            let what = format!("{name}/{:?}+{:?}/{:?}", c.text, c.pair, c.prompt_name);
            let prompt = c.prompt_name.as_ref().map_or("", |p| fx.prompts[p].as_str());
            let text = format!("{prompt}{}", c.text);
            // transformers drops an empty pair in a single call (Pipeline::pair_argument).
            let pair = c.pair.as_deref().filter(|p| !p.is_empty());
            assert_eq!(encode(&text, pair), c.input_ids, "{what}");
            cut += usize::from(c.input_ids.len() == max_length);
            checked += 1;
        }
        assert!(cut > 0, "{name}: no case reaches {max_length} tokens");
        if let Some(r) = &fx.rerank {
            for (d, ids) in r.documents.iter().zip(&r.input_ids) {
                assert_eq!(&encode(&r.query, Some(d)), ids, "{name}: rerank pair with {d:?}");
            }
        }
    }
    eprintln!(
        "{checked} cases of {} fixtures tokenized as transformers tokenized them",
        golden.fixtures.len()
    );
}

/// Layouts of the same weights give the same golden values: gte_new is gte_embed in the
/// published "new" layout (transformers cannot load it, so its golden values are
/// gte_embed's), jina_v3_hub is jina_v3_embed under the checkpoint names transformers'
/// conversion mapping reads.
#[test]
fn derived_layouts_have_their_sources_golden_values() {
    let golden = golden_set::golden(&dir());
    for (derived, source) in [("gte_new", "gte_embed"), ("jina_v3_hub", "jina_v3_embed")] {
        let (d, s) = (&golden.fixtures[derived], &golden.fixtures[source]);
        assert_eq!(d.cases.len(), s.cases.len(), "{derived}");
        for (a, b) in d.cases.iter().zip(&s.cases) {
            assert_eq!((&a.text, &a.prompt_name, &a.input_ids), (&b.text, &b.prompt_name, &b.input_ids));
            assert!(max_abs_diff(&a.output, &b.output) <= golden_set::TOL, "{derived}/{:?}", a.text);
        }
    }
}

#[test]
fn gte_embedder_in_transformers_module_names() {
    check("gte_embed");
}

#[test]
fn gte_embedder_in_the_published_new_layout() {
    check("gte_new");
}

#[test]
fn gte_cross_encoder_without_token_types() {
    check("gte_classify");
}

#[test]
fn jina_v3_embedder_with_task_prompts() {
    check("jina_v3_embed");
}

#[test]
fn jina_v3_embedder_in_the_hub_names() {
    check("jina_v3_hub");
}

#[test]
fn jina_v3_classifier() {
    check("jina_v3_classify");
}

#[test]
fn mistral_embedder_with_a_sliding_window_and_prompts() {
    check("mistral_embed");
}

#[test]
fn mistral_classifier_reads_the_last_non_padding_token() {
    check("mistral_classify");
}

#[test]
fn llama_embedder_with_biases() {
    check("llama_embed");
}

#[test]
fn llama_classifier_with_a_pad_token_and_left_padding() {
    check("llama_classify");
}

#[test]
fn gemma2_embedder_with_soft_capping_and_sliding_layers() {
    check("gemma2_embed");
}

#[test]
fn gemma2_cross_encoder() {
    check("gemma2_classify");
}

#[test]
fn camembert_embedder() {
    check("camembert_embed");
}

#[test]
fn camembert_classifier() {
    check("camembert_classify");
}

#[test]
fn eurobert_embedder() {
    check("eurobert_embed");
}

#[test]
fn eurobert_classifier_late_pooling() {
    check("eurobert_classify_late");
}

#[test]
fn eurobert_classifier_bos_pooling() {
    check("eurobert_classify_bos");
}

#[test]
fn eurobert_classifier_mean_pooling() {
    check("eurobert_classify_mean");
}

/// A Llama config.json that leaves settings out (as hand-written and older configs do):
/// `model_info`'s backbone shows the values transformers' LlamaConfig takes for them
/// (its defaults: rms_norm_eps 1e-6, hidden_act "silu", attention_bias and mlp_bias false,
/// max_position_embeddings 2048), not nulls.
#[test]
fn a_llama_config_without_settings_shows_transformers_defaults() {
    let p = load_edited(&dir().join("llama_embed"), "llama_defaults", |cfg| {
        let cfg = cfg.as_object_mut().unwrap();
        for key in ["rms_norm_eps", "hidden_act", "attention_bias", "mlp_bias", "max_position_embeddings"] {
            cfg.remove(key);
        }
    })
    .unwrap();
    let backbone = &p.info().backbone;
    assert_eq!(backbone["rms_norm_eps"], serde_json::json!(1e-6), "{backbone:#}");
    assert_eq!(backbone["hidden_act"], "silu", "{backbone:#}");
    assert_eq!(backbone["attention_bias"], false, "{backbone:#}");
    assert_eq!(backbone["mlp_bias"], false, "{backbone:#}");
    assert_eq!(backbone["max_position_embeddings"], 2048, "{backbone:#}");
    // What config.json does say is shown as it says it.
    assert_eq!(backbone["hidden_size"], 32, "{backbone:#}");
}
