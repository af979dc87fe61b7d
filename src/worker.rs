//! The background workers of `embed.vectorize`: `pg_embed.workers` per database, each a
//! loop of `embed._vectorize_step()` (one batch: claim, embed, write, delete; sql/
//! vectorize.sql), one transaction per batch. They are registered dynamically (so
//! `shared_preload_libraries` is optional), restarted by the postmaster a second after a
//! crash or `pg_terminate_backend`, and with pg_embed preloaded a launcher starts them at
//! server start. An ERROR in a batch is caught, its transaction aborted, and the loop goes on.

use std::cell::Cell;
use std::time::Duration;

use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags};
use pgrx::prelude::*;

use crate::guc;

/// `backend_type` of the workers in pg_stat_activity.
const WORKER_TYPE: &str = "pg_embed vectorize";
/// Advisory lock keys (first half): the launch of a database's workers, and a worker's slot.
const LAUNCH_LOCK: i64 = 1_701_667_943;
const SLOT_LOCK: i32 = 1_701_667_944;
/// How long an idle worker sleeps between looks at the queue (a write wakes nobody: the
/// queue is a table).
const IDLE: Duration = Duration::from_millis(200);

thread_local! {
    /// Whether this session has made sure its database's workers run.
    static LAUNCHED: Cell<bool> = const { Cell::new(false) };
}

/// The role the caller acts as (SET ROLE included), even inside a SECURITY DEFINER
/// function: who `embed.vectorize` records as the writer.
#[pg_extern(stable, parallel_safe, schema = "embed", name = "_outer_role")]
fn outer_role() -> pg_sys::Oid {
    // SAFETY: reads a backend global.
    unsafe { pg_sys::GetOuterUserId() }
}

/// Starts this database's missing workers (up to `pg_embed.workers`); once per session
/// unless `always`. With `always`, waits until each started worker runs. Returns how many
/// were started.
#[pg_extern(volatile, parallel_unsafe, schema = "embed", name = "_vectorize_launch")]
fn vectorize_launch(always: bool) -> i32 {
    // SAFETY: reads a backend global.
    let in_worker = unsafe { pg_sys::MyBackendType } == pg_sys::BackendType::B_BG_WORKER;
    if in_worker || (!always && LAUNCHED.get()) {
        return 0;
    }
    LAUNCHED.set(true);
    let wanted = guc::workers();
    if wanted == 0 {
        return 0;
    }
    // SAFETY: reads a backend global.
    let db = unsafe { pg_sys::MyDatabaseId };
    // One launcher at a time per database, held only while it launches (a session lock, not
    // a transaction's: vectorize_wait's transaction lasts as long as it waits). A session
    // that finds another launching leaves it to that one.
    let key = LAUNCH_LOCK + i64::from(db.to_u32());
    let locked = Spi::get_one_with_args::<bool>("SELECT pg_try_advisory_lock($1)", &[key.into()])
        .unwrap_or_else(|e| error!("{e}"));
    if locked != Some(true) {
        return 0;
    }
    let started = launch(db, wanted, always);
    Spi::run_with_args("SELECT pg_advisory_unlock($1)", &[key.into()]).unwrap_or_else(|e| error!("{e}"));
    started
}

fn launch(db: pg_sys::Oid, wanted: i32, always: bool) -> i32 {
    let running = Spi::get_one_with_args::<i64>(
        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = $1 AND datid = $2",
        &[WORKER_TYPE.into(), db.into()],
    )
    .unwrap_or_else(|e| error!("{e}"))
    .unwrap_or(0);
    let mut started = 0;
    for _ in running..i64::from(wanted) {
        match start_worker(db, always) {
            Ok(()) => started += 1,
            Err(why) => {
                warning!("could not start a pg_embed vectorize worker: {why}");
                break;
            }
        }
    }
    started
}

