//! Builds the extension's shared library:
//! - links it with `--no-gc-sections`, as cargo-pgrx would by adding it to every crate's
//!   rustflags: here it applies to this cdylib's link alone, so the dependencies build with
//!   the same flags for `cargo test`, `cargo pgrx test` and `cargo pgrx install`, and one
//!   build of them serves all three (scripts/env.sh sets
//!   CARGO_PGRX_DISABLE_GC_SECTIONS_WORKAROUND). The linker must keep the symbols pgrx's
//!   schema generator and PostgreSQL look up, which nothing in the library references;
//! - compiles src/stats.c (the server-wide statistics, which use PostgreSQL's internal
//!   statistics headers) against the server headers of the PostgreSQL that the pgNN
//!   feature selects, found as pgrx-pg-sys finds them (PGRX_PG_CONFIG_PATH, else
//!   cargo-pgrx's config.toml).
fn main() {
    let target = std::env::var("TARGET").unwrap_or_default();
    if target.contains("linux") || target.contains("freebsd") {
        println!("cargo:rustc-link-arg-cdylib=-Wl,--no-gc-sections");
    }
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/stats.c");
    println!("cargo:rerun-if-env-changed=PGRX_PG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PGRX_HOME");
    let major = ["15", "16", "17", "18"]
        .into_iter()
        .find(|v| std::env::var_os(format!("CARGO_FEATURE_PG{v}")).is_some())
        .expect("one of the features pg15, pg16, pg17, pg18");
    let pgrx = pgrx_pg_config::Pgrx::from_config().unwrap_or_else(|e| panic!("pgrx's configuration: {e}"));
    let pg_config = pgrx.get(&format!("pg{major}")).unwrap_or_else(|e| panic!("pg_config of pg{major}: {e}"));
    let include = pg_config.includedir_server().unwrap_or_else(|e| panic!("pg_config --includedir-server: {e}"));
    println!("cargo:rerun-if-changed={}", include.join("pg_config.h").display());
    cc::Build::new()
        .file("src/stats.c")
        .include(&include)
        .flag_if_supported("-Wno-unused-parameter")
        .flag_if_supported("-Wno-missing-field-initializers")
        .flag_if_supported("-Wno-sign-compare")
        .compile("pg_embed_stats");
}
