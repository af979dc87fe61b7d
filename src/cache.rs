//! Per-backend model cache. A pipeline is loaded on first use and reused while the
//! catalog's revision for its name is unchanged; a re-registered model is reloaded and
//! a dropped one evicted, whichever session changed the catalog.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::catalog;
use crate::error::Result;
use crate::guc;
use crate::options::Options;
use crate::pipeline::Pipeline;
use crate::source;

struct Entry {
    revision: i64,
    pipeline: Rc<Pipeline>,
    #[allow(dead_code)] // shown by embed.loaded_models() (a later release)
    load_time: Duration,
}

thread_local! {
    static CACHE: RefCell<HashMap<String, Entry>> = RefCell::new(HashMap::new());
}

/// The pipeline for a registered model name, loading it if needed.
pub fn get(name: &str) -> Result<(Rc<Pipeline>, catalog::ModelRow)> {
    let row = match catalog::lookup(name) {
        Ok(row) => row,
        Err(e) => {
            evict(name);
            return Err(e);
        }
    };
    let cached =
        CACHE.with_borrow(|c| c.get(name).filter(|e| e.revision == row.revision).map(|e| e.pipeline.clone()));
    if let Some(p) = cached {
        return Ok((p, row));
    }
    let pipeline = load(&row.source, &Options::from_json(&row.options)?)?;
    let pipeline = insert(name, row.revision, pipeline.0, pipeline.1);
    Ok((pipeline, row))
}

/// Loads a pipeline from a source inside pg_embed.model_dir; also returns the load time.
pub fn load(source_name: &str, options: &Options) -> Result<(Pipeline, Duration)> {
    let dir = source::resolve(&guc::model_dir(), source_name)?;
    let started = Instant::now();
    let pipeline = Pipeline::load(&dir, options)?;
    Ok((pipeline, started.elapsed()))
}

pub fn insert(name: &str, revision: i64, pipeline: Pipeline, load_time: Duration) -> Rc<Pipeline> {
    let pipeline = Rc::new(pipeline);
    let entry = Entry { revision, pipeline: pipeline.clone(), load_time };
    CACHE.with_borrow_mut(|c| c.insert(name.to_string(), entry));
    pipeline
}

pub fn evict(name: &str) {
    CACHE.with_borrow_mut(|c| c.remove(name));
}
