//! A prepared file being written: the model is built straight into it.
//!
//! The file is created under its temporary name and mapped shared and writable; while the
//! model is built ([`Arena::build`]) every large buffer it makes is placed in the file's
//! data section as soon as it is made (see `crate::buffer`'s sink), and when it is
//! serialized the small ones follow. The pages are the file's (page cache the kernel writes
//! back and may reclaim), not the process's anonymous memory: whatever the model's size,
//! the builder holds one tensor's working memory, and once the file is renamed into place
//! the model it built already computes from the file every other process maps.
//!
//! Room is allocated on disk (`posix_fallocate`) before it is written through the
//! mapping, so a full disk is an error of the build, never a SIGBUS. The file is not
//! fsynced: every reader checks it in full (sizes, checksums) before use, so a file cut by a
//! crash of the machine is rebuilt, never trusted.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::file::{describe, temporary_name, Expect, Header, Mapped};
use crate::buffer::{self, Region, Sink, ALIGN};
use crate::error::{Error, Result};

/// Where the data section starts: one page, the fixed header at its start.
pub const DATA: usize = 4096;
/// The file grows by at least this much at a time (fewer fallocate calls).
const GROW: usize = 64 << 20;

/// Writes `parts` (and `header`) as a prepared file at `path`, through a temporary file in
/// the same directory renamed over `path`, and maps it checked against `expect`.
pub fn write<P: serde::Serialize>(path: &Path, header: &Header, parts: &P, expect: &Expect) -> Result<Mapped> {
    let arena = Arc::new(Arena::create(&temporary_name(path))?);
    arena.finish(|| describe(header, parts))?;
    arena.rename(path)?;
    Mapped::open(path, expect)
}

/// The file and its mapping, kept alive by every buffer placed in it.
struct Inner {
    path: PathBuf,
    file: File,
    map: *mut u8,
    /// Bytes of address space mapped (the file never grows past it).
    reserved: usize,
    state: Mutex<State>,
}

struct State {
    /// Bytes of the data section placed so far (padding included).
    used: usize,
    /// Bytes the file has on disk.
    len: usize,
    /// Why the file could not grow, once it could not.
    failed: Option<String>,
}

// SAFETY: the mapping is shared memory of a file; distinct buffers are written by one
// thread each before they are read, and placing is under the mutex.
unsafe impl Send for Inner {}
// SAFETY: as above.
unsafe impl Sync for Inner {}

impl Drop for Inner {
    fn drop(&mut self) {
        // SAFETY: unmaps the mapping made in `create`; no buffer of it is left (they hold
        // this Arc).
        unsafe { libc::munmap(self.map.cast(), self.reserved) };
    }
}

impl Region for Inner {
    fn bytes(&self) -> &[u8] {
        let used = self.state.lock().map_or(0, |s| s.used);
        // SAFETY: DATA + used bytes of the file are allocated and mapped.
        unsafe { std::slice::from_raw_parts(self.map, DATA + used) }
    }
}

/// A prepared file being written at its temporary name (removed if it is dropped before
/// [`Arena::finish`]).
pub struct Arena {
    inner: Arc<Inner>,
    renamed: std::sync::atomic::AtomicBool,
}

impl Sink for Arena {
    fn place(&self, bytes: usize, fill: &mut dyn FnMut(&mut [u8])) -> Option<(Arc<dyn Region>, *const u8, usize)> {
        let offset = self.reserve(bytes)?;
        // SAFETY: [DATA + offset, + bytes) is allocated on disk, inside the mapping, reserved
        // for this buffer alone, and new (zero) bytes of the file.
        let ptr = unsafe { self.inner.map.add(DATA + offset) };
        if bytes >= 2 << 20 {
            // Fault the pages in with one call, not one trap each (advice: an error changes
            // nothing but the speed).
            const MADV_POPULATE_WRITE: libc::c_int = 23;
            let start = (ptr as usize) & !4095;
            // SAFETY: pages of this mapping inside the file's allocated length.
            unsafe { libc::madvise(start as *mut libc::c_void, ptr as usize + bytes - start, MADV_POPULATE_WRITE) };
        }
        // SAFETY: as above: `bytes` bytes of the mapping no other buffer holds.
        fill(unsafe { std::slice::from_raw_parts_mut(ptr, bytes) });
        Some((self.inner.clone(), ptr.cast_const(), offset))
    }

