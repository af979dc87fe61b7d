//! bfloat16 products for the linear layers of a model registered with `precision:
//! "bfloat16"`: the weight is rounded to bfloat16 once, at load (half the memory of float32),
//! each product's input rows are rounded to bfloat16 as it runs, and the products of the
//! pairs accumulate in float32. Every product of two bfloat16 values is exact in float32, so
//! the only roundings are the inputs' and one per addition.
//!
//! Three kernels compute it, one file each; the process picks one once, from CPUID
//! ([`dispatch`]):
//! - `amx-bf16` (`amx.rs`): Sapphire Rapids' tile unit (`tdpbf16ps`), 32 rows x 32 outputs
//!   per step;
//! - `avx512-bf16` (`avx512.rs`): `vdpbf16ps` on 512-bit vectors, a register tile of up to
//!   12 rows x 32;
//! - `portable` (`portable.rs`): plain Rust that the compiler vectorizes; it runs everywhere
//!   and adds in `avx512-bf16`'s order, so the two agree bit for bit.
//!
//! This file holds what they share: the packed weight ([`Bf16Weight`]), the choice of kernel
//! ([`Kernel`], [`dispatch`], [`force`]), the rounding ([`round`], [`widen`]), the driver that
//! runs a kernel over blocks of rows and panels (`Bf16Weight::product_with`) and where a
//! kernel writes its results (`Dest`). The tests are in `tests.rs`.
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
use crate::kernels::float32::{rows_of, split_panels, Stacked, Then};
use crate::buffer::Shared;
use crate::stages::{time, Stage, Timer};

#[cfg(target_arch = "x86_64")]
mod amx;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod portable;
#[cfg(test)]
mod tests;

use portable::{portable_block, round_rows, round_tiles};

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
/// Rows per block of `amx-bf16`: one step of two 16-row tiles, whose inputs (24 kB for 384
/// inputs) stay in L1 while every panel's weights stream past them from L2, in tile-major
/// order (`tile_index`: each tile one contiguous kilobyte). (Measured on a Sapphire Rapids,
/// one thread, 256 rows of all-MiniLM-L6-v2's four shapes: 870-1,130 GFLOP/s with 32-row
/// blocks against 750-830 with 64, 96 or 128, whose inputs are read back from L2.)
const AMX_ROWS: usize = 32;
/// The most bytes of weights (a call's panels) for which `amx-bf16` takes `AMX_ROWS`-row
/// blocks: above it the weights no longer stay in L2 from one block to the next, and were
/// read again from L3 for every 32 rows; blocks of `AMX_TALL_ROWS` rows read each panel once
/// for them all. (Measured, a ViT-B/16 in bfloat16 (768 wide, up to 4.7 MB per matrix), 2
/// threads of a Sapphire Rapids: 37-41 ms of model time per image with 256-row blocks,
/// 42-49 ms with 32; all-MiniLM-L6-v2's matrices, 0.3-1.2 MB, are faster with 32.)
const AMX_SHORT_WEIGHTS: usize = 3 << 19;
const AMX_TALL_ROWS: usize = 256;

