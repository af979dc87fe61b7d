//! Row normalisations: LayerNorm (with or without bias) and RMSNorm (T5's LayerNorm: no
//! mean, no bias).

use super::math::{sum, sum_squares};
use crate::buffer::Floats;

/// A normalisation over each row of its width.
#[derive(serde::Serialize, serde::Deserialize)]
pub enum Norm {
    /// (x - mean) / sqrt(var + eps) * weight (+ bias).
    Layer { weight: Floats, bias: Option<Floats>, eps: f32 },
    /// x / sqrt(mean(x^2) + eps) * weight.
    Rms { weight: Floats, eps: f32 },
    /// x unchanged (a block without a norm, as ModernBERT's first attention).
    Identity { width: usize },
}

impl Norm {
    pub fn layer(weight: Vec<f32>, bias: Option<Vec<f32>>, eps: f64) -> candle_core::Result<Self> {
        if bias.as_ref().is_some_and(|b| b.len() != weight.len()) {
            candle_core::bail!("a layer norm of {} weights and a different number of biases", weight.len());
        }
        Ok(Norm::Layer { weight: weight.into(), bias: bias.map(Into::into), eps: eps as f32 })
    }

    pub fn rms(weight: Vec<f32>, eps: f64) -> Self {
        Norm::Rms { weight: weight.into(), eps: eps as f32 }
    }

    pub fn width(&self) -> usize {
        match self {
            Norm::Layer { weight, .. } | Norm::Rms { weight, .. } => weight.len(),
            Norm::Identity { width } => *width,
        }
    }

    /// Every row of `x` normalised in place.
    #[inline]
    pub fn forward(&self, x: &mut [f32]) {
        crate::stages::time(crate::stages::Stage::Norms, || match self {
            Norm::Layer { weight, bias: Some(bias), eps } => layer_norm(x, weight, bias, *eps),
            Norm::Layer { weight, bias: None, eps } => layer_norm_no_bias(x, weight, *eps),
            Norm::Rms { weight, eps } => rms_norm(x, weight, *eps),
            Norm::Identity { .. } => {}
        })
    }
}

dispatch! {
    /// Each row of `x` normalised to zero mean and unit variance, then scaled and shifted.
    fn layer_norm(x: &mut [f32], weight: &[f32], bias: &[f32], eps: f32) {
        let width = weight.len();
        if width == 0 {
            return;
        }
        for row in x.chunks_exact_mut(width) {
            let mean = sum(row) / width as f32;
            let var = sum_squares(row, mean) / width as f32;
            // torch's order: x * rstd - mean * rstd, then * weight + bias.
            let rstd = 1.0 / (var + eps).sqrt();
            let shift = -rstd * mean;
            for ((v, w), b) in row.iter_mut().zip(weight).zip(bias) {
                *v = (*v * rstd + shift) * w + b;
            }
        }
    }
}

dispatch! {
    /// As `layer_norm`, with no shift after the scale.
    fn layer_norm_no_bias(x: &mut [f32], weight: &[f32], eps: f32) {
        let width = weight.len();
        if width == 0 {
            return;
        }
        for row in x.chunks_exact_mut(width) {
            let mean = sum(row) / width as f32;
            let var = sum_squares(row, mean) / width as f32;
            let rstd = 1.0 / (var + eps).sqrt();
            let shift = -rstd * mean;
            for (v, w) in row.iter_mut().zip(weight) {
                *v = (*v * rstd + shift) * w;
            }
        }
    }
}

dispatch! {
    /// Each row of `x` divided by its root mean square, then scaled (transformers'
    /// T5LayerNorm: x * rsqrt(mean(x^2) + eps), then weight * x).
    fn rms_norm(x: &mut [f32], weight: &[f32], eps: f32) {
        let width = weight.len();
        if width == 0 {
            return;
        }
        for row in x.chunks_exact_mut(width) {
            let rstd = 1.0 / (sum_squares(row, 0.0) / width as f32 + eps).sqrt();
            for (v, w) in row.iter_mut().zip(weight) {
                *v = w * (*v * rstd);
            }
        }
    }
}