    fn put(&self, src: &[u8]) -> Option<(Arc<dyn Region>, *const u8, usize)> {
        let offset = self.reserve(src.len())?;
        if let Err(e) = self.inner.file.write_all_at(src, (DATA + offset) as u64) {
            if let Ok(mut s) = self.inner.state.lock() {
                s.failed = Some(e.to_string());
            }
            return None;
        }
        // SAFETY: inside the mapping, just written.
        let ptr = unsafe { self.inner.map.add(DATA + offset) };
        Some((self.inner.clone(), ptr.cast_const(), offset))
    }

    fn offset_of(&self, ptr: *const u8, bytes: usize) -> Option<usize> {
        let start = self.inner.map as usize + DATA;
        let used = self.inner.state.lock().ok()?.used;
        let at = (ptr as usize).checked_sub(start)?;
        (at.checked_add(bytes)? <= used).then_some(at)
    }
}

impl Arena {
    /// Room for `bytes` bytes at the next 64-byte boundary of the data section, allocated
    /// on disk: its offset in the data section; `None` once the file cannot grow.
    fn reserve(&self, bytes: usize) -> Option<usize> {
        let mut s = self.inner.state.lock().ok()?;
        let offset = s.used.next_multiple_of(ALIGN);
        let end = DATA.checked_add(offset)?.checked_add(bytes)?;
        if end > s.len {
            if s.failed.is_some() {
                return None;
            }
            let want = end.max(s.len + GROW).next_multiple_of(1 << 20).min(self.inner.reserved);
            if end > want {
                s.failed = Some(format!("the file would pass the {} bytes of address space mapped for it", self.inner.reserved));
                return None;
            }
            // SAFETY: fallocate on the open descriptor.
            let rc = unsafe {
                libc::posix_fallocate(self.inner.file.as_raw_fd(), s.len as libc::off_t, (want - s.len) as libc::off_t)
            };
            if rc != 0 {
                s.failed = Some(std::io::Error::from_raw_os_error(rc).to_string());
                return None;
            }
            s.len = want;
        }
        s.used = offset + bytes;
        Some(offset)
    }

