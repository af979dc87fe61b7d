//! The layers against plain loops: every parameter of the stack (norm position and kind,
//! biases, plain and gated MLPs, scaling, causal masks, rotary positions, relative bias,
//! grouped-query heads), alone and in a team, with packed and torch-layout weights.

use super::attention::unnormalized_softmax_rows;
use super::*;
use crate::kernels::float32;

#[test]
fn erf_is_within_5e_7_of_the_exact_value() {
    // The reference: candle's f64 erf (a port of the Boost implementation).
    let mut worst = 0f64;
    for i in -60_000..=60_000 {
        let x = i as f64 / 10_000.0;
        let got = erf(x as f32) as f64;
        let want = candle_core::cpu::erf::erf_f64(x);
        worst = worst.max((got - want).abs());
    }
    eprintln!("erf worst {worst:e}");
    assert!(worst < 5e-7, "worst {worst:e}");
}

#[test]
fn exp_is_within_2_ulp_over_the_softmax_range() {
    let mut worst = 0f64;
    for i in 0..=870_000 {
        let x = -(i as f32) / 10_000.0;
        let want = (x as f64).exp();
        worst = worst.max(((exp(x) as f64) - want).abs() / want);
    }
    assert!(worst < 2.5e-7, "worst relative error {worst:e}");
}

#[test]
fn softmax_rows_with_a_bias_match_the_definition() {
    for causal in [false, true] {
        let mut x: Vec<f32> = (0..12).map(|i| (i as f32 * 0.7).sin() * 3.0).collect();
        let add: Vec<f32> = (0..16).map(|i| i as f32 * 0.05).collect();
        let want: Vec<f32> = x
            .chunks(3)
            .enumerate()
            .flat_map(|(i, row)| {
                let e: Vec<f64> = row
                    .iter()
                    .enumerate()
                    .map(|(j, v)| if causal && j > i { 0.0 } else { ((v + add[i * 4 + j]) as f64).exp() })
                    .collect();
                let s: f64 = e.iter().sum();
                e.into_iter().map(move |v| (v / s) as f32)
            })
            .collect();
        let mut inverse_sums = [0f32; 4];
        unnormalized_softmax_rows(&mut x, 3, (0, 0, 3), Some((&add, 4)), causal, None, &mut inverse_sums);
        for (i, (g, w)) in x.iter().zip(&want).enumerate() {
            let g = g * inverse_sums[i / 3];
            assert!((g - w).abs() < 1e-6, "causal {causal}: {g} vs {w}");
        }
    }
}

#[test]
fn activations_match_their_definitions() {
    let xs: Vec<f32> = (-300..=300).map(|i| i as f32 * 0.1).collect();
    let cases: [(Activation, fn(f64) -> f64); 8] = [
        (Activation::Silu, |x| x / (1.0 + (-x).exp())),
        (Activation::GeluTanh, |x| {
            0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
        }),
        (Activation::QuickGelu, |x| x / (1.0 + (-1.702 * x).exp())),
        (Activation::Sigmoid, |x| 1.0 / (1.0 + (-x).exp())),
        (Activation::Tanh, f64::tanh),
        (Activation::LeakyRelu, |x| if x >= 0.0 { x } else { 0.01 * x }),
        (Activation::Softplus, |x| if x > 20.0 { x } else { x.exp().ln_1p() }),
        (Activation::Identity, |x| x),
    ];
    for (act, want) in cases {
        let mut got = xs.clone();
        act.apply(&mut got);
        for (x, g) in xs.iter().zip(&got) {
            let w = want(*x as f64);
            assert!((*g as f64 - w).abs() <= 1e-6 * w.abs().max(1.0), "{act:?}({x}) = {g}, not {w}");
        }
    }
    for (name, act) in [
        ("gelu", Activation::Gelu),
        ("gelu_new", Activation::GeluTanh),
        ("quick_gelu", Activation::QuickGelu),
        ("swish", Activation::Silu),
    ] {
        assert_eq!(Activation::from_hidden_act(name), Some(act));
    }
    assert_eq!(Activation::from_hidden_act("mish"), None);
}

