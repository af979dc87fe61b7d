//! What names a prepared file: a sha256 over everything that determines its contents — the
//! model files' sha256 (every file of the model folder, and head files from the options), the
//! options, the pg_embed version, the file format and the kernels' weight layout. Files
//! written by another release or for another CPU's layout are never read by this one.
//!
//! Hashing a model's files takes time (a 2.4 GB checkpoint: seconds), so each file's
//! digest is remembered in the cache directory's `digests/` folder beside its size, times,
//! inode and device: a file that was replaced or rewritten since is hashed again.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// The key of a prepared file: hex sha256 of the canonical description of its inputs.
pub fn key(files: &BTreeMap<String, String>, options: &serde_json::Value) -> String {
    let described = serde_json::json!({
        "format": super::file::FORMAT,
        "pg_embed": env!("CARGO_PKG_VERSION"),
        "layout": crate::kernels::float32::layout(),
        "options": options,
        "files": files,
    });
    hex(&Sha256::digest(described.to_string().as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What a remembered digest was computed for.
#[derive(Serialize, Deserialize, PartialEq)]
struct Stamp {
    path: String,
    len: u64,
    mtime_ns: i64,
    ctime_ns: i64,
    ino: u64,
    dev: u64,
}

#[derive(Serialize, Deserialize)]
struct Remembered {
    stamp: Stamp,
    sha256: String,
}

fn stamp(path: &Path) -> Result<Stamp> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    Ok(Stamp {
        path: path.to_string_lossy().into_owned(),
        len: meta.len(),
        mtime_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
        ctime_ns: meta.ctime() * 1_000_000_000 + meta.ctime_nsec(),
        ino: meta.ino(),
        dev: meta.dev(),
    })
}

/// The remembered sha256 of the file at `path`, if its stamp still matches.
fn remembered(memo_dir: &Path, now: &Stamp) -> Option<String> {
    let memo = memo_dir.join(hex(&Sha256::digest(now.path.as_bytes())));
    let r = serde_json::from_slice::<Remembered>(&std::fs::read(memo).ok()?).ok()?;
    (r.stamp == *now).then_some(r.sha256)
}

/// sha256 (hex) of the file at `path`, remembered under `memo_dir`.
pub fn file_digest(memo_dir: &Path, path: &Path) -> Result<String> {
    let now = stamp(path)?;
    if let Some(sha256) = remembered(memo_dir, &now) {
        return Ok(sha256);
    }
    let memo = memo_dir.join(hex(&Sha256::digest(now.path.as_bytes())));
    let sha256 = crate::hub::sha256_file(path)?;
    // The stamp from before the hash: a file rewritten meanwhile is hashed again next time.
    let remembered = Remembered { stamp: now, sha256: sha256.clone() };
    if std::fs::create_dir_all(memo_dir).is_ok() {
        let tmp = super::file::temporary_name(&memo);
        if serde_json::to_vec(&remembered).ok().is_some_and(|b| std::fs::write(&tmp, b).is_ok()) {
            let _ = std::fs::rename(&tmp, &memo);
        }
    }
    Ok(sha256)
}

/// The files under `dir`, links followed; every file must lie inside `root`.
fn model_files(root: &Path, dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    crate::files::files_under(dir, crate::source::admit_inside(root, "model file"))
}

/// The files under `dir` (links followed, every file inside `root`) and their stamps (size,
/// times, inode): what a file's remembered digest is valid for.
pub fn dir_stamps(root: &Path, dir: &Path) -> Result<Vec<(String, String)>> {
    model_files(root, dir)?
        .into_iter()
        .map(|path| Ok((path.to_string_lossy().into_owned(), serde_json::to_string(&stamp(&path)?).unwrap_or_default())))
        .collect()
}

/// As [`dir_digests`] when every digest is remembered and still valid; `None` when some
/// file would have to be hashed.
pub fn remembered_dir_digests(memo_dir: &Path, root: &Path, dir: &Path) -> Result<Option<BTreeMap<String, String>>> {
    let mut out = BTreeMap::new();
    for path in model_files(root, dir)? {
        let Some(sha256) = remembered(memo_dir, &stamp(&path)?) else { return Ok(None) };
        out.insert(path.strip_prefix(dir).unwrap_or(&path).to_string_lossy().into_owned(), sha256);
    }
    Ok(Some(out))
}

/// sha256 of every file under `dir` (links followed, every file inside `root`), by path
/// relative to `dir`, remembered under `memo_dir`.
pub fn dir_digests(memo_dir: &Path, root: &Path, dir: &Path) -> Result<BTreeMap<String, String>> {
    model_files(root, dir)?
        .into_iter()
        .map(|path| {
            let name = path.strip_prefix(dir).unwrap_or(&path).to_string_lossy().into_owned();
            Ok((name, file_digest(memo_dir, &path)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_remembered_and_recomputed_when_a_file_changes() {
        let tmp = std::env::temp_dir().join(format!("pg_embed_key_{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        let (models, memo) = (tmp.join("models/m"), tmp.join("memo"));
        std::fs::create_dir_all(&models).unwrap();
        std::fs::write(models.join("config.json"), "{}").unwrap();
        let first = dir_digests(&memo, &tmp, &models).unwrap();
        // sha256("{}"), as `printf '{}' | sha256sum` prints it.
        assert_eq!(first["config.json"], "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a");
        assert_eq!(std::fs::read_dir(&memo).unwrap().count(), 1, "remembered");
        let k1 = key(&first, &serde_json::json!({}));
        // A changed file (new length, new times) is hashed again; the key follows.
        std::fs::write(models.join("config.json"), "{\"a\":1}").unwrap();
        let second = dir_digests(&memo, &tmp, &models).unwrap();
        assert_ne!(first["config.json"], second["config.json"]);
        assert_ne!(k1, key(&second, &serde_json::json!({})));
        // Options are part of the key.
        assert_ne!(key(&second, &serde_json::json!({})), key(&second, &serde_json::json!({"task": "embed"})));
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
