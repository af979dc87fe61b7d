//! The `amx-bf16` kernel: Sapphire Rapids' tile unit (`tdpbf16ps`), 32 rows x 32 outputs
//! per step; its sums are finished (bias, residual) by `avx512::store`.

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
/// dwords in tile-major order, `super::tile_index`) and a panel `w` (pairs x 32 dwords), 32
/// or 16 rows per step.
///
/// # Safety
/// Tiles are configured on this thread ([`Tiles`]); pairs is a multiple of 16; sizes as
/// said.
pub unsafe fn block(xs: &[u32], pairs: usize, w: &[PairLine], acc: &mut [f32], rows: usize) {
    assert!(rows.is_multiple_of(16) && pairs.is_multiple_of(TILE_PAIRS));
    assert!(xs.len() >= rows * pairs && w.len() >= 2 * pairs && acc.len() >= rows * NR);
    // Each A tile is one contiguous kilobyte (rows 64 bytes apart), the next 16 pairs'
    // tile the kilobyte after it.
    let (sa, sb, sc) = (TILE_PAIRS * 4, NR * 4, NR * 4);
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
                    "add {a}, 1024",
                    "add {a2}, 1024",
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
                    "add {a}, 1024",
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
