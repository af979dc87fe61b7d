//! int8 products for the linear layers of a model registered with `precision: "int8"`.
//!
//! The method (chosen by measurement, see the README's int8 section): symmetric int8 in
//! groups of [`GROUP`] (32) consecutive inputs, for both sides.
//! - The weight, once, at registration: for each output and each group of its inputs, the
//!   scale `sw = max|w| / 127` and `q = round(w / sw)` (to nearest, ties to even, within
//!   -127..127).
//! - Each product's input rows, as it runs ([`quantize_rows`]): for each row and group, `sa
//!   = max|x| / 127`, `q = round(x / sa)`, the same way.
//! - Each group's products of two int8 values add up exactly in int32; the groups' sums are
//!   scaled and added in float32 in group order: `acc = acc + float(sum) * (sw * sa)`. Then
//!   bias, then residual (torch's order).
//!
//! Per-token and per-channel scales alone (one scale per row, one per output) moved
//! all-MiniLM-L6-v2's vectors to a min cosine of 0.994 over the bench corpus in PyTorch's
//! simulation; groups of 32 keep it at 0.9992 (`scripts/gen_int8_reference.py`).
//!
//! Every step but the int32 sums is the same code on every CPU, and the int32 sums are
//! exact, so every kernel gives the same numbers bit for bit. Four kernels compute the sums
//! ([`dispatch`] picks one once per process):
//! - `avx512-vnni` (`vnni.rs`): `vpdpbusd` on 512-bit vectors;
//! - `avx-vnni` (`vnni.rs`): `vpdpbusd` on 256-bit vectors (cores with AVX-VNNI and no
//!   AVX-512);
//! - `avx2-int8` (`avx2.rs`): `vpmaddubsw` and `vpmaddwd`, for AVX2 CPUs without VNNI;
//! - `portable-int8` (`portable.rs`): plain Rust that the compiler vectorizes; it runs
//!   everywhere.
//!
//! `vpdpbusd` multiplies unsigned bytes by signed ones, so those kernels read the input rows
//! shifted by 128 (`q + 128`, 1..255) and start each group's sum from minus 128 times the
//! sum of the group's weights (kept with the weight, [`Int8Weight`]'s `offsets`): the same
//! integer. Before a vector kernel is used, a product of random values is computed with it
//! and with `portable-int8` and must agree bit for bit ([`dispatch`]); otherwise `portable-int8` runs
//! and the dispatch note says why.
//!
//! The packed layout: panels of [`NR`] (32) outputs; in a panel, for each group, for each of
//! its 8 quads of inputs, two 64-byte lines of 16 outputs' four weights each (the layout
//! `vpdpbusd` reads); then per panel and group the 32 outputs' scales and offsets. The inputs
//! are padded with zeros to a multiple of 32.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

use crate::buffer::Shared;
use crate::cpu::{cpu, Level};
use crate::kernels::bf16::Dest;
use crate::kernels::float32::{rows_of, split_panels, Stacked, Then};
use crate::stages::{time, Stage, Timer};

mod portable;
#[cfg(test)]
mod tests;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod vnni;

pub use portable::quantize_rows;

/// Output columns per panel.
pub const NR: usize = 32;
/// Inputs per group: one scale per output (weights) or per row (inputs) for each.
pub const GROUP: usize = 32;
/// Quads of inputs per group.
const QUADS: usize = GROUP / 4;
/// Rows per block: the block's quantized rows stay in L1 while every panel passes over them.
const MC: usize = 48;

/// 16 outputs' four weights (inputs 4j..4j + 4, the first in the low byte) on a 64-byte
/// boundary: one 512-bit line of `vpdpbusd`'s signed operand.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub struct QuadLine(pub [i8; 64]);

// SAFETY: 64 bytes, no padding, any bit pattern valid.
unsafe impl crate::buffer::Element for QuadLine {}

/// The three ways of computing an int8 product's sums.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    Avx512Vnni,
    AvxVnni,
    Avx2,
    Portable,
}

impl Kernel {
    pub const ALL: [Kernel; 4] = [Kernel::Avx512Vnni, Kernel::AvxVnni, Kernel::Avx2, Kernel::Portable];

