//! Attention's two float32 products for one head, on CPUs with AVX-512F: the scores
//! (scale Q K^T) and the context (P V), for the short sequences most calls have, where the
//! `gemm` crate's general driver (packing, blocking for large matrices) cost more than the
//! products (measured, all-MiniLM-L6-v2 on 2 threads of a Sapphire Rapids: attention's
//! products at about 55 GFLOP/s per core, a quarter of the FMA peak). Register tiles of
//! broadcast rows times lines of 16 columns, one fused multiply-add chain per output over the
//! inner index in order. Elsewhere `layers::attention` keeps the `gemm` crate.

use std::arch::x86_64::*;

/// Rows per register tile.
const R: usize = 4;
/// Lines of 16 columns per register tile (R x C accumulators).
const C: usize = 4;

thread_local! {
    /// K transposed, [d, keys rounded up to 16], reused across heads on a thread.
    static KEYS: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// dst [m, n] (rows `ld` apart) = `scale` q k^T: q [m, d] and k [n, d], rows `q_rs` and
/// `k_rs` apart.
///
/// # Safety
/// The CPU has AVX-512F (`super::float32::available`); the pointers are valid for those
/// reads and writes; dst overlaps neither.
#[allow(clippy::too_many_arguments)]
pub unsafe fn scores(
    m: usize,
    n: usize,
    d: usize,
    q: *const f32,
    q_rs: usize,
    k: *const f32,
    k_rs: usize,
    scale: f32,
    dst: *mut f32,
    ld: usize,
) {
    let width = n.div_ceil(16) * 16;
    KEYS.with_borrow_mut(|kt| {
        kt.clear();
        kt.resize(d * width, 0.0);
        // SAFETY: AVX-512F (the caller's); rows < n, columns < d of k; kt holds d x width;
        // then q [m, d] times kt [d, n] into dst, as the caller promises.
        unsafe {
            transpose_keys(k, k_rs, n, d, kt.as_mut_ptr(), width);
            product(m, n, d, (q, q_rs), (kt.as_ptr(), width), scale, (dst, ld), false);
        }
    })
}

/// dst [m, d] (rows `ld` apart) = p v, plus dst when `add`: p [m, n] rows `p_rs` apart, v
/// [n, d] rows `v_rs` apart.
///
/// # Safety
/// As [`scores`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn context(
    m: usize,
    d: usize,
    n: usize,
    p: *const f32,
    p_rs: usize,
    v: *const f32,
    v_rs: usize,
    dst: *mut f32,
    ld: usize,
    add: bool,
) {
    // SAFETY: as the caller promises.
    unsafe { product(m, d, n, (p, p_rs), (v, v_rs), 1.0, (dst, ld), add) }
}

/// kt [d, ld] = k [n, d]^T (rows of k `k_rs` apart), 16 keys at a time by gathers (the
/// keys past n are left as they are).
#[target_feature(enable = "avx512f")]
unsafe fn transpose_keys(k: *const f32, k_rs: usize, n: usize, d: usize, kt: *mut f32, ld: usize) {
    let step = _mm512_set1_epi32(k_rs as i32);
    let index = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), step);
    let mut j = 0;
    while j < n {
        let mask = lanes(n - j);
        for x in 0..d {
            // SAFETY: keys j..j + 16 masked to n, column x < d; kt row x, columns j..j + 16.
            unsafe {
                let line = _mm512_mask_i32gather_ps::<4>(_mm512_setzero_ps(), mask, index, k.add(j * k_rs + x).cast());
                _mm512_storeu_ps(kt.add(x * ld + j), line);
            }
        }
        j += 16;
    }
}

/// The mask of the first `cols` (capped at 16) lanes.
#[inline(always)]
fn lanes(cols: usize) -> __mmask16 {
    if cols >= 16 { 0xffff } else { ((1u32 << cols) - 1) as __mmask16 }
}

/// dst [m, n] (rows `ld` apart) = `scale` a b, plus dst when `add`: a [m, inner] and b
/// [inner, n], rows at their strides; in register tiles of up to R rows x C lines of 16.
///
/// # Safety
/// AVX-512F; the pointers are valid for those reads and writes; dst overlaps neither.
#[allow(clippy::too_many_arguments)]
unsafe fn product(
    m: usize,
    n: usize,
    inner: usize,
    (a, a_rs): (*const f32, usize),
    (b, b_rs): (*const f32, usize),
    scale: f32,
    (dst, ld): (*mut f32, usize),
    add: bool,
) {
    let lines = n.div_ceil(16);
    let mut i = 0;
    while i < m {
        let rows = R.min(m - i);
        let mut line = 0;
        while line < lines {
            let width = C.min(lines - line);
            // SAFETY: rows i..i + rows of a and dst, columns of lines line..line + width of
            // b and dst (the last masked to n).
            unsafe {
                let from = (a.add(i * a_rs), a_rs, b.add(line * 16), b_rs);
                let to = (dst.add(i * ld + line * 16), ld, n - line * 16, scale, add);
                match (rows, width) {
                    (4, 4) => tile::<4, 4>(inner, from, to),
                    (4, 3) => tile::<4, 3>(inner, from, to),
                    (4, 2) => tile::<4, 2>(inner, from, to),
                    (4, _) => tile::<4, 1>(inner, from, to),
                    (3, 4) => tile::<3, 4>(inner, from, to),
                    (3, 3) => tile::<3, 3>(inner, from, to),
                    (3, 2) => tile::<3, 2>(inner, from, to),
                    (3, _) => tile::<3, 1>(inner, from, to),
                    (2, 4) => tile::<2, 4>(inner, from, to),
                    (2, 3) => tile::<2, 3>(inner, from, to),
                    (2, 2) => tile::<2, 2>(inner, from, to),
                    (2, _) => tile::<2, 1>(inner, from, to),
                    (_, 4) => tile::<1, 4>(inner, from, to),
                    (_, 3) => tile::<1, 3>(inner, from, to),
                    (_, 2) => tile::<1, 2>(inner, from, to),
                    (_, _) => tile::<1, 1>(inner, from, to),
                }
            }
            line += width;
        }
        i += rows;
    }
}

