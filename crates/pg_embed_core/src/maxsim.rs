//! MaxSim, the late-interaction score of ColBERT: for a query of `m` rows and a document of
//! `n` rows (vectors of `dim` values each), the sum over the query rows of the largest dot
//! product of that row with any document row. No normalization: the rows are used as given.
//!
//! The numbers: every dot product is summed in float64 over the dimensions in order. The
//! product of two float32 values is exact in float64, so a fused multiply-add and a multiply
//! then an add round the same way, and each dot product is one fixed sequence of float64
//! additions on every path. The row maxima are exact; their sum is taken in float64 in row
//! order and rounded to float32 once. So the result is the float64 MaxSim to within float64
//! rounding, rounded to float32 (about 6e-8 relative where the sum does not cancel), and
//! every kernel gives the same bits.
//!
//! The kernel is blocked, with no product matrix in memory: the query is converted once into
//! panels of 8 rows (the 8 float64 lanes of a 512-bit vector, dimension-major), the document
//! is read 4 rows at a time (converted to float64 in a small buffer), and a
//! tile of 4 document rows times up to 4 query panels (16 accumulators of 8 lanes) runs over
//! the dimensions; the tile's 4 dot products per query row then update that row's running
//! maximum. The last group of document rows is filled with copies of its last row (a
//! repeated row changes no maximum); the padding lanes of the last query panel are dropped.
//!
//! Run-time dispatch (`crate::cpu`, capped by `PG_EMBED_CPU`): [`Kernel::Avx512`] (AVX-512F
//! intrinsics) where the CPU has AVX-512, else [`Kernel::Portable`]: the same blocks in
//! plain Rust, compiled by `layers`' `dispatch!` for AVX2 + FMA where the CPU has it and for
//! the baseline otherwise. A NaN in a dot product makes its row's maximum, and so the
//! result, NaN (as numpy's `max`).

use std::cell::RefCell;

/// float64 lanes per query panel (one 512-bit vector).
const LANES: usize = 8;
/// Document rows per tile.
const ROWS: usize = 4;
/// Query panels per tile, at most.
const PANELS: usize = 4;
/// Multiply-adds between two looks at the stop probe of [`maxsim_until`] (half a
/// millisecond of work on one core with AVX-512, a few without).
const CHECK_EVERY: usize = 1 << 24;
/// Scratch kept on a thread between calls (bytes); more is released after the call.
const KEEP_SCRATCH: usize = 4 << 20;

/// Which code computes MaxSim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// AVX-512F intrinsics (x86-64 CPUs with AVX-512 F, VL and DQ).
    Avx512,
    /// Plain Rust (auto-vectorized for AVX2 + FMA where the CPU has it).
    Portable,
}

impl Kernel {
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Avx512 => "avx512",
            Kernel::Portable => "portable",
        }
    }

    /// Whether this CPU (as `PG_EMBED_CPU` caps it) can run the kernel.
    pub fn available(self) -> bool {
        match self {
            Kernel::Avx512 => cfg!(target_arch = "x86_64") && crate::cpu::cpu().avx512,
            Kernel::Portable => true,
        }
    }
}

/// The kernel [`maxsim`] uses on this CPU.
pub fn kernel() -> Kernel {
    if Kernel::Avx512.available() {
        Kernel::Avx512
    } else {
        Kernel::Portable
    }
}

/// MaxSim of `query` (`query_rows` x `dim`, row-major) and `document` (`document_rows` x
/// `dim`): the sum over query rows of the largest dot product with a document row. 0 when
/// either side has no rows.
///
/// # Panics
/// When a slice's length is not its rows times `dim` (a caller's bug).
pub fn maxsim(query: &[f32], query_rows: usize, document: &[f32], document_rows: usize, dim: usize) -> f32 {
    maxsim_with(kernel(), query, query_rows, document, document_rows, dim, &|| false).unwrap_or(f32::NAN)
}

