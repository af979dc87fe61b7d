//! XLNet (the content stream of `XLNetModel` at inference, as transformers computes it):
//! word embeddings only, then post-norm layers whose attention adds Transformer-XL's
//! relative terms to the content scores: the query's bias against every key, the query
//! (plus its own bias) against the sinusoidal embedding of the query - key distance
//! projected by `r`, and, when token type ids are passed, a segment term by whether query
//! and key share a segment. Those terms are the layer library's per-call score term; the
//! rest is its post-norm stack over packed tokens.

use std::cell::RefCell;

use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::checks::{bad_weights, check_eps, check_heads, unsupported, with_prefix, MAX_POSITIONS};
use crate::error::{Error, Result};
use crate::layers::{self, Activation};
use crate::prepared::Floats;

/// `transformers.XLNetConfig`
/// (https://huggingface.co/docs/transformers/model_doc/xlnet#transformers.XLNetConfig);
/// defaults are transformers' defaults. `mem_len`, `reuse_len` and `use_mems_*` only shape
/// the memories a forward pass returns, never its hidden states.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    #[serde(default = "d::vocab_size")]
    pub vocab_size: usize,
    #[serde(default = "d::d_model")]
    pub d_model: usize,
    #[serde(default = "d::n_layer")]
    pub n_layer: usize,
    #[serde(default = "d::n_head")]
    pub n_head: usize,
    #[serde(default = "d::d_inner")]
    pub d_inner: usize,
    /// d_model / n_head when not given (and nothing else is allowed).
    #[serde(default)]
    pub d_head: Option<usize>,
    #[serde(default = "d::gelu")]
    pub ff_activation: String,
    #[serde(default = "d::bi")]
    pub attn_type: String,
    #[serde(default = "d::layer_norm_eps")]
    pub layer_norm_eps: f64,
    #[serde(default)]
    pub bi_data: bool,
    /// Relative distances clamped to [-clamp_len, clamp_len] when above 0.
    #[serde(default = "d::clamp_len")]
    pub clamp_len: i64,
    #[serde(default)]
    pub same_length: bool,
    #[serde(default = "d::pad_token_id")]
    pub pad_token_id: Option<u32>,
}

mod d {
    pub fn vocab_size() -> usize {
        32000
    }
    pub fn d_model() -> usize {
        1024
    }
    pub fn n_layer() -> usize {
        24
    }
    pub fn n_head() -> usize {
        16
    }
    pub fn d_inner() -> usize {
        4096
    }
    pub fn gelu() -> String {
        "gelu".into()
    }
    pub fn bi() -> String {
        "bi".into()
    }
    pub fn layer_norm_eps() -> f64 {
        1e-12
    }
    pub fn clamp_len() -> i64 {
        -1
    }
    pub fn pad_token_id() -> Option<u32> {
        Some(5)
    }
}

/// One layer's relative attention parameters besides q, k, v and o (all [heads head_dim]
/// per row).
#[derive(serde::Serialize, serde::Deserialize)]
struct Relative {
    /// `r` as a torch Linear: [heads head_dim, d_model].
    r: layers::Linear,
    r_w_bias: Floats,
    r_r_bias: Floats,
    r_s_bias: Floats,
    /// [2, heads head_dim]: same segment, other segment.
    seg_embed: Floats,
}

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Model {
    word: layers::Embedding,
    stack: layers::Stack,
    relative: Vec<Relative>,
    /// 1 / 10000^(2i / d_model), in float32 as transformers computes it.
    inv_freq: Floats,
    clamp_len: Option<i64>,
    head_dim: usize,
    /// heads head_dim.
    width: usize,
    scale: f32,
}

/// [rows, cols] row-major, transposed.
fn transposed(v: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0f32; v.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = v[r * cols + c];
        }
    }
    out
}

pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Model> {
    if cfg.attn_type != "bi" {
        return Err(unsupported("attn_type", &cfg.attn_type, "bi"));
    }
    if cfg.bi_data {
        return Err(unsupported("bi_data", "true", "false"));
    }
    // `same_length` shapes only the "uni" mask: with "bi" attention transformers ignores it.
    let activation = Activation::from_hidden_act(&cfg.ff_activation)
        .ok_or_else(|| unsupported("ff_activation", &cfg.ff_activation, Activation::HIDDEN_ACT_NAMES))?;
    check_heads(cfg.d_model, cfg.n_head)?;
    check_eps("layer_norm_eps", cfg.layer_norm_eps)?;
    let (h, heads) = (cfg.d_model, cfg.n_head);
    let head_dim = h / heads;
    if let Some(d_head) = cfg.d_head.filter(|&d| d != head_dim) {
        return Err(Error::invalid_file(
            "config.json",
            format!("d_head {d_head} is not d_model / n_head = {head_dim}"),
        ));
    }
    if cfg.n_layer == 0 {
        return Err(Error::invalid_file("config.json", "n_layer is 0"));
    }
    // Weights are read under `transformer.` in XLNetForSequenceClassification.
    let vb = with_prefix(vb, &["", "transformer."], "word_embedding.weight");
    // The layer list is sized by n_layer: checked against the checkpoint before any
    // weight is read.
    let last = cfg.n_layer - 1;
    if !vb.contains_tensor(&format!("layer.{last}.rel_attn.q")) {
        return Err(Error::invalid_file(
            "model.safetensors",
            format!("n_layer is {}, and the checkpoint has no layer {last}", cfg.n_layer),
        ));
    }
    let eps = cfg.layer_norm_eps;
    let load = || -> candle_core::Result<Model> {
        let values = |vb: &VarBuilder, shape: &[usize], name: &str| -> candle_core::Result<Vec<f32>> {
            vb.get(shape, name)?.flatten_all()?.to_vec1::<f32>()
        };
        let norm = |vb: VarBuilder| -> candle_core::Result<layers::Norm> {
            layers::Norm::layer(values(&vb, &[h], "weight")?, Some(values(&vb, &[h], "bias")?), eps)
        };
        let linear = |vb: VarBuilder, o: usize, i: usize| -> candle_core::Result<layers::Linear> {
            layers::Linear::from_torch(
                values(&vb, &[o, i], "weight")?,
                Some(values(&vb, &[o], "bias")?),
                o,
                i,
            )
        };
        let mut stack = Vec::with_capacity(cfg.n_layer);
        let mut relative = Vec::with_capacity(cfg.n_layer);
        for i in 0..cfg.n_layer {
            let l = vb.pp(format!("layer.{i}"));
            let a = l.pp("rel_attn");
            // q, k, v, o and r are [d_model, heads, head_dim]: x W for q, k, v and r (so
            // torch's Linear weight is their transpose), W x for o (it is o itself).
            let projection = |name: &str| values(&a, &[h, heads, head_dim], name);
            let part = |name: &str| -> candle_core::Result<(Vec<f32>, Option<Vec<f32>>)> {
                Ok((transposed(&projection(name)?, h, h), None))
            };
            let qkv = layers::Linear::side_by_side(vec![part("q")?, part("k")?, part("v")?], h)?;
            let attention_out = layers::Linear::from_torch(projection("o")?, None, h, h)?;
            let bias = |name: &str| values(&a, &[heads, head_dim], name);
            relative.push(Relative {
                r: layers::Linear::from_torch(transposed(&projection("r")?, h, h), None, h, h)?,
                r_w_bias: bias("r_w_bias")?.into(),
                r_r_bias: bias("r_r_bias")?.into(),
                r_s_bias: bias("r_s_bias")?.into(),
                seg_embed: values(&a, &[2, heads, head_dim], "seg_embed")?.into(),
            });
            let ff = l.pp("ff");
            stack.push(layers::Layer {
                qkv,
                attention_out,
                attention_norm: norm(a.pp("layer_norm"))?,
                mlp: layers::Mlp::Plain {
                    up: linear(ff.pp("layer_1"), cfg.d_inner, h)?,
                    down: linear(ff.pp("layer_2"), h, cfg.d_inner)?,
                },
                output_norm: norm(ff.pp("layer_norm"))?,
                qk_norms: None,
                post_norms: None,
            });
        }
        let word = layers::Embedding::from_tensor(&vb.get((cfg.vocab_size, h), "word_embedding.weight")?)?;
        let spec = layers::StackSpec { head_dim, ..layers::StackSpec::post_norm(h, heads, activation) };
        // torch: 1 / pow(10000, arange(0, d_model, 2) / d_model), every step in float32.
        let inv_freq: Vec<f32> =
            (0..h).step_by(2).map(|i| 1.0 / 10000f64.powf((i as f32 / h as f32) as f64) as f32).collect();
        Ok(Model {
            word,
            stack: layers::Stack::new(stack, spec)?,
            relative,
            inv_freq: inv_freq.into(),
            clamp_len: (cfg.clamp_len > 0).then_some(cfg.clamp_len),
            head_dim,
            width: h,
            scale: 1.0 / (head_dim as f32).sqrt(),
        })
    };
    load().map_err(bad_weights)
}

