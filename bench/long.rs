//! One long input through pg_embed's pipeline, from Rust (bench/long_inputs.sh runs it): the
//! input's tokens, the seconds of one `embed` call after a short warm-up, and the process's
//! peak resident memory growth over the call (VmHWM after the call less VmRSS before it, the
//! high-water mark reset first). Prints one JSON line; asserts nothing.
//!
//!   bench_long MODEL_DIR TEXT_FILE THREADS

use std::path::Path;
use std::time::Instant;

use pg_embed_core::options::Options;
use pg_embed_core::pipeline::Pipeline;

/// A field of /proc/self/status in MiB (0 where there is none).
fn status_mib(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        return Err("usage: bench_long MODEL_DIR TEXT_FILE THREADS".into());
    }
    let (dir, text, threads) = (Path::new(&args[1]), std::fs::read_to_string(&args[2])?, args[3].parse::<usize>()?);
    let options = Options::from_json_str(r#"{"long_input": "error"}"#)?;
    let pipeline = Pipeline::load(dir, &options)?;
    let tokens = pipeline.tokenize(&text)?.len();
    let embed = |t: &str| pipeline.embed_batched(&[t], usize::MAX, threads, || Ok(()));
    embed("warm up")?;
    // Reset the high-water mark to the current resident size.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let before = status_mib("VmRSS");
    let t0 = Instant::now();
    embed(&text)?;
    let seconds = t0.elapsed().as_secs_f64();
    let growth = status_mib("VmHWM") - before;
    let after = status_mib("VmRSS") - before;
    println!(
        "{}",
        serde_json::json!({
            "system": "pg_embed pipeline from Rust",
            "tokens": tokens,
            "seconds": seconds,
            "peak_growth_mib": growth,
            "held_after_mib": after,
            "threads": threads,
        })
    );
    Ok(())
}
