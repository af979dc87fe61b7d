//! The general file readers: a JSON file parsed (required or optional), and every file
//! under a model folder.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// Reads and parses a JSON file; a missing file is `Ok(None)`.
pub fn read_json_opt<T: DeserializeOwned>(path: &Path) -> Result<Option<T>> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| Error::invalid_file(path, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(path, e)),
    }
}

pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T> {
    read_json_opt(path)?.ok_or_else(|| Error::MissingFile { path: path.into() })
}

/// Every file under `dir`, sub-folders and links followed, as paths under `dir`. `admit`
/// sees each entry (file or folder) before it is used and may refuse it, which ends the walk.
pub fn files_under(dir: &Path, mut admit: impl FnMut(&Path) -> Result<()>) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).map_err(|e| Error::io(&d, e))? {
            let path = entry.map_err(|e| Error::io(&d, e))?.path();
            admit(&path)?;
            if path.is_dir() {
                pending.push(path);
            } else {
                files.push(path);
            }
        }
    }
    Ok(files)
}
