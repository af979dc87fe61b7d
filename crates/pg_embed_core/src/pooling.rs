//! Pooling: the token states of a packed batch and its sequence boundaries (and prompt
//! lengths) -> one vector per input. One pure function; model files never pool.

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

/// The sequences of a packed batch as pooling sees them: sequence `i` is tokens
/// `bounds[i]..bounds[i + 1]` of the hidden states, and its first `skips[i]` tokens (an
/// excluded prompt) do not count. After them, `summary` tokens (an image model's [CLS]
/// where it is trained to be pooled apart from the patches, as DINOv2's) are what `cls`
/// reads and what the other modes leave out.
#[derive(Debug, Clone, Copy)]
pub struct Sequences<'a> {
    pub bounds: &'a [usize],
    pub skips: &'a [usize],
    pub summary: usize,
    /// Per sequence, the token `lasttoken` reads, counted from the sequence's start, where
    /// it is not the last one (a classification head that reads the last token that is not
    /// padding, as GPT-2's); empty: the last.
    pub lasts: &'a [usize],
}

/// Pools `hidden` [tokens, width] (a packed batch) into one row per sequence of
/// `width * modes.len()` values (a pooler mode adds the pooler's width instead),
/// concatenating modes in the order given. `pooler` [sequences, its width] is the
/// backbone's pooler output, needed only by `PoolingMode::Pooler`.
pub fn pool(
    hidden: &[f32],
    width: usize,
    sequences: Sequences,
    modes: &[PoolingMode],
    pooler: Option<&[Vec<f32>]>,
) -> Result<Vec<Vec<f32>>, String> {
    pool_rows(|t| &hidden[t * width..(t + 1) * width], width, sequences, modes, pooler)
}

/// As [`pool`], with token `t`'s hidden state given by `token(t)` (`width` values): a
/// static model pools its table's rows where they are, without gathering them first
/// (the same sums in the same order).
pub fn pool_rows<'a>(
    token: impl Fn(usize) -> &'a [f32],
    width: usize,
    sequences: Sequences,
    modes: &[PoolingMode],
    pooler: Option<&[Vec<f32>]>,
) -> Result<Vec<Vec<f32>>, String> {
    let count = sequences.bounds.len().saturating_sub(1);
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let (start, end) = (sequences.bounds[i], sequences.bounds[i + 1]);
        let skip = sequences.skips.get(i).copied().unwrap_or(0).min(end - start);
        let first = start + skip;
        let counted = (first + sequences.summary).min(end)..end;
        let n = counted.len() as f32;
        let mut row = Vec::with_capacity(width * modes.len());
        // The sum over counted tokens, shared by mean and mean_sqrt_len_tokens.
        let sum = || {
            let mut sum = vec![0f32; width];
            for t in counted.clone() {
                sum.iter_mut().zip(token(t)).for_each(|(s, v)| *s += v);
            }
            sum
        };
        for mode in modes {
            match mode {
                // The first counted token; the first token when none counts (argmax of an
                // all-zero mask is 0, as in sentence-transformers).
                PoolingMode::Cls if first < end => row.extend_from_slice(token(first)),
                PoolingMode::Cls if end > start => row.extend_from_slice(token(start)),
                PoolingMode::Lasttoken if !counted.is_empty() => {
                    let last = sequences.lasts.get(i).map_or(end - 1, |&at| (start + at).min(end - 1));
                    row.extend_from_slice(token(last))
                }
                // No token: zeros, as sentence-transformers' gather over the masked states gives.
                PoolingMode::Cls | PoolingMode::Lasttoken => row.extend(std::iter::repeat_n(0f32, width)),
                PoolingMode::Mean => row.extend(sum().into_iter().map(|s| s / n.max(1e-9))),
                PoolingMode::MeanSqrtLenTokens => {
                    row.extend(sum().into_iter().map(|s| s / n.max(1e-9).sqrt()))
                }
                PoolingMode::Weightedmean => {
                    // Weights 1, 2, 3, ... from the start of the sequence, prompt included.
                    let mut sum = vec![0f32; width];
                    let mut weights = 0f32;
                    for t in counted.clone() {
                        let w = (t - start + 1) as f32;
                        weights += w;
                        sum.iter_mut().zip(token(t)).for_each(|(s, v)| *s += v * w);
                    }
                    row.extend(sum.into_iter().map(|s| s / weights.max(1e-9)));
                }
                PoolingMode::Max => {
                    let mut max = vec![f32::NEG_INFINITY; width];
                    for t in counted.clone() {
                        max.iter_mut().zip(token(t)).for_each(|(m, v)| *m = m.max(*v));
                    }
                    row.extend(max);
                }
                PoolingMode::Pooler => {
                    let pooled = pooler.and_then(|p| p.get(i)).ok_or("the backbone has no pooler")?;
                    row.extend_from_slice(pooled);
                }
            }
        }
        out.push(row);
    }
    Ok(out)
}

