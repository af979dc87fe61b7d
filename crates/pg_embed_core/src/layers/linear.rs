//! Linear layers: x W^T (+ b), with the weight in one of several kinds ([`Weight`]).
//!
//! On CPUs with AVX-512F the weight is packed once, at load, for `crate::kernels::float32`;
//! elsewhere it stays in torch's [out, in] layout for the `gemm` crate, which packs per call
//! (measured on all-MiniLM-L6-v2, that layout gave 1.5x faster single-sentence calls than a
//! pre-transposed [in, out] copy, and equal batch throughput). A model loaded with
//! `precision: "bfloat16"` ([`with_precision`]) packs them in bfloat16 for
//! `crate::kernels::bf16`.

use gemm::Parallelism;

use super::scratch::{for_rows, Buf, Share};
use crate::kernels::{bf16, float32, int8};
use crate::options::Precision;
use crate::buffer::Floats;

thread_local! {
    static PRECISION: std::cell::Cell<Precision> = const { std::cell::Cell::new(Precision::Float32) };
}

/// Runs `load` with every linear layer it makes stored in `precision`: how a backbone is
/// loaded in bfloat16 without its model file knowing (heads and classifiers are loaded
/// outside, in float32).
pub fn with_precision<R>(precision: Precision, load: impl FnOnce() -> R) -> R {
    let previous = PRECISION.replace(precision);
    struct Restore(Precision);
    impl Drop for Restore {
        fn drop(&mut self) {
            PRECISION.set(self.0);
        }
    }
    let _restore = Restore(previous);
    load()
}

/// Output columns per unit of work a team shares out: a packed panel (32 columns), and as
/// many columns of a torch-layout weight.
const UNIT: usize = 32;

/// The kinds of weight a [`Linear`] computes with. The float32 kinds give the same product
/// and differ in layout and speed; the bfloat16 kind rounds (precision "bfloat16"). A new
/// kind is one more variant here, with its arms in `units`, `forward` and
/// `forward_shared`: the stack, its team and the models do not change.
#[derive(serde::Serialize, serde::Deserialize)]
pub enum Weight {
    /// torch's layout, [outputs, inputs] row-major, multiplied by the `gemm` crate.
    Torch(Floats),
    /// Panels of 32 output columns for `crate::kernels::float32` (AVX-512).
    Packed(float32::PackedWeight),
    /// bfloat16 panels of 32 output columns for `crate::kernels::bf16` (precision "bfloat16").
    Bf16(bf16::Bf16Weight),
    /// int8 panels of 32 output columns for `crate::kernels::int8` (precision "int8").
    Int8(int8::Int8Weight),
}

impl Weight {
    /// From torch's layout: bfloat16 panels inside `with_precision(Bfloat16, ..)`; else
    /// float32 panels where the CPU has AVX-512F, else the layout as it is.
    pub fn from_torch(weight: Vec<f32>, outputs: usize, inputs: usize) -> Self {
        match PRECISION.get() {
            Precision::Bfloat16 => Weight::Bf16(bf16::Bf16Weight::pack(&weight, outputs, inputs)),
            Precision::Int8 => Weight::Int8(int8::Int8Weight::pack(&weight, outputs, inputs)),
            Precision::Float32 => Self::with_layout(weight, outputs, inputs, float32::available()),
        }
    }

    /// As `from_torch`, of stacked rows (layers side by side), made in place from them.
    fn from_stacked(rows: float32::Stacked<'_>, outputs: usize, inputs: usize) -> Self {
        match PRECISION.get() {
            Precision::Bfloat16 => Weight::Bf16(bf16::Bf16Weight::pack_stacked(rows, outputs, inputs)),
            Precision::Int8 => Weight::Int8(int8::Int8Weight::pack_stacked(rows, outputs, inputs)),
            Precision::Float32 if float32::available() => Weight::Packed(float32::PackedWeight::pack_stacked(rows, outputs)),
            Precision::Float32 => Weight::Torch(Floats::filled(outputs * inputs, |dst| {
                for (o, out) in dst.chunks_exact_mut(inputs.max(1)).enumerate() {
                    out.copy_from_slice(rows.row(o));
                }
            })),
        }
    }

