use super::*;

#[test]
fn round_is_nearest_even_and_flushes_denormals() {
    assert_eq!(round(1.0), 0x3f80);
    // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0).
    assert_eq!(round(1.0 + 1.0 / 256.0), 0x3f80);
    // 1 + 3 * 2^-8: halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up to even.
    assert_eq!(round(1.0 + 3.0 / 256.0), 0x3f82);
    assert_eq!(round(1.0 + 1.0 / 256.0 + 1.0 / 65536.0), 0x3f81);
    assert_eq!(round(-2.5), 0xc020);
    assert_eq!(round(f32::INFINITY), 0x7f80);
    assert_eq!(round(f32::MAX), 0x7f80, "rounds up to infinity, as torch does");
    assert_eq!(round(f32::from_bits(0x0000_0001)), 0);
    assert_eq!(round(-f32::from_bits(0x007f_ffff)), 0x8000);
    assert!(widen(round(f32::NAN)).is_nan());
    for x in [0.1f32, -3.7, 1e-30, 65504.0, 3.0e38] {
        let r = widen(round(x));
        assert!((r - x).abs() <= x.abs() / 256.0, "{x} -> {r}");
    }
}

#[test]
fn hardware_rounding_equals_round() {
    if !usable_or_say(Kernel::Avx512Bf16) {
        return;
    }
    let mut x: Vec<f32> = random(4096, 3, 100.0);
    // Ties, denormals, infinities, NaN, the largest finite value.
    x.extend([1.0 + 1.0 / 256.0, 1.0 + 3.0 / 256.0, f32::from_bits(1), -f32::from_bits(0x007f_ffff)]);
    x.extend([f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::MAX, -0.0, 0.0, 3.0e38, 1e-38]);
    x.extend((0..20).map(|i| f32::from_bits(0x3f80_8000 + (i << 16))));
    // A row with a tail after the 32-wide steps, and rows of whole steps only.
    for (x, k) in [(&x[..], x.len()), (&x[..4096], 64), (&x[..4096], 4096)] {
        let pairs = k.div_ceil(32) * 16;
        let rows = x.len() / k;
        let (mut soft, mut hard) = (vec![0u32; rows * pairs], vec![0u32; rows * pairs]);
        round_rows(x, k, pairs, &mut soft);
        // SAFETY: AVX512-BF16 (checked); sizes as round_rows needs.
        unsafe { avx512::round_rows(x, k, pairs, &mut hard) };
        assert_eq!(soft, hard, "rows of {k}");
        // The tile-major order, 16 rows padded with zeros.
        let padded = rows.next_multiple_of(16);
        let (mut soft, mut hard) = (vec![0u32; padded * pairs], vec![0u32; padded * pairs]);
        round_tiles(x, k, pairs, &mut soft);
        // SAFETY: AVX512-BF16 (checked); sizes as round_tiles needs.
        unsafe { avx512::round_tiles(x, k, pairs, &mut hard) };
        assert_eq!(soft, hard, "tiles of rows of {k}");
    }
}

#[test]
fn tile_order_holds_each_tile_contiguously() {
    // 20 rows of 70 inputs: pairs padded to 48 (three tiles deep), rows to 32 (two high).
    let (rows, k, pairs) = (20, 70, 48);
    let x: Vec<f32> = (0..rows * k).map(|i| i as f32).collect();
    let mut plain = vec![0u32; rows * pairs];
    round_rows(&x, k, pairs, &mut plain);
    // Rows beyond the input are left as they were (the product zeroes them first).
    let mut tiles = vec![u32::MAX; 32 * pairs];
    round_tiles(&x, k, pairs, &mut tiles);
    for r in 0..32 {
        for p in 0..pairs {
            // Tile (r / 16, p / 16) is the kilobyte at ((r / 16) * 3 + p / 16) * 256 dwords.
            let at = ((r / 16) * 3 + p / 16) * 256 + (r % 16) * 16 + p % 16;
            assert_eq!(tile_index(r, pairs, p), at, "row {r}, pair {p}");
            let want = if r < rows { plain[r * pairs + p] } else { u32::MAX };
            assert_eq!(tiles[at], want, "row {r}, pair {p}");
        }
    }
}

