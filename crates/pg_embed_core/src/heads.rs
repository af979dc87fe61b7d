//! Heads after pooling: sentence-transformers Dense modules (a Linear layer and its
//! activation), in any number. Plain Rust.

use std::path::Path;

use candle_core::Tensor;
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::options::HeadSpec;

/// Activation functions of a head. Dense config.json files store them as torch class
/// paths; `options.heads` may also use the short names. Parameters are torch's defaults
/// (sentence-transformers does not save them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    Identity,
    Tanh,
    Relu,
    Gelu,
    GeluTanh,
    Sigmoid,
    LeakyRelu,
    Silu,
    Softplus,
}

/// (short name, torch class path, activation). `gelu_tanh` is torch's
/// GELU(approximate="tanh"), which sentence-transformers cannot store as a class path.
const ACTIVATIONS: &[(&str, Option<&str>, Activation)] = &[
    ("identity", Some("torch.nn.modules.linear.Identity"), Activation::Identity),
    ("tanh", Some("torch.nn.modules.activation.Tanh"), Activation::Tanh),
    ("relu", Some("torch.nn.modules.activation.ReLU"), Activation::Relu),
    ("gelu", Some("torch.nn.modules.activation.GELU"), Activation::Gelu),
    ("gelu_tanh", None, Activation::GeluTanh),
    ("sigmoid", Some("torch.nn.modules.activation.Sigmoid"), Activation::Sigmoid),
    ("leaky_relu", Some("torch.nn.modules.activation.LeakyReLU"), Activation::LeakyRelu),
    ("silu", Some("torch.nn.modules.activation.SiLU"), Activation::Silu),
    ("softplus", Some("torch.nn.modules.activation.Softplus"), Activation::Softplus),
];
const SUPPORTED_ACTIVATIONS: &str = "torch.nn.modules.linear.Identity, torch.nn.modules.activation.{Tanh, ReLU, GELU, Sigmoid, LeakyReLU, SiLU, Softplus}";
const ACTIVATION_NAMES: &str =
    "identity, tanh, relu, gelu, gelu_tanh, sigmoid, leaky_relu, silu, softplus (or a torch class path)";

impl Activation {
    pub fn from_torch(path: &str) -> Option<Self> {
        ACTIVATIONS.iter().find(|(_, p, _)| *p == Some(path)).map(|(_, _, a)| *a)
    }

    /// A short name or a torch class path.
    pub fn from_name(name: &str) -> Option<Self> {
        ACTIVATIONS.iter().find(|(n, _, _)| *n == name).map(|(_, _, a)| *a).or_else(|| Self::from_torch(name))
    }

    pub fn name(self) -> &'static str {
        ACTIVATIONS.iter().find(|(_, _, a)| *a == self).map(|(n, _, _)| *n).unwrap_or("?")
    }

    pub fn apply(self, x: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Activation::Identity => Ok(x.clone()),
            Activation::Tanh => x.tanh(),
            Activation::Relu => x.relu(),
            Activation::Gelu => x.gelu_erf(),
            Activation::GeluTanh => x.gelu(),
            Activation::Sigmoid => candle_nn::ops::sigmoid(x),
            Activation::LeakyRelu => candle_nn::ops::leaky_relu(x, 0.01),
            Activation::Silu => x.silu(),
            // torch.nn.Softplus(beta=1, threshold=20): linear above the threshold.
            Activation::Softplus => x.gt(20f32)?.where_cond(x, &(x.exp()? + 1.0)?.log()?),
        }
    }
}

/// `sentence_transformers.models.Dense` config.json (6.x adds the input/output names and
/// `use_residual`). Unknown keys are refused: a new option could change the numbers.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DenseConfig {
    in_features: usize,
    out_features: usize,
    #[serde(default = "yes")]
    bias: bool,
    activation_function: String,
    #[serde(default)]
    module_input_name: Option<String>,
    #[serde(default)]
    module_output_name: Option<String>,
    #[serde(default)]
    use_residual: bool,
}

fn yes() -> bool {
    true
}

/// `use_residual`: the input added back, projected when the widths differ.
enum Residual {
    None,
    Identity,
    Projection(Tensor),
}

pub struct Dense {
    weight: Tensor,
    bias: Option<Tensor>,
    activation: Activation,
    residual: Residual,
    pub in_features: usize,
    pub out_features: usize,
    /// Where it came from, for model_info: a module folder or a head file and tensor.
    from: String,
}

