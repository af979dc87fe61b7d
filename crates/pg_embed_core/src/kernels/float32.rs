//! The product of the linear layers, x W^T, on CPUs with AVX-512: the weight is packed once
//! at load into panels of 32 output columns (for each input index, 32 consecutive outputs:
//! two 512-bit lines), and a register tile of up to 12 rows x 32 columns runs the whole
//! inner dimension in 24 accumulators. Nothing is repacked per call, so small products (one
//! sentence: tens of rows) run as fast per row as large ones. Every output is one sequential
//! chain of fused multiply-adds over the inner index.
//!
//! On CPUs without AVX-512F, `layers::Linear` keeps torch's layout and uses the `gemm` crate.

use crate::stages::{Stage, Timer};

/// Output columns per panel: two 512-bit lines.
const NR: usize = 32;
/// Rows per register tile (2 x 12 accumulators, 2 weight lines and a broadcast: 27 of the 32
/// vector registers).
const MR: usize = 12;
/// Rows per block: the block's inputs stay in L1/L2 while every panel passes over them.
/// Measured on the bench corpus in batches (2 threads): 24 to 48 rows gave 234-237
/// sentences/s, 60 rows 230-235, 96 rows 217-222, 192 rows 218-219.
const MC: usize = 48;
/// Inner indices per pass (all of them for a 384-wide input; measured on all-MiniLM-L6-v2's
/// shapes, 256 to 1536 made no difference beyond this machine's noise).
const KC: usize = 512;
/// Inner indices ahead at which a tile asks for its panel's lines (measured, single-sentence
/// p50 over the bench corpus on 2 threads: 7.0 ms with, 7.9-8.3 ms without; 64 and 128
/// were no better than 32).
const PREFETCH: usize = 32;

/// Whether this process uses AVX-512 F, VL and DQ (`cpu`: the CPU has them and
/// `PG_EMBED_CPU` does not cap them).
#[inline]
pub fn available() -> bool {
    crate::cpu::cpu().avx512
}

/// The weight layout the linear layers use on this CPU (what a prepared file of weights
/// holds, so files of one layout are never read on a CPU that uses the other).
pub fn layout() -> &'static str {
    if available() {
        "avx512-panels32"
    } else {
        "torch-rows"
    }
}

/// 16 floats on a 64-byte boundary: one 512-bit line.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub struct Line([f32; 16]);

// SAFETY: sixteen f32, no padding (64 bytes at 64-byte alignment).
unsafe impl crate::buffer::Element for Line {}

/// A weight [outputs, inputs] (torch's layout) packed into panels of 32 outputs.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct PackedWeight {
    lines: crate::buffer::Shared<Line>,
    outputs: usize,
    inputs: usize,
}

/// Row-major matrices of the same width stacked: the rows of the first, then the second's
/// (Q, K and V side by side), read in place (never concatenated into a copy).
#[derive(Clone, Copy)]
pub struct Stacked<'a> {
    parts: &'a [&'a [f32]],
    inputs: usize,
}

impl<'a> Stacked<'a> {
    /// `parts`, each [rows, inputs] row-major.
    pub fn new(parts: &'a [&'a [f32]], inputs: usize) -> Self {
        Stacked { parts, inputs }
    }

    /// Rows in all.
    pub fn outputs(&self) -> usize {
        self.parts.iter().map(|p| p.len() / self.inputs.max(1)).sum()
    }

    /// Row `o` (of all the parts' rows, in order).
    #[inline]
    pub fn row(&self, mut o: usize) -> &'a [f32] {
        for part in self.parts {
            let rows = part.len() / self.inputs.max(1);
            if o < rows {
                return &part[o * self.inputs..(o + 1) * self.inputs];
            }
            o -= rows;
        }
        panic!("row past the stacked parts")
    }
}

impl PackedWeight {
    /// Packs `weight`, [outputs, inputs] row-major; outputs past the last full panel are zero.
    pub fn pack(weight: &[f32], outputs: usize, inputs: usize) -> Self {
        assert_eq!(weight.len(), outputs * inputs, "weight size");
        Self::pack_stacked(Stacked::new(&[weight], inputs), outputs)
    }

