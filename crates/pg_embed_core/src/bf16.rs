//! bfloat16 products for the linear layers of a model registered with `precision:
//! "bfloat16"`: the weight is rounded to bfloat16 once, at load (half the memory of float32),
//! each product's input rows are rounded to bfloat16 as it runs, and the products of the
//! pairs accumulate in float32. Every product of two bfloat16 values is exact in float32, so
//! the only roundings are the inputs' and one per addition.
//!
//! Three kernels compute it; the process picks one once, from CPUID ([`dispatch`]):
//! - `amx-bf16`: Sapphire Rapids' tile unit (`tdpbf16ps`), 32 rows x 32 outputs per step;
//! - `avx512-bf16`: `vdpbf16ps` on 512-bit vectors, a register tile of up to 12 rows x 32;
//! - `portable`: plain Rust that the compiler vectorizes; it runs everywhere and adds in
//!   `avx512-bf16`'s order, so the two agree bit for bit.
//!
//! The order of the additions is each instruction's, as Intel documents it: for the pair of
//! inner indices (2p, 2p+1), `vdpbf16ps` adds the odd product first, `tdpbf16ps` the even one.
//! So `amx-bf16` and the others agree bit for bit when the sums are exact, and within float32
//! summation order otherwise. Denormal bfloat16 values are read as zero, as both instructions
//! do; [`round`] makes none.
//!
//! One packed layout serves all three ("VNNI" order): panels of 32 outputs; in a panel, for
//! each pair of inputs, 32 dwords, each holding one output's two weights (even input in the
//! low half). The inputs are padded to a multiple of 32 (one AMX tile's depth) with zeros.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

use crate::cpu::{cpu, Level};
use crate::prepared::Shared;

/// Output columns per panel (two 512-bit lines of pairs; two AMX tiles' width).
pub const NR: usize = 32;
/// Input pairs per AMX tile row (64 bytes).
const TILE_PAIRS: usize = 16;
/// Rows per block of the vector kernels: the block's rows (rounded to bfloat16) stay in L1
/// while every panel passes over them.
const MC: usize = 48;
/// Rows per register tile of `avx512-bf16` (2 x 12 accumulators, 2 weight lines, one
/// broadcast).
const MR: usize = 12;
/// Rows per block of `amx-bf16`: three steps of two 16-row tiles, so that a panel's weights
/// (24 kB for 384 inputs) are read from L2 once per block and from L1 by the next two
/// steps. (Chosen by that reasoning; not measured: the machines this was written on have
/// no AMX.)
const AMX_ROWS: usize = 96;

/// The three ways of computing a bfloat16 product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    Amx,
    Avx512Bf16,
    Portable,
}

impl Kernel {
    pub const ALL: [Kernel; 3] = [Kernel::Amx, Kernel::Avx512Bf16, Kernel::Portable];

    pub fn name(self) -> &'static str {
        match self {
            Kernel::Amx => "amx-bf16",
            Kernel::Avx512Bf16 => "avx512-bf16",
            Kernel::Portable => "portable",
        }
    }

    pub fn from_name(name: &str) -> Option<Kernel> {
        Kernel::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether this process can run the kernel; if not, why.
    pub fn usable(self) -> Result<(), String> {
        let cpu = cpu();
        match self {
            Kernel::Portable => Ok(()),
            Kernel::Avx512Bf16 if cpu.avx512_bf16 => Ok(()),
            Kernel::Avx512Bf16 => Err(cpu.missing(Level::Avx512Bf16)),
            Kernel::Amx if !cpu.amx_bf16 => Err(cpu.missing(Level::Amx)),
            Kernel::Amx => amx_permission().clone(),
        }
    }
}

/// Asks Linux once per process for the AMX tile state (`arch_prctl(ARCH_REQ_XCOMP_PERM,
/// XFEATURE_XTILEDATA)`); every thread of the process may use the tiles once it is granted.
fn amx_permission() -> &'static Result<(), String> {
    static GRANTED: OnceLock<Result<(), String>> = OnceLock::new();
    GRANTED.get_or_init(|| {
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        {
            const ARCH_GET_XCOMP_PERM: libc::c_long = 0x1022;
            const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
            const XFEATURE_XTILEDATA: libc::c_long = 18;
            // SAFETY: arch_prctl with these codes reads or sets the process's permission
            // bits only; `bits` outlives the call.
            let rc = unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) };
            if rc != 0 {
                return Err(format!("Linux refused the AMX tile state: {}", std::io::Error::last_os_error()));
            }
            let mut bits: u64 = 0;
            let rc = unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &mut bits as *mut u64) };
            if rc != 0 || bits & (1 << XFEATURE_XTILEDATA) == 0 {
                return Err("Linux did not grant the AMX tile state".into());
            }
            Ok(())
        }
        #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
        Err("AMX needs Linux on x86-64".into())
    })
}

