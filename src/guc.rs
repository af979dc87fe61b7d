//! `pg_embed.*` settings, registered from `_PG_init`, read through typed accessors.

use std::ffi::CString;

use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};

static MODEL_DIR: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);

pub fn register() {
    GucRegistry::define_string_guc(
        c"pg_embed.model_dir",
        c"Directory that model sources are resolved in.",
        c"Model sources are directories inside it; paths that leave it (.., absolute paths, symlinks) are refused. Superuser only.",
        &MODEL_DIR,
        GucContext::Suset,
        GucFlags::default(),
    );
}

/// `pg_embed.model_dir`, or "" when unset.
pub fn model_dir() -> String {
    MODEL_DIR.get().map(|c| c.to_string_lossy().into_owned()).unwrap_or_default()
}
