//! What the vision transformers (ViT, DINOv2, DINOv3, CLIP's and SigLIP's vision towers)
//! share: an image's patches as tokens (the patch convolution, kernel = stride = patch size,
//! is a linear layer over flattened patches), a [CLS] token (and DINOv3's register tokens; none
//! in SigLIP) in front, position
//! embeddings (interpolated to the image's patch grid as transformers does for DINOv2; none
//! where the stack rotates), and their pre-LayerNorm layer stack built from a table of weight
//! names. The stack itself is the layer library's, the same as
//! every text encoder's.

use std::borrow::Cow;

use candle_nn::VarBuilder;

use super::Pixels;
use crate::layers::{self, Activation, Linear, Norm};
use crate::prepared::Floats;
use crate::weights;

/// How position embeddings meet an image whose patch grid is not the trained one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Grid {
    /// Only the trained image size is accepted (ViT, CLIP without interpolate_pos_encoding).
    Fixed,
    /// Bicubic interpolation to the image's grid (DINOv2, always).
    Interpolated,
    /// No position table: positions are rotary, in attention (DINOv3); any grid.
    Rotary,
}

/// [CLS] + patch embeddings + position embeddings.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Embeddings {
    patch: Linear,
    patch_size: usize,
    channels: usize,
    /// [CLS]'s row, then the register tokens' rows (DINOv3), in front of the patches; empty
    /// where the architecture has no [CLS] (SigLIP).
    cls: Floats,
    /// [prefix + side * side, hidden]: [CLS]'s row if any, then the trained grid row by row
    /// (empty for `Grid::Rotary`).
    positions: Floats,
    /// The trained image size in pixels (square) and the grid's side in patches.
    image_size: usize,
    side: usize,
    grid: Grid,
    hidden: usize,
}

/// Where an architecture keeps its embedding weights, relative to the model's root.
pub struct EmbeddingNames {
    /// The [CLS] token; None where the architecture has none (SigLIP).
    pub cls: Option<&'static str>,
    /// Register tokens [1, n, hidden] after [CLS] (DINOv3), when the model has them.
    pub registers: Option<&'static str>,
    pub patch: &'static str,
    /// The position table: a parameter [1, n, hidden] (ViT, DINOv2) or an nn.Embedding's
    /// `weight` [n, hidden] (CLIP); none for `Grid::Rotary`.
    pub positions: Option<&'static str>,
    pub patch_bias: bool,
}

/// The shape of a vision config.
pub struct Shape {
    pub hidden: usize,
    pub channels: usize,
    pub image_size: usize,
    pub patch_size: usize,
}

impl Embeddings {
    pub fn load(
        vb: &VarBuilder,
        names: &EmbeddingNames,
        shape: &Shape,
        grid: Grid,
    ) -> candle_core::Result<Self> {
        let Shape { hidden, channels, image_size, patch_size } = *shape;
        if patch_size == 0 || image_size < patch_size {
            candle_core::bail!("image_size {image_size} and patch_size {patch_size} give no patches");
        }
        let side = image_size / patch_size;
        let inputs = channels * patch_size * patch_size;
        let weight =
            vb.get((hidden, channels, patch_size, patch_size), &format!("{}.weight", names.patch))?;
        let bias = names.patch_bias.then(|| vb.get(hidden, &format!("{}.bias", names.patch))).transpose()?;
        let patch = weights::linear_of(&weight.reshape((hidden, inputs))?, bias.as_ref())?;
        let mut cls = match names.cls {
            Some(name) => vb.get_unchecked(name)?.flatten_all()?.to_vec1::<f32>()?,
            None => Vec::new(),
        };
        if names.cls.is_some() && cls.len() != hidden {
            candle_core::bail!("{:?} has {} values, expected {hidden}", names.cls, cls.len());
        }
        let lead = usize::from(names.cls.is_some());
        if let Some(registers) = names.registers {
            let rows = vb.get_unchecked(registers)?.flatten_all()?.to_vec1::<f32>()?;
            if rows.len() % hidden != 0 {
                candle_core::bail!("{registers} has {} values, not rows of {hidden}", rows.len());
            }
            cls.extend(rows);
        }
        let positions = match (names.positions, grid) {
            (None, Grid::Rotary) => Vec::new(),
            (Some(name), Grid::Fixed | Grid::Interpolated) => {
                let positions = vb.get_unchecked(name)?.flatten_all()?.to_vec1::<f32>()?;
                if names.registers.is_some() || positions.len() != (lead + side * side) * hidden {
                    candle_core::bail!(
                        "{name} has {} values, expected {} positions of {hidden}",
                        positions.len(),
                        lead + side * side
                    );
                }
                positions
            }
            (names, grid) => candle_core::bail!("position table {names:?} with {grid:?} positions"),
        };
        let (cls, positions) = (cls.into(), positions.into());
        Ok(Embeddings { patch, patch_size, channels, cls, positions, image_size, side, grid, hidden })
    }

