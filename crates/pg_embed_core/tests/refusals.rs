//! Regression tests of what the property tests found: each broken config is refused at
//! load with a message naming the value, before anything is allocated from its numbers.

#![allow(unused_imports)]

mod guard;

use guard::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use proptest::prelude::*;
use serde_json::{json, Value};

use pg_embed_core::error::Error;
use pg_embed_core::options::Options;
use pg_embed_core::pipeline::Pipeline;

/// The backbone fixture `name` with `edit` applied to its config.json and `weights` to its
/// tensors, loaded and run on the damaged-model texts.
fn changed(
    name: &str,
    edit: impl FnOnce(&mut Value),
    weights: impl FnOnce(&mut HashMap<String, Tensor>),
) -> pg_embed_core::error::Result<Embedded> {
    let tmp = TempDir::new("regression");
    copy_dir(&fixtures().join("backbones").join(name), &tmp.0);
    let config_path = tmp.0.join("config.json");
    let mut config: Value = serde_json::from_slice(&std::fs::read(&config_path).unwrap()).unwrap();
    edit(&mut config);
    std::fs::write(&config_path, config.to_string()).unwrap();
    let weights_path = tmp.0.join("model.safetensors");
    let mut tensors = candle_core::safetensors::load(&weights_path, &Device::Cpu).unwrap();
    weights(&mut tensors);
    candle_core::safetensors::save(&tensors, &weights_path).unwrap();
    load_and_embed(&tmp.0, &Options::default(), &damaged_texts())
}

/// The fixture with one config value set.
fn with_config(name: &str, pointer: &str, value: Value) -> pg_embed_core::error::Result<Embedded> {
    changed(name, |c| *c.pointer_mut(pointer).unwrap() = value, |_| {})
}

/// The message of a load that must fail.
fn refused(result: pg_embed_core::error::Result<Embedded>) -> String {
    match result {
        Ok(e) => panic!("loaded (dim {}), expected an error", e.dim),
        Err(e) => e.to_string(),
    }
}

/// A tokenizer.json cut anywhere is an error naming it; tokenizers panicked
/// (`expect("Helper")`) on one cut inside its decoder section.
#[test]
fn truncated_tokenizer_is_an_error() {
    let bytes = std::fs::read(fixtures().join("pool_mean/tokenizer.json")).unwrap();
    let tmp = TempDir::new("tokenizer");
    copy_dir(&fixtures().join("pool_mean"), &tmp.0);
    for at in (0..bytes.len()).step_by(97).chain(bytes.len() - 40..bytes.len()) {
        std::fs::write(tmp.0.join("tokenizer.json"), &bytes[..at]).unwrap();
        let m = match Pipeline::load(&tmp.0, &Options::default()) {
            Ok(_) => panic!("a tokenizer.json cut at {at} loaded"),
            Err(e) => e.to_string(),
        };
        assert!(m.contains("tokenizer.json"), "cut at {at}: {m}");
    }
}

/// candle sizes ModernBERT's rotary tables and DeBERTa-v2's position ids by
/// max_position_embeddings (cast to u32) before it reads a weight: 2^32 - 1 positions asked
/// for 16 GB, and the allocation failure aborted the process.
#[test]
fn huge_position_counts_are_refused_before_allocating() {
    for (fixture, value) in
        [("modernbert", (1u64 << 32) - 1), ("deberta_v2", (1u64 << 32) - 1), ("modernbert", 1 << 40)]
    {
        let m = refused(with_config(fixture, "/max_position_embeddings", json!(value)));
        assert!(m.contains(&format!("unsupported max_position_embeddings \"{value}\"")), "{fixture}: {m}");
    }
    let e = with_config("modernbert", "/max_position_embeddings", json!(1u64 << 40)).err().unwrap();
    assert_eq!(e.hint().unwrap(), "Supported: at most 131072.");
    assert_eq!(pg_embed_core::models::checks::MAX_POSITIONS, 131072);
    // Within the limit, a ModernBERT config may name more positions than it was trained for.
    assert!(with_config("modernbert", "/max_position_embeddings", json!(4096)).is_ok());
}

