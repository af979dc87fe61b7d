//! sentence-transformers' SparseAutoEncoder (CSR, "Beyond Matryoshka"): a dense model's
//! sentence embedding through a top-k sparse autoencoder, as `SparseEncoder.encode` computes
//! it (inference mode): layer-normalised when `normalize`, less `pre_bias`, times the
//! encoder's weight plus `latent_bias`, then the `k` largest latents kept (by value) and
//! relu applied. The decoder (tied to the encoder) and the auxiliary top-k are for training
//! only. Plain Rust: no pgrx here.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::buffer::Floats;
use crate::error::{Error, Result};
use crate::layers::Linear;
use crate::sparse::SparseVector;

/// The keys of the module's config.json (`SparseAutoEncoder.config_keys`).
const CONFIG_KEYS: &str = "input_dim, hidden_dim, k, k_aux, normalize, dead_threshold";

/// The module's config.json, with sentence-transformers' defaults.
#[derive(Deserialize)]
struct Config {
    input_dim: usize,
    #[serde(default = "hidden_dim")]
    hidden_dim: usize,
    #[serde(default = "k")]
    k: usize,
    /// Training only (the auxiliary loss), as `dead_threshold`.
    #[serde(default)]
    k_aux: usize,
    #[serde(default)]
    normalize: bool,
    #[serde(default)]
    #[allow(dead_code)]
    dead_threshold: usize,
}

fn hidden_dim() -> usize {
    512
}

fn k() -> usize {
    8
}

/// The tensors of the module's model.safetensors. The encoder's weight is stored once,
/// under either name of the tied parameter (sentence-transformers keeps the decoder's);
/// `stats_last_nonzero` counts steps during training.
const ENCODER_WEIGHT: [&str; 2] = ["encoder.weight", "decoder.linear.weight"];
const TENSORS: &str = "pre_bias [input_dim], encoder.weight or decoder.linear.weight [hidden_dim, input_dim], \
     latent_bias [hidden_dim], stats_last_nonzero [hidden_dim]";

/// The epsilon `SparseAutoEncoder.LN` adds to the standard deviation.
const LN_EPS: f32 = 1e-5;

/// A SparseAutoEncoder's weights and settings.
#[derive(Serialize, Deserialize)]
pub struct SparseAutoEncoder {
    /// The encoder's weight [hidden_dim, input_dim], with `latent_bias` as its bias.
    encoder: Linear,
    pre_bias: Floats,
    pub input_dim: usize,
    pub hidden_dim: usize,
    /// The latents kept (`k`), unless the model or the options say otherwise.
    pub k: usize,
    k_aux: usize,
    normalize: bool,
    from: String,
}

impl SparseAutoEncoder {
    /// The module folder: config.json (an unknown key is refused, naming it: it could change
    /// the numbers) and model.safetensors (a missing or unknown tensor, or a shape other
    /// than the config's, likewise). `input_dim` must be `width`, what the stage before
    /// gives.
    pub fn load(folder: &Path, width: usize) -> Result<Self> {
        let config_path = folder.join("config.json");
        let raw: serde_json::Map<String, serde_json::Value> = crate::files::read_json(&config_path)?;
        if let Some(key) = raw.keys().find(|k| !CONFIG_KEYS.split(", ").any(|known| known == k.as_str())) {
            return Err(Error::Unsupported {
                what: "SparseAutoEncoder config key",
                value: key.clone(),
                path: config_path,
                supported: CONFIG_KEYS,
            });
        }
        let cfg: Config = serde_json::from_value(serde_json::Value::Object(raw))
            .map_err(|e| Error::invalid_file(&config_path, e))?;
        if cfg.input_dim != width {
            return Err(Error::invalid_file(
                &config_path,
                format!("input_dim {} does not match the previous stage's output dimension {width}", cfg.input_dim),
            ));
        }
        if cfg.k == 0 || cfg.k > cfg.hidden_dim {
            return Err(Error::invalid_file(
                &config_path,
                format!("k {} is out of range: 1 to hidden_dim {}", cfg.k, cfg.hidden_dim),
            ));
        }
        let path = folder.join("model.safetensors");
        if !path.exists() {
            return Err(Error::Unsupported {
                what: "SparseAutoEncoder without weights",
                value: path.display().to_string(),
                path: folder.into(),
                supported: TENSORS,
            });
        }
        let mut tensors = crate::safetensors_io::read_safetensors(&path)?;
        let mut take = |names: &[&str], shape: &[usize]| -> Result<Vec<f32>> {
            let Some(name) = names.iter().find(|n| tensors.contains_key(**n)) else {
                return Err(Error::Unsupported {
                    what: "SparseAutoEncoder weights without tensor",
                    value: names.join(" or "),
                    path: path.clone(),
                    supported: TENSORS,
                });
            };
            let t = tensors.remove(*name).ok_or_else(|| Error::invalid_file(&path, format!("no tensor {name}")))?;
            if t.dims() != shape {
                return Err(Error::invalid_file(
                    &path,
                    format!("{name} has shape {:?}, config.json says {shape:?}", t.dims()),
                ));
            }
            t.flatten_all().and_then(|t| t.to_vec1::<f32>()).map_err(|e| Error::invalid_file(&path, e))
        };
        let (input, hidden) = (cfg.input_dim, cfg.hidden_dim);
        let pre_bias = take(&["pre_bias"], &[input])?;
        let weight = take(&ENCODER_WEIGHT, &[hidden, input])?;
        let latent_bias = take(&["latent_bias"], &[hidden])?;
        tensors.remove("stats_last_nonzero");
        // The other name of the tied weight, when a file holds both: the same values.
        if let Some(t) = ENCODER_WEIGHT.iter().find_map(|n| tensors.remove(*n)) {
            let same = t.flatten_all().and_then(|t| t.to_vec1::<f32>()).map_err(|e| Error::invalid_file(&path, e))?;
            if same != weight {
                return Err(Error::Unsupported {
                    what: "SparseAutoEncoder with an untied decoder",
                    value: ENCODER_WEIGHT.join(" != "),
                    path: path.clone(),
                    supported: "the decoder tied to the encoder (TiedTranspose)",
                });
            }
        }
        let mut unknown: Vec<&String> = tensors.keys().collect();
        unknown.sort();
        if let Some(name) = unknown.first() {
            return Err(Error::Unsupported {
                what: "SparseAutoEncoder tensor",
                value: name.to_string(),
                path: path.clone(),
                supported: TENSORS,
            });
        }
        let encoder =
            Linear::from_torch(weight, Some(latent_bias), hidden, input).map_err(|e| Error::invalid_file(&path, e))?;
        Ok(SparseAutoEncoder {
            encoder,
            pre_bias: pre_bias.into(),
            input_dim: input,
            hidden_dim: hidden,
            k: cfg.k,
            k_aux: cfg.k_aux,
            normalize: cfg.normalize,
            from: folder.display().to_string(),
        })
    }

