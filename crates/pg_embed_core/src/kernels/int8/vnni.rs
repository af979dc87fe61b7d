//! The `avx512-vnni` and `avx-vnni` kernels: `vpdpbusd` (unsigned input bytes, q + 128,
//! times signed weights, four to a dword, into int32) on 512- and 256-bit vectors. Each
//! group's sums start from the panel's offsets (-128 times the group's weight sums), so they
//! are portable's sums exactly; the scaling is portable's too, operation for operation
//! (convert, multiply the scales, multiply, add), then `Dest::store`.

use super::{Part, GROUP, NR, QUADS};
use crate::kernels::bf16::Dest;
use std::arch::x86_64::*;

/// Rows per register tile of `avx512-vnni`: 2 x 6 sums and 2 x 6 scaled sums, two weight
/// lines, a broadcast and the scales.
const MR512: usize = 6;
/// Rows per register tile of `avx-vnni`, over 16 of the panel's outputs at a time (16 ymm
/// registers).
const MR256: usize = 3;

/// Splits `rows` into tiles of at most `mr` rows of near-equal height and runs `tile(first,
/// height)` on each.
pub(super) fn tiles(rows: usize, mr: usize, mut tile: impl FnMut(usize, usize)) {
    let count = rows.div_ceil(mr);
    let mut row = 0;
    for t in 0..count {
        let h = rows / count + usize::from(t < rows % count);
        tile(row, h);
        row += h;
    }
}

/// As `portable::block`, with 512-bit `vpdpbusd`; xq holds q + 128.
///
/// # Safety
/// The CPU has AVX512-VNNI; as `portable::block`.
pub unsafe fn block512(xq: &[u8], sa: &[f32], part: &Part<'_>, rows: usize, dest: &Dest) {
    let (groups, kp) = (part.groups, part.groups * GROUP);
    assert!(xq.len() >= rows * kp && sa.len() >= rows * groups);
    assert!(part.lines.len() >= groups * QUADS * 2 && part.scales.len() >= groups * NR && part.offsets.len() >= groups * NR);
    tiles(rows, MR512, |row, h| {
        let mut s = [[0f32; NR]; MR512];
        let (x, a) = (xq[row * kp..].as_ptr(), sa[row * groups..].as_ptr());
        // SAFETY: h rows from `row` are within xq and sa (asserted); the panel's lines,
        // scales and offsets hold `groups` groups (asserted).
        unsafe {
            match h {
                6 => tile512::<6>(groups, x, a, part, &mut s),
                5 => tile512::<5>(groups, x, a, part, &mut s),
                4 => tile512::<4>(groups, x, a, part, &mut s),
                3 => tile512::<3>(groups, x, a, part, &mut s),
                2 => tile512::<2>(groups, x, a, part, &mut s),
                _ => tile512::<1>(groups, x, a, part, &mut s),
            }
        }
        // SAFETY: rows row..row + h of dest, as the caller promises.
        unsafe { dest.down(row).store(&s[..h]) };
    });
}

/// The scaled sums of R rows (from `x`, `groups * 32` bytes apart; scales from `a`,
/// `groups` apart) and the panel `part` into `out[..R]`.
///
/// # Safety
/// AVX512-VNNI; x and a valid for R rows; part holds `groups` groups.
#[target_feature(enable = "avx512f,avx512vnni")]
unsafe fn tile512<const R: usize>(groups: usize, x: *const u8, a: *const f32, part: &Part<'_>, out: &mut [[f32; NR]; MR512]) {
    let kp = groups * GROUP;
    let w = part.lines.as_ptr().cast::<i8>();
    // SAFETY: every pointer below stays within what the caller promises.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); 2]; R];
        for g in 0..groups {
            let off = part.offsets.as_ptr().add(g * NR);
            let (o0, o1) = (_mm512_loadu_si512(off.cast()), _mm512_loadu_si512(off.add(16).cast()));
            let mut sums = [[o0, o1]; R];
            for q in 0..QUADS {
                let line = w.add((g * QUADS + q) * 128);
                let (w0, w1) = (_mm512_load_si512(line.cast()), _mm512_load_si512(line.add(64).cast()));
                for (r, s) in sums.iter_mut().enumerate() {
                    let b = _mm512_set1_epi32(x.add(r * kp + g * GROUP + q * 4).cast::<i32>().read_unaligned());
                    s[0] = _mm512_dpbusd_epi32(s[0], b, w0);
                    s[1] = _mm512_dpbusd_epi32(s[1], b, w1);
                }
            }
            let sc = part.scales.as_ptr().add(g * NR);
            let (s0, s1) = (_mm512_loadu_ps(sc), _mm512_loadu_ps(sc.add(16)));
            for (r, (acc, s)) in acc.iter_mut().zip(&sums).enumerate() {
                let ar = _mm512_set1_ps(*a.add(r * groups + g));
                acc[0] = _mm512_add_ps(acc[0], _mm512_mul_ps(_mm512_cvtepi32_ps(s[0]), _mm512_mul_ps(s0, ar)));
                acc[1] = _mm512_add_ps(acc[1], _mm512_mul_ps(_mm512_cvtepi32_ps(s[1]), _mm512_mul_ps(s1, ar)));
            }
        }
        for (o, acc) in out.iter_mut().zip(&acc) {
            _mm512_storeu_ps(o.as_mut_ptr(), acc[0]);
            _mm512_storeu_ps(o.as_mut_ptr().add(16), acc[1]);
        }
    }
}

