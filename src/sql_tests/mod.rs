//! `#[pg_test]`s for the SQL surface: run inside a real backend by `cargo pgrx test`.
//! `surface`: the inference functions, registration, options, classify and rerank;
//! `operations`: the cache, long inputs and chunks, privileges, the hub cache, failures;
//! `images`: the image functions.

mod images;
mod late;
mod operations;
mod surface;

use pgrx::prelude::*;

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
