//! Weight I/O: a backbone's weights (one `model.safetensors`, or the shards a
//! `model.safetensors.index.json` lists) read one tensor at a time, when the model asks for
//! it: loading holds the model being built plus one tensor, not the whole file. Also the
//! bytes a model folder's weights take once prepared (from the headers alone) and the
//! builders of torch's Linear and LayerNorm. Whole safetensors files and their headers are
//! read by `crate::safetensors_io`.

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;

use crate::error::{Error, Result};
use crate::layers::{Linear, Norm};
use crate::options::Precision;
use crate::safetensors_io::{read_header, safetensors_shapes};

/// Bytes the weights of the model directory `dir` take once prepared in `precision`: the
/// size of the server's shared prepared file (and of each backend's private copy when
/// sharing is off). Read from the safetensors headers only (nothing is
/// allocated for the tensors): every tensor of every safetensors file, sub-folders
/// included, as float32; in bfloat16 and int8, the backbone's linear weights (the 2-D
/// tensors of its model.safetensors that are not embedding tables or classifier layers, see
/// [`packed_linear`]) as bfloat16 (2 bytes a weight), or as int8 with a float32 scale
/// and an int32 offset per 32 weights (1.25 bytes a weight). The kernels' padding of a weight's outputs to
/// panels of 32 is not counted (under 1 % for real models).
pub fn prepared_bytes(dir: &Path, precision: Precision) -> Result<u64> {
    // The backbone's folder: where bfloat16 packs the linear weights (an unreadable layout is
    // an error then), and where LoRA task adapters add a copy of the backbone each.
    let bdir = match crate::st::Layout::read(dir) {
        Ok(layout) => Some(layout.backbone_dir),
        Err(e) if precision != Precision::Float32 => return Err(e),
        Err(_) => None,
    };
    let backbone = bdir.as_deref().filter(|_| precision != Precision::Float32);
    let mut total = 0u64;
    for path in crate::files::files_under(dir, |_| Ok(()))? {
        if path.extension().is_some_and(|e| e == "safetensors") {
            let is_backbone = backbone.is_some_and(|b| {
                path.parent() == Some(b)
                    && path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("model"))
            });
            let packed = if is_backbone { precision } else { Precision::Float32 };
            total = total.saturating_add(safetensors_prepared_bytes(&path, packed)?);
        }
    }
    // LoRA task adapters: a copy of the backbone per task (`crate::lora`).
    if let Some(bdir) = &bdir {
        let tasks = crate::lora::folders::count(bdir) as u64;
        if tasks > 0 {
            total = total.saturating_add(tasks.saturating_mul(checkpoint_bytes(bdir, precision)?));
        }
    }
    Ok(total)
}

/// Bytes of the largest tensor of any safetensors file under `dir`, as float32: what
/// building the model holds of one tensor at a time (read from the headers only).
pub fn largest_tensor_bytes(dir: &Path) -> Result<u64> {
    let mut largest = 0u64;
    for path in crate::files::files_under(dir, |_| Ok(()))? {
        if path.extension().is_some_and(|e| e == "safetensors") {
            for (_, shape) in safetensors_shapes(&path)? {
                let elements = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d)).unwrap_or(u64::MAX);
                largest = largest.max(elements.saturating_mul(4));
            }
        }
    }
    Ok(largest)
}

/// Bytes of the backbone checkpoint of `bdir` (its model*.safetensors) once prepared in
/// `precision`: what each LoRA task's copy of the backbone takes.
pub fn checkpoint_bytes(bdir: &Path, precision: Precision) -> Result<u64> {
    let mut total = 0u64;
    for path in backbone_files(bdir)? {
        total = total.saturating_add(safetensors_prepared_bytes(&path, precision)?);
    }
    Ok(total)
}

/// Whether the backbone loaded in bfloat16 or int8 keeps the tensor `name` of shape `shape`
/// in that precision: its linear layers' weights. Embedding tables (and T5's relative position
/// table), norms, biases, convolutions and the classification head stay float32.
fn packed_linear(name: &str, shape: &[u64]) -> bool {
    const FLOAT32: [&str; 7] = ["embed", "wte", "wpe", "shared", "relative_attention_bias", "classifier", "score"];
    shape.len() == 2 && !FLOAT32.iter().any(|part| name.contains(part))
}

