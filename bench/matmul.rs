//! GFLOP/s of the linear layers' product for all-MiniLM-L6-v2's shapes: pg_embed's packed
//! AVX-512 float32 product, its bfloat16 and int8 products (this CPU's kernels) against the `gemm`
//! crate on torch's layout, single-sentence sized (37 rows, both threads on one product) and
//! batch sized (a 256-token chunk per thread, as a batch's groups run). Prints one line per
//! shape; asserts nothing.
//!
//!   cargo run --release --example bench_matmul -- [THREADS]

use std::time::Instant;

use pg_embed_core::kernels::bf16::{dispatch, Bf16Weight};
use pg_embed_core::kernels::float32::PackedWeight;
use pg_embed_core::kernels::int8::{self, Int8Weight};

fn main() {
    let threads: usize = std::env::args().nth(1).and_then(|t| t.parse().ok()).unwrap_or(2);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
    println!("bfloat16 kernel: {}; int8 kernel: {}", dispatch().describe(), int8::dispatch().describe());
    println!(
        "{:>5} {:>5} {:>5} {:>8} {:>12} {:>12} {:>12} {:>12}",
        "rows", "out", "in", "threads", "packed GF/s", "bf16 GF/s", "int8 GOP/s", "gemm GF/s"
    );
    for (rows, par) in [(37, threads), (256, 1)] {
        for (n, k) in [(1152, 384), (384, 384), (1536, 384), (384, 1536)] {
            let w: Vec<f32> = (0..n * k).map(|i| (i % 17) as f32 * 0.01).collect();
            let x: Vec<f32> = (0..rows * k).map(|i| (i % 13) as f32 * 0.01).collect();
            let mut out = vec![0f32; rows * n];
            let packed = PackedWeight::pack(&w, n, k);
            let bf16 = Bf16Weight::pack(&w, n, k);
            let int8 = Int8Weight::pack(&w, n, k);
            let flops = 2.0 * (rows * n * k) as f64;
            let reps = (2e10 / flops) as usize + 1;
            let time = |f: &mut (dyn FnMut() + Send)| {
                f();
                let t0 = Instant::now();
                for _ in 0..reps {
                    f();
                }
                flops * reps as f64 / t0.elapsed().as_secs_f64() / 1e9
            };
            let run = |f: &mut (dyn FnMut() + Send)| pool.install(|| time(f));
            let p = if pg_embed_core::kernels::float32::available() {
                run(&mut || packed.product(&x, None, None, None, &mut out, par))
            } else {
                f64::NAN
            };
            let b = run(&mut || bf16.product(&x, None, None, None, &mut out, par));
            let i = run(&mut || int8.product(&x, None, None, None, &mut out, par));
            let g = run(&mut || pg_embed_core::layers::torch_product(&x, &w, &mut out, n, k, par));
            println!("{rows:>5} {n:>5} {k:>5} {par:>8} {p:>12.1} {b:>12.1} {i:>12.1} {g:>12.1}");
        }
    }
}
