//! Unit tests of the pipeline: batching, text properties, load errors.

mod batching {
    use crate::pipeline::length_batches;

    #[test]
    fn batches_group_by_length_under_the_budget() {
        let lengths = [5, 2, 9, 2, 3, 12];
        // Sorted: 2 (1), 2 (3), 3 (4), 5 (0), 9 (2), 12 (5); count x longest <= 12.
        assert_eq!(length_batches(&lengths, 12), vec![vec![1, 3, 4], vec![0], vec![2], vec![5]]);
        // Every input alone when the budget is below any length; all together when large.
        assert_eq!(length_batches(&lengths, 1).len(), 6);
        assert_eq!(length_batches(&lengths, 1000), vec![vec![1, 3, 4, 0, 2, 5]]);
        assert!(length_batches(&[], 10).is_empty());
    }
}

/// Property tests: any text (any Unicode, control characters and NUL included, empty,
/// long) through tokenizer and pipeline, under random pooling, normalisation, max_length
/// and Matryoshka options on a tiny fixture, gives finite vectors of the stated dimension,
/// and batching does not change them.
mod properties {
    use std::path::Path;

    use crate::options::Options;
    use crate::pipeline::Pipeline;
    use proptest::prelude::*;

    const MODES: [&str; 6] = ["cls", "mean", "max", "mean_sqrt_len_tokens", "weightedmean", "lasttoken"];

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            "\\PC{0,80}",
            proptest::collection::vec(
                prop_oneof![
                    Just("\u{301}"),
                    Just("\u{200d}"),
                    Just("👩"),
                    Just("\u{5d0}"),
                    Just(" "),
                    Just("a")
                ],
                0..40
            )
            .prop_map(|parts| parts.concat()),
            (1usize..4000).prop_map(|n| "word ".repeat(n)),
        ]
    }

    proptest! {
        // A fixed seed: the same cases on every run (a failure is reproducible as it is).
        #![proptest_config(ProptestConfig {
            cases: 256,
            rng_seed: proptest::test_runner::RngSeed::Fixed(0x5eed_0e3b_ed00),
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn any_text_under_any_options_embeds(
            texts in proptest::collection::vec(text(), 1..6),
            modes in proptest::sample::subsequence(MODES.to_vec(), 1..3),
            normalize in any::<bool>(),
            max_length in 3usize..40,
            dimensions in proptest::option::of(1usize..16),
            budget in 1usize..200,
        ) {
            let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("tests/fixtures/pool_mean");
            let options = Options::from_json(&serde_json::json!({
                "pooling": modes, "normalize": normalize, "max_length": max_length, "dimensions": dimensions,
            })).unwrap();
            let p = Pipeline::load(&dir, &options).unwrap();
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let batched = p.embed_batched(&refs, budget, 2, || Ok(())).unwrap();
            prop_assert_eq!(batched.len(), texts.len());
            for (t, v) in refs.iter().zip(&batched) {
                prop_assert_eq!(v.len(), p.dim());
                prop_assert!(v.iter().all(|x| x.is_finite()), "{:?} -> {:?}", t, v);
                let single = p.embed(&[t]).unwrap().remove(0);
                let d = single.iter().zip(v).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                prop_assert!(d <= 1e-5, "{:?}: batched differs by {}", t, d);
            }
        }

        #[test]
        fn chunks_of_any_text_are_in_order_and_within_the_text(
            t in text(),
            max_tokens in 1usize..20,
            overlap in 0usize..20,
        ) {
            let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("tests/fixtures/pool_mean");
            let p = Pipeline::load(&dir, &Options::default()).unwrap();
            match p.chunk(&t, max_tokens, overlap) {
                Err(e) => prop_assert!(overlap >= max_tokens, "{}", e),
                Ok(chunks) => {
                    for c in &chunks {
                        prop_assert!(c.bytes.start <= c.bytes.end && c.bytes.end <= t.len());
                        prop_assert!(t.is_char_boundary(c.bytes.start) && t.is_char_boundary(c.bytes.end));
                        prop_assert!(c.tokens.len() <= max_tokens && !c.tokens.is_empty());
                    }
                    for w in chunks.windows(2) {
                        prop_assert!(w[1].tokens.start > w[0].tokens.start && w[1].tokens.start <= w[0].tokens.end);
                    }
                }
            }
        }
    }
}