    pub(crate) fn with_layout(weight: Vec<f32>, outputs: usize, inputs: usize, packed: bool) -> Self {
        if packed {
            Weight::Packed(float32::PackedWeight::pack(&weight, outputs, inputs))
        } else {
            Weight::Torch(weight.into())
        }
    }

    /// Units of output columns (the last may be partly empty) that a team may compute apart.
    fn units(&self, outputs: usize) -> usize {
        match self {
            Weight::Packed(p) => p.panel_count(),
            Weight::Bf16(p) => p.panel_count(),
            Weight::Int8(p) => p.panel_count(),
            Weight::Torch(_) => outputs.div_ceil(UNIT),
        }
    }
}

/// A linear layer: `weight` [outputs, inputs] (torch's) and an optional `bias` [outputs].
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Linear {
    weight: Weight,
    bias: Option<Floats>,
    inputs: usize,
    outputs: usize,
}

impl Linear {
    /// From torch's layout: `weight` [outputs, inputs] row-major, `bias` [outputs] if any.
    pub fn from_torch(
        weight: Vec<f32>,
        bias: Option<Vec<f32>>,
        outputs: usize,
        inputs: usize,
    ) -> candle_core::Result<Self> {
        Self::build(weight, bias, outputs, inputs, Weight::from_torch)
    }

    #[cfg(test)]
    pub(crate) fn with_layout(
        weight: Vec<f32>,
        bias: Option<Vec<f32>>,
        outputs: usize,
        inputs: usize,
        packed: bool,
    ) -> candle_core::Result<Self> {
        Self::build(weight, bias, outputs, inputs, |w, o, i| Weight::with_layout(w, o, i, packed))
    }

    /// Checks the sizes of `weight` and `bias`, then makes the weight with `make`.
    fn build(
        weight: Vec<f32>,
        bias: Option<Vec<f32>>,
        outputs: usize,
        inputs: usize,
        make: impl FnOnce(Vec<f32>, usize, usize) -> Weight,
    ) -> candle_core::Result<Self> {
        if Some(weight.len()) != outputs.checked_mul(inputs) {
            candle_core::bail!("a linear weight of {} values is not [{outputs}, {inputs}]", weight.len());
        }
        Self::build_with(outputs, inputs, bias, || make(weight, outputs, inputs))
    }

    /// Checks the size of `bias`, then makes the weight with `make`.
    fn build_with(
        outputs: usize,
        inputs: usize,
        bias: Option<Vec<f32>>,
        make: impl FnOnce() -> Weight,
    ) -> candle_core::Result<Self> {
        if let Some(b) = &bias {
            if b.len() != outputs {
                candle_core::bail!("a linear bias of {} values for {outputs} outputs", b.len());
            }
        }
        Ok(Linear { weight: make(), bias: bias.map(Into::into), inputs, outputs })
    }

    /// Layers over the same input side by side, from torch's layout: parts of (`weight`
    /// [outputs, inputs], `bias` [outputs] if any) become one [sum of outputs, inputs] layer
    /// (Q, K and V; a gated MLP's gate and up). Either every part has a bias or none.
    pub fn side_by_side(
        parts: Vec<(Vec<f32>, Option<Vec<f32>>)>,
        inputs: usize,
    ) -> candle_core::Result<Self> {
        let outputs = parts.iter().map(|(w, _)| w.len() / inputs.max(1)).sum();
        let biased = parts.iter().filter(|(_, b)| b.is_some()).count();
        if biased != 0 && biased != parts.len() {
            candle_core::bail!("layers side by side with and without bias");
        }
        if parts.iter().any(|(w, _)| w.len() % inputs.max(1) != 0) {
            candle_core::bail!("a linear weight side by side is not [rows, {inputs}]");
        }
        let (weights, biases): (Vec<_>, Vec<_>) = parts.into_iter().unzip();
        let bias: Option<Vec<f32>> = (biased != 0).then(|| biases.into_iter().flatten().flatten().collect());
        // The parts are packed (or copied) straight from where they are: no concatenated
        // copy of them all (a 7 B model's gate and up are 470 MB as float32).
        let slices: Vec<&[f32]> = weights.iter().map(Vec::as_slice).collect();
        let rows = float32::Stacked::new(&slices, inputs);
        Self::build_with(outputs, inputs, bias, || Weight::from_stacked(rows, outputs, inputs))
    }

