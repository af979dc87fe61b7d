//! Property tests over model directories: whatever a directory holds, `Pipeline::load` and
//! embedding return `Ok` or a clean `Err`, never a panic, a hang or a huge allocation (the
//! reliability requirement "no input may crash a backend").
//!
//! - `valid_random_models_load_and_embed`: random but consistent tiny BERT, RoBERTa /
//!   XLM-RoBERTa, DistilBERT and ELECTRA configs with seeded random weights under the names
//!   the loaders read, the tokenizer of tests/fixtures/pool_mean, and a random pooling;
//!   they load, give the stated dimension and finite vectors, and batching changes nothing.
//! - `mutated_fixtures_never_panic`: each backbone fixture of tests/fixtures/backbones with
//!   random config, tensor and file damage; loading and embedding end in `Ok` or `Err`; a
//!   model that loads with plausible weights (finite, not huge) gives finite vectors of its
//!   dimension, and none fails in the forward pass ("inference failed", an internal error).
//!
//! Each case runs on its own thread under `catch_unwind` with a time limit, and the test
//! binary's allocator refuses any single allocation above `MAX_ALLOCATION` (the process
//! then aborts, after printing the case), so a config that makes the code allocate by its
//! numbers, not by the file's, fails here instead of exhausting the machine.

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
const MAX_ALLOCATION: usize = 1 << 30;

/// How long one case (copy, load, embed) may take before it counts as a hang.
const TIME_LIMIT: Duration = Duration::from_secs(60);

/// The case running now, printed by the allocator when it refuses an allocation (the
/// process aborts then, and the test harness would show nothing else).
static CASE: Mutex<String> = Mutex::new(String::new());

/// The system allocator, refusing single allocations above `MAX_ALLOCATION`.
struct Bounded;

impl Bounded {
    fn refuse(size: usize) {
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
fn guarded<T: Send + 'static>(case: &str, work: impl FnOnce() -> T + Send + 'static) -> Result<T, String> {
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

fn fixtures() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("tests/fixtures")
}

/// A fresh, empty directory under the system's temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
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

fn copy_dir(from: &Path, to: &Path) {
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
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    fn tensor(&mut self, shape: &[usize], center: f32, scale: f32) -> Tensor {
        let n = shape.iter().product();
        let values: Vec<f32> = (0..n).map(|_| center + scale * self.next()).collect();
        Tensor::from_vec(values, shape, &Device::Cpu).unwrap()
    }
}

/// A checkpoint being written: seeded random tensors under `prefix`.
struct Weights {
    tensors: HashMap<String, Tensor>,
    noise: Noise,
    prefix: &'static str,
}

impl Weights {
    /// `center` plus uniform noise in [-scale, scale).
    fn put(&mut self, name: &str, shape: &[usize], center: f32, scale: f32) {
        let t = self.noise.tensor(shape, center, scale);
        self.tensors.insert(format!("{}{name}", self.prefix), t);
    }

    /// A torch Linear: `weight` [outputs, inputs] and `bias`.
    fn linear(&mut self, name: &str, outputs: usize, inputs: usize) {
        self.put(&format!("{name}.weight"), &[outputs, inputs], 0.0, 0.5);
        self.put(&format!("{name}.bias"), &[outputs], 0.0, 0.5);
    }

    /// A LayerNorm: weight around 1, bias around 0.
    fn norm(&mut self, name: &str, width: usize) {
        self.put(&format!("{name}.weight"), &[width], 1.0, 0.2);
        self.put(&format!("{name}.bias"), &[width], 0.0, 0.2);
    }
}

/// A model's vectors for the same texts, embedded three ways, and its dimension as the
/// pipeline states it.
struct Embedded {
    dim: usize,
    together: Vec<Vec<f32>>,
    batched: Vec<Vec<f32>>,
    one_by_one: Vec<Vec<f32>>,
}

/// Loads `dir` with `options` and embeds `texts` three ways: in one call, in small
/// length-grouped batches on two threads, and one at a time.
fn load_and_embed(dir: &Path, options: &Options, texts: &[String]) -> pg_embed_core::error::Result<Embedded> {
    let p = Pipeline::load(dir, options)?;
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let together = p.embed(&refs)?;
    let batched = p.embed_batched(&refs, 64, 2, || Ok(()))?;
    let one_by_one = refs.iter().map(|t| p.embed(&[t]).map(|mut v| v.remove(0))).collect::<Result<_, _>>()?;
    Ok(Embedded { dim: p.dim(), together, batched, one_by_one })
}

fn max_difference(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max)
}

/// Fixed texts every case embeds: empty, longer than any generated max_position_embeddings,
/// non-ASCII (accents, CJK, emoji with a joiner, right-to-left), and control characters.
fn fixed_texts() -> Vec<String> {
    vec![
        String::new(),
        "the quick brown fox jumps over the lazy dog. ".repeat(30),
        "Grüße aus Köln — naïve café, 日本語のテキスト, 👩\u{200d}💻 שלום ß©™".into(),
        "\u{0}\t\n\r \u{301}a".into(),
    ]
}

// ---------------------------------------------------------------------------------------
// Property 1: valid random tiny models.

/// The pool_mean fixture's tokenizer: BERT WordPiece, 401 tokens, [PAD] = 0.
const VOCAB: usize = 401;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Arch {
    Bert,
    Roberta,
    XlmRoberta,
    DistilBert,
    Electra,
}