    /// Packs the stacked rows (`outputs` of them) as one weight.
    pub fn pack_stacked(rows: Stacked<'_>, outputs: usize) -> Self {
        assert_eq!(rows.outputs(), outputs, "weight size");
        let inputs = rows.inputs;
        let panels = outputs.div_ceil(NR);
        // Written once, in order, in place (into the prepared file while a model is built
        // into one).
        let lines = crate::buffer::Shared::filled(panels * inputs * 2, |lines: &mut [Line]| {
            crate::threads::for_blocks(lines, 2 * inputs.max(1), |panel, block| {
                let cols: Vec<&[f32]> = (panel * NR..outputs.min((panel + 1) * NR)).map(|o| rows.row(o)).collect();
                for (i, pair) in block.chunks_exact_mut(2).enumerate() {
                    for (col, row) in cols.iter().enumerate() {
                        pair[col / 16].0[col % 16] = row[i];
                    }
                }
            });
        });
        PackedWeight { lines, outputs, inputs }
    }

    /// Back to torch's layout, [outputs, inputs] row-major.
    #[cfg(test)]
    pub(crate) fn unpack(&self) -> Vec<f32> {
        let mut weight = vec![0f32; self.outputs * self.inputs];
        for (o, row) in weight.chunks_exact_mut(self.inputs.max(1)).enumerate().take(self.outputs) {
            let (panel, col) = (o / NR, o % NR);
            for (i, w) in row.iter_mut().enumerate() {
                *w = self.lines[(panel * self.inputs + i) * 2 + col / 16].0[col % 16];
            }
        }
        weight
    }

    /// Panels of 32 output columns (the last may be partly empty).
    pub fn panel_count(&self) -> usize {
        self.outputs.div_ceil(NR)
    }

    /// out = x W^T (+ bias) (+ residual), rounded in that order (torch's), then `then` over
    /// out in pieces (each part of one row, run while it is in L2): `x` [rows, inputs], `out`
    /// and `residual` [rows, outputs], all row-major, `bias` [outputs]. The panels are split
    /// across `threads` compute threads of the current rayon pool.
    #[allow(clippy::too_many_arguments)]
    pub fn product(
        &self,
        x: &[f32],
        bias: Option<&[f32]>,
        residual: Option<&[f32]>,
        then: Option<&Then<'_>>,
        out: &mut [f32],
        threads: usize,
    ) {
        let rows = rows_of(x, out.len(), self.inputs, self.outputs);
        split_panels(out, self.panel_count(), threads, |out, part| {
            // SAFETY: out is [rows, outputs] (checked by `rows_of`); each part writes the
            // columns of its own panels only.
            unsafe { self.product_panels(x, bias, residual, then, out, rows, part) }
        });
    }