/// Where pair `p` of row `r` of a block lies in `amx-bf16`'s tile-major order: blocks of
/// 16 rows ([16, pairs] dwords each); in a block, for each 16 pairs, the 16 rows' 16 pairs
/// (one tile's kilobyte).
#[inline(always)]
pub(crate) fn tile_index(r: usize, pairs: usize, p: usize) -> usize {
    (r / 16) * 16 * pairs + (p / TILE_PAIRS) * 16 * TILE_PAIRS + (r % 16) * TILE_PAIRS + p % TILE_PAIRS
}

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
unsafe impl crate::buffer::Element for PairLine {}

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
        Self::pack_stacked(Stacked::new(&[weight], inputs), outputs, inputs)
    }

    /// Rounds and packs the stacked rows (`outputs` of `inputs` values) as one weight.
    pub fn pack_stacked(rows: Stacked<'_>, outputs: usize, inputs: usize) -> Self {
        assert_eq!(rows.outputs(), outputs, "weight size");
        let pairs = inputs.div_ceil(2 * TILE_PAIRS) * TILE_PAIRS;
        let panels = outputs.div_ceil(NR);
        let lines = Shared::filled(panels * pairs * 2, |lines: &mut [PairLine]| {
            crate::threads::for_blocks(lines, 2 * pairs.max(1), |panel, block| {
                let cols: Vec<Option<&[f32]>> = (0..NR).map(|c| panel * NR + c).map(|o| (o < outputs).then(|| rows.row(o))).collect();
                let at = |row: &[f32], i: usize| if i < inputs { round(row[i]) } else { 0 };
                for (p, pair) in block.chunks_exact_mut(2).enumerate() {
                    for (col, row) in cols.iter().enumerate() {
                        if let Some(row) = row {
                            pair[col / 16].0[col % 16] = u32::from(at(row, 2 * p)) | u32::from(at(row, 2 * p + 1)) << 16;
                        }
                    }
                }
            });
        });
        Bf16Weight { lines, outputs, inputs, pairs }
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

    /// As `float32::PackedWeight::product`, with this process's kernel.
    #[allow(clippy::too_many_arguments)]
    pub fn product(
        &self,
        x: &[f32],
        bias: Option<&[f32]>,
        residual: Option<&[f32]>,
        then: Option<&Then<'_>>,
        out: &mut [f32],
        threads: usize,
    ) {
        let rows = rows_of(x, out.len(), self.inputs, self.outputs);
        let kernel = kernel();
        split_panels(out, self.panel_count(), threads, |out, part| {
            // SAFETY: out is [rows, outputs] (checked); each part writes its own panels' columns.
            unsafe { self.product_with(kernel, x, bias, residual, then, out, rows, part) }
        });
    }

    /// As `float32::PackedWeight::product_panels`, with this process's kernel.
    ///
    /// # Safety
    /// As `float32::PackedWeight::product_panels`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn product_panels(
        &self,
        x: &[f32],
        bias: Option<&[f32]>,
        residual: Option<&[f32]>,
        then: Option<&Then<'_>>,
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
    /// As `float32::PackedWeight::product_panels`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn product_with(
        &self,
        kernel: Kernel,
        x: &[f32],
        bias: Option<&[f32]>,
        residual: Option<&[f32]>,
        then: Option<&Then<'_>>,
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
        let block_rows = match kernel {
            Kernel::Amx if panels.len() * self.pairs * 2 * size_of::<PairLine>() <= AMX_SHORT_WEIGHTS => AMX_ROWS,
            Kernel::Amx => AMX_TALL_ROWS,
            _ => MC,
        };
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
                let _round = Timer::start(Stage::Round);
                match kernel {
                    // SAFETY: AMX CPUs have AVX512-BF16 (checked all the same); xs is
                    // [padded, pairs].
                    #[cfg(target_arch = "x86_64")]
                    Kernel::Amx if cpu().avx512_bf16 => unsafe { avx512::round_tiles(part, k, self.pairs, xs) },
                    Kernel::Amx => round_tiles(part, k, self.pairs, xs),
                    // SAFETY: that kernel runs only where the CPU has AVX512-BF16.
                    #[cfg(target_arch = "x86_64")]
                    Kernel::Avx512Bf16 => unsafe { avx512::round_rows(part, k, self.pairs, xs) },
                    _ => round_rows(part, k, self.pairs, xs),
                }
                drop(_round);
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
                            time(Stage::Products, || amx::block(xs, self.pairs, w, acc, padded));
                            time(Stage::Store, || avx512::store(acc, block, &dest));
                        },
                        // SAFETY: AVX512-BF16 usable (asserted); sizes as above.
                        #[cfg(target_arch = "x86_64")]
                        Kernel::Avx512Bf16 => time(Stage::Products, || unsafe {
                            avx512::block(xs, self.pairs, w, block, &dest)
                        }),
                        // SAFETY: sizes as above.
                        _ => time(Stage::Products, || unsafe { portable_block(xs, self.pairs, w, block, &dest) }),
                    }
                }
                if let Some(then) = then {
                    let _activation = Timer::start(Stage::Activation);
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
    pub(crate) out: *mut f32,
    pub(crate) ld: usize,
    pub(crate) cols: usize,
    pub(crate) bias: *const f32,
    pub(crate) residual: *const f32,
}

impl Dest {
    /// This destination moved down `rows` rows.
    pub(crate) fn down(&self, rows: usize) -> Dest {
        Dest {
            out: self.out.wrapping_add(rows * self.ld),
            residual: if self.residual.is_null() { self.residual } else { self.residual.wrapping_add(rows * self.ld) },
            ..*self
        }
    }

    /// Finishes rows of sums (`sums[r]`, one panel's 32 columns, the first `cols` used) into
    /// the destination's first rows: (sum + bias) + residual, in that order.
    ///
    /// # Safety
    /// The destination holds `sums.len()` rows (this thread's columns).
    pub(crate) unsafe fn store(&self, sums: &[[f32; NR]]) {
        for (r, s) in sums.iter().enumerate() {
            for (j, v) in s.iter().take(self.cols).enumerate() {
                // SAFETY: row r, column j < cols, as the caller promises.
                unsafe {
                    let mut v = *v;
                    if !self.bias.is_null() {
                        v += *self.bias.add(j);
                    }
                    if !self.residual.is_null() {
                        v += *self.residual.add(r * self.ld + j);
                    }
                    *self.out.add(r * self.ld + j) = v;
                }
            }
        }
    }
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
