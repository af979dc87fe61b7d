//! The encoder's hot path, in plain Rust over packed tokens: every sequence of a batch is
//! laid end to end in one [tokens, width] matrix, so the linear layers (almost all of the
//! work) run as one GEMM over real tokens only and a batch of mixed lengths costs the sum of
//! its lengths, not count x longest. Attention runs per sequence and head. Weights are
//! kept in torch's [out, in] layout; bias and residual are added after each product in
//! torch's order; the activation runs over the product in place.
//!
//! GEMMs are the `gemm` crate's (the kernels candle itself uses). A batch of several
//! sequences is split into one group of whole sequences per compute thread, each group on
//! single-threaded GEMMs with no synchronisation between layers; a lone sequence splits each
//! GEMM across the threads instead. Threads come from the rayon pool the caller runs in
//! (`crate::threads`); they never call into Postgres.

use gemm::Parallelism;

use crate::matmul;
use rayon::prelude::*;

/// Whether this CPU has AVX2 and FMA (checked once).
#[cfg(target_arch = "x86_64")]
fn avx2() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
}

/// An element-wise function compiled three times: for AVX-512 (512-bit vectors), for AVX2 +
/// FMA, and for baseline x86-64 (or the target's baseline); the widest the CPU has runs, so
/// the library runs on any CPU.
macro_rules! dispatch {
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block) => {
        $(#[$doc])*
        fn $name($($arg: $ty),*) {
            #[inline(always)]
            fn body($($arg: $ty),*) $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx2,fma")]
                unsafe fn widest($($arg: $ty),*) {
                    body($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn wide($($arg: $ty),*) {
                    body($($arg),*)
                }
                if matmul::available() {
                    // SAFETY: the CPU has the features `widest` is compiled for.
                    return unsafe { widest($($arg),*) };
                }
                if avx2() {
                    // SAFETY: the CPU has the features `wide` is compiled for.
                    return unsafe { wide($($arg),*) };
                }
            }
            body($($arg),*)
        }
    };
}

/// A linear layer. On CPUs with AVX-512F its weight is packed once, at load, for
/// `crate::matmul`; elsewhere it stays in torch's [out, in] layout for the `gemm` crate,
/// which packs per call (measured on all-MiniLM-L6-v2, that layout gave 1.5x faster
/// single-sentence calls than a pre-transposed [in, out] copy, and equal batch throughput).
pub struct Linear {
    weight: Weight,
    bias: Vec<f32>,
    inputs: usize,
    outputs: usize,
}

enum Weight {
    Torch(Vec<f32>),
    Packed(matmul::PackedWeight),
}

impl Linear {
    /// From torch's layout: `weight` [outputs, inputs] row-major, `bias` [outputs].
    pub fn from_torch(weight: Vec<f32>, bias: Vec<f32>, outputs: usize, inputs: usize) -> Self {
        Self::with_layout(weight, bias, outputs, inputs, matmul::available())
    }

    fn with_layout(weight: Vec<f32>, bias: Vec<f32>, outputs: usize, inputs: usize, packed: bool) -> Self {
        assert_eq!(weight.len(), outputs * inputs, "weight size");
        assert_eq!(bias.len(), outputs, "bias size");
        let weight = if packed {
            Weight::Packed(matmul::PackedWeight::pack(&weight, outputs, inputs))
        } else {
            Weight::Torch(weight)
        };
        Linear { weight, bias, inputs, outputs }
    }

    /// Layers over the same input side by side, from torch's layout: parts of (`weight`
    /// [outputs, inputs], `bias` [outputs]) become one [sum of outputs, inputs] layer (Q, K
    /// and V).
    pub fn side_by_side(parts: Vec<(Vec<f32>, Vec<f32>)>, inputs: usize) -> Self {
        let outputs = parts.iter().map(|(_, b)| b.len()).sum();
        let (weights, biases): (Vec<_>, Vec<_>) = parts.into_iter().unzip();
        Self::from_torch(weights.concat(), biases.concat(), outputs, inputs)
    }

    pub fn outputs(&self) -> usize {
        self.outputs
    }

    /// x W + b for the rows of `x`, on the caller's compute threads.
    pub fn apply(&self, x: &[f32]) -> Vec<f32> {
        let mut out = vec![0f32; x.len() / self.inputs * self.outputs];
        self.forward(x, None, None, &mut out, rayon::current_num_threads());
        out
    }

    /// out[r] = x[r] W + b (+ residual[r]) for the `rows` rows of `x`, rounded in
    /// torch's order: the product, plus the bias, plus the residual; then `then` over the
    /// result, in pieces. The product is split across `threads` compute threads of the
    /// current pool.
    pub fn forward(
        &self,
        x: &[f32],
        residual: Option<&[f32]>,
        then: Option<&matmul::Then<'_>>,
        out: &mut [f32],
        threads: usize,
    ) {
        let (k, n) = (self.inputs, self.outputs);
        let rows = x.len() / k;
        assert_eq!(x.len(), rows * k, "input width");
        assert_eq!(out.len(), rows * n, "output size");
        if let Some(res) = residual {
            assert_eq!(res.len(), rows * n, "residual size");
        }
        if rows == 0 {
            return;
        }
        match &self.weight {
            Weight::Packed(p) => return p.product(x, Some(&self.bias), residual, then, out, threads),
            // SAFETY: out is [rows, n] and x is [rows, k], row-major; weight is [n, k]
            // row-major, read as the [k, n] right-hand side (column stride k); all of exactly
            // those sizes (checked above); dst does not alias either input.
            Weight::Torch(weight) => unsafe {
                gemm::gemm(
                    rows,
                    n,
                    k,
                    out.as_mut_ptr(),
                    1,
                    n as isize,
                    false,
                    x.as_ptr(),
                    1,
                    k as isize,
                    weight.as_ptr(),
                    k as isize,
                    1,
                    0.0,
                    1.0,
                    false,
                    false,
                    false,
                    parallelism(threads),
                )
            },
        }
        add_bias(out, &self.bias, residual);
        if let Some(then) = then {
            for_rows(out, n, threads, then);
        }
    }
}

dispatch! {
    /// Each row of `out` plus `bias`, plus the same row of `residual` if given.
    fn add_bias(out: &mut [f32], bias: &[f32], residual: Option<&[f32]>) {
        let n = bias.len();
        match residual {
            Some(res) => {
                for (o, r) in out.chunks_exact_mut(n).zip(res.chunks_exact(n)) {
                    for ((o, r), b) in o.iter_mut().zip(r).zip(bias) {
                        *o = (*o + b) + r;
                    }
                }
            }
            None => {
                for o in out.chunks_exact_mut(n) {
                    for (o, b) in o.iter_mut().zip(bias) {
                        *o += b;
                    }
                }
            }
        }
    }
}

/// Layer normalisation over each row.
pub struct LayerNorm {
    weight: Vec<f32>,
    bias: Vec<f32>,
    eps: f32,
}

impl LayerNorm {
    pub fn new(weight: Vec<f32>, bias: Vec<f32>, eps: f64) -> Self {
        assert_eq!(weight.len(), bias.len(), "layer norm sizes");
        LayerNorm { weight, bias, eps: eps as f32 }
    }

    pub fn forward(&self, x: &mut [f32]) {
        layer_norm(x, &self.weight, &self.bias, self.eps)
    }
}

dispatch! {
    /// Each row of `x` normalised to zero mean and unit variance, then scaled and shifted.
    fn layer_norm(x: &mut [f32], weight: &[f32], bias: &[f32], eps: f32) {
        let width = weight.len();
        for row in x.chunks_exact_mut(width) {
            let mean = sum(row) / width as f32;
            let mut lanes = [0f32; LANES];
            let mut chunks = row.chunks_exact(LANES);
            for c in &mut chunks {
                for (l, v) in lanes.iter_mut().zip(c) {
                    *l += (v - mean) * (v - mean);
                }
            }
            let tail: f32 = chunks.remainder().iter().map(|v| (v - mean) * (v - mean)).sum();
            let var = (lanes.iter().sum::<f32>() + tail) / width as f32;
            // torch's order: x * rstd - mean * rstd, then * weight + bias.
            let rstd = 1.0 / (var + eps).sqrt();
            let shift = -rstd * mean;
            for ((v, w), b) in row.iter_mut().zip(weight).zip(bias) {
                *v = (*v * rstd + shift) * w + b;
            }
        }
    }
}

/// Width of the partial sums that let reductions vectorise.
const LANES: usize = 16;

/// The sum of `x` in `LANES` partial sums.
#[inline(always)]
fn sum(x: &[f32]) -> f32 {
    let mut lanes = [0f32; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for (l, v) in lanes.iter_mut().zip(c) {
            *l += v;
        }
    }
    lanes.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>()
}

/// The feed-forward activations of the BERT family (transformers' `hidden_act`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// x * Phi(x) with the exact error function ("gelu").
    Gelu,
    /// The tanh approximation ("gelu_new", "gelu_pytorch_tanh").
    GeluTanh,
    Relu,
}

