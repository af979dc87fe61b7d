//! Where a call's time goes, stage by stage, for the benchmarks (`bench/pipeline.rs` prints
//! it): each stage's thread-time summed over the compute threads. Off unless a benchmark
//! turns it on ([`start`]); off, a stage costs one relaxed load. On, each timed piece adds
//! two reads of the time-stamp counter (x86-64; the clock elsewhere) and an atomic add, a
//! few percent of the smallest products, so a benchmark measures its throughput with the
//! timers off and its breakdown in a run of its own.
//!
//! The stages are leaves (none holds another), so their sum is the time accounted for; the
//! rest of the threads' time (embedding lookup, pooling, copies, rotary positions, waits
//! between a team's steps, idle threads) is what [`stop`]'s caller gets by difference.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Instant;

/// A stage of a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Inputs to token ids.
    Tokenize,
    /// A product's input rows rounded to bfloat16 (and packed for the kernel).
    Round,
    /// The linear layers' multiply-adds: the kernel's loops (for `amx-bf16`, up to its tiles'
    /// sums in memory; for the vector kernels, with bias and residual).
    Products,
    /// `amx-bf16`'s sums finished into the output: bias, residual, the store.
    Store,
    /// The activation after a product (GELU, SiLU, ...), and a gated MLP's product of halves.
    Activation,
    /// Attention's Q K^T and P V (with its 1 / sum scaling).
    AttentionProducts,
    /// Attention's softmax (masks, exp, sums).
    Softmax,
    /// Layer and RMS norms.
    Norms,
}

impl Stage {
    pub const ALL: [Stage; 8] = [
        Stage::Tokenize,
        Stage::Round,
        Stage::Products,
        Stage::Store,
        Stage::Activation,
        Stage::AttentionProducts,
        Stage::Softmax,
        Stage::Norms,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Stage::Tokenize => "tokenize",
            Stage::Round => "round_inputs",
            Stage::Products => "products",
            Stage::Store => "store",
            Stage::Activation => "activation",
            Stage::AttentionProducts => "attention_products",
            Stage::Softmax => "softmax",
            Stage::Norms => "norms",
        }
    }
}

static ON: AtomicBool = AtomicBool::new(false);
/// Each stage's ticks (`ticks`) since `start`, one row of counters per thread slot (a
/// thread adds to its own row, so threads do not fight over one cache line).
static TICKS: [Row; SLOTS] = [const { Row([const { AtomicU64::new(0) }; Stage::ALL.len()]) }; SLOTS];
const SLOTS: usize = 64;

#[repr(align(128))]
struct Row([AtomicU64; Stage::ALL.len()]);

thread_local! {
    /// This thread's row of `TICKS`.
    static SLOT: usize = {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        NEXT.fetch_add(1, Relaxed) % SLOTS
    };
}

/// Adds to this thread's counter with a plain load and store: a locked add would wait for
/// the thread's earlier stores (an AMX product's tile stores) and cost the overlap it
/// measures (seen: 20-30% longer batches). Only this thread writes its row (past `SLOTS`
/// threads two may share one and lose counts: timers are for benchmarks).
#[inline(always)]
fn add(stage: Stage, ticks: u64) {
    SLOT.with(|&slot| {
        let counter = &TICKS[slot].0[stage as usize];
        counter.store(counter.load(Relaxed).wrapping_add(ticks), Relaxed)
    });
}
/// When the timers were started: the clock and the ticks.
static STARTED: std::sync::Mutex<Option<(Instant, u64)>> = std::sync::Mutex::new(None);

/// A monotonic count: the time-stamp counter on x86-64 (constant-rate on the CPUs that
/// have AVX-512), nanoseconds since the first call elsewhere.
#[inline(always)]
fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: rdtsc reads a counter; no memory is touched.
    unsafe {
        std::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// `f`, its time added to `stage` when the timers are on.
#[inline(always)]
pub fn time<R>(stage: Stage, f: impl FnOnce() -> R) -> R {
    if !ON.load(Relaxed) {
        return f();
    }
    let t0 = ticks();
    let r = f();
    add(stage, ticks().wrapping_sub(t0));
    r
}

/// A stage timed until dropped (for a piece of code that is not one closure).
pub struct Timer(Option<(Stage, u64)>);

impl Timer {
    #[inline(always)]
    pub fn start(stage: Stage) -> Timer {
        Timer(ON.load(Relaxed).then(|| (stage, ticks())))
    }
}

impl Drop for Timer {
    #[inline(always)]
    fn drop(&mut self) {
        if let Some((stage, t0)) = self.0 {
            add(stage, ticks().wrapping_sub(t0));
        }
    }
}

/// Zeroes the stages' times and turns the timers on (for the whole process).
pub fn start() {
    for n in TICKS.iter().flat_map(|row| &row.0) {
        n.store(0, Relaxed);
    }
    *STARTED.lock().unwrap_or_else(|e| e.into_inner()) = Some((Instant::now(), ticks()));
    ON.store(true, Relaxed);
}

/// Turns the timers off; each stage's thread-seconds since [`start`] (ticks converted at
/// the rate they ran at meanwhile).
pub fn stop() -> Vec<(Stage, f64)> {
    ON.store(false, Relaxed);
    let started = STARTED.lock().unwrap_or_else(|e| e.into_inner()).take();
    let per_tick = started.map_or(0.0, |(clock, t0)| {
        clock.elapsed().as_secs_f64() / ticks().wrapping_sub(t0).max(1) as f64
    });
    let total = |s: Stage| TICKS.iter().map(|row| row.0[s as usize].load(Relaxed)).sum::<u64>();
    Stage::ALL.iter().map(|&s| (s, total(s) as f64 * per_tick)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // (The timers are the process's: other tests running meanwhile may add to any stage,
    // so only a lower bound can be asserted.)
    #[test]
    fn timed_work_is_counted_while_on() {
        start();
        let v = time(Stage::Softmax, || {
            std::thread::sleep(std::time::Duration::from_millis(5));
            7
        });
        assert_eq!(v, 7);
        let times = stop();
        let softmax = times.iter().find(|(t, _)| *t == Stage::Softmax).map(|(_, secs)| *secs);
        assert!(softmax.is_some_and(|s| s >= 0.005), "{times:?}");
        assert_eq!(times.len(), Stage::ALL.len());
    }
}