/// RR rows x CC lines of 16 of `product`: (a at the tile's first row, its row stride, b at
/// the tile's first column, its row stride), (dst at the tile, its row stride, columns left
/// from the tile's first, scale, add).
#[target_feature(enable = "avx512f")]
unsafe fn tile<const RR: usize, const CC: usize>(
    inner: usize,
    (a, a_rs, b, b_rs): (*const f32, usize, *const f32, usize),
    (dst, ld, left, scale, add): (*mut f32, usize, usize, f32, bool),
) {
    let mut acc = [[_mm512_setzero_ps(); CC]; RR];
    for x in 0..inner {
        // SAFETY (the block): within the sizes `product` passes; b's last line masked.
        unsafe {
            let mut line = [_mm512_setzero_ps(); CC];
            for (c, line) in line.iter_mut().enumerate() {
                *line = _mm512_maskz_loadu_ps(lanes(left.saturating_sub(16 * c)), b.add(x * b_rs + 16 * c));
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                let v = _mm512_set1_ps(*a.add(r * a_rs + x));
                for (acc, line) in acc.iter_mut().zip(&line) {
                    *acc = _mm512_fmadd_ps(v, *line, *acc);
                }
            }
        }
    }
    let scale = _mm512_set1_ps(scale);
    for (r, acc) in acc.iter().enumerate() {
        for (c, acc) in acc.iter().enumerate() {
            let mask = lanes(left.saturating_sub(16 * c));
            // SAFETY: row r of the tile, columns masked to those left.
            unsafe {
                let at = dst.add(r * ld + 16 * c);
                let scaled = _mm512_mul_ps(*acc, scale);
                let sum = if add { _mm512_add_ps(_mm512_maskz_loadu_ps(mask, at), scaled) } else { scaled };
                _mm512_mask_storeu_ps(at, mask, sum);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n).map(|i| (((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8) % 2001) as f32 / 1000.0 - 1.0).collect()
    }

    /// Both products against plain loops in f64 over shapes with tails in every
    /// direction, rows and columns at strides as attention's packed heads have them.
    #[test]
    fn products_equal_plain_loops() {
        if !crate::kernels::float32::available() {
            eprintln!("attention kernels not tested here: no AVX-512F");
            return;
        }
        for &(m, n, d) in &[(1, 1, 1), (37, 37, 32), (5, 70, 64), (13, 129, 128), (64, 17, 48), (3, 200, 80)] {
            let stride = 3 * d + 5;
            let qkv = values(n.max(m) * stride, 7);
            let (q, k, v) = (qkv.as_ptr(), qkv[d..].as_ptr(), qkv[2 * d..].as_ptr());
            let scale = 0.125f32;
            let ld = n + 3;
            let mut s = vec![f32::NAN; m * ld];
            // SAFETY: AVX-512F (checked); rows of qkv at `stride`, dst [m, ld].
            unsafe { scores(m, n, d, q, stride, k, stride, scale, s.as_mut_ptr(), ld) };
            for i in 0..m {
                for j in 0..n {
                    let want: f64 =
                        (0..d).map(|x| qkv[i * stride + x] as f64 * qkv[j * stride + d + x] as f64).sum::<f64>() * 0.125;
                    assert!((s[i * ld + j] as f64 - want).abs() <= 1e-5 * (1.0 + want.abs()), "scores {m}x{n}x{d} [{i},{j}]");
                }
                assert!(s[i * ld + n..(i + 1) * ld].iter().all(|x| x.is_nan()), "past the keys untouched");
            }
            let p = values(m * n, 11);
            let cld = d + 2;
            for add in [false, true] {
                let mut c = vec![0.5f32; m * cld];
                // SAFETY: as above; p [m, n].
                unsafe { context(m, d, n, p.as_ptr(), n, v, stride, c.as_mut_ptr(), cld, add) };
                for i in 0..m {
                    for x in 0..d {
                        let dot: f64 = (0..n).map(|j| p[i * n + j] as f64 * qkv[j * stride + 2 * d + x] as f64).sum();
                        let want = dot + if add { 0.5 } else { 0.0 };
                        assert!((c[i * cld + x] as f64 - want).abs() <= 1e-5 * (1.0 + want.abs()), "context [{i},{x}]");
                    }
                    assert_eq!(&c[i * cld + d..(i + 1) * cld], &[0.5, 0.5], "past the columns untouched");
                }
            }
        }
    }
}