/// The kernel this process uses, and why a faster one is not used (if one is not).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dispatch {
    pub kernel: Kernel,
    pub note: Option<String>,
}

impl Dispatch {
    /// "amx-bf16", or e.g. "avx512-bf16 (amx-bf16: Linux refused the AMX tile state: ...)".
    pub fn describe(&self) -> String {
        match &self.note {
            Some(note) => format!("{} ({note})", self.kernel.name()),
            None => self.kernel.name().to_string(),
        }
    }
}

/// The kernel every product of this process uses ([`dispatch`]'s, without its note).
#[inline]
pub fn kernel() -> Kernel {
    match FORCED.load(Ordering::Relaxed) {
        0 => decided().kernel,
        n => Kernel::ALL[n as usize - 1],
    }
}

/// The fastest usable kernel, decided once per process; `PG_EMBED_BF16_KERNEL` (a kernel's
/// name) asks for a slower one, for comparisons. [`force`] overrides it, for tests.
pub fn dispatch() -> Dispatch {
    match FORCED.load(Ordering::Relaxed) {
        0 => decided().clone(),
        n => Dispatch { kernel: Kernel::ALL[n as usize - 1], note: Some("forced".into()) },
    }
}

fn decided() -> &'static Dispatch {
    static DECIDED: OnceLock<Dispatch> = OnceLock::new();
    DECIDED.get_or_init(|| {
        let wanted = std::env::var("PG_EMBED_BF16_KERNEL").ok().filter(|v| !v.is_empty());
        let mut notes = Vec::new();
        if let Some(name) = &wanted {
            match Kernel::from_name(name) {
                Some(k) => match k.usable() {
                    Ok(()) => return Dispatch { kernel: k, note: Some("PG_EMBED_BF16_KERNEL".into()) },
                    Err(why) => notes.push(format!("PG_EMBED_BF16_KERNEL={name}: {why}")),
                },
                None => notes.push(format!("PG_EMBED_BF16_KERNEL={name}: no such kernel")),
            }
        }
        if let Some(cap) = cpu().cap {
            notes.push(format!("PG_EMBED_CPU={}", cap.name()));
        }
        for k in Kernel::ALL {
            match k.usable() {
                Ok(()) => {
                    // Only refusals worth telling: a cap, an AMX CPU whose tiles were refused.
                    let note = (!notes.is_empty()).then(|| notes.join("; "));
                    return Dispatch { kernel: k, note };
                }
                Err(why) if k == Kernel::Amx && cpu().amx_bf16 => notes.push(format!("amx-bf16: {why}")),
                Err(_) => {}
            }
        }
        Dispatch { kernel: Kernel::Portable, note: None }
    })
}

static FORCED: AtomicU8 = AtomicU8::new(0);

/// Makes every later product of this process use `kernel` (None: the dispatched one); for
/// tests that compare the kernels on whole models.
pub fn force(kernel: Option<Kernel>) -> Result<(), String> {
    if let Some(k) = kernel {
        k.usable()?;
    }
    FORCED.store(kernel.map_or(0, |k| Kernel::ALL.iter().position(|x| *x == k).unwrap_or(2) as u8 + 1), Ordering::Relaxed);
    Ok(())
}

/// `x` rounded to bfloat16 as `vcvtneps2bf16` rounds: to nearest, ties to even; a NaN stays
/// a (quiet) NaN; a denormal becomes a zero of its sign. (torch rounds the same way except
/// that it keeps denormals.)
#[inline(always)]
pub fn round(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) | 0x40) as u16;
    }
    if bits & 0x7f80_0000 == 0 {
        return ((bits >> 16) & 0x8000) as u16;
    }
    let lsb = (bits >> 16) & 1;
    (bits.wrapping_add(0x7fff + lsb) >> 16) as u16
}

