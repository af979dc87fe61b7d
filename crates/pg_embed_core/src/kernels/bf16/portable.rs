//! The `portable` kernel: plain Rust that the compiler vectorizes (through `dispatch!`, for
//! AVX-512, AVX2 + FMA or the baseline), so it runs on every CPU. It adds in
//! `avx512-bf16`'s order, so the two agree bit for bit. Also `round_rows`, the input rows
//! rounded into bfloat16 pairs in plain Rust: the portable kernel's (`avx512::round_rows`
//! rounds the same way with `vcvtne2ps2bf16`, and ends each row with this one).

use super::{round, Dest, PairLine, NR};

dispatch! {
    /// `x` ([rows, k] float32) rounded into `xs` ([rows, pairs] dwords of two bfloat16, the
    /// even input in the low half; `xs` is zero beyond k).
    pub fn round_rows(x: &[f32], k: usize, pairs: usize, xs: &mut [u32]) {
        for (row, dst) in x.chunks_exact(k.max(1)).zip(xs.chunks_exact_mut(pairs)) {
            let (whole, odd) = row.split_at(k / 2 * 2);
            for (d, two) in dst.iter_mut().zip(whole.chunks_exact(2)) {
                *d = u32::from(round(two[0])) | u32::from(round(two[1])) << 16;
            }
            if let Some(last) = odd.first() {
                dst[k / 2] = u32::from(round(*last));
            }
        }
    }
}

/// As `round_rows`, into `amx-bf16`'s tile-major order (`super::tile_index`); `pairs` is a
/// multiple of 16 and xs is zero where nothing is written.
pub fn round_tiles(x: &[f32], k: usize, pairs: usize, xs: &mut [u32]) {
    let mut line = vec![0u32; pairs];
    for (r, row) in x.chunks_exact(k.max(1)).enumerate() {
        round_rows(row, k, pairs, &mut line);
        for (p, &d) in line.iter().enumerate() {
            xs[super::tile_index(r, pairs, p)] = d;
        }
    }
}

/// The sums of pairs p of the odd product, then the even one (`vdpbf16ps`'s order), for
/// the first `rows` rows of `xs` and one panel `w`, finished into `dest`.
///
/// # Safety
/// `dest` holds `rows` rows (this thread's); xs `rows` rows of `pairs`; w a panel.
pub unsafe fn portable_block(xs: &[u32], pairs: usize, w: &[PairLine], rows: usize, dest: &Dest) {
    /// Rows summed together: each pair's weights are widened once for all of them (measured
    /// with the AVX-512 build, all-MiniLM-L6-v2 batches on 2 threads: 1 row 28 sentences/s,
    /// 2 rows 133, 4 rows 127, 8 rows 144; 4 so that the AVX2 build keeps its 16 registers
    /// of sums).
    const RT: usize = 4;
    dispatch! {
        fn sums(x: &[u32], pairs: usize, w: &[PairLine], s: &mut [[f32; NR]; RT]) {
            // Local sums (kept in registers), RT rows even when fewer are given (the rest
            // read zeros and are not used).
            let mut acc = [[0f32; NR]; RT];
            let rows = x.len() / pairs.max(1);
            let w = &w[..2 * pairs];
            for p in 0..pairs {
                let (lo, hi) = (&w[2 * p].0, &w[2 * p + 1].0);
                let mut odd = [0f32; NR];
                let mut even = [0f32; NR];
                for j in 0..16 {
                    (odd[j], even[j]) = (f32::from_bits(lo[j] & 0xffff_0000), f32::from_bits(lo[j] << 16));
                    (odd[16 + j], even[16 + j]) = (f32::from_bits(hi[j] & 0xffff_0000), f32::from_bits(hi[j] << 16));
                }
                for (r, acc) in acc.iter_mut().enumerate() {
                    let two = if r < rows { x[r * pairs + p] } else { 0 };
                    let (xe, xo) = (f32::from_bits(two << 16), f32::from_bits(two & 0xffff_0000));
                    for j in 0..NR {
                        // Each product of two bfloat16 values is exact: one rounding per
                        // addition.
                        acc[j] += xo * odd[j];
                        acc[j] += xe * even[j];
                    }
                }
            }
            *s = acc;
        }
    }
    let mut s = [[0f32; NR]; RT];
    for first in (0..rows).step_by(RT) {
        let n = RT.min(rows - first);
        sums(&xs[first * pairs..(first + n) * pairs], pairs, w, &mut s);
        // SAFETY: rows first..first + n of dest, as the caller promises.
        unsafe { dest.down(first).store(&s[..n]) };
    }
}
