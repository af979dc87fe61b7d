//! One copy of a model per server: the weights as the kernels read them (packed panels,
//! fused Q/K/V, every small tensor) written once into a file of the cache directory and
//! mapped read-only by every process that loads the model.
//!
//! - [`buffer::Shared`] is the buffer every weight lives in, owned or mapped.
//! - [`file`] is the file format: written to a temporary name, synced and renamed; checked
//!   in full (sizes, checksums, version, layout, key) before it is mapped.
//! - [`key`] names a file by a digest of what determines its contents.
//! - [`Store`] (here) is the directory: find and map, or build under a lock and write; list;
//!   remove what no model needs.

pub mod buffer;
pub mod file;
pub mod key;

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

pub use buffer::{Floats, Shared};
pub use file::{Header, Mapped};

use crate::error::{Error, Result};

/// Suffix of prepared files.
const SUFFIX: &str = "weights";

/// The cache directory of prepared files.
pub struct Store {
    dir: PathBuf,
}

/// How a model's weights were obtained.
pub enum Outcome<P> {
    /// Mapped from the shared file: found there, or built by this call and written first.
    Mapped {
        file: Mapped,
        built: bool,
        /// Why an existing file under the same name was not used (damaged, foreign).
        replaced: Option<String>,
    },
    /// Built privately because the file could not be written (the reason).
    Private(P, String),
}

/// One file of the directory, as `embed.cache_files()` lists it.
#[derive(Debug, Clone)]
pub struct FileInfo {
    pub path: PathBuf,
    pub bytes: u64,
    /// The file's header; `None` for a temporary or unreadable file.
    pub header: Option<Header>,
    pub in_use: bool,
    /// Seconds since the Unix epoch the file was last modified.
    pub modified: u64,
}

impl FileInfo {
    pub fn key(&self) -> Option<&str> {
        self.header.as_ref().map(|h| h.key.as_str())
    }
}

impl Store {
    /// The directory `dir`, created (owner-only) if it does not exist.
    pub fn open(dir: &Path) -> Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| Error::io(dir, e))?;
        Ok(Store { dir: dir.to_path_buf() })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the file of `key` lives.
    pub fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.{SUFFIX}"))
    }

    fn lock_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.lock"))
    }

    /// Maps the file of `key`; when there is none (or it is damaged or foreign), builds the
    /// parts with `build`, writes them, and maps the result. One process builds at a time per
    /// key: the others wait on its lock (calling `interrupt` while they wait, so a cancel
    /// ends the wait), then map what it wrote. When the file cannot be written (a full disk,
    /// permissions), the parts built are returned to be used privately.
    pub fn get_or_build<P: Serialize>(
        &self,
        key: &str,
        label: (&str, &str),
        interrupt: &dyn Fn() -> Result<()>,
        build: impl FnOnce() -> Result<P>,
    ) -> Result<Outcome<P>> {
        let path = self.path(key);
        let expect = file::Expect { key, layout: crate::matmul::layout() };
        let mut replaced = None;
        if path.exists() {
            match Mapped::open(&path, &expect) {
                Ok(file) => return Ok(Outcome::Mapped { file, built: false, replaced: None }),
                Err(e) => replaced = Some(e.to_string()),
            }
        }
        let lock_path = self.lock_path(key);
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| Error::io(&lock_path, e))?;
        loop {
            match file::lock(&lock, libc::LOCK_EX | libc::LOCK_NB) {
                Ok(()) => break,
                Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => {
                    interrupt()?;
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(Error::io(&lock_path, e)),
            }
        }
        // Another process may have written it while this one waited.
        if replaced.is_none() {
            if let Ok(file) = Mapped::open(&path, &expect) {
                return Ok(Outcome::Mapped { file, built: false, replaced: None });
            }
        }
        let parts = build()?;
        let header = Header {
            format: file::FORMAT,
            pg_embed: env!("CARGO_PKG_VERSION").into(),
            layout: expect.layout.into(),
            key: key.into(),
            model: label.0.into(),
            source: label.1.into(),
            created: now(),
        };
        match file::write(&path, &header, &parts, &expect) {
            Ok(file) => Ok(Outcome::Mapped { file, built: true, replaced }),
            Err(e) => Ok(Outcome::Private(parts, e.to_string())),
        }
    }

    /// Every prepared file, temporary file and lock file of the directory, by name.
    pub fn list(&self) -> Result<Vec<FileInfo>> {
        let mut files = Vec::new();
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(files),
            Err(e) => return Err(Error::io(&self.dir, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(&self.dir, e))?;
            let path = entry.path();
            let Ok(meta) = entry.metadata() else { continue };
            if !meta.is_file() {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let prepared = name.ends_with(&format!(".{SUFFIX}"));
            let modified = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_secs());
            files.push(FileInfo {
                header: if prepared { file::peek(&path).ok() } else { None },
                in_use: prepared && file::in_use(&path),
                bytes: meta.len(),
                modified,
                path,
            });
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(files)
    }

    /// Removes every file no key of `needed` names: prepared files of other keys (or
    /// unreadable ones), their lock files, and temporary files no process is writing.
    /// A file still mapped somewhere is only unlinked: its readers keep their mapping.
    /// Returns what it removed.
    pub fn remove_unneeded(&self, needed: &BTreeSet<String>) -> Result<Vec<FileInfo>> {
        let mut removed = Vec::new();
        for info in self.list()? {
            let name = info.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let key = name.split('.').next().unwrap_or_default().to_string();
            if needed.contains(&key) && !name.contains(".tmp.") {
                continue;
            }
            if name.ends_with(".lock") || name.contains(".tmp.") {
                // Only when no process builds under this key now.
                let Ok(lock) = File::options().write(true).open(self.lock_path(&key)) else {
                    if name.contains(".tmp.") {
                        self.remove(info, &mut removed);
                    }
                    continue;
                };
                if file::lock(&lock, libc::LOCK_EX | libc::LOCK_NB).is_err() {
                    continue;
                }
            }
            self.remove(info, &mut removed);
        }
        Ok(removed)
    }

    fn remove(&self, info: FileInfo, removed: &mut Vec<FileInfo>) {
        if std::fs::remove_file(&info.path).is_ok() {
            removed.push(info);
        }
    }
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}
