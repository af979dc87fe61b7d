//! The kernels of the linear layers' products: out = x W^T (+ bias) (+ residual), then an
//! element-wise function (`Then`, an activation) over each finished piece of the output.
//!
//! - `float32.rs`: the float32 product on CPUs with AVX-512F, over a weight packed once at
//!   load into panels of 32 outputs ([`float32::PackedWeight`]); also what the bfloat16
//!   products use too: the split of the panels across compute threads
//!   ([`float32::split_panels`]), the check of a product's sizes ([`float32::rows_of`]) and
//!   the type of the function run after ([`float32::Then`]).
//! - `bf16/`: the bfloat16 products (precision "bfloat16"). `bf16/mod.rs` holds the packed
//!   layout ([`bf16::Bf16Weight`]), the choice of kernel and the driver that runs one over
//!   blocks of rows and panels; one file per kernel: `amx.rs` (`amx-bf16`), `avx512.rs`
//!   (`avx512-bf16`) and `portable.rs` (`portable`); their tests in `tests.rs`.
//! - `int8/`: the int8 products (precision "int8"): weights quantized once in groups of
//!   32 inputs, input rows quantized as the product runs, exact int32 sums per group.
//!   `int8/mod.rs` holds the method, the packed layout ([`int8::Int8Weight`]), the choice of
//!   kernel and the driver; `portable.rs`, `avx2.rs` and `vnni.rs` (`avx512-vnni`,
//!   `avx-vnni`) the kernels, which agree bit for bit.
//! - `attention.rs`: attention's float32 products for one head (scores and context) on
//!   CPUs with AVX-512F; elsewhere `layers::attention` uses the `gemm` crate.
//!
//! The epilogues stay in the kernels: each adds the bias, then the residual (torch's order
//! of rounding) to its sums in registers before the store (`float32`'s tiles, `Dest` in
//! `bf16`); `Then` runs over a block's rows once all of the call's panels are done.
//!
//! Run-time dispatch, from the CPU features read once per process (`crate::cpu`, capped by
//! `PG_EMBED_CPU`):
//! - float32: `layers::Linear` packs the weight for `float32` when [`float32::available`]
//!   (AVX-512 F, VL and DQ), at load; elsewhere it keeps torch's layout and multiplies with
//!   the `gemm` crate. [`float32::layout`] names the choice (a prepared file of weights
//!   holds one layout).
//! - bfloat16: [`bf16::dispatch`] picks the fastest usable kernel once per process:
//!   `amx-bf16` where the CPU has AMX and Linux grants the tile state, else `avx512-bf16`
//!   where it has AVX512-BF16, else `portable`. `PG_EMBED_BF16_KERNEL` asks for a slower one;
//!   [`bf16::force`] overrides it in tests.
//! - int8: [`int8::dispatch`] picks `avx512-vnni`, else `avx-vnni`, else `avx2-int8`, else
//!   `portable-int8`,
//!   each vector kernel only after it matched `portable-int8` on a self-check product;
//!   `PG_EMBED_INT8_KERNEL` asks for a slower one, [`int8::force`] overrides it in tests.
//! - The element-wise code (the portable kernel among it) is compiled three times by
//!   `layers`' `dispatch!` (AVX-512, AVX2 + FMA, baseline); the widest the CPU has runs.

#[cfg(target_arch = "x86_64")]
pub mod attention;
pub mod bf16;
pub mod float32;
pub mod int8;