impl Dense {
    /// Loads a sentence-transformers Dense module folder: config.json and
    /// model.safetensors (`linear.weight` [out, in], `linear.bias` [out]).
    pub fn load(folder: &Path) -> Result<Self> {
        let config_path = folder.join("config.json");
        let cfg: DenseConfig = crate::st::read_json(&config_path)?;
        let activation =
            Activation::from_torch(&cfg.activation_function).ok_or_else(|| Error::Unsupported {
                what: "activation_function",
                value: cfg.activation_function.clone(),
                path: config_path.clone(),
                supported: SUPPORTED_ACTIVATIONS,
            })?;
        for name in [&cfg.module_input_name, &cfg.module_output_name].into_iter().flatten() {
            if name != "sentence_embedding" {
                return Err(Error::Unsupported {
                    what: "Dense input/output",
                    value: name.clone(),
                    path: config_path.clone(),
                    supported: "sentence_embedding (a Dense after pooling)",
                });
            }
        }
        let weights_path = folder.join("model.safetensors");
        let mut tensors = crate::weights::read_safetensors(&weights_path)?;
        let mut take = |name: &str, shape: &[usize]| -> Result<Tensor> {
            let t = tensors
                .remove(name)
                .ok_or_else(|| Error::invalid_file(&weights_path, format!("cannot find tensor {name}")))?;
            if t.dims() != shape {
                return Err(Error::invalid_file(
                    &weights_path,
                    format!("{name} has shape {:?}, config.json says {shape:?}", t.dims()),
                ));
            }
            Ok(t)
        };
        let weight = take("linear.weight", &[cfg.out_features, cfg.in_features])?;
        let bias = if cfg.bias { Some(take("linear.bias", &[cfg.out_features])?) } else { None };
        let residual = match (cfg.use_residual, cfg.in_features == cfg.out_features) {
            (false, _) => Residual::None,
            (true, true) => Residual::Identity,
            (true, false) => {
                Residual::Projection(take("residual.weight", &[cfg.out_features, cfg.in_features])?)
            }
        };
        Ok(Dense {
            weight,
            bias,
            activation,
            residual,
            in_features: cfg.in_features,
            out_features: cfg.out_features,
            from: folder.display().to_string(),
        })
    }

    /// Builds a user-supplied head (`options.heads[index]`) from its resolved file;
    /// `in_features` is the previous stage's output dimension.
    pub fn from_spec(spec: &HeadSpec, file: &Path, index: usize, in_features: usize) -> Result<Self> {
        let bad = |msg: String| Error::InvalidOptions(format!("heads[{index}] (\"{}\"): {msg}", spec.path));
        let activation = Activation::from_name(&spec.activation).ok_or_else(|| {
            bad(format!("unknown activation \"{}\"; expected one of {ACTIVATION_NAMES}", spec.activation))
        })?;
        let mut tensors = crate::weights::read_safetensors(file)?;
        let mut names: Vec<&String> = tensors.keys().collect();
        names.sort();
        let listing = names.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(", ");
        let weight = tensors
            .get(&spec.weight)
            .cloned()
            .ok_or_else(|| bad(format!("no tensor named \"{}\"; the file holds: {listing}", spec.weight)))?;
        let (out_features, file_in) = match *weight.dims() {
            [o, i] => (o, i),
            ref other => {
                return Err(bad(format!(
                    "weight \"{}\" has shape {other:?}, expected [out, in]",
                    spec.weight
                )))
            }
        };
        if file_in != in_features {
            return Err(bad(format!(
                "weight \"{}\" has shape [{out_features}, {file_in}] but the previous stage outputs {in_features} \
                 dimensions (expected [out, {in_features}], as torch.nn.Linear stores it)",
                spec.weight
            )));
        }
        let bias_name = match &spec.bias {
            Some(named) => named.clone(),
            None => {
                let implied = format!("{}.bias", spec.weight.strip_suffix(".weight").unwrap_or(&spec.weight));
                tensors.contains_key(&implied).then_some(implied)
            }
        };
        let bias = match bias_name {
            None => None,
            Some(name) => {
                let b = tensors
                    .remove(&name)
                    .ok_or_else(|| bad(format!("no tensor named \"{name}\"; the file holds: {listing}")))?;
                if b.dims() != [out_features] {
                    return Err(bad(format!(
                        "bias \"{name}\" has shape {:?}, expected [{out_features}]",
                        b.dims()
                    )));
                }
                Some(b)
            }
        };
        Ok(Dense {
            weight,
            bias,
            activation,
            residual: Residual::None,
            in_features,
            out_features,
            from: format!("{}:{}", file.display(), spec.weight),
        })
    }

    /// x [batch, in] -> activation(x W^T + b) [batch, out], plus the residual if any.
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let mut y = x.matmul(&self.weight.t()?)?;
        if let Some(b) = &self.bias {
            y = y.broadcast_add(b)?;
        }
        let y = self.activation.apply(&y)?;
        match &self.residual {
            Residual::None => Ok(y),
            Residual::Identity => y + x,
            Residual::Projection(w) => y + x.matmul(&w.t()?)?,
        }
    }

    pub fn parameters(&self) -> usize {
        let residual = match &self.residual {
            Residual::Projection(w) => w.elem_count(),
            _ => 0,
        };
        self.weight.elem_count() + self.bias.as_ref().map_or(0, Tensor::elem_count) + residual
    }

    pub fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "linear",
            "in_features": self.in_features,
            "out_features": self.out_features,
            "bias": self.bias.is_some(),
            "activation": self.activation.name(),
            "residual": match self.residual {
                Residual::None => "none",
                Residual::Identity => "identity",
                Residual::Projection(_) => "projection",
            },
            "from": self.from,
        })
    }
}