impl Model {
    /// The sinusoidal embeddings [2 longest - 1, d_model] of the relative distances
    /// -(longest - 1)..=longest - 1 (row p + longest - 1 for distance p), [sin | cos] of
    /// the (clamped) distance times each frequency, in float32 as transformers computes them.
    fn sinusoids(&self, longest: usize) -> Vec<f32> {
        let half = self.inv_freq.len();
        let span = longest as i64 - 1;
        let mut table = Vec::with_capacity((2 * longest - 1) * 2 * half);
        for p in -span..=span {
            let p = self.clamp_len.map_or(p, |c| p.clamp(-c, c)) as f32;
            let angles: Vec<f32> = self.inv_freq.iter().map(|f| p * f).collect();
            table.extend(angles.iter().map(|a| (*a as f64).sin() as f32));
            table.extend(angles.iter().map(|a| (*a as f64).cos() as f32));
        }
        table
    }

    /// The last hidden states [tokens, d_model] of a packed batch; `type_ids` empty (no
    /// segment term) or one per token.
    pub fn forward_packed(
        &self,
        ids: &[u32],
        type_ids: &[u32],
        bounds: &[usize],
    ) -> candle_core::Result<Vec<f32>> {
        let lengths = layers::lengths_of(bounds, ids.len())?;
        if !type_ids.is_empty() && type_ids.len() != ids.len() {
            candle_core::bail!("{} token type ids for {} tokens", type_ids.len(), ids.len());
        }
        let longest = lengths.iter().copied().max().unwrap_or(0);
        if longest == 0 {
            return Ok(Vec::new());
        }
        let sinusoids = self.sinusoids(longest);
        let term = Terms {
            model: self,
            positions: self.relative.iter().map(|r| r.r.apply(&sinusoids)).collect(),
            longest,
            types: (!type_ids.is_empty()).then_some(type_ids),
        };
        let mut x = self.word.gather(ids)?;
        self.stack.forward_with(&mut x, &lengths, None, Some(&term));
        Ok(x)
    }
}

/// The relative terms of one forward call: the position embeddings projected by each
/// layer's `r` for the batch's longest sequence, and the batch's token type ids.
struct Terms<'a> {
    model: &'a Model,
    /// Per layer, [2 longest - 1, heads head_dim], row p + longest - 1 for distance p.
    positions: Vec<Vec<f32>>,
    longest: usize,
    types: Option<&'a [u32]>,
}

thread_local! {
    /// One head's queries plus r_r_bias [len, head_dim] and their products with the
    /// position embeddings [len, 2 len - 1] (reused across calls).
    static SCRATCH: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

impl layers::ScoreTerm for Terms<'_> {
    /// transformers' scores are scale ((q_i + r_w_bias) k_j + (q_i + r_r_bias) kr(i - j) +
    /// ef_ij); the stack has added scale q_i k_j.
    fn add(
        &self,
        layer: usize,
        head: usize,
        offset: usize,
        q: &[f32],
        k: &[f32],
        stride: usize,
        len: usize,
        scores: &mut [f32],
    ) {
        let (d, width, scale) = (self.model.head_dim, self.model.width, self.model.scale);
        let rel = &self.model.relative[layer];
        let at = head * d;
        let (r_w, r_r, r_s) =
            (&rel.r_w_bias[at..at + d], &rel.r_r_bias[at..at + d], &rel.r_s_bias[at..at + d]);
        let query = |i: usize| &q[i * stride..i * stride + d];
        let key_bias: Vec<f32> = (0..len).map(|j| dot(r_w, &k[j * stride..j * stride + d])).collect();
        let span = 2 * len - 1;
        SCRATCH.with_borrow_mut(|(shifted, by_distance)| {
            shifted.clear();
            for i in 0..len {
                shifted.extend(query(i).iter().zip(r_r).map(|(a, b)| a + b));
            }
            by_distance.clear();
            by_distance.resize(len * span, 0.0);
            // Distances -(len - 1)..=len - 1: rows from (longest - len) of the table.
            let table = &self.positions[layer][(self.longest - len) * width + at..];
            // SAFETY: `by_distance` is [len, span]; `shifted` is [len, d]; the table holds
            // rows longest - len .. longest + len - 1 (span rows) of `width` values, read at
            // columns at..at + d.
            unsafe {
                // by_distance[i][c] = scale (q_i + r_r_bias) . kr(c - (len - 1))
                gemm::gemm(
                    len,
                    span,
                    d,
                    by_distance.as_mut_ptr(),
                    1,
                    span as isize,
                    false,
                    shifted.as_ptr(),
                    1,
                    d as isize,
                    table.as_ptr(),
                    width as isize,
                    1,
                    0.0,
                    scale,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                );
            }
            for i in 0..len {
                let row = &mut scores[i * len..(i + 1) * len];
                // Distance i - j at column i - j + len - 1.
                let distances = &by_distance[i * span..(i + 1) * span];
                for (j, s) in row.iter_mut().enumerate() {
                    *s += scale * key_bias[j] + distances[i + len - 1 - j];
                }
            }
        });
        if let Some(types) = self.types {
            let types = &types[offset..offset + len];
            let (same, other) = rel.seg_embed.split_at(width);
            let (same, other) = (&same[at..at + d], &other[at..at + d]);
            for i in 0..len {
                let shifted: Vec<f32> = query(i).iter().zip(r_s).map(|(a, b)| a + b).collect();
                let (e_same, e_other) = (scale * dot(&shifted, same), scale * dot(&shifted, other));
                for (s, t) in scores[i * len..(i + 1) * len].iter_mut().zip(types) {
                    *s += if *t == types[i] { e_same } else { e_other };
                }
            }
        }
    }
}

