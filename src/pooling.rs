//! Pooling: token states [batch, seq, hidden] + attention mask [batch, seq] -> one vector
//! per input. One pure, mask-aware function; model files never pool.

use candle_core::{DType, IndexOp, Result, Tensor, D};
use serde::Serialize;

/// Pooling modes. Declaration order is sentence-transformers' concatenation order
/// (`sentence_transformers.models.Pooling.forward`), whatever order a user lists them in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolingMode {
    /// The first token ([CLS] / <s>).
    Cls,
    /// Element-wise max over real tokens.
    Max,
    /// Mean over real tokens.
    Mean,
}

impl PoolingMode {
    pub const NAMES: &'static str = "cls, max, mean";

    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "cls" => Some(Self::Cls),
            "max" => Some(Self::Max),
            "mean" => Some(Self::Mean),
            _ => None,
        }
    }
}

/// Sorts modes into sentence-transformers' order and drops repeats.
pub fn canonical(mut modes: Vec<PoolingMode>) -> Vec<PoolingMode> {
    modes.sort();
    modes.dedup();
    modes
}

/// Pools `hidden` [b, s, h] under `mask` [b, s] (1 = real token, any integer dtype)
/// into [b, h * modes.len()], concatenating modes in the order given.
pub fn pool(hidden: &Tensor, mask: &Tensor, modes: &[PoolingMode]) -> Result<Tensor> {
    let mask = mask.to_dtype(DType::F32)?.unsqueeze(D::Minus1)?; // [b, s, 1]
    let mut parts = Vec::with_capacity(modes.len());
    for mode in modes {
        parts.push(match mode {
            PoolingMode::Cls => hidden.i((.., 0, ..))?,
            PoolingMode::Mean => {
                let summed = hidden.broadcast_mul(&mask)?.sum(1)?;
                let counts = mask.sum(1)?.clamp(1e-9f32, f32::MAX)?;
                summed.broadcast_div(&counts)?
            }
            PoolingMode::Max => {
                // sentence-transformers sets padded positions to -1e9 before the max.
                let keep = mask.broadcast_as(hidden.shape())?.ne(0f32)?;
                let floor = Tensor::full(-1e9f32, hidden.shape(), hidden.device())?;
                keep.where_cond(hidden, &floor)?.max(1)?
            }
        });
    }
    Tensor::cat(&parts, D::Minus1)
}

/// L2 normalisation as torch.nn.functional.normalize(p=2, dim=1, eps=1e-12).
pub fn l2_normalize(x: &Tensor) -> Result<Tensor> {
    let norm = x.sqr()?.sum_keepdim(D::Minus1)?.sqrt()?.clamp(1e-12f32, f32::MAX)?;
    x.broadcast_div(&norm)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// Two inputs of 3 positions, hidden 2; the second has one padded position whose
    /// values (100, -100) must not leak into any mode.
    fn batch() -> (Tensor, Tensor) {
        let h = Tensor::new(
            &[[[1f32, 2.], [3., -4.], [5., 0.]], [[-1., 1.], [2., 3.], [100., -100.]]],
            &Device::Cpu,
        )
        .unwrap();
        let m = Tensor::new(&[[1u32, 1, 1], [1, 1, 0]], &Device::Cpu).unwrap();
        (h, m)
    }

    fn run(modes: &[PoolingMode]) -> Vec<Vec<f32>> {
        let (h, m) = batch();
        pool(&h, &m, modes).unwrap().to_vec2().unwrap()
    }

    #[test]
    fn each_mode_by_hand() {
        assert_eq!(run(&[PoolingMode::Cls]), vec![vec![1., 2.], vec![-1., 1.]]);
        assert_eq!(run(&[PoolingMode::Mean]), vec![vec![3., -2. / 3.], vec![0.5, 2.]]);
        assert_eq!(run(&[PoolingMode::Max]), vec![vec![5., 2.], vec![2., 3.]]);
    }

    #[test]
    fn concatenation_in_sentence_transformers_order() {
        let modes = canonical(vec![PoolingMode::Mean, PoolingMode::Cls, PoolingMode::Mean]);
        assert_eq!(modes, vec![PoolingMode::Cls, PoolingMode::Mean]);
        assert_eq!(run(&modes), vec![vec![1., 2., 3., -2. / 3.], vec![-1., 1., 0.5, 2.]]);
    }

    #[test]
    fn normalize_unit_length_and_zero_safe() {
        let x = Tensor::new(&[[3f32, 4.], [0., 0.]], &Device::Cpu).unwrap();
        let y: Vec<Vec<f32>> = l2_normalize(&x).unwrap().to_vec2().unwrap();
        assert_eq!(y, vec![vec![0.6, 0.8], vec![0., 0.]]);
    }
}
