//! Per-backend model cache. A pipeline is loaded on first use and reused while the
//! catalog's revision for its name is unchanged; a re-registered model is reloaded and
//! a dropped one evicted, whichever session changed the catalog.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::rc::Rc;

use crate::catalog;
use crate::guc;
use pg_embed_core::error::{Error, Result};
use pg_embed_core::hub::{self, HubSource, Pin};
use pg_embed_core::options::Options;
use pg_embed_core::pipeline::{Pipeline, Share};
use pg_embed_core::prepared::{budget, key, FileInfo, Store};
use pg_embed_core::source;

struct Entry {
    revision: i64,
    pipeline: Rc<Pipeline>,
    load_ms: f64,
    bytes_resident: u64,
    bytes_private: u64,
    /// Whether a failure to write the shared file was reported.
    write_reported: bool,
}

/// One model in this backend's cache, as `embed.loaded_models()` shows it.
pub struct Loaded {
    pub name: String,
    pub revision: i64,
    pub pipeline: Rc<Pipeline>,
    /// Time to load it (read, check and prepare the files).
    pub load_ms: f64,
    /// Growth of the backend's resident memory while it loaded.
    pub bytes_resident: u64,
    /// Growth of its private (anonymous) resident memory while it loaded.
    pub bytes_private: u64,
}

thread_local! {
    static CACHE: RefCell<HashMap<String, Entry>> = RefCell::new(HashMap::new());
}

/// The pipeline for a registered model name, loading it if needed.
pub fn get(name: &str) -> Result<(Rc<Pipeline>, catalog::ModelRow)> {
    let row = match catalog::lookup(name) {
        Ok(row) => row,
        Err(Error::ModelNotRegistered(_)) if guc::auto_register() && name.contains('/') => {
            return auto_register(name);
        }
        Err(e) => {
            evict(name);
            return Err(e);
        }
    };
    if let Some(reason) = &row.needs_registration {
        evict(name);
        return Err(Error::RegisterAgain { name: name.into(), reason: reason.clone() });
    }
    // A stale entry is dropped before the reload, so two copies never coexist.
    let cached = CACHE.with_borrow_mut(|c| match c.get_mut(name) {
        Some(e) if e.revision == row.revision => {
            // This backend built the weights: once their shared file is written it maps the
            // file instead (the private copy is freed); if the file could not be written (or
            // mapping it failed), it says why, once, and keeps its copy.
            let written = e.pipeline.sharing().writing.as_ref().and_then(|w| w.result());
            match written {
                Some(Ok(_)) if !e.write_reported => Some(Err(c.remove(name))),
                Some(Err(why)) if !e.write_reported => {
                    e.write_reported = true;
                    warn_private(name, why);
                    Some(Ok(e.pipeline.clone()))
                }
                _ => Some(Ok(e.pipeline.clone())),
            }
        }
        Some(_) => {
            c.remove(name);
            None
        }
        None => None,
    });
    let carried = match cached {
        Some(Ok(p)) => return Ok((p, row)),
        Some(Err(built)) => built,
        None => None,
    };
    let loaded = Options::from_json(&row.options).and_then(|o| load(name, &row.source, &o, row.pin.as_ref()));
    let fresh = match (loaded, carried) {
        (Ok(fresh), carried) => {
            if let Some(old) = carried {
                fresh.pipeline.carry_stats(&old.pipeline);
            }
            fresh
        }
        (Err(e), Some(mut old)) => {
            warn_private(name, e);
            old.write_reported = true;
            let pipeline = old.pipeline.clone();
            CACHE.with_borrow_mut(|c| c.insert(name.to_string(), old));
            return Ok((pipeline, row));
        }
        (Err(e), None) => return Err(e),
    };
    Ok((insert(name, row.revision, fresh), row))
}

/// `embed('org/name', ...)` for a model that is not registered but is in the hub cache,
/// with pg_embed.auto_register on: registered as `hf:org/name` with default options.
fn auto_register(name: &str) -> Result<(Rc<Pipeline>, catalog::ModelRow)> {
    catalog::require_primary("auto-registration (pg_embed.auto_register)")?;
    let source = format!("hf:{name}");
    let fresh = match load(name, &source, &Options::default(), None) {
        Ok(fresh) => fresh,
        Err(Error::NotInHubCache { .. } | Error::InvalidSource { .. }) => {
            return Err(Error::ModelNotRegistered(name.into()))
        }
        Err(e) => return Err(e),
    };
    let options = serde_json::json!({});
    let revision =
        catalog::upsert_as_owner(name, &source, &options, fresh.pipeline.info(), fresh.pin.as_ref())?;
    let row = catalog::ModelRow { source, options, revision, pin: fresh.pin.clone(), needs_registration: None };
    Ok((insert(name, revision, fresh), row))
}

/// A pipeline loaded from a source, with what the load cost and, for a hub source, what
/// its registration pins.
pub struct Fresh {
    pub pipeline: Pipeline,
    pub pin: Option<Pin>,
    load_ms: f64,
    bytes_resident: u64,
    bytes_private: u64,
}