fn start_worker(db: pg_sys::Oid, wait: bool) -> Result<(), String> {
    let mut builder = BackgroundWorkerBuilder::new(&format!("pg_embed vectorize worker (database {})", db.to_u32()))
        .set_type(WORKER_TYPE)
        .set_library("pg_embed")
        .set_function("pg_embed_vectorize_main")
        .set_argument(Some(pg_sys::Datum::from(db.to_u32())))
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(Some(Duration::from_secs(1)));
    if wait {
        // SAFETY: reads a backend global.
        builder = builder.set_notify_pid(unsafe { pg_sys::MyProcPid });
    }
    let worker = builder.load_dynamic().map_err(|_| "no background worker slot is free (max_worker_processes)".to_string())?;
    if wait {
        worker.wait_for_startup().map_err(|status| format!("the worker did not start: {status:?}"))?;
    }
    Ok(())
}

/// A worker of one database (the argument: its OID). Holds one of the database's
/// `pg_embed.workers` slots (a session advisory lock) or leaves; then runs batches until
/// SIGTERM, when it exits with code 1 so that the postmaster starts it again (a server
/// shutdown does not).
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pg_embed_vectorize_main(arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let db = pg_sys::Oid::from(arg.value() as u32);
    if !database_exists(db) {
        // Dropped: leave with exit code 0 (not restarted). Connecting would fail with FATAL,
        // exit code 1, and the postmaster would start the worker again every second.
        log!("pg_embed vectorize worker: database {} no longer exists; leaving", db.to_u32());
        return;
    }
    BackgroundWorker::connect_worker_to_spi_by_oid(Some(db), None);
    let Some(slot) = BackgroundWorker::transaction(claim_slot) else {
        // The database has its workers, or no pg_embed: nothing to do (exit 0: not restarted).
        return;
    };
    log!("pg_embed vectorize worker {slot} of database {} started", db.to_u32());
    crate::stats::set_worker();
    loop {
        if BackgroundWorker::sigterm_received() {
            terminate(db);
        }
        if BackgroundWorker::sighup_received() {
            // SAFETY: reloads the configuration, as a backend does between statements.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        // Read each time: a reload (SIGHUP, above) may have changed it.
        let done = step(guc::worker_threads());
        crate::stats::flush_worker();
        match done {
            Ok(n) if n > 0 => continue,
            Ok(_) => {}
            Err(message) => {
                if !BackgroundWorker::transaction(installed) {
                    // DROP EXTENSION pg_embed: nothing left to do here (exit 0: not restarted).
                    log!("pg_embed vectorize worker {slot}: pg_embed is no longer installed; leaving");
                    return;
                }
                log!("pg_embed vectorize worker {slot}: {message}");
            }
        }
        // False when SIGTERM came (the call consumes it).
        if !BackgroundWorker::wait_latch(Some(IDLE)) {
            terminate(db);
        }
    }
}

/// Ends the worker after SIGTERM: pg_terminate_backend, or a server shutdown (which
/// restarts nothing). Exit code 1 asks the postmaster to start it again, unless the database
/// is being dropped (DROP DATABASE holds its lock while it ends the sessions).
fn terminate(db: pg_sys::Oid) -> ! {
    let dropping = BackgroundWorker::transaction(|| {
        Spi::get_one_with_args::<bool>(
            "SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'object' AND classid = 'pg_database'::regclass
                AND objid = $1 AND mode = 'AccessExclusiveLock' AND granted)",
            &[db.into()],
        )
    });
    let code = if matches!(dropping, Ok(Some(true))) { 0 } else { 1 };
    // SAFETY: ends this process; code 1 asks to be restarted.
    unsafe { pg_sys::proc_exit(code) };
    // (PostgreSQL 15's headers declare proc_exit noreturn, later ones do not.)
    #[allow(unreachable_code)]
    {
        unreachable!("proc_exit returned")
    }
}

