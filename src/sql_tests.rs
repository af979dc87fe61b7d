//! `#[pg_test]`s for the SQL surface: run inside a real backend by `cargo pgrx test`.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    const MODEL_SOURCE: &str = "all-MiniLM-L6-v2";

    fn register(name: &str) {
        Spi::run(&format!("SELECT embed.register_model('{name}', '{MODEL_SOURCE}')")).unwrap();
    }

    /// Serves the tiny fixtures of tests/fixtures for the rest of the test's transaction.
    fn use_fixtures() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
        Spi::run(&format!("SET LOCAL pg_embed.model_dir = '{dir}'")).unwrap();
    }

    fn register_with(name: &str, source: &str, options: &str) -> serde_json::Value {
        Spi::get_one_with_args::<pgrx::JsonB>(
            "SELECT embed.register_model($1, $2, $3::jsonb)",
            &[name.into(), source.into(), options.into()],
        )
        .unwrap()
        .unwrap()
        .0
    }

    fn embed_prompt_sql(model: &str, text: &str, prompt: &str) -> Vec<f32> {
        Spi::get_one_with_args::<Vec<f32>>(
            "SELECT embed($1, $2, $3)",
            &[model.into(), text.into(), prompt.into()],
        )
        .unwrap()
        .unwrap()
    }

    fn embed_sql(model: &str, text: &str) -> Vec<f32> {
        Spi::get_one_with_args::<Vec<f32>>("SELECT embed($1, $2)", &[model.into(), text.into()])
            .unwrap()
            .unwrap()
    }

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
        error = "invalid options: unknown field `polling`, expected one of `pooling`, `normalize`, `max_length`, `dimensions`, `prompts`, `prompt`, `include_prompt`, `task`, `heads`, `long_input`"
    )]
    fn register_unknown_option() {
        Spi::run("SELECT embed.register_model('x', 'all-MiniLM-L6-v2', '{\"polling\": \"cls\"}')").unwrap();
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

    // ---- loaded_models, unload, preload -------------------------------------------------

    fn loaded(name: &str, column: &str) -> Option<i64> {
        Spi::get_one_with_args::<i64>(
            &format!("SELECT (SELECT {column}::bigint FROM embed.loaded_models() WHERE name = $1)"),
            &[name.into()],
        )
        .unwrap()
    }

    /// The SQLSTATE and message of the error `query` raises ("" if none), caught in a
    /// subtransaction so the test goes on.
    fn sql_error(query: &str) -> String {
        let defined = Spi::get_one::<bool>("SELECT to_regprocedure('pg_temp.sql_error(text)') IS NOT NULL");
        if defined.unwrap() != Some(true) {
            Spi::run(
                "CREATE FUNCTION pg_temp.sql_error(q text) RETURNS text LANGUAGE plpgsql AS $$
                 BEGIN EXECUTE q; RETURN ''; EXCEPTION WHEN OTHERS THEN RETURN SQLSTATE || ': ' || SQLERRM; END $$",
            )
            .unwrap();
        }
        Spi::get_one_with_args::<String>("SELECT pg_temp.sql_error($1)", &[query.into()]).unwrap().unwrap()
    }

    /// Calls, inputs, tokens and forward passes as the pipeline counts them; unload drops the
    /// model from this backend's cache only.
    #[pg_test]
    fn loaded_models_counts_calls_and_forward_passes() {
        register("minilm");
        let before = (loaded("minilm", "calls").unwrap(), loaded("minilm", "forward_passes").unwrap());
        embed_sql("minilm", "one");
        Spi::run("SELECT count(*) FROM embed('minilm', ARRAY['a', 'b', NULL, 'c'])").unwrap();
        assert_eq!(loaded("minilm", "calls").unwrap() - before.0, 2);
        assert_eq!(loaded("minilm", "forward_passes").unwrap() - before.1, 2, "one pass per call");
        assert!(loaded("minilm", "tokens").unwrap() >= 3 + 3 * 3);
        assert!(loaded("minilm", "parameters").unwrap() > 22_000_000);
        assert!(loaded("minilm", "bytes_resident").unwrap() > 0);
        let long = "word ".repeat(600);
        let truncated = loaded("minilm", "truncated_inputs").unwrap();
        embed_sql("minilm", &long);
        assert_eq!(loaded("minilm", "truncated_inputs").unwrap() - truncated, 1);

        assert_eq!(Spi::get_one::<i32>("SELECT embed.unload('minilm')").unwrap(), Some(1));
        assert_eq!(loaded("minilm", "calls"), None, "unloaded");
        assert_eq!(Spi::get_one::<i32>("SELECT embed.unload('minilm')").unwrap(), Some(0));
        assert_eq!(embed_sql("minilm", "one").len(), 384, "loaded again on use");
        assert_eq!(loaded("minilm", "calls"), Some(1), "fresh counters");
        assert_eq!(Spi::get_one::<i32>("SELECT embed.unload()").unwrap(), Some(1));
    }

    #[pg_test]
    fn preload_loads_the_listed_models() {
        register("pre");
        Spi::run("SELECT embed.unload()").unwrap();
        Spi::run("SET LOCAL pg_embed.preload = ' pre , '").unwrap();
        assert_eq!(Spi::get_one::<i32>("SELECT embed.preload()").unwrap(), Some(1));
        assert_eq!(loaded("pre", "calls"), Some(0), "loaded, not yet used");
    }

    #[pg_test(error = "model \"absent\" is not registered")]
    fn preload_of_an_unregistered_model() {
        Spi::run("SET LOCAL pg_embed.preload = 'absent'").unwrap();
        Spi::run("SELECT embed.preload()").unwrap();
    }

    // ---- long_input and chunk ----------------------------------------------------------------

    #[pg_test(error = "input has 602 tokens, more than the model's max_length of 256")]
    fn long_input_error_refuses() {
        Spi::run("SELECT embed.register_model('strict', 'all-MiniLM-L6-v2', '{\"long_input\": \"error\"}')").unwrap();
        assert_eq!(embed_sql("strict", &"word ".repeat(254)).len(), 384, "254 + 2 tokens fit");
        embed_sql("strict", &"word ".repeat(600));
    }

    /// mean_of_chunks: the mean of the chunks' embeddings (each as embed() gives it for the
    /// chunk's text), normalised again; inputs that fit are embedded as they are.
    #[pg_test]
    fn long_input_mean_of_chunks() {
        Spi::run("SELECT embed.register_model('chunky', 'all-MiniLM-L6-v2', '{\"long_input\": \"mean_of_chunks\"}')")
            .unwrap();
        register("minilm");
        let text = (0..120).map(|i| format!("Sentence number {i} talks about databases.")).collect::<Vec<_>>().join(" ");
        let chunks: Vec<String> = Spi::connect(|c| {
            c.select("SELECT chunk FROM embed.chunk('minilm', $1, 254) ORDER BY idx", None, &[text.as_str().into()])
                .unwrap()
                .map(|r| r.get::<String>(1).unwrap().unwrap())
                .collect()
        });
        assert!(chunks.len() > 2, "{} chunks", chunks.len());
        let mut mean = vec![0f32; 384];
        for c in &chunks {
            for (m, x) in mean.iter_mut().zip(embed_sql("minilm", c)) {
                *m += x / chunks.len() as f32;
            }
        }
        let norm = mean.iter().map(|x| x * x).sum::<f32>().sqrt();
        let got = embed_sql("chunky", &text);
        let d = got.iter().zip(&mean).map(|(a, b)| (a - b / norm).abs()).fold(0f32, f32::max);
        assert!(d < 1e-5, "max difference {d}");
        assert_eq!(embed_sql("chunky", "short text"), embed_sql("minilm", "short text"));
        assert_eq!(loaded("chunky", "chunked_inputs"), Some(1));
        assert_eq!(loaded("chunky", "truncated_inputs"), Some(0));
    }

    /// Chunks against the tokenizer: each has at most max_tokens tokens, is the substring
    /// its character offsets name, chunks cover the text in order, and overlaps repeat text.
    #[pg_test]
    fn chunk_boundaries_and_overlap() {
        register("minilm");
        // The model's own tokenizer, without the fixed padding and truncation its file carries.
        let mut tokenizer = tokenizers::Tokenizer::from_file(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/models/all-MiniLM-L6-v2/tokenizer.json"
        ))
        .unwrap();
        tokenizer.with_padding(None);
        tokenizer.with_truncation(None).unwrap();
        // Tokens shared by consecutive chunks (the text between the next start and this end).
        fn overlap_tokens(rows: &[(i32, String, i32, i32)], tokenizer: &tokenizers::Tokenizer) -> usize {
            rows.windows(2)
                .map(|p| {
                    let shared: String = p[0].1.chars().skip((p[1].2 - p[0].2).max(0) as usize).collect();
                    if p[1].2 >= p[0].3 { 0 } else { tokenizer.encode(shared.as_str(), false).unwrap().get_ids().len() }
                })
                .sum()
        }
        let text = "PostgreSQL stores rows in pages. Each page holds many tuples! Vacuum reclaims \
                    dead tuples; indexes speed up lookups. Ünïcödé text, emoji 🎉 and 東京 work too.";
        for (max_tokens, overlap) in [(8, 0), (8, 3), (5, 2), (40, 0)] {
            let rows: Vec<(i32, String, i32, i32)> = Spi::connect(|c| {
                c.select(
                    "SELECT idx, chunk, start_char, end_char, substr($1, start_char + 1, end_char - start_char) = chunk
                       FROM embed.chunk('minilm', $1, $2, $3) ORDER BY idx",
                    None,
                    &[text.into(), max_tokens.into(), overlap.into()],
                )
                .unwrap()
                .map(|r| {
                    assert_eq!(r.get::<bool>(5).unwrap(), Some(true), "offsets name the chunk");
                    (r.get(1).unwrap().unwrap(), r.get(2).unwrap().unwrap(), r.get(3).unwrap().unwrap(), r.get(4).unwrap().unwrap())
                })
                .collect()
            });
            assert!(!rows.is_empty());
            assert_eq!(rows[0].2, 0, "starts at the text's start");
            assert_eq!(rows.last().unwrap().3 as usize, text.chars().count(), "ends at the text's end");
            let mut covered = 0;
            for (i, (idx, chunk, start, end)) in rows.iter().enumerate() {
                assert_eq!(*idx as usize, i + 1);
                assert!(start < end, "{chunk:?}");
                let tokens = tokenizer.encode(chunk.as_str(), false).unwrap().get_ids().len();
                assert!(tokens <= max_tokens as usize, "{chunk:?}: {tokens} tokens > {max_tokens}");
                covered += tokens;
            }
            let total = tokenizer.encode(text, false).unwrap().get_ids().len();
            assert_eq!(covered - overlap_tokens(&rows, &tokenizer), total, "max {max_tokens}, overlap {overlap}");
            for pair in rows.windows(2) {
                let (prev_end, next_start) = (pair[0].3, pair[1].2);
                if overlap == 0 {
                    assert!(next_start >= prev_end, "no overlap: {pair:?}");
                } else {
                    assert!(next_start < prev_end, "overlap {overlap}: {pair:?}");
                }
            }
        }
    }

    #[pg_test(error = "invalid overlap: 4 must be less than max_tokens 4")]
    fn chunk_overlap_must_be_less_than_max_tokens() {
        register("minilm");
        Spi::run("SELECT * FROM embed.chunk('minilm', 'some text', 4, 4)").unwrap();
    }

    #[pg_test(error = "invalid max_tokens: it must be at least 1")]
    fn chunk_needs_a_positive_max_tokens() {
        register("minilm");
        Spi::run("SELECT * FROM embed.chunk('minilm', 'some text', 0)").unwrap();
    }

    // ---- privileges -------------------------------------------------------------------------

    /// Members of embed_admin register and drop; a plain role may not, but may embed.
    #[pg_test]
    fn embed_admin_members_register_and_drop() {
        Spi::run("CREATE ROLE embed_test_admin IN ROLE embed_admin").unwrap();
        Spi::run("SET ROLE embed_test_admin").unwrap();
        register("by_admin");
        assert_eq!(
            Spi::get_one::<String>("SELECT registered_by::text FROM embed.models WHERE name = 'by_admin'").unwrap(),
            Some("embed_test_admin".into())
        );
        assert_eq!(embed_sql("by_admin", "hi").len(), 384);
        Spi::run("SELECT embed.drop_model('by_admin')").unwrap();
    }

    #[pg_test(error = "permission denied to set parameter \"pg_embed.allow_download\"")]
    fn allow_download_is_superuser_only() {
        Spi::run("CREATE ROLE embed_test_dl").unwrap();
        Spi::run("SET ROLE embed_test_dl").unwrap();
        Spi::run("SET pg_embed.allow_download = on").unwrap();
    }

    #[pg_test(error = "permission denied to set parameter \"pg_embed.auto_register\"")]
    fn auto_register_is_superuser_only() {
        Spi::run("CREATE ROLE embed_test_ar").unwrap();
        Spi::run("SET ROLE embed_test_ar").unwrap();
        Spi::run("SET pg_embed.auto_register = on").unwrap();
    }

    // ---- hub cache ----------------------------------------------------------------------------

    const COMMIT_A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const COMMIT_B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    /// A hub cache as huggingface_hub lays it out, in a fresh temporary directory, holding
    /// `org/tiny` at two commits: A (tag v1) is the pool_mean fixture, B (main) is pool_cls.
    /// Blobs are named by content hash, snapshots link into them. Set as pg_embed.hf_cache.
    fn fake_hub(name: &str) -> std::path::PathBuf {
        use std::fs;
        let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let cache = std::env::temp_dir().join(format!("pg_embed_hub_sql_{}_{name}", std::process::id()));
        let _ = fs::remove_dir_all(&cache);
        let repo = cache.join("models--org--tiny");
        for (commit, fixture) in [(COMMIT_A, "pool_mean"), (COMMIT_B, "pool_cls")] {
            let src = fixtures.join(fixture);
            let mut pending = vec![std::path::PathBuf::new()];
            while let Some(rel) = pending.pop() {
                for entry in fs::read_dir(src.join(&rel)).unwrap() {
                    let entry = entry.unwrap();
                    let rel_file = rel.join(entry.file_name());
                    if entry.file_type().unwrap().is_dir() {
                        pending.push(rel_file);
                        continue;
                    }
                    let bytes = fs::read(entry.path()).unwrap();
                    let blob = format!("{:x}", sha2::Sha256::digest(&bytes));
                    fs::create_dir_all(repo.join("blobs")).unwrap();
                    fs::write(repo.join("blobs").join(&blob), &bytes).unwrap();
                    let link = repo.join("snapshots").join(commit).join(&rel_file);
                    fs::create_dir_all(link.parent().unwrap()).unwrap();
                    let up = "../".repeat(rel_file.components().count() + 1);
                    std::os::unix::fs::symlink(format!("{up}blobs/{blob}"), &link).unwrap();
                }
            }
        }
        fs::create_dir_all(repo.join("refs")).unwrap();
        fs::write(repo.join("refs/main"), COMMIT_B).unwrap();
        fs::write(repo.join("refs/v1"), COMMIT_A).unwrap();
        Spi::run(&format!("SET LOCAL pg_embed.hf_cache = '{}'", cache.display())).unwrap();
        cache
    }

    use sha2::Digest;

    /// hf: sources resolve through the cache, pin the commit and the files' sha256, and
    /// give the same vectors as the same files registered from a directory.
    #[pg_test]
    fn hub_sources_resolve_and_pin() {
        let cache = fake_hub("pin");
        let info = register_with("hub_main", "hf:org/tiny", "{}");
        assert_eq!(info["resolved_revision"], COMMIT_B);
        assert_eq!(info["pooling"], serde_json::json!(["cls"]));
        let files = info["file_sha256"].as_object().unwrap();
        assert!(files.contains_key("model.safetensors") && files.contains_key("1_Pooling/config.json"), "{files:?}");
        let tagged = register_with("hub_v1", "hf:org/tiny@v1", "{}");
        assert_eq!(tagged["resolved_revision"], COMMIT_A);
        let by_commit = register_with("hub_a", &format!("hf:org/tiny@{COMMIT_A}"), "{}");
        assert_eq!(by_commit["resolved_revision"], COMMIT_A);

        use_fixtures();
        register_with("dir_mean", "pool_mean", "{}");
        register_with("dir_cls", "pool_cls", "{}");
        let text = "hello hub cache";
        assert_eq!(embed_sql("hub_v1", text), embed_sql("dir_mean", text));
        assert_eq!(embed_sql("hub_main", text), embed_sql("dir_cls", text));

        // Moving refs/main does not move a registration: it stays pinned to its commit.
        std::fs::write(cache.join("models--org--tiny/refs/main"), COMMIT_A).unwrap();
        Spi::run("SELECT embed.unload()").unwrap();
        assert_eq!(embed_sql("hub_main", text), embed_sql("dir_cls", text));
        let _ = std::fs::remove_dir_all(&cache);
    }

    /// A weight file changed after registration is refused at load; a missing repository,
    /// and repository ids with path characters, are clear errors.
    #[pg_test]
    fn hub_tampered_missing_and_malformed_sources() {
        let cache = fake_hub("tamper");
        register_with("hub_t", "hf:org/tiny", "{}");
        let weights = cache.join(format!("models--org--tiny/snapshots/{COMMIT_B}/model.safetensors"));
        let real = std::fs::canonicalize(&weights).unwrap();
        let mut bytes = std::fs::read(&real).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&real, bytes).unwrap();
        Spi::run("SELECT embed.unload()").unwrap();
        let err = sql_error("SELECT embed('hub_t', 'x')");
        let file = weights.display();
        assert!(
            err.starts_with(&format!("XX001: model file \"{file}\" does not match its registration: sha256 ")),
            "{err}"
        );
        assert_eq!(
            sql_error("SELECT embed.register_model('x', 'hf:org/absent')"),
            format!("58P01: \"org/absent\" at revision \"main\" is not in the Hugging Face cache \"{}\"", cache.display())
        );
        for bad in ["hf:../etc", "hf:org/../../x", "hf:/etc/passwd", "hf:org/x@../../refs", "hf:org/x/y"] {
            let err = sql_error(&format!("SELECT embed.register_model('x', '{bad}')"));
            assert!(err.starts_with(&format!("22023: invalid model source \"{bad}\": ")), "{err}");
        }
        let _ = std::fs::remove_dir_all(&cache);
    }

    /// With pg_embed.auto_register, embed('org/name', ...) registers a cached model, even for
    /// a role that may not register models; without it, the name is not registered.
    #[pg_test]
    fn auto_register_from_the_cache() {
        fake_hub("auto");
        Spi::run("CREATE ROLE embed_test_auto").unwrap();
        Spi::run("SET ROLE embed_test_auto").unwrap();
        let missing = Spi::get_one::<bool>(
            "SELECT NOT EXISTS (SELECT FROM embed.models WHERE name = 'org/tiny')",
        );
        assert_eq!(missing.unwrap(), Some(true));
        Spi::run("RESET ROLE").unwrap();
        Spi::run("SET LOCAL pg_embed.auto_register = on").unwrap();
        Spi::run("SET ROLE embed_test_auto").unwrap();
        assert_eq!(embed_sql("org/tiny", "auto").len(), 32);
        let row = Spi::get_two::<String, String>(
            "SELECT source, registered_by::text FROM embed.models WHERE name = 'org/tiny'",
        )
        .unwrap();
        assert_eq!(row, (Some("hf:org/tiny".into()), Some("embed_test_auto".into())));
        assert_eq!(
            Spi::get_one::<String>("SELECT current_user::text").unwrap(),
            Some("embed_test_auto".into()),
            "the role is restored after the catalog write"
        );
    }

    #[pg_test(error = "model \"org/nothere\" is not registered")]
    fn auto_register_of_a_model_not_in_the_cache() {
        fake_hub("auto_absent");
        Spi::run("SET LOCAL pg_embed.auto_register = on").unwrap();
        embed_sql("org/nothere", "x");
    }

    // ---- failures stay in their statement ------------------------------------------------------

    /// A panic on the backend thread, on a compute thread, or inside a team step is an ERROR
    /// of that statement (XX000); the session, the compute pool and the model cache go on.
    #[pg_test]
    fn panics_become_errors_and_the_session_goes_on() {
        register("minilm");
        let before = embed_sql("minilm", "still here");
        for (place, message) in [
            ("backend", "test panic on the backend thread"),
            ("compute", "test panic on a compute thread"),
            ("team", "test panic in a team step"),
        ] {
            let err = sql_error(&format!("SELECT _panic_for_test('{place}')"));
            assert!(err.starts_with("XX000: ") && err.contains(message), "{place}: {err}");
            assert_eq!(embed_sql("minilm", "still here"), before, "after a panic on {place}");
        }
    }

    /// pg_embed.max_model_size: a model whose weights (as f32, from the safetensors headers)
    /// exceed it is refused before they are read; superuser only.
    #[pg_test]
    fn max_model_size_refuses_large_models_before_loading() {
        Spi::run("SET LOCAL pg_embed.max_model_size = '80MB'").unwrap();
        let err = sql_error("SELECT embed.register_model('big', 'all-MiniLM-L6-v2')");
        assert_eq!(
            err,
            "54000: model \"all-MiniLM-L6-v2\" needs 87 MB for its weights, more than pg_embed.max_model_size (80 MB)"
        );
        Spi::run("SET LOCAL pg_embed.max_model_size = '1GB'").unwrap();
        register("big");
        Spi::run("SET LOCAL pg_embed.max_model_size = 0").unwrap();
        assert_eq!(embed_sql("big", "fits").len(), 384);
        Spi::run("CREATE ROLE embed_test_size").unwrap();
        Spi::run("SET ROLE embed_test_size").unwrap();
        let err = sql_error("SET pg_embed.max_model_size = 0");
        assert_eq!(err, "42501: permission denied to set parameter \"pg_embed.max_model_size\"");
    }

    /// 100,000 inputs with NULLs among them, in one call: a row per input, NULL rows where
    /// the input is NULL, each equal to the single call (a tiny fixture model keeps it fast).
    #[pg_test]
    fn an_array_of_100000_inputs_with_nulls() {
        use_fixtures();
        register_with("tiny", "pool_mean", "{}");
        Spi::run(
            "CREATE TEMP TABLE big AS
             SELECT i, e FROM embed('tiny', (SELECT array_agg(CASE WHEN i % 1000 = 0 THEN NULL ELSE 'text ' || (i % 7) END ORDER BY i)
                                               FROM generate_series(1, 100000) AS i)) WITH ORDINALITY AS t(e, i)",
        )
        .unwrap();
        let (rows, nulls) = Spi::get_two::<i64, i64>("SELECT count(*), count(*) FILTER (WHERE e IS NULL) FROM big").unwrap();
        assert_eq!((rows, nulls), (Some(100_000), Some(100)));
        let misplaced_nulls = Spi::get_one::<i64>("SELECT count(*) FROM big WHERE (e IS NULL) <> (i % 1000 = 0)").unwrap();
        assert_eq!(misplaced_nulls, Some(0), "NULL rows exactly where the inputs are NULL");
        // Every row (sampled every 997th) equals the single call for its text within 1e-5.
        let worst = Spi::get_one::<f32>(
            "SELECT max(abs(a - b)) FROM big, unnest(e, embed('tiny', 'text ' || (i % 7))) AS d(a, b)
              WHERE e IS NOT NULL AND i % 997 = 0",
        )
        .unwrap()
        .unwrap();
        assert!(worst <= 1e-5, "largest difference {worst}");
    }

    /// Broken model folders, as a user registering them meets them: each is an ERROR with
    /// its own SQLSTATE naming the file, nothing is registered, and the session goes on.
    /// The folders are copies of the pool_mean fixture with one thing broken each, in a
    /// fresh model_dir beside a folder it must not reach.
    #[pg_test]
    fn broken_model_folders_are_errors_with_their_sqlstate() {
        use std::fs;
        let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pool_mean");
        let base = std::env::temp_dir().join(format!("pg_embed_broken_sql_{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        let (models, secret) = (base.join("models"), base.join("secret"));
        fs::create_dir_all(&secret).unwrap();
        fs::write(secret.join("tokenizer.json"), "{\"not\": \"a tokenizer\"}").unwrap();
        let weights = fs::read(fixture.join("model.safetensors")).unwrap();
        let copy = |name: &str, edit: &dyn Fn(&std::path::Path)| {
            let dir = models.join(name);
            fs::create_dir_all(dir.join("1_Pooling")).unwrap();
            for f in ["config.json", "modules.json", "sentence_bert_config.json", "tokenizer.json", "1_Pooling/config.json"] {
                fs::copy(fixture.join(f), dir.join(f)).unwrap();
            }
            fs::write(dir.join("model.safetensors"), &weights).unwrap();
            edit(&dir);
        };
        let lying_header = {
            let header = br#"{"w":{"dtype":"F32","shape":[1000000],"data_offsets":[0,4000000]}}"#;
            let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
            bytes.extend_from_slice(header);
            bytes.extend_from_slice(&[0u8; 16]);
            bytes
        };
        let config_edit = |key: &'static str, value: serde_json::Value| {
            move |d: &std::path::Path| {
                let mut cfg: serde_json::Value = serde_json::from_slice(&fs::read(d.join("config.json")).unwrap()).unwrap();
                cfg[key] = value.clone();
                fs::write(d.join("config.json"), cfg.to_string()).unwrap();
            }
        };
        copy("intact", &|_| {});
        copy("truncated_weights", &|d| fs::write(d.join("model.safetensors"), &weights[..weights.len() / 2]).unwrap());
        copy("garbage_weights", &|d| fs::write(d.join("model.safetensors"), vec![0xA5u8; 4096]).unwrap());
        copy("lying_header", &|d| fs::write(d.join("model.safetensors"), &lying_header).unwrap());
        copy("huge_header_length", &|d| fs::write(d.join("model.safetensors"), u64::MAX.to_le_bytes()).unwrap());
        copy("shape_mismatch", &config_edit("intermediate_size", 48.into()));
        copy("no_tokenizer", &|d| fs::remove_file(d.join("tokenizer.json")).unwrap());
        copy("bad_tokenizer", &|d| fs::write(d.join("tokenizer.json"), "{\"model\": 7}").unwrap());
        copy("bad_config", &|d| fs::write(d.join("config.json"), "{\"model_type\": \"bert\",").unwrap());
        copy("bad_pooling_config", &|d| fs::write(d.join("1_Pooling/config.json"), "[]").unwrap());
        copy("gpt2", &config_edit("model_type", "gpt2".into()));
        copy("zero_heads", &config_edit("num_attention_heads", 0.into()));
        copy("no_weights", &|d| fs::remove_file(d.join("model.safetensors")).unwrap());
        copy("linked_tokenizer", &|d| {
            fs::remove_file(d.join("tokenizer.json")).unwrap();
            std::os::unix::fs::symlink(secret.join("tokenizer.json"), d.join("tokenizer.json")).unwrap();
        });
        std::os::unix::fs::symlink(&secret, models.join("linked_folder")).unwrap();
        Spi::run(&format!("SET LOCAL pg_embed.model_dir = '{}'", models.display())).unwrap();

        register_with("intact", "intact", "{}");
        let before = embed_sql("intact", "still here");
        let dir = models.canonicalize().unwrap();
        for (source, expected) in [
            ("truncated_weights", format!("XX001: invalid model file \"{}/truncated_weights/model.safetensors\"", dir.display())),
            ("garbage_weights", format!("XX001: invalid model file \"{}/garbage_weights/model.safetensors\"", dir.display())),
            ("lying_header", format!("XX001: invalid model file \"{}/lying_header/model.safetensors\"", dir.display())),
            ("huge_header_length", format!("XX001: invalid model file \"{}/huge_header_length/model.safetensors\": safetensors header length", dir.display())),
            ("shape_mismatch", format!("XX001: invalid model file \"{}/shape_mismatch/model.safetensors\"", dir.display())),
            ("no_tokenizer", format!("58P01: model file \"{}/no_tokenizer/tokenizer.json\" is missing", dir.display())),
            ("bad_tokenizer", format!("XX001: invalid model file \"{}/bad_tokenizer/tokenizer.json\"", dir.display())),
            ("bad_config", format!("XX001: invalid model file \"{}/bad_config/config.json\"", dir.display())),
            ("bad_pooling_config", format!("XX001: invalid model file \"{}/bad_pooling_config/1_Pooling/config.json\"", dir.display())),
            ("gpt2", format!("0A000: unsupported model_type \"gpt2\" in \"{}/gpt2/config.json\"", dir.display())),
            ("zero_heads", format!("XX001: invalid model file \"{}/zero_heads/config.json\": hidden_size 32 is not a multiple of num_attention_heads 0", dir.display())),
            ("no_weights", format!("58P01: model file \"{}/no_weights/model.safetensors\" is missing", dir.display())),
            ("linked_tokenizer", "42501: model file \"linked_tokenizer/tokenizer.json\" is outside pg_embed.model_dir".into()),
            ("linked_folder", "42501: model source \"linked_folder\" is outside pg_embed.model_dir".into()),
        ] {
            let err = sql_error(&format!("SELECT embed.register_model('broken', '{source}')"));
            assert!(err.starts_with(&expected), "{source}: {err}");
        }
        assert_eq!(Spi::get_one::<i64>("SELECT count(*) FROM embed.models WHERE name = 'broken'").unwrap(), Some(0));
        assert_eq!(embed_sql("intact", "still here"), before, "the session goes on");
        let _ = fs::remove_dir_all(&base);
    }

    /// A 10 MB input is tokenized, truncated and embedded like any other.
    #[pg_test]
    fn a_10_mb_input() {
        use_fixtures();
        register_with("tiny", "pool_mean", "{}");
        let long = Spi::get_one::<Vec<f32>>("SELECT embed('tiny', repeat('word é🎉 ', 1000000))").unwrap().unwrap();
        let short = Spi::get_one::<Vec<f32>>("SELECT embed('tiny', repeat('word é🎉 ', 1000))").unwrap().unwrap();
        assert_eq!(long, short, "only the first max_length tokens count");
    }
}