    #[inline]
    pub fn outputs(&self) -> usize {
        self.outputs
    }

    #[inline]
    pub fn inputs(&self) -> usize {
        self.inputs
    }

    pub fn weight(&self) -> &Weight {
        &self.weight
    }

    /// x W + b for the rows of `x`, on the caller's compute threads.
    pub fn apply(&self, x: &[f32]) -> Vec<f32> {
        let mut out = vec![0f32; x.len() / self.inputs.max(1) * self.outputs];
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
        then: Option<&float32::Then<'_>>,
        out: &mut [f32],
        threads: usize,
    ) {
        let (k, n) = (self.inputs, self.outputs);
        let rows = x.len() / k.max(1);
        assert_eq!(x.len(), rows * k, "input width");
        assert_eq!(out.len(), rows * n, "output size");
        if let Some(res) = residual {
            assert_eq!(res.len(), rows * n, "residual size");
        }
        if rows == 0 {
            return;
        }
        let bias = self.bias.as_deref();
        match &self.weight {
            Weight::Packed(p) => return p.product(x, bias, residual, then, out, threads),
            Weight::Bf16(p) => return p.product(x, bias, residual, then, out, threads),
            Weight::Int8(p) => return p.product(x, bias, residual, then, out, threads),
            Weight::Torch(weight) => torch_product(x, weight, out, n, k, threads),
        }
        add_bias(out, n, bias, residual);
        if let Some(then) = then {
            for_rows(out, n, threads, &|_, rows| then(rows));
        }
    }

    /// As `forward`, for this thread's share of the output columns: all of them when alone,
    /// units of `UNIT` columns claimed by the team's threads in a team.
    ///
    /// # Safety
    /// `out` is valid for writes of its length; while this runs, no other thread reads or
    /// writes this share's columns of it, nor writes `x` or `residual`.
    pub(crate) unsafe fn forward_shared(
        &self,
        x: &[f32],
        residual: Option<&[f32]>,
        then: Option<&float32::Then<'_>>,
        out: Buf,
        share: Share,
    ) {
        if share.member.is_none() {
            // SAFETY: as the caller promises, and this thread has all of out.
            let out = unsafe { std::slice::from_raw_parts_mut(out.ptr, out.len) };
            return self.forward(x, residual, then, out, share.threads);
        }
        let (k, n) = (self.inputs, self.outputs);
        let rows = x.len() / k.max(1);
        assert_eq!(x.len(), rows * k, "input width");
        assert_eq!(out.len, rows * n, "output size");
        assert!(residual.is_none_or(|r| r.len() == rows * n), "residual size");
        let bias = self.bias.as_deref();
        share.split(self.weight.units(n), |units| match &self.weight {
            // SAFETY: as the caller promises; the step's chunks are disjoint panels.
            Weight::Packed(p) => unsafe { p.product_panels(x, bias, residual, then, out.ptr, rows, units) },
            // SAFETY: as above.
            Weight::Bf16(p) => unsafe { p.product_panels(x, bias, residual, then, out.ptr, rows, units) },
            // SAFETY: as above.
            Weight::Int8(p) => unsafe { p.product_panels(x, bias, residual, then, out.ptr, rows, units) },
            Weight::Torch(w) => {
                let columns = (units.start * UNIT).min(n)..(units.end * UNIT).min(n);
                // SAFETY: as the caller promises; the step's chunks are disjoint columns.
                unsafe { torch_columns(x, w, bias, residual, then, out.ptr, rows, n, k, columns) }
            }
        });
    }