/// Whether database `db` exists, seen from its directory under the data directory (the
/// working directory of every server process): `base/<oid>`, or `pg_tblspc/*/*/<oid>` for a
/// database in another tablespace. Read before connecting, when no catalog can be read.
fn database_exists(db: pg_sys::Oid) -> bool {
    let oid = db.to_u32().to_string();
    if std::path::Path::new("base").join(&oid).is_dir() {
        return true;
    }
    let dirs = |p: &std::path::Path| std::fs::read_dir(p).into_iter().flatten().flatten().map(|e| e.path());
    dirs(std::path::Path::new("pg_tblspc")).any(|space| dirs(&space).any(|version| version.join(&oid).is_dir()))
}

/// The first free slot of this database's workers, or None (all taken, or no pg_embed here).
fn claim_slot() -> Option<i32> {
    if !installed() {
        return None;
    }
    (0..guc::workers()).find(|slot| {
        Spi::get_one_with_args::<bool>("SELECT pg_try_advisory_lock($1, $2)", &[SLOT_LOCK.into(), (*slot).into()])
            .ok()
            .flatten()
            == Some(true)
    })
}

/// Whether pg_embed's vectorize tables exist in this database.
fn installed() -> bool {
    Spi::get_one::<bool>("SELECT to_regclass('embed.vectorizers') IS NOT NULL").ok().flatten() == Some(true)
}

/// One batch in its own transaction; an ERROR is caught and its transaction aborted.
fn step(threads: i32) -> Result<i32, String> {
    report(pg_sys::BackendState::STATE_RUNNING, c"SELECT embed._vectorize_step()");
    let done = run_step(threads);
    report(pg_sys::BackendState::STATE_IDLE, c"");
    done
}

/// What pg_stat_activity shows of this worker (state and query).
fn report(state: pg_sys::BackendState::Type, query: &std::ffi::CStr) {
    // SAFETY: updates this backend's own activity entry.
    unsafe { pg_sys::pgstat_report_activity(state, query.as_ptr()) };
}

fn run_step(threads: i32) -> Result<i32, String> {
    let run = move || {
        BackgroundWorker::transaction(move || {
            Spi::run(&format!("SET LOCAL pg_embed.threads = {threads}"))?;
            Spi::get_one::<i32>("SELECT embed._vectorize_step()").map(|n| n.unwrap_or(0))
        })
    };
    PgTryBuilder::new(|| run().map_err(|e| e.to_string()))
        .catch_others(|caught| {
            // SAFETY: the transaction the batch ran in is left in an aborted state by the
            // ERROR; this is what a worker's error recovery does (postgres.c does the same).
            unsafe {
                pg_sys::AbortCurrentTransaction();
                pg_sys::FlushErrorState();
            }
            Err(match caught {
                pg_sys::panic::CaughtError::PostgresError(e)
                | pg_sys::panic::CaughtError::ErrorReport(e)
                | pg_sys::panic::CaughtError::RustPanic { ereport: e, .. } => e.message().to_string(),
            })
        })
        .execute()
}

/// With pg_embed in `shared_preload_libraries`: a launcher, started once the server accepts
/// connections, that starts a worker for every database that allows connections (a worker
/// in a database without pg_embed leaves at once, and is not restarted).
pub fn register_launcher() {
    BackgroundWorkerBuilder::new("pg_embed vectorize launcher")
        .set_type("pg_embed vectorize launcher")
        .set_library("pg_embed")
        .set_function("pg_embed_vectorize_launcher")
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(None)
        .load();
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pg_embed_vectorize_launcher(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGTERM);
    BackgroundWorker::connect_worker_to_spi(Some("postgres"), None);
    let databases: Vec<pg_sys::Oid> = BackgroundWorker::transaction(|| {
        Spi::connect(|client| {
            client
                .select("SELECT oid FROM pg_database WHERE datallowconn AND NOT datistemplate", None, &[])?
                .map(|row| row.get::<pg_sys::Oid>(1).map(|o| o.unwrap_or(pg_sys::InvalidOid)))
                .collect::<Result<Vec<_>, _>>()
        })
    })
    .unwrap_or_default();
    for db in databases {
        for _ in 0..guc::workers() {
            if let Err(why) = start_worker(db, false) {
                log!("pg_embed vectorize launcher: {why}");
            }
        }
    }
}
