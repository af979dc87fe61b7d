//! MaxSim (late interaction, `embed.maxsim`) on one core: a query of 32 rows against 100
//! documents of 180 rows at dim 128 (ColBERT's shapes), by this CPU's kernel, by the portable
//! kernel and by a naive float32 loop (a row pair at a time), each timed over the 100
//! documents in the same run. Prints the CPU, then one line per way; asserts nothing.
//!
//!   cargo run --release -p pg_embed_core --example bench_maxsim -- [QUERY_ROWS DOC_ROWS DIM DOCS]

use std::time::Instant;

use pg_embed_core::maxsim::{kernel, maxsim_with, reference, Kernel};

fn random(n: usize, seed: u64) -> Vec<f32> {
    pg_embed_core::maxsim::seeded(n, seed)
}

/// The naive loop: float32 dot products, a query row and a document row at a time.
fn naive(q: &[f32], m: usize, d: &[f32], n: usize, dim: usize) -> f32 {
    let mut total = 0f32;
    for i in 0..m {
        let mut best = f32::NEG_INFINITY;
        for j in 0..n {
            let mut dot = 0f32;
            for k in 0..dim {
                dot += q[i * dim + k] * d[j * dim + k];
            }
            best = best.max(dot);
        }
        total += best;
    }
    total
}

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let arg = |i: usize, default: usize| args.get(i).copied().unwrap_or(default);
    let (m, n, dim, docs) = (arg(0, 32), arg(1, 180), arg(2, 128), arg(3, 100));
    println!("CPU: {}", pg_embed_core::cpu::describe());
    println!("maxsim kernel: {}", kernel().name());
    println!("query {m}x{dim} against {docs} documents of {n}x{dim}, one thread");
    let query = random(m * dim, 1);
    let documents: Vec<Vec<f32>> = (0..docs).map(|i| random(n * dim, 100 + i as u64)).collect();
    let want: Vec<f64> = documents.iter().map(|d| reference(&query, m, d, n, dim)).collect();

    let time = |f: &dyn Fn(&[f32]) -> f32| {
        // Best of 5 passes over the documents (the first warms the caches and the scratch).
        let mut best = f64::INFINITY;
        let mut worst_err = 0f64;
        for _ in 0..5 {
            let t0 = Instant::now();
            let scores: Vec<f32> = documents.iter().map(|d| f(d)).collect();
            best = best.min(t0.elapsed().as_secs_f64() * 1e3);
            for (s, w) in scores.iter().zip(&want) {
                worst_err = worst_err.max((*s as f64 - w).abs() / w.abs().max(1e-12));
            }
        }
        (best, worst_err)
    };
    let gmacs = |ms: f64| (m * n * dim * docs) as f64 / ms / 1e6;
    let mut rows = vec![];
    for k in [Kernel::Avx512, Kernel::Portable] {
        if k.available() {
            let (ms, err) = time(&|d| maxsim_with(k, &query, m, d, n, dim, &|| false).unwrap_or(f32::NAN));
            rows.push((format!("maxsim ({})", k.name()), ms, err));
        }
    }
    let (ms, err) = time(&|d| naive(&query, m, d, n, dim));
    rows.push(("naive float32 loop".into(), ms, err));
    println!("{:<24} {:>10} {:>10} {:>14}", "", "ms total", "GMAC/s", "max rel. err");
    for (name, ms, err) in rows {
        println!("{name:<24} {ms:>10.3} {:>10.2} {err:>14.2e}", gmacs(ms));
    }
}
