//! Server-wide statistics of model calls: `embed.stat_models`, `embed.stat_reset` and
//! `pg_embed.log_min_duration`.
//!
//! Each SQL function that runs a model holds a [`Call`] while it works: when the call ends
//! it measures what the call did (from the pipeline's own counters), logs it when it was
//! slow and hands the counts to src/stats.c, which keeps them where the release allows (see
//! its header: a custom cumulative statistics kind on PostgreSQL 18, a shared-memory table
//! on 15-17, this backend's own counts when pg_embed is not in shared_preload_libraries).
//!
//! A call that ends in an ERROR is unwinding when its `Call` drops: no Postgres function may
//! run then, so its counts wait in this backend until its transaction ends (a transaction
//! callback) or the next call starts, whichever comes first.

use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_int, CStr, CString};
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::guc;
use pg_embed_core::pipeline::Pipeline;

/// One row's counts, as src/stats.c's `PgEmbedCounters` lays them out.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct Counters {
    calls: i64,
    inputs: i64,
    tokens: i64,
    truncated: i64,
    chunked: i64,
    errors: i64,
    cancels: i64,
    forward_passes: i64,
    loads: i64,
    shared_bytes: i64,
    worker_calls: i64,
    worker_inputs: i64,
    worker_tokens: i64,
    total_ms: f64,
    max_ms: f64,
    load_ms: f64,
    worker_ms: f64,
    /// Microseconds since 2000-01-01 (a `timestamptz`).
    last_call: i64,
}

/// src/stats.c's `PgEmbedEntry`.
#[repr(C)]
struct Entry {
    name: [c_char; 64],
    source: [c_char; 256],
    c: Counters,
    stats_reset: i64,
}

/// src/stats.c's `PgEmbedRow`.
#[repr(C)]
struct Row {
    dboid: pg_sys::Oid,
    e: Entry,
}

// src/stats.c asserts the same sizes.
const _: () = assert!(std::mem::size_of::<Counters>() == 18 * 8);
const _: () = assert!(std::mem::size_of::<Entry>() == 64 + 256 + 19 * 8);
const _: () = assert!(std::mem::size_of::<Row>() == 8 + std::mem::size_of::<Entry>());

// Called through `guarded`: an ERROR raised in them becomes pgrx's panic, as for pg_sys calls.
unsafe extern "C-unwind" {
    fn pg_embed_stat_init();
    fn pg_embed_stat_scope() -> c_int;
    fn pg_embed_stat_add(dboid: pg_sys::Oid, name: *const c_char, source: *const c_char, d: *const Counters);
    fn pg_embed_stat_collect(rows: *mut *mut Row) -> c_int;
    fn pg_embed_stat_reset(dboid: pg_sys::Oid, name: *const c_char) -> c_int;
    fn pg_embed_stat_flush();
}

/// Runs a call into src/stats.c, turning an ERROR it raises into pgrx's panic.
fn guarded<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: called on the backend's own thread, as every Postgres function is.
    unsafe { pg_sys::ffi::pg_guard_ffi_boundary(f) }
}

/// What `embed.stat_models.scope` says: where the counts are kept.
fn scope() -> &'static str {
    // SAFETY: reads a value set once in _PG_init.
    match guarded(|| unsafe { pg_embed_stat_scope() }) {
        1 | 2 => "server",
        _ => "backend",
    }
}

/// How a call ended.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Ok,
    Error,
    Cancelled,
}

/// Counts waiting to be handed to src/stats.c, with what the slow-call log says.
struct Record {
    dboid: pg_sys::Oid,
    model: String,
    source: String,
    function: &'static str,
    outcome: Outcome,
    counters: Counters,
}

thread_local! {
    /// Records of calls that ended in an ERROR, kept until it is safe to hand them on.
    static DEFERRED: RefCell<Vec<Record>> = const { RefCell::new(Vec::new()) };
    /// Whether this process is a vectorize worker.
    static WORKER: Cell<bool> = const { Cell::new(false) };
}

/// Called from `_PG_init`: sets up where the counts are kept, and the transaction callback
/// that hands on the counts of failed calls.
pub fn init() {
    // SAFETY: _PG_init runs once per process, in the postmaster when preloaded.
    unsafe {
        guarded(|| pg_embed_stat_init());
        pg_sys::RegisterXactCallback(Some(at_transaction_end), std::ptr::null_mut());
    }
}

/// Marks this process as a vectorize worker: its calls are counted in the worker columns.
pub fn set_worker() {
    WORKER.set(true);
}

/// Makes a vectorize worker's counts visible server-wide (a worker never goes idle the way
/// a session does, when PostgreSQL flushes a backend's statistics). Outside a transaction.
pub fn flush_worker() {
    // SAFETY: a plain call between the worker's transactions.
    guarded(|| unsafe { pg_embed_stat_flush() });
}