fn usable_or_say(kernel: Kernel) -> bool {
    match kernel.usable() {
        Ok(()) => true,
        Err(why) => {
            eprintln!("{} kernel not tested here: {why}", kernel.name());
            false
        }
    }
}

/// Everything the product computes, with `kernel`, on `threads` threads.
#[allow(clippy::too_many_arguments)]
fn run(kernel: Kernel, w: &Bf16Weight, x: &[f32], bias: &[f32], residual: &[f32], threads: usize) -> Vec<f32> {
    let rows = x.len() / w.inputs;
    let mut out = vec![f32::NAN; rows * w.outputs];
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
    let then = |v: &mut [f32]| v.iter_mut().for_each(|v| *v *= 2.0);
    pool.install(|| {
        crate::kernels::float32::split_panels(&mut out, w.panel_count(), threads, |out, part| unsafe {
            w.product_with(kernel, x, Some(bias), Some(residual), Some(&then), out, rows, part)
        })
    });
    out
}

/// Values whose products and sums are exact in float32 (small multiples of powers of
/// two, also exact in bfloat16): every order of addition gives the same bits.
fn exact_case(rows: usize, outputs: usize, inputs: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
    let w = (0..outputs * inputs).map(|i| ((i * 7 % 13) as f32 - 6.0) * 0.125).collect();
    let x = (0..rows * inputs).map(|i| ((i * 5 % 11) as f32 - 5.0) * 0.25).collect();
    let bias = (0..outputs).map(|o| (o % 5) as f32 * 0.5).collect();
    let residual = (0..rows * outputs).map(|i| (i % 3) as f32).collect();
    (w, x, bias, residual)
}

fn random(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * scale
        })
        .collect()
}

/// (The last: 1.6 MB of weights, above `AMX_SHORT_WEIGHTS`, so `amx-bf16` runs it in tall
/// blocks on one thread and in short ones on two, where each has half the panels.)
const SHAPES: &[(usize, usize, usize)] = &[
    (1, 70, 19),
    (5, 32, 32),
    (12, 64, 64),
    (13, 33, 48),
    (37, 384, 384),
    (50, 96, 100),
    (97, 40, 1536),
    (261, 1024, 800),
];

#[test]
fn every_kernel_equals_plain_loops_bit_for_bit_on_exact_sums() {
    for kernel in Kernel::ALL.into_iter().filter(|k| usable_or_say(*k)) {
        for &(rows, outputs, inputs) in SHAPES {
            let (w, x, bias, residual) = exact_case(rows, outputs, inputs);
            let packed = Bf16Weight::pack(&w, outputs, inputs);
            assert_eq!(packed.unpack(), w, "pack then unpack (values exact in bfloat16)");
            for threads in [1, 2] {
                let out = run(kernel, &packed, &x, &bias, &residual, threads);
                for r in 0..rows {
                    for o in 0..outputs {
                        let dot: f32 = (0..inputs).map(|i| x[r * inputs + i] * w[o * inputs + i]).sum();
                        let want = ((dot + bias[o]) + residual[r * outputs + o]) * 2.0;
                        assert_eq!(out[r * outputs + o], want, "{kernel:?} {rows}x{outputs}x{inputs}: [{r}, {o}]");
                    }
                }
            }
        }
    }
}

/// The portable kernel's order, written out plainly: the reference for random values.
fn reference(w: &[f32], x: &[f32], rows: usize, outputs: usize, inputs: usize, amx_order: bool) -> Vec<f32> {
    let rw: Vec<f32> = w.iter().map(|v| widen(round(*v))).collect();
    let rx: Vec<f32> = x.iter().map(|v| widen(round(*v))).collect();
    let mut out = vec![0f32; rows * outputs];
    for r in 0..rows {
        for o in 0..outputs {
            let mut s = 0f32;
            for p in 0..inputs.div_ceil(2) {
                let even = rx[r * inputs + 2 * p] * rw[o * inputs + 2 * p];
                let odd = if 2 * p + 1 < inputs { rx[r * inputs + 2 * p + 1] * rw[o * inputs + 2 * p + 1] } else { 0.0 };
                if amx_order {
                    s += even;
                    s += odd;
                } else {
                    s += odd;
                    s += even;
                }
            }
            out[r * outputs + o] = s;
        }
    }
    out
}