/// A bfloat16 value as float32 (exact).
#[inline(always)]
pub fn widen(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

/// 16 dwords on a 64-byte boundary: one 512-bit line of 16 outputs' pairs.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub struct PairLine([u32; 16]);

// SAFETY: sixteen u32, no padding (64 bytes at 64-byte alignment).
unsafe impl crate::prepared::buffer::Element for PairLine {}

/// A weight [outputs, inputs] (torch's layout) rounded to bfloat16 and packed into panels.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Bf16Weight {
    lines: Shared<PairLine>,
    outputs: usize,
    inputs: usize,
    /// Input pairs per panel, padded: inputs rounded up to a multiple of 32, halved.
    pairs: usize,
}

impl Bf16Weight {
    /// Rounds and packs `weight`, [outputs, inputs] row-major; padding is zero.
    pub fn pack(weight: &[f32], outputs: usize, inputs: usize) -> Self {
        assert_eq!(weight.len(), outputs * inputs, "weight size");
        let pairs = inputs.div_ceil(2 * TILE_PAIRS) * TILE_PAIRS;
        let panels = outputs.div_ceil(NR);
        let at = |o: usize, i: usize| if o < outputs && i < inputs { round(weight[o * inputs + i]) } else { 0 };
        let mut lines = Vec::with_capacity(panels * pairs * 2);
        for panel in 0..panels {
            for p in 0..pairs {
                let mut pair = [PairLine([0; 16]); 2];
                for col in 0..NR {
                    let o = panel * NR + col;
                    pair[col / 16].0[col % 16] = u32::from(at(o, 2 * p)) | u32::from(at(o, 2 * p + 1)) << 16;
                }
                lines.extend_from_slice(&pair);
            }
        }
        Bf16Weight { lines: lines.into(), outputs, inputs, pairs }
    }

    /// Back to torch's layout, as float32 (the rounded weights).
    pub fn unpack(&self) -> Vec<f32> {
        let mut weight = vec![0f32; self.outputs * self.inputs];
        for o in 0..self.outputs {
            let (panel, col) = (o / NR, o % NR);
            for i in 0..self.inputs {
                let dword = self.lines[(panel * self.pairs + i / 2) * 2 + col / 16].0[col % 16];
                weight[o * self.inputs + i] = widen((dword >> (16 * (i % 2))) as u16);
            }
        }
        weight
    }

    pub fn panel_count(&self) -> usize {
        self.outputs.div_ceil(NR)
    }

    /// As `matmul::PackedWeight::product`, with this process's kernel.
    #[allow(clippy::too_many_arguments)]
    pub fn product(
        &self,
        x: &[f32],
        bias: Option<&[f32]>,
        residual: Option<&[f32]>,
        then: Option<&crate::matmul::Then<'_>>,
        out: &mut [f32],
        threads: usize,
    ) {
        let rows = crate::matmul::rows_of(x, out.len(), self.inputs, self.outputs);
        let kernel = kernel();
        crate::matmul::split_panels(out, self.panel_count(), threads, |out, part| {
            // SAFETY: out is [rows, outputs] (checked); each part writes its own panels' columns.
            unsafe { self.product_with(kernel, x, bias, residual, then, out, rows, part) }
        });
    }

