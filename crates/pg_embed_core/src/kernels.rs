//! The encoder's hot path, in plain Rust over packed tokens: every sequence of a batch is
//! laid end to end in one [tokens, width] matrix, so the linear layers (almost all of the
//! work) run as one GEMM over real tokens only and a batch of mixed lengths costs the sum of
//! its lengths, not count x longest. Attention runs per sequence and head. Bias and
//! residual are added after each product in torch's order; the activation runs over the
//! product in place.
//!
//! Products are `crate::matmul`'s on CPUs with AVX-512 (weights packed once at load), else
//! the `gemm` crate's on torch's [out, in] layout. A batch of several sequences is split
//! into one group of whole sequences per compute thread, each group on single-threaded
//! products with no synchronisation between layers; one or a few sequences run on all the
//! threads as one team (`crate::threads::team`) that shares out every step. Threads come
//! from the rayon pool the caller runs in (`crate::threads`); they never call into Postgres.

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
            Weight::Torch(weight) => torch_product(x, weight, out, n, k, threads),
        }
        add_bias(out, &self.bias, residual);
        if let Some(then) = then {
            for_rows(out, n, threads, then);
        }
    }
}

impl Linear {
    /// As `forward`, for this thread's share of the output columns.
    ///
    /// # Safety
    /// `out` is valid for writes of its length; while this runs, no other thread reads or
    /// writes this share's columns of it, nor writes `x` or `residual`.
    unsafe fn forward_shared(
        &self,
        x: &[f32],
        residual: Option<&[f32]>,
        then: Option<&matmul::Then<'_>>,
        out: Buf,
        share: Share,
    ) {
        match (&self.weight, share.member) {
            (_, None) => {
                // SAFETY: as the caller promises, and this thread has all of out.
                let out = unsafe { std::slice::from_raw_parts_mut(out.ptr, out.len) };
                self.forward(x, residual, then, out, share.threads)
            }
            (Weight::Packed(p), Some(_)) => {
                let rows = p.rows(x, out.len);
                share.split(p.panel_count(), |panels| {
                    // SAFETY: as the caller promises; the step's chunks are disjoint panels.
                    unsafe { p.product_panels(x, Some(&self.bias), residual, then, out.ptr, rows, panels) }
                });
            }
            (Weight::Torch(_), Some(_)) => unreachable!("a team computes packed weights only"),
        }
    }

    fn is_packed(&self) -> bool {
        matches!(self.weight, Weight::Packed(_))
    }
}

