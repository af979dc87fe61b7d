//! `pg_embed.*` settings, registered from `_PG_init`, read through typed accessors.

use std::ffi::CString;

use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};

static MODEL_DIR: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
static THREADS: GucSetting<i32> = GucSetting::<i32>::new(0);
static MAX_BATCH_TOKENS: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_MAX_BATCH_TOKENS);
static HF_CACHE: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
static ALLOW_DOWNLOAD: GucSetting<bool> = GucSetting::<bool>::new(false);
static AUTO_REGISTER: GucSetting<bool> = GucSetting::<bool>::new(false);
static PRELOAD: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
static CACHE_DIR: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
static WORKERS: GucSetting<i32> = GucSetting::<i32>::new(1);
static WORKER_THREADS: GucSetting<i32> = GucSetting::<i32>::new(0);
/// 16 GB: one copy of a 7 B-parameter model in bfloat16 (about 14 GB) or of a 1.5 B one in
/// float32 (about 6 GB) fits; a 7 B one in float32 (about 28 GB) is refused.
static MAX_MODEL_SIZE: GucSetting<i32> = GucSetting::<i32>::new(16384);
/// How long a build waits for memory (ms): one minute.
static BUILDING_WAIT: GucSetting<i32> = GucSetting::<i32>::new(60_000);
/// MB all builds in progress may hold together (0: what the machine gives).
static MAX_BUILDING_MEMORY: GucSetting<i32> = GucSetting::<i32>::new(0);
/// Pillow's `Image.MAX_IMAGE_PIXELS`.
static MAX_IMAGE_PIXELS: GucSetting<i32> = GucSetting::<i32>::new(89_478_485);

static TRACK_STATS: GucSetting<bool> = GucSetting::<bool>::new(true);
static LOG_MIN_DURATION: GucSetting<i32> = GucSetting::<i32>::new(-1);

/// Padded tokens per forward pass of the array and rerank forms: bounds activation memory
/// (for a 12-layer, 384-wide model about 10 MB of activations per 1,000 tokens at short
/// lengths; attention adds batch x heads x length^2 floats).
const DEFAULT_MAX_BATCH_TOKENS: i32 = 4096;

