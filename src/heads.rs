//! Heads after pooling: sentence-transformers Dense modules (a Linear layer and its
//! activation), in any number. Plain Rust.

use std::path::Path;

use candle_core::{Device, Tensor};
use serde::Deserialize;

use crate::error::{Error, Result};

/// Activation functions as torch class paths, the way Dense's config.json stores them.
/// Parameters are torch's defaults (sentence-transformers does not save them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    Identity,
    Tanh,
    Relu,
    Gelu,
    Sigmoid,
    LeakyRelu,
    Silu,
    Softplus,
}

const ACTIVATIONS: &[(&str, Activation)] = &[
    ("torch.nn.modules.linear.Identity", Activation::Identity),
    ("torch.nn.modules.activation.Tanh", Activation::Tanh),
    ("torch.nn.modules.activation.ReLU", Activation::Relu),
    ("torch.nn.modules.activation.GELU", Activation::Gelu),
    ("torch.nn.modules.activation.Sigmoid", Activation::Sigmoid),
    ("torch.nn.modules.activation.LeakyReLU", Activation::LeakyRelu),
    ("torch.nn.modules.activation.SiLU", Activation::Silu),
    ("torch.nn.modules.activation.Softplus", Activation::Softplus),
];
const SUPPORTED_ACTIVATIONS: &str = "torch.nn.modules.linear.Identity, torch.nn.modules.activation.{Tanh, ReLU, GELU, Sigmoid, LeakyReLU, SiLU, Softplus}";

impl Activation {
    pub fn from_torch(path: &str) -> Option<Self> {
        ACTIVATIONS.iter().find(|(p, _)| *p == path).map(|(_, a)| *a)
    }

    pub fn torch_name(self) -> &'static str {
        ACTIVATIONS.iter().find(|(_, a)| *a == self).map(|(p, _)| *p).unwrap_or("?")
    }

    pub fn apply(self, x: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Activation::Identity => Ok(x.clone()),
            Activation::Tanh => x.tanh(),
            Activation::Relu => x.relu(),
            Activation::Gelu => x.gelu_erf(),
            Activation::Sigmoid => candle_nn::ops::sigmoid(x),
            Activation::LeakyRelu => candle_nn::ops::leaky_relu(x, 0.01),
            Activation::Silu => x.silu(),
            // torch.nn.Softplus(beta=1, threshold=20): linear above the threshold.
            Activation::Softplus => x.gt(20f32)?.where_cond(x, &(x.exp()? + 1.0)?.log()?),
        }
    }
}

/// `sentence_transformers.models.Dense` config.json.
#[derive(Debug, Deserialize)]
struct DenseConfig {
    in_features: usize,
    out_features: usize,
    #[serde(default = "yes")]
    bias: bool,
    activation_function: String,
}

fn yes() -> bool {
    true
}

pub struct Dense {
    weight: Tensor,
    bias: Option<Tensor>,
    activation: Activation,
    pub in_features: usize,
    pub out_features: usize,
}

impl Dense {
    /// Loads a Dense module folder: config.json and model.safetensors
    /// (`linear.weight` [out, in], `linear.bias` [out]).
    pub fn load(folder: &Path, device: &Device) -> Result<Self> {
        let config_path = folder.join("config.json");
        let cfg: DenseConfig = crate::st::read_json(&config_path)?;
        let activation =
            Activation::from_torch(&cfg.activation_function).ok_or_else(|| Error::Unsupported {
                what: "activation_function",
                value: cfg.activation_function.clone(),
                path: config_path.clone(),
                supported: SUPPORTED_ACTIVATIONS,
            })?;
        let (vb, _) = crate::pipeline::load_weights(folder, device)?;
        let weights_path = folder.join("model.safetensors");
        let bad = |e: candle_core::Error| Error::invalid_file(&weights_path, e);
        let weight = vb.get((cfg.out_features, cfg.in_features), "linear.weight").map_err(bad)?;
        let bias = if cfg.bias { Some(vb.get(cfg.out_features, "linear.bias").map_err(bad)?) } else { None };
        Ok(Dense { weight, bias, activation, in_features: cfg.in_features, out_features: cfg.out_features })
    }

    /// x [batch, in] -> activation(x W^T + b) [batch, out].
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let mut y = x.matmul(&self.weight.t()?)?;
        if let Some(b) = &self.bias {
            y = y.broadcast_add(b)?;
        }
        self.activation.apply(&y)
    }

    pub fn parameters(&self) -> usize {
        self.weight.elem_count() + self.bias.as_ref().map_or(0, Tensor::elem_count)
    }

    pub fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "dense",
            "in_features": self.in_features,
            "out_features": self.out_features,
            "bias": self.bias.is_some(),
            "activation": self.activation.torch_name(),
        })
    }
}
