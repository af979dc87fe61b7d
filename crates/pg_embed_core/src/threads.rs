//! The intra-op thread pool of this backend: `pg_embed.threads` threads for candle's
//! matrix products and parallel ops. Plain Rust; the SQL layer passes the setting in.
//!
//! Each backend has its own pool, built on first use and rebuilt when the setting changes.
//! candle sizes its GEMM work split from RAYON_NUM_THREADS, so that is set to the same
//! count, and the work runs inside the pool, so no more than that many threads compute for
//! this backend. The pool's threads run Rust only; they never call into Postgres.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::error::{Error, Result};

/// This thread's pool and the stop flag its threads read (see `interrupted`).
struct Pool {
    threads: usize,
    pool: std::sync::Arc<rayon::ThreadPool>,
    stop: std::sync::Arc<AtomicBool>,
    /// Set while the caller runs several batches (`keeping_buffers`).
    keep: std::sync::Arc<AtomicBool>,
}

thread_local! {
    static POOL: RefCell<Option<Pool>> = const { RefCell::new(None) };
    /// On a compute thread: its pool's stop flag.
    static STOP: RefCell<Option<std::sync::Arc<AtomicBool>>> = const { RefCell::new(None) };
    /// On a compute thread: its pool's keep flag.
    static KEEP: RefCell<Option<std::sync::Arc<AtomicBool>>> = const { RefCell::new(None) };
}

/// The process's interrupt probe: whether the caller has asked the work in progress to
/// stop (the SQL layer's reads Postgres's cancel and terminate flags). It must only read
/// memory: compute threads call it.
static PROBE: std::sync::OnceLock<fn() -> bool> = std::sync::OnceLock::new();

/// Sets the process's interrupt probe (once; later calls are ignored).
pub fn set_interrupt_probe(probe: fn() -> bool) {
    let _ = PROBE.set(probe);
}

/// Whether the work in progress should stop: on a compute thread of a `run` pool, its
/// pool's stop flag is set or the process's probe says so (elsewhere: never, so that work
/// no `run` wraps is never cut short). Long loops (attention's tasks, the products' row
/// blocks) test it and return early, leaving their output unfinished; `run` then returns
/// `Error::Cancelled` instead of the result, so nothing unfinished is used. A team's steps
/// still all run (empty), so no thread waits for one that left.
#[inline]
pub fn interrupted() -> bool {
    STOP.with_borrow(|s| s.as_deref().is_some_and(stopped))
}

/// Whether a pool whose stop flag is `stop` should stop: the flag, or the process's probe.
#[inline]
fn stopped(stop: &AtomicBool) -> bool {
    stop.load(Ordering::Relaxed) || PROBE.get().is_some_and(|probe| probe())
}

/// The stop flag of this thread's pool for `threads` threads (built if need be): setting
/// it stops the work that pool runs, as a cancel does (until cleared).
pub fn stop_flag(threads: usize) -> Result<std::sync::Arc<AtomicBool>> {
    pool(threads).map(|p| p.1)
}

/// Runs `work` with `threads` compute threads (at least 1). `Error::Cancelled` when it was
/// interrupted (`interrupted`) before it finished.
pub fn run<T: Send>(threads: usize, work: impl FnOnce() -> T + Send) -> Result<T> {
    let (pool, stop) = pool(threads)?;
    let out = pool.install(work);
    if stopped(&stop) {
        return Err(Error::Cancelled);
    }
    Ok(out)
}

