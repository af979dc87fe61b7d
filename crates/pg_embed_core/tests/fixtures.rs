//! Golden parity of every pooling mode, Dense head, prompt and option with
//! sentence-transformers, on the tiny fixtures of scripts/gen_fixtures.py.

mod common;

use common::*;
use pg_embed_core::options::Options;
use pg_embed_core::pipeline::Pipeline;

#[test]
fn every_pooling_mode_matches_sentence_transformers() {
    let all = fixtures();
    let modes =
        ["cls", "mean", "max", "mean_sqrt_len_tokens", "weightedmean", "lasttoken", "concat", "concat3"];
    for mode in modes {
        let name = format!("pool_{mode}");
        let p = fixture(&name);
        for case in &all.fixtures[&name].cases {
            assert_eq!(p.tokenize(&case.text).unwrap(), case.input_ids, "{name}/{}: token ids", case.name);
        }
        check_cases(&name, &p, "embedding", None);
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
    for name in [
        "dense_tanh",
        "dense_chain",
        "dense_gelu",
        "dense_sigmoid",
        "dense_leakyrelu",
        "dense_silu",
        "dense_softplus",
        "dense_residual",
    ] {
        let p = fixture(name);
        assert!(!p.info().heads.is_empty(), "{name}: heads resolved");
        check_cases(name, &p, "embedding", None);
    }
    let chain = fixture("dense_chain");
    assert_eq!(chain.dim(), 8);
    let backbone_only = fixture("pool_cls").info().parameters;
    assert_eq!(chain.info().parameters, backbone_only + 32 * 24 + (24 * 8 + 8), "heads counted");
    assert_eq!(chain.info().heads[0]["bias"], false);
    assert_eq!(chain.info().heads[1]["activation"], "relu");
    let residual = fixture("dense_residual");
    assert_eq!(residual.info().heads[0]["residual"], "identity");
    assert_eq!(residual.info().heads[1]["residual"], "projection");
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

#[test]
fn modes_concatenate_in_the_order_listed() {
    use pg_embed_core::pooling::PoolingMode::*;
    assert_eq!(fixture("pool_concat3").info().pooling, vec![Mean, Cls, Max]);
    assert_eq!(fixture("pool_concat3").dim(), 96);
    // The same order from options reproduces the fixture's vectors.
    let p = fixture_with("pool_cls", serde_json::json!({"pooling": ["mean", "cls", "max"]}));
    check_cases("pool_concat3", &p, "embedding", None);
}

#[test]
fn prompts_match_sentence_transformers() {
    let all = fixtures();
    for (name, prompt_names) in [
        ("prompts", &["query", "passage"][..]),
        ("prompts_exclude", &["query", "passage"][..]),
        ("prompts_exclude_concat", &["query"][..]),
    ] {
        let p = fixture(name);
        let fx = &all.fixtures[name];
        let include = name == "prompts";
        assert_eq!(p.info().include_prompt, include, "{name}");
        assert_eq!(p.info().prompts["query"], "query: ");
        for prompt in prompt_names {
            for case in &fx.cases {
                let what = format!("{name}/{}/{prompt}", case.name);
                let (ids, skip) = p.tokenize_with_prompt(&case.text, Some(prompt)).unwrap();
                assert_eq!(ids, case.ids(&format!("input_ids_prompt_{prompt}")), "{what}: token ids");
                let want_skip = if include { 0 } else { case.usize(&format!("prompt_length_{prompt}")) };
                assert_eq!(skip, want_skip, "{what}: tokens left out of pooling");
            }
            check_cases(name, &p, &format!("embedding_prompt_{prompt}"), Some(prompt));
        }
        // No prompt, and the empty "document" prompt sentence-transformers adds, embed the bare text.
        check_cases(name, &p, "embedding", None);
        check_cases(name, &p, "embedding", Some("document"));
        check_cases(name, &p, "embedding", Some(""));
    }
}

#[test]
fn prompts_in_a_padded_batch_match_one_by_one() {
    let all = fixtures();
    let fx = &all.fixtures["prompts_exclude_concat"];
    let p = fixture("prompts_exclude_concat");
    let texts: Vec<&str> = fx.cases.iter().map(|c| c.text.as_str()).collect();
    let got = p.embed_with_prompt(&texts, Some("query")).unwrap();
    for (case, g) in fx.cases.iter().zip(&got) {
        assert_close(g, &case.floats("embedding_prompt_query"), &format!("{} in a batch", case.name));
    }
}

#[test]
fn a_default_prompt_from_options_and_prompts_added_by_options() {
    let p = fixture_with("prompts_exclude", serde_json::json!({"prompt": "query"}));
    assert_eq!(p.info().default_prompt.as_deref(), Some("query"));
    check_cases("prompts_exclude", &p, "embedding_prompt_query", None);
    // An explicit "" overrides the default: no prompt.
    check_cases("prompts_exclude", &p, "embedding", Some(""));
    // pool_mean has no prompts of its own; options add them (and may exclude them from pooling).
    let p = fixture_with(
        "pool_mean",
        serde_json::json!({"prompts": {"query": "query: "}, "include_prompt": false, "normalize": true}),
    );
    check_cases("prompts_exclude", &p, "embedding_prompt_query", Some("query"));
}

#[test]
fn unknown_prompt_names_are_errors() {
    let p = fixture("prompts");
    let err = p.embed_with_prompt(&["x"], Some("qeury")).unwrap_err();
    assert!(matches!(err, pg_embed_core::error::Error::UnknownPrompt { .. }), "{err}");
    assert_eq!(err.to_string(), "unknown prompt name \"qeury\"");
    assert!(err.hint().unwrap().contains("document, passage, query"), "{:?}", err.hint());
    let err = Pipeline::load(
        &root().join("tests/fixtures/pool_mean"),
        &Options::from_json(&serde_json::json!({"prompt": "passage"})).unwrap(),
    )
    .err()
    .expect("pool_mean has no passage prompt");
    assert_eq!(err.to_string(), "unknown prompt name \"passage\"");
}

#[test]
fn dimensions_truncate_as_truncate_dim() {
    let p = fixture_with("dense_tanh", serde_json::json!({"dimensions": 8}));
    assert_eq!((p.dim(), p.info().dimensions, p.info().normalize_after_truncation), (8, Some(8), false));
    check_cases("dense_tanh", &p, "embedding_truncate_dim_8", None);
    // normalize: true with dimensions: encode(truncate_dim=8, normalize_embeddings=True).
    let p = fixture_with("dense_tanh", serde_json::json!({"dimensions": 8, "normalize": true}));
    assert!(p.info().normalize_after_truncation);
    check_cases("dense_tanh", &p, "embedding_truncate_dim_8_normalized", None);
    // The full width is the untruncated output.
    check_cases(
        "dense_tanh",
        &fixture_with("dense_tanh", serde_json::json!({"dimensions": 16})),
        "embedding",
        None,
    );
}

#[test]
fn a_plain_backbone_gets_mean_pooling_and_its_pooler_on_request() {
    let p = fixture("hf_plain");
    assert_eq!(p.info().pooling, vec![pg_embed_core::pooling::PoolingMode::Mean]);
    assert!(p.info().pooling_from.starts_with("default"), "{}", p.info().pooling_from);
    assert_eq!(p.info().max_length, 128);
    check_cases("hf_plain", &p, "embedding", None);
    let p = fixture_with("hf_plain", serde_json::json!({"pooling": "pooler"}));
    check_cases("hf_plain", &p, "pooler_output", None);
}

#[test]
fn user_supplied_heads_match_sentence_transformers_dense_modules() {
    let heads = serde_json::json!({
        "heads": [
            {"path": "heads.safetensors", "weight": "proj.weight", "activation": "tanh"},
            {"path": "heads.safetensors", "weight": "out.weight", "bias": null},
        ],
        "normalize": true,
    });
    let p = fixture_with("user_head", heads);
    assert_eq!(p.dim(), 12);
    let info = p.info();
    assert_eq!(
        (info.heads[0]["out_features"].as_u64(), info.heads[0]["bias"].as_bool()),
        (Some(20), Some(true))
    );
    assert_eq!(info.heads[0]["activation"], "tanh");
    assert_eq!(
        (info.heads[1]["in_features"].as_u64(), info.heads[1]["bias"].as_bool()),
        (Some(20), Some(false))
    );
    assert_eq!(info.heads[1]["activation"], "identity");
    check_cases("user_head", &p, "embedding", None);
    // A torch class path names the same activation.
    let p = fixture_with(
        "user_head",
        serde_json::json!({"heads": [
            {"path": "heads.safetensors", "weight": "proj.weight", "bias": "proj.bias",
             "activation": "torch.nn.modules.activation.Tanh"},
            {"path": "./heads.safetensors", "weight": "out.weight", "activation": "identity"},
        ], "normalize": true}),
    );
    check_cases("user_head", &p, "embedding", None);
}

/// Every bad option is a load error that names the offending value.
#[test]
fn bad_options_are_named() {
    use pg_embed_core::error::Error;
    let load = |name: &str, options: serde_json::Value| -> String {
        let options = Options::from_json(&options).unwrap();
        match Pipeline::load(&root().join("tests/fixtures").join(name), &options) {
            Ok(_) => panic!("{name} {options:?}: loaded"),
            Err(e) => {
                assert!(
                    matches!(
                        e,
                        Error::InvalidOptions(_)
                            | Error::MissingFile { .. }
                            | Error::InvalidFile { .. }
                            | Error::SourceOutsideModelDir { .. }
                    ),
                    "{e:?}"
                );
                e.to_string()
            }
        }
    };
    let head = |spec: serde_json::Value| load("user_head", serde_json::json!({ "heads": [spec] }));
    let cases: Vec<(String, &str)> = vec![
        (load("pool_cls", serde_json::json!({"pooling": "median"})), "unknown pooling mode \"median\""),
        (load("pool_cls", serde_json::json!({"pooling": []})), "pooling must name at least one mode"),
        (
            load("pool_cls", serde_json::json!({"pooling": ["cls", "max", "cls"]})),
            "pooling mode \"cls\" is listed twice",
        ),
        (
            load("dense_tanh", serde_json::json!({"dimensions": 17})),
            "dimensions 17 exceeds the model's output dimension 16",
        ),
        (load("dense_tanh", serde_json::json!({"dimensions": 0})), "dimensions must be at least 1"),
        (
            head(
                serde_json::json!({"path": "heads.safetensors", "weight": "proj.weight", "activation": "mish"}),
            ),
            "heads[0] (\"heads.safetensors\"): unknown activation \"mish\"",
        ),
        (
            head(serde_json::json!({"path": "heads.safetensors", "weight": "out.weight"})),
            "weight \"out.weight\" has shape [12, 20] but the previous stage outputs 32 dimensions",
        ),
        (
            head(serde_json::json!({"path": "heads.safetensors", "weight": "proj.bias"})),
            "weight \"proj.bias\" has shape [20], expected [out, in]",
        ),
        (
            head(
                serde_json::json!({"path": "heads.safetensors", "weight": "proj.weight", "bias": "out.weight"}),
            ),
            "bias \"out.weight\" has shape [12, 20], expected [20]",
        ),
        (
            head(serde_json::json!({"path": "heads.safetensors", "weight": "linear.weight"})),
            "no tensor named \"linear.weight\"; the file holds: out.weight, proj.bias, proj.weight",
        ),
        (head(serde_json::json!({"path": "nope.safetensors"})), "nope.safetensors\" is missing"),
        (head(serde_json::json!({"path": "config.json"})), "config.json\": "),
        (head(serde_json::json!({"path": "../pool_cls/model.safetensors"})), "is outside pg_embed.model_dir"),
        (head(serde_json::json!({"path": "/etc/passwd"})), "head file \"/etc/passwd\" is outside"),
        (
            head(serde_json::json!({"path": "../../../Cargo.toml"})),
            "head file \"../../../Cargo.toml\" is outside",
        ),
    ];
    for (got, want) in cases {
        assert!(got.contains(want), "{got:?} should contain {want:?}");
    }
}

#[test]
fn pooler_needs_a_checkpoint_that_carries_one() {
    let src = root().join("tests/fixtures/hf_plain");
    let dir = std::env::temp_dir().join(format!("pg_embed_no_pooler_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["config.json", "tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let mut tensors = pg_embed_core::safetensors_io::read_safetensors(&src.join("model.safetensors")).unwrap();
    tensors.retain(|name, _| !name.starts_with("pooler."));
    candle_core::safetensors::save(&tensors, dir.join("model.safetensors")).unwrap();
    let options = Options::from_json(&serde_json::json!({"pooling": "pooler"})).unwrap();
    let err = Pipeline::load(&dir, &options).err().expect("no pooler").to_string();
    assert!(Pipeline::load(&dir, &Options::default()).is_ok(), "mean pooling needs no pooler");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(err.contains("pooling mode \"pooler\" needs the backbone's pooler"), "{err}");
}
