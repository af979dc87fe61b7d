//! System (c) of the throughput bench: pg_embed's pipeline called directly from Rust (no
//! SQL), on the bench corpus, and the machine's FMA peak measured in the same run. Prints
//! JSON lines (one per system, as bench/baselines.py does); asserts nothing.
//!
//!   cargo run --release --example bench_pipeline -- MODEL_DIR CORPUS THREADS [MAX_BATCH_TOKENS]

use std::path::Path;
use std::time::Instant;

use pg_embed_core::options::Options;
use pg_embed_core::pipeline::Pipeline;

#[path = "peak.rs"]
mod peak;
use peak::fma_peak;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((p * (sorted.len() - 1) as f64).round() as usize).min(sorted.len() - 1)]
}

/// Useful floating-point operations of one forward pass over `lengths` (BERT-shaped
/// backbone): 2 x non-embedding parameters x tokens, plus QK^T and PV per layer.
fn useful_flops(config: &serde_json::Value, lengths: &[usize]) -> f64 {
    let get = |k: &str| config[k].as_f64().unwrap_or(0.0);
    let (h, layers, inner) = (get("hidden_size"), get("num_hidden_layers"), get("intermediate_size"));
    let per_layer = 4.0 * h * h + 4.0 * h + 2.0 * h * inner + inner + h + 4.0 * h;
    let tokens: f64 = lengths.iter().map(|&l| l as f64).sum();
    let attention: f64 = lengths.iter().map(|&l| 4.0 * (l * l) as f64 * h).sum::<f64>() * layers;
    2.0 * per_layer * layers * tokens + attention
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        return Err("usage: bench_pipeline MODEL_DIR CORPUS THREADS [MAX_BATCH_TOKENS]".into());
    }
    let (dir, corpus, threads) = (Path::new(&args[1]), &args[2], args[3].parse::<usize>()?);
    let max_batch_tokens: usize = args.get(4).map_or(Ok(4096), |s| s.parse())?;
    let texts: Vec<String> =
        std::fs::read_to_string(corpus)?.lines().filter(|l| !l.trim().is_empty()).map(String::from).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let config: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("config.json"))?)?;

    let peak = fma_peak(threads);

    let t0 = Instant::now();
    let pipeline = Pipeline::load(dir, &Options::default())?;
    let load_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let lengths: Vec<usize> =
        refs.iter().map(|t| pipeline.tokenize(t).map(|ids| ids.len())).collect::<Result<_, _>>()?;
    let flops = useful_flops(&config, &lengths);

    let one = |t: &str| pipeline.embed_batched(&[t], max_batch_tokens, threads, || Ok(()));
    one("warm up")?;
    let mut lat = Vec::new();
    for t in refs.iter().take(200) {
        let t0 = Instant::now();
        one(t)?;
        lat.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    lat.sort_by(f64::total_cmp);

    pipeline.embed_batched(&refs[..64.min(refs.len())], max_batch_tokens, threads, || Ok(()))?;
    let t0 = Instant::now();
    let out = pipeline.embed_batched(&refs, max_batch_tokens, threads, || Ok(()))?;
    let secs = t0.elapsed().as_secs_f64();
    std::hint::black_box(out);

    let result = serde_json::json!({
        "system": "pg_embed pipeline from Rust",
        "sentences_per_s": refs.len() as f64 / secs,
        "single_p50_ms": percentile(&lat, 0.5),
        "single_p99_ms": percentile(&lat, 0.99),
        "load_ms": load_ms,
        "max_batch_tokens": max_batch_tokens,
        "threads": threads,
        "sentences": refs.len(),
    });
    println!("{result}");
    let machine = serde_json::json!({
        "system": "machine",
        "fma_peak_gflops": peak,
        "fma_peak_vector": if cfg!(target_arch = "x86_64") && std::is_x86_feature_detected!("avx512f") { "AVX-512" } else { "AVX2" },
        "threads": threads,
        "corpus_tokens": lengths.iter().sum::<usize>(),
        "corpus_useful_gflop": flops / 1e9,
    });
    println!("{machine}");
    Ok(())
}