/// Runs `work` (a call's batches, each on `threads` compute threads through `run`) with the
/// compute threads keeping their batch-sized buffers from one batch to the next
/// (`keeps_buffers`), then `release` on every compute thread to give them back, whatever
/// `work` returned. (Measured, MiniLM bfloat16 on 2 threads of a Sapphire Rapids: the
/// kernel's zeroing of fresh pages and the faults were 5-6% of a 2,000-sentence call
/// when each batch mapped its activations anew.)
pub fn keeping_buffers<T>(threads: usize, release: fn(), work: impl FnOnce() -> T) -> Result<T> {
    let (pool, _) = pool(threads)?;
    let keep = POOL.with_borrow(|slot| slot.as_ref().map(|p| p.keep.clone())).expect("the pool was just built");
    struct Release<'a>(&'a rayon::ThreadPool, &'a AtomicBool, fn());
    impl Drop for Release<'_> {
        fn drop(&mut self) {
            self.1.store(false, Ordering::Relaxed);
            let release = self.2;
            self.0.broadcast(|_| release());
        }
    }
    keep.store(true, Ordering::Relaxed);
    let _release = Release(&pool, &keep, release);
    Ok(work())
}

/// On a compute thread: whether its caller is inside `keeping_buffers` (a buffer too large
/// to keep between calls may be kept between batches).
#[inline]
pub fn keeps_buffers() -> bool {
    KEEP.with_borrow(|k| k.as_deref().is_some_and(|k| k.load(Ordering::Relaxed)))
}

/// This thread's pool of `threads` threads (at least 1), built or rebuilt as needed.
fn pool(threads: usize) -> Result<(std::sync::Arc<rayon::ThreadPool>, std::sync::Arc<AtomicBool>)> {
    let threads = threads.max(1);
    POOL.with_borrow_mut(|slot| -> Result<_> {
        match slot {
            Some(p) if p.threads == threads => Ok((p.pool.clone(), p.stop.clone())),
            _ => {
                fix_mmap_threshold();
                let stop = std::sync::Arc::new(AtomicBool::new(false));
                let keep = std::sync::Arc::new(AtomicBool::new(false));
                let (flag, keep_flag) = (stop.clone(), keep.clone());
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .thread_name(|i| format!("pg_embed-{i}"))
                    .start_handler(move |_| {
                        block_signals();
                        STOP.set(Some(flag.clone()));
                        KEEP.set(Some(keep_flag.clone()));
                    })
                    .build()
                    .map_err(|e| {
                        Error::Inference(format!("could not start {threads} compute threads: {e}"))
                    })?;
                let pool = std::sync::Arc::new(pool);
                *slot = Some(Pool { threads, pool: pool.clone(), stop: stop.clone(), keep });
                // candle splits each GEMM into this many parts.
                // SAFETY-free in edition 2021; set while no other thread of ours reads it.
                std::env::set_var("RAYON_NUM_THREADS", threads.to_string());
                Ok((pool, stop))
            }
        }
    })
}

/// Blocks the asynchronous signals on the calling compute thread, so that the process's
/// signals (Postgres's cancel, latch and shutdown signals) are delivered to the backend's
/// own thread and its handlers never run on a compute thread. Faults (SIGSEGV, SIGBUS,
/// SIGFPE, SIGILL, SIGTRAP, SIGABRT) stay unblocked: they belong to the thread that raises
/// them.
fn block_signals() {
    #[cfg(unix)]
    // SAFETY: a sigset_t on the stack, filled and changed by libc before use; the mask is
    // this thread's only.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        for fault in [libc::SIGSEGV, libc::SIGBUS, libc::SIGFPE, libc::SIGILL, libc::SIGTRAP, libc::SIGABRT] {
            libc::sigdelset(&mut set, fault);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Runs `f(i, block)` over the blocks of `block` items of `data` (the last may be shorter),
/// on up to the machine's cores (at most 8) when `data` is large: one-off conversions of a
/// model's weights while it is built (plain Rust; the threads block signals, as compute
/// threads do). Each block is given to exactly one call.
pub fn for_blocks<T: Send>(data: &mut [T], block: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    let block = block.max(1);
    let threads = available().min(8);
    if threads <= 1 || data.len() < 1 << 18 {
        data.chunks_mut(block).enumerate().for_each(|(i, b)| f(i, b));
        return;
    }
    let per = data.len().div_ceil(block).div_ceil(threads);
    std::thread::scope(|s| {
        for (t, part) in data.chunks_mut(per * block).enumerate() {
            let f = &f;
            s.spawn(move || {
                block_signals();
                part.chunks_mut(block).enumerate().for_each(|(j, b)| f(t * per + j, b));
            });
        }
    });
}

/// A thread of its own for plain-Rust work in the background (hashing, writing a file),
/// with the asynchronous signals blocked as on a compute thread.
pub fn spawn_quiet<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> std::thread::JoinHandle<T> {
    std::thread::spawn(move || {
        block_signals();
        f()
    })
}

/// The default thread count: the machine's cores.
pub fn available() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Keeps the allocator from holding on to batch-sized memory: glibc serves allocations above
/// its mmap threshold with mmap and unmaps them when freed, but by default raises that
/// threshold to the size of each large block freed (up to 32 MB), after which batch
/// activations come from the compute threads' heaps and stay resident when freed (measured:
/// RSS 128 MB after load, 188 MB after one 2,000-sentence batch, malloc_trim or not). A
/// fixed threshold of 1 MB (glibc's starting value is 128 kB) keeps every large block
/// mapped for its lifetime only. Set once per process, before the first model loads.
pub fn fix_mmap_threshold() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        // SAFETY: mallopt changes a glibc tunable; it has no other effect.
        ONCE.call_once(|| unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
        });
    }
}