/// Broken and unsupported model directories: each is a clear error naming the file and
/// the offending value, never a panic. Fixtures are all-MiniLM-L6-v2 with one change.
mod load_errors {
    use std::path::{Path, PathBuf};

    use crate::error::{Error, Result};
    use crate::options::Options;
    use crate::pipeline::Pipeline;
    use crate::pooling::PoolingMode;
    use std::fs;

    fn minilm_dir() -> PathBuf {
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("models/all-MiniLM-L6-v2")
    }

    /// A copy of all-MiniLM-L6-v2 (weights linked, not copied) changed by `edit`.
    fn broken(name: &str, edit: impl FnOnce(&Path)) -> Result<Pipeline> {
        let dir = std::env::temp_dir().join(format!("pg_embed_broken_{}_{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("1_Pooling")).unwrap();
        let src = minilm_dir();
        for f in [
            "config.json",
            "modules.json",
            "sentence_bert_config.json",
            "tokenizer.json",
            "1_Pooling/config.json",
        ] {
            fs::copy(src.join(f), dir.join(f)).unwrap();
        }
        std::os::unix::fs::symlink(src.join("model.safetensors"), dir.join("model.safetensors")).unwrap();
        edit(&dir);
        let result = Pipeline::load(&dir, &Options::default());
        let _ = fs::remove_dir_all(&dir);
        result
    }

    fn edit_json(path: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
        let mut v: serde_json::Value = serde_json::from_slice(&fs::read(path).unwrap()).unwrap();
        edit(&mut v);
        fs::write(path, serde_json::to_vec(&v).unwrap()).unwrap();
    }

    fn replace_weights(dir: &Path, bytes: &[u8]) {
        fs::remove_file(dir.join("model.safetensors")).unwrap();
        fs::write(dir.join("model.safetensors"), bytes).unwrap();
    }

    fn message(r: Result<Pipeline>) -> (Error, String) {
        let e = r.err().expect("loading must fail");
        let m = e.to_string();
        (e, m)
    }

    #[test]
    fn the_unbroken_copy_loads() {
        assert!(broken("none", |_| {}).is_ok());
    }

    #[test]
    fn missing_tokenizer() {
        let (e, m) = message(broken("no_tokenizer", |d| fs::remove_file(d.join("tokenizer.json")).unwrap()));
        assert!(matches!(e, Error::MissingFile { .. }) && m.ends_with("tokenizer.json\" is missing"), "{m}");
    }

    #[test]
    fn malformed_config_json() {
        let (e, m) = message(broken("bad_json", |d| {
            fs::write(d.join("config.json"), "{\"model_type\": \"bert\",").unwrap()
        }));
        assert!(matches!(e, Error::InvalidFile { .. }) && m.contains("config.json"), "{m}");
    }

    #[test]
    fn malformed_modules_json() {
        let (e, m) =
            message(broken("bad_modules", |d| fs::write(d.join("modules.json"), "[{\"type\": 3}]").unwrap()));
        assert!(matches!(e, Error::InvalidFile { .. }) && m.contains("modules.json"), "{m}");
    }

    #[test]
    fn unsupported_model_type() {
        let (e, m) = message(broken("falcon", |d| {
            edit_json(&d.join("config.json"), |v| v["model_type"] = "falcon".into())
        }));
        assert!(matches!(e, Error::Unsupported { what: "model_type", .. }) && m.contains("\"falcon\""), "{m}");
        assert_eq!(
            e.hint().unwrap(),
            "Supported: bert, camembert, clip, clip_text_model, clip_vision_model, deberta-v2, dinov2, dinov3_vit, distilbert, electra, eurobert, gemma2, gemma3_text, gpt2, gte, jina_embeddings_v3, llama, mistral, modernbert, mpnet, new, nomic_bert, qwen2, qwen3, roberta, siglip, siglip2, siglip2_text_model, siglip2_vision_model, siglip_text_model, siglip_vision_model, t5, vit, xlm-roberta, xlnet."
        );
    }

    #[test]
    fn unsupported_activation() {
        let (e, m) = message(broken("swish", |d| {
            edit_json(&d.join("config.json"), |v| v["hidden_act"] = "swish".into())
        }));
        assert!(matches!(e, Error::Unsupported { what: "hidden_act", .. }) && m.contains("\"swish\""), "{m}");
        assert!(m.contains("config.json"), "{m}");
    }

    #[test]
    fn unsupported_module() {
        let (e, m) = message(broken("dense", |d| {
            edit_json(&d.join("modules.json"), |v| {
                v.as_array_mut().unwrap().insert(
                    2,
                    serde_json::json!({"idx": 2, "name": "2", "path": "2_LSTM", "type": "sentence_transformers.models.LSTM"}),
                )
            })
        }));
        assert!(
            matches!(e, Error::Unsupported { .. }) && m.contains("sentence_transformers.models.LSTM"),
            "{m}"
        );
    }

    #[test]
    fn legacy_pooling_flags_concatenate_in_legacy_order() {
        let p = broken("legacy_flags", |d| {
            edit_json(&d.join("1_Pooling/config.json"), |v| {
                v["pooling_mode_lasttoken"] = true.into();
                v["pooling_mode_cls_token"] = true.into();
            })
        })
        .unwrap();
        assert_eq!(p.info().pooling, vec![PoolingMode::Cls, PoolingMode::Mean, PoolingMode::Lasttoken]);
        assert_eq!(p.info().dim, 3 * 384);
    }

    #[test]
    fn pooling_dimension_differs_from_backbone() {
        let (e, m) = message(broken("dim", |d| {
            edit_json(&d.join("1_Pooling/config.json"), |v| v["word_embedding_dimension"] = 768.into())
        }));
        assert!(matches!(e, Error::InvalidFile { .. }) && m.contains("word_embedding_dimension 768"), "{m}");
    }

    #[test]
    fn config_shape_differs_from_weights() {
        let (e, m) = message(broken("shape", |d| {
            edit_json(&d.join("config.json"), |v| v["intermediate_size"] = 1024.into())
        }));
        assert!(matches!(e, Error::InvalidFile { .. }) && m.contains("model.safetensors"), "{m}");
        assert!(m.contains("shape"), "{m}");
    }

    #[test]
    fn truncated_weights() {
        let head = fs::read(minilm_dir().join("model.safetensors")).unwrap()[..4096].to_vec();
        let (e, m) = message(broken("truncated", |d| replace_weights(d, &head)));
        assert!(matches!(e, Error::InvalidFile { .. }) && m.contains("model.safetensors"), "{m}");
    }

    #[test]
    fn safetensors_header_that_lies_about_sizes() {
        let header = br#"{"w":{"dtype":"F32","shape":[1000000],"data_offsets":[0,4000000]}}"#;
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header);
        bytes.extend_from_slice(&[0u8; 16]);
        let (e, m) = message(broken("lying", |d| replace_weights(d, &bytes)));
        assert!(matches!(e, Error::InvalidFile { .. }) && m.contains("model.safetensors"), "{m}");
        let (e, _) = message(broken("huge_header_len", |d| replace_weights(d, &u64::MAX.to_le_bytes())));
        assert!(matches!(e, Error::InvalidFile { .. }));
    }

    #[test]
    fn sentence_transformers_6_pooling_format() {
        let p = broken("st6", |d| {
            fs::write(
                d.join("1_Pooling/config.json"),
                r#"{"embedding_dimension": 384, "pooling_mode": ["mean", "cls"], "include_prompt": true}"#,
            )
            .unwrap()
        })
        .unwrap();
        assert_eq!(p.info().pooling, vec![PoolingMode::Mean, PoolingMode::Cls], "order as listed");
        assert_eq!(p.info().dim, 768);
        let (e, m) = message(broken("st6_dim", |d| {
            fs::write(
                d.join("1_Pooling/config.json"),
                r#"{"embedding_dimension": 10, "pooling_mode": "mean"}"#,
            )
            .unwrap()
        }));
        assert!(matches!(e, Error::InvalidFile { .. }) && m.contains("word_embedding_dimension 10"), "{m}");
        let (e, m) = message(broken("st6_unknown", |d| {
            fs::write(
                d.join("1_Pooling/config.json"),
                r#"{"embedding_dimension": 384, "pooling_mode": "median"}"#,
            )
            .unwrap()
        }));
        assert!(
            matches!(e, Error::Unsupported { what: "pooling mode", .. }) && m.contains("\"median\""),
            "{m}"
        );
    }

    #[test]
    fn missing_weights() {
        let (e, m) = message(broken("no_weights", |d| fs::remove_file(d.join("model.safetensors")).unwrap()));
        assert!(matches!(e, Error::MissingFile { .. }) && m.contains("model.safetensors"), "{m}");
    }
}

/// A static model's long input tokenized in pieces gives the ids the whole text gives
/// (tokens never cross whitespace for these tokenizers), truncation included; tokenizers of
/// other kinds are not cut.
mod pieces {
    use std::path::{Path, PathBuf};

