//! `#[pg_test]`s of the backend cache, long inputs and chunks, privileges, the hub cache and
//! failures that must stay in their statement.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use super::super::*;

    // ---- loaded_models, unload, preload -------------------------------------------------

    fn loaded(name: &str, column: &str) -> Option<i64> {
        Spi::get_one_with_args::<i64>(
            &format!("SELECT (SELECT {column}::bigint FROM embed.loaded_models() WHERE name = $1)"),
            &[name.into()],
        )
        .unwrap()
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
        Spi::run("SELECT embed.register_model('strict', 'all-MiniLM-L6-v2', '{\"long_input\": \"error\"}')")
            .unwrap();
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
        let text = (0..120)
            .map(|i| format!("Sentence number {i} talks about databases."))
            .collect::<Vec<_>>()
            .join(" ");
        let chunks: Vec<String> = Spi::connect(|c| {
            c.select(
                "SELECT chunk FROM embed.chunk('minilm', $1, 254) ORDER BY idx",
                None,
                &[text.as_str().into()],
            )
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
                    if p[1].2 >= p[0].3 {
                        0
                    } else {
                        tokenizer.encode(shared.as_str(), false).unwrap().get_ids().len()
                    }
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
            assert_eq!(
                covered - overlap_tokens(&rows, &tokenizer),
                total,
                "max {max_tokens}, overlap {overlap}"
            );
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
            Spi::get_one::<String>("SELECT registered_by::text FROM embed.models WHERE name = 'by_admin'")
                .unwrap(),
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
        assert!(
            files.contains_key("model.safetensors") && files.contains_key("1_Pooling/config.json"),
            "{files:?}"
        );
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
            err.starts_with(&format!(
                "XX001: model file \"{file}\" does not match its registration: sha256 "
            )),
            "{err}"
        );
        assert_eq!(
            sql_error("SELECT embed.register_model('x', 'hf:org/absent')"),
            format!(
                "58P01: \"org/absent\" at revision \"main\" is not in the Hugging Face cache \"{}\"",
                cache.display()
            )
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
        let missing =
            Spi::get_one::<bool>("SELECT NOT EXISTS (SELECT FROM embed.models WHERE name = 'org/tiny')");
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

    /// pg_embed.max_model_size: a model whose prepared weights (from the safetensors
    /// headers, in the precision its options ask for) exceed it is refused before they are
    /// read, with a HINT that says what the limit guards; 16GB by default; superuser only.
    #[pg_test]
    fn max_model_size_refuses_large_models_before_loading() {
        assert_eq!(Spi::get_one::<String>("SHOW pg_embed.max_model_size").unwrap().as_deref(), Some("16GB"));
        Spi::run("SET LOCAL pg_embed.max_model_size = '80MB'").unwrap();
        let err = sql_error("SELECT embed.register_model('big', 'all-MiniLM-L6-v2')");
        assert_eq!(
            err,
            "54000: model \"all-MiniLM-L6-v2\" needs 87 MB for its weights in float32, more than pg_embed.max_model_size (80 MB)"
        );
        Spi::run(
            "CREATE FUNCTION pg_temp.sql_hint(q text) RETURNS text LANGUAGE plpgsql AS $$
             DECLARE h text; BEGIN EXECUTE q; RETURN ''; EXCEPTION WHEN OTHERS THEN
             GET STACKED DIAGNOSTICS h = PG_EXCEPTION_HINT; RETURN h; END $$",
        )
        .unwrap();
        let hint = Spi::get_one::<String>("SELECT pg_temp.sql_hint($q$SELECT embed.register_model('big', 'all-MiniLM-L6-v2')$q$)");
        let hint = hint.unwrap().unwrap_or_default();
        assert!(hint.starts_with("A server holds one copy of a model's weights, in a file every backend maps"), "{hint}");
        assert!(hint.contains("\"precision\": \"bfloat16\""), "{hint}");
        // In bfloat16 its linear weights take half: 67 MB, under the limit.
        register_with("big_bf16", "all-MiniLM-L6-v2", r#"{"precision": "bfloat16"}"#);
        Spi::run("SET LOCAL pg_embed.max_model_size = '60MB'").unwrap();
        let err = sql_error(r#"SELECT embed.register_model('big_bf16', 'all-MiniLM-L6-v2', '{"precision": "bfloat16"}')"#);
        assert_eq!(
            err,
            "54000: model \"all-MiniLM-L6-v2\" needs 67 MB for its weights in bfloat16, more than pg_embed.max_model_size (60 MB)"
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
        let (rows, nulls) =
            Spi::get_two::<i64, i64>("SELECT count(*), count(*) FILTER (WHERE e IS NULL) FROM big").unwrap();
        assert_eq!((rows, nulls), (Some(100_000), Some(100)));
        let misplaced_nulls =
            Spi::get_one::<i64>("SELECT count(*) FROM big WHERE (e IS NULL) <> (i % 1000 = 0)").unwrap();
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
            for f in [
                "config.json",
                "modules.json",
                "sentence_bert_config.json",
                "tokenizer.json",
                "1_Pooling/config.json",
            ] {
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
                let mut cfg: serde_json::Value =
                    serde_json::from_slice(&fs::read(d.join("config.json")).unwrap()).unwrap();
                cfg[key] = value.clone();
                fs::write(d.join("config.json"), cfg.to_string()).unwrap();
            }
        };
        copy("intact", &|_| {});
        copy("truncated_weights", &|d| {
            fs::write(d.join("model.safetensors"), &weights[..weights.len() / 2]).unwrap()
        });
        copy("garbage_weights", &|d| fs::write(d.join("model.safetensors"), vec![0xA5u8; 4096]).unwrap());
        copy("lying_header", &|d| fs::write(d.join("model.safetensors"), &lying_header).unwrap());
        copy("huge_header_length", &|d| {
            fs::write(d.join("model.safetensors"), u64::MAX.to_le_bytes()).unwrap()
        });
        copy("shape_mismatch", &config_edit("intermediate_size", 48.into()));
        copy("no_tokenizer", &|d| fs::remove_file(d.join("tokenizer.json")).unwrap());
        copy("bad_tokenizer", &|d| fs::write(d.join("tokenizer.json"), "{\"model\": 7}").unwrap());
        copy("bad_config", &|d| fs::write(d.join("config.json"), "{\"model_type\": \"bert\",").unwrap());
        copy("bad_pooling_config", &|d| fs::write(d.join("1_Pooling/config.json"), "[]").unwrap());
        copy("falcon", &config_edit("model_type", "falcon".into()));
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
            ("falcon", format!("0A000: unsupported model_type \"falcon\" in \"{}/falcon/config.json\"", dir.display())),
            ("zero_heads", format!("XX001: invalid model file \"{}/zero_heads/config.json\": hidden_size 32 is not a multiple of num_attention_heads 0", dir.display())),
            ("no_weights", format!("58P01: model file \"{}/no_weights/model.safetensors\" is missing", dir.display())),
            ("linked_tokenizer", "42501: model file \"linked_tokenizer/tokenizer.json\" is outside pg_embed.model_dir".into()),
            ("linked_folder", "42501: model source \"linked_folder\" is outside pg_embed.model_dir".into()),
        ] {
            let err = sql_error(&format!("SELECT embed.register_model('broken', '{source}')"));
            assert!(err.starts_with(&expected), "{source}: {err}");
        }
        assert_eq!(
            Spi::get_one::<i64>("SELECT count(*) FROM embed.models WHERE name = 'broken'").unwrap(),
            Some(0)
        );
        assert_eq!(embed_sql("intact", "still here"), before, "the session goes on");
        let _ = fs::remove_dir_all(&base);
    }

    /// A 10 MB input is tokenized, truncated and embedded like any other.
    #[pg_test]
    fn a_10_mb_input() {
        use_fixtures();
        register_with("tiny", "pool_mean", "{}");
        let long =
            Spi::get_one::<Vec<f32>>("SELECT embed('tiny', repeat('word é🎉 ', 1000000))").unwrap().unwrap();
        let short =
            Spi::get_one::<Vec<f32>>("SELECT embed('tiny', repeat('word é🎉 ', 1000))").unwrap().unwrap();
        assert_eq!(long, short, "only the first max_length tokens count");
    }

    // ---- shared prepared weights --------------------------------------------------------

    /// A cache directory of this test's own for the rest of its transaction (other tests
    /// running at the same time clean up the default one).
    fn own_cache_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("pg_embed_cache_test_{name}_{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Spi::run(&format!("SET LOCAL pg_embed.cache_dir = '{}'", dir.display())).unwrap();
        dir
    }

    fn shared_file(name: &str) -> Option<String> {
        Spi::get_one_with_args::<String>(
            "SELECT shared_file FROM embed.loaded_models() WHERE name = $1",
            &[name.into()],
        )
        .unwrap()
    }

    /// The shared file `name` is mapped from in this backend: a backend that built the
    /// weights maps the file on its first call after the file is written.
    fn mapped(name: &str) -> String {
        for _ in 0..1000 {
            embed_sql(name, "x");
            if let Some(file) = shared_file(name) {
                return file;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("model {name} is not mapped from a shared file");
    }

    /// (file, model, in_use, needed) of every file embed.cache_files() lists.
    fn cache_files() -> Vec<(String, Option<String>, bool, bool)> {
        Spi::connect(|c| {
            c.select("SELECT file, model, in_use, needed FROM embed.cache_files() ORDER BY file", None, &[])
                .unwrap()
                .map(|r| {
                    (
                        r.get::<String>(1).unwrap().unwrap(),
                        r.get::<String>(2).unwrap(),
                        r.get::<bool>(3).unwrap().unwrap(),
                        r.get::<bool>(4).unwrap().unwrap(),
                    )
                })
                .collect()
        })
    }

    /// The weights come from one file of the cache directory, mapped: loaded_models shows
    /// them as shared bytes, cache_files lists the file as in use and needed, and dropping
    /// the model removes it.
    #[pg_test]
    fn weights_are_mapped_from_one_shared_file() {
        let dir = own_cache_dir("shared");
        register("shared_m");
        let want = embed_sql("shared_m", "a shared vector");
        let file = mapped("shared_m");
        assert_eq!(embed_sql("shared_m", "a shared vector"), want, "the same vector mapped");
        assert!(file.starts_with(&dir.display().to_string()) && file.ends_with(".weights"), "{file}");
        let shared = loaded("shared_m", "bytes_shared").unwrap();
        assert!((85_000_000..100_000_000).contains(&shared), "all-MiniLM-L6-v2's weights: {shared}");
        assert!(loaded("shared_m", "bytes_private").unwrap() < shared / 2);
        assert_eq!(cache_files(), vec![(file.clone(), Some("shared_m".into()), true, true)]);

        // A fresh load in this backend maps the same file and gives the same vector.
        Spi::run("SELECT embed.unload('shared_m')").unwrap();
        assert_eq!(embed_sql("shared_m", "a shared vector"), want);
        assert_eq!(shared_file("shared_m").as_deref(), Some(file.as_str()));

        Spi::run("SELECT embed.drop_model('shared_m')").unwrap();
        assert!(cache_files().is_empty(), "dropped with its model");
        assert!(!std::path::Path::new(&file).exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Re-registering with options that change the weights leaves one file: the new one.
    #[pg_test]
    fn reregistration_replaces_the_file() {
        let dir = own_cache_dir("rereg");
        use_fixtures();
        register_with("rereg", "pool_mean", "{}");
        let first = mapped("rereg");
        register_with("rereg", "pool_cls", "{}");
        let second = mapped("rereg");
        assert_ne!(first, second);
        let files: Vec<String> = cache_files().into_iter().map(|f| f.0).collect();
        assert_eq!(files, vec![second]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// cache_cleanup removes what no model needs (a foreign file) and keeps what one does;
    /// a temporary file whose writer is gone is removed before, when the directory is next
    /// opened (here by cache_files).
    #[pg_test]
    fn cache_cleanup_removes_unneeded_files() {
        let dir = own_cache_dir("cleanup");
        use_fixtures();
        register_with("kept", "pool_mean", "{}");
        let kept = mapped("kept");
        let junk = dir.join("0123abcd.weights");
        let tmp = dir.join("4567cdef.weights.tmp.999999999");
        std::fs::write(&junk, b"not weights").unwrap();
        std::fs::write(&tmp, b"half a file").unwrap();
        let listed = cache_files();
        assert!(listed.contains(&(junk.display().to_string(), None, false, false)), "{listed:?}");
        assert!(!tmp.exists(), "the ended writer's temporary file is gone: {listed:?}");
        let removed: Vec<String> = Spi::connect(|c| {
            c.select("SELECT file FROM embed.cache_cleanup() ORDER BY file", None, &[])
                .unwrap()
                .map(|r| r.get::<String>(1).unwrap().unwrap())
                .collect()
        });
        assert_eq!(removed, vec![junk.display().to_string()]);
        assert_eq!(cache_files(), vec![(kept, Some("kept".into()), true, true)]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// With pg_embed.cache_dir set to '' the weights stay in the backend's own memory.
    #[pg_test]
    fn an_empty_cache_dir_keeps_weights_private() {
        Spi::run("SET LOCAL pg_embed.cache_dir = ''").unwrap();
        use_fixtures();
        register_with("private", "pool_mean", "{}");
        assert_eq!(shared_file("private"), None);
        assert_eq!(loaded("private", "bytes_shared"), Some(0));
        assert!(cache_files().is_empty());
    }

    /// A cache directory that cannot be made: the weights stay private (a WARNING), and
    /// listing the files is an error (58030) naming the directory.
    #[pg_test]
    fn an_unusable_cache_dir_keeps_weights_private() {
        let file = std::env::temp_dir().join("pg_embed_cache_test_not_a_dir");
        std::fs::write(&file, b"a file, not a directory").unwrap();
        let dir = file.join("cache");
        Spi::run(&format!("SET LOCAL pg_embed.cache_dir = '{}'", dir.display())).unwrap();
        use_fixtures();
        register_with("unshared", "pool_mean", "{}");
        assert_eq!(embed_sql("unshared", "x").len(), 32);
        assert_eq!(shared_file("unshared"), None);
        assert_eq!(loaded("unshared", "bytes_shared"), Some(0));
        assert_eq!(
            sql_error("SELECT * FROM embed.cache_files()"),
            format!("58030: could not use the shared weights at \"{}\": Not a directory (os error 20)", dir.display())
        );
    }

    /// A cache directory that exists and can be read but not written: listing it is an
    /// error (58030) naming it, not an empty list.
    #[pg_test]
    fn an_unwritable_cache_dir_is_an_error_to_list() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("pg_embed_cache_test_read_only_{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o500)).unwrap();
        Spi::run(&format!("SET LOCAL pg_embed.cache_dir = '{}'", dir.display())).unwrap();
        let error = sql_error("SELECT * FROM embed.cache_files()");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            error,
            format!("58030: could not use the shared weights at \"{}\": Permission denied (os error 13)", dir.display())
        );
    }

    #[pg_test(error = "permission denied to clean up the shared weight files")]
    fn cache_cleanup_needs_an_admin() {
        Spi::run("CREATE ROLE embed_test_cleanup").unwrap();
        Spi::run("SET ROLE embed_test_cleanup").unwrap();
        Spi::run("SELECT * FROM embed.cache_cleanup()").unwrap();
    }

    #[pg_test(error = "permission denied to list the shared weight files")]
    fn cache_files_needs_an_admin() {
        Spi::run("CREATE ROLE embed_test_files").unwrap();
        Spi::run("SET ROLE embed_test_files").unwrap();
        Spi::run("SELECT * FROM embed.cache_files()").unwrap();
    }
}
