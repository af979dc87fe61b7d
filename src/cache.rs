//! Per-backend model cache. A pipeline is loaded on first use and reused while the
//! catalog's revision for its name is unchanged; a re-registered model is reloaded and
//! a dropped one evicted, whichever session changed the catalog.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use crate::catalog;
use crate::guc;
use pg_embed_core::error::{Error, Result};
use pg_embed_core::hub::{self, HubSource, Pin};
use pg_embed_core::options::Options;
use pg_embed_core::pipeline::Pipeline;
use pg_embed_core::source;

struct Entry {
    revision: i64,
    pipeline: Rc<Pipeline>,
    load_ms: f64,
    bytes_resident: u64,
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
    // A stale entry is dropped before the reload, so two copies never coexist.
    let cached = CACHE.with_borrow_mut(|c| match c.get(name) {
        Some(e) if e.revision == row.revision => Some(e.pipeline.clone()),
        Some(_) => {
            c.remove(name);
            None
        }
        None => None,
    });
    if let Some(p) = cached {
        return Ok((p, row));
    }
    let pipeline = load(&row.source, &Options::from_json(&row.options)?, row.pin.as_ref())?;
    Ok((insert(name, row.revision, pipeline), row))
}

/// `embed('org/name', ...)` for a model that is not registered but is in the hub cache,
/// with pg_embed.auto_register on: registered as `hf:org/name` with default options.
fn auto_register(name: &str) -> Result<(Rc<Pipeline>, catalog::ModelRow)> {
    let source = format!("hf:{name}");
    let fresh = match load(&source, &Options::default(), None) {
        Ok(fresh) => fresh,
        Err(Error::NotInHubCache { .. } | Error::InvalidSource { .. }) => {
            return Err(Error::ModelNotRegistered(name.into()))
        }
        Err(e) => return Err(e),
    };
    let options = serde_json::json!({});
    let revision =
        catalog::upsert_as_owner(name, &source, &options, fresh.pipeline.info(), fresh.pin.as_ref())?;
    let row = catalog::ModelRow { source, options, revision, pin: fresh.pin.clone() };
    Ok((insert(name, revision, fresh), row))
}

/// A pipeline loaded from a source, with what the load cost and, for a hub source, what
/// its registration pins.
pub struct Fresh {
    pub pipeline: Pipeline,
    pub pin: Option<Pin>,
    load_ms: f64,
    bytes_resident: u64,
}

/// Loads a pipeline from a source: a directory inside pg_embed.model_dir, or `hf:` from the
/// hub cache (at the pinned commit, its files verified, when `pin` is given).
pub fn load(source_name: &str, options: &Options, pin: Option<&Pin>) -> Result<Fresh> {
    let (started, rss) = (std::time::Instant::now(), resident_bytes());
    let (pipeline, pin) = match HubSource::parse(source_name) {
        None => {
            let model_dir = guc::model_dir();
            let dir = source::resolve(&model_dir, source_name)?;
            check_size(source_name, &dir)?;
            (Pipeline::load_within(std::path::Path::new(&model_dir), &dir, options)?, None)
        }
        Some(parsed) => {
            let mut hub_source = parsed?;
            if let Some(pin) = pin {
                hub_source.revision = pin.commit.clone();
            }
            let cache = hub::cache_dir(&guc::hf_cache())?;
            let snapshot = match hub_source.find(&cache) {
                Err(Error::NotInHubCache { .. }) if guc::allow_download() => {
                    hub::download(&cache, &hub_source)?
                }
                found => found?,
            };
            let files = match pin {
                Some(pin) => {
                    hub::verify(&snapshot.repo_dir, &snapshot.dir, &pin.files)?;
                    pin.files.clone()
                }
                None => hub::digests(&snapshot.repo_dir, &snapshot.dir)?,
            };
            check_size(source_name, &snapshot.dir)?;
            let pipeline = Pipeline::load_within(&snapshot.repo_dir, &snapshot.dir, options)?;
            (pipeline, Some(Pin { commit: snapshot.commit, files }))
        }
    };
    Ok(Fresh {
        pipeline,
        pin,
        load_ms: started.elapsed().as_secs_f64() * 1e3,
        bytes_resident: resident_bytes().saturating_sub(rss),
    })
}

pub fn insert(name: &str, revision: i64, fresh: Fresh) -> Rc<Pipeline> {
    let pipeline = Rc::new(fresh.pipeline);
    let entry = Entry {
        revision,
        pipeline: pipeline.clone(),
        load_ms: fresh.load_ms,
        bytes_resident: fresh.bytes_resident,
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

/// Refuses a model whose weights exceed pg_embed.max_model_size, before reading them.
fn check_size(source_name: &str, dir: &std::path::Path) -> Result<()> {
    let Some(limit_mb) = guc::max_model_size_mb() else {
        return Ok(());
    };
    let mb = pg_embed_core::weights::weight_bytes(dir)?.div_ceil(1 << 20);
    if mb > limit_mb {
        return Err(Error::ModelTooLarge { source_name: source_name.into(), mb, limit_mb });
    }
    Ok(())
}

/// The process's resident set size (0 where /proc is not available).
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    // SAFETY: sysconf only reads a system constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).unwrap_or(4096)
}