    use proptest::prelude::*;
    use tokenizers::Tokenizer;

    use crate::pipeline::text::{encode_in_pieces, encode_typed};

    fn fixture(name: &str) -> PathBuf {
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("tests/fixtures/sparse").join(name)
    }

    /// The tokenizer as a static model uses it (no post-processor: no special tokens).
    fn static_tokenizer(name: &str) -> Tokenizer {
        let mut t = Tokenizer::from_file(fixture(name).join("tokenizer.json")).unwrap();
        t.with_post_processor(None::<tokenizers::PostProcessorWrapper>);
        t
    }

    const SAMPLES: [&str; 9] = [
        "The quick brown fox, jumps over the lazy dog! ",
        "Ünïcödé àccents\tand\ttabs\n",
        "中文字符混在一起 with English ",
        "don't stop-believing... (really) ",
        "    many   spaces    ",
        "e\u{301}t\u{e9} NFC\u{300} ",
        "x",
        "\u{3000}ideographic\u{3000}space\r\n",
        // Characters a byte-level BPE splits into several tokens.
        "🦀🎉ß€ ",
    ];

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 48,
            rng_seed: proptest::test_runner::RngSeed::Fixed(0x91ec_e5ee_d001),
            failure_persistence: None,
            ..ProptestConfig::default()
        })]
        #[test]
        fn pieces_give_the_whole_texts_ids(picks in proptest::collection::vec(0..SAMPLES.len(), 1..400),
                                           piece in 1usize..200, lowercase in any::<bool>()) {
            same_ids(&picks, piece, lowercase)?;
        }
    }

    /// Cases that failed once: a single character per piece; a first piece that the
    /// tokenizer itself truncates at the limit (38 tokens, limit 37), with nothing after it.
    #[test]
    fn cases_that_failed() {
        for (picks, piece) in [(&[2, 0, 0, 0, 0][..], 1), (&[1, 0, 0][..], 117)] {
            same_ids(picks, piece, false).unwrap();
        }
    }

    fn same_ids(picks: &[usize], piece: usize, lowercase: bool) -> Result<(), TestCaseError> {
        let text: String = picks.iter().map(|&i| SAMPLES[i]).collect();
        for (name, truncate) in [("static_st", None), ("static_st", Some(37)), ("model2vec_layout", None)] {
            let mut t = static_tokenizer(name);
            if let Some(m) = truncate {
                t.with_truncation(Some(tokenizers::TruncationParams { max_length: m, ..Default::default() })).unwrap();
            }
            let whole = encode_typed(&t, lowercase, &text).unwrap();
            let pieces = encode_in_pieces(&t, lowercase, &text, piece).unwrap().expect("a BERT tokenizer is cut");
            prop_assert_eq!(&pieces.0, &whole.0, "{} (max_length {:?}), pieces of {}", name, truncate, piece);
            // Cut: more tokens than the limit (the whole text's flag: `cut_is_more_tokens_than_the_limit`).
            let mut untruncated = t.clone();
            untruncated.with_truncation(None).unwrap();
            let count = encode_typed(&untruncated, lowercase, &text).unwrap().0.len();
            let limit = t.get_truncation().map(|p| p.max_length);
            prop_assert_eq!(pieces.2, limit.is_some_and(|m| count > m), "cut, {} tokens", count);
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 96,
            rng_seed: proptest::test_runner::RngSeed::Fixed(0xc07_5eed_0023),
            failure_persistence: None,
            ..ProptestConfig::default()
        })]
        /// Whether an input was cut (which `long_input = 'error'` and the truncated counter
        /// read) is whether the untruncated tokenizer gives more tokens than max_length, for
        /// tokenizers with and without special tokens, truncating on either side. tokenizers
        /// stops at the limit, so without special tokens the overflow alone does not say.
        #[test]
        fn cut_is_more_tokens_than_the_limit(picks in proptest::collection::vec(0..SAMPLES.len(), 1..12),
                                              limit in 3usize..60, left in any::<bool>()) {
            let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
            let text: String = picks.iter().map(|&i| SAMPLES[i]).collect();
            for (name, tokenizer) in [
                ("static_st", static_tokenizer("static_st")),
                ("gpt2", Tokenizer::from_file(root.join("tests/fixtures/decoders/gpt2/tokenizer.json")).unwrap()),
                ("qwen3", Tokenizer::from_file(root.join("tests/fixtures/decoders/qwen3_embed/tokenizer.json")).unwrap()),
                ("minilm", Tokenizer::from_file(root.join("models/all-MiniLM-L6-v2/tokenizer.json")).unwrap()),
            ] {
                // As the pipeline loads it: no padding.
                let mut t = tokenizer;
                t.with_padding(None);
                t.with_truncation(None).unwrap();
                let count = encode_typed(&t, false, &text).unwrap().0.len();
                let direction = if left { tokenizers::TruncationDirection::Left } else { tokenizers::TruncationDirection::Right };
                t.with_truncation(Some(tokenizers::TruncationParams { max_length: limit, direction, ..Default::default() })).unwrap();
                let (ids, _, cut) = encode_typed(&t, false, &text).unwrap();
                prop_assert_eq!(cut, count > limit, "{}: {} tokens, limit {}, kept {}", name, count, limit, ids.len());
            }
        }
    }

    #[test]
    fn tokenizers_whose_tokens_cross_whitespace_are_not_cut() {
        // all-MiniLM-L6-v2 with its post-processor adds [CLS] and [SEP]: not cut.
        let minilm = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("models/all-MiniLM-L6-v2/tokenizer.json");
        let t = Tokenizer::from_file(minilm).unwrap();
        assert!(encode_in_pieces(&t, false, "a b c", 1).unwrap().is_none());
    }
}