/// A source resolved to its folder: `root` is what its files must lie inside.
struct Resolved {
    root: PathBuf,
    dir: PathBuf,
    pin: Option<Pin>,
}

/// The store of shared prepared-weights files (`pg_embed.cache_dir`), unless sharing is off.
pub fn store() -> Result<Option<Store>> {
    guc::cache_dir().map(|dir| Store::open(&dir)).transpose()
}

/// A source's folder: a directory inside pg_embed.model_dir, or `hf:` from the hub cache
/// (at the pinned commit, its files verified, when `pin` is given).
fn resolve(source_name: &str, pin: Option<&Pin>, store: Option<&Store>) -> Result<Resolved> {
    let Some(parsed) = HubSource::parse(source_name) else {
        let model_dir = guc::model_dir();
        let dir = source::resolve(&model_dir, source_name)?;
        return Ok(Resolved { root: PathBuf::from(model_dir), dir, pin: None });
    };
    let mut hub_source = parsed?;
    if let Some(pin) = pin {
        hub_source.revision = pin.commit.clone();
    }
    let cache = hub::cache_dir(&guc::hf_cache())?;
    let snapshot = match hub_source.find(&cache) {
        Err(Error::NotInHubCache { .. }) if guc::allow_download() => hub::download(&cache, &hub_source)?,
        found => found?,
    };
    // The files' digests, remembered in the store when there is one (a file rewritten
    // since is hashed again).
    let actual = match store {
        Some(store) => key::dir_digests(&store.dir().join("digests"), &snapshot.repo_dir, &snapshot.dir)?,
        None => hub::digests(&snapshot.repo_dir, &snapshot.dir)?,
    };
    let files = match pin {
        Some(pin) => {
            hub::verify_digests(&snapshot.dir, &actual, &pin.files)?;
            pin.files.clone()
        }
        None => actual,
    };
    let pin = Some(Pin { commit: snapshot.commit, files });
    Ok(Resolved { root: snapshot.repo_dir, dir: snapshot.dir, pin })
}

/// A registration's folder, as its calls read it (the pinned snapshot of an `hf:` source).
pub fn folder_of(row: &catalog::ModelRow) -> Result<PathBuf> {
    Ok(resolve(&row.source, row.pin.as_ref(), None)?.dir)
}

/// Loads a pipeline from a source (see [`resolve`]), its weights mapped from the shared
/// prepared file (written first if there is none) unless sharing is off. `model` labels a
/// new file.
pub fn load(model: &str, source_name: &str, options: &Options, pin: Option<&Pin>) -> Result<Fresh> {
    let (started, rss, anon) = (std::time::Instant::now(), resident_bytes(), anonymous_bytes());
    let store = match store() {
        Ok(store) => store,
        Err(e) => {
            warn_private(model, e);
            None
        }
    };
    let r = resolve(source_name, pin, store.as_ref())?;
    check_size(source_name, &r.dir, options)?;
    let interrupt = || -> Result<()> {
        pgrx::check_for_interrupts!();
        Ok(())
    };
    // The admission of a build's memory: one tensor's working memory when it builds into
    // the shared file, the whole model when it stays private.
    let what = format!("model \"{model}\"");
    let admit = |shared: bool| -> Result<budget::Reservation> {
        let request = budget::Request {
            what: &what,
            need: budget::need(&r.dir, options.precision.unwrap_or_default(), shared)?,
            limit: guc::max_building_memory(),
            wait: guc::building_wait(),
        };
        budget::Ledger::open(&guc::building_dir())?.admit(&request, &budget::Room::now, &interrupt)
    };
    let admit_shared = || admit(true);
    let share = store.as_ref().map(|store| Share {
        store,
        files: r.pin.as_ref().map(|p| &p.files),
        model,
        source: source_name,
        interrupt: &interrupt,
        admit: Some(&admit_shared),
    });
    let admitted = if share.is_none() { Some(admit(false)?) } else { None };
    let pipeline = Pipeline::load_shared(&r.root, &r.dir, options, share.as_ref())?;
    drop(admitted);
    // This database needs the file it maps: noted for the other databases' cleanups.
    if let (Some(store), Some(key)) = (store.as_ref(), pipeline.sharing().file.as_ref().and_then(|f| f.file_stem())) {
        if let Err(e) = store.note_needed(this_database(), &key.to_string_lossy()) {
            pgrx::warning!("pg_embed: model \"{model}\": {e}");
        }
    }
    if let Some(note) = pipeline.sharing().note.as_deref() {
        pgrx::warning!("pg_embed: model \"{model}\": {note}");
    }
    let load_ms = started.elapsed().as_secs_f64() * 1e3;
    crate::stats::count_load(model, source_name, load_ms, pipeline.sharing().shared_bytes);
    Ok(Fresh {
        pipeline,
        pin: r.pin,
        load_ms,
        bytes_resident: resident_bytes().saturating_sub(rss),
        bytes_private: anonymous_bytes().saturating_sub(anon),
    })
}