    /// The patch grid (rows, columns) of an image; the convolution drops a remainder.
    pub fn grid_of(&self, height: usize, width: usize) -> (usize, usize) {
        (height / self.patch_size, width / self.patch_size)
    }

    /// The tokens in front of the patches: [CLS] and the registers.
    pub fn prefix(&self) -> usize {
        self.cls.len() / self.hidden.max(1)
    }

    /// The tokens of an image of `height` x `width`: [CLS], the registers and one per patch.
    pub fn tokens(&self, height: usize, width: usize) -> Result<usize, String> {
        let (rows, cols) = self.grid_of(height, width);
        if rows == 0 || cols == 0 {
            return Err(format!(
                "an image of {height}x{width} pixels is smaller than one {0}x{0} patch",
                self.patch_size
            ));
        }
        if self.grid == Grid::Fixed && (height != self.image_size || width != self.image_size) {
            return Err(format!(
                "the model takes {0}x{0} images, not {height}x{width} (the image processor's size does not match the model's image_size)",
                self.image_size
            ));
        }
        Ok(self.prefix() + rows * cols)
    }

    /// The position rows for an image's grid: the trained ones, or interpolated.
    fn positions_for(&self, height: usize, width: usize) -> Cow<'_, [f32]> {
        let (rows, cols) = self.grid_of(height, width);
        // transformers' Dinov2Embeddings.interpolate_pos_encoding keeps the table when the
        // patch count matches and the image is square.
        if self.grid != Grid::Interpolated || (rows * cols == self.side * self.side && height == width) {
            return Cow::Borrowed(&self.positions);
        }
        let (h, lead) = (self.hidden, self.prefix() * self.hidden);
        let mut out = Vec::with_capacity(lead + rows * cols * h);
        out.extend_from_slice(&self.positions[..lead]);
        out.extend(bicubic(&self.positions[lead..], self.side, self.side, rows, cols, h));
        Cow::Owned(out)
    }

    /// The packed input tokens of `images`: per image its [CLS] row (and registers) and its
    /// patches in raster order, each plus its position embedding (none for `Grid::Rotary`);
    /// image i must be `lengths[i]` tokens.
    pub fn forward(&self, images: &[Pixels], lengths: &[usize]) -> candle_core::Result<Vec<f32>> {
        if images.len() != lengths.len() {
            candle_core::bail!("{} images in {} sequences", images.len(), lengths.len());
        }
        let (p, c, h) = (self.patch_size, self.channels, self.hidden);
        let mut patches = Vec::new();
        let mut grids = Vec::with_capacity(images.len());
        for (image, &len) in images.iter().zip(lengths) {
            if image.data.len() != c * image.height * image.width {
                candle_core::bail!(
                    "an image of {} values is not {c}x{}x{}",
                    image.data.len(),
                    image.height,
                    image.width
                );
            }
            let tokens = self.tokens(image.height, image.width).map_err(candle_core::Error::Msg)?;
            if tokens != len {
                candle_core::bail!("an image of {tokens} tokens in a sequence of {len}");
            }
            let (rows, cols) = self.grid_of(image.height, image.width);
            grids.push((rows, cols));
            patches.reserve(rows * cols * c * p * p);
            for gy in 0..rows {
                for gx in 0..cols {
                    for ch in 0..c {
                        let plane = &image.data[ch * image.height * image.width..];
                        for py in 0..p {
                            let at = (gy * p + py) * image.width + gx * p;
                            patches.extend_from_slice(&plane[at..at + p]);
                        }
                    }
                }
            }
        }
        let projected = self.patch.apply(&patches);
        let total: usize = grids.iter().map(|(r, c)| self.prefix() + r * c).sum();
        let mut x = Vec::with_capacity(total * h);
        let mut next = projected.chunks_exact(h);
        for (image, &(rows, cols)) in images.iter().zip(&grids) {
            if self.grid == Grid::Rotary {
                x.extend_from_slice(&self.cls);
                for _ in 0..rows * cols {
                    let row = next.next().ok_or_else(|| candle_core::Error::Msg("too few patch rows".into()))?;
                    x.extend_from_slice(row);
                }
                continue;
            }
            // With a position table the prefix is [CLS] alone (or nothing), each with its row.
            let positions = self.positions_for(image.height, image.width);
            let lead = self.cls.len();
            x.extend(self.cls.iter().zip(&positions[..lead]).map(|(a, b)| a + b));
            for t in 0..rows * cols {
                let row = next.next().ok_or_else(|| candle_core::Error::Msg("too few patch rows".into()))?;
                x.extend(row.iter().zip(&positions[lead + t * h..lead + (t + 1) * h]).map(|(a, b)| a + b));
            }
        }
        Ok(x)
    }
}