/// `read_tokenizer` against tokenizers' own reader (`Tokenizer::from_bytes`), on every
/// tokenizer.json of the fixtures and the real model: the same tokenizer (its JSON as the
/// library writes it) and the same encodings, special tokens and pairs included.
mod reading {
    use std::path::{Path, PathBuf};

    use tokenizers::Tokenizer;

    use crate::tokenizer::{largest_model_id, read_tokenizer, tokenizer_parts};

    /// `read_tokenizer` of a file's bytes.
    fn read(bytes: &[u8]) -> Option<Result<Tokenizer, String>> {
        read_tokenizer(&tokenizer_parts(bytes).expect("a JSON object"))
    }

    fn tokenizer_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                tokenizer_files(&path, out);
            } else if path.file_name().is_some_and(|n| n == "tokenizer.json") {
                out.push(path);
            }
        }
    }

    #[test]
    fn tokenizers_read_as_the_library_reads_them() {
        let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
        let mut files = Vec::new();
        tokenizer_files(&root.join("tests/fixtures"), &mut files);
        tokenizer_files(&root.join("models"), &mut files);
        assert!(files.len() > 50, "{} tokenizer files", files.len());
        let texts = [
            "",
            "Hello, World! héllo wörld",
            "A longer sentence, with [MASK] tokens, <s> and </s>, 123 numbers and émojis 👩‍💻.",
            "  spaces\tand\nnewlines  ",
            "日本語のテキスト",
        ];
        // No fixture has a WordLevel model: one made with the library, with added tokens.
        let vocab = [("[UNK]", 0), ("hello", 1), ("world", 2), (",", 3), ("!", 4)];
        let model = tokenizers::models::wordlevel::WordLevel::builder()
            .vocab(vocab.iter().map(|(t, i)| (t.to_string(), *i)).collect())
            .unk_token("[UNK]".into())
            .build()
            .unwrap();
        let mut word_level = Tokenizer::new(model);
        word_level.with_pre_tokenizer(Some(tokenizers::pre_tokenizers::whitespace::Whitespace {}));
        word_level.add_special_tokens([tokenizers::AddedToken::from("[CLS]", true)]).unwrap();
        word_level.add_tokens([tokenizers::AddedToken::from("wörld", false)]).unwrap();
        let mut sources: Vec<(String, Vec<u8>)> =
            files.iter().map(|f| (f.display().to_string(), std::fs::read(f).unwrap())).collect();
        sources.push(("WordLevel".into(), word_level.to_string(false).unwrap().into_bytes()));
        let mut kinds = std::collections::BTreeSet::new();
        for (file, bytes) in &sources {
            let want = Tokenizer::from_bytes(bytes).unwrap();
            let Some(got) = read(bytes) else {
                continue;
            };
            let got = got.unwrap_or_else(|e| panic!("{file}: {e}"));
            assert_eq!(got.to_string(false).unwrap(), want.to_string(false).unwrap(), "{file}");
            for text in texts {
                for special in [false, true] {
                    let (g, w) = (got.encode(text, special).unwrap(), want.encode(text, special).unwrap());
                    assert_eq!((g.get_ids(), g.get_offsets()), (w.get_ids(), w.get_offsets()), "{file}: {text:?}");
                    if let (Ok(g), Ok(w)) = (got.encode((text, "second"), special), want.encode((text, "second"), special)) {
                        assert_eq!(g.get_ids(), w.get_ids(), "{file}: pair {text:?}");
                    }
                }
            }
            // The largest id in the file is the model's.
            let largest = tokenizers::Model::get_vocab(want.get_model()).into_values().max();
            let model = tokenizer_parts(bytes).unwrap()["model"].get();
            assert_eq!(largest_model_id(model), largest, "{file}");
            let value: serde_json::Value = serde_json::from_slice(bytes).unwrap();
            kinds.insert(value["model"]["type"].as_str().unwrap_or("none").to_string());
        }
        // Every model kind the reader reads was compared.
        for kind in ["BPE", "WordPiece", "Unigram", "WordLevel"] {
            assert!(kinds.contains(kind), "no {kind} tokenizer among {kinds:?}");
        }
    }

    #[test]
    fn what_the_reader_does_not_read_goes_to_the_library() {
        // A model without "type" (the oldest files): None, so the library reads it.
        assert!(read(br#"{"model": {"vocab": {"a": 0}, "unk_token": "a"}}"#).is_none());
        // A damaged part is an error, as it is for the library.
        let bad = br#"{"version": "1.0", "model": {"type": "WordLevel", "vocab": {"a": 0}, "unk_token": "a"}, "normalizer": {"type": "Nope"}}"#;
        assert!(read(bad).unwrap().is_err() && Tokenizer::from_bytes(bad).is_err());
        // A WordPiece model without one of its fields, or of another type: errors, as for the library.
        for model in [r#"{"type": "WordPiece", "unk_token": "a", "max_input_chars_per_word": 5, "vocab": {"a": 0}}"#,
                      r###"{"type": "WordPiece", "unk_token": "a", "continuing_subword_prefix": "##", "max_input_chars_per_word": -1, "vocab": {"a": 0}}"###] {
            let file = format!(r#"{{"version": "1.0", "model": {model}}}"#);
            assert!(read(file.as_bytes()).unwrap().is_err() && Tokenizer::from_bytes(file.as_bytes()).is_err(), "{model}");
        }
        let version = br#"{"version": "2.0", "model": {"type": "WordLevel", "vocab": {"a": 0}, "unk_token": "a"}}"#;
        assert!(read(version).unwrap().is_err() && Tokenizer::from_bytes(version).is_err());
    }
}
