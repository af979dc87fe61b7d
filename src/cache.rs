//! Per-backend model cache. A pipeline is loaded on first use and reused while the
//! catalog's revision for its name is unchanged; a re-registered model is reloaded and
//! a dropped one evicted, whichever session changed the catalog.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use crate::catalog;
use crate::error::Result;
use crate::guc;
use crate::options::Options;
use crate::pipeline::Pipeline;
use crate::source;

struct Entry {
    revision: i64,
    pipeline: Rc<Pipeline>,
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
    let pipeline = load(&row.source, &Options::from_json(&row.options)?)?;
    Ok((insert(name, row.revision, pipeline), row))
}

/// Loads a pipeline from a source inside pg_embed.model_dir.
pub fn load(source_name: &str, options: &Options) -> Result<Pipeline> {
    let model_dir = guc::model_dir();
    let dir = source::resolve(&model_dir, source_name)?;
    Pipeline::load_within(std::path::Path::new(&model_dir), &dir, options)
}

pub fn insert(name: &str, revision: i64, pipeline: Pipeline) -> Rc<Pipeline> {
    let pipeline = Rc::new(pipeline);
    let entry = Entry { revision, pipeline: pipeline.clone() };
    CACHE.with_borrow_mut(|c| c.insert(name.to_string(), entry));
    pipeline
}

pub fn evict(name: &str) {
    CACHE.with_borrow_mut(|c| c.remove(name));
}
