//! The rerank bench's pg_embed side (bench/rerank.sh): a causal-LM reranker's scores of the
//! pairs in `DIR/pairs.json`, through the pipeline called from Rust, on THREADS threads in
//! batches of at most MAX_BATCH_TOKENS tokens. Prints one JSON line: pairs/s over REPEATS runs
//! (the best), the load time and the scores of the last run (raw LogitScore values).
//! BENCH_OPTIONS (env) holds the model's options as JSON, e.g. '{"precision": "bfloat16"}'.
//!
//!   cargo run --release -p pg_embed_core --example bench_rerank -- DIR THREADS [MAX_BATCH_TOKENS] [REPEATS]

use std::path::Path;
use std::time::Instant;

use pg_embed_core::options::Options;
use pg_embed_core::pipeline::Pipeline;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        return Err("usage: bench_rerank DIR THREADS [MAX_BATCH_TOKENS] [REPEATS]".into());
    }
    let (dir, threads) = (Path::new(&args[1]), args[2].parse::<usize>()?);
    let max_batch_tokens: usize = args.get(3).map_or(Ok(8192), |s| s.parse())?;
    let repeats: usize = args.get(4).map_or(Ok(2), |s| s.parse())?;
    let options = match std::env::var("BENCH_OPTIONS") {
        Ok(json) => Options::from_json(&serde_json::from_str(&json)?)?,
        Err(_) => Options::default(),
    };
    let pairs: Vec<(String, String)> = serde_json::from_slice(&std::fs::read(dir.join("pairs.json"))?)?;
    let inputs: Vec<(&str, Option<&str>)> = pairs.iter().map(|(q, d)| (q.as_str(), Some(d.as_str()))).collect();
    let t0 = Instant::now();
    let pipeline = Pipeline::load(dir, &options)?;
    let load_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let tokens: usize = pairs.iter().map(|(q, d)| pipeline.tokenize_scored_pair(q, d).map(|t| t.len())).sum::<Result<_, _>>()?;
    let (mut best, mut scores) = (f64::INFINITY, Vec::new());
    for _ in 0..repeats {
        let t = Instant::now();
        scores = pipeline.classify_batched(&inputs, max_batch_tokens, threads, || Ok(()))?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    let scores: Vec<f32> = scores.into_iter().map(|s| s[0]).collect();
    println!(
        "{}",
        serde_json::json!({"system": "pg_embed pipeline (Rust)", "options": std::env::var("BENCH_OPTIONS").ok(),
            "kernel": pipeline.kernel(), "pairs": pairs.len(), "tokens": tokens, "threads": threads,
            "max_batch_tokens": max_batch_tokens, "pairs_per_s": pairs.len() as f64 / best, "load_ms": load_ms,
            "scores": scores})
    );
    Ok(())
}