    pub fn name(self) -> &'static str {
        match self {
            Kernel::Avx512Vnni => "avx512-vnni",
            Kernel::AvxVnni => "avx-vnni",
            Kernel::Avx2 => "avx2-int8",
            Kernel::Portable => "portable-int8",
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
            Kernel::Avx512Vnni if cpu.avx512_vnni => Ok(()),
            Kernel::Avx512Vnni if !cpu.avx512 => Err(cpu.missing(Level::Avx512)),
            Kernel::Avx512Vnni => Err("the CPU has no AVX512-VNNI".into()),
            Kernel::AvxVnni if cpu.avx_vnni => Ok(()),
            Kernel::AvxVnni if !cpu.avx2 => Err(cpu.missing(Level::Avx2)),
            Kernel::AvxVnni => Err("the CPU has no AVX-VNNI".into()),
            Kernel::Avx2 if cpu.avx2 => Ok(()),
            Kernel::Avx2 => Err(cpu.missing(Level::Avx2)),
        }
    }

    /// The byte the kernel's input rows are XORed with: 0x80 (q + 128) for `vpdpbusd`'s
    /// unsigned operand, 0 (q itself) for the others.
    fn flip(self) -> u8 {
        match self {
            Kernel::Avx512Vnni | Kernel::AvxVnni => 0x80,
            Kernel::Avx2 | Kernel::Portable => 0,
        }
    }
}

/// The kernel this process uses, and why a faster one is not used (if one is not).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dispatch {
    pub kernel: Kernel,
    pub note: Option<String>,
}

impl Dispatch {
    /// "avx512-vnni", or e.g. "portable-int8 (PG_EMBED_INT8_KERNEL)".
    pub fn describe(&self) -> String {
        match &self.note {
            Some(note) => format!("{} ({note})", self.kernel.name()),
            None => self.kernel.name().to_string(),
        }
    }
}

static FORCED: AtomicU8 = AtomicU8::new(0);

/// The kernel every int8 product of this process uses.
#[inline]
pub fn kernel() -> Kernel {
    match FORCED.load(Ordering::Relaxed) {
        0 => decided().kernel,
        n => Kernel::ALL[n as usize - 1],
    }
}

/// The fastest usable kernel that passes the self-check, decided once per process;
/// `PG_EMBED_INT8_KERNEL` (a kernel's name) asks for a slower one. [`force`] overrides it.
pub fn dispatch() -> Dispatch {
    match FORCED.load(Ordering::Relaxed) {
        0 => decided().clone(),
        n => Dispatch { kernel: Kernel::ALL[n as usize - 1], note: Some("forced".into()) },
    }
}

fn decided() -> &'static Dispatch {
    static DECIDED: OnceLock<Dispatch> = OnceLock::new();
    DECIDED.get_or_init(|| {
        let mut notes = Vec::new();
        if let Some(name) = std::env::var("PG_EMBED_INT8_KERNEL").ok().filter(|v| !v.is_empty()) {
            match Kernel::from_name(&name).ok_or_else(|| "no such kernel".to_string()).and_then(|k| {
                k.usable()?;
                self_check(k)?;
                Ok(k)
            }) {
                Ok(k) => return Dispatch { kernel: k, note: Some("PG_EMBED_INT8_KERNEL".into()) },
                Err(why) => notes.push(format!("PG_EMBED_INT8_KERNEL={name}: {why}")),
            }
        }
        if let Some(cap) = cpu().cap {
            notes.push(format!("PG_EMBED_CPU={}", cap.name()));
        }
        for k in Kernel::ALL {
            if k.usable().is_err() {
                continue;
            }
            match self_check(k) {
                Ok(()) => return Dispatch { kernel: k, note: (!notes.is_empty()).then(|| notes.join("; ")) },
                Err(why) => notes.push(format!("{}: {why}", k.name())),
            }
        }
        Dispatch { kernel: Kernel::Portable, note: (!notes.is_empty()).then(|| notes.join("; ")) }
    })
}

/// Makes every later int8 product of this process use `kernel` (None: the dispatched one);
/// for tests that compare the kernels.
pub fn force(kernel: Option<Kernel>) -> Result<(), String> {
    if let Some(k) = kernel {
        k.usable()?;
    }
    let n = kernel.map_or(0, |k| Kernel::ALL.iter().position(|x| *x == k).map_or(0, |i| i as u8 + 1));
    FORCED.store(n, Ordering::Relaxed);
    Ok(())
}

