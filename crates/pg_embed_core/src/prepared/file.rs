//! The prepared file: a model's weights exactly as the kernels read them, written once and
//! mapped read-only by every backend.
//!
//! Layout (integers little-endian):
//!
//! | bytes | what |
//! |---|---|
//! | 0..8 | magic `PGEMBED` + format version byte |
//! | 8..16 | length of the JSON description |
//! | 16..24 | where the data section starts (page aligned) |
//! | 24..32 | length of the data section |
//! | 32..40 | xxh3-64 of the data section |
//! | 40..48 | xxh3-64 of the JSON description |
//! | 48.. | the JSON description: `{"header": Header, "parts": ...}`, the parts' buffers as `[offset, length]` into the data section |
//! | data start.. | the buffers, each at a 64-byte boundary, zeros between them |
//!
//! A file is written under a temporary name, synced and renamed into place, so its final
//! name only ever names a complete file; it is never changed in place afterwards (a mapped
//! file that shrank would kill its readers with SIGBUS). It is checked in full before use:
//! magic, sizes, both checksums, the format, the pg_embed version, the kernel layout and the
//! key its name promises.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::Xxh3;

use crate::buffer::{self, Region, Source, ALIGN};
use crate::error::{Error, Result};

const MAGIC: &[u8; 7] = b"PGEMBED";
/// Bumped when the layout of the file or of the serialized parts changes.
pub const FORMAT: u8 = 1;
const FIXED: usize = 48;
const PAGE: usize = 4096;

/// What a file says about itself; everything but `created` and the labels is checked
/// against what the reader expects.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Header {
    pub format: u8,
    /// The pg_embed version that wrote it.
    pub pg_embed: String,
    /// The kernels' weight layout (see `crate::kernels::float32::layout`).
    pub layout: String,
    /// The digest the file is named by (see `super::key`).
    pub key: String,
    /// The model name and source it was first built for (labels only: a file serves every
    /// model with the same key).
    pub model: String,
    pub source: String,
    /// Seconds since the Unix epoch.
    pub created: u64,
}

#[derive(Serialize)]
struct Describe<'a, P: Serialize> {
    header: &'a Header,
    parts: &'a P,
}

#[derive(Deserialize)]
struct Described {
    header: Header,
    parts: serde_json::Value,
}

/// Writes `parts` (and `header`) as a prepared file at `path`, through a temporary file in
/// the same directory that is synced, mapped and checked (against `expect`), then renamed
/// over `path`. Returns the mapping, which stays valid whatever later happens to the name.
pub fn write<P: Serialize>(path: &Path, header: &Header, parts: &P, expect: &Expect) -> Result<Mapped> {
    let (json, collector) = buffer::collecting(|| serde_json::to_vec(&Describe { header, parts }));
    let json = json.map_err(|e| Error::invalid_file(path, format!("cannot describe the prepared weights: {e}")))?;
    let data_start = (FIXED + json.len()).next_multiple_of(PAGE);
    let data_len = collector.len;
    // SAFETY: the segments point into the buffers of `parts`, borrowed for this whole call.
    let segments: Vec<&[u8]> =
        collector.segments.iter().map(|&(ptr, len)| unsafe { std::slice::from_raw_parts(ptr, len) }).collect();

    let mut data_hash = Xxh3::new();
    let zeros = [0u8; ALIGN];
    let mut at = 0usize;
    for s in &segments {
        let pad = at.next_multiple_of(ALIGN) - at;
        data_hash.update(&zeros[..pad]);
        data_hash.update(s);
        at += pad + s.len();
    }
    let mut fixed = Vec::with_capacity(FIXED);
    fixed.extend_from_slice(MAGIC);
    fixed.push(FORMAT);
    for v in [json.len() as u64, data_start as u64, data_len as u64, data_hash.digest(), xxh3(&json)] {
        fixed.extend_from_slice(&v.to_le_bytes());
    }

    let tmp = temporary_name(path);
    let written = (|| -> std::io::Result<()> {
        let file = File::create(&tmp)?;
        let mut out = std::io::BufWriter::with_capacity(1 << 20, &file);
        out.write_all(&fixed)?;
        out.write_all(&json)?;
        out.write_all(&vec![0u8; data_start - FIXED - json.len()])?;
        let mut at = 0usize;
        for s in &segments {
            let pad = at.next_multiple_of(ALIGN) - at;
            out.write_all(&zeros[..pad])?;
            out.write_all(s)?;
            at += pad + s.len();
        }
        out.flush()?;
        drop(out);
        file.sync_all()
    })();
    let mapped = written.map_err(|e| Error::shared(path, e)).and_then(|()| Mapped::open(&tmp, expect));
    let renamed = mapped.and_then(|mut mapped| {
        std::fs::rename(&tmp, path).map_err(|e| Error::shared(path, e))?;
        if let Some(dir) = path.parent() {
            File::open(dir).and_then(|d| d.sync_all()).map_err(|e| Error::shared(dir, e))?;
        }
        mapped.path = path.to_path_buf();
        Ok(mapped)
    });
    if renamed.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    renamed
}

/// `<path>.tmp.<pid>`: where a file is written before it is renamed into place.
pub fn temporary_name(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".tmp.{}", std::process::id()));
    PathBuf::from(name)
}

fn xxh3(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

/// A mapped file and the lock that marks it in use.
struct MapRegion {
    map: memmap2::Mmap,
    /// Held open with a shared lock while mapped: `in_use` asks for an exclusive one.
    _file: File,
}

impl Region for MapRegion {
    fn bytes(&self) -> &[u8] {
        &self.map
    }
}

/// A prepared file, checked and mapped read-only.
pub struct Mapped {
    region: Arc<MapRegion>,
    pub header: Header,
    parts: serde_json::Value,
    data_start: usize,
    data_len: usize,
    pub path: PathBuf,
}

/// What a reader expects of a file.
pub struct Expect<'a> {
    pub key: &'a str,
    pub layout: &'a str,
}