#[test]
fn linear_matches_a_plain_product() {
    let (rows, k, n) = (5, 7, 3);
    let weight: Vec<f32> = (0..n * k).map(|i| (i as f32 * 0.37).sin()).collect();
    let bias: Vec<f32> = (0..n).map(|i| i as f32 * 0.1).collect();
    let x: Vec<f32> = (0..rows * k).map(|i| (i as f32 * 0.11).cos()).collect();
    let residual: Vec<f32> = (0..rows * n).map(|i| i as f32).collect();
    for packed in [false, float32::available()] {
        for biased in [true, false] {
            let b = biased.then(|| bias.clone());
            let layer = Linear::with_layout(weight.clone(), b, n, k, packed).unwrap();
            let mut out = vec![0f32; rows * n];
            layer.forward(&x, Some(&residual), None, &mut out, 1);
            for r in 0..rows {
                for o in 0..n {
                    let want: f32 = (0..k).map(|i| x[r * k + i] * weight[o * k + i]).sum::<f32>()
                        + if biased { bias[o] } else { 0.0 }
                        + residual[r * n + o];
                    assert!((out[r * n + o] - want).abs() < 1e-5, "packed {packed}: row {r} col {o}");
                }
            }
        }
    }
    assert!(Linear::from_torch(vec![0.0; 5], None, 2, 3).is_err());
}

