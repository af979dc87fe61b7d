//! The names the encoder's hot path had before the layer library: `crate::layers` holds
//! the linear layers, norms, activations, attention and the stack; these re-exports keep
//! `kernels::Stack`, `kernels::Linear`, `kernels::torch_product`, ... working.

pub use crate::layers::{
    erf, exp, torch_product, Activation, AttentionBias, Layer, Linear, Mlp, Norm, NormPosition, Stack,
    StackSpec, Weight,
};
