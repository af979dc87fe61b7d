//! The `portable-int8` kernel: plain Rust that the compiler vectorizes (through
//! `dispatch!`, for AVX-512, AVX2 + FMA or the baseline), so it runs on every CPU; and the
//! quantization of the input rows, which every kernel uses.

use super::{quantize, scale, Part, GROUP, NR, QUADS};
use crate::kernels::bf16::Dest;

dispatch! {
    /// `x` ([rows, k] float32) quantized in groups of 32 inputs into `xq` ([rows, groups *
    /// 32] bytes: each value's int8 bits XORed with `flip`; padding is the value 0) and
    /// their scales into `sa` ([rows, groups]).
    pub fn quantize_rows(x: &[f32], k: usize, groups: usize, flip: u8, xq: &mut [u8], sa: &mut [f32]) {
        let kp = groups * GROUP;
        for ((row, dst), scales) in x.chunks_exact(k.max(1)).zip(xq.chunks_exact_mut(kp.max(1))).zip(sa.chunks_exact_mut(groups.max(1))) {
            for (g, s) in scales.iter_mut().enumerate() {
                let part = &row[g * GROUP..((g + 1) * GROUP).min(k)];
                *s = scale(part.iter().fold(0f32, |m, v| m.max(v.abs())));
                let out = &mut dst[g * GROUP..(g + 1) * GROUP];
                for (o, v) in out.iter_mut().zip(part) {
                    *o = quantize(*v, *s) as u8 ^ flip;
                }
                for o in &mut out[part.len()..] {
                    *o = flip;
                }
            }
        }
    }
}

/// Rows summed together: each quad's weights are widened once for all of them.
const RT: usize = 4;

/// The scaled sums of the first `rows` rows of `xq` (unflipped) and one panel, finished into
/// `dest`.
///
/// # Safety
/// `dest` holds `rows` rows (this thread's); xq `rows` rows of `part.groups * 32` bytes, sa
/// `rows` rows of `part.groups` scales.
pub unsafe fn block(xq: &[u8], sa: &[f32], part: &Part<'_>, rows: usize, dest: &Dest) {
    let (groups, kp) = (part.groups, part.groups * GROUP);
    dispatch! {
        fn sums(x: &[u8], sa: &[f32], kp: usize, groups: usize, lines: &[super::QuadLine], scales: &[f32], out: &mut [[f32; NR]; RT]) {
            let rows = x.len() / kp.max(1);
            let mut acc = [[0f32; NR]; RT];
            for g in 0..groups {
                let mut isum = [[0i32; NR]; RT];
                for q in 0..QUADS {
                    let (lo, hi) = (&lines[(g * QUADS + q) * 2].0, &lines[(g * QUADS + q) * 2 + 1].0);
                    for j in 0..4 {
                        let mut w = [0i32; NR];
                        for c in 0..16 {
                            w[c] = i32::from(lo[c * 4 + j]);
                            w[16 + c] = i32::from(hi[c * 4 + j]);
                        }
                        for (r, isum) in isum.iter_mut().enumerate().take(rows) {
                            let v = i32::from(x[r * kp + g * GROUP + q * 4 + j] as i8);
                            for c in 0..NR {
                                isum[c] += v * w[c];
                            }
                        }
                    }
                }
                let sw = &scales[g * NR..(g + 1) * NR];
                for r in 0..rows {
                    let a = sa[r * groups + g];
                    for c in 0..NR {
                        acc[r][c] += isum[r][c] as f32 * (sw[c] * a);
                    }
                }
            }
            *out = acc;
        }
    }
    let mut s = [[0f32; NR]; RT];
    for first in (0..rows).step_by(RT) {
        let n = RT.min(rows - first);
        sums(&xq[first * kp..(first + n) * kp], &sa[first * groups..(first + n) * groups], kp, groups, part.lines, part.scales, &mut s);
        // SAFETY: rows first..first + n of dest, as the caller promises.
        unsafe { dest.down(first).store(&s[..n]) };
    }
}
