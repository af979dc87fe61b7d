//! The one layer library of every transformer here, in plain Rust over packed tokens: every
//! sequence of a batch laid end to end in one [tokens, width] matrix, so the linear layers
//! (almost all of the work) run as one product over real tokens only and a batch of mixed
//! lengths costs the sum of its lengths, not count x longest. Attention runs per sequence
//! and head.
//!
//! What differs between the architectures is a parameter of one [`Stack`], never a copy of
//! the product or attention code: where the norms sit (after each block: the BERT family
//! and NomicBERT; before, with a final norm: T5 and CLIP), which norm ([`Norm`]: LayerNorm
//! with or without bias, RMSNorm), biased or bias-free [`Linear`] layers, the [`Activation`],
//! a plain or gated MLP ([`Mlp`]), scaled or unscaled attention, causal or sliding-window
//! masks ([`Sliding`]), rotary
//! positions ([`Rotary`]), an additive bias per head by relative position
//! ([`RelativeBias`]) and grouped-query heads (`kv_heads`).
//!
//! - `math`: the element-wise building blocks (exp, erf, sums) and CPU dispatch.
//! - `activation`: [`Activation`] and the parser of transformers' `hidden_act` names.
//! - `linear`: [`Linear`] and its [`Weight`] kinds (packed panels, torch's layout).
//! - `norm`: [`Norm`].
//! - `attention`: attention over packed sequences, softmax, [`Rotary`], [`RelativeBias`].
//! - `stack`: [`Stack`], [`Layer`], [`Mlp`] and the thread split (groups of sequences per
//!   thread, or one team that shares out every step).
//! - `scratch`: the activations a thread keeps between calls, the buffers the threads of a
//!   step share and the row-parallel helpers (used by `stack`, `attention` and `linear`).
//! - `embedding`: host-side embedding lookups and the checks of a packed batch's bounds.
//!
//! Threads come from the rayon pool the caller runs in (`crate::threads`); they run plain
//! Rust only and never call into Postgres.

/// An element-wise function compiled three times: for AVX-512 (512-bit vectors), for AVX2 +
/// FMA, and for baseline x86-64 (or the target's baseline); the widest the CPU has runs, so
/// the library runs on any CPU.
macro_rules! dispatch {
    ($(#[$doc:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block) => {
        $(#[$doc])*
        $vis fn $name($($arg: $ty),*) {
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
                if $crate::kernels::float32::available() {
                    // SAFETY: the CPU has the features `widest` is compiled for.
                    return unsafe { widest($($arg),*) };
                }
                if $crate::layers::math::avx2() {
                    // SAFETY: the CPU has the features `wide` is compiled for.
                    return unsafe { wide($($arg),*) };
                }
            }
            body($($arg),*)
        }
    };
}

mod activation;
mod attention;
mod embedding;
mod linear;
pub(crate) mod math;
mod norm;
mod scratch;
mod stack;
#[cfg(test)]
mod tests;

pub use activation::Activation;
pub use attention::{
    default_inv_freq, relative_position_bucket, AttentionBias, KeyLimits, Long, RelativeBias, Rotary, ScoreTerm,
};
pub use embedding::{lengths_of, Embedding};
pub use linear::{torch_product, with_precision, Linear, Weight};
pub use math::{erf, exp};
pub use norm::Norm;
pub use scratch::release_activations;
pub use stack::{Layer, Mlp, NormPosition, Sliding, Stack, StackSpec};