/// As `portable::block`, with 256-bit `vpdpbusd` (AVX-VNNI); xq holds q + 128.
///
/// # Safety
/// The CPU has AVX-VNNI; as `portable::block`.
pub unsafe fn block256(xq: &[u8], sa: &[f32], part: &Part<'_>, rows: usize, dest: &Dest) {
    let (groups, kp) = (part.groups, part.groups * GROUP);
    assert!(xq.len() >= rows * kp && sa.len() >= rows * groups);
    assert!(part.lines.len() >= groups * QUADS * 2 && part.scales.len() >= groups * NR && part.offsets.len() >= groups * NR);
    tiles(rows, MR256, |row, h| {
        let mut s = [[0f32; NR]; MR256];
        let (x, a) = (xq[row * kp..].as_ptr(), sa[row * groups..].as_ptr());
        for half in 0..2 {
            // SAFETY: as in block512.
            unsafe {
                match h {
                    3 => tile256::<3>(groups, half, x, a, part, &mut s),
                    2 => tile256::<2>(groups, half, x, a, part, &mut s),
                    _ => tile256::<1>(groups, half, x, a, part, &mut s),
                }
            }
        }
        // SAFETY: rows row..row + h of dest, as the caller promises.
        unsafe { dest.down(row).store(&s[..h]) };
    });
}

/// As `tile512`, for the 16 outputs `half * 16..` of the panel, two 256-bit vectors each.
///
/// # Safety
/// AVX-VNNI; as `tile512`.
#[target_feature(enable = "avx2,avxvnni")]
unsafe fn tile256<const R: usize>(groups: usize, half: usize, x: *const u8, a: *const f32, part: &Part<'_>, out: &mut [[f32; NR]; MR256]) {
    let kp = groups * GROUP;
    let w = part.lines.as_ptr().cast::<i8>();
    let c0 = half * 16;
    // SAFETY: every pointer below stays within what the caller promises.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); 2]; R];
        for g in 0..groups {
            let off = part.offsets.as_ptr().add(g * NR + c0);
            let (o0, o1) = (_mm256_loadu_si256(off.cast()), _mm256_loadu_si256(off.add(8).cast()));
            let mut sums = [[o0, o1]; R];
            for q in 0..QUADS {
                let line = w.add((g * QUADS + q) * 128 + half * 64);
                let (w0, w1) = (_mm256_load_si256(line.cast()), _mm256_load_si256(line.add(32).cast()));
                for (r, s) in sums.iter_mut().enumerate() {
                    let b = _mm256_set1_epi32(x.add(r * kp + g * GROUP + q * 4).cast::<i32>().read_unaligned());
                    s[0] = _mm256_dpbusd_avx_epi32(s[0], b, w0);
                    s[1] = _mm256_dpbusd_avx_epi32(s[1], b, w1);
                }
            }
            let sc = part.scales.as_ptr().add(g * NR + c0);
            let (s0, s1) = (_mm256_loadu_ps(sc), _mm256_loadu_ps(sc.add(8)));
            for (r, (acc, s)) in acc.iter_mut().zip(&sums).enumerate() {
                let ar = _mm256_set1_ps(*a.add(r * groups + g));
                acc[0] = _mm256_add_ps(acc[0], _mm256_mul_ps(_mm256_cvtepi32_ps(s[0]), _mm256_mul_ps(s0, ar)));
                acc[1] = _mm256_add_ps(acc[1], _mm256_mul_ps(_mm256_cvtepi32_ps(s[1]), _mm256_mul_ps(s1, ar)));
            }
        }
        for (o, acc) in out.iter_mut().zip(&acc) {
            _mm256_storeu_ps(o.as_mut_ptr().add(c0), acc[0]);
            _mm256_storeu_ps(o.as_mut_ptr().add(c0 + 8), acc[1]);
        }
    }
}