/// The tokens of an image at the trained size: [CLS] and the trained grid.
pub fn trained_tokens(image_size: usize, patch_size: usize) -> usize {
    let side = image_size / patch_size.max(1);
    1 + side * side
}

/// The tokens of an image at the trained size without a [CLS] token (SigLIP).
pub fn trained_patches(image_size: usize, patch_size: usize) -> usize {
    trained_tokens(image_size, patch_size) - 1
}

/// ViT's and DINOv2's embedding weights.
pub const VIT_EMBEDDINGS: EmbeddingNames = EmbeddingNames {
    cls: Some("embeddings.cls_token"),
    registers: None,
    patch: "embeddings.patch_embeddings.projection",
    positions: Some("embeddings.position_embeddings"),
    patch_bias: true,
};

/// The last hidden states of an image batch: `embeddings`, `pre_norm` over them (CLIP's
/// `pre_layrnorm`), then `stack`.
pub fn forward(
    embeddings: &Embeddings,
    pre_norm: Option<&Norm>,
    stack: &layers::Stack,
    batch: &super::Batch,
) -> candle_core::Result<Vec<f32>> {
    if !batch.is_image() {
        candle_core::bail!("this model takes images, not text");
    }
    let lengths = batch.lengths()?;
    let mut x = embeddings.forward(batch.images, &lengths)?;
    if let Some(norm) = pre_norm {
        norm.forward(&mut x);
    }
    stack.try_forward(&mut x, &lengths)?;
    Ok(x)
}