    /// As `product`, on the calling thread, for the output columns of `panels` only.
    ///
    /// # Safety
    /// `out` is valid for writes of [rows, outputs] row-major (`rows` from `Self::rows`), and
    /// while this runs no other thread reads or writes the columns of `panels` in it, nor
    /// writes `x`, `bias` or `residual`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn product_panels(
        &self,
        x: &[f32],
        bias: Option<&[f32]>,
        residual: Option<&[f32]>,
        then: Option<&Then<'_>>,
        out: *mut f32,
        rows: usize,
        panels: std::ops::Range<usize>,
    ) {
        assert!(available(), "AVX-512F is required");
        let n = self.outputs;
        assert_eq!(x.len(), rows * self.inputs, "input width");
        assert!(bias.is_none_or(|b| b.len() == n), "bias size");
        assert!(residual.is_none_or(|r| r.len() == rows * n), "residual size");
        assert!(panels.end <= self.panel_count(), "panel range");
        if rows == 0 || panels.is_empty() {
            return;
        }
        let bias = bias.map_or(std::ptr::null(), |b| b.as_ptr());
        let residual = residual.map_or(std::ptr::null(), |r| r.as_ptr());
        // SAFETY: the CPU has AVX-512F (asserted); sizes checked above; out as the caller
        // promises.
        unsafe { self.panels(x, rows, bias, residual, then, out, panels.start, panels.end) }
    }

    /// Columns of panels `first..end` of out = x W^T, MC rows at a time: the block's rows
    /// are copied tile by tile, inner index outermost, so that the register tile reads its
    /// inputs from one sequential stream; the inner dimension runs KC at a time so that a
    /// panel's slice stays in L1 while every tile of the block passes over it.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn panels(
        &self,
        x: &[f32],
        rows: usize,
        bias: *const f32,
        residual: *const f32,
        then: Option<&Then<'_>>,
        out: *mut f32,
        first: usize,
        end: usize,
    ) {
        let (k, n) = (self.inputs, self.outputs);
        PACKED_ROWS.with_borrow_mut(|packed| {
            let mut start = 0;
            while start < rows {
                if crate::threads::interrupted() {
                    return;
                }
                let block = MC.min(rows - start);
                // Tiles of near-equal height (at least 4 rows each when the block has them),
                // so a block of 37 rows runs as 10 + 9 + 9 + 9, never 12 + 12 + 12 + 1.
                let tiles = block.div_ceil(MR);
                let height = |t: usize| block / tiles + usize::from(t < block % tiles);
                packed.clear();
                packed.resize(block * k, 0.0);
                let mut row = start;
                let mut at = 0;
                for t in 0..tiles {
                    let h = height(t);
                    assert!(row + h <= rows && at + h * k <= packed.len());
                    pack_tile(x.as_ptr().add(row * k), k, h, packed.as_mut_ptr().add(at));
                    row += h;
                    at += h * k;
                }
                let _products = Timer::start(Stage::Products);
                let mut k0 = 0;
                while k0 < k {
                    let kc = KC.min(k - k0);
                    for panel in first..end {
                        let cols = NR.min(n - panel * NR);
                        let mask = if cols == NR { u32::MAX } else { (1u32 << cols) - 1 };
                        let b = (self.lines.as_ptr().add(panel * k * 2) as *const f32).add(k0 * NR);
                        let (mut row, mut at) = (start, 0);
                        for t in 0..tiles {
                            let h = height(t);
                            let a = packed.as_ptr().add(at + k0 * h);
                            let c = out.add(row * n + panel * NR);
                            let last = k0 + kc == k;
                            let ends = Ends {
                                more: k0 > 0,
                                bias: if last && !bias.is_null() {
                                    bias.add(panel * NR)
                                } else {
                                    std::ptr::null()
                                },
                                residual: if last && !residual.is_null() {
                                    residual.add(row * n + panel * NR)
                                } else {
                                    std::ptr::null()
                                },
                            };
                            match h {
                                12 => tile::<12>(kc, a, b, c, n, mask, &ends),
                                11 => tile::<11>(kc, a, b, c, n, mask, &ends),
                                10 => tile::<10>(kc, a, b, c, n, mask, &ends),
                                9 => tile::<9>(kc, a, b, c, n, mask, &ends),
                                8 => tile::<8>(kc, a, b, c, n, mask, &ends),
                                7 => tile::<7>(kc, a, b, c, n, mask, &ends),
                                6 => tile::<6>(kc, a, b, c, n, mask, &ends),
                                5 => tile::<5>(kc, a, b, c, n, mask, &ends),
                                4 => tile::<4>(kc, a, b, c, n, mask, &ends),
                                3 => tile::<3>(kc, a, b, c, n, mask, &ends),
                                2 => tile::<2>(kc, a, b, c, n, mask, &ends),
                                _ => tile::<1>(kc, a, b, c, n, mask, &ends),
                            }
                            row += h;
                            at += h * k;
                        }
                    }
                    k0 += kc;
                }
                drop(_products);
                if let Some(then) = then {
                    let _activation = Timer::start(Stage::Activation);
                    // The block's finished rows, this call's columns, while they are in L2.
                    let (lo, hi) = (first * NR, (end * NR).min(n));
                    for row in start..start + block {
                        then(std::slice::from_raw_parts_mut(out.add(row * n + lo), hi - lo));
                    }
                }
                start += block;
            }
        })
    }

    #[cfg(not(target_arch = "x86_64"))]
    #[allow(clippy::too_many_arguments)]
    unsafe fn panels(
        &self,
        _: &[f32],
        _: usize,
        _: *const f32,
        _: *const f32,
        _: Option<&Then<'_>>,
        _: *mut f32,
        _: usize,
        _: usize,
    ) {
        unreachable!("AVX-512F is x86-64 only")
    }
}