/// `kernel` and `portable` on the same product of pseudo-random values (odd sizes: a partial
/// panel, a partial group, rows beyond a register tile; bias and residual): equal bit for bit,
/// or why not.
pub fn self_check(kernel: Kernel) -> Result<(), String> {
    if kernel == Kernel::Portable {
        return Ok(());
    }
    let (rows, inputs, outputs) = (13, 75, 45);
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    };
    let w: Vec<f32> = (0..outputs * inputs).map(|_| next()).collect();
    let x: Vec<f32> = (0..rows * inputs).map(|_| next() * 3.0).collect();
    let bias: Vec<f32> = (0..outputs).map(|_| next()).collect();
    let res: Vec<f32> = (0..rows * outputs).map(|_| next()).collect();
    let weight = Int8Weight::pack(&w, outputs, inputs);
    let run = |k: Kernel| {
        let mut out = vec![0f32; rows * outputs];
        // SAFETY: out is [rows, outputs]; one thread writes every panel.
        unsafe {
            weight.product_with(k, &x, Some(&bias), Some(&res), None, out.as_mut_ptr(), rows, 0..weight.panel_count())
        };
        out
    };
    let (got, want) = (run(kernel), run(Kernel::Portable));
    match got.iter().zip(&want).position(|(a, b)| a.to_bits() != b.to_bits()) {
        None => Ok(()),
        Some(i) => Err(format!("differs from portable-int8 on the self-check ({} against {} at {i})", got[i], want[i])),
    }
}

/// `w`'s quantized value for the scale `s` (0 where the scale is 0).
#[inline(always)]
pub fn quantize(w: f32, s: f32) -> i8 {
    if s == 0.0 {
        return 0;
    }
    (w / s).round_ties_even().clamp(-127.0, 127.0) as i8
}

/// The scale of a group whose largest magnitude is `amax`.
#[inline(always)]
pub fn scale(amax: f32) -> f32 {
    amax / 127.0
}

/// A weight [outputs, inputs] (torch's layout) quantized to int8 in groups and packed into
/// panels (the module's documentation says how).
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Int8Weight {
    lines: Shared<QuadLine>,
    /// [panels, groups, 32]: each output's scale for the group.
    scales: Shared<f32>,
    /// [panels, groups, 32]: -128 times the sum of each output's quantized weights in the
    /// group, where `vpdpbusd`'s sums start.
    offsets: Shared<i32>,
    outputs: usize,
    inputs: usize,
    groups: usize,
}

impl Int8Weight {
    /// Quantizes and packs `weight`, [outputs, inputs] row-major.
    pub fn pack(weight: &[f32], outputs: usize, inputs: usize) -> Self {
        assert_eq!(weight.len(), outputs * inputs, "weight size");
        Self::pack_stacked(Stacked::new(&[weight], inputs), outputs, inputs)
    }

    /// Quantizes and packs the stacked rows (`outputs` of `inputs` values) as one weight.
    pub fn pack_stacked(rows: Stacked<'_>, outputs: usize, inputs: usize) -> Self {
        assert_eq!(rows.outputs(), outputs, "weight size");
        let groups = inputs.div_ceil(GROUP);
        let panels = outputs.div_ceil(NR);
        let per_panel = groups * NR;
        let scales = Shared::filled(panels * per_panel, |scales: &mut [f32]| {
            crate::threads::for_blocks(scales, per_panel.max(1), |panel, block| {
                for (g, group) in block.chunks_exact_mut(NR).enumerate() {
                    for (c, s) in group.iter_mut().enumerate() {
                        let o = panel * NR + c;
                        if o < outputs {
                            let row = rows.row(o);
                            let part = &row[g * GROUP..((g + 1) * GROUP).min(inputs)];
                            *s = scale(part.iter().fold(0f32, |m, v| m.max(v.abs())));
                        }
                    }
                }
            });
        });
        let lines = Shared::filled(panels * groups * QUADS * 2, |lines: &mut [QuadLine]| {
            crate::threads::for_blocks(lines, (groups * QUADS * 2).max(1), |panel, block| {
                for c in 0..NR.min(outputs.saturating_sub(panel * NR)) {
                    let row = rows.row(panel * NR + c);
                    for (i, &v) in row.iter().enumerate() {
                        let (g, q) = (i / GROUP, i % GROUP / 4);
                        let s = scales[(panel * groups + g) * NR + c];
                        block[(g * QUADS + q) * 2 + c / 16].0[(c % 16) * 4 + i % 4] = quantize(v, s);
                    }
                }
            });
        });
        let offsets = Shared::filled(panels * per_panel, |offsets: &mut [i32]| {
            for (pg, group) in offsets.chunks_exact_mut(NR).enumerate() {
                let quads = &lines[pg * QUADS * 2..(pg + 1) * QUADS * 2];
                for (c, o) in group.iter_mut().enumerate() {
                    let sum: i32 = quads.chunks_exact(2).map(|two| two[c / 16].0[(c % 16) * 4..][..4].iter().map(|&b| i32::from(b)).sum::<i32>()).sum();
                    *o = -128 * sum;
                }
            }
        });
        Int8Weight { lines, scales, offsets, outputs, inputs, groups }
    }

