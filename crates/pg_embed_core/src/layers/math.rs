//! Element-wise building blocks shared by the layers: single-precision exp and erf that
//! vectorise, lane-wise sums, and the CPU features the `dispatch!` functions choose by.

/// Whether this process uses AVX2 and FMA (`cpu`).
#[cfg(target_arch = "x86_64")]
#[inline]
pub(crate) fn avx2() -> bool {
    crate::cpu::cpu().avx2
}

/// Width of the partial sums that let reductions vectorise.
pub(crate) const LANES: usize = 16;

/// The sum of `x` in `LANES` partial sums.
#[inline(always)]
pub(crate) fn sum(x: &[f32]) -> f32 {
    let mut lanes = [0f32; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for (l, v) in lanes.iter_mut().zip(c) {
            *l += v;
        }
    }
    lanes.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>()
}

/// The largest value of `x` (-inf for none; NaN values are passed over), in `LANES` partial
/// maxima so that the loop vectorises. A maximum is exact whatever the order.
#[inline(always)]
pub(crate) fn max(x: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l = if v > *l { v } else { *l };
        }
    }
    let rest = chunks.remainder();
    lanes.iter().chain(rest).fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m })
}

/// Each value v of `x` replaced by e^(v - `max`); returns their sum, added as `sum` adds
/// (the same partial sums, so the same result as `sum` of the replaced values).
#[inline(always)]
pub(crate) fn exp_sum(x: &mut [f32], max: f32) -> f32 {
    let mut lanes = [0f32; LANES];
    let mut chunks = x.chunks_exact_mut(LANES);
    for c in &mut chunks {
        for (l, v) in lanes.iter_mut().zip(c) {
            *v = exp(*v - max);
            *l += *v;
        }
    }
    let rest = chunks.into_remainder();
    for v in rest.iter_mut() {
        *v = exp(*v - max);
    }
    lanes.iter().sum::<f32>() + rest.iter().sum::<f32>()
}

/// The sum of (v - center)^2 over `x` in `LANES` partial sums.
#[inline(always)]
pub(crate) fn sum_squares(x: &[f32], center: f32) -> f32 {
    let mut lanes = [0f32; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for (l, v) in lanes.iter_mut().zip(c) {
            *l += (v - center) * (v - center);
        }
    }
    let tail: f32 = chunks.remainder().iter().map(|v| (v - center) * (v - center)).sum();
    lanes.iter().sum::<f32>() + tail
}

/// e^x in single precision for x <= 0 (softmax after its maximum is taken off): 2^n times
/// a degree-6 polynomial on the remainder (Cephes' expf), branch-free so that loops over
/// it vectorise. Within 2 ulp of the exact value down to e^-87; below, the smallest
/// normal float instead of 0.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const ROUND: f32 = 12_582_912.0; // 1.5 x 2^23: adding and taking it off rounds to an integer
    let x = x.clamp(-87.0, 0.0);
    let shifted = x * LOG2E + ROUND;
    let n = shifted - ROUND;
    // n as an integer, read off the sum's low bits (no float-to-int cast, whose saturating
    // rules keep the loops calling this from vectorising).
    let k = shifted.to_bits().wrapping_sub(ROUND.to_bits()) as i32;
    let r = x - n * 0.693_359_4 - n * -2.121_944_4e-4;
    let mut p = 1.987_569_1e-4_f32;
    p = p * r + 1.398_2e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 5.000_000_1e-1;
    let y = p * r * r + r + 1.0;
    y * f32::from_bits(((k + 127) << 23) as u32)
}

/// The logistic function 1 / (1 + e^-x) for any x, from [`exp`] of -|x| (so within a few
/// ulp, and branch-free: the sign picks one of two quotients).
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    let e = exp(-x.abs());
    let s = 1.0 / (1.0 + e);
    if x >= 0.0 {
        s
    } else {
        e * s
    }
}

/// The error function in single precision: Abramowitz and Stegun 7.1.26,
/// sign(x) (1 - r(t) t e^(-x^2)) with t = 1 / (1 + p |x|), the formula ATen's vectorised
/// CPU erf has used, evaluated with fused multiply-adds. Within 5e-7 of the exact value
/// (the formula's own error is 1.5e-7, the rest is single-precision rounding near 1; GELU
/// multiplies it by x / 2). torch's own GELU is not exactly rounded either: over [-5, 5],
/// GELU with this erf differs from torch 2.x's by 1.2e-7 on average (1.4e-6 at most), the
/// exactly rounded GELU by 1.0e-7 (1.2e-6 at most). Branch-free, so
/// loops over it vectorise at full single-precision width: measured, GELU went from 13% of
/// a batch's time (the double-precision rational erf this replaced) to a few percent.
#[inline(always)]
#[allow(clippy::excessive_precision)]
pub fn erf(x: f32) -> f32 {
    let t = 1.0 / 0.3275911_f32.mul_add(x.abs(), 1.0);
    let mut r = 1.061405429_f32.mul_add(t, -1.453152027);
    r = r.mul_add(t, 1.421413741);
    r = r.mul_add(t, -0.284496736);
    r = r.mul_add(t, 0.254829592);
    let y = (-exp(-(x * x)) * t).mul_add(r, 1.0);
    y.copysign(x)
}