/// Bytes of all tensors of a safetensors file once prepared, from its header (see
/// [`safetensors_shapes`]): float32, or for the linear weights of a backbone loaded in
/// `precision`, that precision's bytes (int8: a float32 scale and an int32 offset per 32
/// weights as well).
fn safetensors_prepared_bytes(path: &Path, precision: Precision) -> Result<u64> {
    let mut total = 0u64;
    for (name, shape) in safetensors_shapes(path)? {
        // Bytes per 32 values.
        let size = match precision {
            Precision::Bfloat16 if packed_linear(&name, &shape) => 64,
            Precision::Int8 if packed_linear(&name, &shape) => 40,
            _ => 128,
        };
        let elements = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
        total = elements
            .and_then(|n| n.checked_mul(size))
            .map(|b| b.div_ceil(32))
            .and_then(|b| total.checked_add(b))
            .ok_or_else(|| Error::invalid_file(path, format!("{name}: shape {shape:?} overflows")))?;
    }
    Ok(total)
}

/// The backbone's weights under `dir` (`model.safetensors`, else the shards of
/// `model.safetensors.index.json`), read one tensor at a time as the model asks for them,
/// and their parameter count.
pub fn load_weights(dir: &Path, device: &Device) -> Result<(VarBuilder<'static>, usize)> {
    let tensors = Tensors::open(&backbone_files(dir)?)?;
    let parameters = tensors.parameters();
    Ok((VarBuilder::from_backend(Box::new(tensors), DType::F32, device.clone()), parameters))
}

/// The backbone's safetensors files in `dir`: `model.safetensors`, or the shards that
/// `model.safetensors.index.json` names (as transformers saves models over its shard size).
pub fn backbone_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let single = dir.join("model.safetensors");
    let index = dir.join("model.safetensors.index.json");
    if single.exists() || !index.exists() {
        return Ok(vec![single]);
    }
    #[derive(serde::Deserialize)]
    struct Index {
        weight_map: std::collections::BTreeMap<String, String>,
    }
    let parsed: Index = crate::files::read_json(&index)?;
    let mut files: Vec<&String> = parsed.weight_map.values().collect();
    files.sort();
    files.dedup();
    files
        .into_iter()
        .map(|name| {
            let plain = Path::new(name).components().count() == 1
                && matches!(Path::new(name).components().next(), Some(std::path::Component::Normal(_)));
            if plain {
                Ok(dir.join(name))
            } else {
                Err(Error::invalid_file(&index, format!("shard \"{name}\" is not a file name in the model folder")))
            }
        })
        .collect()
}

/// Where a tensor lies: its file, dtype, shape and bytes.
struct Place {
    file: usize,
    dtype: DType,
    shape: Vec<usize>,
    start: u64,
    len: usize,
}

/// Safetensors files read a tensor at a time (positioned reads of its bytes, no mapping),
/// each converted to the dtype asked for: candle's `VarBuilder` over them.
pub struct Tensors {
    files: Vec<(PathBuf, std::fs::File)>,
    places: HashMap<String, Place>,
}

