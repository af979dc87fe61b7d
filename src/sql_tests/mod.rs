//! `#[pg_test]`s for the SQL surface: run inside a real backend by `cargo pgrx test`.
//! `surface`: the inference functions, registration, options, classify and rerank;
//! `operations`: the cache, long inputs and chunks, privileges, the hub cache, failures;
//! `images`: the image functions; `sparse`: a CSR sparse encoder.

mod images;
mod late;
mod operations;
mod sparse;
mod surface;

use pgrx::prelude::*;

/// The SQLSTATE and message of the error `query` raises ("" if none), caught in a
/// subtransaction so the test goes on.
pub(crate) fn sql_error(query: &str) -> String {
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

pub(crate) const MODEL_SOURCE: &str = "all-MiniLM-L6-v2";

pub(crate) fn register(name: &str) {
    Spi::run(&format!("SELECT embed.register_model('{name}', '{MODEL_SOURCE}')")).unwrap();
}

/// Serves the tiny fixtures of tests/fixtures for the rest of the test's transaction.
pub(crate) fn use_fixtures() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
    Spi::run(&format!("SET LOCAL pg_embed.model_dir = '{dir}'")).unwrap();
}

pub(crate) fn register_with(name: &str, source: &str, options: &str) -> serde_json::Value {
    Spi::get_one_with_args::<pgrx::JsonB>(
        "SELECT embed.register_model($1, $2, $3::jsonb)",
        &[name.into(), source.into(), options.into()],
    )
    .unwrap()
    .unwrap()
    .0
}

pub(crate) fn embed_prompt_sql(model: &str, text: &str, prompt: &str) -> Vec<f32> {
    Spi::get_one_with_args::<Vec<f32>>(
        "SELECT embed($1, $2, $3)",
        &[model.into(), text.into(), prompt.into()],
    )
    .unwrap()
    .unwrap()
}

pub(crate) fn embed_sql(model: &str, text: &str) -> Vec<f32> {
    Spi::get_one_with_args::<Vec<f32>>("SELECT embed($1, $2)", &[model.into(), text.into()]).unwrap().unwrap()
}
