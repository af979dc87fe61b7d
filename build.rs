//! Links the extension's shared library with `--no-gc-sections`, as cargo-pgrx would by
//! adding it to every crate's rustflags: here it applies to this cdylib's link alone, so
//! the dependencies build with the same flags for `cargo test`, `cargo pgrx test` and
//! `cargo pgrx install`, and one build of them serves all three (scripts/env.sh sets
//! CARGO_PGRX_DISABLE_GC_SECTIONS_WORKAROUND). The linker must keep the symbols pgrx's
//! schema generator and PostgreSQL look up, which nothing in the library references.
fn main() {
    let target = std::env::var("TARGET").unwrap_or_default();
    if target.contains("linux") || target.contains("freebsd") {
        println!("cargo:rustc-link-arg-cdylib=-Wl,--no-gc-sections");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