/// `src` [in_h * in_w, dim] (a grid of rows, channel-last) resized to [out_h * out_w, dim] as
/// torch's `interpolate(mode="bicubic", align_corners=False)` computes it (no antialiasing):
/// the cubic convolution kernel with A = -0.75, source coordinates scale * (i + 0.5) - 0.5,
/// indices clamped at the border, in float32.
pub fn bicubic(src: &[f32], in_h: usize, in_w: usize, out_h: usize, out_w: usize, dim: usize) -> Vec<f32> {
    let taps = |input: usize, output: usize| -> Vec<([usize; 4], [f32; 4])> {
        let scale = input as f32 / output as f32;
        (0..output)
            .map(|i| {
                let real = scale * (i as f32 + 0.5) - 0.5;
                let floor = real.floor();
                let t = real - floor;
                let base = floor as isize;
                let index = |k: isize| (base - 1 + k).clamp(0, input as isize - 1) as usize;
                ([index(0), index(1), index(2), index(3)], cubic_weights(t))
            })
            .collect()
    };
    let (ys, xs) = (taps(in_h, out_h), taps(in_w, out_w));
    let mut out = vec![0f32; out_h * out_w * dim];
    for (oy, (yi, yw)) in ys.iter().enumerate() {
        for (ox, (xi, xw)) in xs.iter().enumerate() {
            let cell = &mut out[(oy * out_w + ox) * dim..(oy * out_w + ox + 1) * dim];
            for (d, o) in cell.iter_mut().enumerate() {
                let mut acc = 0f32;
                for k in 0..4 {
                    let row = yi[k] * in_w;
                    let mut inner = 0f32;
                    for j in 0..4 {
                        inner += src[(row + xi[j]) * dim + d] * xw[j];
                    }
                    acc += inner * yw[k];
                }
                *o = acc;
            }
        }
    }
    out
}

/// torch's `get_cubic_upsample_coefficients` (A = -0.75).
fn cubic_weights(t: f32) -> [f32; 4] {
    const A: f32 = -0.75;
    let near = |x: f32| ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0;
    let far = |x: f32| ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A;
    [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]
}

/// Where an architecture keeps one pre-norm layer's weights, under `{layers}.{i}`.
pub struct LayerNames {
    pub layers: &'static str,
    pub query: &'static str,
    pub key: &'static str,
    pub value: &'static str,
    pub out: &'static str,
    pub norm_before: &'static str,
    pub norm_after: &'static str,
    pub up: &'static str,
    pub down: &'static str,
    /// The gate of a gated MLP, down(act(gate(x)) * up(x)), when the model has one.
    pub gate: Option<&'static str>,
    /// DINOv2's per-channel LayerScale after attention and after the MLP (`lambda1`).
    pub layer_scale: Option<(&'static str, &'static str)>,
}

/// CLIPEncoderLayer's weight names (SigLIP's layers, both towers, use the same).
pub const CLIP_LAYERS: LayerNames = LayerNames {
    layers: "encoder.layers",
    query: "self_attn.q_proj",
    key: "self_attn.k_proj",
    value: "self_attn.v_proj",
    out: "self_attn.out_proj",
    norm_before: "layer_norm1",
    norm_after: "layer_norm2",
    up: "mlp.fc1",
    down: "mlp.fc2",
    gate: None,
    layer_scale: None,
};

/// The size of a vision encoder's layers.
pub struct StackShape {
    pub hidden: usize,
    pub heads: usize,
    pub intermediate: usize,
    pub layers: usize,
    pub eps: f64,
    pub biases: Biases,
    pub activation: Activation,
}

/// Which of a layer's linear layers have a bias.
#[derive(Clone, Copy)]
pub struct Biases {
    pub query: bool,
    pub key: bool,
    pub value: bool,
    pub out: bool,
    pub mlp: bool,
}

impl Biases {
    /// Query, key and value as `qkv`, the attention output and the MLP with a bias.
    pub const fn qkv(qkv: bool) -> Self {
        Biases { query: qkv, key: qkv, value: qkv, out: true, mlp: true }
    }
}

