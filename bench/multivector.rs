//! The MultiVectorEncoder bench's pg_embed side (bench/multivector.sh): the token vectors of
//! the first N corpus sentences as documents (`embed_multi(model, texts[])`'s computation),
//! through the pipeline called from Rust on THREADS threads. Prints one JSON line:
//! documents/s (the best of REPEATS runs after a warm-up), token rows, the first document's rows.
//!
//!   cargo run --release -p pg_embed_core --example bench_multivector -- DIR CORPUS N THREADS [REPEATS]

use std::path::Path;
use std::time::Instant;

use pg_embed_core::options::Options;
use pg_embed_core::pipeline::Pipeline;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 5 {
        return Err("usage: bench_multivector DIR CORPUS N THREADS [REPEATS]".into());
    }
    let (dir, corpus) = (Path::new(&args[1]), std::fs::read_to_string(&args[2])?);
    let (n, threads) = (args[3].parse::<usize>()?, args[4].parse::<usize>()?);
    let repeats: usize = args.get(5).map_or(Ok(3), |s| s.parse())?;
    let docs: Vec<&str> = corpus.lines().map(str::trim).filter(|l| !l.is_empty()).take(n).collect();
    let pipeline = Pipeline::load(dir, &Options::default())?;
    let run = || pipeline.embed_multi(&docs, Some("document"), 16384, threads, || Ok(()));
    run()?;
    let (mut best, mut got) = (f64::INFINITY, Vec::new());
    for _ in 0..repeats {
        let t = Instant::now();
        got = run()?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    let rows: usize = got.iter().map(|m| m.rows).sum();
    let first: Vec<Vec<f32>> = got.first().map(|m| (0..m.rows).map(|i| m.row(i).to_vec()).collect()).unwrap_or_default();
    println!(
        "{}",
        serde_json::json!({"system": "pg_embed pipeline (Rust), embed_multi documents", "kernel": pipeline.kernel(),
            "threads": threads, "documents": docs.len(), "rows": rows, "documents_per_s": docs.len() as f64 / best,
            "first": first})
    );
    Ok(())
}
