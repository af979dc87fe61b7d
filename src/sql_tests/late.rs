//! `#[pg_test]`s of late interaction: `embed.maxsim` on `real[]` and on pgvector's `vector[]`
//! (where pgvector is installed), its errors, and the 2-D `real[]` type `Matrix` as an
//! argument, a result and a set of results.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::late::{matrix_from_rows, Matrix};
    use crate::sql_tests::sql_error;

    /// `rows` x `cols` of 1, 2, 3, ... (a Matrix result).
    #[pg_extern(immutable)]
    fn late_matrix(rows: i32, cols: i32) -> Matrix {
        let (rows, cols) = (rows as usize, cols as usize);
        Matrix { values: (1..=rows * cols).map(|v| v as f32).collect(), rows, cols }
    }

    /// Its argument, read as a Matrix and written back.
    #[pg_extern(immutable, strict)]
    fn late_echo(m: Matrix) -> Matrix {
        m
    }

    /// A set of matrices (SETOF real[]), NULL among them.
    #[pg_extern(immutable)]
    fn late_matrices() -> SetOfIterator<'static, Option<Matrix>> {
        SetOfIterator::new(vec![
            Some(matrix_from_rows(vec![vec![1.0, 2.0], vec![3.0, 4.0], vec![5.0, 6.0]])),
            None,
            Some(matrix_from_rows(vec![])),
            Some(matrix_from_rows(vec![vec![7.0]])),
        ])
    }

    fn real(sql: &str) -> Option<f32> {
        Spi::get_one::<f32>(sql).unwrap()
    }

    fn text(sql: &str) -> Option<String> {
        Spi::get_one::<String>(sql).unwrap()
    }


    fn random(n: usize, seed: u64) -> Vec<f32> {
        pg_embed_core::maxsim::seeded(n, seed)
    }

    /// Whether pgvector can be created here (not on Debian's PostgreSQL 15); creates it
    /// (the test's transaction rolls it back).
    fn with_pgvector() -> bool {
        let available = Spi::get_one::<bool>("SELECT EXISTS (SELECT FROM pg_available_extensions WHERE name = 'vector')");
        if available.unwrap() != Some(true) {
            pgrx::notice!("pgvector is not installed: the vector[] checks are skipped");
            return false;
        }
        Spi::run("CREATE EXTENSION IF NOT EXISTS vector").unwrap();
        true
    }

    // ---- embed.maxsim(real[], real[]) ----------------------------------------------------

    #[pg_test]
    fn maxsim_of_small_matrices_is_exact() {
        // Row maxima 2, 3, 0 (of 0, 0 and -5), 3.
        let q = "'{{1,0,0},{0,1,0},{0,0,1},{1,1,1}}'::real[]";
        let d = "'{{2,0,0},{0,3,0},{1,1,-5}}'::real[]";
        assert_eq!(real(&format!("SELECT embed.maxsim({q}, {d})")), Some(8.0));
        // Not symmetric: the document's rows against the query's: 2, 3, 1.
        assert_eq!(real(&format!("SELECT embed.maxsim({d}, {q})")), Some(6.0));
        // Negative maxima are kept (no clipping at 0), and no normalization.
        assert_eq!(real("SELECT embed.maxsim('{{-1,-1}}'::real[], '{{1,2},{3,0.5}}'::real[])"), Some(-3.0));
        assert_eq!(real("SELECT embed.maxsim('{{10,0}}'::real[], '{{0.5,0}}'::real[])"), Some(5.0));
        // A 1-D array is one row.
        assert_eq!(real("SELECT embed.maxsim('{1,2}'::real[], '{{1,0},{0,1}}'::real[])"), Some(2.0));
        assert_eq!(real("SELECT embed.maxsim('{1,2}'::real[], '{3,4}'::real[])"), Some(11.0));
        assert_eq!(real("SELECT embed.maxsim('{{1,2},{0,1}}'::real[], '{3,4}'::real[])"), Some(15.0));
        // Lower bounds other than 1 are read as they are.
        let shifted = "'[0:3][5:7]={{1,0,0},{0,1,0},{0,0,1},{1,1,1}}'::real[]";
        assert_eq!(real(&format!("SELECT embed.maxsim({shifted}, {d})")), Some(8.0));
        // Width 1.
        assert_eq!(real("SELECT embed.maxsim('{{2},{-1}}'::real[], '{{3},{-4}}'::real[])"), Some(10.0));
    }

    #[pg_test]
    fn maxsim_of_colbert_shapes_matches_the_float64_reference() {
        let (m, n, dim) = (32, 180, 128);
        let (q, d) = (random(m * dim, 1), random(n * dim, 2));
        let want = pg_embed_core::maxsim::reference(&q, m, &d, n, dim);
        let query = Matrix { values: q, rows: m, cols: dim };
        let document = Matrix { values: d, rows: n, cols: dim };
        let got = Spi::get_one_with_args::<f32>("SELECT embed.maxsim($1, $2)", &[query.into(), document.into()])
            .unwrap()
            .unwrap();
        assert!((got as f64 - want).abs() <= 1e-6 * want.abs(), "{got} vs {want}");
    }

    #[pg_test]
    fn maxsim_is_0_when_either_side_has_no_rows_and_null_for_null() {
        assert_eq!(real("SELECT embed.maxsim('{}'::real[], '{{1,2}}'::real[])"), Some(0.0));
        assert_eq!(real("SELECT embed.maxsim('{{1,2}}'::real[], '{}'::real[])"), Some(0.0));
        assert_eq!(real("SELECT embed.maxsim('{}'::real[], '{}'::real[])"), Some(0.0));
        assert_eq!(real("SELECT embed.maxsim('{{1,2,3}}'::real[], '{}'::real[])"), Some(0.0), "no width to compare");
        // STRICT.
        assert_eq!(real("SELECT embed.maxsim(NULL::real[], '{{1}}'::real[])"), None);
        assert_eq!(real("SELECT embed.maxsim('{{1}}'::real[], NULL)"), None);
        // IMMUTABLE STRICT PARALLEL SAFE, RETURNS real.
        let attributes = |signature: &str| {
            text(&format!(
                "SELECT provolatile::text || ' ' || proisstrict || ' ' || proparallel::text || ' ' || prorettype::regtype
                   FROM pg_proc WHERE oid = 'embed.maxsim({signature})'::regprocedure"
            ))
        };
        assert_eq!(attributes("real[], real[]").as_deref(), Some("i true s real"));
        assert_eq!(attributes("anyarray, anyarray").as_deref(), Some("i true s real"));
    }

    #[pg_test(error = "query is 1x2 but document is 2x3: the widths must match")]
    fn maxsim_of_different_widths() {
        real("SELECT embed.maxsim('{{1,2}}'::real[], '{{1,2,3},{4,5,6}}'::real[])");
    }

    #[pg_test(error = "query must have at most 2 dimensions, not 3 ([1:1][1:2][1:2])")]
    fn maxsim_of_a_3d_array() {
        real("SELECT embed.maxsim('{{{1,2},{3,4}}}'::real[], '{{1,2}}'::real[])");
    }

    #[pg_test(error = "document must not contain NULL (element [2][1])")]
    fn maxsim_with_a_null_element() {
        real("SELECT embed.maxsim('{{1,2}}'::real[], '{{1,2},{NULL,4}}'::real[])");
    }

    #[pg_test(error = "embed.maxsim takes real[] or pgvector's vector[], not double precision[]")]
    fn maxsim_of_another_element_type() {
        real("SELECT embed.maxsim('{{1,2}}'::float8[], '{{1,2}}'::float8[])");
    }

    #[pg_test]
    fn maxsim_errors_have_their_sqlstates() {
        let cases = [
            (
                "SELECT embed.maxsim('{{1,2}}'::real[], '{{1,2,3}}'::real[])",
                "22000: query is 1x2 but document is 1x3: the widths must match",
            ),
            (
                "SELECT embed.maxsim('{1,2,3}'::real[], '{{1,2}}'::real[])",
                "22000: query is 1x3 but document is 1x2: the widths must match",
            ),
            (
                "SELECT embed.maxsim('{{1,2}}'::real[], '[0:0][0:0][3:4]={{{1,2}}}'::real[])",
                "2202E: document must have at most 2 dimensions, not 3 ([0:0][0:0][3:4])",
            ),
            ("SELECT embed.maxsim('{1,NULL}'::real[], '{{1,2}}'::real[])", "22004: query must not contain NULL (element [2])"),
            (
                "SELECT embed.maxsim('{{1,2}}'::real[], '[0:1][5:6]={{1,2},{3,NULL}}'::real[])",
                "22004: document must not contain NULL (element [1][6])",
            ),
            (
                "SELECT embed.maxsim('{{1,2}}'::text[], '{{1,2}}'::text[])",
                "42804: embed.maxsim takes real[] or pgvector's vector[], not text[]",
            ),
            ("SELECT tests.late_echo('{{1,NULL}}')", "22004: array must not contain NULL (element [1][2])"),
        ];
        for (query, want) in cases {
            assert_eq!(sql_error(query), want, "{query}");
        }
    }

    /// A cancel that arrives while maxsim runs stops it with Postgres's own error.
    #[pg_test(error = "canceling statement due to user request")]
    fn maxsim_stops_for_a_cancel() {
        let (m, n, dim) = (64, 64, 64);
        let query = Matrix { values: random(m * dim, 3), rows: m, cols: dim };
        let document = Matrix { values: random(n * dim, 4), rows: n, cols: dim };
        // SAFETY: what the SIGINT handler sets; the ERROR that follows clears it.
        unsafe {
            pg_sys::QueryCancelPending = 1;
            pg_sys::InterruptPending = 1;
        }
        crate::late::score(&query.view(), &document.view());
    }

    // ---- embed.maxsim(vector[], vector[]) ----------------------------------------------

    #[pg_test]
    fn maxsim_of_pgvector_arrays() {
        if !with_pgvector() {
            return;
        }
        let q = "ARRAY['[1,0,0]', '[0,1,0]', '[0,0,1]', '[1,1,1]']::vector[]";
        let d = "ARRAY['[2,0,0]', '[0,3,0]', '[1,1,-5]']::vector[]";
        assert_eq!(real(&format!("SELECT embed.maxsim({q}, {d})")), Some(8.0));
        assert_eq!(real(&format!("SELECT embed.maxsim({d}, {q})")), Some(6.0));
        // The same score as real[] on random rows.
        let (m, n, dim) = (9, 17, 33);
        let (qv, dv) = (random(m * dim, 5), random(n * dim, 6));
        let query = Matrix { values: qv.clone(), rows: m, cols: dim };
        let document = Matrix { values: dv.clone(), rows: n, cols: dim };
        // Each row of the real[] as a vector: m[i:i][:] unnested.
        let via_vectors = Spi::get_one_with_args::<f32>(
            "WITH v AS (
                SELECT (SELECT array_agg(ARRAY(SELECT unnest(($1::real[])[i:i][:]))::vector ORDER BY i)
                          FROM generate_subscripts($1::real[], 1) i) AS q,
                       (SELECT array_agg(ARRAY(SELECT unnest(($2::real[])[i:i][:]))::vector ORDER BY i)
                          FROM generate_subscripts($2::real[], 1) i) AS d)
             SELECT embed.maxsim(q, d) FROM v",
            &[query.clone().into(), document.clone().into()],
        )
        .unwrap()
        .unwrap();
        let via_real = Spi::get_one_with_args::<f32>("SELECT embed.maxsim($1, $2)", &[query.into(), document.into()])
            .unwrap()
            .unwrap();
        assert_eq!(via_vectors.to_bits(), via_real.to_bits(), "{via_vectors} vs {via_real}");
        let want = pg_embed_core::maxsim::reference(&qv, m, &dv, n, dim);
        assert!((via_vectors as f64 - want).abs() <= 1e-6 * want.abs());
        // Empty and NULL.
        assert_eq!(real(&format!("SELECT embed.maxsim('{{}}'::vector[], {d})")), Some(0.0));
        assert_eq!(real(&format!("SELECT embed.maxsim({q}, '{{}}'::vector[])")), Some(0.0));
        assert_eq!(real(&format!("SELECT embed.maxsim(NULL::vector[], {d})")), None);
        // Errors, with their SQLSTATEs.
        let cases = [
            (
                format!("SELECT embed.maxsim({q}, ARRAY['[1,2]', '[3,4]']::vector[])"),
                "22000: query is 4x3 but document is 2x2: the widths must match",
            ),
            (
                "SELECT embed.maxsim(ARRAY['[1,2]', '[1,2]', '[1,2,3]']::vector[], ARRAY['[1,2]']::vector[])".into(),
                "22000: query's vectors differ in dimensions: element [1] has 2 and element [3] has 3",
            ),
            (
                "SELECT embed.maxsim(ARRAY['[1,2]']::vector[], ARRAY['[1,2]', NULL]::vector[])".into(),
                "22004: document must not contain NULL (element [2])",
            ),
            (
                "SELECT embed.maxsim(ARRAY[ARRAY['[1,2]'::vector], ARRAY['[1,2]'::vector]], ARRAY['[1,2]']::vector[])".into(),
                "2202E: query must be a 1-D array of vectors, not 2-D ([1:2][1:1])",
            ),
            (
                "SELECT embed.maxsim(ARRAY['[1,2]']::halfvec[], ARRAY['[1,2]']::halfvec[])".into(),
                "42804: embed.maxsim takes real[] or pgvector's vector[], not halfvec[]",
            ),
        ];
        for (query, want) in cases {
            assert_eq!(sql_error(&query), want, "{query}");
        }
    }

    // ---- Matrix: real[] in and out -------------------------------------------------------

    #[pg_test]
    fn matrix_is_a_2d_real_array() {
        assert_eq!(text("SELECT array_dims(tests.late_matrix(3, 4))").as_deref(), Some("[1:3][1:4]"));
        assert_eq!(
            Spi::get_one::<bool>("SELECT tests.late_matrix(3, 4) = '{{1,2,3,4},{5,6,7,8},{9,10,11,12}}'::real[]").unwrap(),
            Some(true)
        );
        assert_eq!(text("SELECT pg_typeof(tests.late_matrix(1, 1))::text").as_deref(), Some("real[]"));
        // 0 rows (or 0 columns): the empty array.
        assert_eq!(text("SELECT tests.late_matrix(0, 4)::text").as_deref(), Some("{}"));
        assert_eq!(text("SELECT tests.late_matrix(2, 0)::text").as_deref(), Some("{}"));
        // Arguments: 2-D as it is (lower bounds back to 1), 1-D as one row, '{}' as 0 rows.
        let echo = |a: &str| text(&format!("SELECT tests.late_echo('{a}')::text"));
        assert_eq!(echo("{{1,2},{3,4}}").as_deref(), Some("{{1,2},{3,4}}"));
        assert_eq!(echo("[0:1][3:4]={{1,2},{3,4}}").as_deref(), Some("{{1,2},{3,4}}"));
        assert_eq!(echo("{1.5,2,3}").as_deref(), Some("{{1.5,2,3}}"));
        assert_eq!(echo("{}").as_deref(), Some("{}"));
        // Read back through SPI.
        let m = Spi::get_one::<Matrix>("SELECT '{{1,2,3},{4,5,6}}'::real[]").unwrap().unwrap();
        assert_eq!(m, Matrix { values: vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], rows: 2, cols: 3 });
        let m = Spi::get_one::<Matrix>("SELECT tests.late_matrix(3, 4)").unwrap().unwrap();
        assert_eq!((m.rows, m.cols, m.values[11]), (3, 4, 12.0));
        // A set of them, NULL kept.
        let rows = Spi::get_one::<String>(
            "SELECT string_agg(coalesce(m::text, 'NULL') || ' ' || coalesce(array_dims(m), '-'), '; ' ORDER BY i)
               FROM tests.late_matrices() WITH ORDINALITY AS t(m, i)",
        )
        .unwrap();
        assert_eq!(rows.as_deref(), Some("{{1,2},{3,4},{5,6}} [1:3][1:2]; NULL -; {} -; {{7}} [1:1][1:1]"));
        let returns = text("SELECT pg_get_function_result('tests.late_matrices()'::regprocedure)");
        assert_eq!(returns.as_deref(), Some("SETOF real[]"));
    }

    #[pg_test]
    fn matrix_from_rows_keeps_the_rows_in_order() {
        let m = matrix_from_rows(vec![vec![1.0, 2.0], vec![3.0, 4.0]]);
        assert_eq!(m, Matrix { values: vec![1.0, 2.0, 3.0, 4.0], rows: 2, cols: 2 });
        assert_eq!(matrix_from_rows(vec![]), Matrix::default());
    }

    #[pg_test(error = "rows of a matrix differ in length: row 1 has 2 values, row 2 has 1")]
    fn matrix_from_ragged_rows() {
        matrix_from_rows(vec![vec![1.0, 2.0], vec![3.0]]);
    }

    fn late_models() {
        crate::sql_tests::use_fixtures();
        crate::sql_tests::register_with("t_colbert", "late/colbert", "{}");
        crate::sql_tests::register_with("t_m3", "late/bge_m3", "{}");
    }

    /// embed_multi's three forms on a ColBERT model: queries expanded to their length,
    /// documents the default side, the array form one row per input with NULL kept; bge-m3's
    /// encode_all equal to embed, embed_sparse and embed_multi; the catalog's task.
    #[pg_test]
    fn embed_multi_and_encode_all_from_sql() {
        late_models();
        let dims = text("SELECT array_dims(embed_multi('t_colbert', 'hello world', 'query'))");
        assert_eq!(dims.as_deref(), Some("[1:12][1:16]"));
        let same = Spi::get_one::<bool>(
            "SELECT embed_multi('t_colbert', 'Hello, world!') = embed_multi('t_colbert', 'Hello, world!', 'document')",
        )
        .unwrap();
        assert_eq!(same, Some(true));
        let rows = text(
            "SELECT string_agg(coalesce(array_dims(m), 'NULL'), ' ' ORDER BY i)
               FROM embed_multi('t_colbert', ARRAY['Hello world', NULL, 'data']) WITH ORDINALITY AS t(m, i)",
        );
        assert_eq!(rows.as_deref(), Some("[1:7][1:16] NULL [1:4][1:16]"));
        let all = Spi::get_one::<bool>(
            "SELECT a.dense = embed('t_m3', 'hello world') AND a.sparse = embed_sparse('t_m3', 'hello world')
                    AND a.multi = embed_multi('t_m3', 'hello world')
               FROM embed.encode_all('t_m3', 'hello world') AS a",
        )
        .unwrap();
        assert_eq!(all, Some(true));
        let tasks = text("SELECT string_agg(name || ':' || task || ':' || dim, ' ' ORDER BY name) FROM embed.models WHERE name LIKE 't\\_%'");
        assert_eq!(tasks.as_deref(), Some("t_colbert:multi:16 t_m3:embed:32"));
        let null = Spi::get_one::<Matrix>("SELECT embed_multi('t_colbert', NULL::text)").unwrap();
        assert!(null.is_none());
    }

    #[pg_test(error = "this model gives token vectors (late interaction): call embed_multi(), not embed()")]
    fn embed_of_a_colbert_model() {
        late_models();
        Spi::run("SELECT embed('t_colbert', 'x')").unwrap();
    }

    #[pg_test(error = "this model gives dense vectors: call embed(), not embed_multi()")]
    fn embed_multi_of_a_dense_model() {
        crate::sql_tests::use_fixtures();
        crate::sql_tests::register_with("t_dense", "pool_mean", "{}");
        Spi::run("SELECT embed_multi('t_dense', 'x')").unwrap();
    }

    #[pg_test(error = "unknown prompt name \"passage\"")]
    fn embed_multi_unknown_side() {
        late_models();
        Spi::run("SELECT embed_multi('t_colbert', 'x', 'passage')").unwrap();
    }

    #[pg_test(error = "this model gives token vectors (late interaction): call embed_multi(), not embed.encode_all()")]
    fn encode_all_of_a_colbert_model() {
        late_models();
        Spi::run("SELECT * FROM embed.encode_all('t_colbert', 'x')").unwrap();
    }

    /// The layouts sentence-transformers 6.2's MultiVectorEncoder reads: its own save
    /// (`multivector/mve`) and the Stanford ColBERT layout (`multivector/stanford`), through
    /// embed_multi's three forms: queries cut at and filled to the expansion length, documents
    /// the default side with the skiplist left out, the array form one row per input; the
    /// catalog's task and dim; MaxSim equal to MultiVectorEncoder.similarity's (golden.json).
    #[pg_test]
    fn embed_multi_of_multi_vector_encoder_layouts() {
        crate::sql_tests::use_fixtures();
        crate::sql_tests::register_with("t_mve", "multivector/mve", "{}");
        crate::sql_tests::register_with("t_stanford", "multivector/stanford", "{}");
        for model in ["t_mve", "t_stanford"] {
            let dims = text(&format!("SELECT array_dims(embed_multi('{model}', 'hello world', 'query'))"));
            assert_eq!(dims.as_deref(), Some("[1:12][1:16]"), "{model}");
            // [CLS] [D]/[unused1] hello wor ##l ##d [SEP]; the punctuation of the second is left out.
            let rows = text(&format!(
                "SELECT string_agg(coalesce(array_dims(m), 'NULL'), ' ' ORDER BY i)
                   FROM embed_multi('{model}', ARRAY['Hello world', NULL, 'Hello, world!']) WITH ORDINALITY AS t(m, i)"
            ));
            assert_eq!(rows.as_deref(), Some("[1:7][1:16] NULL [1:7][1:16]"), "{model}");
            let same = Spi::get_one::<bool>(&format!(
                "SELECT embed_multi('{model}', 'data') = embed_multi('{model}', 'data', 'document')"
            ))
            .unwrap();
            assert_eq!(same, Some(true), "{model}");
        }
        let tasks = text("SELECT string_agg(name || ':' || task || ':' || dim, ' ' ORDER BY name) FROM embed.models WHERE name LIKE 't\\_%'");
        assert_eq!(tasks.as_deref(), Some("t_mve:multi:16 t_stanford:multi:16"));
        // golden.json: models.mve.scores.values[0][0], "hello world" against "Hello world".
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/multivector/golden.json");
        let golden: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        for (model, name) in [("t_mve", "mve"), ("t_stanford", "stanford")] {
            let want = golden["models"][name]["scores"]["values"][0][0].as_f64().unwrap() as f32;
            let got = real(&format!(
                "SELECT embed.maxsim(embed_multi('{model}', 'hello world', 'query'), embed_multi('{model}', 'Hello world'))"
            ))
            .unwrap();
            assert!((got - want).abs() <= 1e-4 * want.abs().max(1.0), "{model}: {got} vs {want}");
        }
    }

    #[pg_test(error = "this model gives token vectors (late interaction): call embed_multi(), not embed()")]
    fn embed_of_a_stanford_colbert_model() {
        crate::sql_tests::use_fixtures();
        crate::sql_tests::register_with("t_stanford", "multivector/stanford", "{}");
        Spi::run("SELECT embed('t_stanford', 'x')").unwrap();
    }

    #[pg_test(error = "model \"nope\" is not registered")]
    fn embed_multi_unknown_model() {
        Spi::run("SELECT embed_multi('nope', 'x')").unwrap();
    }

    #[pg_test(error = "invalid options: task \"multi\" needs a model with that output (multi: ColBERT or bge-m3; sparse: bge-m3); register a sparse encoder without a task")]
    fn task_multi_of_a_dense_model() {
        crate::sql_tests::use_fixtures();
        crate::sql_tests::register_with("t_dense", "pool_mean", "{\"task\": \"multi\"}");
    }
}