/// candle's ModernBERT reserves its layer list by num_hidden_layers before reading a weight:
/// 2^40 layers aborted the process.
#[test]
fn modernbert_layer_count_beyond_the_checkpoint_is_refused() {
    let m = refused(with_config("modernbert", "/num_hidden_layers", json!(1u64 << 40)));
    assert!(
        m.contains("num_hidden_layers is 1099511627776, and the checkpoint has no layer 1099511627775"),
        "{m}"
    );
    let m = refused(with_config("modernbert", "/num_hidden_layers", json!(4)));
    assert!(m.contains("no layer 3") && m.contains("model.safetensors"), "{m}");
}

/// Sizes whose products overflowed (a panic in a build with overflow checks, a wrapped
/// size otherwise): ModernBERT's 2 x intermediate_size (candle), T5's num_heads x d_kv,
/// DeBERTa-v2's 2 x max_relative_positions (candle).
#[test]
fn sizes_that_overflow_are_refused() {
    let m = refused(with_config("modernbert", "/intermediate_size", json!(u64::MAX)));
    assert!(m.contains(&format!("intermediate_size {} is too large", u64::MAX)), "{m}");
    let m = refused(with_config("t5", "/num_heads", json!(u64::MAX)));
    assert!(m.contains(&format!("num_heads {} times d_kv 8 overflows", u64::MAX)), "{m}");
    let m = refused(with_config("deberta_v2", "/max_relative_positions", json!(1u64 << 62)));
    assert!(m.contains(&format!("unsupported max_relative_positions \"{}\"", 1u64 << 62)), "{m}");
    let m = refused(with_config("deberta_v2", "/position_buckets", json!(1u64 << 62)));
    assert!(m.contains(&format!("unsupported position_buckets \"{}\"", 1u64 << 62)), "{m}");
}

/// Relative-position buckets that fall outside the table: T5 with a maximum distance not
/// above a quarter of the buckets (2 overflowed in the bucket arithmetic; 1 gave bucket
/// 4294967294 and "inference failed" on every input), MPNet with a single bucket.
#[test]
fn relative_position_buckets_outside_the_table_are_refused() {
    for distance in [0, 1, 2] {
        let m = refused(with_config("t5", "/relative_attention_max_distance", json!(distance)));
        assert!(
            m.contains(&format!(
                "relative_attention_num_buckets 8 does not work with a maximum distance of {distance}"
            )),
            "{m}"
        );
    }
    assert!(with_config("t5", "/relative_attention_max_distance", json!(3)).is_ok());
    let m = refused(changed(
        "mpnet",
        |c| c["relative_attention_num_buckets"] = 1.into(),
        |w| {
            let heads = w["encoder.relative_attention_bias.weight"].dim(1).unwrap();
            w.insert("encoder.relative_attention_bias.weight".into(), Noise(1).tensor(&[1, heads], 0.0, 0.5));
        },
    ));
    assert!(
        m.contains("relative_attention_num_buckets 1 does not work with a maximum distance of 128"),
        "{m}"
    );
}

/// A negative LayerNorm / RMSNorm epsilon gave NaN vectors from finite weights.
#[test]
fn negative_norm_epsilons_are_refused() {
    for (fixture, key) in [
        ("bert", "layer_norm_eps"),
        ("xlm_roberta", "layer_norm_eps"),
        ("mpnet", "layer_norm_eps"),
        ("deberta_v2", "layer_norm_eps"),
        ("nomic_bert", "layer_norm_eps"),
        ("modernbert", "norm_eps"),
        ("t5", "layer_norm_epsilon"),
    ] {
        let m = refused(with_config(fixture, &format!("/{key}"), json!(-1)));
        assert!(
            m.contains(&format!("{key} -1.0 is negative")) && m.contains("config.json"),
            "{fixture}: {m}"
        );
    }
}

