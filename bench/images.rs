//! The image bench's pg_embed side (bench/images.sh): a ViT's pipeline called directly from
//! Rust on a directory of image files, end to end from the files' bytes (decode, preprocess,
//! model, pooling). Prints one JSON line: images/s of the whole set as one call for each
//! max_batch_tokens tried (and the best), single-image latency p50/p99 (one image per
//! call), the time of each stage alone, and the vectors of the first 8 images for the
//! cross-check against transformers. Asserts nothing.
//!
//!   cargo run --release --example bench_images -- MODEL_DIR IMAGES_DIR THREADS [TOKENS,TOKENS,...]
//!
//! BENCH_OPTIONS (env) holds the model's options as JSON, e.g. '{"precision": "bfloat16"}'.

use std::path::Path;
use std::time::Instant;

use pg_embed_core::options::Options;
use pg_embed_core::pipeline::Pipeline;
use pg_embed_core::processor::{decode, ImageProcessor, Pixels};

#[path = "peak.rs"]
mod peak;

/// Pillow's decompression-bomb limit, pg_embed.max_image_pixels' default.
const MAX_PIXELS: u64 = 89_478_485;
/// The images whose vectors are printed.
const CHECKED: usize = 8;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((p * (sorted.len() - 1) as f64).round() as usize).min(sorted.len() - 1)]
}

