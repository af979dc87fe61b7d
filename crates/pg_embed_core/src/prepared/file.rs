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
//! | 48..4096 | zeros |
//! | data start (4096).. | the buffers, each at a 64-byte boundary, zeros between them |
//! | data start + data length.. | the JSON description: `{"header": Header, "parts": ...}`, the parts' buffers as `[offset, length]` into the data section |
//!
//! The data come first because the model is built straight into the file (see
//! `super::arena`): the description, which says where each buffer is, is known only at
//! the end. A file is written under a temporary name and renamed into place, so its final
//! name only ever names a complete file; it is never changed in place afterwards (a mapped
//! file that shrank would kill its readers with SIGBUS). It is checked in full before use:
//! magic, sizes, both checksums, the format, the pg_embed version, the kernel layout and the
//! key its name promises.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::buffer::{self, Region, Source};
use crate::error::{Error, Result};

const MAGIC: &[u8; 7] = b"PGEMBED";
/// Bumped when the layout of the file or of the serialized parts changes (2: the
/// description after the data).
pub const FORMAT: u8 = 2;
const FIXED: usize = 48;

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

/// The description of `parts` (with `header`), their buffers placed in the file being
/// written.
pub(super) fn describe<P: Serialize>(header: &Header, parts: &P) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec(&Describe { header, parts })
}

/// The fixed part of a file: magic and format, then the sizes and checksums.
pub(super) fn fixed_header(json_len: usize, data_start: usize, data_len: usize, data_sum: u64, json: &[u8]) -> Vec<u8> {
    let mut fixed = Vec::with_capacity(FIXED);
    fixed.extend_from_slice(MAGIC);
    fixed.push(FORMAT);
    for v in [json_len as u64, data_start as u64, data_len as u64, data_sum, xxh3(json)] {
        fixed.extend_from_slice(&v.to_le_bytes());
    }
    fixed
}

/// The fixed part's five words after the magic and format: the description's length, where
/// the data start, their length, and the two checksums (`bytes` holds at least FIXED bytes).
fn fixed_words(bytes: &[u8]) -> [u64; 5] {
    std::array::from_fn(|i| u64::from_le_bytes(bytes[8 + 8 * i..16 + 8 * i].try_into().unwrap_or_default()))
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
    let [json_len, data_start, data_len, data_sum, json_sum] = fixed_words(bytes);
    let json_start = data_start.checked_add(data_len).filter(|_| data_start >= FIXED as u64);
    if json_start.and_then(|s| s.checked_add(json_len)) != Some(bytes.len() as u64) {
        return Err(damaged(path, format!("sizes do not add up to the file's {} bytes", bytes.len())));
    }
    let json = &bytes[(data_start + data_len) as usize..];
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
        if xxh3(&map[data_start..data_start + data_len]) != data_sum {
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
    let [json_len, data_start, data_len, ..] = fixed_words(&fixed);
    if &fixed[..7] != MAGIC || json_len > 1 << 30 {
        return Err(damaged(path, "not a pg_embed prepared file"));
    }
    // Format 1 (pg_embed 0.6) put the description before the data: still listed by name.
    let at = if fixed[7] == 1 { FIXED as u64 } else { data_start.checked_add(data_len).ok_or_else(|| damaged(path, "sizes overflow"))? };
    let mut json = vec![0u8; json_len as usize];
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut json, at).map_err(|e| damaged(path, e))?;
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
