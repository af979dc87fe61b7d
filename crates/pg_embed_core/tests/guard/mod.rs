//! What the property tests over model directories share: the bounded allocator (any single
//! allocation above `MAX_ALLOCATION` aborts the test binary after naming the case), the
//! per-case thread with a time limit, temporary copies of fixtures, seeded noise and tensor
//! writers. Each test binary that includes this module gets the allocator.
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::Duration;

use candle_core::{DType, Device, Tensor};
use proptest::prelude::*;
use serde_json::{json, Value};

use pg_embed_core::error::Error;
use pg_embed_core::options::Options;

use pg_embed_core::pipeline::Pipeline;

/// The largest single allocation a case may make. Tiny models need a few megabytes; the
/// tokenizer, candle and rayon never ask for more than this for them.
pub const MAX_ALLOCATION: usize = 1 << 30;

/// How long one case (copy, load, embed) may take before it counts as a hang.
pub const TIME_LIMIT: Duration = Duration::from_secs(60);

/// The case running now, printed by the allocator when it refuses an allocation (the
/// process aborts then, and the test harness would show nothing else).
pub static CASE: Mutex<String> = Mutex::new(String::new());

/// The system allocator, refusing single allocations above `MAX_ALLOCATION`.
pub struct Bounded;

impl Bounded {
    pub fn refuse(size: usize) {
        let mut number = [0u8; 20];
        let mut at = number.len();
        let mut n = size;
        loop {
            at -= 1;
            number[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        let write = |bytes: &[u8]| {
            // SAFETY: writes the bytes of a live slice to stderr; no allocation.
            unsafe { libc::write(2, bytes.as_ptr().cast(), bytes.len()) };
        };
        write(b"\nfuzz_models: refused an allocation of ");
        write(&number[at..]);
        write(b" bytes; case: ");
        if let Ok(case) = CASE.try_lock() {
            write(case.as_bytes());
        }
        write(b"\n");
    }
}

// SAFETY: forwards to the system allocator, or returns null (allocation failure).
unsafe impl GlobalAlloc for Bounded {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > MAX_ALLOCATION {
            Self::refuse(layout.size());
            return std::ptr::null_mut();
        }
        // SAFETY: as the caller promises.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() > MAX_ALLOCATION {
            Self::refuse(layout.size());
            return std::ptr::null_mut();
        }
        // SAFETY: as the caller promises.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as the caller promises.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > MAX_ALLOCATION {
            Self::refuse(new_size);
            return std::ptr::null_mut();
        }
        // SAFETY: as the caller promises.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Bounded = Bounded;

/// Runs `work` on its own thread under `catch_unwind`, at most `TIME_LIMIT`; a panic or
/// a hang is an `Err` describing it.
pub fn guarded<T: Send + 'static>(
    case: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    *CASE.lock().unwrap_or_else(|e| e.into_inner()) = case.to_string();
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("fuzz_models case".into())
        .spawn(move || {
            let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)));
        })
        .map_err(|e| format!("could not start the case's thread: {e}"))?;
    match rx.recv_timeout(TIME_LIMIT) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(payload)) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".into());
            Err(format!("panicked: {message}"))
        }
        Err(mpsc::RecvTimeoutError::Timeout) => Err(format!("did not finish within {TIME_LIMIT:?} (hang)")),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err("the case's thread ended without a result".into()),
    }
}

pub fn fixtures() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("tests/fixtures")
}

/// A fresh, empty directory under the system's temp dir, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("pg_embed_fuzz_{}_{tag}_{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

/// Seeded uniform numbers in [-1, 1) (SplitMix64): weights that differ per case and are
/// the same on every run.
pub struct Noise(pub u64);

impl Noise {
    pub fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    pub fn tensor(&mut self, shape: &[usize], center: f32, scale: f32) -> Tensor {
        let n = shape.iter().product();
        let values: Vec<f32> = (0..n).map(|_| center + scale * self.next()).collect();
        Tensor::from_vec(values, shape, &Device::Cpu).unwrap()
    }
}

/// A checkpoint being written: seeded random tensors under `prefix`.
pub struct Weights {
    pub tensors: HashMap<String, Tensor>,
    pub noise: Noise,
    pub prefix: &'static str,
}

impl Weights {
    /// `center` plus uniform noise in [-scale, scale).
    pub fn put(&mut self, name: &str, shape: &[usize], center: f32, scale: f32) {
        let t = self.noise.tensor(shape, center, scale);
        self.tensors.insert(format!("{}{name}", self.prefix), t);
    }

    /// A torch Linear: `weight` [outputs, inputs] and `bias`.
    pub fn linear(&mut self, name: &str, outputs: usize, inputs: usize) {
        self.put(&format!("{name}.weight"), &[outputs, inputs], 0.0, 0.5);
        self.put(&format!("{name}.bias"), &[outputs], 0.0, 0.5);
    }

    /// A LayerNorm: weight around 1, bias around 0.
    pub fn norm(&mut self, name: &str, width: usize) {
        self.put(&format!("{name}.weight"), &[width], 1.0, 0.2);
        self.put(&format!("{name}.bias"), &[width], 0.0, 0.2);
    }
}

/// A model's vectors for the same texts, embedded three ways, and its dimension as the
/// pipeline states it.
pub struct Embedded {
    pub dim: usize,
    pub together: Vec<Vec<f32>>,
    pub batched: Vec<Vec<f32>>,
    pub one_by_one: Vec<Vec<f32>>,
}

/// Loads `dir` with `options` and embeds `texts` three ways: in one call, in small
/// length-grouped batches on two threads, and one at a time.
pub fn load_and_embed(
    dir: &Path,
    options: &Options,
    texts: &[String],
) -> pg_embed_core::error::Result<Embedded> {
    let p = Pipeline::load(dir, options)?;
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let together = p.embed(&refs)?;
    let batched = p.embed_batched(&refs, 64, 2, || Ok(()))?;
    let one_by_one = refs.iter().map(|t| p.embed(&[t]).map(|mut v| v.remove(0))).collect::<Result<_, _>>()?;
    Ok(Embedded { dim: p.dim(), together, batched, one_by_one })
}

pub fn max_difference(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max)
}

/// Fixed texts every case embeds: empty, longer than any generated max_position_embeddings,
/// non-ASCII (accents, CJK, emoji with a joiner, right-to-left), and control characters.
pub fn fixed_texts() -> Vec<String> {
    vec![
        String::new(),
        "the quick brown fox jumps over the lazy dog. ".repeat(30),
        "Grüße aus Köln — naïve café, 日本語のテキスト, 👩\u{200d}💻 שלום ß©™".into(),
        "\u{0}\t\n\r \u{301}a".into(),
    ]
}

// ---------------------------------------------------------------------------------------
// Property 1: valid random tiny models.

/// Texts for the damaged models: short, empty, long, non-ASCII.
pub fn damaged_texts() -> Vec<String> {
    vec!["hello world".into(), String::new(), "word ".repeat(300), "Grüße 日本語 👩\u{200d}💻".into()]
}