/// The rows of a product of `x` ([rows, inputs]) into an output of `out_len` values
/// ([rows, outputs]), checked.
pub fn rows_of(x: &[f32], out_len: usize, inputs: usize, outputs: usize) -> usize {
    let rows = if inputs == 0 { out_len / outputs.max(1) } else { x.len() / inputs };
    assert_eq!(x.len(), rows * inputs, "input width");
    assert_eq!(out_len, rows * outputs, "output size");
    rows
}

/// Runs `part(out, panels)` over `panels` panels split evenly across `threads` compute
/// threads of the current rayon pool (at most one per panel); each part must write only its
/// own panels' columns of `out`.
pub fn split_panels(out: &mut [f32], panels: usize, threads: usize, part: impl Fn(*mut f32, std::ops::Range<usize>) + Sync) {
    let threads = threads.clamp(1, panels.max(1));
    let dst = Ptr(out.as_mut_ptr());
    let run = |range: std::ops::Range<usize>| {
        let dst = dst;
        part(dst.0, range)
    };
    if threads == 1 {
        run(0..panels);
    } else {
        use rayon::prelude::*;
        (0..threads).into_par_iter().for_each(|t| run(panels * t / threads..panels * (t + 1) / threads));
    }
}

/// A pointer shared by the threads of one product; each writes its own columns of the output.
#[derive(Clone, Copy)]
struct Ptr(*mut f32);
unsafe impl Send for Ptr {}
unsafe impl Sync for Ptr {}

/// What a tile does besides the product: continue from c's earlier sums (`more`), and on the
/// last pass add the bias (at the panel's first column) and the residual (at the tile's
/// first element, rows as c's); null when absent.
struct Ends {
    more: bool,
    bias: *const f32,
    residual: *const f32,
}

/// An element-wise function run over each finished piece of the output (an activation): the
/// columns of one row that one call computes, once a block of rows is done.
pub type Then<'a> = dyn Fn(&mut [f32]) + Sync + 'a;

/// c[0..R, 0..32] (+)= a b for one tile: `a` the tile's rows, inner index outermost
/// ([k, R]), `b` a panel's slice (k x 32, two lines per inner index); with `ends.more`, the
/// sums continue from c (the earlier inner indices), so every output is one chain of fused
/// multiply-adds in inner-index order whatever the blocking; then `ends`' bias and residual.
/// Columns outside `mask` are neither read nor written; c's rows are `ldc` apart.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn tile<const R: usize>(
    k: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    mask: u32,
    ends: &Ends,
) {
    use std::arch::x86_64::*;
    let (m0, m1) = (mask as u16, (mask >> 16) as u16);
    let mut lo = [_mm512_setzero_ps(); R];
    let mut hi = [_mm512_setzero_ps(); R];
    if ends.more {
        for r in 0..R {
            lo[r] = _mm512_maskz_loadu_ps(m0, c.add(r * ldc));
            hi[r] = _mm512_maskz_loadu_ps(m1, c.add(r * ldc + 16));
        }
    }
    let step = |p: usize, lo: &mut [__m512; R], hi: &mut [__m512; R]| {
        _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add((p + PREFETCH) * NR) as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add((p + PREFETCH) * NR + 16) as *const i8);
        let b0 = _mm512_load_ps(b.add(p * NR));
        let b1 = _mm512_load_ps(b.add(p * NR + 16));
        for r in 0..R {
            let ar = _mm512_set1_ps(*a.add(p * R + r));
            lo[r] = _mm512_fmadd_ps(ar, b0, lo[r]);
            hi[r] = _mm512_fmadd_ps(ar, b1, hi[r]);
        }
    };
    let mut p = 0;
    while p + 4 <= k {
        step(p, &mut lo, &mut hi);
        step(p + 1, &mut lo, &mut hi);
        step(p + 2, &mut lo, &mut hi);
        step(p + 3, &mut lo, &mut hi);
        p += 4;
    }
    while p < k {
        step(p, &mut lo, &mut hi);
        p += 1;
    }
    if !ends.bias.is_null() {
        let b0 = _mm512_maskz_loadu_ps(m0, ends.bias);
        let b1 = _mm512_maskz_loadu_ps(m1, ends.bias.add(16));
        for r in 0..R {
            lo[r] = _mm512_add_ps(lo[r], b0);
            hi[r] = _mm512_add_ps(hi[r], b1);
        }
    }
    if !ends.residual.is_null() {
        for r in 0..R {
            lo[r] = _mm512_add_ps(lo[r], _mm512_maskz_loadu_ps(m0, ends.residual.add(r * ldc)));
            hi[r] = _mm512_add_ps(hi[r], _mm512_maskz_loadu_ps(m1, ends.residual.add(r * ldc + 16)));
        }
    }
    for r in 0..R {
        _mm512_mask_storeu_ps(c.add(r * ldc), m0, lo[r]);
        _mm512_mask_storeu_ps(c.add(r * ldc + 16), m1, hi[r]);
    }
}