/// Runs `f` (a model's build, on the calling thread) with the allocator keeping the memory
/// it frees for the next allocation instead of giving it back to the kernel at once, then
/// gives it all back: a build allocates and frees one tensor's buffers after another, and
/// fresh pages from the kernel must be zeroed first (measured: zeroing pages was a third of
/// a 1.5 B float32 model's build). The process's memory after `f` is what it was, less
/// what `f` keeps.
pub fn reusing_memory<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        struct Restore;
        impl Drop for Restore {
            fn drop(&mut self) {
                // SAFETY: glibc tunables and trim; no other effect.
                unsafe {
                    libc::mallopt(libc::M_MMAP_MAX, 65_536);
                    libc::mallopt(libc::M_TRIM_THRESHOLD, 128 << 10);
                    libc::malloc_trim(0);
                }
            }
        }
        fix_mmap_threshold();
        // SAFETY: glibc tunables; restored (and the memory trimmed) when `f` ends or unwinds.
        unsafe {
            libc::mallopt(libc::M_MMAP_MAX, 0);
            libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
        }
        let _restore = Restore;
        f()
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    f()
}

/// Asks for transparent huge pages over the whole 2 MB pages inside `v`'s allocation, before
/// it is written: a large buffer (a batch's activations) then faults in 2 MB at a time, not
/// 4 kB. Advice only: it changes how the pages are backed, never their contents. (Tried on
/// the weights at load too: no gain beyond noise, and the occasional compaction stall.)
pub fn huge_pages<T>(v: &Vec<T>) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let start = v.as_ptr() as usize;
        let end = start + v.capacity() * std::mem::size_of::<T>();
        let (from, to) = (start.next_multiple_of(HUGE), end / HUGE * HUGE);
        if to > from {
            // SAFETY: whole pages inside the vector's own allocation; advice only.
            unsafe {
                libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = v;
}

/// One thread of a team started by `team`.
pub struct Member<'a> {
    team: &'a Team,
    /// The next step this thread takes part in.
    step: Cell<usize>,
    /// How long this thread spins at its next wait before yielding its core.
    spins: Cell<u32>,
}

/// The shared state of a team: for each step, the next unclaimed chunk and the chunks done.
struct Team {
    count: usize,
    steps: Vec<Step>,
    poisoned: AtomicBool,
}

#[repr(align(128))]
#[derive(Default)]
struct Step {
    next: AtomicUsize,
    done: AtomicUsize,
}

