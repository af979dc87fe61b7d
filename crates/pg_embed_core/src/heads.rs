//! Heads after pooling: sentence-transformers Dense modules (a Linear layer and its
//! activation), in any number, on the layer library. Plain Rust.

use std::path::Path;

use candle_core::Tensor;
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::layers::{Activation, Linear};
use crate::options::HeadSpec;

const SUPPORTED_ACTIVATIONS: &str = "torch.nn.modules.linear.Identity, torch.nn.modules.activation.{Tanh, ReLU, GELU, Sigmoid, LeakyReLU, SiLU, Softplus}";
const ACTIVATION_NAMES: &str =
    "identity, tanh, relu, gelu, gelu_tanh, sigmoid, leaky_relu, silu, softplus (or a torch class path)";

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
#[derive(serde::Serialize, serde::Deserialize)]
enum Residual {
    None,
    Identity,
    Projection(Linear),
}

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Dense {
    linear: Linear,
    activation: Activation,
    residual: Residual,
    has_bias: bool,
    pub in_features: usize,
    pub out_features: usize,
    /// Where it came from, for model_info: a module folder or a head file and tensor.
    from: String,
}

impl Dense {
    /// Loads a sentence-transformers Dense module folder: config.json and
    /// model.safetensors (`linear.weight` [out, in], `linear.bias` [out]).
    pub fn load(folder: &Path) -> Result<Self> {
        Self::load_of(folder, "sentence_embedding", "sentence_embedding (a Dense after pooling)")
    }

    /// As [`Dense::load`], for a Dense of every token (a multi-vector model's): its
    /// input and output, when named, are the token embeddings.
    pub fn load_tokens(folder: &Path) -> Result<Self> {
        Self::load_of(folder, "token_embeddings", "token_embeddings (a Dense of every token)")
    }

    /// A Dense module folder whose input and output names, when given, are `io`.
    fn load_of(folder: &Path, io: &str, supported: &'static str) -> Result<Self> {
        let config_path = folder.join("config.json");
        let cfg: DenseConfig = crate::files::read_json(&config_path)?;
        let activation =
            Activation::from_torch_class(&cfg.activation_function).ok_or_else(|| Error::Unsupported {
                what: "activation_function",
                value: cfg.activation_function.clone(),
                path: config_path.clone(),
                supported: SUPPORTED_ACTIVATIONS,
            })?;
        for name in [&cfg.module_input_name, &cfg.module_output_name].into_iter().flatten() {
            if name != io {
                return Err(Error::Unsupported {
                    what: "Dense input/output",
                    value: name.clone(),
                    path: config_path.clone(),
                    supported,
                });
            }
        }
        let weights_path = folder.join("model.safetensors");
        let mut tensors = crate::safetensors_io::read_safetensors(&weights_path)?;
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
        let layer = linear(&weight, bias.as_ref(), &weights_path)?;
        let residual = match (cfg.use_residual, cfg.in_features == cfg.out_features) {
            (false, _) => Residual::None,
            (true, true) => Residual::Identity,
            (true, false) => {
                let w = take("residual.weight", &[cfg.out_features, cfg.in_features])?;
                Residual::Projection(linear(&w, None, &weights_path)?)
            }
        };
        Ok(Dense {
            linear: layer,
            activation,
            residual,
            has_bias: cfg.bias,
            in_features: cfg.in_features,
            out_features: cfg.out_features,
            from: folder.display().to_string(),
        })
    }