    /// The sparse latents of each row of `x` ([rows, input_dim]), keeping the `k` largest
    /// pre-activations (ties: the smaller id) through relu: zeros left out.
    pub fn encode(&self, rows: &[Vec<f32>], k: usize) -> Vec<SparseVector> {
        let mut x = Vec::with_capacity(rows.len() * self.input_dim);
        for row in rows {
            let start = x.len();
            x.extend_from_slice(row);
            let row = &mut x[start..];
            if self.normalize {
                layer_norm(row);
            }
            row.iter_mut().zip(self.pre_bias.iter()).for_each(|(v, b)| *v -= b);
        }
        let latents = self.encoder.apply(&x);
        latents.chunks_exact(self.hidden_dim.max(1)).map(|pre| top_k_relu(pre, k)).collect()
    }

    pub fn parameters(&self) -> usize {
        self.hidden_dim * self.input_dim + self.hidden_dim + self.input_dim
    }

    pub fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "SparseAutoEncoder",
            "input_dim": self.input_dim,
            "hidden_dim": self.hidden_dim,
            "k": self.k,
            "k_aux": self.k_aux,
            "normalize": self.normalize,
            "from": self.from,
        })
    }
}

/// `SparseAutoEncoder.LN`: less the mean, over the standard deviation (Bessel's, as torch's
/// `std`) plus 1e-5.
fn layer_norm(row: &mut [f32]) {
    let n = row.len();
    let mean = row.iter().sum::<f32>() / n as f32;
    row.iter_mut().for_each(|v| *v -= mean);
    let var = row.iter().map(|v| v * v).sum::<f32>() / (n.saturating_sub(1).max(1)) as f32;
    let scale = var.sqrt() + LN_EPS;
    row.iter_mut().for_each(|v| *v /= scale);
}

/// torch.topk (the `k` largest values), scattered into zeros, relu: the positive ones of
/// the `k` largest, in id order.
fn top_k_relu(pre: &[f32], k: usize) -> SparseVector {
    let mut order: Vec<u32> = (0..pre.len() as u32).collect();
    let k = k.min(pre.len());
    if k < pre.len() {
        order.select_nth_unstable_by(k, |a, b| pre[*b as usize].total_cmp(&pre[*a as usize]).then(a.cmp(b)));
    }
    let mut kept: Vec<u32> = order[..k].iter().copied().filter(|i| pre[*i as usize] > 0.0).collect();
    kept.sort_unstable();
    let values = kept.iter().map(|i| pre[*i as usize]).collect();
    SparseVector { indices: kept, values, dim: pre.len() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_keeps_the_largest_then_relu() {
        let pre = [0.5, -1.0, 3.0, 2.0, -0.5, 1.0];
        let v = top_k_relu(&pre, 3);
        assert_eq!((v.indices, v.values, v.dim), (vec![2, 3, 5], vec![3.0, 2.0, 1.0], 6));
        // Negative ones among the k largest are zeroed by relu, not replaced.
        let v = top_k_relu(&[-3.0, 1.0, -1.0, -2.0], 3);
        assert_eq!((v.indices, v.values), (vec![1], vec![1.0]));
        assert_eq!(top_k_relu(&pre, 10).indices, vec![0, 2, 3, 5]);
    }

    #[test]
    fn layer_norm_uses_the_unbiased_deviation_plus_epsilon() {
        let mut row = [1.0f32, 2.0, 3.0, 4.0];
        layer_norm(&mut row);
        let std = (5.0f32 / 3.0).sqrt() + 1e-5;
        for (got, want) in row.iter().zip([-1.5f32, -0.5, 0.5, 1.5]) {
            assert!((got - want / std).abs() < 1e-6);
        }
    }
}
