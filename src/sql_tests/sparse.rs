//! `#[pg_test]`s of a CSR sparse encoder (a dense model, then a top-k SparseAutoEncoder) through
//! embed_sparse, embed.sparse_terms and embed (tests/fixtures/sparse/csr).

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::sql_tests::{register_with, sql_error, use_fixtures};

    fn golden_case(model: &str, case: usize) -> serde_json::Value {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sparse/csr/golden.json");
        let g: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        g["models"][model]["cases"][case].clone()
    }

    /// embed_sparse's sparsevec text holds sentence-transformers' latents (1-based, over the
    /// autoencoder's hidden_dim); max_terms is encode's max_active_dims; sparse_terms gives
    /// the 0-based latent ids; embed() names embed_sparse.
    #[pg_test]
    fn embed_sparse_of_a_csr_model() {
        use_fixtures();
        let info = register_with("t_csr", "sparse/csr/csr_mean", "{}");
        assert_eq!(info["task"], "sparse");
        assert_eq!(info["dim"], 128);
        let case = golden_case("csr_mean", 1);
        let text = Spi::get_one_with_args::<String>("SELECT embed_sparse('t_csr', $1)", &[case["text"].as_str().unwrap().into()])
            .unwrap()
            .unwrap();
        let (body, dim) = text.trim_start_matches('{').split_once("}/").unwrap();
        assert_eq!(dim, "128");
        let mut got_ids = Vec::new();
        for (pair, (want_i, want_v)) in body.split(',').zip(case["indices"].as_array().unwrap().iter().zip(case["values"].as_array().unwrap())) {
            let (i, v) = pair.split_once(':').unwrap();
            got_ids.push(i.parse::<u64>().unwrap() - 1);
            let (v, w) = (v.parse::<f64>().unwrap(), want_v.as_f64().unwrap());
            assert!((v - w).abs() <= 1e-4 * w.abs().max(1.0), "{pair}: want {w}");
            assert_eq!(i.parse::<u64>().unwrap() - 1, want_i.as_u64().unwrap());
        }
        assert_eq!(got_ids.len(), case["nnz"].as_u64().unwrap() as usize);

        register_with("t_csr3", "sparse/csr/csr_mean", "{\"max_terms\": 3}");
        let want3: Vec<u64> = case["indices_max_active_dims_3"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() + 1).collect();
        let text3 = Spi::get_one_with_args::<String>("SELECT embed_sparse('t_csr3', $1)", &[case["text"].as_str().unwrap().into()])
            .unwrap()
            .unwrap();
        let ids3: Vec<u64> = text3.trim_start_matches('{').split_once('}').unwrap().0.split(',').map(|p| p.split_once(':').unwrap().0.parse().unwrap()).collect();
        assert_eq!(ids3, want3);

        let terms = Spi::get_one_with_args::<i64>(
            "SELECT count(*) FROM embed.sparse_terms('t_csr', $1) WHERE token ~ '^[0-9]+$'",
            &[case["text"].as_str().unwrap().into()],
        )
        .unwrap();
        assert_eq!(terms, Some(case["nnz"].as_i64().unwrap()));
        assert_eq!(
            sql_error("SELECT embed('t_csr', 'x')"),
            "42809: this model gives sparse vectors: call embed_sparse(), not embed()"
        );
        assert!(sql_error("SELECT embed.register_model('t_csr_bad', 'sparse/csr/csr_mean', '{\"max_terms\": 129}')")
            .starts_with("22023: invalid options: max_terms 129 exceeds"));
    }
}
