//! pg_embed: transformer models inside PostgreSQL.
//!
//! This crate is the SQL edge only: `sql` (the functions), `guc` (settings), `catalog`
//! (embed.models), `cache` (this backend's loaded pipelines) and `worker` (the background
//! workers of embed.vectorize). Everything that runs a
//! model is in the pgrx-free crate `pg_embed_core` (crates/pg_embed_core); `sql/*.sql`
//! holds the SQL-level parts (catalog, triggers, backfill).

::pgrx::pg_module_magic!(name, version);

pgrx::extension_sql_file!("../sql/catalog.sql", name = "catalog", bootstrap);
pgrx::extension_sql_file!("../sql/vectorize.sql", name = "vectorize");
pgrx::extension_sql_file!("../sql/cluster.sql", name = "cluster", requires = ["vectorize"]);
pgrx::extension_sql_file!("../sql/stats.sql", name = "stats", requires = [stats::embed::stat_models, stats::embed::stat_reset]);
pgrx::extension_sql_file!("../sql/workflow.sql", name = "workflow", finalize);

mod cache;
mod catalog;
mod error;
mod guc;
mod jsonb;
mod late;
mod sql;
mod stats;
mod worker;

#[pgrx::pg_guard]
pub extern "C-unwind" fn _PG_init() {
    guc::register();
    stats::init();
    pg_embed_core::threads::set_interrupt_probe(interrupt_pending);
    // SAFETY: reads a postmaster global.
    if unsafe { pgrx::pg_sys::process_shared_preload_libraries_in_progress } {
        worker::register_launcher();
    }
}

/// `CHECK_FOR_INTERRUPTS`, noting first for the statistics whether it is about to raise a
/// cancel (a model call it ends is counted as cancelled, not failed).
pub(crate) fn check_interrupts() {
    if interrupt_pending() {
        error::note_cancel();
    }
    pgrx::check_for_interrupts!();
}

/// Whether this backend has a cancel (a statement timeout included) or terminate pending
/// that `CHECK_FOR_INTERRUPTS` would act on now: the compute threads read it to stop a long
/// forward pass early (it reads the signal handlers' flags; it calls no Postgres function).
fn interrupt_pending() -> bool {
    use pgrx::pg_sys;
    // SAFETY: plain reads of flags that signal handlers set in this process (volatile, as
    // Postgres reads them); a stale value only delays or repeats the answer.
    unsafe {
        let read = |v: *const i32| std::ptr::read_volatile(v) != 0;
        read(&raw const pg_sys::InterruptPending)
            && std::ptr::read_volatile(&raw const pg_sys::InterruptHoldoffCount) == 0
            && std::ptr::read_volatile(&raw const pg_sys::CritSectionCount) == 0
            && (read(&raw const pg_sys::ProcDiePending)
                || (read(&raw const pg_sys::QueryCancelPending)
                    && std::ptr::read_volatile(&raw const pg_sys::QueryCancelHoldoffCount) == 0))
    }
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