pub fn register() {
    GucRegistry::define_int_guc(
        c"pg_embed.workers",
        c"Background workers per database that embed the queue of embed.vectorize (0: none).",
        c"Started when a table is vectorized, when a vectorized table is written in a new session, and at server start when pg_embed is in shared_preload_libraries.",
        &WORKERS,
        0,
        64,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_embed.worker_threads",
        c"Compute threads of each vectorize worker (0: one per core).",
        c"As pg_embed.threads, for the background workers of embed.vectorize.",
        &WORKER_THREADS,
        0,
        1024,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"pg_embed.model_dir",
        c"Directory that model sources are resolved in.",
        c"Model sources are directories inside it; paths that leave it (.., absolute paths, symlinks) are refused. Superuser only.",
        &MODEL_DIR,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"pg_embed.cache_dir",
        c"Directory of the prepared-weights files every backend maps (default: pg_embed_cache in the data directory; empty: no sharing).",
        c"The first backend to load a model writes its weights there as the kernels read them; every backend then maps that one file read-only. Relative paths are relative to the data directory. Superuser only.",
        &CACHE_DIR,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_embed.threads",
        c"Compute threads per backend for inference (0: one per core).",
        c"Each backend computes on its own pool of this many threads; with several busy backends, a lower value avoids oversubscribing the cores.",
        &THREADS,
        0,
        1024,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_embed.max_batch_tokens",
        c"Most padded tokens in one forward pass of embed(model, text[]) and rerank.",
        c"Inputs are grouped by length into batches of at most this many tokens (count x longest); a longer single input runs alone.",
        &MAX_BATCH_TOKENS,
        1,
        1_000_000,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"pg_embed.hf_cache",
        c"Hugging Face hub cache that hf: sources are resolved in.",
        c"Laid out as huggingface_hub lays it out (models--org--name/refs, snapshots, blobs). Unset: HF_HUB_CACHE, HF_HOME/hub or ~/.cache/huggingface/hub of the server's OS user. Superuser only.",
        &HF_CACHE,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"pg_embed.allow_download",
        c"Whether an hf: source missing from the cache is downloaded from the hub.",
        c"Off: hf: sources must already be in the cache. Only configs, tokenizers and safetensors weights are fetched. Superuser only.",
        &ALLOW_DOWNLOAD,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"pg_embed.auto_register",
        c"Whether embed('org/name', ...) registers a model that is in the hub cache but not registered.",
        c"The model is registered as hf:org/name with default options, pinned to the commit refs/main names. Superuser only.",
        &AUTO_REGISTER,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_embed.max_model_size",
        c"Largest model the server loads: its prepared weights in the model's precision (float32, bfloat16 or int8), in MB (0: no limit).",
        c"One copy of them is the shared file every backend maps (pg_embed.cache_dir), and the private memory of the backend that builds it (of every backend when pg_embed.cache_dir is ''). Checked from the safetensors headers before any weight is read, so a model over the limit is an ERROR, not an out-of-memory server. Superuser only.",
        &MAX_MODEL_SIZE,
        0,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_MB,
    );
    GucRegistry::define_int_guc(
        c"pg_embed.building_wait",
        c"How long a registration, or a load that builds a model's weights, waits for the memory it needs before it fails with SQLSTATE 53200.",
        c"A build is admitted when the memory it holds while it builds (one tensor's working memory with a shared file; the whole model when pg_embed.cache_dir is '') fits MemAvailable, the cgroup's limit and pg_embed.max_building_memory, counting every build in progress in the server. It waits (cancellably) while it does not fit. 0: never wait.",
        &BUILDING_WAIT,
        0,
        i32::MAX,
        GucContext::Userset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"pg_embed.max_building_memory",
        c"Most memory all builds of model weights in progress may hold together, in MB (0: what the machine gives).",
        c"Bounds what concurrent registrations and loads that build a model's weights hold at once, below what MemAvailable and the cgroup's limit allow; a build that does not fit waits up to pg_embed.building_wait, then fails with SQLSTATE 53200. Superuser only.",
        &MAX_BUILDING_MEMORY,
        0,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_MB,
    );
    GucRegistry::define_int_guc(
        c"pg_embed.max_image_pixels",
        c"Largest image (width x height) embed_image and classify_image decode.",
        c"Checked from the image's header before it is decoded, so a decompression bomb is an ERROR that allocates nothing. The default is Pillow's limit. Superuser only.",
        &MAX_IMAGE_PIXELS,
        1,
        i32::MAX,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"pg_embed.preload",
        c"Registered models (comma-separated) that a session loads when it starts.",
        c"Loaded by embed.preload() (called by the login event trigger embed_preload) so the first query does not pay for the load. Superuser only.",
        &PRELOAD,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"pg_embed.track_stats",
        c"Whether model calls are counted in embed.stat_models.",
        c"On by default; off stops counting (the benchmark of what counting costs compares the two). Superuser only.",
        &TRACK_STATS,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_embed.log_min_duration",
        c"Logs each model call that took at least this long (-1: none, 0: every call).",
        c"As log_min_duration_statement, for the calls of embed, classify and the other model functions: the model, the function, the inputs, tokens, truncated and chunked inputs, the time and whether the call ended in an error or a cancel. Never the input. Superuser only.",
        &LOG_MIN_DURATION,
        -1,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_MS,
    );
}

/// Whether model calls are counted (`pg_embed.track_stats`).
pub fn track_stats() -> bool {
    TRACK_STATS.get()
}

/// `pg_embed.log_min_duration` in ms; `None` when -1 (off).
pub fn log_min_duration_ms() -> Option<f64> {
    let ms = LOG_MIN_DURATION.get();
    (ms >= 0).then_some(ms as f64)
}

