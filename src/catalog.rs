//! Reads and writes `embed.models` through SPI.

use pgrx::prelude::*;
use pgrx::JsonB;

use pg_embed_core::error::{Error, Result};
use pg_embed_core::hub::Pin;
use pg_embed_core::pipeline::PipelineInfo;

pub struct ModelRow {
    pub source: String,
    pub options: serde_json::Value,
    pub revision: i64,
    /// For `hf:` sources: the commit and file digests recorded at registration.
    pub pin: Option<Pin>,
    /// Why the model must be registered again (an upgrade changed what it computes).
    pub needs_registration: Option<String>,
}

fn spi_err(e: pgrx::spi::SpiError) -> Error {
    Error::Catalog(e.to_string())
}

// `needs_registration` through the row's JSON: a schema not yet updated to 0.7.0 (the
// library is, the catalog is not) has no such column.
const LOOKUP: &str = "SELECT source, options, revision, resolved_revision, file_sha256, \
     pg_catalog.to_jsonb(m) OPERATOR(pg_catalog.->>) 'needs_registration' FROM embed.models m WHERE name = $1";

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
            let row = table.first();
            let (source, options, revision) = row.get_three::<String, JsonB, i64>()?;
            let commit = row.get::<String>(4)?;
            let files = row.get::<JsonB>(5)?;
            let again = row.get::<String>(6)?;
            Ok::<Option<Columns>, pgrx::spi::SpiError>(Some((source, options, revision, commit, files, again)))
        })
    })
    .map_err(spi_err)?;
    match row {
        Some(row) => model_row(name, row),
        None => Err(Error::ModelNotRegistered(name.into())),
    }
}

type Columns = (Option<String>, Option<JsonB>, Option<i64>, Option<String>, Option<JsonB>, Option<String>);

/// A row of `embed.models` from the columns of [`LOOKUP`].
fn model_row(name: &str, (source, options, revision, commit, files, again): Columns) -> Result<ModelRow> {
    let (Some(source), Some(options), Some(revision)) = (source, options, revision) else {
        return Err(Error::ModelNotRegistered(name.into()));
    };
    let pin = match (commit, files) {
        (Some(commit), Some(files)) => Some(Pin {
            commit,
            files: serde_json::from_value(files.0)
                .map_err(|e| Error::Catalog(format!("file_sha256 of model \"{name}\": {e}")))?,
        }),
        _ => None,
    };
    Ok(ModelRow { source, options: options.0, revision, pin, needs_registration: again })
}

/// Every registration by name, in name order (rows that do not parse are left out).
pub fn all_rows() -> Result<Vec<(String, ModelRow)>> {
    let rows = Spi::connect(|client| {
        let table = client.select(
            "SELECT name, source, options, revision, resolved_revision, file_sha256, \
             pg_catalog.to_jsonb(m) OPERATOR(pg_catalog.->>) 'needs_registration' FROM embed.models m ORDER BY name",
            None,
            &[],
        )?;
        let mut rows = Vec::new();
        for row in table {
            let name = row.get::<String>(1)?.unwrap_or_default();
            let columns = (row.get(2)?, row.get(3)?, row.get(4)?, row.get(5)?, row.get(6)?, row.get(7)?);
            rows.push((name, columns));
        }
        Ok::<_, pgrx::spi::SpiError>(rows)
    })
    .map_err(spi_err)?;
    Ok(rows.into_iter().filter_map(|(name, columns)| model_row(&name, columns).ok().map(|row| (name, row))).collect())
}

/// Inserts or replaces a registration; returns its new revision.
pub fn upsert(
    name: &str,
    source: &str,
    options: &serde_json::Value,
    info: &PipelineInfo,
    pin: Option<&Pin>,
    registered_by: &str,
) -> Result<i64> {
    let files = pin.map(|p| JsonB(serde_json::json!(p.files)));
    let revision = Spi::connect_mut(|client| {
        client
            .update(
                "INSERT INTO embed.models (name, source, options, task, architecture, dim, max_length, revision,
                                           resolved_revision, file_sha256, registered_by, modality, preprocessing)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, pg_catalog.nextval('embed.model_revision'), $8, $9,
                         $10::text::name, $11, $12)
                 ON CONFLICT (name) DO UPDATE SET
                    source = EXCLUDED.source, options = EXCLUDED.options, task = EXCLUDED.task,
                    architecture = EXCLUDED.architecture, dim = EXCLUDED.dim,
                    modality = EXCLUDED.modality, preprocessing = EXCLUDED.preprocessing,
                    max_length = EXCLUDED.max_length, revision = EXCLUDED.revision,
                    resolved_revision = EXCLUDED.resolved_revision, file_sha256 = EXCLUDED.file_sha256,
                    registered_at = pg_catalog.now(), registered_by = EXCLUDED.registered_by
                 RETURNING revision",
                Some(1),
                &[
                    name.into(),
                    source.into(),
                    JsonB(options.clone()).into(),
                    info.task.into(),
                    info.architecture.into(),
                    (info.dim as i32).into(),
                    (info.max_length > 0).then_some(info.max_length as i32).into(),
                    pin.map(|p| p.commit.clone()).into(),
                    files.into(),
                    registered_by.into(),
                    info.modality.name().into(),
                    info.preprocessing.clone().map(JsonB).into(),
                ],
            )?
            .first()
            .get_one::<i64>()
    })
    .map_err(spi_err)?;
    let revision = revision.ok_or_else(|| Error::Catalog("registration returned no revision".into()))?;
    clear_mark(name)?;
    Ok(revision)
}

