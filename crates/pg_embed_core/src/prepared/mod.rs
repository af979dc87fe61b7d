//! One copy of a model per server: the weights as the kernels read them (packed panels,
//! fused Q/K/V, every small tensor) written once into a file of the cache directory and
//! mapped read-only by every process that loads the model.
//!
//! - [`Shared`] (`crate::buffer`) is the buffer every weight lives in, owned or mapped.
//! - [`file`] is the file format: written to a temporary name and renamed; checked in full
//!   (sizes, checksums, version, layout, key) before it is mapped.
//! - [`arena`] is a file being written: a model is built straight into it, so the process
//!   that builds it holds one tensor's working memory, whatever the model's size.
//! - [`budget`] admits a build only when the memory it holds fits what the machine (and
//!   `pg_embed.max_building_memory`) gives, counting the builds in progress server-wide.
//! - [`key`] names a file by a digest of what determines its contents.
//! - [`Store`] (here) is the directory: find and map, or build under a lock and write; list;
//!   remove what no model needs.

pub mod arena;
pub mod budget;
pub mod file;
pub mod key;

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::Serialize;

pub use crate::buffer::{Floats, Shared};
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
    /// Mapped from the shared file another process (or an earlier load) wrote.
    Mapped(Mapped),
    /// Built by this call from the model's files straight into the file (see [`arena`]),
    /// which is being finished and renamed into place in the background: the caller
    /// computes with these (slices of that file's mapping) meanwhile.
    Built { parts: Arc<P>, writing: Writing, replaced: Option<String> },
}

/// A prepared file being written by a background thread: where it ended up, or why it
/// could not be written.
#[derive(Clone, Debug, Default)]
pub struct Writing {
    done: Arc<OnceLock<std::result::Result<PathBuf, String>>>,
}

impl Writing {
    /// The file, or why there is none; `None` while it is being written.
    pub fn result(&self) -> Option<&std::result::Result<PathBuf, String>> {
        self.done.get()
    }