impl Activation {
    pub fn apply(self, x: &mut [f32]) {
        match self {
            Activation::Gelu => gelu(x),
            Activation::GeluTanh => gelu_tanh(x),
            Activation::Relu => relu(x),
        }
    }
}

dispatch! {
    fn gelu(x: &mut [f32]) {
        for v in x {
            *v = 0.5 * *v * (1.0 + erf(*v * std::f32::consts::FRAC_1_SQRT_2));
        }
    }
}

dispatch! {
    fn gelu_tanh(x: &mut [f32]) {
        const C: f32 = 0.797_884_6; // sqrt(2 / pi)
        for v in x {
            let u = *v;
            *v = 0.5 * u * (1.0 + (C * (u + 0.044715 * u * u * u)).tanh());
        }
    }
}

dispatch! {
    fn relu(x: &mut [f32]) {
        for v in x {
            *v = v.max(0.0);
        }
    }
}

dispatch! {
    /// Each row of `x` (`width` wide) plus `add`'s row, replaced by e^(x - its maximum);
    /// `inverse_sums` gets 1 / the sum of each row (the softmax is `x * inverse_sums`, applied
    /// after the product with V as torch's fused attention does).
    fn unnormalized_softmax_rows(x: &mut [f32], width: usize, add: Option<(&[f32], usize)>, inverse_sums: &mut [f32]) {
        for ((i, row), inv) in x.chunks_exact_mut(width).enumerate().zip(inverse_sums.iter_mut()) {
            if let Some((add, stride)) = add {
                for (s, a) in row.iter_mut().zip(&add[i * stride..i * stride + width]) {
                    *s += a;
                }
            }
            // (A comparison, not f32::max, whose NaN rule keeps the loop from vectorising;
            // a NaN score gives a NaN row either way.)
            let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
            for s in row.iter_mut() {
                *s = exp(*s - max);
            }
            *inv = 1.0 / sum(row);
        }
    }
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
    let n = (x * LOG2E + ROUND) - ROUND;
    let r = x - n * 0.693_359_4 - n * -2.121_944_4e-4;
    let mut p = 1.987_569_1e-4_f32;
    p = p * r + 1.398_2e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 5.000_000_1e-1;
    let y = p * r * r + r + 1.0;
    y * f32::from_bits(((n as i32 + 127) << 23) as u32)
}