impl Tensors {
    /// Reads the headers of `paths` (every tensor's dtype, shape and place, checked against
    /// the file's length); no tensor is read.
    pub fn open(paths: &[PathBuf]) -> Result<Self> {
        #[derive(serde::Deserialize)]
        struct Entry {
            dtype: String,
            shape: Vec<usize>,
            data_offsets: [u64; 2],
        }
        let mut files = Vec::with_capacity(paths.len());
        let mut places = HashMap::new();
        for (i, path) in paths.iter().enumerate() {
            let bad = |why: String| Error::invalid_file(path, why);
            let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
            let size = file.metadata().map_err(|e| Error::io(path, e))?.len();
            let (entries, data) = read_header(path, &mut file)?;
            for (name, value) in entries {
                let e: Entry = serde_json::from_value(value).map_err(|e| bad(format!("{name}: {e}")))?;
                let dtype = match e.dtype.as_str() {
                    "F32" => DType::F32,
                    "F16" => DType::F16,
                    "BF16" => DType::BF16,
                    "F64" => DType::F64,
                    "I64" => DType::I64,
                    "U32" => DType::U32,
                    "U8" => DType::U8,
                    other => return Err(bad(format!("{name}: dtype {other} is not read"))),
                };
                let [from, to] = e.data_offsets;
                let elements = e.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
                let bytes = elements.and_then(|n| n.checked_mul(dtype.size_in_bytes()));
                if from > to || data.saturating_add(to) > size || bytes != Some((to - from) as usize) {
                    return Err(bad(format!("{name}: offsets {from}..{to} do not hold a {:?} {dtype:?} tensor", e.shape)));
                }
                let place = Place { file: i, dtype, shape: e.shape, start: data + from, len: (to - from) as usize };
                if places.insert(name.clone(), place).is_some() {
                    return Err(bad(format!("{name} is in more than one file")));
                }
            }
            files.push((path.clone(), file));
        }
        // The legacy names of a LayerNorm's parameters, which transformers renames on load
        // (`LayerNorm.gamma` -> `.weight`, `LayerNorm.beta` -> `.bias`; old BERT
        // checkpoints, and BERT folders transformers 5.3 saves).
        let legacy: Vec<String> =
            places.keys().filter(|n| n.ends_with("LayerNorm.gamma") || n.ends_with("LayerNorm.beta")).cloned().collect();
        for name in legacy {
            let renamed = match name.strip_suffix("gamma") {
                Some(stem) => format!("{stem}weight"),
                None => format!("{}bias", name.trim_end_matches("beta")),
            };
            if !places.contains_key(&renamed) {
                if let Some(place) = places.remove(&name) {
                    places.insert(renamed, place);
                }
            }
        }
        Ok(Tensors { files, places })
    }

    /// The names of every tensor, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.places.keys().cloned().collect();
        names.sort();
        names
    }

    /// Elements of every tensor.
    pub fn parameters(&self) -> usize {
        self.places.values().map(|p| p.shape.iter().product::<usize>()).sum()
    }

    /// Tensor `name`, read now as `dtype`. Float32 tensors are read straight into the
    /// tensor's memory and bfloat16 ones widened to float32 a slice at a time, so reading
    /// holds the tensor once (other conversions go through candle's, as stored first).
    fn read(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        check_interrupt()?;
        let Some(place) = self.places.get(name) else {
            candle_core::bail!("cannot find tensor {name}")
        };
        let (path, file) = &self.files[place.file];
        let failed = |e: std::io::Error| candle_core::Error::Msg(format!("{}: {name}: {e}", path.display()));
        let elements = place.len / place.dtype.size_in_bytes().max(1);
        match (place.dtype, dtype) {
            (DType::F32, DType::F32) => {
                let mut values = huge_vec(elements);
                // Read straight into the vector's room (not zeroed first).
                let room = &mut values.spare_capacity_mut()[..elements];
                // SAFETY: the room's bytes, exactly `place.len` of them; u8 has no invalid
                // values, and every byte is written by the read before the length is set.
                let bytes = unsafe { std::slice::from_raw_parts_mut(room.as_mut_ptr().cast::<u8>(), place.len) };
                file.read_exact_at(bytes, place.start).map_err(failed)?;
                // SAFETY: all `elements` values were just read (any bit pattern is an f32).
                unsafe { values.set_len(elements) };
                if cfg!(target_endian = "big") {
                    values.iter_mut().for_each(|v| *v = f32::from_bits(u32::from_le(v.to_bits())));
                }
                Tensor::from_vec(values, place.shape.as_slice(), dev)
            }
            (DType::BF16, DType::F32) => {
                const SLICE: usize = 1 << 22;
                let mut values = huge_vec(elements);
                let mut bytes = vec![0u8; (2 * SLICE).min(place.len)];
                let mut at = 0usize;
                while at < place.len {
                    let n = (place.len - at).min(bytes.len());
                    file.read_exact_at(&mut bytes[..n], place.start + at as u64).map_err(failed)?;
                    // bfloat16 is the top half of a float32: widening is exact.
                    values.extend(bytes[..n].chunks_exact(2).map(|b| f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16)));
                    at += n;
                }
                Tensor::from_vec(values, place.shape.as_slice(), dev)
            }
            _ => {
                let mut bytes = vec![0u8; place.len];
                file.read_exact_at(&mut bytes, place.start).map_err(failed)?;
                Tensor::from_raw_buffer(&bytes, place.dtype, &place.shape, dev)?.to_dtype(dtype)
            }
        }
    }
}

