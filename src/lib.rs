//! pg_embed: transformer models inside PostgreSQL.
//!
//! Layout: `sql`, `guc`, `catalog` and `cache` are the pgrx edge; `pipeline`, `models`,
//! `pooling`, `heads`, `classifier`, `kernels`, `st`, `options`, `source`, `hub`, `chunk`,
//! `threads` and `error` are plain Rust; `sql/*.sql` holds the SQL-level parts (catalog,
//! triggers, backfill).

::pgrx::pg_module_magic!(name, version);

pgrx::extension_sql_file!("../sql/catalog.sql", name = "catalog", bootstrap);
pgrx::extension_sql_file!("../sql/workflow.sql", name = "workflow", finalize);

mod cache;
mod catalog;
pub mod chunk;
pub mod classifier;
pub mod error;
mod guc;
pub mod heads;
pub mod hub;
pub mod kernels;
pub mod matmul;
pub mod models;
pub mod options;
pub mod pipeline;
pub mod pooling;
mod source;
mod sql;
pub mod st;
pub mod threads;

#[cfg(test)]
mod parity;

#[cfg(test)]
mod fuzz_models;

#[pgrx::pg_guard]
pub extern "C-unwind" fn _PG_init() {
    guc::register();
}

#[cfg(any(test, feature = "pg_test"))]
mod sql_tests;

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/models");
        vec![Box::leak(format!("pg_embed.model_dir = '{dir}'").into_boxed_str())]
    }
}