impl<'a> Expect<'a> {
    /// A file of `key` as this build writes it: its format, version and the kernels' layout.
    pub fn current(key: &'a str) -> Self {
        Expect { key, layout: crate::kernels::float32::layout() }
    }
}

fn damaged(path: &Path, why: impl std::fmt::Display) -> Error {
    Error::invalid_file(path, format!("damaged prepared weights: {why}"))
}

/// The fixed part and the description of the file at `path`, checked (but not the data).
fn read_description(path: &Path, bytes: &[u8]) -> Result<(Described, usize, usize, u64)> {
    if bytes.len() < FIXED || &bytes[..7] != MAGIC {
        return Err(damaged(path, "not a pg_embed prepared file"));
    }
    if bytes[7] != FORMAT {
        return Err(damaged(path, format!("format {} (this pg_embed reads {FORMAT})", bytes[7])));
    }
    let word = |i: usize| u64::from_le_bytes(bytes[8 + 8 * i..16 + 8 * i].try_into().unwrap_or_default());
    let (json_len, data_start, data_len, data_sum, json_sum) = (word(0), word(1), word(2), word(3), word(4));
    let json_end = (FIXED as u64).checked_add(json_len).filter(|e| *e <= data_start);
    if json_end.is_none() || data_start.checked_add(data_len) != Some(bytes.len() as u64) {
        return Err(damaged(path, format!("sizes do not add up to the file's {} bytes", bytes.len())));
    }
    let json = &bytes[FIXED..FIXED + json_len as usize];
    if xxh3(json) != json_sum {
        return Err(damaged(path, "the description's checksum does not match"));
    }
    let described: Described = serde_json::from_slice(json).map_err(|e| damaged(path, e))?;
    Ok((described, data_start as usize, data_len as usize, data_sum))
}

impl Mapped {
    /// Maps the file at `path` read-only and checks it in full against `expect`.
    pub fn open(path: &Path, expect: &Expect) -> Result<Self> {
        let file = File::open(path).map_err(|e| Error::shared(path, e))?;
        lock(&file, libc::LOCK_SH).map_err(|e| Error::shared(path, e))?;
        // SAFETY: the file is only ever replaced by rename, never changed in place (the
        // module's rule); a DBA who truncates it under a running server is warned in the README.
        let map = unsafe { memmap2::MmapOptions::new().populate().map(&file) }.map_err(|e| Error::shared(path, e))?;
        let (described, data_start, data_len, data_sum) = read_description(path, &map)?;
        if xxh3(&map[data_start..]) != data_sum {
            return Err(damaged(path, "the data's checksum does not match"));
        }
        let header = described.header;
        let expected = (FORMAT, env!("CARGO_PKG_VERSION"), expect.layout, expect.key);
        if (header.format, header.pg_embed.as_str(), header.layout.as_str(), header.key.as_str()) != expected {
            return Err(damaged(
                path,
                format!(
                    "written for format {}, pg_embed {}, layout {}, key {}; expected {}, {}, {}, {}",
                    header.format, header.pg_embed, header.layout, header.key, expected.0, expected.1, expected.2, expected.3
                ),
            ));
        }
        Ok(Mapped {
            region: Arc::new(MapRegion { map, _file: file }),
            header,
            parts: described.parts,
            data_start,
            data_len,
            path: path.to_path_buf(),
        })
    }

    /// Bytes of the data section (the weights every backend shares).
    pub fn data_bytes(&self) -> usize {
        self.data_len
    }

    /// Runs `f` over the parts' description with every buffer it deserializes taken from
    /// this mapping.
    pub fn restore<R>(&self, f: impl FnOnce(serde_json::Value) -> Result<R>) -> Result<R> {
        let source = Source {
            region: self.region.clone(),
            start: self.data_start,
            len: self.data_len,
            restored: 0,
        };
        buffer::restoring(source, || f(self.parts.clone())).0
    }
}

/// The header of the file at `path` (no data checks), for listings.
pub fn peek(path: &Path) -> Result<Header> {
    use std::io::Read;
    let mut file = File::open(path).map_err(|e| Error::shared(path, e))?;
    let mut fixed = [0u8; FIXED];
    file.read_exact(&mut fixed).map_err(|e| damaged(path, e))?;
    let json_len = u64::from_le_bytes(fixed[8..16].try_into().unwrap_or_default());
    if &fixed[..7] != MAGIC || json_len > 1 << 30 {
        return Err(damaged(path, "not a pg_embed prepared file"));
    }
    let mut json = vec![0u8; json_len as usize];
    file.read_exact(&mut json).map_err(|e| damaged(path, e))?;
    #[derive(Deserialize)]
    struct Only {
        header: Header,
    }
    let only: Only = serde_json::from_slice(&json).map_err(|e| damaged(path, e))?;
    Ok(only.header)
}

/// Whether some process holds the file at `path` mapped (a shared lock on it).
pub fn in_use(path: &Path) -> bool {
    let Ok(file) = File::open(path) else { return false };
    match lock(&file, libc::LOCK_EX | libc::LOCK_NB) {
        Ok(()) => false,
        Err(e) => e.raw_os_error() == Some(libc::EWOULDBLOCK),
    }
}

/// flock(2) on `file` (released when the file is closed).
pub(super) fn lock(file: &File, how: libc::c_int) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    loop {
        // SAFETY: flock on an open descriptor.
        if unsafe { libc::flock(file.as_raw_fd(), how) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}