/// An empty vector with room for `n` floats, its memory advised for huge pages: a
/// tensor's values are written once, and faulting them in 2 MB at a time instead of 4 kB
/// takes most of the kernel's time out of reading a model (measured: a 1.5 B float32
/// model's build spent 26 s of 34 in the kernel, most of it in page faults).
fn huge_vec(n: usize) -> Vec<f32> {
    let v = Vec::with_capacity(n);
    crate::threads::huge_pages(&v);
    v
}

/// The values of a float32 tensor, row-major: one copy, into memory advised for huge
/// pages (see [`huge_vec`]).
pub fn values(t: &Tensor) -> candle_core::Result<Vec<f32>> {
    let (storage, layout) = t.storage_and_layout();
    if let (candle_core::Storage::Cpu(cpu), true, DType::F32) = (&*storage, layout.is_contiguous(), t.dtype()) {
        let all = cpu.as_slice::<f32>()?;
        let n = t.elem_count();
        let mut v = huge_vec(n);
        v.extend_from_slice(&all[layout.start_offset()..layout.start_offset() + n]);
        return Ok(v);
    }
    drop(storage);
    t.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()
}

thread_local! {
    /// What a build calls between the tensors it reads (see [`interruptible`]).
    static INTERRUPT: std::cell::Cell<Option<*const (dyn Fn() -> Result<()> + 'static)>> = const { std::cell::Cell::new(None) };
}

/// Runs `f` (a build) with `interrupt` called before each tensor it reads on this thread:
/// a cancel stops a long build between two tensors (its error, or its unwinding, ends the
/// build, and what it made is freed).
pub fn interruptible<R>(interrupt: &dyn Fn() -> Result<()>, f: impl FnOnce() -> Result<R>) -> Result<R> {
    struct Restore(Option<*const (dyn Fn() -> Result<()> + 'static)>);
    impl Drop for Restore {
        fn drop(&mut self) {
            INTERRUPT.set(self.0);
        }
    }
    let ptr: *const (dyn Fn() -> Result<()> + '_) = interrupt;
    // SAFETY: only the lifetime is erased; the pointer is called only while `f` runs (it is
    // restored on return and on unwind), and `interrupt` outlives this call.
    let ptr: *const (dyn Fn() -> Result<()> + 'static) = unsafe { std::mem::transmute(ptr) };
    let _restore = Restore(INTERRUPT.replace(Some(ptr)));
    f()
}

/// Calls the build's interrupt check, if any (see [`interruptible`]).
fn check_interrupt() -> candle_core::Result<()> {
    let Some(interrupt) = INTERRUPT.get() else { return Ok(()) };
    // SAFETY: set by `interruptible`, whose `interrupt` is alive while it is set.
    unsafe { (*interrupt)() }.map_err(|e| candle_core::Error::Msg(e.to_string()))
}

impl candle_nn::var_builder::SimpleBackend for Tensors {
    fn get(
        &self,
        s: candle_core::Shape,
        name: &str,
        _: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        if let Some(place) = self.places.get(name) {
            if place.shape.as_slice() != s.dims() {
                candle_core::bail!("shape mismatch for {name}, expected {s:?}, got {:?}", place.shape)
            }
        }
        self.read(name, dtype, dev)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        self.read(name, dtype, dev)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.places.contains_key(name)
    }
}

/// A torch `Linear` under `vb`: `weight` [outputs, inputs] row-major and, when `bias`,
/// `bias` [outputs].
pub fn torch_parts(
    vb: &VarBuilder,
    outputs: usize,
    inputs: usize,
    bias: bool,
) -> candle_core::Result<(Vec<f32>, Option<Vec<f32>>)> {
    let weight = values(&vb.get((outputs, inputs), "weight")?)?;
    let bias = bias.then(|| vb.get(outputs, "bias")?.to_vec1::<f32>()).transpose()?;
    Ok((weight, bias))
}

/// A torch `Linear` under `vb` as a layer of the library (see [`torch_parts`]).
pub fn torch_linear(
    vb: &VarBuilder,
    outputs: usize,
    inputs: usize,
    bias: bool,
) -> candle_core::Result<Linear> {
    let (weight, bias) = torch_parts(vb, outputs, inputs, bias)?;
    Linear::from_torch(weight, bias, outputs, inputs)
}

/// A torch `Linear` from its tensors: `weight` [outputs, inputs] and `bias` [outputs].
pub fn linear_of(weight: &Tensor, bias: Option<&Tensor>) -> candle_core::Result<Linear> {
    let (outputs, inputs) = weight.dims2()?;
    let bias = bias.map(|b| b.to_vec1::<f32>()).transpose()?;
    Linear::from_torch(weight.flatten_all()?.to_vec1::<f32>()?, bias, outputs, inputs)
}

/// A torch `LayerNorm` of `width` under `vb`: `weight` and, when `bias`, `bias`.
pub fn layer_norm(vb: &VarBuilder, width: usize, eps: f64, bias: bool) -> candle_core::Result<Norm> {
    let weight = vb.get(width, "weight")?.to_vec1::<f32>()?;
    let bias = bias.then(|| vb.get(width, "bias")?.to_vec1::<f32>()).transpose()?;
    Norm::layer(weight, bias, eps)
}

#[cfg(test)]
mod tests {
    use crate::options::Precision::{Bfloat16, Float32, Int8};

    #[test]
    fn prepared_bytes_read_from_headers() {
        let dir = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .join("models/all-MiniLM-L6-v2");
        let bytes = super::prepared_bytes(&dir, Float32).unwrap();
        // 22,713,216 parameters of the backbone (as transformers counts them) plus the
        // position ids buffer stored in this checkpoint, 4 bytes each.
        assert!((90_000_000..92_000_000).contains(&bytes), "{bytes}");
        // bfloat16: the linear weights (6 layers of Q, K, V, output, intermediate and
        // output projections, and the pooler's dense) take 2 bytes a value, not 4; the
        // embedding tables, norms and biases stay float32.
        let half = super::prepared_bytes(&dir, Bfloat16).unwrap();
        let linear: u64 = 6 * (4 * 384 * 384 + 2 * 384 * 1536) + 384 * 384;
        assert_eq!(bytes - half, 2 * linear, "{bytes} {half}");
        // int8: 1 byte a value, and 8 bytes (a scale, an offset) per 32 values.
        let int8 = super::prepared_bytes(&dir, Int8).unwrap();
        assert_eq!(bytes - int8, 4 * linear - linear * 40 / 32, "{bytes} {int8}");
        let tmp = std::env::temp_dir().join(format!("pg_embed_wb_{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        std::fs::write(tmp.join("model.safetensors"), u64::MAX.to_le_bytes()).unwrap();
        assert!(matches!(super::prepared_bytes(&tmp, Float32), Err(crate::error::Error::InvalidFile { .. })));
        let header = br#"{"w":{"dtype":"F16","shape":[4294967296,4294967296,16],"data_offsets":[0,2]}}"#;
        let mut lying = (header.len() as u64).to_le_bytes().to_vec();
        lying.extend_from_slice(header);
        std::fs::write(tmp.join("model.safetensors"), lying).unwrap();
        let err = super::prepared_bytes(&tmp, Float32).unwrap_err().to_string();
        assert!(err.contains("overflows"), "{err}");
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