/// A rotary base at or below 0 (or so small that it is 0 as f32) gave NaN vectors.
#[test]
fn rotary_bases_below_one_are_refused() {
    for (value, shown) in [(json!(0), "0.0"), (json!(-0.25), "-0.25"), (json!(1e-300), "1e-300")] {
        let m = refused(with_config("nomic_bert_hub", "/rotary_emb_base", value));
        assert!(m.contains(&format!("rope_theta {shown} is less than 1")), "{m}");
    }
    let m = refused(with_config("modernbert", "/rope_parameters/full_attention/rope_theta", json!(-1)));
    assert!(m.contains("rope_theta of full_attention -1.0 is less than 1"), "{m}");
}

/// A pad_token_id outside the vocabulary loaded, embedded single inputs, and failed every
/// batch that needed padding with "inference failed: index-select invalid index".
#[test]
fn pad_token_outside_the_vocabulary_is_refused() {
    let m = refused(with_config("bert", "/pad_token_id", json!(1 << 20)));
    assert!(
        m.contains("pad_token_id 1048576 is not below vocab_size 401") && m.contains("config.json"),
        "{m}"
    );
    // ModernBERT's default pad_token_id (50283) applies when the config names none.
    let m =
        refused(changed("modernbert", |c| drop(c.as_object_mut().unwrap().remove("pad_token_id")), |_| {}));
    assert!(m.contains("pad_token_id 50283 is not below vocab_size 401"), "{m}");
}

/// A CLIP text tower without `text_projection` pools its hidden state (transformers'
/// CLIPTextModel): the model stated projection_dim (16) as its dimension and returned
/// vectors of the hidden size (32).
#[test]
fn clip_without_projection_states_its_pooled_width() {
    let e = changed("clip", |_| {}, |w| drop(w.remove("text_projection.weight"))).unwrap();
    assert_eq!(e.dim, 32);
    assert!(e.together.iter().chain(&e.one_by_one).all(|v| v.len() == 32));
    let e = changed("clip", |_| {}, |_| {}).unwrap();
    assert_eq!(e.dim, 16);
    assert!(e.together.iter().all(|v| v.len() == 16));
}

/// A tokenizer that emits ids the embedding has no row for loaded, and then every input
/// failed with "inference failed: index-select invalid index" (a special token of the
/// template) or every input with that token did (a vocabulary entry).
#[test]
fn tokenizer_ids_outside_the_vocabulary_are_refused() {
    for (fixture, pointer, token) in [
        ("nomic_bert", "/post_processor/special_tokens/[CLS]/ids/0", "[CLS]"),
        ("bert", "/model/vocab/the", "the"),
    ] {
        let tmp = TempDir::new("token_ids");
        copy_dir(&fixtures().join("backbones").join(fixture), &tmp.0);
        let path = tmp.0.join("tokenizer.json");
        let mut json: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        *json.pointer_mut(pointer).unwrap() = json!(1u64 << 31);
        std::fs::write(&path, json.to_string()).unwrap();
        let m = refused(load_and_embed(&tmp.0, &Options::default(), &damaged_texts()));
        assert!(
            m.contains(&format!("token \"{token}\" has id 2147483648, not below the model's vocab_size 401"))
                && m.contains("tokenizer.json"),
            "{fixture}: {m}"
        );
    }
}

/// candle's ModernBERT compares distances with `local_attention / 2` cast to i32: a window
/// of 2^32 or more wrapped, masked every token and gave NaN vectors. Any window of twice
/// the longest input attends to everything, as a wider one does.
#[test]
fn modernbert_windows_wider_than_any_input_attend_to_everything() {
    let wide = with_config("modernbert", "/local_attention", json!(1000)).unwrap();
    for huge in [1u64 << 32, u64::MAX] {
        let e = with_config("modernbert", "/local_attention", json!(huge)).unwrap();
        assert!(e.together.iter().flatten().all(|x| x.is_finite()), "{huge}");
        assert_eq!(e.together, wide.together, "{huge}");
    }
}