/// dst[p h + r] = x[r k + p] for the `h` (<= 16) rows of a tile: one gather per inner index.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn pack_tile(x: *const f32, k: usize, h: usize, dst: *mut f32) {
    use std::arch::x86_64::*;
    let rows = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    let offsets = _mm512_mullo_epi32(rows, _mm512_set1_epi32(k as i32));
    let mask = ((1u32 << h) - 1) as u16;
    for p in 0..k {
        let v = _mm512_mask_i32gather_ps::<4>(_mm512_setzero_ps(), mask, offsets, x.add(p));
        _mm512_mask_storeu_ps(dst.add(p * h), mask, v);
    }
}

thread_local! {
    /// The current block's rows, copied for the register tiles (reused across calls).
    static PACKED_ROWS: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn product_matches_plain_loops(rows: usize, outputs: usize, inputs: usize, threads: usize) {
        let weight: Vec<f32> = (0..outputs * inputs).map(|i| ((i * 7 % 13) as f32 - 6.0) * 0.125).collect();
        let x: Vec<f32> = (0..rows * inputs).map(|i| ((i * 5 % 11) as f32 - 5.0) * 0.25).collect();
        let packed = PackedWeight::pack(&weight, outputs, inputs);
        assert_eq!(packed.unpack(), weight, "pack then unpack");
        let bias: Vec<f32> = (0..outputs).map(|o| (o % 5) as f32 * 0.5).collect();
        let residual: Vec<f32> = (0..rows * outputs).map(|i| (i % 3) as f32).collect();
        let mut out = vec![f32::NAN; rows * outputs];
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        let then = |v: &mut [f32]| v.iter_mut().for_each(|v| *v *= 2.0);
        pool.install(|| packed.product(&x, Some(&bias), Some(&residual), Some(&then), &mut out, threads));
        for r in 0..rows {
            for o in 0..outputs {
                // Small integers times powers of two: every partial sum is exact, so the
                // product must equal the plain loop bit for bit.
                let want: f32 = (0..inputs).map(|i| x[r * inputs + i] * weight[o * inputs + i]).sum::<f32>()
                    + bias[o]
                    + residual[r * outputs + o];
                let want = want * 2.0;
                assert_eq!(out[r * outputs + o], want, "{rows}x{outputs}x{inputs}: row {r} col {o}");
            }
        }
    }

    #[test]
    fn product_matches_plain_loops_for_every_tile_height_and_ragged_panels() {
        if !available() {
            eprintln!("no AVX-512F here: the packed product is not used on this CPU");
            return;
        }
        for rows in [1, 2, 5, 11, 12, 13, 37, 96, 97, 200] {
            product_matches_plain_loops(rows, 70, 19, 1);
        }
        product_matches_plain_loops(37, 384, 384, 2);
        product_matches_plain_loops(100, 64, 1000, 2);
        product_matches_plain_loops(3, 5, 1, 2);
        product_matches_plain_loops(130, 33, 64, 3);
    }
}