    /// As `matmul::PackedWeight::product_panels`, with this process's kernel.
    ///
    /// # Safety
    /// As `matmul::PackedWeight::product_panels`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn product_panels(
        &self,
        x: &[f32],
        bias: Option<&[f32]>,
        residual: Option<&[f32]>,
        then: Option<&crate::matmul::Then<'_>>,
        out: *mut f32,
        rows: usize,
        panels: std::ops::Range<usize>,
    ) {
        // SAFETY: as the caller promises.
        unsafe { self.product_with(kernel(), x, bias, residual, then, out, rows, panels) }
    }

    /// Columns of panels `panels` of out = round(x) W^T (+ bias) (+ residual), then `then`
    /// over each finished piece of a row, with `kernel` (which must be usable), MC rows
    /// (amx-bf16: AMX_ROWS) at a time.
    ///
    /// # Safety
    /// As `matmul::PackedWeight::product_panels`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn product_with(
        &self,
        kernel: Kernel,
        x: &[f32],
        bias: Option<&[f32]>,
        residual: Option<&[f32]>,
        then: Option<&crate::matmul::Then<'_>>,
        out: *mut f32,
        rows: usize,
        panels: std::ops::Range<usize>,
    ) {
        let (k, n) = (self.inputs, self.outputs);
        assert_eq!(x.len(), rows * k, "input width");
        assert!(bias.is_none_or(|b| b.len() == n), "bias size");
        assert!(residual.is_none_or(|r| r.len() == rows * n), "residual size");
        assert!(panels.end <= self.panel_count(), "panel range");
        assert!(kernel.usable().is_ok(), "the {} kernel is not usable here", kernel.name());
        if rows == 0 || panels.is_empty() {
            return;
        }
        let block_rows = if kernel == Kernel::Amx { AMX_ROWS } else { MC };
        SCRATCH.with_borrow_mut(|scratch| {
            let Scratch { xs, acc } = scratch;
            let mut start = 0;
            #[cfg(target_arch = "x86_64")]
            let _tiles = (kernel == Kernel::Amx).then(amx::Tiles::configure);
            while start < rows {
                if crate::threads::interrupted() {
                    return;
                }
                let block = block_rows.min(rows - start);
                // The block's rows in bfloat16 pairs, [rows padded to 16, pairs] row-major.
                let padded = block.next_multiple_of(16);
                xs.clear();
                xs.resize(padded * self.pairs, 0);
                let part = &x[start * k..(start + block) * k];
                match kernel {
                    // SAFETY: those kernels run only where the CPU has AVX512-BF16.
                    #[cfg(target_arch = "x86_64")]
                    Kernel::Amx | Kernel::Avx512Bf16 if cpu().avx512_bf16 => unsafe {
                        avx512::round_rows(part, k, self.pairs, xs)
                    },
                    _ => round_rows(part, k, self.pairs, xs),
                }
                if kernel == Kernel::Amx {
                    acc.clear();
                    acc.resize(padded * NR, 0.0);
                }
                for panel in panels.clone() {
                    let w = &self.lines[panel * self.pairs * 2..(panel + 1) * self.pairs * 2];
                    let cols = NR.min(n - panel * NR);
                    let at = start * n + panel * NR;
                    let dest = Dest {
                        // SAFETY (the three): within out, bias and residual (sizes checked);
                        // the caller gives this thread these columns of out.
                        out: unsafe { out.add(at) },
                        ld: n,
                        cols,
                        bias: bias.map_or(std::ptr::null(), |b| unsafe { b.as_ptr().add(panel * NR) }),
                        residual: residual.map_or(std::ptr::null(), |r| unsafe { r.as_ptr().add(at) }),
                    };
                    match kernel {
                        // SAFETY: AMX usable (asserted) and configured (`_tiles`); xs is
                        // [padded, pairs] and acc [padded, 32], padded a multiple of 16;
                        // dest holds `block` rows.
                        #[cfg(target_arch = "x86_64")]
                        Kernel::Amx => unsafe {
                            amx::block(xs, self.pairs, w, acc, padded);
                            avx512::store(acc, block, &dest);
                        },
                        // SAFETY: AVX512-BF16 usable (asserted); sizes as above.
                        #[cfg(target_arch = "x86_64")]
                        Kernel::Avx512Bf16 => unsafe { avx512::block(xs, self.pairs, w, block, &dest) },
                        // SAFETY: sizes as above.
                        _ => unsafe { portable_block(xs, self.pairs, w, block, &dest) },
                    }
                }
                if let Some(then) = then {
                    let (lo, hi) = (panels.start * NR, (panels.end * NR).min(n));
                    for row in start..start + block {
                        // SAFETY: this call's columns of a finished row.
                        then(unsafe { std::slice::from_raw_parts_mut(out.add(row * n + lo), hi - lo) });
                    }
                }
                start += block;
            }
        })
    }
}

/// Where a kernel writes one panel's results for a block of rows: (sums + bias) + residual,
/// rounded in that order (torch's). `out` and `residual` point at the block's first row and
/// the panel's first column, rows `ld` apart; `bias` at the panel's first column (null: none);
/// `cols` (<= 32) columns are read and written.
#[derive(Clone, Copy)]
pub(crate) struct Dest {
    out: *mut f32,
    ld: usize,
    cols: usize,
    bias: *const f32,
    residual: *const f32,
}