/// The error function for single-precision arguments: a rational approximation over
/// [-4, 4] (erf is +-1 to float precision outside), odd polynomial over even polynomial
/// in x^2, evaluated in double precision (in single precision its rounding alone reaches
/// 4 ulp), branch-free so that the loops calling it vectorise. Within 1.5e-7 of the exact
/// value everywhere.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let x = (x as f64).clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = -2.726_142_258_013_06e-10_f64;
    p = p * x2 + 2.770_681_424_959_02e-8;
    p = p * x2 + -2.101_024_020_825_08e-6;
    p = p * x2 + -5.692_506_394_623_46e-5;
    p = p * x2 + -7.349_906_303_268_55e-4;
    p = p * x2 + -2.954_599_808_540_25e-3;
    p = p * x2 + -1.609_603_332_624_15e-2;
    let mut q = -1.456_607_184_649_96e-5_f64;
    q = q * x2 + -2.133_740_552_789_05e-4;
    q = q * x2 + -1.682_826_974_382_03e-3;
    q = q * x2 + -7.373_329_167_204_68e-3;
    q = q * x2 + -1.426_473_905_141_89e-2;
    // 1 / q from a single-precision division refined by one Newton step in double precision
    // (relative error ~1e-14): a double-precision division costs as much as the rest of the
    // function.
    let r = (1.0 / q as f32) as f64;
    let r = r * (2.0 - q * r);
    (x * p * r) as f32
}