    /// Whether the weight is in panels a team can share out (float32, bfloat16 or int8).
    #[inline]
    pub(crate) fn is_packed(&self) -> bool {
        matches!(self.weight, Weight::Packed(_) | Weight::Bf16(_) | Weight::Int8(_))
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
    crate::stages::time(crate::stages::Stage::Products, || unsafe {
        torch_gemm(x, weight.as_ptr(), out.as_mut_ptr(), rows, outputs, outputs, inputs, threads)
    })
}

/// The most rows one `gemm` call of a torch-layout product takes: a long input's product
/// runs in blocks of these, so that an interrupt (`crate::threads::interrupted`) is seen
/// between them.
const TORCH_ROWS: usize = 1024;

/// The `gemm` crate's product of `x` [rows, inputs] and `columns` rows of a torch-layout
/// weight (from `weight`, row stride `inputs`) into `columns` columns of `out` (row stride
/// `ldo`), `TORCH_ROWS` rows at a time; interrupted (`crate::threads::interrupted`), the
/// remaining rows are skipped.
///
/// # Safety
/// `weight` is valid for reads of [columns, inputs]; `out` for writes of `rows` rows of
/// `ldo` values of which the first `columns` are written; `x` holds [rows, inputs]; no
/// other thread touches those columns of out meanwhile.
#[allow(clippy::too_many_arguments)]
unsafe fn torch_gemm(
    x: &[f32],
    weight: *const f32,
    out: *mut f32,
    rows: usize,
    columns: usize,
    ldo: usize,
    inputs: usize,
    threads: usize,
) {
    for first in (0..rows).step_by(TORCH_ROWS) {
        if crate::threads::interrupted() {
            return;
        }
        let block = TORCH_ROWS.min(rows - first);
        // SAFETY: rows first..first + block of x (checked by the slice) and of out (as the
        // caller promises).
        unsafe {
            gemm::gemm(
                block,
                columns,
                inputs,
                out.add(first * ldo),
                1,
                ldo as isize,
                false,
                x[first * inputs..(first + block) * inputs].as_ptr(),
                1,
                inputs as isize,
                weight,
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
}

/// `columns` of out = x W^T (+ bias) (+ residual), then `then` over each row's piece, for a
/// torch-layout weight `w` [n, k], on the calling thread.
///
/// # Safety
/// `out` is valid for writes of [rows, n]; no other thread reads or writes these columns of
/// it meanwhile, nor writes `x` or `residual`.
#[allow(clippy::too_many_arguments)]
unsafe fn torch_columns(
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
    then: Option<&float32::Then<'_>>,
    out: *mut f32,
    rows: usize,
    n: usize,
    k: usize,
    columns: std::ops::Range<usize>,
) {
    let width = columns.len();
    if rows == 0 || width == 0 {
        return;
    }
    assert!(w.len() == n * k && columns.end <= n, "weight columns");
    // SAFETY: rows columns.start.. of w are within it (checked); out as the caller promises.
    unsafe { torch_gemm(x, w[columns.start * k..].as_ptr(), out.add(columns.start), rows, width, n, k, 1) };
    for r in 0..rows {
        // SAFETY: this row's piece of the caller's columns.
        let piece = unsafe { std::slice::from_raw_parts_mut(out.add(r * n + columns.start), width) };
        let res = residual.map(|res| &res[r * n + columns.start..r * n + columns.end]);
        add_bias(piece, width, bias.map(|b| &b[columns.clone()]), res);
        if let Some(then) = then {
            then(piece);
        }
    }
}

dispatch! {
    /// Each row (`n` wide) of `out` plus `bias` if given, plus the same row of `residual`
    /// if given, in that order.
    fn add_bias(out: &mut [f32], n: usize, bias: Option<&[f32]>, residual: Option<&[f32]>) {
        if n == 0 {
            return;
        }
        match (bias, residual) {
            (Some(bias), Some(res)) => {
                for (o, r) in out.chunks_exact_mut(n).zip(res.chunks_exact(n)) {
                    for ((o, r), b) in o.iter_mut().zip(r).zip(bias) {
                        *o = (*o + b) + r;
                    }
                }
            }
            (Some(bias), None) => {
                for o in out.chunks_exact_mut(n) {
                    for (o, b) in o.iter_mut().zip(bias) {
                        *o += b;
                    }
                }
            }
            (None, Some(res)) => {
                for (o, r) in out.iter_mut().zip(res) {
                    *o += r;
                }
            }
            (None, None) => {}
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
