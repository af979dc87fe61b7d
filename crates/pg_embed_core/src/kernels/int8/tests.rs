//! The int8 products against a plain implementation of the method written from its
//! description (not from the kernels), and every kernel this CPU can run against
//! `portable-int8` bit for bit.

use super::*;

fn random(n: usize, seed: &mut u64, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| {
            *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((*seed >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// The method as the module's documentation states it, one output at a time.
fn reference(x: &[f32], w: &[f32], bias: Option<&[f32]>, residual: Option<&[f32]>, rows: usize, k: usize, n: usize) -> Vec<f32> {
    let q = |v: &[f32]| -> (Vec<i32>, f32) {
        let amax = v.iter().fold(0f32, |m, x| m.max(x.abs()));
        let s = amax / 127.0;
        let q = v.iter().map(|x| if s == 0.0 { 0 } else { (x / s).round_ties_even().clamp(-127.0, 127.0) as i32 }).collect();
        (q, s)
    };
    let mut out = vec![0f32; rows * n];
    for r in 0..rows {
        for o in 0..n {
            let mut acc = 0f32;
            for g0 in (0..k).step_by(GROUP) {
                let g1 = (g0 + GROUP).min(k);
                let (qx, sa) = q(&x[r * k + g0..r * k + g1]);
                let (qw, sw) = q(&w[o * k + g0..o * k + g1]);
                let sum: i32 = qx.iter().zip(&qw).map(|(a, b)| a * b).sum();
                acc += sum as f32 * (sw * sa);
            }
            let mut v = acc;
            if let Some(b) = bias {
                v += b[o];
            }
            if let Some(res) = residual {
                v += res[r * n + o];
            }
            out[r * n + o] = v;
        }
    }
    out
}

fn run(weight: &Int8Weight, kernel: Kernel, x: &[f32], bias: Option<&[f32]>, residual: Option<&[f32]>, rows: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; rows * weight.outputs];
    // SAFETY: out is [rows, outputs]; one thread writes every panel.
    unsafe { weight.product_with(kernel, x, bias, residual, None, out.as_mut_ptr(), rows, 0..weight.panel_count()) };
    out
}

const SHAPES: [(usize, usize, usize); 7] = [(1, 32, 32), (3, 7, 5), (13, 75, 45), (50, 384, 96), (7, 1536, 33), (64, 100, 64), (97, 65, 130)];

#[test]
fn portable_int8_computes_the_method_exactly() {
    let mut seed = 1;
    for (rows, k, n) in SHAPES {
        let w = random(n * k, &mut seed, 0.2);
        let mut x = random(rows * k, &mut seed, 3.0);
        // A zero group and one large outlier: scales of 0 and of a lone value.
        x[..k.min(GROUP)].iter_mut().for_each(|v| *v = 0.0);
        x[rows * k - 1] = 40.0;
        let bias = random(n, &mut seed, 1.0);
        let res = random(rows * n, &mut seed, 1.0);
        let weight = Int8Weight::pack(&w, n, k);
        for (b, r) in [(None, None), (Some(&bias[..]), None), (Some(&bias[..]), Some(&res[..])), (None, Some(&res[..]))] {
            let got = run(&weight, Kernel::Portable, &x, b, r, rows);
            let want = reference(&x, &w, b, r, rows, k, n);
            assert_eq!(got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), "{rows}x{k}x{n}");
        }
    }
}

#[test]
fn every_usable_kernel_is_portables_bit_for_bit() {
    let mut seed = 7;
    let mut tested = Vec::new();
    for kernel in Kernel::ALL {
        if let Err(why) = kernel.usable() {
            eprintln!("{}: not tested on this CPU: {why}", kernel.name());
            continue;
        }
        tested.push(kernel.name());
        assert_eq!(self_check(kernel), Ok(()));
        for (rows, k, n) in SHAPES {
            let w = random(n * k, &mut seed, 0.5);
            let x = random(rows * k, &mut seed, 2.0);
            let bias = random(n, &mut seed, 1.0);
            let res = random(rows * n, &mut seed, 1.0);
            let weight = Int8Weight::pack(&w, n, k);
            let got = run(&weight, kernel, &x, Some(&bias), Some(&res), rows);
            let want = run(&weight, Kernel::Portable, &x, Some(&bias), Some(&res), rows);
            assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "{} {rows}x{k}x{n}", kernel.name());
        }
    }
    eprintln!("int8 kernels tested: {tested:?}; dispatched: {}", dispatch().describe());
}

#[test]
fn unpack_gives_the_quantized_weights_within_half_a_step() {
    let mut seed = 3;
    let (n, k) = (70, 100);
    let w = random(n * k, &mut seed, 0.3);
    let weight = Int8Weight::pack(&w, n, k);
    let back = weight.unpack();
    for o in 0..n {
        for g0 in (0..k).step_by(GROUP) {
            let part = &w[o * k + g0..o * k + (g0 + GROUP).min(k)];
            let step = part.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
            for (i, v) in part.iter().enumerate() {
                let d = (back[o * k + g0 + i] - v).abs();
                assert!(d <= step * 0.5 * 1.0001, "output {o} input {}: {v} -> {}", g0 + i, back[o * k + g0 + i]);
            }
        }
    }
}

#[test]
fn a_product_on_several_threads_is_the_one_on_one() {
    let mut seed = 11;
    let (rows, k, n) = (70, 96, 200);
    let w = random(n * k, &mut seed, 0.5);
    let x = random(rows * k, &mut seed, 2.0);
    let weight = Int8Weight::pack(&w, n, k);
    let one = run(&weight, kernel(), &x, None, None, rows);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
    let mut many = vec![0f32; rows * n];
    pool.install(|| weight.product(&x, None, None, None, &mut many, 3));
    assert_eq!(one, many);
    // And close to the float32 product: int8 in groups of 32 is within 2 % of its scale.
    let exact: Vec<f32> = (0..rows * n).map(|i| (0..k).map(|j| x[i / n * k + j] * w[i % n * k + j]).sum()).collect();
    let scale = exact.iter().fold(0f32, |m, v| m.max(v.abs()));
    let worst = one.iter().zip(&exact).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(worst < 0.02 * scale, "{worst} against {scale}");
}