/// One post-LayerNorm encoder layer (BERT's `BertLayer`).
pub struct Layer {
    /// Q, K and V side by side: [hidden, 3 hidden].
    pub qkv: Linear,
    pub attention_out: Linear,
    pub attention_norm: LayerNorm,
    pub up: Linear,
    pub down: Linear,
    pub output_norm: LayerNorm,
}

/// An additive attention bias per head, [heads, size, size], read at [head, query, key]
/// for positions within each sequence (MPNet's relative position bias).
pub struct AttentionBias<'a> {
    pub values: &'a [f32],
    pub size: usize,
}

/// The stack of post-LayerNorm layers of the BERT family.
pub struct Stack {
    pub layers: Vec<Layer>,
    pub heads: usize,
    pub hidden: usize,
    pub activation: Activation,
}

impl Stack {
    /// Runs every layer over `x`: [tokens, hidden], the sequences of `lengths` end to end.
    pub fn forward(&self, x: &mut [f32], lengths: &[usize], bias: Option<&AttentionBias>) {
        let threads = rayon::current_num_threads().max(1);
        let tokens: usize = lengths.iter().sum();
        assert_eq!(x.len(), tokens * self.hidden, "packed input size");
        if threads > 1 && lengths.len() >= 2 * threads {
            // One group of whole sequences per thread, of about equal token counts.
            let mut groups: Vec<(&mut [f32], &[usize])> = Vec::with_capacity(threads);
            let (mut rest, mut rest_lengths) = (x, lengths);
            for g in 0..threads {
                let left: usize = rest_lengths.iter().sum();
                let want = left / (threads - g);
                let mut count = 0;
                let mut taken = 0;
                while count < rest_lengths.len() && (taken < want || count == 0) {
                    taken += rest_lengths[count];
                    count += 1;
                }
                if g == threads - 1 {
                    count = rest_lengths.len();
                    taken = left;
                }
                let (head, tail) = std::mem::take(&mut rest).split_at_mut(taken * self.hidden);
                groups.push((head, &rest_lengths[..count]));
                rest = tail;
                rest_lengths = &rest_lengths[count..];
            }
            groups.into_par_iter().for_each(|(x, lengths)| self.run(x, lengths, bias, 1));
        } else {
            self.run(x, lengths, bias, threads);
        }
    }

    fn run(&self, x: &mut [f32], lengths: &[usize], bias: Option<&AttentionBias>, threads: usize) {
        let tokens: usize = lengths.iter().sum();
        if tokens == 0 {
            return;
        }
        let h = self.hidden;
        let mut qkv = vec![0f32; tokens * 3 * h];
        let mut context = vec![0f32; tokens * h];
        let mut attended = vec![0f32; tokens * h];
        let mut inner = vec![0f32; tokens * self.layers.first().map_or(0, |l| l.up.outputs())];
        for layer in &self.layers {
            layer.qkv.forward(x, None, None, &mut qkv, threads);
            attention(&qkv, h, self.heads, lengths, bias, &mut context, threads);
            layer.attention_out.forward(&context, Some(x), None, &mut attended, threads);
            for_rows(&mut attended, h, threads, &|rows| layer.attention_norm.forward(rows));
            inner.resize(tokens * layer.up.outputs(), 0.0);
            let activation = |rows: &mut [f32]| self.activation.apply(rows);
            layer.up.forward(&attended, None, Some(&activation), &mut inner, threads);
            layer.down.forward(&inner, Some(&attended), None, x, threads);
            for_rows(x, h, threads, &|rows| layer.output_norm.forward(rows));
        }
    }
}