#[pg_guard]
unsafe extern "C-unwind" fn at_transaction_end(event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    use pg_sys::XactEvent::*;
    // Before a commit (an error there aborts the transaction, which is safe) or in an abort.
    if matches!(event, XACT_EVENT_PRE_COMMIT | XACT_EVENT_PARALLEL_PRE_COMMIT | XACT_EVENT_ABORT | XACT_EVENT_PARALLEL_ABORT) {
        publish_deferred();
    }
}

fn publish_deferred() {
    if DEFERRED.with_borrow(|d| d.is_empty()) {
        return;
    }
    for record in DEFERRED.take() {
        record.publish();
    }
}

/// Microseconds since 2000-01-01, as a `timestamptz` holds them.
fn now_timestamptz() -> i64 {
    const POSTGRES_EPOCH_UNIX_MICROS: i64 = 946_684_800_000_000;
    let unix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(unix.as_micros()).unwrap_or(i64::MAX) - POSTGRES_EPOCH_UNIX_MICROS
}

fn c_string(s: &str) -> CString {
    CString::new(s.replace('\0', "")).unwrap_or_default()
}

impl Record {
    fn publish(self) {
        if let Some(min) = guc::log_min_duration_ms() {
            if self.counters.calls > 0 && self.counters.total_ms >= min {
                self.log();
            }
        }
        if !guc::track_stats() {
            return;
        }
        let (name, source) = (c_string(&self.model), c_string(&self.source));
        // SAFETY: the strings and counts outlive the call; src/stats.c copies them.
        guarded(|| unsafe { pg_embed_stat_add(self.dboid, name.as_ptr(), source.as_ptr(), &self.counters) });
    }

    /// The slow-call log line: what was run and how it ended, never the input.
    fn log(&self) {
        let c = &self.counters;
        let outcome = match self.outcome {
            Outcome::Ok => "ok",
            Outcome::Error => "error",
            Outcome::Cancelled => "cancelled",
        };
        log!(
            "pg_embed: duration: {:.3} ms  model: {}  function: {}  inputs: {}  tokens: {}  truncated: {}  chunked: {}  outcome: {}",
            c.total_ms,
            self.model,
            self.function,
            c.inputs,
            c.tokens,
            c.truncated,
            c.chunked,
            outcome
        );
    }
}

/// The pipeline counters a call's counts are the difference of.
fn pipeline_counts(p: &Pipeline) -> [u64; 5] {
    let s = p.stats();
    [&s.inputs, &s.tokens, &s.truncated, &s.chunked, &s.forward_passes].map(|c| c.load(Relaxed))
}

/// One call of a model function, counted when it drops; derefs to the model's pipeline.
pub struct Call {
    model: String,
    source: String,
    function: &'static str,
    pipeline: Rc<Pipeline>,
    before: [u64; 5],
    started: Instant,
}

impl Call {
    pub fn new(model: &str, source: &str, function: &'static str, pipeline: Rc<Pipeline>) -> Call {
        publish_deferred();
        crate::error::take_cancel_note();
        let before = pipeline_counts(&pipeline);
        Call { model: model.to_string(), source: source.to_string(), function, pipeline, before, started: Instant::now() }
    }
}

impl std::ops::Deref for Call {
    type Target = Pipeline;

    fn deref(&self) -> &Pipeline {
        &self.pipeline
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        let ms = self.started.elapsed().as_secs_f64() * 1e3;
        let after = pipeline_counts(&self.pipeline);
        let d = |i: usize| after[i].saturating_sub(self.before[i]) as i64;
        let unwinding = std::thread::panicking();
        let outcome = match (unwinding, crate::error::take_cancel_note()) {
            (false, _) => Outcome::Ok,
            (true, true) => Outcome::Cancelled,
            (true, false) => Outcome::Error,
        };
        let worker = WORKER.get();
        let counters = Counters {
            calls: 1,
            inputs: d(0),
            tokens: d(1),
            truncated: d(2),
            chunked: d(3),
            forward_passes: d(4),
            errors: i64::from(outcome == Outcome::Error),
            cancels: i64::from(outcome == Outcome::Cancelled),
            total_ms: ms,
            max_ms: ms,
            worker_calls: i64::from(worker),
            worker_inputs: if worker { d(0) } else { 0 },
            worker_tokens: if worker { d(1) } else { 0 },
            worker_ms: if worker { ms } else { 0.0 },
            last_call: now_timestamptz(),
            ..Counters::default()
        };
        let record = Record {
            // SAFETY: a plain read of this backend's database.
            dboid: unsafe { pg_sys::MyDatabaseId },
            model: std::mem::take(&mut self.model),
            source: std::mem::take(&mut self.source),
            function: self.function,
            outcome,
            counters,
        };
        if unwinding {
            DEFERRED.with_borrow_mut(|d| d.push(record));
        } else {
            record.publish();
        }
    }
}