/// [`maxsim`] that asks `stop` whether to give up first and then about every 16 million
/// multiply-adds (milliseconds): `None` when it did.
pub fn maxsim_until(
    query: &[f32],
    query_rows: usize,
    document: &[f32],
    document_rows: usize,
    dim: usize,
    stop: &dyn Fn() -> bool,
) -> Option<f32> {
    maxsim_with(kernel(), query, query_rows, document, document_rows, dim, stop)
}

/// [`maxsim_until`] on a chosen kernel (tests and benchmarks compare them); one the CPU
/// cannot run falls back to [`Kernel::Portable`].
pub fn maxsim_with(
    kernel: Kernel,
    query: &[f32],
    query_rows: usize,
    document: &[f32],
    document_rows: usize,
    dim: usize,
    stop: &dyn Fn() -> bool,
) -> Option<f32> {
    assert_eq!(query.len(), query_rows * dim, "maxsim: query is not {query_rows} rows of {dim}");
    assert_eq!(document.len(), document_rows * dim, "maxsim: document is not {document_rows} rows of {dim}");
    if query_rows == 0 || document_rows == 0 {
        return Some(0.0);
    }
    let kernel = if kernel.available() { kernel } else { Kernel::Portable };
    SCRATCH.with_borrow_mut(|s| {
        let panels = query_rows.div_ceil(LANES);
        s.query.clear();
        s.query.resize(panels * dim * LANES, 0.0);
        pack_query(query, query_rows, dim, &mut s.query);
        s.doc.clear();
        s.doc.resize(dim * ROWS, 0.0);
        s.max.clear();
        s.max.resize(panels * LANES, f64::NEG_INFINITY);
        let work_per_group = panels * LANES * ROWS * dim.max(1);
        // The probe is asked first, then after every CHECK_EVERY multiply-adds.
        let mut since_check = CHECK_EVERY;
        let mut stopped = false;
        for first in (0..document_rows).step_by(ROWS) {
            if since_check >= CHECK_EVERY {
                since_check = 0;
                if stop() {
                    stopped = true;
                    break;
                }
            }
            since_check += work_per_group;
            pack_document(document, document_rows, dim, first, &mut s.doc);
            for p0 in (0..panels).step_by(PANELS) {
                let count = PANELS.min(panels - p0);
                let q = &s.query[p0 * dim * LANES..(p0 + count) * dim * LANES];
                let max = &mut s.max[p0 * LANES..(p0 + count) * LANES];
                match kernel {
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: the CPU has AVX-512F (`available`); the slices hold `count`
                    // panels of `dim` x 8, ROWS x `dim` and `count` x 8 values.
                    Kernel::Avx512 => unsafe { avx512::tile(count, dim, q, &s.doc, max) },
                    _ => portable_tile(count, dim, q, &s.doc, max),
                }
            }
        }
        // The sum of the row maxima in row order (the padding lanes are not rows).
        let total = s.max[..query_rows].iter().sum::<f64>();
        let release = (s.query.capacity() + s.doc.capacity() + s.max.capacity()) * 8 > KEEP_SCRATCH;
        if release {
            *s = Scratch::default();
        }
        (!stopped).then_some(total as f32)
    })
}