/// Spins (pause instructions) before a waiting thread starts yielding its core: about 150
/// microseconds on CPUs whose pause takes ~140 cycles, longer than a step's last chunk takes
/// on a quiet machine. Once a wait has had to yield in a call, the thread spins only
/// `SHORT_SPINS` for the rest of it, so that teams of busy backends sharing few cores give
/// their cores to each other instead of spinning. Measured with bench/threads.sh (2 cores,
/// 2 threads per backend): a fixed 1 << 6 gave 3.7 ms single-call p50 and 193 rows/s for
/// two backends together, 1 << 10 2.8 ms and 165 rows/s, 1 << 14 2.6 ms and 174 rows/s.
const SPINS: u32 = 1 << 12;
const SHORT_SPINS: u32 = 1 << 6;

impl Member<'_> {
    /// The team's size.
    pub fn count(&self) -> usize {
        self.team.count
    }

    /// The team's next step: `f` over each of `chunks` chunks, each run by whichever thread
    /// claims it first; returns once every chunk is done, so what the step wrote is visible
    /// to the next. Every thread of the team calls `step` in the same order with the same
    /// `chunks`. A thread that arrives late finds the chunks claimed and passes on, so the
    /// team never waits for a thread that has not started. Panics when a chunk panicked in
    /// another thread, so that none waits forever.
    pub fn step(&self, chunks: usize, f: impl Fn(usize)) {
        let index = self.step.get();
        self.step.set(index + 1);
        let step = &self.team.steps[index];
        loop {
            let chunk = step.next.fetch_add(1, Ordering::AcqRel);
            if chunk >= chunks {
                break;
            }
            f(chunk);
            step.done.fetch_add(1, Ordering::Release);
        }
        let mut spins = 0u32;
        while step.done.load(Ordering::Acquire) < chunks {
            if self.team.poisoned.load(Ordering::Relaxed) {
                panic!("another compute thread of this call failed");
            }
            if spins < self.spins.get() {
                spins += 1;
                std::hint::spin_loop();
            } else {
                // The chunk's thread is off its core (other busy backends, most likely):
                // spin briefly for the rest of this call.
                self.spins.set(SHORT_SPINS);
                std::thread::yield_now();
            }
        }
    }
}