    /// Waits for the write to end (tests and tools).
    pub fn wait(&self) -> &std::result::Result<PathBuf, String> {
        loop {
            if let Some(r) = self.done.get() {
                return r;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Where the background writer starts: a key whose build lock this process holds, or a
/// key still to compute (the file is built under a name of its own meanwhile, `pending-`,
/// whose lock this process holds).
enum Pending {
    Locked(String, File),
    Later(Box<dyn FnOnce() -> Result<String> + Send>, String, File),
}

/// Parts built, and the file they were built into (or why there is none).
type BuiltInto<P> = (Arc<P>, std::result::Result<Arc<arena::Arena>, String>);

/// Numbers the `pending-` names of this process.
static PENDING: AtomicUsize = AtomicUsize::new(0);

/// What names a file: its key, or how to compute it when the model files' digests are not
/// remembered yet (the caller hashes them in the background meanwhile; this waits for it).
pub enum KeyOf {
    Known(String),
    Later(Box<dyn FnOnce() -> Result<String> + Send>),
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
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| Error::shared(dir, e))?;
        let store = Store { dir: dir.to_path_buf() };
        store.sweep_temporary();
        Ok(store)
    }

    /// The keys of the files some database of the server needs, given this database's
    /// (`own`, computed now, as its own loads resolve its registrations) and the notes the
    /// other databases wrote of theirs (`needs/<database oid>`), for the databases that
    /// still exist (`databases`). Writes `own` down as this database's note first, and
    /// removes the notes of dropped databases. A file is removed only when no database
    /// needs it (a database that never wrote a note, e.g. one whose models were all loaded
    /// before this version, has its files rebuilt on its next load if they were removed).
    pub fn needed_server_wide(&self, database: u32, own: &BTreeSet<String>, databases: &BTreeSet<u32>) -> Result<BTreeSet<String>> {
        let dir = self.needs_dir()?;
        write_note(&dir, database, own)?;
        let mut needed = own.clone();
        for entry in std::fs::read_dir(&dir).map_err(|e| Error::shared(&dir, e))?.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(oid) = name.parse::<u32>() else { continue };
            if oid == database {
                continue;
            }
            if !databases.contains(&oid) {
                let _ = std::fs::remove_file(entry.path());
                continue;
            }
            needed.extend(read_note(&entry.path()));
        }
        Ok(needed)
    }

    /// Adds `key` to this database's note of the files it needs (a model loaded from it).
    pub fn note_needed(&self, database: u32, key: &str) -> Result<()> {
        let dir = self.needs_dir()?;
        let mut keys = read_note(&dir.join(database.to_string()));
        if keys.insert(key.to_string()) {
            write_note(&dir, database, &keys)?;
        }
        Ok(())
    }

    /// `needs/`, where each database notes the files it needs (made on first use).
    fn needs_dir(&self) -> Result<PathBuf> {
        let dir = self.dir.join("needs");
        std::fs::create_dir_all(&dir).map_err(|e| Error::shared(&dir, e))?;
        Ok(dir)
    }

    /// An error naming the directory unless this process may write in it.
    pub fn check_writable(&self) -> Result<()> {
        use std::os::unix::ffi::OsStrExt;
        let path = std::ffi::CString::new(self.dir.as_os_str().as_bytes())
            .map_err(|e| Error::shared(&self.dir, std::io::Error::new(std::io::ErrorKind::InvalidInput, e)))?;
        // SAFETY: access(2) on a NUL-terminated path.
        if unsafe { libc::access(path.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
            return Err(Error::shared(&self.dir, std::io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Removes the temporary files of writes whose writer is gone (a backend that ended
    /// while it wrote): those of a key whose lock no process holds. A writer holds its key's
    /// lock from before it creates its temporary file until after it renames it.
    fn sweep_temporary(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some((key, _)) = name.split_once(&format!(".{SUFFIX}.tmp.")) else { continue };
            let free = match File::options().write(true).open(self.lock_path(key)) {
                Ok(lock) => file::lock(&lock, libc::LOCK_EX | libc::LOCK_NB).is_ok(),
                // No lock file: nobody has written this key since the last cleanup.
                Err(e) => e.kind() == std::io::ErrorKind::NotFound,
            };
            if free {
                let _ = std::fs::remove_file(entry.path());
            }
        }
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

    /// Maps the file named by `key`; when there is none (or it is damaged or foreign), builds
    /// the parts with `build` straight into a new file and hands them back while a
    /// background thread finishes it and renames it into place. One process builds at a
    /// time per key: the others wait on its lock (calling `interrupt` while they wait, so a
    /// cancel ends the wait), then map what it wrote. With a key known only later (the
    /// files' digests not yet remembered), the parts are built at once under a name of their
    /// own and the background thread hashes, locks and renames unless a valid file is there
    /// by then. `interrupt` is also called between the tensors the build reads.
    pub fn get_or_build<P: Serialize + Send + Sync + 'static>(
        &self,
        key: KeyOf,
        label: (&str, &str),
        interrupt: &dyn Fn() -> Result<()>,
        build: impl FnOnce() -> Result<P>,
    ) -> Result<Outcome<P>> {
        let template = Header {
            format: file::FORMAT,
            pg_embed: env!("CARGO_PKG_VERSION").into(),
            layout: crate::kernels::float32::layout().into(),
            key: String::new(),
            model: label.0.into(),
            source: label.1.into(),
            created: now(),
        };
        let key = match key {
            KeyOf::Known(key) => key,
            KeyOf::Later(compute) => {
                let name = format!("pending-{}-{}", std::process::id(), PENDING.fetch_add(1, Ordering::Relaxed));
                let lock = self.lock(&name, &|| Ok(()))?;
                let (parts, arena) = self.build_into(&name, interrupt, build)?;
                let writing = self.write_in_background(Pending::Later(compute, name, lock), parts.clone(), arena, template);
                return Ok(Outcome::Built { parts, writing, replaced: None });
            }
        };
        let path = self.path(&key);
        let mut replaced = None;
        if path.exists() {
            match Mapped::open(&path, &file::Expect::current(&key)) {
                Ok(file) => return Ok(Outcome::Mapped(file)),
                Err(e) => replaced = Some(e.to_string()),
            }
        }
        let lock = self.lock(&key, interrupt)?;
        // Another process may have written (or replaced) it while this one waited.
        if let Ok(file) = Mapped::open(&path, &file::Expect::current(&key)) {
            return Ok(Outcome::Mapped(file));
        }
        let (parts, arena) = self.build_into(&key, interrupt, build)?;
        let writing = self.write_in_background(Pending::Locked(key, lock), parts.clone(), arena, template);
        Ok(Outcome::Built { parts, writing, replaced })
    }

    /// Builds the parts into a new file at the temporary name of `name`; when that file
    /// cannot be made, privately (and why is the write's error).
    fn build_into<P>(
        &self,
        name: &str,
        interrupt: &dyn Fn() -> Result<()>,
        build: impl FnOnce() -> Result<P>,
    ) -> Result<BuiltInto<P>> {
        let build = || crate::threads::reusing_memory(|| crate::weights::interruptible(interrupt, build));
        match arena::Arena::create(&file::temporary_name(&self.path(name))) {
            Ok(arena) => {
                let arena = Arc::new(arena);
                let parts = arena.build(build)?;
                Ok((Arc::new(parts), Ok(arena)))
            }
            Err(e) => Ok((Arc::new(build()?), Err(e.to_string()))),
        }
    }

    /// Finishes the file `parts` were built into and renames it to their key's name, on a
    /// thread of its own (plain Rust, no Postgres calls). The build lock is held until the
    /// file is in place, so waiters then map it. A key still to compute is computed there
    /// first, its lock taken, and the file is dropped when another process wrote a valid
    /// file meanwhile.
    fn write_in_background<P: Serialize + Send + Sync + 'static>(
        &self,
        pending: Pending,
        parts: Arc<P>,
        arena: std::result::Result<Arc<arena::Arena>, String>,
        template: Header,
    ) -> Writing {
        let (writing, store) = (Writing::default(), Store { dir: self.dir.clone() });
        let done = writing.done.clone();
        crate::threads::spawn_quiet(move || {
            let written = (|| -> std::result::Result<PathBuf, String> {
                let arena = arena?;
                let (key, lock, pending) = match pending {
                    Pending::Locked(key, lock) => (key, lock, None),
                    Pending::Later(compute, name, pending_lock) => {
                        let key = compute().map_err(|e| e.to_string())?;
                        let lock = store.lock(&key, &|| Ok(())).map_err(|e| e.to_string())?;
                        if let Ok(file) = Mapped::open(&store.path(&key), &file::Expect::current(&key)) {
                            let _ = std::fs::remove_file(store.lock_path(&name));
                            return Ok(file.path);
                        }
                        (key, lock, Some((name, pending_lock)))
                    }
                };
                let header = Header { key: key.clone(), ..template };
                let path = store.path(&key);
                let written = arena.finish(|| file::describe(&header, &*parts)).and_then(|()| arena.rename(&path));
                drop(lock);
                if let Some((name, _lock)) = pending {
                    let _ = std::fs::remove_file(store.lock_path(&name));
                }
                written.map(|()| path).map_err(|e| e.to_string())
            })();
            let _ = done.set(written);
        });
        writing
    }

    /// Takes the build lock of `key`, polling (and calling `interrupt`) while another
    /// process holds it. Released when the returned file is closed.
    fn lock(&self, key: &str, interrupt: &dyn Fn() -> Result<()>) -> Result<File> {
        let lock_path = self.lock_path(key);
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| Error::shared(&lock_path, e))?;
        loop {
            match file::lock(&lock, libc::LOCK_EX | libc::LOCK_NB) {
                Ok(()) => return Ok(lock),
                Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => {
                    interrupt()?;
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(Error::shared(&lock_path, e)),
            }
        }
    }

    /// Every prepared file, temporary file and lock file of the directory, by name.
    pub fn list(&self) -> Result<Vec<FileInfo>> {
        let mut files = Vec::new();
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(files),
            Err(e) => return Err(Error::shared(&self.dir, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| Error::shared(&self.dir, e))?;
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

/// The keys of a note (none when it cannot be read).
fn read_note(path: &Path) -> BTreeSet<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().filter(|l| !l.is_empty()).map(str::to_string).collect()
}

/// `needs/<database>`: one key a line, written whole (a temporary file renamed over it).
fn write_note(dir: &Path, database: u32, keys: &BTreeSet<String>) -> Result<()> {
    let path = dir.join(database.to_string());
    let tmp = dir.join(format!("{database}.tmp.{}", std::process::id()));
    let text: String = keys.iter().map(|k| format!("{k}\n")).collect();
    std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, &path)).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Error::shared(&path, e)
    })
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}
