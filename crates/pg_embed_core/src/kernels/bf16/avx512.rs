//! The `avx512-bf16` kernel: `vdpbf16ps` on 512-bit vectors, a register tile of up to 12
//! rows x 32 outputs; with `vcvtne2ps2bf16` for rounding the input rows, and the store
//! (bias, residual) that `amx-bf16`'s tiles are finished with too.

use super::{Dest, PairLine, MR, NR};
use std::arch::x86_64::*;

/// As `portable_block`, with `vdpbf16ps`: tiles of up to 12 rows of near-equal height.
///
/// # Safety
/// The CPU has AVX512-BF16; as `portable_block`.
pub unsafe fn block(xs: &[u32], pairs: usize, w: &[PairLine], rows: usize, dest: &Dest) {
    assert!(xs.len() >= rows * pairs && w.len() >= 2 * pairs);
    let tiles = rows.div_ceil(MR);
    let mut row = 0;
    for t in 0..tiles {
        let h = rows / tiles + usize::from(t < rows % tiles);
        let (a, b) = (xs[row * pairs..].as_ptr(), w.as_ptr().cast::<u32>());
        let d = dest.down(row);
        // SAFETY: h rows from `row` are within xs (asserted) and dest (the caller's).
        unsafe {
            match h {
                12 => tile::<12>(pairs, a, b, &d),
                11 => tile::<11>(pairs, a, b, &d),
                10 => tile::<10>(pairs, a, b, &d),
                9 => tile::<9>(pairs, a, b, &d),
                8 => tile::<8>(pairs, a, b, &d),
                7 => tile::<7>(pairs, a, b, &d),
                6 => tile::<6>(pairs, a, b, &d),
                5 => tile::<5>(pairs, a, b, &d),
                4 => tile::<4>(pairs, a, b, &d),
                3 => tile::<3>(pairs, a, b, &d),
                2 => tile::<2>(pairs, a, b, &d),
                _ => tile::<1>(pairs, a, b, &d),
            }
        }
        row += h;
    }
}

/// 32 inputs from `x` rounded to bfloat16 pairs (`vcvtne2ps2bf16`): 16 dwords, the even
/// input in each one's low half.
///
/// # Safety
/// The CPU has AVX512-BF16; x is valid for 32 reads.
#[target_feature(enable = "avx512f,avx512bf16")]
#[inline]
unsafe fn round_line(x: *const f32) -> __m512i {
    // SAFETY: as the caller promises.
    unsafe {
        let (lo, hi) = (_mm512_loadu_ps(x), _mm512_loadu_ps(x.add(16)));
        std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo))
    }
}

/// As `super::portable::round_rows`, with `vcvtne2ps2bf16` (the same rounding: to nearest
/// even, NaN quiet, denormals to zero), 32 inputs at a time.
///
/// # Safety
/// The CPU has AVX512-BF16; xs holds the rows of x, `pairs` dwords each.
#[target_feature(enable = "avx512f,avx512bf16")]
pub unsafe fn round_rows(x: &[f32], k: usize, pairs: usize, xs: &mut [u32]) {
    for (row, dst) in x.chunks_exact(k.max(1)).zip(xs.chunks_exact_mut(pairs)) {
        assert!(dst.len() * 2 >= row.len());
        let mut i = 0;
        while i + 32 <= row.len() {
            // SAFETY: 32 inputs from i are within the row, 16 dwords from i / 2 within dst.
            unsafe { _mm512_storeu_si512(dst.as_mut_ptr().add(i / 2).cast(), round_line(row.as_ptr().add(i))) };
            i += 32;
        }
        if i < row.len() {
            super::portable::round_rows(&row[i..], row.len() - i, dst.len() - i / 2, &mut dst[i / 2..]);
        }
    }
}

/// As `round_rows`, into `amx-bf16`'s tile-major order (`super::tile_index`): for each
/// 16 rows, for each 16 pairs, the 16 rows' 64 bytes one after the other, so that each
/// tile's rows are one contiguous kilobyte.
///
/// # Safety
/// The CPU has AVX512-BF16; xs holds the rows of x padded to a multiple of 16, `pairs`
/// (a multiple of 16) dwords each, zero where nothing is written.
#[target_feature(enable = "avx512f,avx512bf16")]
pub unsafe fn round_tiles(x: &[f32], k: usize, pairs: usize, xs: &mut [u32]) {
    assert!(pairs.is_multiple_of(16) && pairs * 2 >= k);
    for (r, row) in x.chunks_exact(k.max(1)).enumerate() {
        assert!(super::tile_index(r | 15, pairs, pairs - 1) < xs.len());
        let mut i = 0;
        while i + 32 <= row.len() {
            // SAFETY: 32 inputs from i are within the row; the line's 16 dwords are within
            // xs (asserted for the row's last tile).
            unsafe {
                let at = xs.as_mut_ptr().add(super::tile_index(r, pairs, i / 2));
                _mm512_storeu_si512(at.cast(), round_line(row.as_ptr().add(i)));
            }
            i += 32;
        }
        if i < row.len() {
            let mut line = [0u32; 16];
            super::portable::round_rows(&row[i..], row.len() - i, 16, &mut line);
            let at = super::tile_index(r, pairs, i / 2);
            xs[at..at + 16].copy_from_slice(&line);
        }
    }
}