    /// Builds a user-supplied head (`options.heads[index]`) from its resolved file;
    /// `in_features` is the previous stage's output dimension.
    pub fn from_spec(spec: &HeadSpec, file: &Path, index: usize, in_features: usize) -> Result<Self> {
        let bad = |msg: String| Error::InvalidOptions(format!("heads[{index}] (\"{}\"): {msg}", spec.path));
        let activation = Activation::parse(&spec.activation).ok_or_else(|| {
            bad(format!("unknown activation \"{}\"; expected one of {ACTIVATION_NAMES}", spec.activation))
        })?;
        let mut tensors = crate::safetensors_io::read_safetensors(file)?;
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
            linear: linear(&weight, bias.as_ref(), file)?,
            activation,
            residual: Residual::None,
            has_bias: bias.is_some(),
            in_features,
            out_features,
            from: format!("{}:{}", file.display(), spec.weight),
        })
    }

    /// x [rows, in] -> activation(x W^T + b) [rows, out], plus the residual if any.
    pub fn forward(&self, x: &[f32]) -> Vec<f32> {
        let mut y = self.linear.apply(x);
        self.activation.apply(&mut y);
        let residual = match &self.residual {
            Residual::None => return y,
            Residual::Identity => x.to_vec(),
            Residual::Projection(w) => w.apply(x),
        };
        y.iter_mut().zip(residual).for_each(|(v, r)| *v += r);
        y
    }

    pub fn parameters(&self) -> usize {
        let residual = match &self.residual {
            Residual::Projection(w) => w.outputs() * w.inputs(),
            _ => 0,
        };
        let bias = if self.has_bias { self.out_features } else { 0 };
        self.in_features * self.out_features + bias + residual
    }

    pub fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "linear",
            "in_features": self.in_features,
            "out_features": self.out_features,
            "bias": self.has_bias,
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

/// A torch Linear's `weight` [out, in] and `bias` tensors of `file` as a layer of the library.
fn linear(weight: &Tensor, bias: Option<&Tensor>, file: &Path) -> Result<Linear> {
    crate::weights::linear_of(weight, bias).map_err(|e| Error::invalid_file(file, e))
}

impl Dense {
    /// A bias-free Linear of `weight` [out, in] (`in_features` checked), with no activation:
    /// Stanford ColBERT's `linear.weight`, read from `file`.
    pub fn from_weight(weight: &Tensor, in_features: usize, file: &Path, name: &str) -> Result<Self> {
        let out_features = match *weight.dims() {
            [out, input] if input == in_features => out,
            ref other => {
                return Err(Error::invalid_file(
                    file,
                    format!("{name} has shape {other:?}, expected [out, {in_features}] (the backbone's hidden size)"),
                ))
            }
        };
        Ok(Dense {
            linear: linear(weight, None, file)?,
            activation: Activation::Identity,
            residual: Residual::None,
            has_bias: false,
            in_features,
            out_features,
            from: format!("{}:{name}", file.display()),
        })
    }

    /// A `torch.nn.Linear` saved as a `.pt` state dict (`weight` [out, in], optional
    /// `bias` [out]; see `crate::torch_pt`), with no activation: bge-m3's heads.
    pub fn from_torch_linear(file: &Path, in_features: usize) -> Result<Self> {
        let mut tensors = crate::torch_pt::read_state_dict(file)?;
        if let Some(other) = tensors.keys().find(|k| !matches!(k.as_str(), "weight" | "bias")) {
            return Err(Error::invalid_file(file, format!("tensor \"{other}\" is not one of a Linear layer's (weight, bias)")));
        }
        let (shape, weight) = tensors
            .remove("weight")
            .ok_or_else(|| Error::invalid_file(file, "cannot find tensor weight"))?;
        let out_features = match shape[..] {
            [out, input] if input == in_features => out,
            _ => {
                return Err(Error::invalid_file(
                    file,
                    format!("weight has shape {shape:?}, expected [out, {in_features}] (the backbone's hidden size)"),
                ))
            }
        };
        let bias = match tensors.remove("bias") {
            Some((shape, values)) if shape == [out_features] => Some(values),
            Some((shape, _)) => {
                return Err(Error::invalid_file(file, format!("bias has shape {shape:?}, expected [{out_features}]")))
            }
            None => None,
        };
        let tensor = |values: Vec<f32>, shape: &[usize]| {
            Tensor::from_vec(values, shape, &candle_core::Device::Cpu).map_err(|e| Error::invalid_file(file, e))
        };
        let weight = tensor(weight, &[out_features, in_features])?;
        let has_bias = bias.is_some();
        let bias = bias.map(|b| tensor(b, &[out_features])).transpose()?;
        Ok(Dense {
            linear: linear(&weight, bias.as_ref(), file)?,
            activation: Activation::Identity,
            residual: Residual::None,
            has_bias,
            in_features,
            out_features,
            from: file.display().to_string(),
        })
    }
}
