//! torch's antialiased bilinear resize on float32 images
//! (`interpolate(mode="bilinear", antialias=True, align_corners=False)`, the CPU kernel
//! `_upsample_bilinear2d_aa`), which torchvision's `resize(..., antialias=True)` runs on float
//! tensors: the image processors of the torchvision backend that rescale before they resize
//! (DINOv3's).
//!
//! Separable, as Pillow's filters (support scaled by the reduction factor, the weights of
//! each output normalised to sum 1), but in float32: the scale, centres and weights with
//! torch's float/double promotions term by term, the width pass first and then the height
//! pass, an axis whose size does not change skipped, each output a running sum of input
//! times weight from the window's first input on.
//!
//! The sums are fused multiply-adds after the first product, as torch's compiled loop adds
//! when it enlarges. Measured against torch 2.15 (AVX-512 build): the weights bit-exact;
//! enlarging bit-exact; shrinking differs in the last bit of some values (there torch's loop
//! follows no one fixed order of fused and rounded steps that we could find), at most
//! 1.2e-7 on values in [0, 1]. Over the fixtures' 21 non-JPEG inputs (tests/dinov3.rs) 17
//! give transformers' pixel values bit for bit and the rest within 8.4e-7 after
//! normalising (with plain rounded products and sums: 2 of 21 bit-exact).

/// One axis's windows: per output, its first input and its weights.
struct Axis {
    windows: Vec<(usize, Vec<f32>)>,
}

impl Axis {
    /// torch's `_compute_index_ranges_weights` with the bilinear `aa_filter`, for scalar
    /// type float.
    fn new(input: usize, output: usize) -> Axis {
        // area_pixel_compute_scale<float>: input / output.
        let scale = input as f32 / output as f32;
        // support = (interp_size / 2) * scale, interp_size 2 for bilinear.
        let support = if scale >= 1.0 { scale } else { 1.0 };
        let max_size = support.ceil() as usize * 2 + 1;
        let invscale = if scale >= 1.0 { (1.0 / f64::from(scale)) as f32 } else { 1.0 };
        let windows = (0..output)
            .map(|i| {
                let center = (f64::from(scale) * (i as f64 + 0.5)) as f32;
                let first = ((f64::from(center - support) + 0.5) as i64).max(0) as usize;
                let end = ((f64::from(center + support) + 0.5) as i64).min(input as i64).max(0) as usize;
                let size = end.saturating_sub(first).min(max_size);
                let mut weights: Vec<f32> = (0..size)
                    .map(|j| {
                        let d = (j + first) as f32 - center;
                        let x = ((f64::from(d) + 0.5) * f64::from(invscale)) as f32;
                        let x = x.abs();
                        if x < 1.0 {
                            (1.0 - f64::from(x)) as f32
                        } else {
                            0.0
                        }
                    })
                    .collect();
                let total = weights.iter().fold(0f32, |a, w| a + w);
                if total != 0.0 {
                    weights.iter_mut().for_each(|w| *w /= total);
                }
                (first, weights)
            })
            .collect();
        Axis { windows }
    }

}

dispatch! {
    /// The width pass: each row of `src` (rows of `width`) through every window, into the
    /// rows of `out` (rows of as many values as windows). Each output is its window's first
    /// input times its weight, then the next inputs fused-multiply-added in order.
    fn across(src: &[f32], width: usize, windows: &[(usize, Vec<f32>)], out: &mut [f32]) {
        for (row, dst) in src.chunks_exact(width).zip(out.chunks_exact_mut(windows.len().max(1))) {
            for (o, (first, weights)) in dst.iter_mut().zip(windows) {
                let Some((w0, rest)) = weights.split_first() else {
                    *o = 0.0;
                    continue;
                };
                let mut sum = row[*first] * w0;
                for (x, w) in row[first + 1..].iter().zip(rest) {
                    sum = x.mul_add(*w, sum);
                }
                *o = sum;
            }
        }
    }
}

dispatch! {
    /// The height pass: each plane of `src` (`height` rows of `width`) through every window,
    /// whole rows at a time (the same order of operations per value as `across`).
    fn down(src: &[f32], height: usize, width: usize, windows: &[(usize, Vec<f32>)], out: &mut [f32]) {
        let plane_out = windows.len() * width;
        for (plane, dst) in src.chunks_exact(height * width).zip(out.chunks_exact_mut(plane_out.max(1))) {
            for ((first, weights), row) in windows.iter().zip(dst.chunks_exact_mut(width)) {
                let Some((w0, rest)) = weights.split_first() else {
                    row.fill(0.0);
                    continue;
                };
                let source = |j: usize| &plane[(first + j) * width..(first + j + 1) * width];
                row.iter_mut().zip(source(0)).for_each(|(o, x)| *o = x * w0);
                for (j, w) in rest.iter().enumerate() {
                    row.iter_mut().zip(source(j + 1)).for_each(|(o, x)| *o = x.mul_add(*w, *o));
                }
            }
        }
    }
}

/// `planes` [channels, height, width] resized to [channels, out_height, out_width].
pub fn resize_bilinear_antialiased(
    planes: &[f32],
    channels: usize,
    (height, width): (usize, usize),
    (out_height, out_width): (usize, usize),
) -> Vec<f32> {
    let mut current = planes.to_vec();
    if out_width != width {
        let axis = Axis::new(width, out_width);
        let mut next = vec![0f32; channels * height * out_width];
        across(&current, width, &axis.windows, &mut next);
        current = next;
    }
    if out_height != height {
        let axis = Axis::new(height, out_height);
        let mut next = vec![0f32; channels * out_height * out_width];
        down(&current, height, out_width, &axis.windows, &mut next);
        current = next;
    }
    current
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_sum_to_one_and_same_sizes_copy() {
        for (input, output) in [(300, 40), (40, 48), (17, 40), (1, 7), (7, 1)] {
            for (first, weights) in Axis::new(input, output).windows {
                assert!(first + weights.len() <= input);
                let sum: f32 = weights.iter().sum();
                assert!((sum - 1.0).abs() < 1e-6, "{input} -> {output}: {sum}");
            }
        }
        let planes: Vec<f32> = (0..24).map(|v| v as f32 / 7.0).collect();
        assert_eq!(resize_bilinear_antialiased(&planes, 2, (3, 4), (3, 4)), planes);
        // A constant image stays constant.
        let flat = vec![0.25f32; 3 * 5 * 9];
        let out = resize_bilinear_antialiased(&flat, 3, (5, 9), (4, 2));
        assert!(out.iter().all(|v| (v - 0.25).abs() < 1e-7), "{out:?}");
    }
}
