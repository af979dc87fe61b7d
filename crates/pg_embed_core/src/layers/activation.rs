//! The activations of every model and head, over slices in place, and the one parser of
//! transformers' `hidden_act` names.

use super::math::{erf, sigmoid};

/// An element-wise activation. The models' feed-forward activations (transformers'
/// `hidden_act`) and the heads' (torch's modules, with torch's default parameters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    Identity,
    /// x * Phi(x) with the exact error function ("gelu").
    Gelu,
    /// The tanh approximation ("gelu_new", "gelu_pytorch_tanh").
    GeluTanh,
    Relu,
    /// x * sigmoid(x) ("silu", "swish").
    Silu,
    /// CLIP's x * sigmoid(1.702 x) ("quick_gelu").
    QuickGelu,
    Tanh,
    Sigmoid,
    /// torch's LeakyReLU with its default slope, 0.01.
    LeakyRelu,
    /// torch's Softplus(beta=1, threshold=20): log(1 + e^x), x itself above 20.
    Softplus,
}

impl Activation {
    /// The activation of a transformers `hidden_act` (or `hidden_activation`,
    /// `activation_function`) name, as transformers' ACT2FN maps it; None for a name it
    /// does not know.
    pub fn from_hidden_act(name: &str) -> Option<Self> {
        Some(match name {
            "gelu" => Activation::Gelu,
            // gelu_new, gelu_pytorch_tanh and gelu_fast are the tanh approximation.
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Activation::GeluTanh,
            "relu" => Activation::Relu,
            "silu" | "swish" => Activation::Silu,
            "quick_gelu" => Activation::QuickGelu,
            "tanh" => Activation::Tanh,
            "sigmoid" => Activation::Sigmoid,
            "leaky_relu" => Activation::LeakyRelu,
            "softplus" => Activation::Softplus,
            "linear" | "identity" => Activation::Identity,
            _ => return None,
        })
    }

    /// The activation over every value of `x`, in place.
    #[inline]
    pub fn apply(self, x: &mut [f32]) {
        match self {
            Activation::Identity => {}
            Activation::Gelu => gelu(x),
            Activation::GeluTanh => gelu_tanh(x),
            Activation::Relu => relu(x),
            Activation::Silu => silu(x),
            Activation::QuickGelu => quick_gelu(x),
            Activation::Tanh => x.iter_mut().for_each(|v| *v = v.tanh()),
            Activation::Sigmoid => sigmoid_all(x),
            Activation::LeakyRelu => leaky_relu(x),
            Activation::Softplus => {
                x.iter_mut().for_each(|v| *v = if *v > 20.0 { *v } else { v.exp().ln_1p() })
            }
        }
    }

    /// out = act(gate) * up, element by element (a gated MLP's inner values).
    pub fn gated(self, gate: &[f32], up: &[f32], out: &mut [f32]) {
        out.copy_from_slice(gate);
        self.apply(out);
        multiply(out, up);
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
    fn silu(x: &mut [f32]) {
        for v in x {
            *v *= sigmoid(*v);
        }
    }
}

dispatch! {
    fn quick_gelu(x: &mut [f32]) {
        for v in x {
            *v *= sigmoid(*v * 1.702);
        }
    }
}

dispatch! {
    fn sigmoid_all(x: &mut [f32]) {
        for v in x {
            *v = sigmoid(*v);
        }
    }
}

dispatch! {
    fn leaky_relu(x: &mut [f32]) {
        for v in x {
            *v = if *v >= 0.0 { *v } else { *v * 0.01 };
        }
    }
}

dispatch! {
    fn multiply(x: &mut [f32], by: &[f32]) {
        for (v, b) in x.iter_mut().zip(by) {
            *v *= b;
        }
    }
}
