//! Reads and writes `embed.models` through SPI.

use pgrx::prelude::*;
use pgrx::JsonB;

use crate::error::{Error, Result};
use crate::pipeline::PipelineInfo;

pub struct ModelRow {
    pub source: String,
    pub options: serde_json::Value,
    pub revision: i64,
}

fn spi_err(e: pgrx::spi::SpiError) -> Error {
    Error::Catalog(e.to_string())
}

const LOOKUP: &str = "SELECT source, options, revision FROM embed.models WHERE name = $1";

thread_local! {
    /// The lookup's plan, prepared once per backend (every inference call runs it).
    static LOOKUP_PLAN: std::cell::RefCell<Option<pgrx::spi::OwnedPreparedStatement>> =
        const { std::cell::RefCell::new(None) };
}

pub fn lookup(name: &str) -> Result<ModelRow> {
    let row = Spi::connect(|client| {
        LOOKUP_PLAN.with_borrow_mut(|plan| {
            let plan = match plan {
                Some(plan) => plan,
                None => plan.insert(client.prepare(LOOKUP, &[PgBuiltInOids::TEXTOID.into()])?.keep()),
            };
            let table = client.select(&*plan, Some(1), &[name.into()])?;
            if table.is_empty() {
                return Ok(None);
            }
            table.first().get_three::<String, JsonB, i64>().map(Some)
        })
    })
    .map_err(spi_err)?;
    match row {
        Some((Some(source), Some(options), Some(revision))) => {
            Ok(ModelRow { source, options: options.0, revision })
        }
        _ => Err(Error::ModelNotRegistered(name.into())),
    }
}

/// Inserts or replaces a registration; returns its new revision.
pub fn upsert(name: &str, source: &str, options: &serde_json::Value, info: &PipelineInfo) -> Result<i64> {
    let revision = Spi::connect_mut(|client| {
        client
            .update(
                "INSERT INTO embed.models (name, source, options, task, architecture, dim, max_length, revision)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, pg_catalog.nextval('embed.model_revision'))
                 ON CONFLICT (name) DO UPDATE SET
                    source = EXCLUDED.source, options = EXCLUDED.options, task = EXCLUDED.task,
                    architecture = EXCLUDED.architecture, dim = EXCLUDED.dim,
                    max_length = EXCLUDED.max_length, revision = EXCLUDED.revision,
                    registered_at = pg_catalog.now(), registered_by = CURRENT_USER
                 RETURNING revision",
                Some(1),
                &[
                    name.into(),
                    source.into(),
                    JsonB(options.clone()).into(),
                    info.task.into(),
                    info.architecture.into(),
                    (info.dim as i32).into(),
                    (info.max_length as i32).into(),
                ],
            )?
            .first()
            .get_one::<i64>()
    })
    .map_err(spi_err)?;
    revision.ok_or_else(|| Error::Catalog("registration returned no revision".into()))
}

/// Deletes a registration; false if there was none.
pub fn delete(name: &str) -> Result<bool> {
    Spi::connect_mut(|client| {
        client
            .update("DELETE FROM embed.models WHERE name = $1 RETURNING name", None, &[name.into()])
            .map(|t| !t.is_empty())
    })
    .map_err(spi_err)
}