/// L2 normalisation of each row as torch.nn.functional.normalize(p=2, dim=1, eps=1e-12).
pub fn l2_normalize(rows: &mut [Vec<f32>]) {
    for row in rows {
        let width = row.len();
        l2_normalize_rows(row, width);
    }
}

/// [`l2_normalize`] of the rows of `width` values laid end to end in `x`.
pub fn l2_normalize_rows(x: &mut [f32], width: usize) {
    for row in x.chunks_exact_mut(width.max(1)) {
        let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
        row.iter_mut().for_each(|x| *x /= norm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two inputs packed, hidden 2: three tokens, then two.
    const HIDDEN: [f32; 10] = [1., 2., 3., -4., 5., 0., -1., 1., 2., 3.];
    const BOUNDS: [usize; 3] = [0, 3, 5];

    fn run(modes: &[PoolingMode]) -> Vec<Vec<f32>> {
        pool(&HIDDEN, 2, Sequences { bounds: &BOUNDS, skips: &[0, 0], summary: 0, lasts: &[] }, modes, None)
            .unwrap()
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
        // Input 1: its first token is a prompt (excluded); input 2: nothing counts.
        let got = pool(
            &HIDDEN,
            2,
            Sequences { bounds: &BOUNDS, skips: &[1, 2], summary: 0, lasts: &[] },
            &[PoolingMode::Cls, PoolingMode::Lasttoken],
            None,
        )
        .unwrap();
        assert_eq!(got, vec![vec![3., -4., 5., 0.], vec![-1., 1., 0., 0.]]);
    }

    #[test]
    fn lasttoken_reads_the_given_token() {
        let sequences = Sequences { bounds: &BOUNDS, skips: &[0, 0], summary: 0, lasts: &[1, 0] };
        let got = pool(&HIDDEN, 2, sequences, &[PoolingMode::Lasttoken], None).unwrap();
        assert_eq!(got, vec![vec![3., -4.], vec![-1., 1.]]);
    }

    #[test]
    fn concatenation_in_the_order_given() {
        let modes = [PoolingMode::Mean, PoolingMode::Cls];
        assert_eq!(run(&modes), vec![vec![3., -2. / 3., 1., 2.], vec![0.5, 2., -1., 1.]]);
    }

    #[test]
    fn pooler_output_is_passed_through() {
        let pooled = vec![vec![7f32, 8.], vec![9., 10.]];
        let sequences = Sequences { bounds: &BOUNDS, skips: &[0, 0], summary: 0, lasts: &[] };
        let got =
            pool(&HIDDEN, 2, sequences, &[PoolingMode::Cls, PoolingMode::Pooler], Some(&pooled)).unwrap();
        assert_eq!(got, vec![vec![1., 2., 7., 8.], vec![-1., 1., 9., 10.]]);
        assert!(pool(&HIDDEN, 2, sequences, &[PoolingMode::Pooler], None).is_err());
    }

    #[test]
    fn normalize_unit_length_and_zero_safe() {
        let mut x = vec![vec![3f32, 4.], vec![0., 0.]];
        l2_normalize(&mut x);
        assert_eq!(x, vec![vec![0.6, 0.8], vec![0., 0.]]);
    }
}