/// Where the pooling comes from.
#[derive(Debug, Clone)]
enum Pooling {
    /// No Pooling module: the default (mean).
    Default,
    /// A sentence-transformers 1_Pooling/config.json, 6.x style (`pooling_mode` list) or
    /// with the legacy flags.
    File { modes: Vec<&'static str>, legacy: bool },
    /// `options.pooling`.
    Options(Vec<&'static str>),
}

#[derive(Debug, Clone)]
struct TinyModel {
    arch: Arch,
    heads: usize,
    head_dim: usize,
    /// ELECTRA's embedding width (projected to the hidden size).
    embedding_size: usize,
    layers: usize,
    intermediate: usize,
    max_positions: usize,
    type_vocab: usize,
    act: &'static str,
    eps: f64,
    /// RoBERTa's padding index (positions start after it).
    pad: u32,
    /// The prefix of a *Model checkpoint saved from a task model ("bert.", ...).
    prefixed: bool,
    /// BERT's pooler weights.
    pooler: bool,
    pooling: Pooling,
    normalize: bool,
    mean_of_chunks: bool,
    seed: u64,
}

const ST_MODES: [&str; 6] = ["cls", "mean", "max", "mean_sqrt_len_tokens", "weightedmean", "lasttoken"];

fn tiny_model() -> impl Strategy<Value = TinyModel> {
    let arch = prop_oneof![
        Just(Arch::Bert),
        Just(Arch::Roberta),
        Just(Arch::XlmRoberta),
        Just(Arch::DistilBert),
        Just(Arch::Electra)
    ];
    let modes = proptest::sample::subsequence(ST_MODES.to_vec(), 1..4).prop_shuffle();
    let pooling = prop_oneof![
        Just(Pooling::Default),
        (modes.clone(), any::<bool>()).prop_map(|(modes, legacy)| Pooling::File { modes, legacy }),
        (modes, any::<bool>()).prop_map(|(mut modes, pooler)| {
            if pooler {
                modes.push("pooler");
            }
            Pooling::Options(modes)
        }),
    ];
    let shape = (arch, 1usize..=4, 2usize..=8, 2usize..=16, 1usize..=3, 1usize..=40, 8usize..=64, 1usize..=2);
    let settings = (
        proptest::sample::select(vec!["gelu", "gelu_new", "gelu_pytorch_tanh", "relu"]),
        proptest::sample::select(vec![1e-12, 1e-7, 1e-5, 1e-3]),
        0u32..=1,
        any::<bool>(),
        any::<bool>(),
        pooling,
        any::<bool>(),
        any::<bool>(),
        any::<u64>(),
    );
    (shape, settings).prop_map(
        |(
            (arch, heads, head_dim, embedding_size, layers, intermediate, max_positions, type_vocab),
            (act, eps, pad, prefixed, pooler, pooling, normalize, mean_of_chunks, seed),
        )| {
            let mut pooling = pooling;
            // Only BERT here carries a pooler; "pooler" pooling needs one.
            let pooler = pooler && arch == Arch::Bert;
            if let Pooling::Options(modes) = &mut pooling {
                if !pooler {
                    modes.retain(|m| *m != "pooler");
                }
            }
            TinyModel {
                arch,
                heads,
                head_dim,
                embedding_size,
                layers,
                intermediate,
                max_positions,
                type_vocab,
                act,
                eps,
                pad,
                prefixed,
                pooler,
                pooling,
                normalize,
                mean_of_chunks,
                seed,
            }
        },
    )
}

impl TinyModel {
    fn hidden(&self) -> usize {
        self.heads * self.head_dim
    }

    fn model_type(&self) -> &'static str {
        match self.arch {
            Arch::Bert => "bert",
            Arch::Roberta => "roberta",
            Arch::XlmRoberta => "xlm-roberta",
            Arch::DistilBert => "distilbert",
            Arch::Electra => "electra",
        }
    }

    fn config(&self) -> Value {
        let h = self.hidden();
        match self.arch {
            Arch::DistilBert => json!({
                "model_type": "distilbert",
                "architectures": ["DistilBertModel"],
                "vocab_size": VOCAB,
                "dim": h,
                "n_heads": self.heads,
                "n_layers": self.layers,
                "hidden_dim": self.intermediate,
                "activation": self.act,
                "max_position_embeddings": self.max_positions,
            }),
            _ => {
                let mut c = json!({
                    "model_type": self.model_type(),
                    "vocab_size": VOCAB,
                    "hidden_size": h,
                    "num_attention_heads": self.heads,
                    "num_hidden_layers": self.layers,
                    "intermediate_size": self.intermediate,
                    "hidden_act": self.act,
                    "max_position_embeddings": self.max_positions,
                    "type_vocab_size": self.type_vocab,
                    "layer_norm_eps": self.eps,
                    "pad_token_id": if matches!(self.arch, Arch::Roberta | Arch::XlmRoberta) { self.pad } else { 0 },
                });
                if self.arch == Arch::Electra {
                    c["embedding_size"] = self.embedding_size.into();
                }
                c
            }
        }
    }

    /// Seeded random weights under the names the loader reads.
    fn weights(&self) -> HashMap<String, Tensor> {
        let (h, ff) = (self.hidden(), self.intermediate);
        let prefix = match (self.prefixed, self.arch) {
            (false, _) => "",
            (true, Arch::Bert) => "bert.",
            (true, Arch::Roberta | Arch::XlmRoberta) => "roberta.",
            (true, Arch::DistilBert) => "distilbert.",
            (true, Arch::Electra) => "electra.",
        };
        let mut w = Weights { tensors: HashMap::new(), noise: Noise(self.seed), prefix };
        let width = if self.arch == Arch::Electra { self.embedding_size } else { h };
        w.put("embeddings.word_embeddings.weight", &[VOCAB, width], 0.0, 0.5);
        w.put("embeddings.position_embeddings.weight", &[self.max_positions, width], 0.0, 0.5);
        if self.arch != Arch::DistilBert {
            w.put("embeddings.token_type_embeddings.weight", &[self.type_vocab, width], 0.0, 0.5);
        }
        w.norm("embeddings.LayerNorm", width);
        if self.arch == Arch::Electra && width != h {
            w.linear("embeddings_project", h, width);
        }
        for i in 0..self.layers {
            if self.arch == Arch::DistilBert {
                let l = format!("transformer.layer.{i}");
                for part in ["q_lin", "k_lin", "v_lin", "out_lin"] {
                    w.linear(&format!("{l}.attention.{part}"), h, h);
                }
                w.norm(&format!("{l}.sa_layer_norm"), h);
                w.linear(&format!("{l}.ffn.lin1"), ff, h);
                w.linear(&format!("{l}.ffn.lin2"), h, ff);
                w.norm(&format!("{l}.output_layer_norm"), h);
            } else {
                let l = format!("encoder.layer.{i}");
                for part in ["query", "key", "value"] {
                    w.linear(&format!("{l}.attention.self.{part}"), h, h);
                }
                w.linear(&format!("{l}.attention.output.dense"), h, h);
                w.norm(&format!("{l}.attention.output.LayerNorm"), h);
                w.linear(&format!("{l}.intermediate.dense"), ff, h);
                w.linear(&format!("{l}.output.dense"), h, ff);
                w.norm(&format!("{l}.output.LayerNorm"), h);
            }
        }
        if self.pooler {
            w.linear("pooler.dense", h, h);
        }
        w.tensors
    }

    /// The model directory: config.json, model.safetensors, the fixture's tokenizer, and
    /// modules.json with 1_Pooling and Normalize as the case says.
    fn write(&self, dir: &Path) {
        let write_json = |path: PathBuf, value: &Value| std::fs::write(path, value.to_string()).unwrap();
        write_json(dir.join("config.json"), &self.config());
        candle_core::safetensors::save(&self.weights(), dir.join("model.safetensors")).unwrap();
        std::fs::copy(fixtures().join("pool_mean/tokenizer.json"), dir.join("tokenizer.json")).unwrap();
        let mut modules = vec![
            json!({"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}),
        ];
        if let Pooling::File { modes, legacy } = &self.pooling {
            std::fs::create_dir_all(dir.join("1_Pooling")).unwrap();
            let config = if *legacy {
                let mut c = json!({"word_embedding_dimension": self.hidden()});
                for (flag, mode) in [
                    ("pooling_mode_cls_token", "cls"),
                    ("pooling_mode_mean_tokens", "mean"),
                    ("pooling_mode_max_tokens", "max"),
                    ("pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len_tokens"),
                    ("pooling_mode_weightedmean_tokens", "weightedmean"),
                    ("pooling_mode_lasttoken", "lasttoken"),
                ] {
                    c[flag] = modes.contains(&mode).into();
                }
                c
            } else {
                json!({"embedding_dimension": self.hidden(), "pooling_mode": modes, "include_prompt": true})
            };
            write_json(dir.join("1_Pooling/config.json"), &config);
            modules.push(json!({"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}));
        }
        if self.normalize {
            let idx = modules.len();
            modules.push(json!({"idx": idx, "name": idx.to_string(), "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}));
        }
        if modules.len() > 1 {
            write_json(dir.join("modules.json"), &Value::Array(modules));
        }
    }

    fn options(&self) -> Options {
        let mut o = json!({});
        if let Pooling::Options(modes) = &self.pooling {
            o["pooling"] = json!(modes);
        }
        if self.mean_of_chunks {
            o["long_input"] = "mean_of_chunks".into();
        }
        Options::from_json(&o).unwrap()
    }

    /// The output width the config implies: the hidden size once per pooling mode.
    fn dim(&self) -> usize {
        match &self.pooling {
            Pooling::Default => self.hidden(),
            Pooling::File { modes, .. } | Pooling::Options(modes) => modes.len() * self.hidden(),
        }
    }
}

proptest! {
    // A fixed seed: the same cases on every run (a failure is reproducible as it is).
    #![proptest_config(ProptestConfig {
        cases: 128,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0xf022_0de1_5eed),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn valid_random_models_load_and_embed(
        model in tiny_model(),
        extra in proptest::collection::vec("\\PC{0,60}", 0..3),
    ) {
        let tmp = TempDir::new("valid");
        model.write(&tmp.0);
        let mut texts = fixed_texts();
        texts.extend(extra);
        let case = format!("{model:?}");
        let (dir, options, inputs) = (tmp.0.clone(), model.options(), texts.clone());
        let outcome = guarded(&case, move || load_and_embed(&dir, &options, &inputs));
        let e = match outcome {
            Err(failure) => return Err(TestCaseError::fail(format!("{failure}\ncase: {case}"))),
            Ok(Err(error)) => return Err(TestCaseError::fail(format!("{error}\ncase: {case}"))),
            Ok(Ok(e)) => e,
        };
        prop_assert_eq!(e.dim, model.dim(), "case: {}", case);
        for (i, text) in texts.iter().enumerate() {
            let v = &e.one_by_one[i];
            prop_assert_eq!(v.len(), e.dim, "{:?}; case: {}", text, case);
            prop_assert!(v.iter().all(|x| x.is_finite()), "{:?} -> {:?}; case: {}", text, v, case);
            if model.normalize {
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                prop_assert!((norm - 1.0).abs() < 1e-4, "{:?}: norm {}; case: {}", text, norm, case);
            }
            for (how, other) in [("in one call", &e.together[i]), ("in batches", &e.batched[i])] {
                let d = max_difference(v, other);
                prop_assert!(other.len() == v.len() && d <= 1e-5, "{:?}: {} differs by {}; case: {}", text, how, d, case);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Property 2: damaged real fixtures.

/// The backbone fixture directories (one per architecture, plus variants), sorted.
fn backbone_fixtures() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(fixtures().join("backbones"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("config.json").is_file())
        .collect();
    dirs.sort();
    dirs
}

const MODEL_TYPES: [&str; 12] = [
    "bert",
    "clip_text_model",
    "deberta-v2",
    "distilbert",
    "electra",
    "modernbert",
    "mpnet",
    "nomic_bert",
    "roberta",
    "t5",
    "xlm-roberta",
    "gpt2",
];

#[derive(Debug, Clone, Copy)]
enum Reshape {
    Flatten,
    AddDim,
    Shrink,
    Grow,
    Transpose,
    Empty,
}

/// One change to a model directory. Indexes pick among the config's numeric values (at
/// any depth), its keys, the checkpoint's tensors, the directory's other JSON files and
/// their values, or all its files (each sorted), modulo their count.
#[derive(Debug, Clone)]
enum Mutation {
    SetNumber {
        field: usize,
        value: Value,
    },
    /// A value (number, string or boolean, at any depth) of another JSON file: the
    /// tokenizer, tokenizer_config.json, sentence-transformers' module configs.
    EditJson {
        file: usize,
        field: usize,
        value: Value,
    },
    RemoveField {
        field: usize,
    },
    ModelType(&'static str),
    DropTensor(usize),
    RenameTensor {
        tensor: usize,
        to: usize,
    },
    MangleTensorName {
        tensor: usize,
        suffix: &'static str,
    },
    Reshape {
        tensor: usize,
        how: Reshape,
    },
    Dtype {
        tensor: usize,
        dtype: DType,
    },
    NonFinite {
        tensor: usize,
        value: f32,
        all: bool,
    },
    Truncate {
        file: usize,
        fraction: f64,
    },
}

fn odd_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(0)),
        Just(json!(1)),
        Just(json!(2)),
        Just(json!(-1)),
        Just(json!(-7)),
        Just(json!(1u64 << 20)),
        Just(json!(1u64 << 31)),
        Just(json!((1u64 << 32) - 1)),
        Just(json!(1u64 << 32)),
        Just(json!(1u64 << 40)),
        Just(json!(1u64 << 62)),
        Just(json!(u64::MAX)),
        Just(json!(i64::MIN)),
        Just(json!(0.5)),
        Just(json!(1.5)),
        Just(json!(-0.25)),
        Just(json!(1e-300)),
        Just(json!(1e300)),
        Just(json!(-1e300)),
        Just(json!("seven")),
        Just(Value::Null),
        Just(json!(true)),
        (0u64..600).prop_map(|n| json!(n)),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let index = 0usize..1000;
    prop_oneof![
        4 => (index.clone(), odd_value()).prop_map(|(field, value)| Mutation::SetNumber { field, value }),
        1 => index.clone().prop_map(|field| Mutation::RemoveField { field }),
        1 => proptest::sample::select(MODEL_TYPES.to_vec()).prop_map(Mutation::ModelType),
        1 => index.clone().prop_map(Mutation::DropTensor),
        1 => (index.clone(), index.clone()).prop_map(|(tensor, to)| Mutation::RenameTensor { tensor, to }),
        1 => (index.clone(), proptest::sample::select(vec![".x", "_", "s"]))
            .prop_map(|(tensor, suffix)| Mutation::MangleTensorName { tensor, suffix }),
        2 => (
            index.clone(),
            prop_oneof![
                Just(Reshape::Flatten),
                Just(Reshape::AddDim),
                Just(Reshape::Shrink),
                Just(Reshape::Grow),
                Just(Reshape::Transpose),
                Just(Reshape::Empty)
            ]
        )
            .prop_map(|(tensor, how)| Mutation::Reshape { tensor, how }),
        1 => (
            index.clone(),
            proptest::sample::select(vec![DType::F16, DType::BF16, DType::F64, DType::I64, DType::U8, DType::U32])
        )
            .prop_map(|(tensor, dtype)| Mutation::Dtype { tensor, dtype }),
        1 => (index.clone(), proptest::sample::select(vec![f32::NAN, f32::INFINITY, f32::NEG_INFINITY]), any::<bool>())
            .prop_map(|(tensor, value, all)| Mutation::NonFinite { tensor, value, all }),
        2 => (index.clone(), index.clone(), odd_value()).prop_map(|(file, field, value)| Mutation::EditJson { file, field, value }),
        1 => (index.clone(), 0.0f64..1.0).prop_map(|(file, fraction)| Mutation::Truncate { file, fraction }),
    ]
}

/// JSON pointers of every number in `v`, or with `all` of every number, string and boolean.
fn leaves(v: &Value, at: String, all: bool, out: &mut Vec<String>) {
    match v {
        Value::Number(_) => out.push(at),
        Value::String(_) | Value::Bool(_) if all => out.push(at),
        Value::Object(m) => m.iter().for_each(|(k, v)| leaves(v, format!("{at}/{}", escape(k)), all, out)),
        Value::Array(a) => a.iter().enumerate().for_each(|(i, v)| leaves(v, format!("{at}/{i}"), all, out)),
        _ => {}
    }
}

/// A key as a JSON pointer token.
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Sets the `field`-th leaf of the JSON file at `path` (modulo the count) to `value`.
fn edit_json(path: &Path, field: usize, value: &Value) -> String {
    let Ok(mut json) = serde_json::from_slice::<Value>(&std::fs::read(path).unwrap()) else {
        return "not JSON".into();
    };
    let mut pointers = Vec::new();
    leaves(&json, String::new(), true, &mut pointers);
    let Some(p) = pointers.get(field % pointers.len().max(1)) else { return "no value".into() };
    if let Some(slot) = json.pointer_mut(p) {
        *slot = value.clone();
    }
    std::fs::write(path, json.to_string()).unwrap();
    format!("{p} = {value}")
}

/// Every file under `dir`, as paths relative to it, sorted.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = pg_embed_core::st::files_under(dir, |_| Ok(()))
        .unwrap()
        .into_iter()
        .map(|p| p.strip_prefix(dir).unwrap().to_path_buf())
        .collect();
    out.sort();
    out
}

/// Applies `m` to the config and tensors held in memory; returns what was changed.
fn apply(
    m: &Mutation,
    config: &mut Value,
    tensors: &mut HashMap<String, Tensor>,
    noise: &mut Noise,
) -> String {
    let mut names: Vec<String> = tensors.keys().cloned().collect();
    names.sort();
    let pick = |i: usize| names.get(i % names.len().max(1)).cloned();
    match m {
        Mutation::SetNumber { field, value } => {
            let mut pointers = Vec::new();
            leaves(config, String::new(), false, &mut pointers);
            let Some(p) = pointers.get(field % pointers.len().max(1)) else { return "no number".into() };
            if let Some(slot) = config.pointer_mut(p) {
                *slot = value.clone();
            }
            format!("config {p} = {value}")
        }
        Mutation::RemoveField { field } => {
            let Some(map) = config.as_object_mut() else { return "config not an object".into() };
            let mut keys: Vec<String> = map.keys().cloned().collect();
            keys.sort();
            let Some(k) = keys.get(field % keys.len().max(1)) else { return "no key".into() };
            map.remove(k);
            format!("config -{k}")
        }
        Mutation::ModelType(t) => {
            config["model_type"] = (*t).into();
            format!("config model_type = {t}")
        }
        Mutation::DropTensor(i) => {
            let Some(n) = pick(*i) else { return "no tensor".into() };
            tensors.remove(&n);
            format!("drop {n}")
        }
        Mutation::RenameTensor { tensor, to } => {
            let (Some(from), Some(to)) = (pick(*tensor), pick(*to)) else { return "no tensor".into() };
            if let Some(t) = tensors.remove(&from) {
                tensors.insert(to.clone(), t);
            }
            format!("rename {from} -> {to} (replacing it)")
        }
        Mutation::MangleTensorName { tensor, suffix } => {
            let Some(from) = pick(*tensor) else { return "no tensor".into() };
            if let Some(t) = tensors.remove(&from) {
                tensors.insert(format!("{from}{suffix}"), t);
            }
            format!("rename {from} -> {from}{suffix}")
        }
        Mutation::Reshape { tensor, how } => {
            let Some(n) = pick(*tensor) else { return "no tensor".into() };
            let t = tensors[&n].clone();
            let dims = t.dims().to_vec();
            let mut grown = dims.clone();
            let new = match how {
                Reshape::Flatten => t.flatten_all().unwrap(),
                Reshape::AddDim => t.unsqueeze(0).unwrap(),
                Reshape::Transpose if dims.len() == 2 => t.t().unwrap().contiguous().unwrap(),
                Reshape::Shrink if dims.last().is_some_and(|d| *d > 1) => {
                    t.narrow(dims.len() - 1, 0, dims[dims.len() - 1] - 1).unwrap().contiguous().unwrap()
                }
                Reshape::Empty => {
                    match grown.first_mut() {
                        Some(first) => *first = 0,
                        None => grown.push(0),
                    }
                    Tensor::zeros(grown, t.dtype(), &Device::Cpu).unwrap()
                }
                _ => {
                    if let Some(last) = grown.last_mut() {
                        *last += 1;
                    } else {
                        grown.push(2);
                    }
                    noise.tensor(&grown, 0.0, 0.5).to_dtype(t.dtype()).unwrap()
                }
            };
            let shape = new.dims().to_vec();
            tensors.insert(n.clone(), new);
            format!("reshape {n} {dims:?} -> {shape:?} ({how:?})")
        }
        Mutation::Dtype { tensor, dtype } => {
            let Some(n) = pick(*tensor) else { return "no tensor".into() };
            let t = tensors[&n].to_dtype(*dtype).unwrap();
            tensors.insert(n.clone(), t);
            format!("{n} as {dtype:?}")
        }
        Mutation::NonFinite { tensor, value, all } => {
            let Some(n) = pick(*tensor) else { return "no tensor".into() };
            let t = &tensors[&n];
            let mut values = t.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
            match (all, values.first_mut()) {
                (true, _) => values.iter_mut().for_each(|x| *x = *value),
                (false, Some(x)) => *x = *value,
                (false, None) => {}
            }
            let new = Tensor::from_vec(values, t.dims(), &Device::Cpu).unwrap().to_dtype(t.dtype()).unwrap();
            tensors.insert(n.clone(), new);
            format!("{n} {} = {value}", if *all { "all" } else { "[0]" })
        }
        // Applied to the files once written.
        Mutation::EditJson { .. } | Mutation::Truncate { .. } => String::new(),
    }
}

/// Whether every tensor holds plausible weights (as the loader reads them, in f32): finite
/// and at most `MAX_WEIGHT` in magnitude. An infinity cast to an integer type is finite but
/// near 2^63, and its products overflow f32 as they would in any float implementation.
fn all_plausible(tensors: &HashMap<String, Tensor>) -> bool {
    const MAX_WEIGHT: f32 = 1e4;
    tensors.values().all(|t| {
        t.to_dtype(DType::F32)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<f32>())
            .is_ok_and(|v| v.iter().all(|x| x.abs() <= MAX_WEIGHT))
    })
}

/// A copy of `fixture` in `dir` with `mutations` applied; the changes made, and whether
/// the weights written are all plausible (finite and not huge).
fn damage(fixture: &Path, dir: &Path, mutations: &[Mutation], seed: u64) -> (Vec<String>, bool) {
    copy_dir(fixture, dir);
    let config_path = dir.join("config.json");
    let weights_path = dir.join("model.safetensors");
    let mut config: Value = serde_json::from_slice(&std::fs::read(&config_path).unwrap()).unwrap();
    let mut tensors = candle_core::safetensors::load(&weights_path, &Device::Cpu).unwrap();
    let mut noise = Noise(seed);
    let mut done: Vec<String> = mutations
        .iter()
        .map(|m| apply(m, &mut config, &mut tensors, &mut noise))
        .filter(|d| !d.is_empty())
        .collect();
    std::fs::write(&config_path, config.to_string()).unwrap();
    candle_core::safetensors::save(&tensors, &weights_path).unwrap();
    let all = files(dir);
    let other_json: Vec<&PathBuf> = all
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "json") && *p != Path::new("config.json"))
        .collect();
    for m in mutations {
        if let Mutation::EditJson { file, field, value } = m {
            let Some(path) = other_json.get(file % other_json.len().max(1)) else { continue };
            done.push(format!("{} {}", path.display(), edit_json(&dir.join(path), *field, value)));
        }
    }
    for m in mutations {
        if let Mutation::Truncate { file, fraction } = m {
            let path = &all[file % all.len()];
            let bytes = std::fs::read(dir.join(path)).unwrap();
            let at = ((bytes.len() as f64) * fraction) as usize;
            std::fs::write(dir.join(path), &bytes[..at.min(bytes.len())]).unwrap();
            done.push(format!("truncate {} to {at} of {} bytes", path.display(), bytes.len()));
        }
    }
    (done, all_plausible(&tensors))
}

/// Texts for the damaged models: short, empty, long, non-ASCII.
fn damaged_texts() -> Vec<String> {
    vec!["hello world".into(), String::new(), "word ".repeat(300), "Grüße 日本語 👩\u{200d}💻".into()]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0xda4a_9ed0_5eed),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn mutated_fixtures_never_panic(
        fixture in proptest::sample::select(backbone_fixtures()),
        mutations in proptest::collection::vec(mutation(), 1..6),
        seed in any::<u64>(),
    ) {
        let tmp = TempDir::new("mutated");
        let (done, plausible) = damage(&fixture, &tmp.0, &mutations, seed);
        let case = format!("{}: {}", fixture.file_name().unwrap().to_string_lossy(), done.join("; "));
        let dir = tmp.0.clone();
        let texts = damaged_texts();
        let outcome = guarded(&case, move || load_and_embed(&dir, &Options::default(), &texts));
        match outcome {
            Err(failure) => return Err(TestCaseError::fail(format!("{failure}\ncase: {case}"))),
            // A clean refusal: any error but an internal one from inference, which would
            // mean the load accepted what the forward pass cannot run.
            Ok(Err(error)) => {
                prop_assert!(!matches!(error, Error::Inference(_)) || !plausible, "loaded, then {}; case: {}", error, case);
            }
            Ok(Ok(e)) => {
                for v in e.one_by_one.iter().chain(&e.together).chain(&e.batched) {
                    prop_assert_eq!(v.len(), e.dim, "case: {}", case);
                    prop_assert!(!plausible || v.iter().all(|x| x.is_finite()), "{:?}; case: {}", v, case);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Regressions: what the properties found, one deterministic case each.

/// The backbone fixture `name` with `edit` applied to its config.json and `weights` to its
/// tensors, loaded and run on the damaged-model texts.
fn changed(
    name: &str,
    edit: impl FnOnce(&mut Value),
    weights: impl FnOnce(&mut HashMap<String, Tensor>),
) -> pg_embed_core::error::Result<Embedded> {
    let tmp = TempDir::new("regression");
    copy_dir(&fixtures().join("backbones").join(name), &tmp.0);
    let config_path = tmp.0.join("config.json");
    let mut config: Value = serde_json::from_slice(&std::fs::read(&config_path).unwrap()).unwrap();
    edit(&mut config);
    std::fs::write(&config_path, config.to_string()).unwrap();
    let weights_path = tmp.0.join("model.safetensors");
    let mut tensors = candle_core::safetensors::load(&weights_path, &Device::Cpu).unwrap();
    weights(&mut tensors);
    candle_core::safetensors::save(&tensors, &weights_path).unwrap();
    load_and_embed(&tmp.0, &Options::default(), &damaged_texts())
}

/// The fixture with one config value set.
fn with_config(name: &str, pointer: &str, value: Value) -> pg_embed_core::error::Result<Embedded> {
    changed(name, |c| *c.pointer_mut(pointer).unwrap() = value, |_| {})
}

/// The message of a load that must fail.
fn refused(result: pg_embed_core::error::Result<Embedded>) -> String {
    match result {
        Ok(e) => panic!("loaded (dim {}), expected an error", e.dim),
        Err(e) => e.to_string(),
    }
}

/// A tokenizer.json cut anywhere is an error naming it; tokenizers panicked
/// (`expect("Helper")`) on one cut inside its decoder section.
#[test]
fn truncated_tokenizer_is_an_error() {
    let bytes = std::fs::read(fixtures().join("pool_mean/tokenizer.json")).unwrap();
    let tmp = TempDir::new("tokenizer");
    copy_dir(&fixtures().join("pool_mean"), &tmp.0);
    for at in (0..bytes.len()).step_by(97).chain(bytes.len() - 40..bytes.len()) {
        std::fs::write(tmp.0.join("tokenizer.json"), &bytes[..at]).unwrap();
        let m = match Pipeline::load(&tmp.0, &Options::default()) {
            Ok(_) => panic!("a tokenizer.json cut at {at} loaded"),
            Err(e) => e.to_string(),
        };
        assert!(m.contains("tokenizer.json"), "cut at {at}: {m}");
    }
}

/// candle sizes ModernBERT's rotary tables and DeBERTa-v2's position ids by
/// max_position_embeddings (cast to u32) before it reads a weight: 2^32 - 1 positions asked
/// for 16 GB, and the allocation failure aborted the process.
#[test]
fn huge_position_counts_are_refused_before_allocating() {
    for (fixture, value) in
        [("modernbert", (1u64 << 32) - 1), ("deberta_v2", (1u64 << 32) - 1), ("modernbert", 1 << 40)]
    {
        let m = refused(with_config(fixture, "/max_position_embeddings", json!(value)));
        assert!(m.contains(&format!("unsupported max_position_embeddings \"{value}\"")), "{fixture}: {m}");
    }
    let e = with_config("modernbert", "/max_position_embeddings", json!(1u64 << 40)).err().unwrap();
    assert_eq!(e.hint().unwrap(), "Supported: at most 131072.");
    assert_eq!(pg_embed_core::models::encoder::MAX_POSITIONS, 131072);
    // Within the limit, a ModernBERT config may name more positions than it was trained for.
    assert!(with_config("modernbert", "/max_position_embeddings", json!(4096)).is_ok());
}

/// candle's ModernBERT reserves its layer list by num_hidden_layers before reading a weight:
/// 2^40 layers aborted the process.
#[test]
fn modernbert_layer_count_beyond_the_checkpoint_is_refused() {
    let m = refused(with_config("modernbert", "/num_hidden_layers", json!(1u64 << 40)));
    assert!(
        m.contains("num_hidden_layers is 1099511627776, and the checkpoint has no layer 1099511627775"),
        "{m}"
    );
    let m = refused(with_config("modernbert", "/num_hidden_layers", json!(4)));
    assert!(m.contains("no layer 3") && m.contains("model.safetensors"), "{m}");
}

/// Sizes whose products overflowed (a panic in a build with overflow checks, a wrapped
/// size otherwise): ModernBERT's 2 x intermediate_size (candle), T5's num_heads x d_kv,
/// DeBERTa-v2's 2 x max_relative_positions (candle).
#[test]
fn sizes_that_overflow_are_refused() {
    let m = refused(with_config("modernbert", "/intermediate_size", json!(u64::MAX)));
    assert!(m.contains(&format!("intermediate_size {} is too large", u64::MAX)), "{m}");
    let m = refused(with_config("t5", "/num_heads", json!(u64::MAX)));
    assert!(m.contains(&format!("num_heads {} times d_kv 8 overflows", u64::MAX)), "{m}");
    let m = refused(with_config("deberta_v2", "/max_relative_positions", json!(1u64 << 62)));
    assert!(m.contains(&format!("unsupported max_relative_positions \"{}\"", 1u64 << 62)), "{m}");
    let m = refused(with_config("deberta_v2", "/position_buckets", json!(1u64 << 62)));
    assert!(m.contains(&format!("unsupported position_buckets \"{}\"", 1u64 << 62)), "{m}");
}

/// Relative-position buckets that fall outside the table: T5 with a maximum distance not
/// above a quarter of the buckets (2 overflowed in the bucket arithmetic; 1 gave bucket
/// 4294967294 and "inference failed" on every input), MPNet with a single bucket.
#[test]
fn relative_position_buckets_outside_the_table_are_refused() {
    for distance in [0, 1, 2] {
        let m = refused(with_config("t5", "/relative_attention_max_distance", json!(distance)));
        assert!(
            m.contains(&format!(
                "relative_attention_num_buckets 8 does not work with a maximum distance of {distance}"
            )),
            "{m}"
        );
    }
    assert!(with_config("t5", "/relative_attention_max_distance", json!(3)).is_ok());
    let m = refused(changed(
        "mpnet",
        |c| c["relative_attention_num_buckets"] = 1.into(),
        |w| {
            let heads = w["encoder.relative_attention_bias.weight"].dim(1).unwrap();
            w.insert("encoder.relative_attention_bias.weight".into(), Noise(1).tensor(&[1, heads], 0.0, 0.5));
        },
    ));
    assert!(
        m.contains("relative_attention_num_buckets 1 does not work with a maximum distance of 128"),
        "{m}"
    );
}

/// A negative LayerNorm / RMSNorm epsilon gave NaN vectors from finite weights.
#[test]
fn negative_norm_epsilons_are_refused() {
    for (fixture, key) in [
        ("bert", "layer_norm_eps"),
        ("xlm_roberta", "layer_norm_eps"),
        ("mpnet", "layer_norm_eps"),
        ("deberta_v2", "layer_norm_eps"),
        ("nomic_bert", "layer_norm_eps"),
        ("modernbert", "norm_eps"),
        ("t5", "layer_norm_epsilon"),
    ] {
        let m = refused(with_config(fixture, &format!("/{key}"), json!(-1)));
        assert!(
            m.contains(&format!("{key} -1.0 is negative")) && m.contains("config.json"),
            "{fixture}: {m}"
        );
    }
}

/// A rotary base at or below 0 (or so small that it is 0 as f32) gave NaN vectors.
#[test]
fn rotary_bases_below_one_are_refused() {
    for (value, shown) in [(json!(0), "0.0"), (json!(-0.25), "-0.25"), (json!(1e-300), "1e-300")] {
        let m = refused(with_config("nomic_bert_hub", "/rotary_emb_base", value));
        assert!(m.contains(&format!("rope_theta {shown} is less than 1")), "{m}");
    }
    let m = refused(with_config("modernbert", "/rope_parameters/full_attention/rope_theta", json!(-1)));
    assert!(m.contains("rope_theta of full_attention -1.0 is less than 1"), "{m}");
}

/// A pad_token_id outside the vocabulary loaded, embedded single inputs, and failed every
/// batch that needed padding with "inference failed: index-select invalid index".
#[test]
fn pad_token_outside_the_vocabulary_is_refused() {
    let m = refused(with_config("bert", "/pad_token_id", json!(1 << 20)));
    assert!(
        m.contains("pad_token_id 1048576 is not below vocab_size 401") && m.contains("config.json"),
        "{m}"
    );
    // ModernBERT's default pad_token_id (50283) applies when the config names none.
    let m =
        refused(changed("modernbert", |c| drop(c.as_object_mut().unwrap().remove("pad_token_id")), |_| {}));
    assert!(m.contains("pad_token_id 50283 is not below vocab_size 401"), "{m}");
}

/// A CLIP text tower without `text_projection` pools its hidden state (transformers'
/// CLIPTextModel): the model stated projection_dim (16) as its dimension and returned
/// vectors of the hidden size (32).
#[test]
fn clip_without_projection_states_its_pooled_width() {
    let e = changed("clip", |_| {}, |w| drop(w.remove("text_projection.weight"))).unwrap();
    assert_eq!(e.dim, 32);
    assert!(e.together.iter().chain(&e.one_by_one).all(|v| v.len() == 32));
    let e = changed("clip", |_| {}, |_| {}).unwrap();
    assert_eq!(e.dim, 16);
    assert!(e.together.iter().all(|v| v.len() == 16));
}

/// A tokenizer that emits ids the embedding has no row for loaded, and then every input
/// failed with "inference failed: index-select invalid index" (a special token of the
/// template) or every input with that token did (a vocabulary entry).
#[test]
fn tokenizer_ids_outside_the_vocabulary_are_refused() {
    for (fixture, pointer, token) in [
        ("nomic_bert", "/post_processor/special_tokens/[CLS]/ids/0", "[CLS]"),
        ("bert", "/model/vocab/the", "the"),
    ] {
        let tmp = TempDir::new("token_ids");
        copy_dir(&fixtures().join("backbones").join(fixture), &tmp.0);
        let path = tmp.0.join("tokenizer.json");
        let mut json: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        *json.pointer_mut(pointer).unwrap() = json!(1u64 << 31);
        std::fs::write(&path, json.to_string()).unwrap();
        let m = refused(load_and_embed(&tmp.0, &Options::default(), &damaged_texts()));
        assert!(
            m.contains(&format!("token \"{token}\" has id 2147483648, not below the model's vocab_size 401"))
                && m.contains("tokenizer.json"),
            "{fixture}: {m}"
        );
    }
}

/// candle's ModernBERT compares distances with `local_attention / 2` cast to i32: a window
/// of 2^32 or more wrapped, masked every token and gave NaN vectors. Any window of twice
/// the longest input attends to everything, as a wider one does.
#[test]
fn modernbert_windows_wider_than_any_input_attend_to_everything() {
    let wide = with_config("modernbert", "/local_attention", json!(1000)).unwrap();
    for huge in [1u64 << 32, u64::MAX] {
        let e = with_config("modernbert", "/local_attention", json!(huge)).unwrap();
        assert!(e.together.iter().flatten().all(|x| x.is_finite()), "{huge}");
        assert_eq!(e.together, wide.together, "{huge}");
    }
}