impl super::Config for Config {
    /// XLNet has no position table: the tokenizer's model_max_length limits inputs.
    fn dims(&self) -> super::Dims {
        super::Dims::text(self.d_model, MAX_POSITIONS, self.vocab_size, self.pad_token_id.unwrap_or(5))
    }
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn super::Model>> {
        Ok(Box::new(load(vb, self)?))
    }
}

impl super::Model for Model {
    fn forward(&self, batch: &super::Batch) -> candle_core::Result<Vec<f32>> {
        self.forward_packed(batch.ids, batch.type_ids, batch.bounds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> std::path::PathBuf {
        std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/decoders/xlnet"))
            .into()
    }

    /// The `xlnet` fixture with its config.json edited, loaded on its own weights.
    fn edited(edit: impl FnOnce(&mut serde_json::Value)) -> Result<Model> {
        let mut json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(fixture().join("config.json")).unwrap()).unwrap();
        edit(&mut json);
        let cfg: Config = serde_json::from_value(json).unwrap();
        let (vb, _) = crate::weights::load_weights(&fixture(), &candle_core::Device::Cpu).unwrap();
        load(vb, &cfg)
    }

    #[test]
    fn settings_that_are_not_implemented_are_refused_by_name() {
        let cases: [(&str, serde_json::Value, &str); 4] = [
            ("attn_type", "uni".into(), "uni"),
            ("bi_data", true.into(), "true"),
            ("ff_activation", "mish".into(), "mish"),
            ("ff_activation", "gelu_10".into(), "gelu_10"),
        ];
        for (key, value, shown) in cases {
            match edited(|c| c[key] = value.clone()) {
                Err(Error::Unsupported { what, value, .. }) => {
                    assert_eq!((what, value.as_str()), (key, shown))
                }
                Err(e) => panic!("{key}: {e}"),
                Ok(_) => panic!("{key} = {value} accepted"),
            }
        }
        // What XLNet's own code accepts loads: every activation transformers maps, the
        // memory settings (they shape only the returned memories), clamp_len.
        for (key, value) in [
            ("ff_activation", serde_json::Value::from("relu")),
            ("ff_activation", "gelu_new".into()),
            ("mem_len", 512.into()),
            ("reuse_len", 4.into()),
            ("clamp_len", 3.into()),
            ("d_head", 16.into()),
            ("same_length", true.into()),
        ] {
            assert!(edited(|c| c[key] = value.clone()).is_ok(), "{key} = {value}");
        }
        assert!(edited(|_| {}).is_ok());
    }

    #[test]
    fn configs_that_do_not_fit_the_checkpoint_are_errors() {
        for (key, value) in [
            // More layers than the checkpoint: refused before any layer is read.
            ("n_layer", serde_json::Value::from(3)),
            ("n_layer", 1usize.wrapping_shl(40).into()),
            ("n_layer", 0.into()),
            ("d_head", 8.into()),
            ("n_head", 3.into()),
            ("n_head", 4.into()),
            ("d_inner", 65.into()),
            ("vocab_size", 405.into()),
        ] {
            match edited(|c| c[key] = value.clone()) {
                Err(Error::InvalidFile { .. }) => {}
                Err(e) => panic!("{key} = {value}: {e}"),
                Ok(_) => panic!("{key} = {value} accepted"),
            }
        }
    }

    /// clamp_len as transformers applies it (relative distances clamped to
    /// [-clamp_len, clamp_len]): the fixture edited to clamp_len 3, against the last row
    /// (`<cls>`) of transformers 5.23's `XLNetModel(...).last_hidden_state` for the
    /// fixture's 46-token input, whose distances reach 45.
    #[test]
    fn clamp_len_clamps_distances_as_transformers_does() {
        #[rustfmt::skip]
        const WANT: [f32; 32] = [
            0.4234586, 0.8299317, -0.3989644, -1.2216649, 0.66252846, 0.630542, 0.050810847,
            -0.11518665, -1.7612075, 1.0212265, -0.756922, -0.52943647, 0.9384597, 0.0511144,
            0.013309956, 0.25019518, 0.057871424, -1.9365786, -2.1878552, 0.93476385, 2.8086588,
            0.7455151, 1.2207948, 1.9911476, 0.8011115, -0.13105585, -1.6686742, -0.9762851,
            -0.27912727, -0.47983566, -0.18170144, -0.1156176,
        ];
        let ids: [u32; 46] = [
            58, 78, 86, 182, 276, 50, 283, 50, 96, 202, 69, 36, 63, 42, 315, 379, 37, 51, 314, 134, 46, 51,
            39, 314, 16, 59, 58, 291, 40, 35, 309, 401, 40, 307, 329, 68, 176, 390, 344, 314, 61, 111, 314,
            18, 4, 3,
        ];
        let diff = |m: &Model| {
            let hidden = m.forward_packed(&ids, &[], &[0, ids.len()]).unwrap();
            hidden[hidden.len() - 32..].iter().zip(WANT).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max)
        };
        let clamped = edited(|c| c["clamp_len"] = 3.into()).unwrap();
        assert!(diff(&clamped) <= 1e-4, "{}", diff(&clamped));
        // Unclamped, the same input is far from it; clamped beyond its longest distance,
        // it is the unclamped model.
        let plain = edited(|_| {}).unwrap();
        assert!(diff(&plain) > 0.1);
        let wide = edited(|c| c["clamp_len"] = 45.into()).unwrap();
        let (a, b) = (
            plain.forward_packed(&ids, &[], &[0, ids.len()]).unwrap(),
            wide.forward_packed(&ids, &[], &[0, ids.len()]).unwrap(),
        );
        assert_eq!(a, b);
    }