/// The buffers of a product, reused across calls on a thread.
#[derive(Default)]
struct Scratch {
    /// The current block's rows rounded to bfloat16 pairs.
    xs: Vec<u32>,
    /// amx-bf16 only: the block's sums for one panel, [rows, 32], as its tiles are stored.
    acc: Vec<f32>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

dispatch! {
    /// `x` ([rows, k] float32) rounded into `xs` ([rows, pairs] dwords of two bfloat16, the
    /// even input in the low half; `xs` is zero beyond k).
    fn round_rows(x: &[f32], k: usize, pairs: usize, xs: &mut [u32]) {
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

/// The sums of pairs p of the odd product, then the even one (`vdpbf16ps`'s order), for
/// the first `rows` rows of `xs` and one panel `w`, finished into `dest`.
///
/// # Safety
/// `dest` holds `rows` rows (this thread's); xs `rows` rows of `pairs`; w a panel.
unsafe fn portable_block(xs: &[u32], pairs: usize, w: &[PairLine], rows: usize, dest: &Dest) {
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
        for (r, s) in (first..first + n).zip(&s) {
            for (j, v) in s.iter().take(dest.cols).enumerate() {
                // SAFETY: row r < rows, column j < cols of dest, as the caller promises.
                unsafe {
                    let mut v = *v;
                    if !dest.bias.is_null() {
                        v += *dest.bias.add(j);
                    }
                    if !dest.residual.is_null() {
                        v += *dest.residual.add(r * dest.ld + j);
                    }
                    *dest.out.add(r * dest.ld + j) = v;
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
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
            let d = Dest {
                out: dest.out.wrapping_add(row * dest.ld),
                residual: if dest.residual.is_null() { dest.residual } else { dest.residual.wrapping_add(row * dest.ld) },
                ..*dest
            };
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

    /// As `super::round_rows`, with `vcvtne2ps2bf16` (the same rounding: to nearest even,
    /// NaN quiet, denormals to zero), 32 inputs at a time.
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
                unsafe {
                    let lo = _mm512_loadu_ps(row.as_ptr().add(i));
                    let hi = _mm512_loadu_ps(row.as_ptr().add(i + 16));
                    let both: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
                    _mm512_storeu_si512(dst.as_mut_ptr().add(i / 2).cast(), both);
                }
                i += 32;
            }
            if i < row.len() {
                super::round_rows(&row[i..], row.len() - i, dst.len() - i / 2, &mut dst[i / 2..]);
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
}

#[cfg(target_arch = "x86_64")]
mod amx {
    use super::{PairLine, NR, TILE_PAIRS};
    use std::arch::asm;

    /// The tile configuration of this thread while a product runs: every tile 16 rows of
    /// 64 bytes. Released (`tilerelease`) when dropped, so no call returns holding tiles.
    pub struct Tiles(());

    impl Tiles {
        pub fn configure() -> Tiles {
            #[repr(C, align(64))]
            struct Config([u8; 64]);
            let mut cfg = Config([0; 64]);
            cfg.0[0] = 1; // palette 1
            for t in 0..8 {
                cfg.0[16 + 2 * t..18 + 2 * t].copy_from_slice(&64u16.to_le_bytes());
                cfg.0[48 + t] = 16;
            }
            // SAFETY: AMX is usable (the caller checked the CPU, the OS and the permission);
            // the configuration is valid for palette 1.
            unsafe { asm!("ldtilecfg [{}]", in(reg) cfg.0.as_ptr(), options(nostack, readonly)) };
            Tiles(())
        }
    }

    impl Drop for Tiles {
        fn drop(&mut self) {
            // SAFETY: tiles were configured by `configure`.
            unsafe { asm!("tilerelease", options(nostack, nomem)) };
        }
    }

    /// acc[0..rows, 0..32] = xs w for `rows` (a multiple of 16) rows of `xs` ([rows, pairs]
    /// dwords) and a panel `w` (pairs x 32 dwords), 32 or 16 rows per step.
    ///
    /// # Safety
    /// Tiles are configured on this thread ([`Tiles`]); pairs is a multiple of 16; sizes as
    /// said.
    pub unsafe fn block(xs: &[u32], pairs: usize, w: &[PairLine], acc: &mut [f32], rows: usize) {
        assert!(rows.is_multiple_of(16) && pairs.is_multiple_of(TILE_PAIRS));
        assert!(xs.len() >= rows * pairs && w.len() >= 2 * pairs && acc.len() >= rows * NR);
        let (sa, sb, sc) = (pairs * 4, NR * 4, NR * 4);
        let steps = pairs / TILE_PAIRS;
        let b = w.as_ptr().cast::<u8>();
        let mut row = 0;
        while row < rows {
            let a = xs[row * pairs..].as_ptr().cast::<u8>();
            let c = acc[row * NR..].as_mut_ptr().cast::<u8>();
            if rows - row >= 32 {
                // SAFETY: 32 rows of xs from `row` and acc; the panel's pairs; strides in bytes.
                unsafe {
                    asm!(
                        "tilezero tmm0",
                        "tilezero tmm1",
                        "tilezero tmm2",
                        "tilezero tmm3",
                        "2:",
                        "tileloadd tmm4, [{a} + {sa}*1]",
                        "tileloadd tmm5, [{a2} + {sa}*1]",
                        "tileloadd tmm6, [{b} + {sb}*1]",
                        "tileloadd tmm7, [{b} + {sb}*1 + 64]",
                        "tdpbf16ps tmm0, tmm4, tmm6",
                        "tdpbf16ps tmm1, tmm4, tmm7",
                        "tdpbf16ps tmm2, tmm5, tmm6",
                        "tdpbf16ps tmm3, tmm5, tmm7",
                        "add {a}, 64",
                        "add {a2}, 64",
                        "add {b}, {bstep}",
                        "dec {n}",
                        "jnz 2b",
                        "tilestored [{c} + {sc}*1], tmm0",
                        "tilestored [{c} + {sc}*1 + 64], tmm1",
                        "tilestored [{c2} + {sc}*1], tmm2",
                        "tilestored [{c2} + {sc}*1 + 64], tmm3",
                        a = inout(reg) a => _,
                        a2 = inout(reg) a.add(16 * pairs * 4) => _,
                        b = inout(reg) b => _,
                        c = in(reg) c,
                        c2 = in(reg) c.add(16 * NR * 4),
                        sa = in(reg) sa,
                        sb = in(reg) sb,
                        sc = in(reg) sc,
                        bstep = in(reg) TILE_PAIRS * sb,
                        n = inout(reg) steps => _,
                        options(nostack),
                    );
                }
                row += 32;
            } else {
                // SAFETY: 16 rows of xs from `row` and acc; as above.
                unsafe {
                    asm!(
                        "tilezero tmm0",
                        "tilezero tmm1",
                        "2:",
                        "tileloadd tmm4, [{a} + {sa}*1]",
                        "tileloadd tmm6, [{b} + {sb}*1]",
                        "tileloadd tmm7, [{b} + {sb}*1 + 64]",
                        "tdpbf16ps tmm0, tmm4, tmm6",
                        "tdpbf16ps tmm1, tmm4, tmm7",
                        "add {a}, 64",
                        "add {b}, {bstep}",
                        "dec {n}",
                        "jnz 2b",
                        "tilestored [{c} + {sc}*1], tmm0",
                        "tilestored [{c} + {sc}*1 + 64], tmm1",
                        a = inout(reg) a => _,
                        b = inout(reg) b => _,
                        c = in(reg) c,
                        sa = in(reg) sa,
                        sb = in(reg) sb,
                        sc = in(reg) sc,
                        bstep = in(reg) TILE_PAIRS * sb,
                        n = inout(reg) steps => _,
                        options(nostack),
                    );
                }
                row += 16;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_is_nearest_even_and_flushes_denormals() {
        assert_eq!(round(1.0), 0x3f80);
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0).
        assert_eq!(round(1.0 + 1.0 / 256.0), 0x3f80);
        // 1 + 3 * 2^-8: halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up to even.
        assert_eq!(round(1.0 + 3.0 / 256.0), 0x3f82);
        assert_eq!(round(1.0 + 1.0 / 256.0 + 1.0 / 65536.0), 0x3f81);
        assert_eq!(round(-2.5), 0xc020);
        assert_eq!(round(f32::INFINITY), 0x7f80);
        assert_eq!(round(f32::MAX), 0x7f80, "rounds up to infinity, as torch does");
        assert_eq!(round(f32::from_bits(0x0000_0001)), 0);
        assert_eq!(round(-f32::from_bits(0x007f_ffff)), 0x8000);
        assert!(widen(round(f32::NAN)).is_nan());
        for x in [0.1f32, -3.7, 1e-30, 65504.0, 3.0e38] {
            let r = widen(round(x));
            assert!((r - x).abs() <= x.abs() / 256.0, "{x} -> {r}");
        }
    }

    #[test]
    fn hardware_rounding_equals_round() {
        if !usable_or_say(Kernel::Avx512Bf16) {
            return;
        }
        let mut x: Vec<f32> = random(4096, 3, 100.0);
        // Ties, denormals, infinities, NaN, the largest finite value.
        x.extend([1.0 + 1.0 / 256.0, 1.0 + 3.0 / 256.0, f32::from_bits(1), -f32::from_bits(0x007f_ffff)]);
        x.extend([f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::MAX, -0.0, 0.0, 3.0e38, 1e-38]);
        x.extend((0..20).map(|i| f32::from_bits(0x3f80_8000 + (i << 16))));
        // A row with a tail after the 32-wide steps, and rows of whole steps only.
        for (x, k) in [(&x[..], x.len()), (&x[..4096], 64), (&x[..4096], 4096)] {
            let pairs = k.div_ceil(32) * 16;
            let rows = x.len() / k;
            let (mut soft, mut hard) = (vec![0u32; rows * pairs], vec![0u32; rows * pairs]);
            round_rows(x, k, pairs, &mut soft);
            // SAFETY: AVX512-BF16 (checked); sizes as round_rows needs.
            unsafe { avx512::round_rows(x, k, pairs, &mut hard) };
            assert_eq!(soft, hard, "rows of {k}");
        }
    }

    fn usable_or_say(kernel: Kernel) -> bool {
        match kernel.usable() {
            Ok(()) => true,
            Err(why) => {
                eprintln!("{} kernel not tested here: {why}", kernel.name());
                false
            }
        }
    }

    /// Everything the product computes, with `kernel`, on `threads` threads.
    #[allow(clippy::too_many_arguments)]
    fn run(kernel: Kernel, w: &Bf16Weight, x: &[f32], bias: &[f32], residual: &[f32], threads: usize) -> Vec<f32> {
        let rows = x.len() / w.inputs;
        let mut out = vec![f32::NAN; rows * w.outputs];
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        let then = |v: &mut [f32]| v.iter_mut().for_each(|v| *v *= 2.0);
        pool.install(|| {
            crate::matmul::split_panels(&mut out, w.panel_count(), threads, |out, part| unsafe {
                w.product_with(kernel, x, Some(bias), Some(residual), Some(&then), out, rows, part)
            })
        });
        out
    }

    /// Values whose products and sums are exact in float32 (small multiples of powers of
    /// two, also exact in bfloat16): every order of addition gives the same bits.
    fn exact_case(rows: usize, outputs: usize, inputs: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
        let w = (0..outputs * inputs).map(|i| ((i * 7 % 13) as f32 - 6.0) * 0.125).collect();
        let x = (0..rows * inputs).map(|i| ((i * 5 % 11) as f32 - 5.0) * 0.25).collect();
        let bias = (0..outputs).map(|o| (o % 5) as f32 * 0.5).collect();
        let residual = (0..rows * outputs).map(|i| (i % 3) as f32).collect();
        (w, x, bias, residual)
    }

    fn random(n: usize, seed: u64, scale: f32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * scale
            })
            .collect()
    }

    const SHAPES: &[(usize, usize, usize)] =
        &[(1, 70, 19), (5, 32, 32), (12, 64, 64), (13, 33, 48), (37, 384, 384), (50, 96, 100), (97, 40, 1536)];

    #[test]
    fn every_kernel_equals_plain_loops_bit_for_bit_on_exact_sums() {
        for kernel in Kernel::ALL.into_iter().filter(|k| usable_or_say(*k)) {
            for &(rows, outputs, inputs) in SHAPES {
                let (w, x, bias, residual) = exact_case(rows, outputs, inputs);
                let packed = Bf16Weight::pack(&w, outputs, inputs);
                assert_eq!(packed.unpack(), w, "pack then unpack (values exact in bfloat16)");
                for threads in [1, 2] {
                    let out = run(kernel, &packed, &x, &bias, &residual, threads);
                    for r in 0..rows {
                        for o in 0..outputs {
                            let dot: f32 = (0..inputs).map(|i| x[r * inputs + i] * w[o * inputs + i]).sum();
                            let want = ((dot + bias[o]) + residual[r * outputs + o]) * 2.0;
                            assert_eq!(out[r * outputs + o], want, "{kernel:?} {rows}x{outputs}x{inputs}: [{r}, {o}]");
                        }
                    }
                }
            }
        }
    }

    /// The portable kernel's order, written out plainly: the reference for random values.
    fn reference(w: &[f32], x: &[f32], rows: usize, outputs: usize, inputs: usize, amx_order: bool) -> Vec<f32> {
        let rw: Vec<f32> = w.iter().map(|v| widen(round(*v))).collect();
        let rx: Vec<f32> = x.iter().map(|v| widen(round(*v))).collect();
        let mut out = vec![0f32; rows * outputs];
        for r in 0..rows {
            for o in 0..outputs {
                let mut s = 0f32;
                for p in 0..inputs.div_ceil(2) {
                    let even = rx[r * inputs + 2 * p] * rw[o * inputs + 2 * p];
                    let odd = if 2 * p + 1 < inputs { rx[r * inputs + 2 * p + 1] * rw[o * inputs + 2 * p + 1] } else { 0.0 };
                    if amx_order {
                        s += even;
                        s += odd;
                    } else {
                        s += odd;
                        s += even;
                    }
                }
                out[r * outputs + o] = s;
            }
        }
        out
    }

    #[test]
    fn vector_kernels_equal_the_reference_order_bit_for_bit_and_amx_within_summation_order() {
        for &(rows, outputs, inputs) in SHAPES {
            let w = random(outputs * inputs, 1, 2.0);
            let x = random(rows * inputs, 2, 6.0);
            let (bias, residual) = (vec![0.0; outputs], vec![0.0; rows * outputs]);
            let packed = Bf16Weight::pack(&w, outputs, inputs);
            let want = reference(&w, &x, rows, outputs, inputs, false);
            let doubled: Vec<f32> = want.iter().map(|v| v * 2.0).collect();
            assert_eq!(run(Kernel::Portable, &packed, &x, &bias, &residual, 2), doubled, "portable {rows}x{outputs}x{inputs}");
            if usable_or_say(Kernel::Avx512Bf16) {
                assert_eq!(run(Kernel::Avx512Bf16, &packed, &x, &bias, &residual, 2), doubled, "avx512-bf16");
            }
            if usable_or_say(Kernel::Amx) {
                // Intel documents the even product first: that order bit for bit where the
                // hardware follows it, and within float32 summation error of it in any case
                // (two orders of n additions differ by at most 2 n u the sum of |terms|).
                let amx = run(Kernel::Amx, &packed, &x, &bias, &residual, 2);
                let amx_order = reference(&w, &x, rows, outputs, inputs, true);
                let magnitude = reference(
                    &w.iter().map(|v| v.abs()).collect::<Vec<_>>(),
                    &x.iter().map(|v| v.abs()).collect::<Vec<_>>(),
                    rows,
                    outputs,
                    inputs,
                    true,
                );
                let mut same = 0;
                for (i, ((a, b), m)) in amx.iter().zip(&amx_order).zip(&magnitude).enumerate() {
                    let bound = 2.0 * (2 * inputs) as f32 * f32::EPSILON / 2.0 * m * 1.01;
                    assert!((a - 2.0 * b).abs() <= 2.0 * bound, "amx [{i}]: {a} vs {}", 2.0 * b);
                    same += usize::from(*a == 2.0 * b);
                }
                eprintln!("amx-bf16 equals Intel's documented order in {same} of {} outputs", amx.len());
            }
        }
    }

    #[test]
    fn dispatch_picks_the_fastest_usable_kernel() {
        let d = dispatch();
        let best = Kernel::ALL.into_iter().find(|k| k.usable().is_ok()).unwrap();
        if std::env::var("PG_EMBED_BF16_KERNEL").is_err() {
            assert_eq!(d.kernel, best, "{d:?} on {:?}", cpu());
        }
        assert_eq!(Kernel::Portable.usable(), Ok(()));
        assert_eq!(Kernel::Avx512Bf16.usable().is_ok(), cpu().avx512_bf16);
        assert_eq!(Kernel::from_name("amx-bf16"), Some(Kernel::Amx));
        assert_eq!(Kernel::from_name("fp8"), None);
    }
}
