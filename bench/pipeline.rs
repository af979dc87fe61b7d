//! System (c) of the throughput bench (bench/run.sh) and pg_embed's side of the decoder bench
//! (bench/decoder.sh): pg_embed's pipeline called directly from Rust (no SQL), on the bench
//! corpus, and the machine's FMA peak measured in the same run. Prints JSON lines (one per
//! system, as bench/baselines.py does); asserts nothing.
//!
//!   cargo run --release --example bench_pipeline -- MODEL_DIR CORPUS THREADS \
//!       [MAX_BATCH_TOKENS] [SENTENCES] [SINGLES] [VECTORS]
//!
//! BENCH_OPTIONS (env) holds the model's options as JSON, e.g. '{"precision": "bfloat16"}'.
//! After the timed runs, the batch and the singles run once more with the stage timers on
//! (`pg_embed_core::stages`), and a "stages" line per run gives each stage's share of the
//! threads' time (wall time x threads); "rest" is what no stage holds (embedding lookup,
//! pooling, copies, waits between a team's steps, idle threads).
//! SENTENCES (default all) takes the corpus's first lines, SINGLES (default 200) the number of
//! single-sentence calls timed, VECTORS (default 0) how many of the batch's vectors to print
//! (for a cosine against another system's).

use std::path::Path;
use std::time::Instant;

use pg_embed_core::options::Options;
use pg_embed_core::pipeline::Pipeline;

#[path = "peak.rs"]
mod peak;
use peak::fma_peak;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((p * (sorted.len() - 1) as f64).round() as usize).min(sorted.len() - 1)]
}

/// `run` with the stage timers on: its wall time, and each stage's share of `threads` x it.
fn stages(what: &str, threads: usize, run: impl FnOnce()) -> serde_json::Value {
    pg_embed_core::stages::start();
    let t0 = Instant::now();
    run();
    let wall = t0.elapsed().as_secs_f64();
    let times = pg_embed_core::stages::stop();
    let total = wall * threads as f64;
    let mut shares = serde_json::Map::new();
    for (stage, secs) in &times {
        shares.insert(stage.name().into(), serde_json::json!(secs / total));
    }
    let held: f64 = times.iter().map(|(_, s)| s).sum();
    shares.insert("rest".into(), serde_json::json!(1.0 - held / total));
    serde_json::json!({"system": "stages", "run": what, "wall_s": wall, "threads": threads, "shares": shares})
}

/// Useful floating-point operations of one forward pass over `lengths`: 2 x the layers'
/// matrix parameters x tokens, plus QK^T and PV per layer (full attention, as both systems
/// compute it). Reads BERT-style and decoder configs: query and key/value heads of
/// `head_dim`, and a gated MLP (three matrices) for the decoder families.
fn useful_flops(config: &serde_json::Value, lengths: &[usize]) -> f64 {
    let get = |k: &str| config[k].as_f64();
    let h = get("hidden_size").unwrap_or(0.0);
    let (layers, inner) = (get("num_hidden_layers").unwrap_or(0.0), get("intermediate_size").unwrap_or(0.0));
    let heads = get("num_attention_heads").unwrap_or(1.0);
    let head_dim = get("head_dim").unwrap_or(h / heads);
    let kv_heads = get("num_key_value_heads").unwrap_or(heads);
    let gated = matches!(config["model_type"].as_str(), Some("qwen2" | "qwen3" | "gemma3_text"));
    let (q, kv) = (heads * head_dim, kv_heads * head_dim);
    let attention_params = h * q + 2.0 * h * kv + q * h;
    let mlp_params = if gated { 3.0 } else { 2.0 } * h * inner;
    let tokens: f64 = lengths.iter().map(|&l| l as f64).sum();
    let scores: f64 = lengths.iter().map(|&l| 4.0 * (l * l) as f64 * q).sum::<f64>() * layers;
    2.0 * (attention_params + mlp_params) * layers * tokens + scores
}

/// This process's resident memory (VmRSS), MB; 0 where /proc is not there.
fn rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        return Err("usage: bench_pipeline MODEL_DIR CORPUS THREADS [MAX_BATCH_TOKENS] [SENTENCES] [SINGLES] \
                    [VECTORS]"
            .into());
    }
    let (dir, corpus, threads) = (Path::new(&args[1]), &args[2], args[3].parse::<usize>()?);
    let max_batch_tokens: usize = args.get(4).map_or(Ok(4096), |s| s.parse())?;
    let sentences: usize = args.get(5).map_or(Ok(usize::MAX), |s| s.parse())?;
    let singles: usize = args.get(6).map_or(Ok(200), |s| s.parse())?;
    let vectors: usize = args.get(7).map_or(Ok(0), |s| s.parse())?;
    let texts: Vec<String> = std::fs::read_to_string(corpus)?
        .lines()
        .filter(|l| !l.trim().is_empty())
        .take(sentences)
        .map(String::from)
        .collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let config: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("config.json"))?)?;

    let peak = fma_peak(threads);

    let rss_before_load = rss_mb();
    let t0 = Instant::now();
    // BENCH_OPTIONS: the model's options as register_model takes them, e.g. '{"precision": "bfloat16"}'.
    let options = match std::env::var("BENCH_OPTIONS") {
        Ok(json) if !json.is_empty() => Options::from_json_str(&json)?,
        _ => Options::default(),
    };
    let pipeline = Pipeline::load(dir, &options)?;
    let load_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let rss_after_load = rss_mb();
    let lengths: Vec<usize> =
        refs.iter().map(|t| pipeline.tokenize(t).map(|ids| ids.len())).collect::<Result<_, _>>()?;
    let flops = useful_flops(&config, &lengths);

    let one = |t: &str| pipeline.embed_batched(&[t], max_batch_tokens, threads, || Ok(()));
    one("warm up")?;
    let mut lat = Vec::new();
    for t in refs.iter().take(singles) {
        let t0 = Instant::now();
        one(t)?;
        lat.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    lat.sort_by(f64::total_cmp);

    pipeline.embed_batched(&refs[..64.min(refs.len())], max_batch_tokens, threads, || Ok(()))?;
    let t0 = Instant::now();
    let out = pipeline.embed_batched(&refs, max_batch_tokens, threads, || Ok(()))?;
    let secs = t0.elapsed().as_secs_f64();
    let first: Vec<&Vec<f32>> = out.iter().take(vectors).collect();
    let batch_stages = stages("batch", threads, || {
        pipeline.embed_batched(&refs, max_batch_tokens, threads, || Ok(())).map(drop).unwrap_or(())
    });
    let single_stages = stages("singles", threads, || {
        for t in refs.iter().take(singles) {
            let _ = one(t);
        }
    });

    let result = serde_json::json!({
        "system": "pg_embed pipeline from Rust",
        "sentences_per_s": refs.len() as f64 / secs,
        "single_p50_ms": percentile(&lat, 0.5),
        "single_p99_ms": percentile(&lat, 0.99),
        "load_ms": load_ms,
        "rss_before_load_mb": rss_before_load,
        "rss_after_load_mb": rss_after_load,
        "rss_after_run_mb": rss_mb(),
        "vectors": first,
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
    println!("{batch_stages}");
    println!("{single_stages}");
    Ok(())
}