/// Counts a load of `model` (from `source`): its time and the bytes of weights it maps from
/// the shared file.
pub fn count_load(model: &str, source: &str, load_ms: f64, shared_bytes: usize) {
    publish_deferred();
    Record {
        // SAFETY: a plain read of this backend's database.
        dboid: unsafe { pg_sys::MyDatabaseId },
        model: model.to_string(),
        source: source.to_string(),
        function: "load",
        outcome: Outcome::Ok,
        counters: Counters {
            loads: 1,
            load_ms,
            shared_bytes: shared_bytes as i64,
            ..Counters::default()
        },
    }
    .publish();
}

fn text_of(chars: &[c_char]) -> String {
    // SAFETY: src/stats.c writes NUL-terminated strings (strlcpy) into these arrays.
    unsafe { CStr::from_ptr(chars.as_ptr()) }.to_string_lossy().into_owned()
}

fn timestamptz(micros: i64) -> Option<pgrx::datum::TimestampWithTimeZone> {
    (micros != 0).then(|| pgrx::datum::TimestampWithTimeZone::try_from(micros).ok()).flatten()
}

#[pg_schema]
mod embed {
    use super::*;

    /// Every row of the statistics (embed.stat_models reads it, adding the database name
    /// and the mean; it shows other databases' rows only to roles that may read all
    /// statistics).
    #[pg_extern(volatile, parallel_restricted, name = "_stat_models")]
    fn stat_models() -> TableIterator<
        'static,
        (
            name!(dbid, pg_sys::Oid),
            name!(model, String),
            name!(source, String),
            name!(scope, String),
            name!(calls, i64),
            name!(inputs, i64),
            name!(tokens, i64),
            name!(truncated_inputs, i64),
            name!(chunked_inputs, i64),
            name!(errors, i64),
            name!(cancels, i64),
            name!(total_ms, f64),
            name!(max_ms, f64),
            name!(forward_passes, i64),
            name!(loads, i64),
            name!(load_ms, f64),
            name!(shared_bytes, i64),
            name!(last_call, Option<pgrx::datum::TimestampWithTimeZone>),
            name!(worker_calls, i64),
            name!(worker_inputs, i64),
            name!(worker_tokens, i64),
            name!(worker_ms, f64),
            name!(stats_reset, Option<pgrx::datum::TimestampWithTimeZone>),
        ),
    > {
        publish_deferred();
        let mut rows: *mut Row = std::ptr::null_mut();
        // SAFETY: src/stats.c pallocs `n` rows (at least one slot) in this memory context.
        let n = guarded(|| unsafe { pg_embed_stat_collect(&mut rows) });
        // SAFETY: `rows` holds `n` rows.
        let all = unsafe { std::slice::from_raw_parts(rows, n.max(0) as usize) };
        let scope = scope().to_string();
        // SAFETY: reads the current role and database, and the role catalog.
        let all_databases = crate::catalog::is_admin()
            || unsafe { pg_sys::has_privs_of_role(pg_sys::GetUserId(), pg_sys::ROLE_PG_READ_ALL_STATS.into()) };
        let here = unsafe { pg_sys::MyDatabaseId };
        let out: Vec<_> = all
            .iter()
            .filter(|r| all_databases || r.dboid == here)
            .map(|r| {
                let c = &r.e.c;
                (
                    r.dboid,
                    text_of(&r.e.name),
                    text_of(&r.e.source),
                    scope.clone(),
                    c.calls,
                    c.inputs,
                    c.tokens,
                    c.truncated,
                    c.chunked,
                    c.errors,
                    c.cancels,
                    c.total_ms,
                    c.max_ms,
                    c.forward_passes,
                    c.loads,
                    c.load_ms,
                    c.shared_bytes,
                    timestamptz(c.last_call),
                    c.worker_calls,
                    c.worker_inputs,
                    c.worker_tokens,
                    c.worker_ms,
                    timestamptz(r.e.stats_reset),
                )
            })
            .collect();
        TableIterator::new(out)
    }

    /// Resets the statistics of `model` in this database (every model's when NULL): its
    /// counts start again from zero and `stats_reset` says when. Superuser or embed_admin.
    /// Returns how many rows were reset.
    #[pg_extern(volatile, parallel_unsafe)]
    fn stat_reset(model: default!(Option<&str>, "NULL")) -> i32 {
        if !crate::catalog::is_admin() {
            crate::error::raise(pg_embed_core::error::Error::PermissionDenied { action: "reset statistics" });
        }
        publish_deferred();
        let name = model.map(c_string);
        // SAFETY: the name outlives the call; NULL means every model.
        let name = name.as_ref().map_or(std::ptr::null(), |n| n.as_ptr());
        guarded(|| unsafe { pg_embed_stat_reset(pg_sys::MyDatabaseId, name) })
    }
}