/// Waits (cancellably) until the shared file `fresh` is writing is in place; a write that
/// failed is a WARNING (the weights stay private).
pub fn wait_written(model: &str, fresh: &Fresh) {
    let Some(writing) = fresh.pipeline.sharing().writing.as_ref() else { return };
    let result = loop {
        if let Some(r) = writing.result() {
            break r;
        }
        pgrx::check_for_interrupts!();
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    if let Err(why) = result {
        warn_private(model, why);
    }
}

/// The WARNING of a backend whose weights of `model` stay private (not shared), and why.
fn warn_private(model: &str, why: impl std::fmt::Display) {
    pgrx::warning!("pg_embed: the weights of model \"{model}\" stay private in this backend: {why}");
}

/// The prepared-file key of a registered model as it would load now.
fn key_of(store: &Store, row: &catalog::ModelRow) -> Result<String> {
    let r = resolve(&row.source, row.pin.as_ref(), Some(store))?;
    let options = Options::from_json(&row.options)?;
    pg_embed_core::pipeline::prepared_key(store, &r.root, &r.dir, &options, r.pin.as_ref().map(|p| &p.files))
}

/// The files of a registered model's folder and their sha256, as it would load now: an
/// `hf:` source's pinned digests (verified), a folder's as read (memoized in the store).
pub fn file_digests(row: &catalog::ModelRow) -> Result<Vec<(String, String)>> {
    let store = store()?;
    let r = resolve(&row.source, row.pin.as_ref(), store.as_ref())?;
    let files = match (r.pin, store.as_ref()) {
        (Some(pin), _) => pin.files,
        (None, Some(store)) => key::dir_digests(&store.dir().join("digests"), &r.root, &r.dir)?,
        (None, None) => hub::digests(&r.root, &r.dir)?,
    };
    Ok(files.into_iter().collect())
}

/// The keys of the prepared files a registered model of any database of the server needs:
/// this database's registrations, resolved now as its loads resolve them (a model whose
/// files cannot be read now needs none), and what the other databases noted of theirs (see
/// `Store::needed_server_wide`).
pub fn needed_keys(store: &Store) -> Result<BTreeSet<String>> {
    let own = catalog::all_rows()?.iter().filter_map(|(_, row)| key_of(store, row).ok()).collect();
    let databases = catalog::database_oids()?;
    store.needed_server_wide(this_database(), &own, &databases)
}

fn this_database() -> u32 {
    // SAFETY: reads a backend global.
    unsafe { pgrx::pg_sys::MyDatabaseId }.to_u32()
}

/// Removes the shared files no registered model needs; what was removed.
pub fn cleanup() -> Result<Vec<FileInfo>> {
    let Some(store) = store()? else { return Ok(Vec::new()) };
    let needed = needed_keys(&store)?;
    store.remove_unneeded(&needed)
}

pub fn insert(name: &str, revision: i64, fresh: Fresh) -> Rc<Pipeline> {
    let pipeline = Rc::new(fresh.pipeline);
    let entry = Entry {
        revision,
        pipeline: pipeline.clone(),
        load_ms: fresh.load_ms,
        bytes_resident: fresh.bytes_resident,
        bytes_private: fresh.bytes_private,
        write_reported: false,
    };
    CACHE.with_borrow_mut(|c| c.insert(name.to_string(), entry));
    pipeline
}

pub fn evict(name: &str) {
    CACHE.with_borrow_mut(|c| c.remove(name));
}

/// This backend's cached models, by name.
pub fn loaded() -> Vec<Loaded> {
    let mut all: Vec<Loaded> = CACHE.with_borrow(|c| {
        c.iter()
            .map(|(name, e)| Loaded {
                name: name.clone(),
                revision: e.revision,
                pipeline: e.pipeline.clone(),
                load_ms: e.load_ms,
                bytes_resident: e.bytes_resident,
                bytes_private: e.bytes_private,
            })
            .collect()
    });
    all.sort_by(|a, b| a.name.cmp(&b.name));
    all
}

/// Drops `name` (every model when `None`) from this backend's cache; how many were dropped.
pub fn unload(name: Option<&str>) -> usize {
    CACHE.with_borrow_mut(|c| match name {
        Some(name) => usize::from(c.remove(name).is_some()),
        None => c.drain().count(),
    })
}

/// Refuses a model whose prepared weights, in the precision its options ask for, exceed
/// pg_embed.max_model_size, before reading them: one copy of them is the server's shared
/// file (and the private memory of every backend that loads the model when sharing is off).
fn check_size(source_name: &str, dir: &std::path::Path, options: &Options) -> Result<()> {
    let Some(limit_mb) = guc::max_model_size_mb() else {
        return Ok(());
    };
    let precision = options.precision.unwrap_or_default();
    let mb = pg_embed_core::weights::prepared_bytes(dir, precision)?.div_ceil(1 << 20);
    if mb > limit_mb {
        return Err(Error::ModelTooLarge { source_name: source_name.into(), mb, limit_mb, precision: precision.name() });
    }
    Ok(())
}

/// The process's private resident memory, RssAnon (0 where /proc is not available).
fn anonymous_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok());
    kb.unwrap_or(0) * 1024
}

/// The process's resident set size (0 where /proc is not available).
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    // SAFETY: sysconf only reads a system constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).unwrap_or(4096)
}
