//! Pooling: token states [batch, seq, hidden] + attention mask [batch, seq] -> one vector
//! per input. One pure, mask-aware function; model files never pool.

use candle_core::{DType, IndexOp, Result, Tensor, D};
use serde::Serialize;

/// Pooling modes, as `sentence_transformers.models.Pooling` (6.x) computes them.
/// Declaration order is sentence-transformers' legacy concatenation order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolingMode {
    /// The first token that counts ([CLS] / <s>; the first one after an excluded prompt).
    Cls,
    /// Element-wise max over counted tokens.
    Max,
    /// Mean over counted tokens.
    Mean,
    /// Sum over counted tokens divided by the square root of their number.
    MeanSqrtLenTokens,
    /// Mean weighted by position (1, 2, 3, ... from the start of the sequence).
    Weightedmean,
    /// The last counted token.
    Lasttoken,
    /// The backbone's own pooler output (BERT: dense + tanh over [CLS]); not a
    /// sentence-transformers mode.
    Pooler,
}

impl PoolingMode {
    pub const NAMES: &'static str = "cls, max, mean, mean_sqrt_len_tokens, weightedmean, lasttoken, pooler";

    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "cls" => Some(Self::Cls),
            "max" => Some(Self::Max),
            "mean" => Some(Self::Mean),
            "mean_sqrt_len_tokens" => Some(Self::MeanSqrtLenTokens),
            "weightedmean" => Some(Self::Weightedmean),
            "lasttoken" => Some(Self::Lasttoken),
            "pooler" => Some(Self::Pooler),
            _ => None,
        }
    }
}