#[derive(Default)]
struct Scratch {
    /// The query in panels: [panel][dim][8 rows].
    query: Vec<f64>,
    /// The current group of document rows: [ROWS rows][dim].
    doc: Vec<f64>,
    /// The running maximum of each query row (panels x 8).
    max: Vec<f64>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// The query as float64 panels of 8 rows, dimension-major; rows past the last are 0.
fn pack_query(query: &[f32], rows: usize, dim: usize, out: &mut [f64]) {
    for (i, row) in query.chunks_exact(dim.max(1)).take(rows).enumerate() {
        let panel = &mut out[(i / LANES) * dim * LANES..];
        for (k, &v) in row.iter().enumerate() {
            panel[k * LANES + i % LANES] = v as f64;
        }
    }
}

/// Document rows `first..first + ROWS` as float64 rows; a row past the last is a copy of
/// the last.
fn pack_document(document: &[f32], rows: usize, dim: usize, first: usize, out: &mut [f64]) {
    for (r, out) in out.chunks_exact_mut(dim.max(1)).take(ROWS).enumerate() {
        let j = (first + r).min(rows - 1);
        for (o, &v) in out.iter_mut().zip(&document[j * dim..(j + 1) * dim]) {
            *o = v as f64;
        }
    }
}

/// The larger of the running maximum `m` and `v`, NaN once either is NaN (what
/// `_mm512_max_pd(v, m)` then a masked move of a NaN `v` give, signed zeros included).
#[inline(always)]
fn max_nan(m: f64, v: f64) -> f64 {
    if v.is_nan() {
        v
    } else if v > m {
        // (false when m is NaN: m stays)
        v
    } else {
        m
    }
}

/// The portable tile: `count` query panels (at most PANELS) against the ROWS document rows in
/// `doc`, into `max` (count x 8), a panel at a time (ROWS x 8 accumulators fit the 16
/// registers of AVX2).
fn portable_tile(count: usize, dim: usize, query: &[f64], doc: &[f64], max: &mut [f64]) {
    for c in 0..count {
        panel(dim, &query[c * dim * LANES..(c + 1) * dim * LANES], doc, &mut max[c * LANES..(c + 1) * LANES]);
    }
}

dispatch! {
    /// One query panel against the ROWS document rows in `doc`, into `max` (8 values): each
    /// lane of each accumulator is one dot product, summed over the dimensions in order.
    fn panel(dim: usize, query: &[f64], doc: &[f64], max: &mut [f64]) {
        let mut acc = [[0f64; LANES]; ROWS];
        let query = &query[..dim * LANES];
        let doc = &doc[..dim * ROWS];
        for (k, q) in query.chunks_exact(LANES).enumerate() {
            for r in 0..ROWS {
                let d = doc[r * dim + k];
                for l in 0..LANES {
                    acc[r][l] += q[l] * d;
                }
            }
        }
        let max = &mut max[..LANES];
        for row in &acc {
            for l in 0..LANES {
                max[l] = max_nan(max[l], row[l]);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{LANES, ROWS};
    use std::arch::x86_64::*;

    /// `count` (1 to PANELS) query panels against the ROWS document rows in `doc`, into `max`.
    ///
    /// # Safety
    /// The CPU has AVX-512F; `query` holds `count` panels of `dim` x 8, `doc` ROWS x `dim`
    /// and `max` `count` x 8 values.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn tile(count: usize, dim: usize, query: &[f64], doc: &[f64], max: &mut [f64]) {
        debug_assert!(query.len() >= count * dim * LANES && doc.len() >= dim * ROWS && max.len() >= count * LANES);
        // SAFETY: as the caller promises.
        unsafe {
            match count {
                1 => tile_c::<1>(dim, query.as_ptr(), doc.as_ptr(), max.as_mut_ptr()),
                2 => tile_c::<2>(dim, query.as_ptr(), doc.as_ptr(), max.as_mut_ptr()),
                3 => tile_c::<3>(dim, query.as_ptr(), doc.as_ptr(), max.as_mut_ptr()),
                _ => tile_c::<4>(dim, query.as_ptr(), doc.as_ptr(), max.as_mut_ptr()),
            }
        }
    }

    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn tile_c<const C: usize>(dim: usize, query: *const f64, doc: *const f64, max: *mut f64) {
        // SAFETY: the pointers are valid for the reads and writes below (`tile`'s caller).
        unsafe {
            let mut acc = [[_mm512_setzero_pd(); C]; ROWS];
            for k in 0..dim {
                let mut q = [_mm512_setzero_pd(); C];
                for (c, qc) in q.iter_mut().enumerate() {
                    *qc = _mm512_loadu_pd(query.add((c * dim + k) * LANES));
                }
                for (r, row) in acc.iter_mut().enumerate() {
                    let d = _mm512_set1_pd(*doc.add(r * dim + k));
                    for c in 0..C {
                        // Exact product, so the same sum as the portable multiply then add.
                        row[c] = _mm512_fmadd_pd(q[c], d, row[c]);
                    }
                }
            }
            for c in 0..C {
                let mut m = _mm512_loadu_pd(max.add(c * LANES));
                for row in &acc {
                    let v = row[c];
                    // max_pd(v, m) is m when either is NaN: then keep a NaN v.
                    let nan = _mm512_cmp_pd_mask::<_CMP_UNORD_Q>(v, v);
                    m = _mm512_mask_mov_pd(_mm512_max_pd(v, m), nan, v);
                }
                _mm512_storeu_pd(max.add(c * LANES), m);
            }
        }
    }
}

/// MaxSim computed the plain way (float64, a row pair at a time): the tests' and the
/// benchmark's reference.
/// `n` values in [-1, 1) from `seed` (a linear congruential generator): the inputs of the
/// tests and of bench/maxsim.rs.
#[doc(hidden)]
pub fn seeded(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        })
        .collect()
}

pub fn reference(query: &[f32], query_rows: usize, document: &[f32], document_rows: usize, dim: usize) -> f64 {
    if query_rows == 0 || document_rows == 0 {
        return 0.0;
    }
    (0..query_rows)
        .map(|i| {
            let q = &query[i * dim..(i + 1) * dim];
            (0..document_rows)
                .map(|j| {
                    let d = &document[j * dim..(j + 1) * dim];
                    q.iter().zip(d).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>()
                })
                .fold(f64::NEG_INFINITY, max_nan)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random(n: usize, seed: u64) -> Vec<f32> {
        super::seeded(n, seed)
    }

    fn every_kernel(query: &[f32], m: usize, doc: &[f32], n: usize, dim: usize) -> Vec<(Kernel, f32)> {
        [Kernel::Avx512, Kernel::Portable]
            .into_iter()
            .filter(|k| k.available())
            .map(|k| (k, maxsim_with(k, query, m, doc, n, dim, &|| false).unwrap()))
            .collect()
    }

    #[test]
    fn matches_the_float64_reference_on_awkward_sizes() {
        let mut seed = 1;
        for dim in [1, 15, 16, 17, 128, 130] {
            for m in [1, 2, 7, 8, 9, 31, 32, 33, 40] {
                for n in [1, 3, 4, 5, 17, 40] {
                    seed += 1;
                    let q = random(m * dim, seed);
                    let d = random(n * dim, seed + 1000);
                    let want = reference(&q, m, &d, n, dim);
                    let got = every_kernel(&q, m, &d, n, dim);
                    for &(k, v) in &got {
                        let err = (v as f64 - want).abs();
                        assert!(
                            err <= 1e-6 * want.abs().max(1e-3),
                            "{} m={m} n={n} dim={dim}: {v} vs {want}",
                            k.name()
                        );
                    }
                    // Every kernel gives the same bits.
                    assert!(got.windows(2).all(|w| w[0].1.to_bits() == w[1].1.to_bits()), "m={m} n={n} dim={dim}: {got:?}");
                    // And the reference rounded once, but for ties of rounding.
                    assert!((got[0].1 - want as f32).abs() <= f32::EPSILON * want.abs() as f32, "{got:?} {want}");
                }
            }
        }
    }

    #[test]
    fn every_row_count_from_1_to_40() {
        let dim = 17;
        for m in 1..=40 {
            for n in 1..=40 {
                let q = random(m * dim, (m * 100 + n) as u64);
                let d = random(n * dim, (m * 100 + n) as u64 + 7);
                let want = reference(&q, m, &d, n, dim);
                for (k, v) in every_kernel(&q, m, &d, n, dim) {
                    assert!((v as f64 - want).abs() <= 1e-6 * want.abs().max(1e-3), "{} m={m} n={n}: {v} vs {want}", k.name());
                }
            }
        }
    }

    #[test]
    fn exact_on_small_integers() {
        // Q = rows of the identity of 3 and (1, 1, 1); D = (2, 0, 0), (0, 3, 0), (1, 1, -5).
        let q = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0];
        let d = [2.0, 0.0, 0.0, 0.0, 3.0, 0.0, 1.0, 1.0, -5.0];
        // Row maxima: 2, 3, 0 (max of 0, 0, -5), 3.
        for (k, v) in every_kernel(&q, 4, &d, 3, 3) {
            assert_eq!(v, 8.0, "{}", k.name());
        }
        // Negative maxima are kept, not clipped at 0.
        assert_eq!(maxsim(&[-1.0, -1.0], 1, &[1.0, 2.0, 3.0, 0.5], 2, 2), -3.0);
    }

    #[test]
    fn the_same_bits_on_every_cpu_kind() {
        // ColBERT's shapes; `make test` runs this under every PG_EMBED_CPU cap the CPU allows.
        let (m, n, dim) = (32, 180, 128);
        let q = random(m * dim, 11);
        let d = random(n * dim, 12);
        let v = maxsim(&q, m, &d, n, dim);
        assert_eq!(v.to_bits(), 0x439f_5496, "{v} on {}", kernel().name());
    }

    #[test]
    fn empty_sides_give_zero() {
        let x = random(8, 1);
        assert_eq!(maxsim(&[], 0, &x, 2, 4), 0.0);
        assert_eq!(maxsim(&x, 2, &[], 0, 4), 0.0);
        assert_eq!(maxsim(&[], 0, &[], 0, 0), 0.0);
        assert_eq!(maxsim(&[], 0, &[], 0, 7), 0.0);
        // Rows of no values: every dot product is 0.
        assert_eq!(maxsim(&[], 3, &[], 2, 0), 0.0);
    }

    #[test]
    fn nan_and_infinity_propagate() {
        for k in [Kernel::Avx512, Kernel::Portable].into_iter().filter(|k| k.available()) {
            let run = |q: &[f32], d: &[f32]| maxsim_with(k, q, q.len() / 2, d, d.len() / 2, 2, &|| false).unwrap();
            assert!(run(&[1.0, 0.0, 0.0, 1.0], &[f32::NAN, 0.0, 1.0, 1.0]).is_nan(), "{}", k.name());
            assert!(run(&[1.0, 0.0, 0.0, 1.0], &[1.0, 1.0, f32::NAN, 0.0]).is_nan(), "{}", k.name());
            assert_eq!(run(&[1.0, 0.0], &[f32::INFINITY, 0.0, 1.0, 1.0]), f32::INFINITY, "{}", k.name());
            // float32 maxima whose float64 sum is beyond float32: infinity.
            assert_eq!(run(&[f32::MAX, 0.0, f32::MAX, 0.0], &[2.0, 0.0]), f32::INFINITY, "{}", k.name());
        }
    }

    #[test]
    fn a_stop_gives_none_and_no_stop_gives_the_value() {
        let (m, n, dim) = (64, 600, 128);
        let q = random(m * dim, 3);
        let d = random(n * dim, 4);
        assert_eq!(maxsim_until(&q, m, &d, n, dim, &|| true), None);
        let v = maxsim_until(&q, m, &d, n, dim, &|| false).unwrap();
        assert_eq!(v, maxsim(&q, m, &d, n, dim));
    }

    #[test]
    fn large_scratch_is_released() {
        let (m, dim) = (600, 1024);
        let q = random(m * dim, 5);
        let d = random(2 * dim, 6);
        let v = maxsim(&q, m, &d, 2, dim);
        assert!((v as f64 - reference(&q, m, &d, 2, dim)).abs() < 1e-3);
        SCRATCH.with_borrow(|s| assert_eq!(s.query.capacity(), 0));
    }
}
