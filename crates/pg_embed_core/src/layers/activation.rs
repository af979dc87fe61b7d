//! The activations of every model and head, over slices in place, and the one parser of
//! transformers' `hidden_act` names.

use super::math::{erf, exp, sigmoid};

/// An element-wise activation. The models' feed-forward activations (transformers'
/// `hidden_act`) and the heads' (torch's modules, with torch's default parameters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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

/// torch's activation modules by class path.
const TORCH_CLASSES: &[(&str, Activation)] = &[
    ("torch.nn.modules.linear.Identity", Activation::Identity),
    ("torch.nn.modules.activation.Tanh", Activation::Tanh),
    ("torch.nn.modules.activation.ReLU", Activation::Relu),
    ("torch.nn.modules.activation.GELU", Activation::Gelu),
    ("torch.nn.modules.activation.Sigmoid", Activation::Sigmoid),
    ("torch.nn.modules.activation.LeakyReLU", Activation::LeakyRelu),
    ("torch.nn.modules.activation.SiLU", Activation::Silu),
    ("torch.nn.modules.activation.Softplus", Activation::Softplus),
];

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

    /// The transformers names [`Activation::from_hidden_act`] knows, for messages.
    pub const HIDDEN_ACT_NAMES: &'static str =
        "gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, relu, silu, swish, quick_gelu, tanh, sigmoid, leaky_relu, softplus, linear, identity";

    /// The activation of a torch module's class path, as sentence-transformers' Dense
    /// config.json stores it (with torch's default parameters, which it does not save).
    pub fn from_torch_class(path: &str) -> Option<Self> {
        TORCH_CLASSES.iter().find(|(p, _)| *p == path).map(|(_, a)| *a)
    }

    /// Any name of an activation: a transformers `hidden_act` name, a torch class path,
    /// or `gelu_tanh` (torch's GELU(approximate="tanh"), which has no class path of its own).
    pub fn parse(name: &str) -> Option<Self> {
        Self::from_hidden_act(name)
            .or_else(|| Self::from_torch_class(name))
            .or_else(|| (name == "gelu_tanh").then_some(Activation::GeluTanh))
    }

    /// The short name `embed.model_info` shows.
    pub fn name(self) -> &'static str {
        match self {
            Activation::Identity => "identity",
            Activation::Gelu => "gelu",
            Activation::GeluTanh => "gelu_tanh",
            Activation::Relu => "relu",
            Activation::Silu => "silu",
            Activation::QuickGelu => "quick_gelu",
            Activation::Tanh => "tanh",
            Activation::Sigmoid => "sigmoid",
            Activation::LeakyRelu => "leaky_relu",
            Activation::Softplus => "softplus",
        }
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
            let y = C * (u + 0.044715 * u * u * u);
            // tanh(y) = sign(y) (1 - e) / (1 + e) with e = e^(-2|y|) in (0, 1]: the
            // vectorised exp (whose domain is x <= 0) instead of libm's scalar tanh. Only
            // 1 + tanh is used, so the cancellation in 1 - e near 0 costs nothing.
            let e = exp(-2.0 * y.abs());
            *v = 0.5 * u * (1.0 + ((1.0 - e) / (1.0 + e)).copysign(y));
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
