//! `#[pg_test]`s of the inference functions, registration, options, classify and rerank.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use super::super::*;

    #[pg_test]
    fn embed_returns_a_unit_vector_of_384() {
        register("minilm");
        let v = embed_sql("minilm", "A quick test sentence about PostgreSQL.");
        assert_eq!(v.len(), 384);
        let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
    }

    /// `embed(model, text[])`: a row per element in order, NULL rows for NULL elements,
    /// each equal to the single-input call within 1e-5, whatever the batch budget.
    #[pg_test]
    fn embed_of_an_array_is_one_row_per_input_in_order() {
        register("minilm");
        let texts =
            ["a longer sentence about the database and its vectors", "short", "", "middle sized input"];
        for budget in [1, 16, 4096] {
            Spi::run(&format!("SET LOCAL pg_embed.max_batch_tokens = {budget}")).unwrap();
            let rows: Vec<Option<Vec<f32>>> = Spi::connect(|client| {
                client
                    .select(
                        "SELECT e FROM embed('minilm', ARRAY['a longer sentence about the database and its vectors', NULL, 'short', '', 'middle sized input']) WITH ORDINALITY AS t(e, i) ORDER BY i",
                        None,
                        &[],
                    )
                    .unwrap()
                    .map(|row| row.get::<Vec<f32>>(1).unwrap())
                    .collect()
            });
            assert_eq!(rows.len(), 5, "budget {budget}");
            assert!(rows[1].is_none(), "a NULL element gives a NULL row");
            let present: Vec<&Vec<f32>> = rows.iter().flatten().collect();
            for (got, text) in present.iter().zip(texts) {
                let want = embed_sql("minilm", text);
                let d = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                assert!(got.len() == 384 && d <= 1e-5, "budget {budget}, {text:?}: {d}");
            }
        }
        let none = Spi::get_one::<i64>("SELECT count(*) FROM embed('minilm', '{}'::text[])").unwrap();
        assert_eq!(none, Some(0));
        let null_array = Spi::get_one::<i64>("SELECT count(*) FROM embed('minilm', NULL::text[])").unwrap();
        assert_eq!(null_array, Some(0));
        // Thread count: the same vectors on one thread.
        Spi::run("SET LOCAL pg_embed.threads = 1").unwrap();
        let one = embed_sql("minilm", "short");
        Spi::run("SET LOCAL pg_embed.threads = 2").unwrap();
        let two = embed_sql("minilm", "short");
        let d = one.iter().zip(&two).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(d <= 1e-5, "1 vs 2 threads: {d}");
    }

    #[pg_test]
    fn embed_of_null_is_null_and_empty_text_embeds() {
        register("minilm");
        let null = Spi::get_one::<Vec<f32>>("SELECT embed('minilm', NULL)").unwrap();
        assert_eq!(null, None);
        for text in ["", "   ", "\t\n"] {
            assert_eq!(embed_sql("minilm", text).len(), 384, "{text:?}");
        }
        // BERT's tokenizer drops surrounding whitespace (inputs are not stripped otherwise).
        assert_eq!(embed_sql("minilm", "  hello world \n"), embed_sql("minilm", "hello world"));
    }

    #[pg_test]
    fn register_returns_the_pipeline_and_fills_the_catalog() {
        let info = Spi::get_one::<pgrx::JsonB>("SELECT embed.register_model('m1', 'all-MiniLM-L6-v2')")
            .unwrap()
            .unwrap()
            .0;
        assert_eq!(info["name"], "m1");
        assert_eq!(info["architecture"], "bert");
        assert_eq!(info["dim"], 384);
        assert_eq!(info["max_length"], 256);
        assert_eq!(info["pooling"], serde_json::json!(["mean"]));
        assert_eq!(info["normalize"], true);
        let row = Spi::get_three::<String, String, i32>(
            "SELECT source, task, dim FROM embed.models WHERE name = 'm1'",
        )
        .unwrap();
        assert_eq!(row, (Some(MODEL_SOURCE.into()), Some("embed".into()), Some(384)));
        let again = Spi::get_one::<pgrx::JsonB>("SELECT embed.model_info('m1')").unwrap().unwrap().0;
        assert_eq!(again["revision"], info["revision"]);
        assert_eq!(again["dim"], 384);
    }

    #[pg_test]
    fn options_override_pooling_normalize_and_max_length() {
        Spi::run(
            "SELECT embed.register_model('m_cls', 'all-MiniLM-L6-v2', '{\"pooling\": [\"mean\", \"cls\"], \"normalize\": false, \"max_length\": 16}')",
        )
        .unwrap();
        let info = Spi::get_one::<pgrx::JsonB>("SELECT embed.model_info('m_cls')").unwrap().unwrap().0;
        assert_eq!(info["pooling"], serde_json::json!(["mean", "cls"]), "concatenated in the order listed");
        assert_eq!(info["pooling_from"], "options");
        assert_eq!(info["dim"], 768);
        assert_eq!(info["max_length"], 16);
        assert_eq!(info["normalize"], false);
        let v = embed_sql("m_cls", "one two three");
        assert_eq!(v.len(), 768);
        let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() > 1e-3, "not normalised: norm {norm}");
        // max_length 16 truncates: two long texts sharing their first 14 words embed alike.
        let base = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi";
        assert_eq!(
            embed_sql("m_cls", &format!("{base} omicron pi")),
            embed_sql("m_cls", &format!("{base} rho sigma tau"))
        );
    }

    #[pg_test]
    fn reregistering_replaces_the_cached_pipeline() {
        register("m2");
        assert_eq!(embed_sql("m2", "x").len(), 384);
        Spi::run(
            "SELECT embed.register_model('m2', 'all-MiniLM-L6-v2', '{\"pooling\": [\"cls\", \"max\"]}')",
        )
        .unwrap();
        assert_eq!(embed_sql("m2", "x").len(), 768);
    }

    #[pg_test]
    fn a_catalog_change_by_another_session_is_seen() {
        // Another session's re-registration shows up here only as a new catalog revision;
        // simulate it by bumping the row's revision behind this backend's cache.
        register("m3");
        let before = embed_sql("m3", "hello");
        Spi::run(
            "UPDATE embed.models SET options = '{\"pooling\": \"cls\"}', revision = nextval('embed.model_revision') WHERE name = 'm3'",
        )
        .unwrap();
        let after = embed_sql("m3", "hello");
        assert_eq!(after.len(), 384);
        assert_ne!(before, after, "cls pooling was picked up");
        Spi::run("DELETE FROM embed.models WHERE name = 'm3'").unwrap();
        let err = PgTryBuilder::new(|| Some(embed_sql("m3", "hello"))).catch_others(|_| None).execute();
        assert_eq!(err, None, "a model dropped elsewhere is not served from the cache");
    }

    #[pg_test(error = "model \"nope\" is not registered")]
    fn embed_unknown_model() {
        embed_sql("nope", "x");
    }

    #[pg_test(error = "model \"nope\" is not registered")]
    fn drop_unknown_model() {
        Spi::run("SELECT embed.drop_model('nope')").unwrap();
    }

    #[pg_test(error = "model \"gone\" is not registered")]
    fn dropped_model_is_gone() {
        register("gone");
        Spi::run("SELECT embed.drop_model('gone')").unwrap();
        embed_sql("gone", "x");
    }

    #[pg_test(error = "model source \"no-such-model\" does not exist in pg_embed.model_dir")]
    fn register_missing_source() {
        Spi::run("SELECT embed.register_model('x', 'no-such-model')").unwrap();
    }

    #[pg_test(error = "model source \"../src\" is outside pg_embed.model_dir")]
    fn register_source_escaping_model_dir() {
        Spi::run("SELECT embed.register_model('x', '../src')").unwrap();
    }

    #[pg_test(error = "model source \"/etc\" is outside pg_embed.model_dir")]
    fn register_absolute_source_outside() {
        Spi::run("SELECT embed.register_model('x', '/etc')").unwrap();
    }

    #[pg_test(error = "invalid model source \"\": it is empty")]
    fn register_empty_source() {
        Spi::run("SELECT embed.register_model('x', '')").unwrap();
    }

    #[pg_test(error = "model name must not be NULL")]
    fn register_null_name() {
        Spi::run("SELECT embed.register_model(NULL, 'all-MiniLM-L6-v2')").unwrap();
    }

    #[pg_test(error = "invalid model name \" x\"")]
    fn register_bad_name() {
        Spi::run("SELECT embed.register_model(' x', 'all-MiniLM-L6-v2')").unwrap();
    }

    #[pg_test(
        error = "invalid options: unknown field `polling`, expected one of `pooling`, `normalize`, `max_length`, `dimensions`, `prompts`, `prompt`, `include_prompt`, `task`, `heads`, `long_input`, `precision`, `max_terms`, `min_weight`"
    )]
    fn register_unknown_option() {
        Spi::run("SELECT embed.register_model('x', 'all-MiniLM-L6-v2', '{\"polling\": \"cls\"}')").unwrap();
    }

    /// jsonb holds numbers beyond f64 (as numeric): an option's error (22023), not a panic.
    #[pg_test(
        error = "invalid options: number out of range at line 1 column 416: {\"min_weight\": 10000000000000000000000000000000000000000000000000000000000000000..."
    )]
    fn register_option_beyond_f64() {
        Spi::run("SELECT embed.register_model('x', 'all-MiniLM-L6-v2', '{\"min_weight\": 1e400}')").unwrap();
    }

    #[pg_test(
        error = "invalid options: unknown pooling mode \"avg\"; expected one of cls, max, mean, mean_sqrt_len_tokens, weightedmean, lasttoken, pooler"
    )]
    fn register_unknown_pooling() {
        Spi::run("SELECT embed.register_model('x', 'all-MiniLM-L6-v2', '{\"pooling\": \"avg\"}')").unwrap();
    }

    #[pg_test(error = "invalid options: max_length 1000 exceeds the model's max_position_embeddings 512")]
    fn register_max_length_too_large() {
        Spi::run("SELECT embed.register_model('x', 'all-MiniLM-L6-v2', '{\"max_length\": 1000}')").unwrap();
    }

    #[pg_test(error = "permission denied to register models")]
    fn register_needs_superuser() {
        Spi::run("CREATE ROLE embed_test_plain").unwrap();
        Spi::run("SET ROLE embed_test_plain").unwrap();
        Spi::run("SELECT embed.register_model('x', 'all-MiniLM-L6-v2')").unwrap();
    }

    #[pg_test(error = "permission denied to drop models")]
    fn drop_needs_superuser() {
        register("kept");
        Spi::run("CREATE ROLE embed_test_plain2").unwrap();
        Spi::run("SET ROLE embed_test_plain2").unwrap();
        Spi::run("SELECT embed.drop_model('kept')").unwrap();
    }

    #[pg_test]
    fn a_plain_role_may_embed_and_read_the_catalog() {
        register("shared");
        Spi::run("CREATE ROLE embed_test_reader").unwrap();
        Spi::run("SET ROLE embed_test_reader").unwrap();
        assert_eq!(embed_sql("shared", "hello").len(), 384);
        assert_eq!(
            Spi::get_one::<i64>("SELECT count(*) FROM embed.models WHERE name = 'shared'").unwrap(),
            Some(1)
        );
    }

    #[pg_test(error = "permission denied for table models")]
    fn a_plain_role_may_not_write_the_catalog() {
        Spi::run("CREATE ROLE embed_test_writer").unwrap();
        Spi::run("SET ROLE embed_test_writer").unwrap();
        Spi::run("DELETE FROM embed.models").unwrap();
    }

    #[pg_test(error = "permission denied to set parameter \"pg_embed.model_dir\"")]
    fn model_dir_is_superuser_only() {
        Spi::run("CREATE ROLE embed_test_setter").unwrap();
        Spi::run("SET ROLE embed_test_setter").unwrap();
        Spi::run("SET pg_embed.model_dir = '/'").unwrap();
    }

    #[pg_test(error = "invalid options: unknown variant `float16`, expected one of `float32`, `bfloat16`, `int8`")]
    fn register_unknown_precision() {
        Spi::run("SELECT embed.register_model('x', 'all-MiniLM-L6-v2', '{\"precision\": \"float16\"}')").unwrap();
    }

    /// precision "bfloat16" through SQL: the same vectors to cosine 0.9999 as float32, the
    /// precision in model_info and loaded_models with the kernel this CPU runs.
    #[pg_test]
    fn a_bfloat16_model_embeds_close_to_float32_and_says_how() {
        register("f32");
        let info = register_with("bf16", "all-MiniLM-L6-v2", r#"{"precision": "bfloat16"}"#);
        assert_eq!(info["precision"], "bfloat16", "{info}");
        for text in ["a cat sat on the mat", "PostgreSQL runs transformer models"] {
            let (a, b) = (embed_sql("f32", text), embed_sql("bf16", text));
            let dot: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert!(dot >= 0.9999 && a != b, "{text}: cosine {dot} (both normalized)");
        }
        let (precision, kernel) = Spi::get_two::<String, String>(
            "SELECT precision, kernel FROM embed.loaded_models() WHERE name = 'bf16'",
        )
        .unwrap();
        assert_eq!(precision.as_deref(), Some("bfloat16"));
        let kernel = kernel.unwrap();
        let want = pg_embed_core::kernels::bf16::dispatch().kernel.name();
        assert!(kernel.starts_with(want), "{kernel} (dispatched: {want})");
        let f32_kernel = Spi::get_one::<String>("SELECT kernel FROM embed.loaded_models() WHERE name = 'f32'").unwrap();
        assert!(f32_kernel.is_some_and(|k| k.ends_with("float32")));
    }

    #[pg_test]
    fn long_input_is_truncated_not_refused() {
        register("minilm");
        let long = "word ".repeat(5000);
        assert_eq!(embed_sql("minilm", &long).len(), 384);
        // Only the first 254 word-pieces count, as in sentence-transformers.
        assert_eq!(embed_sql("minilm", &long), embed_sql("minilm", &"word ".repeat(300)));
    }

    #[pg_test]
    fn embed_works_with_pgvector_shapes_of_sql() {
        register("minilm");
        // IMMUTABLE: usable in a generated column.
        Spi::run(
            "CREATE TABLE docs (body text, emb real[] GENERATED ALWAYS AS (embed('minilm', body)) STORED);
             INSERT INTO docs (body) VALUES ('the cat sat on the mat'), ('stock markets fell sharply'), (NULL);",
        )
        .unwrap();
        let n = Spi::get_one::<i64>("SELECT count(*) FROM docs WHERE array_length(emb, 1) = 384").unwrap();
        assert_eq!(n, Some(2));
        assert_eq!(Spi::get_one::<i64>("SELECT count(*) FROM docs WHERE emb IS NULL").unwrap(), Some(1));
    }

    #[pg_test]
    fn embed_with_a_named_prompt() {
        use_fixtures();
        let info = register_with("p", "prompts_exclude", "{}");
        assert_eq!(info["prompts"]["query"], "query: ");
        assert_eq!(info["include_prompt"], false);
        let text = "how are you today?";
        let plain = embed_sql("p", text);
        let query = embed_prompt_sql("p", text, "query");
        assert_eq!(query.len(), 32);
        assert_ne!(query, plain);
        assert_eq!(embed_prompt_sql("p", text, ""), plain, "'' is no prompt");
        assert_eq!(embed_prompt_sql("p", text, "document"), plain, "the empty document prompt");
        let null = Spi::get_one::<Vec<f32>>("SELECT embed('p', 'x', NULL)").unwrap();
        assert_eq!(null, None, "STRICT");
        // A default prompt from options applies when none is named.
        register_with("p_default", "prompts_exclude", r#"{"prompt": "query"}"#);
        assert_eq!(embed_sql("p_default", text), query);
        assert_eq!(embed_prompt_sql("p_default", text, ""), plain);
    }

    #[pg_test(error = "unknown prompt name \"qeury\"")]
    fn embed_with_an_unknown_prompt() {
        use_fixtures();
        register_with("p", "prompts", "{}");
        embed_prompt_sql("p", "x", "qeury");
    }

    #[pg_test]
    fn projection_heads_and_dimensions_from_options() {
        use_fixtures();
        let info = register_with(
            "h",
            "user_head",
            r#"{"heads": [{"path": "heads.safetensors", "weight": "proj.weight", "activation": "tanh"},
                          {"path": "heads.safetensors", "weight": "out.weight", "bias": null}],
                "normalize": true, "dimensions": 6}"#,
        );
        assert_eq!(info["dim"], 6);
        assert_eq!(info["dimensions"], 6);
        assert_eq!(info["heads"][0]["in_features"], 32);
        assert_eq!(info["heads"][0]["out_features"], 20);
        assert_eq!(info["heads"][1]["bias"], false);
        let v = embed_sql("h", "hello world");
        assert_eq!(v.len(), 6);
        let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "normalize after truncation: norm {norm}");
        let dim = Spi::get_one::<i32>("SELECT dim FROM embed.models WHERE name = 'h'").unwrap();
        assert_eq!(dim, Some(6));
    }

    #[pg_test(error = "head file \"../../Cargo.toml\" is outside pg_embed.model_dir")]
    fn a_head_file_outside_model_dir() {
        use_fixtures();
        register_with("h", "user_head", r#"{"heads": [{"path": "../../Cargo.toml"}]}"#);
    }

    #[pg_test(
        error = "invalid options: heads[0] (\"heads.safetensors\"): weight \"out.weight\" has shape [12, 20] but the previous stage outputs 32 dimensions (expected [out, 32], as torch.nn.Linear stores it)"
    )]
    fn a_head_of_the_wrong_shape() {
        use_fixtures();
        register_with(
            "h",
            "user_head",
            r#"{"heads": [{"path": "heads.safetensors", "weight": "out.weight"}]}"#,
        );
    }

    #[pg_test(error = "invalid options: dimensions 64 exceeds the model's output dimension 32")]
    fn dimensions_larger_than_the_output() {
        use_fixtures();
        register_with("d", "pool_mean", r#"{"dimensions": 64}"#);
    }

    fn golden_classify() -> serde_json::Value {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/classify/golden.json");
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    }

    #[pg_test]
    fn classify_and_classify_labels_in_sql() {
        use_fixtures();
        let info = register_with("sentiment", "classify/bert_single_label", "{}");
        assert_eq!(info["task"], "classify");
        assert_eq!(info["labels"], serde_json::json!(["negative", "neutral", "positive"]));
        assert_eq!(info["problem_type"], "single_label_classification");
        assert_eq!(info["classifier"]["architecture"], "BertForSequenceClassification");
        let g = golden_classify();
        let case = &g["fixtures"]["bert_single_label"]["cases"][1];
        let want: Vec<f32> = serde_json::from_value(case["logits"].clone()).unwrap();
        let got = Spi::get_one_with_args::<Vec<f32>>(
            "SELECT classify('sentiment', $1)",
            &[case["text"].as_str().unwrap().into()],
        )
        .unwrap()
        .unwrap();
        assert!(got.iter().zip(&want).all(|(a, b)| (a - b).abs() <= 1e-4), "{got:?} vs {want:?}");
        // Pairs: the last golden case.
        let cases = g["fixtures"]["bert_single_label"]["cases"].as_array().unwrap();
        let pair = cases.iter().find(|c| c["pair"].is_string()).unwrap();
        let want: Vec<f32> = serde_json::from_value(pair["logits"].clone()).unwrap();
        let got = Spi::get_one_with_args::<Vec<f32>>(
            "SELECT classify('sentiment', $1, $2)",
            &[pair["text"].as_str().unwrap().into(), pair["pair"].as_str().unwrap().into()],
        )
        .unwrap()
        .unwrap();
        assert!(got.iter().zip(&want).all(|(a, b)| (a - b).abs() <= 1e-4), "{got:?} vs {want:?}");
        // Probabilities best first, summing to 1.
        let (n, sum, sorted) = Spi::get_three::<i64, f64, bool>(
            "SELECT count(*), sum(score)::float8, bool_and(score <= prev) FROM (
                 SELECT score, coalesce(lag(score) OVER (), 'Infinity') AS prev
                 FROM classify_labels('sentiment', 'a very nice day')) s",
        )
        .unwrap();
        assert_eq!(n, Some(3));
        assert!((sum.unwrap() - 1.0).abs() < 1e-5);
        assert_eq!(sorted, Some(true));
        let top = Spi::get_one::<String>("SELECT label FROM classify_labels('sentiment', 'x', 'y') LIMIT 1")
            .unwrap();
        assert!(top.is_some());
    }

    #[pg_test]
    fn rerank_in_sql_orders_as_cross_encoder() {
        use_fixtures();
        register_with("ce", "classify/bert_cross_encoder", "{}");
        let g = golden_classify();
        let r = &g["fixtures"]["bert_cross_encoder"]["rerank"];
        let docs: Vec<String> = serde_json::from_value(r["documents"].clone()).unwrap();
        let scores: Vec<f32> = serde_json::from_value(r["scores"].clone()).unwrap();
        let mut want: Vec<(i32, f32)> = scores.iter().enumerate().map(|(i, s)| (i as i32 + 1, *s)).collect();
        want.sort_by(|a, b| b.1.total_cmp(&a.1));
        let got: Vec<(i32, f32)> = Spi::connect(|c| {
            c.select(
                "SELECT idx, score FROM rerank('ce', $1, $2)",
                None,
                &[r["query"].as_str().unwrap().into(), docs.clone().into()],
            )
            .unwrap()
            .map(|row| (row.get::<i32>(1).unwrap().unwrap(), row.get::<f32>(2).unwrap().unwrap()))
            .collect()
        });
        assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), want.iter().map(|w| w.0).collect::<Vec<_>>());
        for (g, w) in got.iter().zip(&want) {
            assert!((g.1 - w.1).abs() <= 1e-5, "{g:?} vs {w:?}");
        }
        let empty = Spi::get_one::<i64>("SELECT count(*) FROM rerank('ce', 'q', '{}'::text[])").unwrap();
        assert_eq!(empty, Some(0));
    }

    fn golden_rerank() -> serde_json::Value {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/rerank/golden.json");
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    }

    /// A causal-LM reranker (CrossEncoder over Qwen3ForCausalLM: Transformer(text-generation)
    /// then LogitScore): rerank gives predict's scores (Sigmoid), best first; classify(model,
    /// query, document) the raw LogitScore, an empty document included.
    #[pg_test]
    fn rerank_and_classify_on_a_causal_lm_reranker() {
        use_fixtures();
        let info = register_with("llm_rerank", "rerank/qwen3_reranker", "{}");
        assert_eq!(info["task"], "classify");
        assert_eq!(info["dim"], 1);
        assert_eq!(info["classifier"]["type"], "logit_score");
        let g = golden_rerank();
        let fx = &g["fixtures"]["qwen3_reranker"];
        let r = &fx["rerank"];
        let docs: Vec<String> = serde_json::from_value(r["documents"].clone()).unwrap();
        let scores: Vec<f32> = serde_json::from_value(r["scores"].clone()).unwrap();
        let mut want: Vec<(i32, f32)> = scores.iter().enumerate().map(|(i, s)| (i as i32 + 1, *s)).collect();
        want.sort_by(|a, b| b.1.total_cmp(&a.1));
        let got: Vec<(i32, f32)> = Spi::connect(|c| {
            c.select(
                "SELECT idx, score FROM rerank('llm_rerank', $1, $2)",
                None,
                &[r["query"].as_str().unwrap().into(), docs.clone().into()],
            )
            .unwrap()
            .map(|row| (row.get::<i32>(1).unwrap().unwrap(), row.get::<f32>(2).unwrap().unwrap()))
            .collect()
        });
        assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), want.iter().map(|w| w.0).collect::<Vec<_>>());
        for (g, w) in got.iter().zip(&want) {
            assert!((g.1 - w.1).abs() <= 1e-4 * w.1.abs().max(1.0), "{g:?} vs {w:?}");
        }
        for case in fx["cases"].as_array().unwrap() {
            let raw = case["raw"].as_f64().unwrap() as f32;
            let got = Spi::get_one_with_args::<Vec<f32>>(
                "SELECT classify('llm_rerank', $1, $2)",
                &[case["query"].as_str().unwrap().into(), case["document"].as_str().unwrap().into()],
            )
            .unwrap()
            .unwrap();
            assert_eq!(got.len(), 1);
            assert!((got[0] - raw).abs() <= 1e-4 * raw.abs().max(1.0), "{got:?} vs {raw}");
        }
        // Only a true token, Identity: rerank reports the raw logit.
        register_with("llm_true", "rerank/qwen3_reranker_true", "{}");
        let top = Spi::get_one_with_args::<f32>(
            "SELECT max(score) FROM rerank('llm_true', $1, $2)",
            &[r["query"].as_str().unwrap().into(), docs.into()],
        )
        .unwrap()
        .unwrap();
        let want_top = g["fixtures"]["qwen3_reranker_true"]["rerank"]["scores"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .fold(f32::NEG_INFINITY, f32::max);
        assert!((top - want_top).abs() <= 1e-4 * want_top.abs().max(1.0), "{top} vs {want_top}");
        let single = crate::sql_tests::sql_error("SELECT classify('llm_rerank', 'only a query')");
        assert!(single.starts_with("22023: "), "{single}");
        let labels = crate::sql_tests::sql_error("SELECT * FROM classify_labels('llm_rerank', 'q', 'd')");
        assert!(labels.starts_with("42809: ") && labels.contains("call rerank()"), "{labels}");
    }

    #[pg_test(error = "documents must not contain NULL (element 2)")]
    fn rerank_with_a_null_document() {
        use_fixtures();
        register_with("ce", "classify/bert_cross_encoder", "{}");
        Spi::run("SELECT * FROM rerank('ce', 'q', ARRAY['a', NULL, 'c'])").unwrap();
    }

    #[pg_test(error = "model is for classify, not embed")]
    fn embed_on_a_classifier() {
        use_fixtures();
        register_with("sentiment", "classify/bert_single_label", "{}");
        embed_sql("sentiment", "x");
    }

    #[pg_test(error = "model is for embed, not classify")]
    fn classify_on_an_embedding_model() {
        register("minilm");
        Spi::run("SELECT classify('minilm', 'x')").unwrap();
    }

    /// jina-embeddings-v3's LoRA task adapters (tests/fixtures/lora): the third argument of
    /// embed names the task under jinaai's name or its adapter folder's, the two-argument
    /// form computes the `prompt` option's task, and model_info lists the tasks; the vectors
    /// are sentence-transformers + peft's (golden.json) within 1e-4.
    #[pg_test]
    fn embed_with_a_lora_task() {
        crate::sql_tests::use_fixtures();
        crate::sql_tests::register_with("t_jina", "lora/jina_v3_peft", "{}");
        crate::sql_tests::register_with("t_jina_q", "lora/jina_v3_original", "{\"prompt\": \"retrieval.query\"}");
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/lora/golden.json");
        let golden: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        let cases = golden["fixtures"]["jina_v3_peft"]["cases"].as_array().unwrap();
        let case = |task: Option<&str>| cases.iter().find(|c| c["task"].as_str() == task).unwrap();
        let close = |got: &[f32], want: &serde_json::Value, what: &str| {
            let want: Vec<f32> = want.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
            assert_eq!(got.len(), want.len(), "{what}");
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() <= 1e-4 * w.abs().max(1.0), "{what}: {g} vs {w}");
            }
        };
        for task in ["retrieval.query", "retrieval_query", "text-matching", "text_matching"] {
            let jina = if task.contains('q') { "retrieval.query" } else { "text-matching" };
            let c = case(Some(jina));
            close(&embed_prompt_sql("t_jina", c["text"].as_str().unwrap(), task), &c["embedding"], task);
        }
        let base = case(None);
        close(&embed_sql("t_jina", base["text"].as_str().unwrap()), &base["embedding"], "no task");
        let query = case(Some("retrieval.query"));
        close(&embed_sql("t_jina_q", query["text"].as_str().unwrap()), &query["embedding"], "the prompt option's task");
        let tasks = Spi::get_one::<String>(
            "SELECT string_agg(a->>'name', ',' ORDER BY a->>'name') FROM jsonb_array_elements(embed.model_info('t_jina')->'adapters') a",
        )
        .unwrap();
        assert_eq!(tasks.as_deref(), Some("classification,retrieval_passage,retrieval_query,separation,text_matching"));
    }
}
