//! Safetensors files read as they are stored: a file's header (each tensor's entry and where
//! the data begins), every tensor's shape from the header alone, and a whole file read into
//! memory as float32 tensors (never mapped: a file changed under a mapping could crash the
//! backend).

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};

use crate::error::{Error, Result};

/// A safetensors file's header (an 8-byte little-endian length, then that many bytes of
/// JSON), `__metadata__` left out: each tensor's entry by name, and where the data begins.
/// Nothing is read for the tensors.
pub(crate) fn read_header(path: &Path, file: &mut std::fs::File) -> Result<(HashMap<String, serde_json::Value>, u64)> {
    use std::io::Read;
    /// Headers are kilobytes; a larger length is a corrupt file, not a reason to allocate.
    const MAX_HEADER: u64 = 100 << 20;
    let mut len = [0u8; 8];
    file.read_exact(&mut len)
        .map_err(|e| Error::invalid_file(path, format!("no safetensors header: {e}")))?;
    let len = u64::from_le_bytes(len);
    if len > MAX_HEADER {
        return Err(Error::invalid_file(path, format!("safetensors header length {len} is not plausible")));
    }
    let mut header = vec![0u8; len as usize];
    file.read_exact(&mut header)
        .map_err(|e| Error::invalid_file(path, format!("truncated safetensors header: {e}")))?;
    let mut tensors: HashMap<String, serde_json::Value> =
        serde_json::from_slice(&header).map_err(|e| Error::invalid_file(path, e))?;
    tensors.remove("__metadata__");
    Ok((tensors, 8 + len))
}

/// Every tensor's shape, by name, from a safetensors file's header alone.
pub fn safetensors_shapes(path: &Path) -> Result<HashMap<String, Vec<u64>>> {
    #[derive(serde::Deserialize)]
    struct Entry {
        shape: Vec<u64>,
    }
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let (tensors, _) = read_header(path, &mut file)?;
    tensors
        .into_iter()
        .map(|(name, value)| {
            let entry: Entry =
                serde_json::from_value(value).map_err(|e| Error::invalid_file(path, format!("{name}: {e}")))?;
            Ok((name, entry.shape))
        })
        .collect()
}

/// Reads a safetensors file into memory as f32 tensors (no mmap: a file changed under a
/// mapping would crash the backend).
pub fn read_safetensors(path: &Path) -> Result<HashMap<String, Tensor>> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let tensors = candle_core::safetensors::load_buffer(&bytes, &Device::Cpu)
        .map_err(|e| Error::invalid_file(path, e))?;
    tensors
        .into_iter()
        .map(|(name, t)| {
            let t = t.to_dtype(DType::F32).map_err(|e| Error::invalid_file(path, format!("{name}: {e}")))?;
            Ok((name, t))
        })
        .collect()
}