/// out = x W^T with the `gemm` crate: `x` [rows, inputs], `weight` [outputs, inputs] (torch's
/// layout, read as the [inputs, outputs] right-hand side), `out` [rows, outputs], all
/// row-major; the product split across `threads` compute threads of the current pool.
pub fn torch_product(
    x: &[f32],
    weight: &[f32],
    out: &mut [f32],
    outputs: usize,
    inputs: usize,
    threads: usize,
) {
    let rows = x.len() / inputs.max(1);
    assert_eq!(x.len(), rows * inputs, "input width");
    assert_eq!(weight.len(), outputs * inputs, "weight size");
    assert_eq!(out.len(), rows * outputs, "output size");
    if rows == 0 || outputs == 0 {
        return;
    }
    // SAFETY: out is [rows, outputs] and x is [rows, inputs], row-major; weight is
    // [outputs, inputs] row-major, read as the [inputs, outputs] right-hand side (column
    // stride inputs); all of exactly those sizes (checked above); out aliases neither.
    unsafe {
        gemm::gemm(
            rows,
            outputs,
            inputs,
            out.as_mut_ptr(),
            1,
            outputs as isize,
            false,
            x.as_ptr(),
            1,
            inputs as isize,
            weight.as_ptr(),
            inputs as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            parallelism(threads),
        )
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

    /// The layers over `x` on `threads` threads. With several threads and packed weights,
    /// the pool's threads run the layers as one team (`crate::threads::team`) that splits
    /// every step into chunks and waits for them between steps, with no fork and join per
    /// step (measured, single-sentence p50 over the bench corpus on 2 threads: 7.5 ms
    /// against 10.4 ms with a fork and join per step, of which the product's prefetch,
    /// added at the same time, accounts for 12-15%); otherwise each step forks and joins.
    fn run(&self, x: &mut [f32], lengths: &[usize], bias: Option<&AttentionBias>, threads: usize) {
        let tokens: usize = lengths.iter().sum();
        if tokens == 0 {
            return;
        }
        let h = self.hidden;
        let widest = self.layers.iter().map(|l| l.up.outputs()).max().unwrap_or(0);
        let need = tokens * (5 * h + widest);
        let mut scratch = ACTIVATIONS.take();
        if scratch.capacity() < need {
            scratch = zeroed(need);
        }
        scratch.resize(need, 0.0);
        let (qkv, rest) = scratch.split_at_mut(tokens * 3 * h);
        let (context, rest) = rest.split_at_mut(tokens * h);
        let (attended, inner) = rest.split_at_mut(tokens * h);
        let buffers = Buffers {
            x: Buf::of(x),
            qkv: Buf::of(qkv),
            context: Buf::of(context),
            attended: Buf::of(attended),
            inner: Buf::of(inner),
        };
        let packed = self.layers.iter().all(|l| {
            l.qkv.is_packed() && l.attention_out.is_packed() && l.up.is_packed() && l.down.is_packed()
        });
        if threads > 1 && packed && threads == rayon::current_num_threads() {
            crate::threads::team(STEPS_PER_LAYER * self.layers.len(), |member| {
                // SAFETY: the buffers outlive the team; every step's shares are disjoint
                // and the team meets between steps (see `steps`).
                unsafe { self.steps(&buffers, lengths, bias, Share { member: Some(member), threads: 1 }) }
            });
        } else {
            // SAFETY: this thread alone runs the steps; the buffers outlive them.
            unsafe { self.steps(&buffers, lengths, bias, Share { member: None, threads }) }
        }
        if scratch.capacity() <= KEEP_ACTIVATIONS {
            ACTIVATIONS.set(scratch);
        }
    }

    /// The layers, step by step (`STEPS_PER_LAYER` each): each step reads buffers no thread
    /// writes in it and writes chunks of one buffer (columns of a product, rows of a layer
    /// norm, sequences and heads of attention); in a team, a step ends when all its chunks
    /// are done.
    ///
    /// # Safety
    /// The buffers are valid, of the sizes `run` makes, and not used elsewhere meanwhile;
    /// every thread of the team runs this with the same arguments.
    unsafe fn steps(&self, b: &Buffers, lengths: &[usize], bias: Option<&AttentionBias>, share: Share) {
        let h = self.hidden;
        let tokens = b.x.len / h;
        let activation = |rows: &mut [f32]| self.activation.apply(rows);
        let tasks = attention_tasks(lengths, self.heads);
        unsafe {
            for layer in &self.layers {
                let inner = Buf { ptr: b.inner.ptr, len: tokens * layer.up.outputs() };
                layer.qkv.forward_shared(b.x.get(), None, None, b.qkv, share);
                attention(b.qkv.get(), h, self.heads, lengths, &tasks, bias, b.context, share);
                layer.attention_out.forward_shared(b.context.get(), Some(b.x.get()), None, b.attended, share);
                rows_shared(b.attended, h, share, &|rows| layer.attention_norm.forward(rows));
                layer.up.forward_shared(b.attended.get(), None, Some(&activation), inner, share);
                layer.down.forward_shared(inner.get(), Some(b.attended.get()), None, b.x, share);
                rows_shared(b.x, h, share, &|rows| layer.output_norm.forward(rows));
            }
        }
    }
}

thread_local! {
    /// The intermediate activations of the last forward pass on this thread, kept for the
    /// next one when they are small (single inputs): no allocation, page faults or zeroing
    /// per call, and a resident size that does not move.
    static ACTIVATIONS: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// The most floats of intermediate activations a thread keeps between calls: 4 MB, a
/// 256-token input of a 384-wide model. Batches allocate theirs and give them back.
const KEEP_ACTIVATIONS: usize = 1 << 20;

/// `n` zeros. A large buffer is mapped fresh (the allocator's threshold is fixed, see
/// `crate::threads`), not written here, and backed by huge pages (measured: page faults
/// were ~5% of a batch's time with 4 kB pages).
fn zeroed(n: usize) -> Vec<f32> {
    let v = vec![0f32; n];
    crate::threads::huge_pages(&v);
    v
}

/// The steps `Stack::steps` takes per layer.
const STEPS_PER_LAYER: usize = 7;

/// The activations of one forward pass, shared by the threads of a team.
struct Buffers {
    x: Buf,
    qkv: Buf,
    context: Buf,
    attended: Buf,
    inner: Buf,
}

/// A buffer that may cross to the pool's threads; who writes which part of it, and when,
/// is the business of the code that shares it.
#[derive(Clone, Copy)]
struct Buf {
    ptr: *mut f32,
    len: usize,
}
unsafe impl Send for Buf {}
unsafe impl Sync for Buf {}

impl Buf {
    fn of(v: &mut [f32]) -> Self {
        Buf { ptr: v.as_mut_ptr(), len: v.len() }
    }

    /// The address of element `i` (a method, so that closures capture the whole `Buf`,
    /// which may cross threads, not its pointer).
    ///
    /// # Safety
    /// `i` is within the buffer.
    unsafe fn at(self, i: usize) -> *mut f32 {
        unsafe { self.ptr.add(i) }
    }

    /// # Safety
    /// No thread writes the buffer while the slice lives.
    unsafe fn get<'a>(self) -> &'a [f32] {
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// How the work of one step is shared: alone (`member` None), this thread does all of it
/// with `threads` rayon threads; in a team, the step is cut into chunks that the team's
/// threads claim.
#[derive(Clone, Copy)]
struct Share<'a> {
    member: Option<&'a crate::threads::Member<'a>>,
    threads: usize,
}

impl Share<'_> {
    /// `f` over ranges that together cover 0..n: all of it when alone; in a team, one
    /// team step whose chunks are the ranges.
    fn split(&self, n: usize, f: impl Fn(std::ops::Range<usize>)) {
        match self.member {
            None => f(0..n),
            Some(m) => {
                let chunks = m.count().min(n).max(1);
                m.step(chunks, |c| f(n * c / chunks..n * (c + 1) / chunks))
            }
        }
    }
}

/// `f` over the rows of `buf`, shared as `share` says.
///
/// # Safety
/// No thread but those of `share` reads or writes the buffer meanwhile.
unsafe fn rows_shared(buf: Buf, width: usize, share: Share, f: &(dyn Fn(&mut [f32]) + Sync)) {
    let rows = buf.len / width.max(1);
    share.split(rows, |part| {
        // SAFETY: the rows are within the buffer, and each range is this call's alone.
        let mine =
            unsafe { std::slice::from_raw_parts_mut(buf.ptr.add(part.start * width), part.len() * width) };
        if share.member.is_some() {
            f(mine)
        } else {
            for_rows(mine, width, share.threads, f)
        }
    })
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

/// (offset, length, head) of every sequence and head of a packed batch: attention's tasks.
fn attention_tasks(lengths: &[usize], heads: usize) -> Vec<(usize, usize, usize)> {
    let mut tasks = Vec::with_capacity(lengths.len() * heads);
    let mut offset = 0;
    for &len in lengths {
        if len > 0 {
            tasks.extend((0..heads).map(|head| (offset, len, head)));
        }
        offset += len;
    }
    tasks
}

/// Scaled dot-product attention of every sequence and head (`tasks`, from
/// `attention_tasks`): `qkv` [tokens, 3 hidden] (Q, K, V side by side, heads contiguous
/// within each), written to `out` [tokens, hidden]; in a team, chunks of the tasks.
///
/// # Safety
/// `out` is valid for writes of [tokens, hidden]; no other thread reads or writes this
/// share's blocks of it meanwhile.
unsafe fn attention(
    qkv: &[f32],
    hidden: usize,
    heads: usize,
    lengths: &[usize],
    tasks: &[(usize, usize, usize)],
    bias: Option<&AttentionBias>,
    out: Buf,
    share: Share,
) {
    let d = hidden / heads;
    let stride = 3 * hidden;
    let scale = 1.0 / (d as f32).sqrt();
    let tokens: usize = lengths.iter().sum();
    assert_eq!(qkv.len(), tokens * stride, "qkv size");
    assert_eq!(out.len, tokens * hidden, "context size");
    if let Some(b) = bias {
        let longest = lengths.iter().copied().max().unwrap_or(0);
        assert!(b.size >= longest && b.values.len() == heads * b.size * b.size, "bias size");
    }
    let task = |&(offset, len, head): &(usize, usize, usize)| {
        SCORES.with_borrow_mut(|(scores, inverse_sums)| {
            scores.clear();
            scores.resize(len * len, 0.0);
            inverse_sums.clear();
            inverse_sums.resize(len, 0.0);
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
            unnormalized_softmax_rows(scores, len, add, inverse_sums);
            unsafe {
                // context = P V
                gemm::gemm(
                    len,
                    d,
                    len,
                    out.at(offset * hidden + head * d),
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
                    unsafe { std::slice::from_raw_parts_mut(out.at((offset + row) * hidden + head * d), d) };
                for v in out {
                    *v *= inv;
                }
            }
        });
    };
    share.split(tasks.len(), |part| {
        let mine = &tasks[part];
        if share.member.is_none() && share.threads > 1 && mine.len() > 1 {
            mine.par_iter().for_each(task);
        } else {
            mine.iter().for_each(task);
        }
    });
}

thread_local! {
    /// One head's attention scores and their rows' inverse sums (reused across calls).
    static SCORES: std::cell::RefCell<(Vec<f32>, Vec<f32>)> = const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_is_within_5e_7_of_the_exact_value() {
        // The reference: candle's f64 erf (a port of the Boost implementation).
        let mut worst = 0f64;
        for i in -60_000..=60_000 {
            let x = i as f64 / 10_000.0;
            let got = erf(x as f32) as f64;
            let want = candle_core::cpu::erf::erf_f64(x);
            worst = worst.max((got - want).abs());
        }
        eprintln!("erf worst {worst:e}");
        assert!(worst < 5e-7, "worst {worst:e}");
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