#[test]
fn vector_kernels_equal_the_reference_order_bit_for_bit_and_amx_within_summation_order() {
    for &(rows, outputs, inputs) in SHAPES {
        let w = random(outputs * inputs, 1, 2.0);
        let x = random(rows * inputs, 2, 6.0);
        let (bias, residual) = (vec![0.0; outputs], vec![0.0; rows * outputs]);
        let packed = Bf16Weight::pack(&w, outputs, inputs);
        let want = reference(&w, &x, rows, outputs, inputs, false);
        let doubled: Vec<f32> = want.iter().map(|v| v * 2.0).collect();
        assert_eq!(run(Kernel::Portable, &packed, &x, &bias, &residual, 2), doubled, "portable {rows}x{outputs}x{inputs}");
        if usable_or_say(Kernel::Avx512Bf16) {
            assert_eq!(run(Kernel::Avx512Bf16, &packed, &x, &bias, &residual, 2), doubled, "avx512-bf16");
        }
        if usable_or_say(Kernel::Amx) {
            // Intel documents the even product first: that order bit for bit where the
            // hardware follows it, and within float32 summation error of it in any case
            // (two orders of n additions differ by at most 2 n u the sum of |terms|).
            let amx = run(Kernel::Amx, &packed, &x, &bias, &residual, 2);
            let amx_order = reference(&w, &x, rows, outputs, inputs, true);
            let magnitude = reference(
                &w.iter().map(|v| v.abs()).collect::<Vec<_>>(),
                &x.iter().map(|v| v.abs()).collect::<Vec<_>>(),
                rows,
                outputs,
                inputs,
                true,
            );
            let mut same = 0;
            for (i, ((a, b), m)) in amx.iter().zip(&amx_order).zip(&magnitude).enumerate() {
                let bound = 2.0 * (2 * inputs) as f32 * f32::EPSILON / 2.0 * m * 1.01;
                assert!((a - 2.0 * b).abs() <= 2.0 * bound, "amx [{i}]: {a} vs {}", 2.0 * b);
                same += usize::from(*a == 2.0 * b);
            }
            eprintln!("amx-bf16 equals Intel's documented order in {same} of {} outputs", amx.len());
        }
    }
}

#[test]
fn dispatch_picks_the_fastest_usable_kernel() {
    let d = dispatch();
    let best = Kernel::ALL.into_iter().find(|k| k.usable().is_ok()).unwrap();
    if std::env::var("PG_EMBED_BF16_KERNEL").is_err() {
        assert_eq!(d.kernel, best, "{d:?} on {:?}", cpu());
    }
    assert_eq!(Kernel::Portable.usable(), Ok(()));
    assert_eq!(Kernel::Avx512Bf16.usable().is_ok(), cpu().avx512_bf16);
    assert_eq!(Kernel::from_name("amx-bf16"), Some(Kernel::Amx));
    assert_eq!(Kernel::from_name("fp8"), None);
}

/// Layers side by side (Q, K and V; gate and up) pack as their concatenation does, in
/// both precisions, whatever the parts' row counts (panels that span two parts).
#[test]
fn stacked_parts_pack_as_their_concatenation() {
    let inputs = 40;
    let parts: Vec<Vec<f32>> = [45usize, 32, 19]
        .iter()
        .enumerate()
        .map(|(k, &rows)| (0..rows * inputs).map(|i| ((i * 7 + k) % 13) as f32 * 0.25 - 1.5).collect())
        .collect();
    let slices: Vec<&[f32]> = parts.iter().map(Vec::as_slice).collect();
    let whole = parts.concat();
    let outputs = whole.len() / inputs;
    let stacked = crate::kernels::float32::Stacked::new(&slices, inputs);
    assert_eq!(crate::kernels::float32::PackedWeight::pack_stacked(stacked, outputs).unpack(), whole);
    let bf16 = Bf16Weight::pack_stacked(stacked, outputs, inputs).unpack();
    assert_eq!(bf16, Bf16Weight::pack(&whole, outputs, inputs).unpack());
}

