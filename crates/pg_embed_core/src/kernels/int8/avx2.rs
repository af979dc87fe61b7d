//! The `avx2-int8` kernel, for CPUs with AVX2 and no VNNI: `vpmaddubsw` multiplies unsigned
//! bytes by signed ones into pairs summed in int16, which would saturate for q + 128; so it
//! takes |w| (unsigned) times x with w's sign (`vpsignb`): each product is at most 127 x 127
//! and a pair's sum at most 32,258, exact in int16; `vpmaddwd` by ones adds the pairs into
//! int32. The sums are portable's exactly, and the scaling is portable's, operation for
//! operation, so the results are the same bit for bit. It reads the input rows as they are
//! (q, flip 0).

use super::{Part, GROUP, NR, QUADS};
use crate::kernels::bf16::Dest;
use std::arch::x86_64::*;

/// Rows per register tile, over 16 of the panel's outputs at a time: 2 x 3 int32 sums, two
/// weight vectors and their magnitudes, the ones, a broadcast (the scaled sums stay in L1).
const MR: usize = 3;

/// As `portable::block`, with AVX2.
///
/// # Safety
/// The CPU has AVX2; as `portable::block`.
pub unsafe fn block(xq: &[u8], sa: &[f32], part: &Part<'_>, rows: usize, dest: &Dest) {
    let (groups, kp) = (part.groups, part.groups * GROUP);
    assert!(xq.len() >= rows * kp && sa.len() >= rows * groups);
    assert!(part.lines.len() >= groups * QUADS * 2 && part.scales.len() >= groups * NR);
    super::vnni::tiles(rows, MR, |row, h| {
        let mut s = [[0f32; NR]; MR];
        let (x, a) = (xq[row * kp..].as_ptr(), sa[row * groups..].as_ptr());
        for half in 0..2 {
            // SAFETY: h rows from `row` are within xq and sa (asserted); the panel holds
            // `groups` groups (asserted).
            unsafe {
                match h {
                    3 => tile::<3>(groups, half, x, a, part, &mut s),
                    2 => tile::<2>(groups, half, x, a, part, &mut s),
                    _ => tile::<1>(groups, half, x, a, part, &mut s),
                }
            }
        }
        // SAFETY: rows row..row + h of dest, as the caller promises.
        unsafe { dest.down(row).store(&s[..h]) };
    });
}

/// The scaled sums of R rows and the 16 outputs `half * 16..` of the panel into `out`.
///
/// # Safety
/// AVX2; x and a valid for R rows; part holds `groups` groups.
#[target_feature(enable = "avx2")]
unsafe fn tile<const R: usize>(groups: usize, half: usize, x: *const u8, a: *const f32, part: &Part<'_>, out: &mut [[f32; NR]; MR]) {
    let kp = groups * GROUP;
    let w = part.lines.as_ptr().cast::<i8>();
    let c0 = half * 16;
    // SAFETY: every pointer below stays within what the caller promises.
    unsafe {
        let ones = _mm256_set1_epi16(1);
        for g in 0..groups {
            let mut sums = [[_mm256_setzero_si256(); 2]; R];
            for q in 0..QUADS {
                let line = w.add((g * QUADS + q) * 128 + half * 64);
                let (w0, w1) = (_mm256_load_si256(line.cast()), _mm256_load_si256(line.add(32).cast()));
                let (m0, m1) = (_mm256_abs_epi8(w0), _mm256_abs_epi8(w1));
                for (r, s) in sums.iter_mut().enumerate() {
                    let b = _mm256_set1_epi32(x.add(r * kp + g * GROUP + q * 4).cast::<i32>().read_unaligned());
                    let p0 = _mm256_maddubs_epi16(m0, _mm256_sign_epi8(b, w0));
                    let p1 = _mm256_maddubs_epi16(m1, _mm256_sign_epi8(b, w1));
                    s[0] = _mm256_add_epi32(s[0], _mm256_madd_epi16(p0, ones));
                    s[1] = _mm256_add_epi32(s[1], _mm256_madd_epi16(p1, ones));
                }
            }
            let sc = part.scales.as_ptr().add(g * NR + c0);
            let (s0, s1) = (_mm256_loadu_ps(sc), _mm256_loadu_ps(sc.add(8)));
            for (r, s) in sums.iter().enumerate() {
                let ar = _mm256_set1_ps(*a.add(r * groups + g));
                let o = out[r].as_mut_ptr().add(c0);
                let acc0 = _mm256_add_ps(_mm256_loadu_ps(o), _mm256_mul_ps(_mm256_cvtepi32_ps(s[0]), _mm256_mul_ps(s0, ar)));
                let acc1 = _mm256_add_ps(_mm256_loadu_ps(o.add(8)), _mm256_mul_ps(_mm256_cvtepi32_ps(s[1]), _mm256_mul_ps(s1, ar)));
                _mm256_storeu_ps(o, acc0);
                _mm256_storeu_ps(o.add(8), acc1);
            }
        }
    }
}