fn ms_since(t0: Instant) -> f64 {
    t0.elapsed().as_secs_f64() * 1000.0
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        return Err("usage: bench_images MODEL_DIR IMAGES_DIR THREADS [TOKENS,TOKENS,...]".into());
    }
    let (dir, images_dir, threads) = (Path::new(&args[1]), Path::new(&args[2]), args[3].parse::<usize>()?);
    let budgets: Vec<usize> = args
        .get(4)
        .map_or("1576,3152,6304", String::as_str)
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let mut paths: Vec<_> =
        std::fs::read_dir(images_dir)?.map(|e| e.map(|e| e.path())).collect::<Result<_, _>>()?;
    paths.sort();
    let files: Vec<Vec<u8>> = paths.iter().map(std::fs::read).collect::<Result<_, _>>()?;
    let images: Vec<&[u8]> = files.iter().map(Vec::as_slice).collect();
    let n = images.len();
    if n == 0 {
        return Err(format!("no images in {}", images_dir.display()).into());
    }

    let t0 = Instant::now();
    // BENCH_OPTIONS: the model's options as register_model takes them, e.g. '{"precision": "bfloat16"}'.
    let options = match std::env::var("BENCH_OPTIONS") {
        Ok(json) if !json.is_empty() => Options::from_json_str(&json)?,
        _ => Options::default(),
    };
    let pipeline = Pipeline::load(dir, &options)?;
    let load_ms = ms_since(t0);
    let embed =
        |batch: &[&[u8]], tokens: usize| pipeline.embed_images(batch, MAX_PIXELS, tokens, threads, || Ok(()));

    // Warm-up: the pool, the packed weights' first touch, a batch's buffers.
    embed(&images[..CHECKED.min(n)], budgets[0])?;

    // Throughput: the whole set as one call, for each batch budget.
    let mut runs = Vec::new();
    let mut vectors = Vec::new();
    for &tokens in &budgets {
        let t0 = Instant::now();
        let out = embed(&images, tokens)?;
        let secs = t0.elapsed().as_secs_f64();
        runs.push(serde_json::json!({"max_batch_tokens": tokens, "images_per_s": n as f64 / secs}));
        if vectors.is_empty() {
            vectors = out[..CHECKED.min(n)].to_vec();
        }
    }
    let best = runs
        .iter()
        .max_by(|a, b| {
            a["images_per_s"].as_f64().unwrap_or(0.0).total_cmp(&b["images_per_s"].as_f64().unwrap_or(0.0))
        })
        .cloned()
        .unwrap_or_default();
    let best_tokens = best["max_batch_tokens"].as_u64().unwrap_or(budgets[0] as u64) as usize;

    // Latency: one image per call, over the set.
    embed(&images[..1], best_tokens)?;
    let mut lat = Vec::with_capacity(n);
    for image in &images {
        let t0 = Instant::now();
        embed(&[image], best_tokens)?;
        lat.push(ms_since(t0));
    }
    lat.sort_by(f64::total_cmp);

    // The stages alone, per image: decode and preprocess on one thread, each image in turn;
    // the model (with pooling) on `threads` threads over the preprocessed images, in batches
    // of the best budget and one image at a time.
    let processor = ImageProcessor::load(&dir.join("preprocessor_config.json"))?;
    let t0 = Instant::now();
    let decoded = images.iter().map(|b| decode::decode_rgb(b, MAX_PIXELS)).collect::<Result<Vec<_>, _>>()?;
    let decode_ms = ms_since(t0) / n as f64;
    let t0 = Instant::now();
    let pixels: Vec<Pixels> = decoded.iter().map(|rgb| processor.preprocess_rgb(rgb)).collect();
    let preprocess_ms = ms_since(t0) / n as f64;
    let config: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("config.json"))?)?;
    let tokens_per_image = pipeline.image_tokens(pixels[0].height, pixels[0].width)?;
    let per_batch = (best_tokens / tokens_per_image).max(1);
    let model = |batch: &[Pixels]| pg_embed_core::threads::run(threads, || pipeline.embed_pixels(batch));
    model(&pixels[..per_batch.min(n)])??;
    let t0 = Instant::now();
    for batch in pixels.chunks(per_batch) {
        model(batch)??;
    }
    let model_batch_ms = ms_since(t0) / n as f64;
    let t0 = Instant::now();
    for p in &pixels {
        model(std::slice::from_ref(p))??;
    }
    let model_single_ms = ms_since(t0) / n as f64;
    // Useful work of the model per image: 2 x the layers' weights x tokens, plus QK^T and PV.
    let get = |k: &str, d: f64| config[k].as_f64().unwrap_or(d);
    let (h, layers, ff) =
        (get("hidden_size", 768.0), get("num_hidden_layers", 12.0), get("intermediate_size", 3072.0));
    let t = tokens_per_image as f64;
    let gflop_per_image = (2.0 * (4.0 * h * h + 2.0 * h * ff) * t + 4.0 * t * t * h) * layers / 1e9;
    let peak = peak::fma_peak(threads);
    // Decode + preprocess of the whole set on `threads` threads, as the batched call does it.
    let t0 = Instant::now();
    pg_embed_core::threads::run(threads, || {
        use rayon::prelude::*;
        images.par_iter().map(|b| processor.preprocess(b, MAX_PIXELS)).collect::<Result<Vec<_>, _>>()
    })??;
    let input_parallel_ms = ms_since(t0) / n as f64;

    let result = serde_json::json!({
        "system": format!("pg_embed pipeline from Rust, {}", options.precision.unwrap_or_default().name()),
        "images_per_s": best["images_per_s"],
        "best_max_batch_tokens": best_tokens,
        "best_batch_images": per_batch,
        "runs": runs,
        "single_p50_ms": percentile(&lat, 0.5),
        "single_p99_ms": percentile(&lat, 0.99),
        "model_gflop_per_image": gflop_per_image,
        "model_batch_gflops": gflop_per_image / (model_batch_ms / 1000.0),
        "fma_peak_gflops": peak,
        "stages_ms_per_image": {
            "decode": decode_ms,
            "preprocess": preprocess_ms,
            "decode_and_preprocess_parallel": input_parallel_ms,
            "model_batch": model_batch_ms,
            "model_single": model_single_ms,
        },
        "load_ms": load_ms,
        "threads": threads,
        "images": n,
        "vectors": vectors,
    });
    println!("{result}");
    Ok(())
}