fn parallelism(threads: usize) -> Parallelism {
    if threads > 1 {
        Parallelism::Rayon(threads)
    } else {
        Parallelism::None
    }
}

/// `f` over whole rows of `x`, split across `threads` when there are several.
fn for_rows(x: &mut [f32], width: usize, threads: usize, f: &(dyn Fn(&mut [f32]) + Sync)) {
    let rows = x.len() / width.max(1);
    if threads > 1 && rows >= 2 * threads {
        let per = rows.div_ceil(threads) * width;
        x.par_chunks_mut(per).for_each(f);
    } else {
        f(x);
    }
}

/// A pointer that may cross to the pool's threads; every task writes a disjoint block.
#[derive(Clone, Copy)]
struct Out(*mut f32);
unsafe impl Send for Out {}
unsafe impl Sync for Out {}

/// Scaled dot-product attention of every sequence and head: `qkv` [tokens, 3 hidden] (Q, K,
/// V side by side, heads contiguous within each), written to `out` [tokens, hidden].
fn attention(
    qkv: &[f32],
    hidden: usize,
    heads: usize,
    lengths: &[usize],
    bias: Option<&AttentionBias>,
    out: &mut [f32],
    threads: usize,
) {
    let d = hidden / heads;
    let stride = 3 * hidden;
    let scale = 1.0 / (d as f32).sqrt();
    let tokens: usize = lengths.iter().sum();
    assert_eq!(qkv.len(), tokens * stride, "qkv size");
    assert_eq!(out.len(), tokens * hidden, "context size");
    if let Some(b) = bias {
        let longest = lengths.iter().copied().max().unwrap_or(0);
        assert!(b.size >= longest && b.values.len() == heads * b.size * b.size, "bias size");
    }
    let mut tasks = Vec::with_capacity(lengths.len() * heads);
    let mut offset = 0;
    for &len in lengths {
        if len > 0 {
            tasks.extend((0..heads).map(|head| (offset, len, head)));
        }
        offset += len;
    }
    let dst = Out(out.as_mut_ptr());
    let task = |&(offset, len, head): &(usize, usize, usize)| {
        let dst = dst;
        let mut scores = vec![0f32; len * len];
        let q = qkv[offset * stride + head * d..].as_ptr();
        let k = qkv[offset * stride + hidden + head * d..].as_ptr();
        let v = qkv[offset * stride + 2 * hidden + head * d..].as_ptr();
        // SAFETY: q, k and v address rows offset..offset + len of qkv (checked size) at
        // row stride 3 hidden, columns within one head; scores is [len, len]; the context
        // block (rows offset..offset + len, columns head d..(head + 1) d of out) belongs to
        // this task alone.
        unsafe {
            // scores = scale * Q K^T
            gemm::gemm(
                len,
                len,
                d,
                scores.as_mut_ptr(),
                1,
                len as isize,
                false,
                q,
                1,
                stride as isize,
                k,
                stride as isize,
                1,
                0.0,
                scale,
                false,
                false,
                false,
                Parallelism::None,
            );
        }
        let add = bias.map(|b| (&b.values[head * b.size * b.size..(head + 1) * b.size * b.size], b.size));
        let mut inverse_sums = vec![0f32; len];
        unnormalized_softmax_rows(&mut scores, len, add, &mut inverse_sums);
        unsafe {
            // context = P V
            gemm::gemm(
                len,
                d,
                len,
                dst.0.add(offset * hidden + head * d),
                1,
                hidden as isize,
                false,
                scores.as_ptr(),
                1,
                len as isize,
                v,
                1,
                stride as isize,
                0.0,
                1.0,
                false,
                false,
                false,
                Parallelism::None,
            );
        }
        for (row, inv) in inverse_sums.iter().enumerate() {
            // SAFETY: row < len: this task's block of out, d values from column head d.
            let out =
                unsafe { std::slice::from_raw_parts_mut(dst.0.add((offset + row) * hidden + head * d), d) };
            for v in out {
                *v *= inv;
            }
        }
    };
    if threads > 1 && tasks.len() > 1 {
        tasks.par_iter().for_each(task);
    } else {
        tasks.iter().for_each(task);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_is_within_1_5e_7_of_the_exact_value() {
        // The reference: candle's f64 erf (a port of the Boost implementation).
        let mut worst = 0f64;
        for i in -60_000..=60_000 {
            let x = i as f64 / 10_000.0;
            let got = erf(x as f32) as f64;
            let want = candle_core::cpu::erf::erf_f64(x);
            worst = worst.max((got - want).abs());
        }
        eprintln!("erf worst {worst:e}");
        assert!(worst < 1.5e-7, "worst {worst:e}");
    }

    #[test]
    fn exp_is_within_2_ulp_over_the_softmax_range() {
        let mut worst = 0f64;
        for i in 0..=870_000 {
            let x = -(i as f32) / 10_000.0;
            let want = (x as f64).exp();
            worst = worst.max(((exp(x) as f64) - want).abs() / want);
        }
        assert!(worst < 2.5e-7, "worst relative error {worst:e}");
    }

    #[test]
    fn softmax_rows_with_a_bias_match_the_definition() {
        let mut x: Vec<f32> = (0..12).map(|i| (i as f32 * 0.7).sin() * 3.0).collect();
        let add: Vec<f32> = (0..16).map(|i| i as f32 * 0.05).collect();
        let want: Vec<f32> = x
            .chunks(3)
            .enumerate()
            .flat_map(|(i, row)| {
                let e: Vec<f64> =
                    row.iter().enumerate().map(|(j, v)| ((v + add[i * 4 + j]) as f64).exp()).collect();
                let s: f64 = e.iter().sum();
                e.into_iter().map(move |v| (v / s) as f32)
            })
            .collect();
        let mut inverse_sums = [0f32; 4];
        unnormalized_softmax_rows(&mut x, 3, Some((&add, 4)), &mut inverse_sums);
        for (i, (g, w)) in x.iter().zip(&want).enumerate() {
            let g = g * inverse_sums[i / 3];
            assert!((g - w).abs() < 1e-6, "{g} vs {w}");
        }
    }

    #[test]
    fn linear_matches_a_plain_product() {
        let (rows, k, n) = (5, 7, 3);
        let weight: Vec<f32> = (0..n * k).map(|i| (i as f32 * 0.37).sin()).collect();
        let bias: Vec<f32> = (0..n).map(|i| i as f32 * 0.1).collect();
        let x: Vec<f32> = (0..rows * k).map(|i| (i as f32 * 0.11).cos()).collect();
        let residual: Vec<f32> = (0..rows * n).map(|i| i as f32).collect();
        for packed in [false, matmul::available()] {
            let layer = Linear::with_layout(weight.clone(), bias.clone(), n, k, packed);
            let mut out = vec![0f32; rows * n];
            layer.forward(&x, Some(&residual), None, &mut out, 1);
            for r in 0..rows {
                for o in 0..n {
                    let want: f32 = (0..k).map(|i| x[r * k + i] * weight[o * k + i]).sum::<f32>()
                        + bias[o]
                        + residual[r * n + o];
                    assert!((out[r * n + o] - want).abs() < 1e-5, "packed {packed}: row {r} col {o}");
                }
            }
        }
    }
}