/// Pools `hidden` [b, s, h] under `mask` [b, s] (u32, 1 = a token that counts) into
/// [b, h * modes.len()], concatenating modes in the order given. Inputs are right-padded;
/// a caller that excludes a prompt from pooling zeroes its positions in `mask`.
/// `pooler` [b, h] is the backbone's pooler output, needed only by `PoolingMode::Pooler`.
pub fn pool(
    hidden: &Tensor,
    mask: &Tensor,
    modes: &[PoolingMode],
    pooler: Option<&Tensor>,
) -> Result<Tensor> {
    let (_, seq, _) = hidden.dims3()?;
    // [b, s, 1]
    let maskf = mask.to_dtype(DType::F32)?.unsqueeze(D::Minus1)?;
    // Sum and count of the counted tokens, shared by mean and mean_sqrt_len_tokens.
    let counted = if modes.iter().any(|m| matches!(m, PoolingMode::Mean | PoolingMode::MeanSqrtLenTokens)) {
        Some((hidden.broadcast_mul(&maskf)?.sum(1)?, maskf.sum(1)?.clamp(1e-9f32, f32::MAX)?))
    } else {
        None
    };
    // One token per row, or zeros where no token counts (as sentence-transformers' gather
    // over the masked states gives).
    let pick = |index: &dyn Fn(&[u32]) -> Option<usize>| -> Result<Tensor> {
        let rows: Vec<Vec<u32>> = mask.to_vec2()?;
        let picked = rows
            .iter()
            .enumerate()
            .map(|(b, row)| match index(row) {
                Some(t) => hidden.i((b, t)),
                None => hidden.i((b, 0))?.zeros_like(),
            })
            .collect::<Result<Vec<_>>>()?;
        Tensor::stack(&picked, 0)
    };
    let mut parts = Vec::with_capacity(modes.len());
    for mode in modes {
        parts.push(match mode {
            // argmax of an all-zero mask is 0: the first position.
            PoolingMode::Cls => pick(&|row| Some(row.iter().position(|&m| m != 0).unwrap_or(0)))?,
            PoolingMode::Lasttoken => pick(&|row| row.iter().rposition(|&m| m != 0))?,
            PoolingMode::Mean | PoolingMode::MeanSqrtLenTokens => {
                let (sum, count) = counted
                    .as_ref()
                    .ok_or_else(|| candle_core::Error::Msg("mean sums not computed".into()))?;
                let denominator = if *mode == PoolingMode::Mean { count.clone() } else { count.sqrt()? };
                sum.broadcast_div(&denominator)?
            }
            PoolingMode::Weightedmean => {
                let positions =
                    Tensor::arange(1u32, seq as u32 + 1, hidden.device())?.to_dtype(DType::F32)?;
                let weights = maskf.broadcast_mul(&positions.reshape((1, seq, 1))?)?;
                let sum = hidden.broadcast_mul(&weights)?.sum(1)?;
                sum.broadcast_div(&weights.sum(1)?.clamp(1e-9f32, f32::MAX)?)?
            }
            PoolingMode::Pooler => {
                pooler.ok_or_else(|| candle_core::Error::Msg("the backbone has no pooler".into()))?.clone()
            }
            PoolingMode::Max => {
                let keep = maskf.broadcast_as(hidden.shape())?.ne(0f32)?;
                let floor = Tensor::full(f32::NEG_INFINITY, hidden.shape(), hidden.device())?;
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
        pool(&h, &m, modes, None).unwrap().to_vec2().unwrap()
    }

    #[test]
    fn each_mode_by_hand() {
        assert_eq!(run(&[PoolingMode::Cls]), vec![vec![1., 2.], vec![-1., 1.]]);
        assert_eq!(run(&[PoolingMode::Mean]), vec![vec![3., -2. / 3.], vec![0.5, 2.]]);
        assert_eq!(run(&[PoolingMode::Max]), vec![vec![5., 2.], vec![2., 3.]]);
        assert_eq!(run(&[PoolingMode::Lasttoken]), vec![vec![5., 0.], vec![2., 3.]]);
        // sum / sqrt(count): (9, -2) / sqrt(3) and (1, 4) / sqrt(2)
        let s3 = 3f32.sqrt();
        let s2 = 2f32.sqrt();
        let got = run(&[PoolingMode::MeanSqrtLenTokens]);
        for (g, w) in got.concat().iter().zip([9. / s3, -2. / s3, 1. / s2, 4. / s2]) {
            assert!((g - w).abs() < 1e-6, "{g} vs {w}");
        }
        // weights 1, 2, 3: (1+6+15, 2-8+0)/6 and (-1+4, 1+6)/3
        let got = run(&[PoolingMode::Weightedmean]);
        for (g, w) in got.concat().iter().zip([22. / 6., -6. / 6., 1., 7. / 3.]) {
            assert!((g - w).abs() < 1e-6, "{g} vs {w}");
        }
    }

    #[test]
    fn an_excluded_prompt_moves_cls_and_leaves_zeros_when_nothing_counts() {
        let (h, _) = batch();
        // Row 1: the first position is a prompt (excluded); row 2: nothing counts.
        let m = Tensor::new(&[[0u32, 1, 1], [0, 0, 0]], &Device::Cpu).unwrap();
        let got: Vec<Vec<f32>> =
            pool(&h, &m, &[PoolingMode::Cls, PoolingMode::Lasttoken], None).unwrap().to_vec2().unwrap();
        assert_eq!(got, vec![vec![3., -4., 5., 0.], vec![-1., 1., 0., 0.]]);
    }

    #[test]
    fn concatenation_in_the_order_given() {
        let modes = [PoolingMode::Mean, PoolingMode::Cls];
        assert_eq!(run(&modes), vec![vec![3., -2. / 3., 1., 2.], vec![0.5, 2., -1., 1.]]);
    }

    #[test]
    fn pooler_output_is_passed_through() {
        let (h, m) = batch();
        let pooled = Tensor::new(&[[7f32, 8.], [9., 10.]], &Device::Cpu).unwrap();
        let got: Vec<Vec<f32>> =
            pool(&h, &m, &[PoolingMode::Cls, PoolingMode::Pooler], Some(&pooled)).unwrap().to_vec2().unwrap();
        assert_eq!(got, vec![vec![1., 2., 7., 8.], vec![-1., 1., 9., 10.]]);
        assert!(pool(&h, &m, &[PoolingMode::Pooler], None).is_err());
    }

    #[test]
    fn normalize_unit_length_and_zero_safe() {
        let x = Tensor::new(&[[3f32, 4.], [0., 0.]], &Device::Cpu).unwrap();
        let y: Vec<Vec<f32>> = l2_normalize(&x).unwrap().to_vec2().unwrap();
        assert_eq!(y, vec![vec![0.6, 0.8], vec![0., 0.]]);
    }
}