/// Runs `work` on up to every thread of the current rayon pool, as one team that goes
/// through `steps` steps together (`Member::step`): one wake-up per call instead of a fork
/// and join per step, and no thread ever waits for one that has not joined. A panic in one
/// thread makes the others panic at their next wait; rayon passes it on to the caller.
pub fn team(steps: usize, work: impl Fn(&Member) + Sync) {
    let team = Team {
        count: rayon::current_num_threads().max(1),
        steps: (0..steps).map(|_| Step::default()).collect(),
        poisoned: AtomicBool::new(false),
    };
    let join = || {
        let member = Member { team: &team, step: Cell::new(0), spins: Cell::new(SPINS) };
        let run = std::panic::AssertUnwindSafe(|| work(&member));
        if let Err(panic) = std::panic::catch_unwind(run) {
            team.poisoned.store(true, Ordering::Relaxed);
            std::panic::resume_unwind(panic);
        }
    };
    rayon::scope(|s| {
        for _ in 1..team.count {
            s.spawn(|_| join());
        }
        join();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_kept_between_batches_and_given_back_on_every_thread_after() {
        static RELEASED: AtomicUsize = AtomicUsize::new(0);
        fn release() {
            RELEASED.fetch_add(1, Ordering::Relaxed);
        }
        assert!(!run(2, keeps_buffers).unwrap(), "not kept outside a call's batches");
        let inside = keeping_buffers(2, release, || {
            assert_eq!(RELEASED.load(Ordering::Relaxed), 0);
            (run(2, keeps_buffers).unwrap(), run(2, keeps_buffers).unwrap())
        });
        assert_eq!(inside.unwrap(), (true, true), "kept in every batch");
        assert_eq!(RELEASED.load(Ordering::Relaxed), 2, "released once on each compute thread");
        assert!(!run(2, keeps_buffers).unwrap(), "not kept after");
        // Also when the batches fail.
        let failed: Result<Result<()>> = keeping_buffers(2, release, || Err(Error::Cancelled));
        assert!(matches!(failed, Ok(Err(Error::Cancelled))));
        assert_eq!(RELEASED.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn compute_threads_block_the_process_signals_but_not_faults() {
        let masks = run(2, || {
            use rayon::prelude::*;
            (0..2)
                .into_par_iter()
                .map(|_| {
                    // SAFETY: reads this thread's mask into a zeroed set.
                    unsafe {
                        let mut set: libc::sigset_t = std::mem::zeroed();
                        libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut set);
                        let blocked = |s| libc::sigismember(&set, s) == 1;
                        (blocked(libc::SIGINT), blocked(libc::SIGUSR1), blocked(libc::SIGTERM), blocked(libc::SIGSEGV))
                    }
                })
                .collect::<Vec<_>>()
        })
        .unwrap();
        assert_eq!(masks, vec![(true, true, true, false); 2]);
    }

    #[test]
    fn the_stop_flag_reaches_every_compute_thread_and_ends_the_work_as_cancelled() {
        use rayon::prelude::*;
        let stop = stop_flag(2).unwrap();
        let seen = AtomicUsize::new(0);
        let work = || {
            (0..8).into_par_iter().for_each(|_| {
                if interrupted() {
                    seen.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        stop.store(true, Ordering::Relaxed);
        let stopped = run(2, work);
        stop.store(false, Ordering::Relaxed);
        assert!(matches!(stopped, Err(Error::Cancelled)), "{stopped:?}");
        assert_eq!(seen.load(Ordering::Relaxed), 8);
        // Cleared, the same pool works again.
        seen.store(0, Ordering::Relaxed);
        run(2, work).unwrap();
        assert_eq!(seen.load(Ordering::Relaxed), 0);
        // The flag is the pool's: another pool (another backend's) does not see it.
        stop.store(true, Ordering::Relaxed);
        let other = std::thread::spawn(|| run(2, || rayon::current_num_threads()).map_err(|e| e.to_string()));
        let other = other.join().unwrap();
        stop.store(false, Ordering::Relaxed);
        assert_eq!(other, Ok(2));
    }

    #[test]
    fn a_team_runs_every_chunk_of_every_step_once_and_in_step_order() {
        let steps = 300;
        let runs: Vec<AtomicUsize> = (0..steps * 5).map(|_| AtomicUsize::new(0)).collect();
        let early = AtomicUsize::new(0);
        run(3, || {
            team(steps, |m| {
                for s in 0..steps {
                    m.step(5, |c| {
                        // Every chunk of the step before is done.
                        if s > 0 && (0..5).any(|c| runs[(s - 1) * 5 + c].load(Ordering::Relaxed) != 1) {
                            early.fetch_add(1, Ordering::Relaxed);
                        }
                        runs[s * 5 + c].fetch_add(1, Ordering::Relaxed);
                    });
                }
            })
        })
        .unwrap();
        assert!(runs.iter().all(|r| r.load(Ordering::Relaxed) == 1));
        assert_eq!(early.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn teams_that_share_a_pool_do_not_wait_for_each_other() {
        // Two callers on the global pool at once: each team finishes even if the other
        // holds every thread.
        let total = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    team(50, |m| {
                        for _ in 0..50 {
                            m.step(4, |_| {
                                total.fetch_add(1, Ordering::Relaxed);
                            });
                        }
                    })
                });
            }
        });
        assert_eq!(total.load(Ordering::Relaxed), 2 * 50 * 4);
    }

    #[test]
    fn a_panic_in_one_chunk_reaches_the_caller_and_frees_the_others() {
        let result = run(2, || {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                team(2, |m| {
                    m.step(2, |c| {
                        if c == 1 {
                            panic!("fails on purpose");
                        }
                        std::thread::sleep(std::time::Duration::from_millis(20));
                    });
                    m.step(2, |_| ());
                })
            }))
        })
        .unwrap();
        assert!(result.is_err());
        // The pool still works afterwards.
        assert_eq!(run(2, rayon::current_num_threads).unwrap(), 2);
    }
}