/// A registration made again is current: the mark an upgrade left on it goes (a schema
/// before 0.7.0 has no marks).
fn clear_mark(name: &str) -> Result<()> {
    let marked = Spi::get_one_with_args::<bool>(
        "SELECT pg_catalog.to_jsonb(m) OPERATOR(pg_catalog.->>) 'needs_registration' IS NOT NULL \
         FROM embed.models m WHERE name = $1",
        &[name.into()],
    )
    .map_err(spi_err)?;
    if marked == Some(true) {
        Spi::run_with_args("UPDATE embed.models SET needs_registration = NULL WHERE name = $1", &[name.into()])
            .map_err(spi_err)?;
    }
    Ok(())
}

/// Marks `name`'s registration: its calls fail with `reason` until it is registered again.
pub fn mark_register_again(name: &str, reason: &str) -> Result<()> {
    Spi::run_with_args(
        "UPDATE embed.models SET needs_registration = $2 WHERE name = $1",
        &[name.into(), reason.into()],
    )
    .map_err(spi_err)
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

/// Calls that write the catalog run on the primary only: on a hot standby they fail before
/// any work, with a message that says where to run them.
pub fn require_primary(function: &'static str) -> Result<()> {
    // SAFETY: a read of shared recovery state, valid in any backend.
    if unsafe { pg_sys::RecoveryInProgress() } {
        Err(Error::HotStandby { function })
    } else {
        Ok(())
    }
}

/// Whether the current role may register and drop models: a superuser, or a role with the
/// privileges of `embed_admin`.
pub fn is_admin() -> bool {
    // SAFETY: these read the current role and the role catalog; get_role_oid with
    // missing_ok returns InvalidOid instead of raising when the role does not exist.
    unsafe {
        if pg_sys::superuser() {
            return true;
        }
        let admin = pg_sys::get_role_oid(c"embed_admin".as_ptr(), true);
        admin != pg_sys::InvalidOid && pg_sys::has_privs_of_role(pg_sys::GetUserId(), admin)
    }
}

/// The current role's name.
pub fn current_user() -> Result<String> {
    Spi::get_one::<String>("SELECT current_user::text")
        .map_err(spi_err)?
        .ok_or_else(|| Error::Catalog("no current user".into()))
}

/// Restores the user id and security context saved when it was made (a transaction or
/// subtransaction abort restores them too).
struct AsUser {
    saved: (pg_sys::Oid, i32),
}

impl AsUser {
    fn switch_to(user: pg_sys::Oid) -> Self {
        let mut saved = (pg_sys::InvalidOid, 0);
        // SAFETY: saving and setting the current user id, as Postgres does to run
        // maintenance commands as a table's owner; Drop restores it.
        unsafe {
            pg_sys::GetUserIdAndSecContext(&mut saved.0, &mut saved.1);
            pg_sys::SetUserIdAndSecContext(user, saved.1 | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32);
        }
        AsUser { saved }
    }
}

impl Drop for AsUser {
    fn drop(&mut self) {
        // SAFETY: restores what switch_to saved.
        unsafe { pg_sys::SetUserIdAndSecContext(self.saved.0, self.saved.1) }
    }
}

/// As [`upsert`], run as the owner of `embed.models`: auto-registration (pg_embed.auto_register,
/// which only a superuser turns on) by a role that may not register models itself. The
/// calling role is recorded as `registered_by`.
pub fn upsert_as_owner(
    name: &str,
    source: &str,
    options: &serde_json::Value,
    info: &PipelineInfo,
    pin: Option<&Pin>,
) -> Result<i64> {
    let user = current_user()?;
    let owner = Spi::get_one::<pg_sys::Oid>(
        "SELECT relowner FROM pg_catalog.pg_class WHERE oid = 'embed.models'::regclass",
    )
    .map_err(spi_err)?
    .ok_or_else(|| Error::Catalog("embed.models has no owner".into()))?;
    let _owner = AsUser::switch_to(owner);
    upsert(name, source, options, info, pin, &user)
}

/// The OIDs of the server's databases (pg_database is shared: every database sees all).
pub fn database_oids() -> Result<std::collections::BTreeSet<u32>> {
    Spi::connect(|client| {
        client
            .select("SELECT oid FROM pg_catalog.pg_database", None, &[])?
            .map(|row| row.get::<pg_sys::Oid>(1).map(|o| o.map_or(0, |o| o.to_u32())))
            .collect::<std::result::Result<_, _>>()
    })
    .map_err(spi_err)
}

/// Carries a registration (`action` "register", with its source and options) or a drop
/// ("drop") to every other primary of a Citus cluster when this node is its coordinator
/// (`embed._cluster_apply`, which does nothing elsewhere): all nodes or none, an error
/// naming the node that refused. Called after this node's own catalog write, in the same
/// transaction, so that an error here undoes that write too.
pub fn cluster_apply(action: &str, name: &str, source: Option<&str>, options: Option<&serde_json::Value>) -> Result<()> {
    // A schema not yet updated to 0.4.0 (the library is, the catalog is not) has none.
    let present = Spi::get_one::<bool>(
        "SELECT pg_catalog.to_regprocedure('embed._cluster_apply(text, text, text, jsonb, boolean)') IS NOT NULL",
    )
    .map_err(spi_err)?;
    if present != Some(true) {
        return Ok(());
    }
    // SAFETY: reads the current transaction's state.
    let in_block = unsafe { pg_sys::IsTransactionBlock() };
    Spi::connect_mut(|client| {
        client
            .update(
                "SELECT embed._cluster_apply($1, $2, $3, $4, $5)",
                Some(1),
                &[
                    action.into(),
                    name.into(),
                    source.into(),
                    options.map(|o| JsonB(o.clone())).into(),
                    in_block.into(),
                ],
            )
            .map(|_| ())
    })
    .map_err(spi_err)
}