/// R rows `a` ([R, pairs] dwords) times a panel `b` (pairs x 32 dwords), one `vdpbf16ps`
/// chain per output, finished into `dest`.
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn tile<const R: usize>(pairs: usize, a: *const u32, b: *const u32, dest: &Dest) {
    let mut lo = [_mm512_setzero_ps(); R];
    let mut hi = [_mm512_setzero_ps(); R];
    for p in 0..pairs {
        // SAFETY (whole block): within the sizes the caller asserted; panel lines are
        // 64-byte aligned.
        unsafe {
            let b0: __m512bh = std::mem::transmute(_mm512_load_si512(b.add(p * NR).cast()));
            let b1: __m512bh = std::mem::transmute(_mm512_load_si512(b.add(p * NR + 16).cast()));
            for r in 0..R {
                let ar: __m512bh = std::mem::transmute(_mm512_set1_epi32(*a.add(r * pairs + p) as i32));
                lo[r] = _mm512_dpbf16_ps(lo[r], ar, b0);
                hi[r] = _mm512_dpbf16_ps(hi[r], ar, b1);
            }
        }
    }
    // SAFETY: R rows of dest, as the caller promises.
    unsafe { finish::<R>(&mut lo, &mut hi, dest) }
}

/// Rows of sums (two lines each) plus dest's bias, plus its residual, stored in its
/// columns.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn finish<const R: usize>(lo: &mut [__m512; R], hi: &mut [__m512; R], dest: &Dest) {
    let mask = if dest.cols == NR { u32::MAX } else { (1u32 << dest.cols) - 1 };
    let (m0, m1) = (mask as u16, (mask >> 16) as u16);
    // SAFETY (whole block): dest's rows and columns, as the caller promises.
    unsafe {
        if !dest.bias.is_null() {
            let b0 = _mm512_maskz_loadu_ps(m0, dest.bias);
            let b1 = _mm512_maskz_loadu_ps(m1, dest.bias.add(16));
            for r in 0..R {
                lo[r] = _mm512_add_ps(lo[r], b0);
                hi[r] = _mm512_add_ps(hi[r], b1);
            }
        }
        if !dest.residual.is_null() {
            for r in 0..R {
                let res = dest.residual.add(r * dest.ld);
                lo[r] = _mm512_add_ps(lo[r], _mm512_maskz_loadu_ps(m0, res));
                hi[r] = _mm512_add_ps(hi[r], _mm512_maskz_loadu_ps(m1, res.add(16)));
            }
        }
        for r in 0..R {
            _mm512_mask_storeu_ps(dest.out.add(r * dest.ld), m0, lo[r]);
            _mm512_mask_storeu_ps(dest.out.add(r * dest.ld + 16), m1, hi[r]);
        }
    }
}

/// The first `rows` rows of `acc` ([rows, 32] sums: amx-bf16's tiles) finished into
/// `dest`, one row at a time.
///
/// # Safety
/// The CPU has AVX-512F; dest holds `rows` rows; acc at least rows x 32.
#[target_feature(enable = "avx512f")]
pub unsafe fn store(acc: &[f32], rows: usize, dest: &Dest) {
    assert!(acc.len() >= rows * NR);
    for r in 0..rows {
        // SAFETY: row r of acc (asserted) and of dest (the caller's).
        unsafe {
            let mut lo = [_mm512_loadu_ps(acc.as_ptr().add(r * NR))];
            let mut hi = [_mm512_loadu_ps(acc.as_ptr().add(r * NR + 16))];
            let d = Dest {
                out: dest.out.add(r * dest.ld),
                residual: if dest.residual.is_null() { dest.residual } else { dest.residual.add(r * dest.ld) },
                ..*dest
            };
            finish::<1>(&mut lo, &mut hi, &d);
        }
    }
}