/// A pre-LayerNorm stack (x + attn(norm(x)), then x + mlp(norm(x))), with `final_norm`
/// over its output. A LayerScale `lambda` is folded into the layer before it: lambda * (W x
/// + b) = (lambda W) x + lambda b.
pub fn pre_norm_stack(
    vb: &VarBuilder,
    names: &LayerNames,
    shape: &StackShape,
    final_norm: Option<Norm>,
) -> candle_core::Result<layers::Stack> {
    let StackShape { hidden: h, heads, intermediate: ff, eps, biases, activation, .. } = *shape;
    let scaled = |vb: &VarBuilder,
                  name: &str,
                  o: usize,
                  i: usize,
                  bias: bool,
                  scale: Option<&str>|
     -> candle_core::Result<Linear> {
        let (mut w, mut b) = weights::torch_parts(&vb.pp(name), o, i, bias)?;
        if let Some(scale) = scale {
            let lambda = vb.get(o, &format!("{scale}.lambda1"))?.to_vec1::<f32>()?;
            for (row, l) in w.chunks_mut(i).zip(&lambda) {
                row.iter_mut().for_each(|v| *v *= l);
            }
            if let Some(b) = b.as_mut() {
                b.iter_mut().zip(&lambda).for_each(|(v, l)| *v *= l);
            }
        }
        Linear::from_torch(w, b, o, i)
    };
    let layers = (0..shape.layers)
        .map(|i| {
            let l = vb.pp(format!("{}.{i}", names.layers));
            // A projection without a bias beside ones with: a bias of zeros (x + 0 is x).
            let any = biases.query || biases.key || biases.value;
            let part = |name: &str, bias: bool| -> candle_core::Result<_> {
                let (w, b) = weights::torch_parts(&l.pp(name), h, h, bias)?;
                Ok((w, b.or_else(|| any.then(|| vec![0.0; h]))))
            };
            let qkv = Linear::side_by_side(
                vec![
                    part(names.query, biases.query)?,
                    part(names.key, biases.key)?,
                    part(names.value, biases.value)?,
                ],
                h,
            )?;
            let (scale_attention, scale_mlp) = names.layer_scale.unzip();
            let down = scaled(&l, names.down, h, ff, biases.mlp, scale_mlp)?;
            let mlp = match names.gate {
                None => layers::Mlp::Plain { up: weights::torch_linear(&l.pp(names.up), ff, h, biases.mlp)?, down },
                Some(gate) => layers::Mlp::Gated {
                    gate_up: Linear::side_by_side(
                        vec![
                            weights::torch_parts(&l.pp(gate), ff, h, biases.mlp)?,
                            weights::torch_parts(&l.pp(names.up), ff, h, biases.mlp)?,
                        ],
                        h,
                    )?,
                    down,
                },
            };
            Ok(layers::Layer {
                qkv,
                attention_out: scaled(&l, names.out, h, h, biases.out, scale_attention)?,
                attention_norm: weights::layer_norm(&l.pp(names.norm_before), h, eps, true)?,
                mlp,
                output_norm: weights::layer_norm(&l.pp(names.norm_after), h, eps, true)?,
                qk_norms: None,
                post_norms: None,
            })
        })
        .collect::<candle_core::Result<Vec<_>>>()?;
    let spec = layers::StackSpec {
        norm_position: layers::NormPosition::Pre,
        final_norm,
        ..layers::StackSpec::post_norm(h, heads, activation)
    };
    layers::Stack::new(layers, spec)
}

/// The first token of each sequence of a packed batch's states [tokens, width].
pub fn first_rows(hidden: &[f32], width: usize, bounds: &[usize]) -> candle_core::Result<Vec<f32>> {
    let mut rows = Vec::with_capacity(bounds.len().saturating_sub(1) * width);
    for w in bounds.windows(2) {
        if w[1] <= w[0] {
            candle_core::bail!("an empty sequence has no first token");
        }
        let row = hidden
            .get(w[0] * width..(w[0] + 1) * width)
            .ok_or_else(|| candle_core::Error::Msg("a sequence beyond the hidden states".into()))?;
        rows.extend_from_slice(row);
    }
    Ok(rows)
}