    /// Creates the file at `path` (a temporary name; replaced if it exists) and maps it.
    /// The file is held with a shared lock while this process maps it (see `file::in_use`).
    pub fn create(path: &Path) -> Result<Self> {
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| Error::shared(path, e))?;
        super::file::lock(&file, libc::LOCK_SH).map_err(|e| Error::shared(path, e))?;
        // Address space for the largest file: a terabyte, less where the system gives less.
        let mut reserved = 1usize << 40;
        let map = loop {
            // SAFETY: a new shared mapping of the file; pages past its end are never
            // touched (placing allocates them on disk first).
            let map = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    reserved,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    file.as_raw_fd(),
                    0,
                )
            };
            if map != libc::MAP_FAILED {
                break map.cast::<u8>();
            }
            if reserved <= 1 << 30 {
                let _ = std::fs::remove_file(path);
                return Err(Error::shared(path, std::io::Error::last_os_error()));
            }
            reserved /= 2;
        };
        let inner = Inner {
            path: path.to_path_buf(),
            file,
            map,
            reserved,
            state: Mutex::new(State { used: 0, len: 0, failed: None }),
        };
        Ok(Arena { inner: Arc::new(inner), renamed: false.into() })
    }

    /// Runs `f` (the build) with this file as the sink of the buffers it makes.
    pub fn build<R>(self: &Arc<Self>, f: impl FnOnce() -> R) -> R {
        buffer::sinking(self.clone(), f)
    }

    /// Why the file stopped growing, when it did (the buffers made after that are private).
    fn failure(&self) -> Option<String> {
        self.inner.state.lock().ok().and_then(|s| s.failed.clone())
    }

    /// Ends the file: `describe` serializes the parts (placing what is not placed yet),
    /// then the description follows the data section, and the fixed header (sizes and
    /// checksums) goes first. The file stays at its temporary name.
    pub fn finish(self: &Arc<Self>, describe: impl FnOnce() -> serde_json::Result<Vec<u8>>) -> Result<()> {
        let path = &self.inner.path;
        let json = self.build(describe).map_err(|e| Error::invalid_file(path, format!("cannot describe the prepared weights: {e}")))?;
        if let Some(why) = self.failure() {
            return Err(Error::shared(path, std::io::Error::other(why)));
        }
        let used = self.inner.state.lock().map_err(|_| Error::shared(path, std::io::Error::other("poisoned")))?.used;
        // SAFETY: the data section, every byte of it placed and written.
        let data = unsafe { std::slice::from_raw_parts(self.inner.map.add(DATA), used) };
        let fixed = super::file::fixed_header(json.len(), DATA, used, xxhash_rust::xxh3::xxh3_64(data), &json);
        let file = &self.inner.file;
        let io = |e| Error::shared(path, e);
        file.set_len((DATA + used + json.len()) as u64).map_err(io)?;
        file.write_all_at(&json, (DATA + used) as u64).map_err(io)?;
        file.write_all_at(&fixed, 0).map_err(io)?;
        Ok(())
    }

    /// Renames the finished file to `to` (the directory entry synced): from now on it is
    /// that file, and no longer removed when this is dropped.
    pub fn rename(&self, to: &Path) -> Result<()> {
        std::fs::rename(&self.inner.path, to).map_err(|e| Error::shared(to, e))?;
        self.renamed.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(dir) = to.parent() {
            File::open(dir).and_then(|d| d.sync_all()).map_err(|e| Error::shared(dir, e))?;
        }
        Ok(())
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        if !*self.renamed.get_mut() {
            let _ = std::fs::remove_file(&self.inner.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::{Floats, SPILL};

    #[derive(serde::Serialize, serde::Deserialize)]
    struct Parts {
        large: Floats,
        filled: Floats,
        small: Floats,
    }

    #[test]
    fn large_buffers_are_built_in_the_file_and_read_back() {
        let dir = std::env::temp_dir().join(format!("pg_embed_arena_{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("k.weights");
        let arena = Arc::new(Arena::create(&temporary_name(&path)).unwrap());
        let n = SPILL; // 4 * SPILL bytes
        let parts = arena.build(|| Parts {
            large: (0..n).map(|i| i as f32).collect::<Vec<_>>().into(),
            filled: Floats::filled(n, |v| v.iter_mut().enumerate().for_each(|(i, x)| *x = -(i as f32))),
            small: vec![1.5f32; 8].into(),
        });
        // Made while the file was the sink: the large ones are slices of its mapping.
        assert!(parts.large.is_mapped() && parts.filled.is_mapped() && !parts.small.is_mapped());
        assert_eq!(parts.large[n - 1], (n - 1) as f32);
        assert_eq!(parts.filled[7], -7.0);
        // Outside a build, the same vector stays private.
        assert!(!Floats::from(vec![0f32; n]).is_mapped());
        let header = Header {
            format: super::super::file::FORMAT,
            pg_embed: env!("CARGO_PKG_VERSION").into(),
            layout: "test".into(),
            key: "k".into(),
            model: "m".into(),
            source: "s".into(),
            created: 0,
        };
        arena.finish(|| describe(&header, &parts)).unwrap();
        arena.rename(&path).unwrap();
        assert!(!temporary_name(&path).exists() && path.exists());
        let mapped = Mapped::open(&path, &Expect { key: "k", layout: "test" }).unwrap();
        let back: Parts = mapped.restore(|v| Ok(serde_json::from_value(v).unwrap())).unwrap();
        assert_eq!((&back.large[..], &back.filled[..], &back.small[..]), (&parts.large[..], &parts.filled[..], &parts.small[..]));
        // The data section holds the large buffers where they were built, then the small one.
        assert_eq!(mapped.data_bytes(), 2 * 4 * n + 32);
        drop((parts, back, mapped, arena));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_abandoned_build_leaves_no_file() {
        let dir = std::env::temp_dir().join(format!("pg_embed_arena_drop_{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let tmp = temporary_name(&dir.join("k.weights"));
        let arena = Arc::new(Arena::create(&tmp).unwrap());
        let kept: Floats = arena.build(|| vec![2f32; SPILL].into());
        assert!(tmp.exists());
        drop(arena);
        assert!(!tmp.exists(), "removed when the build is dropped unfinished");
        assert_eq!(kept[SPILL - 1], 2.0, "its buffers stay readable while held");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