    /// Back to torch's layout, as float32: each quantized weight times its scale (what the
    /// products compute with).
    pub fn unpack(&self) -> Vec<f32> {
        let mut weight = vec![0f32; self.outputs * self.inputs];
        for o in 0..self.outputs {
            let (panel, c) = (o / NR, o % NR);
            for i in 0..self.inputs {
                let (g, q) = (i / GROUP, i % GROUP / 4);
                let pg = panel * self.groups + g;
                let v = self.lines[(pg * QUADS + q) * 2 + c / 16].0[(c % 16) * 4 + i % 4];
                weight[o * self.inputs + i] = f32::from(v) * self.scales[pg * NR + c];
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

    /// Columns of panels `panels` of out = quantized x times quantized W^T (+ bias) (+
    /// residual), then `then` over each finished piece of a row, with `kernel` (which must be
    /// usable), MC rows at a time.
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
        let (k, n, groups) = (self.inputs, self.outputs, self.groups);
        assert_eq!(x.len(), rows * k, "input width");
        assert!(bias.is_none_or(|b| b.len() == n), "bias size");
        assert!(residual.is_none_or(|r| r.len() == rows * n), "residual size");
        assert!(panels.end <= self.panel_count(), "panel range");
        assert!(kernel.usable().is_ok(), "the {} kernel is not usable here", kernel.name());
        if rows == 0 || panels.is_empty() {
            return;
        }
        let kp = groups * GROUP;
        SCRATCH.with_borrow_mut(|scratch| {
            let Scratch { xq, sa } = scratch;
            let mut start = 0;
            while start < rows {
                if crate::threads::interrupted() {
                    return;
                }
                let block = MC.min(rows - start);
                xq.clear();
                xq.resize(block * kp, 0);
                sa.clear();
                sa.resize(block * groups, 0.0);
                let round = Timer::start(Stage::Round);
                quantize_rows(&x[start * k..(start + block) * k], k, groups, kernel.flip(), xq, sa);
                drop(round);
                for panel in panels.clone() {
                    let pg = panel * groups;
                    let part = Part {
                        lines: &self.lines[pg * QUADS * 2..(pg + groups) * QUADS * 2],
                        scales: &self.scales[pg * NR..(pg + groups) * NR],
                        offsets: &self.offsets[pg * NR..(pg + groups) * NR],
                        groups,
                    };
                    let at = start * n + panel * NR;
                    let dest = Dest {
                        // SAFETY (the three): within out, bias and residual (sizes checked);
                        // the caller gives this thread these columns of out.
                        out: unsafe { out.add(at) },
                        ld: n,
                        cols: NR.min(n - panel * NR),
                        bias: bias.map_or(std::ptr::null(), |b| unsafe { b.as_ptr().add(panel * NR) }),
                        residual: residual.map_or(std::ptr::null(), |r| unsafe { r.as_ptr().add(at) }),
                    };
                    time(Stage::Products, || match kernel {
                        // SAFETY: the CPU has AVX512-VNNI (asserted usable); xq holds
                        // `block` rows of kp bytes, sa `block` rows of groups; dest `block` rows.
                        #[cfg(target_arch = "x86_64")]
                        Kernel::Avx512Vnni => unsafe { vnni::block512(xq, sa, &part, block, &dest) },
                        // SAFETY: the CPU has AVX-VNNI; sizes as above.
                        #[cfg(target_arch = "x86_64")]
                        Kernel::AvxVnni => unsafe { vnni::block256(xq, sa, &part, block, &dest) },
                        // SAFETY: the CPU has AVX2; sizes as above.
                        #[cfg(target_arch = "x86_64")]
                        Kernel::Avx2 => unsafe { avx2::block(xq, sa, &part, block, &dest) },
                        // SAFETY: sizes as above.
                        _ => unsafe { portable::block(xq, sa, &part, block, &dest) },
                    });
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

/// One panel of a weight: its lines, scales and offsets for every group.
pub(crate) struct Part<'a> {
    lines: &'a [QuadLine],
    scales: &'a [f32],
    offsets: &'a [i32],
    groups: usize,
}

/// The buffers of a product, reused across calls on a thread.
#[derive(Default)]
struct Scratch {
    /// The current block's rows quantized, [rows, groups * 32] bytes (XORed with the kernel's
    /// flip).
    xq: Vec<u8>,
    /// Their scales, [rows, groups].
    sa: Vec<f32>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}
