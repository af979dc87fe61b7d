//! The intra-op thread pool of this backend: `pg_embed.threads` threads for candle's
//! matrix products and parallel ops. Plain Rust; the SQL layer passes the setting in.
//!
//! Each backend has its own pool, built on first use and rebuilt when the setting changes.
//! candle sizes its GEMM work split from RAYON_NUM_THREADS, so that is set to the same
//! count, and the work runs inside the pool, so no more than that many threads compute for
//! this backend. The pool's threads run Rust only; they never call into Postgres.

use std::cell::RefCell;

use crate::error::{Error, Result};

thread_local! {
    static POOL: RefCell<Option<(usize, std::sync::Arc<rayon::ThreadPool>)>> = const { RefCell::new(None) };
}

/// Runs `work` with `threads` compute threads (at least 1).
pub fn run<T: Send>(threads: usize, work: impl FnOnce() -> T + Send) -> Result<T> {
    let threads = threads.max(1);
    let pool = POOL.with_borrow_mut(|slot| -> Result<_> {
        match slot {
            Some((n, pool)) if *n == threads => Ok(pool.clone()),
            _ => {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .thread_name(|i| format!("pg_embed-{i}"))
                    .build()
                    .map_err(|e| {
                        Error::Inference(format!("could not start {threads} compute threads: {e}"))
                    })?;
                let pool = std::sync::Arc::new(pool);
                *slot = Some((threads, pool.clone()));
                // candle splits each GEMM into this many parts.
                // SAFETY-free in edition 2021; set while no other thread of ours reads it.
                std::env::set_var("RAYON_NUM_THREADS", threads.to_string());
                Ok(pool)
            }
        }
    })?;
    Ok(pool.install(work))
}

/// The default thread count: the machine's cores.
pub fn available() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