    /// The segment term reads each sequence's own type ids in a packed batch, on one
    /// thread and with the batch split into groups of sequences per thread.
    #[test]
    fn type_ids_are_read_per_sequence() {
        let m = edited(|_| {}).unwrap();
        let (a, b): (&[u32], &[u32]) = (&[92, 263, 43, 35, 4, 3], &[93, 64, 4, 70, 63, 4, 3]);
        let (ta, tb): (&[u32], &[u32]) = (&[0, 0, 0, 0, 0, 2], &[0, 0, 0, 1, 1, 1, 2]);
        let one = |ids: &[u32], types: &[u32]| m.forward_packed(ids, types, &[0, ids.len()]).unwrap();
        let ids = [b, a, b, a, b].concat();
        let types = [tb, ta, tb, ta, tb].concat();
        let mut bounds = vec![0];
        for len in [b.len(), a.len(), b.len(), a.len(), b.len()] {
            bounds.push(bounds.last().unwrap() + len);
        }
        let want = [one(b, tb), one(a, ta), one(b, tb), one(a, ta), one(b, tb)].concat();
        for threads in [1, 2] {
            let packed =
                crate::threads::run(threads, || m.forward_packed(&ids, &types, &bounds)).unwrap().unwrap();
            let worst = packed.iter().zip(&want).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
            assert!(worst < 1e-5, "{threads} threads: {worst}");
        }
        // Without type ids there is no segment term at all (not zeros).
        assert_ne!(one(a, &[]), one(a, &[0; 6]));
        assert!(m.forward_packed(a, &[0; 5], &[0, a.len()]).is_err());
    }
}