/// Deterministic values in [-scale, scale].
fn noise(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// The settings of one test stack.
#[derive(Clone, Copy, Debug)]
struct Setting {
    pre: bool,
    rms: bool,
    biased: bool,
    gated: bool,
    scaled: bool,
    causal: bool,
    rotary: bool,
    relative: bool,
    heads: usize,
    kv_heads: usize,
    /// Layer 1 attends within this window (layer 0 is global).
    window: Option<usize>,
    /// Gemma 3's parts (pre-norm only): per-head RMSNorms of queries and keys before the
    /// rotary positions, and a norm over each block's output before its residual sum.
    decoder: bool,
}

/// Pre-norm RMSNorm, gated, causal, rotary, grouped-query heads (4 query heads on 2 K/V
/// heads): a Qwen-like stack.
const GROUPED: Setting = Setting {
    pre: true,
    rms: true,
    biased: false,
    gated: true,
    scaled: true,
    causal: true,
    rotary: true,
    relative: false,
    heads: 4,
    kv_heads: 2,
    window: None,
    decoder: false,
};

const HIDDEN: usize = 24;
const HEAD_DIM: usize = 6;
const FF: usize = 40;
const LAYERS: usize = 2;

/// A layer's weights in torch's layout.
struct Raw {
    qkv: Vec<f32>,
    qkv_b: Vec<f32>,
    o: Vec<f32>,
    o_b: Vec<f32>,
    n1: (Vec<f32>, Vec<f32>),
    up: Vec<f32>,
    up_b: Vec<f32>,
    down: Vec<f32>,
    down_b: Vec<f32>,
    n2: (Vec<f32>, Vec<f32>),
    /// Query and key norms [HEAD_DIM]; norms after attention and after the MLP.
    qn: Vec<f32>,
    kn: Vec<f32>,
    p1: (Vec<f32>, Vec<f32>),
    p2: (Vec<f32>, Vec<f32>),
}

fn raw(s: &Setting, seed: u64) -> Raw {
    let qkv_w = (s.heads + 2 * s.kv_heads) * HEAD_DIM;
    let width = s.heads * HEAD_DIM;
    let up = if s.gated { 2 * FF } else { FF };
    let norm =
        |seed| (noise(HIDDEN, seed, 0.3).iter().map(|v| 1.0 + v).collect(), noise(HIDDEN, seed + 1, 0.2));
    Raw {
        qkv: noise(qkv_w * HIDDEN, seed, 0.3),
        qkv_b: noise(qkv_w, seed + 1, 0.1),
        o: noise(HIDDEN * width, seed + 2, 0.3),
        o_b: noise(HIDDEN, seed + 3, 0.1),
        n1: norm(seed + 4),
        up: noise(up * HIDDEN, seed + 6, 0.3),
        up_b: noise(up, seed + 7, 0.1),
        down: noise(HIDDEN * FF, seed + 8, 0.2),
        down_b: noise(HIDDEN, seed + 9, 0.1),
        n2: norm(seed + 10),
        qn: noise(HEAD_DIM, seed + 12, 0.3).iter().map(|v| 1.0 + v).collect(),
        kn: noise(HEAD_DIM, seed + 13, 0.3).iter().map(|v| 1.0 + v).collect(),
        p1: norm(seed + 14),
        p2: norm(seed + 16),
    }
}

const BUCKETS: usize = 8;
const MAX_DISTANCE: usize = 12;

fn stack(s: &Setting, raws: &[Raw], packed: bool) -> Stack {
    let qkv_w = (s.heads + 2 * s.kv_heads) * HEAD_DIM;
    let width = s.heads * HEAD_DIM;
    let up = if s.gated { 2 * FF } else { FF };
    let lin = |w: &Vec<f32>, b: &Vec<f32>, o, i| {
        Linear::with_layout(w.clone(), s.biased.then(|| b.clone()), o, i, packed).unwrap()
    };
    let norm = |(w, b): &(Vec<f32>, Vec<f32>)| {
        if s.rms {
            Norm::rms(w.clone(), 1e-6)
        } else {
            Norm::layer(w.clone(), s.biased.then(|| b.clone()), 1e-5).unwrap()
        }
    };
    let layers = raws
        .iter()
        .map(|r| Layer {
            qkv: lin(&r.qkv, &r.qkv_b, qkv_w, HIDDEN),
            attention_out: lin(&r.o, &r.o_b, HIDDEN, width),
            attention_norm: norm(&r.n1),
            mlp: if s.gated {
                Mlp::Gated {
                    gate_up: lin(&r.up, &r.up_b, up, HIDDEN),
                    down: lin(&r.down, &r.down_b, HIDDEN, FF),
                }
            } else {
                Mlp::Plain { up: lin(&r.up, &r.up_b, up, HIDDEN), down: lin(&r.down, &r.down_b, HIDDEN, FF) }
            },
            output_norm: norm(&r.n2),
            qk_norms: s.decoder.then(|| (Norm::rms(r.qn.clone(), 1e-6), Norm::rms(r.kn.clone(), 1e-6))),
            post_norms: s.decoder.then(|| (norm(&r.p1), norm(&r.p2))),
        })
        .collect();
    let spec = StackSpec {
        hidden: HIDDEN,
        heads: s.heads,
        kv_heads: s.kv_heads,
        head_dim: HEAD_DIM,
        activation: if s.gated { Activation::Silu } else { Activation::Gelu },
        norm_position: if s.pre { NormPosition::Pre } else { NormPosition::Post },
        final_norm: s.pre.then(|| norm(&raws[0].n2)),
        scaled: s.scaled,
        causal: s.causal,
        rotary: s.rotary.then(|| Rotary::new(HEAD_DIM, 100.0)),
        relative_bias: s.relative.then(|| {
            RelativeBias::new(noise(BUCKETS * s.heads, 99, 1.0), BUCKETS, s.heads, MAX_DISTANCE).unwrap()
        }),
        sliding: s.window.map(|window| Sliding::between_global(2, raws.len(), window, None)),
        scale: None,
        softcap: None,
    };
    Stack::new(layers, spec).unwrap()
}

/// The same stack in plain f64 loops, one sequence at a time.
fn reference(s: &Setting, raws: &[Raw], x: &[f32], lengths: &[usize]) -> Vec<f32> {
    let h = HIDDEN;
    let d = HEAD_DIM;
    let width = s.heads * d;
    let qkv_w = (s.heads + 2 * s.kv_heads) * d;
    let linear = |x: &[f64], w: &[f32], b: &[f32], o: usize| -> Vec<f64> {
        let i = x.len();
        (0..o)
            .map(|r| {
                (0..i).map(|c| x[c] * w[r * i + c] as f64).sum::<f64>()
                    + if s.biased { b[r] as f64 } else { 0.0 }
            })
            .collect()
    };
    let norm = |x: &[f64], (w, b): &(Vec<f32>, Vec<f32>)| -> Vec<f64> {
        let n = x.len() as f64;
        let mean = if s.rms { 0.0 } else { x.iter().sum::<f64>() / n };
        let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
        let eps = if s.rms { 1e-6 } else { 1e-5 };
        x.iter()
            .enumerate()
            .map(|(i, v)| {
                (v - mean) / (var + eps).sqrt() * w[i] as f64
                    + if s.biased && !s.rms { b[i] as f64 } else { 0.0 }
            })
            .collect()
    };
    let act = |v: f64| -> f64 {
        if s.gated {
            v / (1.0 + (-v).exp())
        } else {
            0.5 * v * (1.0 + candle_core::cpu::erf::erf_f64(v / 2f64.sqrt()))
        }
    };
    let table = noise(BUCKETS * s.heads, 99, 1.0);
    let rotary = Rotary::new(d, 100.0);
    let (cos, sin) = rotary.table(lengths.iter().copied().max().unwrap_or(0));
    let mut out = Vec::new();
    let mut start = 0;
    for &len in lengths {
        let mut xs: Vec<Vec<f64>> = (0..len)
            .map(|t| x[(start + t) * h..(start + t + 1) * h].iter().map(|v| *v as f64).collect())
            .collect();
        start += len;
        for (layer, r) in raws.iter().enumerate() {
            let input: Vec<Vec<f64>> =
                xs.iter().map(|v| if s.pre { norm(v, &r.n1) } else { v.clone() }).collect();
            let mut qkv: Vec<Vec<f64>> = input.iter().map(|v| linear(v, &r.qkv, &r.qkv_b, qkv_w)).collect();
            if s.decoder {
                let rms = |x: &[f64], w: &[f32]| -> Vec<f64> {
                    let r = (x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64 + 1e-6).sqrt();
                    x.iter().zip(w).map(|(v, w)| v / r * *w as f64).collect()
                };
                for row in qkv.iter_mut() {
                    for head in 0..s.heads + s.kv_heads {
                        let w = if head < s.heads { &r.qn } else { &r.kn };
                        let normed = rms(&row[head * d..(head + 1) * d], w);
                        row[head * d..(head + 1) * d].copy_from_slice(&normed);
                    }
                }
            }
            if s.rotary {
                for (p, row) in qkv.iter_mut().enumerate() {
                    for head in 0..s.heads + s.kv_heads {
                        let at = head * d;
                        for i in 0..d / 2 {
                            let (c, sn) = (cos[p * d / 2 + i] as f64, sin[p * d / 2 + i] as f64);
                            let (a, b) = (row[at + i], row[at + i + d / 2]);
                            row[at + i] = a * c - b * sn;
                            row[at + i + d / 2] = a * sn + b * c;
                        }
                    }
                }
            }
            let mut context = vec![vec![0f64; width]; len];
            for head in 0..s.heads {
                let kv = head / (s.heads / s.kv_heads);
                for q in 0..len {
                    let window = s.window.filter(|_| layer % 2 == 1);
                    let first = window.map_or(0, |w| q.saturating_sub(w));
                    let end = if s.causal { q + 1 } else { len };
                    let keys = first..window.map_or(end, |w| end.min(q + w + 1));
                    let scores: Vec<f64> = keys
                        .clone()
                        .map(|k| {
                            let dot: f64 =
                                (0..d).map(|i| qkv[q][head * d + i] * qkv[k][width + kv * d + i]).sum();
                            let scale = if s.scaled { 1.0 / (d as f64).sqrt() } else { 1.0 };
                            let bias = if s.relative {
                                let bucket =
                                    relative_position_bucket(k as i64 - q as i64, BUCKETS, MAX_DISTANCE);
                                table[bucket as usize * s.heads + head] as f64
                            } else {
                                0.0
                            };
                            dot * scale + bias
                        })
                        .collect();
                    let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = scores.iter().map(|v| (v - max).exp()).collect();
                    let total: f64 = e.iter().sum();
                    for i in 0..d {
                        context[q][head * d + i] = keys
                            .clone()
                            .map(|k| e[k - first] / total * qkv[k][width + (s.kv_heads + kv) * d + i])
                            .sum();
                    }
                }
            }
            for t in 0..len {
                let out = linear(&context[t], &r.o, &r.o_b, h);
                let out = if s.decoder { norm(&out, &r.p1) } else { out };
                let attended: Vec<f64> = out.iter().zip(&xs[t]).map(|(a, b)| a + b).collect();
                let attended = if s.pre { attended } else { norm(&attended, &r.n1) };
                let mlp_in = if s.pre { norm(&attended, &r.n2) } else { attended.clone() };
                let inner: Vec<f64> = if s.gated {
                    let both = linear(&mlp_in, &r.up, &r.up_b, 2 * FF);
                    (0..FF).map(|i| act(both[i]) * both[FF + i]).collect()
                } else {
                    linear(&mlp_in, &r.up, &r.up_b, FF).into_iter().map(act).collect()
                };
                let out = linear(&inner, &r.down, &r.down_b, h);
                let out = if s.decoder { norm(&out, &r.p2) } else { out };
                let y: Vec<f64> = out.iter().zip(&attended).map(|(a, b)| a + b).collect();
                xs[t] = if s.pre { y } else { norm(&y, &r.n2) };
            }
        }
        for v in xs {
            let v = if s.pre { norm(&v, &raws[0].n2) } else { v };
            out.extend(v.into_iter().map(|v| v as f32));
        }
    }
    out
}

fn check(s: Setting) {
    check_lengths(s, &[5, 1, 9, 3, 7, 2]);
}

/// `check` over sequences of `lengths`.
fn check_lengths(s: Setting, lengths: &[usize]) {
    let raws: Vec<Raw> = (0..LAYERS).map(|l| raw(&s, 10 + 100 * l as u64)).collect();
    let tokens: usize = lengths.iter().sum();
    let x = noise(tokens * HIDDEN, 7, 1.0);
    let want = reference(&s, &raws, &x, lengths);
    let layouts: &[bool] = if float32::available() { &[false, true] } else { &[false] };
    for &packed in layouts {
        let st = stack(&s, &raws, packed);
        let close = |got: &[f32], what: &str| {
            let worst = got.iter().zip(&want).map(|(g, w)| (g - w).abs()).fold(0f32, f32::max);
            assert!(worst < 2e-4, "{s:?}, packed {packed}, {what}: max abs diff {worst}");
        };
        // Alone, one by one.
        let mut one = Vec::new();
        let mut at = 0;
        for &len in lengths {
            let mut part = x[at * HIDDEN..(at + len) * HIDDEN].to_vec();
            crate::threads::run(1, || st.try_forward(&mut part, &[len])).unwrap().unwrap();
            one.extend(part);
            at += len;
        }
        close(&one, "one by one");
        // One batch: groups of sequences per thread, then one team over one sequence.
        for threads in [1, 2, 3] {
            let mut batch = x.clone();
            crate::threads::run(threads, || st.try_forward(&mut batch, lengths)).unwrap().unwrap();
            close(&batch, &format!("batch on {threads} threads"));
            let mut single = x[..lengths[0] * HIDDEN].to_vec();
            crate::threads::run(threads, || st.try_forward(&mut single, &lengths[..1])).unwrap().unwrap();
            close(&single, &format!("first alone on {threads} threads"));
        }
        // A team over every weight kind (torch-layout stacks otherwise fork and join).
        let mut teamed = x.clone();
        crate::threads::run(2, || {
            let longest = lengths.iter().copied().max().unwrap_or(0);
            let bias = st.relative_bias.as_ref().map(|b| b.values(longest));
            let bias = bias.as_deref().map(|values| AttentionBias { values, size: longest });
            let rope = st.rotary.as_ref().map(|r| r.table(longest));
            let call = stack::Call {
                bias: bias.as_ref(),
                rope: rope.as_ref().map(|(c, s)| (&c[..], &s[..])),
                local_rope: None,
                term: None,
                rope_rows: None,
            };
            st.run_as(&mut teamed, lengths, &call, 2, true)
        })
        .unwrap();
        close(&teamed, "team");
    }
}

#[test]
fn the_bert_layer_matches_plain_loops() {
    check(Setting {
        pre: false,
        rms: false,
        biased: true,
        gated: false,
        scaled: true,
        causal: false,
        rotary: false,
        relative: false,
        heads: 4,
        kv_heads: 4,
        window: None,
        decoder: false,
    });
}

#[test]
fn t5_clip_and_nomic_layers_match_plain_loops() {
    // T5: pre-norm RMSNorm, no biases, gated, unscaled, relative bias.
    check(Setting {
        pre: true,
        rms: true,
        biased: false,
        gated: true,
        scaled: false,
        causal: false,
        rotary: false,
        relative: true,
        heads: 4,
        kv_heads: 4,
        window: None,
        decoder: false,
    });
    // CLIP: pre-norm LayerNorm, biases, causal.
    check(Setting {
        pre: true,
        rms: false,
        biased: true,
        gated: false,
        scaled: true,
        causal: true,
        rotary: false,
        relative: false,
        heads: 4,
        kv_heads: 4,
        window: None,
        decoder: false,
    });
    // NomicBERT: post-norm, no linear biases, rotary, SwiGLU.
    check(Setting {
        pre: false,
        rms: false,
        biased: false,
        gated: true,
        scaled: true,
        causal: false,
        rotary: true,
        relative: false,
        heads: 4,
        kv_heads: 4,
        window: None,
        decoder: false,
    });
}

#[test]
fn grouped_query_heads_match_plain_loops() {
    check(GROUPED);
    check(Setting {
        pre: false,
        rms: false,
        biased: true,
        gated: false,
        scaled: true,
        causal: false,
        rotary: false,
        relative: true,
        heads: 4,
        kv_heads: 1,
        window: None,
        decoder: false,
    });
}

#[test]
fn sliding_window_layers_match_plain_loops() {
    // ModernBERT: pre-norm LayerNorm without bias, gated, rotary, a window in layer 1.
    for window in [0, 2, 20] {
        check(Setting {
            pre: true,
            rms: false,
            biased: false,
            gated: true,
            scaled: true,
            causal: false,
            rotary: true,
            relative: false,
            heads: 4,
            kv_heads: 4,
            window: Some(window),
            decoder: false,
        });
    }
}

#[test]
fn decoder_layers_match_plain_loops() {
    // Qwen3 (causal, q/k norms) and Gemma 3 (q/k norms, norms after each block, sliding
    // layers, bidirectional or causal), with grouped-query heads.
    for (causal, window) in [(true, None), (false, Some(2)), (true, Some(3))] {
        check(Setting {
            pre: true,
            rms: true,
            biased: false,
            gated: true,
            scaled: true,
            causal,
            rotary: true,
            relative: false,
            heads: 4,
            kv_heads: 2,
            window,
            decoder: true,
        });
    }
}

#[test]
fn long_sequences_attend_in_blocks_of_query_rows_and_match_plain_loops() {
    // Beyond 512 tokens a head's queries run in blocks, each scoring only the keys its
    // rows see: plain, causal, sliding (both ways), relative bias, grouped heads.
    let lengths = [600, 3, 1100];
    let base = GROUPED;
    for (causal, window, relative) in
        [(false, None, false), (true, None, false), (true, Some(40), false), (false, Some(300), false), (false, None, true)]
    {
        let rotary = !relative;
        check_lengths(Setting { causal, window, relative, rotary, ..base }, &lengths);
    }
    // The tasks: beyond 512 tokens, blocks of query rows cover the sequence once per head;
    // whole heads up to 512 tokens, and when asked.
    let tasks = attention::attention_tasks(&[1100, 0, 512], 2, false);
    for head in 0..2 {
        let rows: Vec<_> = tasks.iter().filter(|t| t.offset == 0 && t.head == head).map(|t| t.rows.clone()).collect();
        assert_eq!(rows.first().unwrap().start, 0);
        assert!(rows.windows(2).all(|w| w[0].end == w[1].start) && rows.last().unwrap().end == 1100);
        assert!(rows.len() > 1 && rows.iter().all(|r| r.len() <= 512));
    }
    assert_eq!(tasks.iter().filter(|t| t.offset == 1100).count(), 2, "512 tokens: one block per head");
    assert_eq!(attention::attention_tasks(&[1100], 3, true).len(), 3);
}

#[test]
fn a_stopped_pool_skips_the_work_of_a_long_forward_pass() {
    // With its pool's stop flag set (a cancel), a forward pass skips every product block and
    // attention task and the call ends as cancelled; cleared, the same input computes.
    let s = GROUPED;
    let raws: Vec<Raw> = (0..LAYERS).map(|l| raw(&s, 10 + 100 * l as u64)).collect();
    let lengths = [1100];
    let x = noise(1100 * HIDDEN, 7, 1.0);
    let want = reference(&s, &raws, &x, &lengths);
    for packed in [false, true].into_iter().filter(|&p| !p || crate::kernels::float32::available()) {
        let st = stack(&s, &raws, packed);
        let stop = crate::threads::stop_flag(2).unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut stopped = x.clone();
        let result = crate::threads::run(2, || st.try_forward(&mut stopped, &lengths));
        stop.store(false, std::sync::atomic::Ordering::Relaxed);
        assert!(matches!(result, Err(crate::error::Error::Cancelled)), "packed {packed}");
        let worst = stopped.iter().zip(&want).map(|(g, w)| (g - w).abs()).fold(0f32, f32::max);
        assert!(worst > 1e-2, "packed {packed}: a stopped pass computed the layers anyway");
        let mut done = x.clone();
        crate::threads::run(2, || st.try_forward(&mut done, &lengths)).unwrap().unwrap();
        let worst = done.iter().zip(&want).map(|(g, w)| (g - w).abs()).fold(0f32, f32::max);
        assert!(worst < 2e-4, "packed {packed}: {worst}");
    }
}

#[test]
fn sizes_that_do_not_fit_are_errors() {
    let s = Setting {
        pre: false,
        rms: false,
        biased: true,
        gated: false,
        scaled: true,
        causal: false,
        rotary: false,
        relative: false,
        heads: 4,
        kv_heads: 4,
        window: None,
        decoder: false,
    };
    let raws = vec![raw(&s, 1)];
    let st = stack(&s, &raws, false);
    assert!(st.try_forward(&mut vec![0.0; 10], &[1]).is_err());
    assert!(lengths_of(&[0, 3, 2], 2).is_err());
    assert!(lengths_of(&[1, 3], 3).is_err());
    assert_eq!(lengths_of(&[0, 3, 3, 5], 5).unwrap(), vec![3, 0, 2]);
    let mut spec = StackSpec::post_norm(HIDDEN, 4, Activation::Gelu);
    spec.kv_heads = 3;
    assert!(Stack::new(Vec::new(), spec).is_err());
}

/// A per-call score term sees each sequence's offset in the whole batch, whether the batch
/// runs on one thread, as one team, or split into groups of sequences per thread.
#[test]
fn score_terms_see_offsets_in_the_batch() {
    use std::sync::Mutex;
    struct Seen(Mutex<Vec<(usize, usize)>>);
    impl super::ScoreTerm for Seen {
        fn add(
            &self,
            layer: usize,
            head: usize,
            offset: usize,
            _: &[f32],
            _: &[f32],
            _: usize,
            len: usize,
            _: &mut [f32],
        ) {
            if layer == 0 && head == 0 {
                self.0.lock().unwrap().push((offset, len));
            }
        }
    }
    let s = Setting {
        pre: false,
        rms: false,
        biased: true,
        gated: false,
        scaled: true,
        causal: false,
        rotary: false,
        relative: false,
        heads: 4,
        kv_heads: 4,
        window: None,
        decoder: false,
    };
    let raws = vec![raw(&s, 1)];
    let st = stack(&s, &raws, false);
    let lengths = [5, 1, 9, 3, 7, 2, 4, 6];
    let mut want = Vec::new();
    let mut at = 0;
    for &len in &lengths {
        want.push((at, len));
        at += len;
    }
    for threads in [1, 2, 3] {
        let seen = Seen(Mutex::new(Vec::new()));
        let mut x = noise(at * HIDDEN, 7, 1.0);
        crate::threads::run(threads, || st.forward_with(&mut x, &lengths, None, Some(&seen))).unwrap();
        let mut got = seen.0.into_inner().unwrap();
        got.sort();
        assert_eq!(got, want, "on {threads} threads");
    }
}

#[test]
fn rotary_rows_given_per_token_match_the_stacks_own_rotary() {
    // The stack's own rotary positions (row i for token i of a sequence) given as a caller's
    // table and rows: the same values bit for bit, on one thread, several, and a team; rows
    // of cos 1 and sin 0 leave tokens as a stack without rotary positions does.
    let lengths = [5, 1, 9, 3, 7, 2];
    let tokens: usize = lengths.iter().sum();
    let raws: Vec<Raw> = (0..LAYERS).map(|l| raw(&GROUPED, 10 + 100 * l as u64)).collect();
    let plain = Setting { rotary: false, ..GROUPED };
    let x = noise(tokens * HIDDEN, 7, 1.0);
    let longest = *lengths.iter().max().unwrap();
    let (cos, sin) = Rotary::new(HEAD_DIM, 100.0).table(longest);
    let rows: Vec<u32> = lengths.iter().flat_map(|&l| 0..l as u32).collect();
    let half = HEAD_DIM / 2;
    let (identity_cos, identity_sin) = (vec![1.0; half], vec![0.0; half]);
    let layouts: &[bool] = if float32::available() { &[false, true] } else { &[false] };
    for &packed in layouts {
        let (own, given) = (stack(&GROUPED, &raws, packed), stack(&plain, &raws, packed));
        for threads in [1, 2, 3] {
            let mut want = x.clone();
            crate::threads::run(threads, || own.try_forward(&mut want, &lengths)).unwrap().unwrap();
            let mut got = x.clone();
            crate::threads::run(threads, || given.try_forward_rotated(&mut got, &lengths, &cos, &sin, &rows))
                .unwrap()
                .unwrap();
            assert_eq!(got, want, "packed {packed}, {threads} threads");
            let mut unrotated = x.clone();
            crate::threads::run(threads, || given.try_forward(&mut unrotated, &lengths)).unwrap().unwrap();
            let mut identity = x.clone();
            let zeros = vec![0u32; tokens];
            crate::threads::run(threads, || {
                given.try_forward_rotated(&mut identity, &lengths, &identity_cos, &identity_sin, &zeros)
            })
            .unwrap()
            .unwrap();
            assert_eq!(identity, unrotated, "packed {packed}, {threads} threads: identity rows");
        }
        let mut short = x.clone();
        assert!(given.try_forward_rotated(&mut short, &lengths, &cos, &sin, &rows[1..]).is_err());
        let beyond: Vec<u32> = rows.iter().map(|_| longest as u32).collect();
        assert!(given.try_forward_rotated(&mut short, &lengths, &cos, &sin, &beyond).is_err());
    }
}