/// `pg_embed.max_model_size` in MB; `None` when 0 (no limit).
pub fn max_model_size_mb() -> Option<u64> {
    u64::try_from(MAX_MODEL_SIZE.get()).ok().filter(|&mb| mb > 0)
}

/// `pg_embed.building_wait`.
pub fn building_wait() -> std::time::Duration {
    std::time::Duration::from_millis(BUILDING_WAIT.get().max(0) as u64)
}

/// `pg_embed.max_building_memory` in bytes; `None` when 0 (no limit but the machine's).
pub fn max_building_memory() -> Option<u64> {
    u64::try_from(MAX_BUILDING_MEMORY.get()).ok().filter(|&mb| mb > 0).map(|mb| mb << 20)
}

/// `pg_embed.max_image_pixels`.
pub fn max_image_pixels() -> u64 {
    MAX_IMAGE_PIXELS.get().max(1) as u64
}

/// `pg_embed.hf_cache`, or "" when unset.
pub fn hf_cache() -> String {
    HF_CACHE.get().map(|c| c.to_string_lossy().into_owned()).unwrap_or_default()
}

/// `pg_embed.allow_download`.
pub fn allow_download() -> bool {
    ALLOW_DOWNLOAD.get()
}

/// `pg_embed.auto_register`.
pub fn auto_register() -> bool {
    AUTO_REGISTER.get()
}

/// The model names of `pg_embed.preload`.
pub fn preload() -> Vec<String> {
    let list = PRELOAD.get().map(|c| c.to_string_lossy().into_owned()).unwrap_or_default();
    list.split(',').map(str::trim).filter(|n| !n.is_empty()).map(String::from).collect()
}

/// `pg_embed.threads`, with 0 resolved to the machine's cores.
pub fn threads() -> usize {
    match THREADS.get() {
        n if n > 0 => n as usize,
        _ => pg_embed_core::threads::available(),
    }
}

/// `pg_embed.max_batch_tokens`.
pub fn max_batch_tokens() -> usize {
    MAX_BATCH_TOKENS.get().max(1) as usize
}

/// `pg_embed.model_dir`, or "" when unset.
pub fn model_dir() -> String {
    MODEL_DIR.get().map(|c| c.to_string_lossy().into_owned()).unwrap_or_default()
}

/// The builds of model weights in progress in the server (see
/// `pg_embed_core::prepared::budget`): `$PGDATA/pg_embed_building`.
pub fn building_dir() -> std::path::PathBuf {
    data_dir().join("pg_embed_building")
}

const DEFAULT_CACHE_DIR: &str = "pg_embed_cache";

/// The data directory.
fn data_dir() -> std::path::PathBuf {
    // SAFETY: DataDir is set before any backend runs SQL and never changes after.
    let dir = unsafe { pgrx::pg_sys::DataDir };
    if dir.is_null() {
        std::path::PathBuf::from(".")
    } else {
        // SAFETY: a NUL-terminated C string owned by the server.
        std::path::PathBuf::from(unsafe { std::ffi::CStr::from_ptr(dir) }.to_string_lossy().into_owned())
    }
}

/// `pg_embed.cache_dir` resolved against the data directory: unset is
/// `$PGDATA/pg_embed_cache`; set to the empty string, `None` (weights stay private).
pub fn cache_dir() -> Option<std::path::PathBuf> {
    match CACHE_DIR.get() {
        None => Some(data_dir().join(DEFAULT_CACHE_DIR)),
        Some(s) if s.is_empty() => None,
        Some(s) => Some(data_dir().join(s.to_string_lossy().into_owned())),
    }
}

/// `pg_embed.workers`: vectorize workers per database.
pub fn workers() -> i32 {
    WORKERS.get()
}

/// `pg_embed.worker_threads`: compute threads of a vectorize worker (0: one per core).
pub fn worker_threads() -> i32 {
    WORKER_THREADS.get()
}
