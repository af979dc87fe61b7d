//! PyTorch `.pt` state dicts (`torch.save(linear.state_dict(), path)`) read as data: the zip
//! archive `torch.save` writes since PyTorch 1.6, its `data.pkl` interpreted by candle's
//! pickle reader, which builds values and never runs the code a pickle names. The result
//! must be a dict of names to plain tensors: any other object in it (a call of a global, a
//! number, a string) is refused by name, as is the legacy (non-zip) format. bge-m3 ships
//! its `colbert_linear.pt` and `sparse_linear.pt` heads this way.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use candle_core::pickle::{Object, PthTensors, Stack};

use crate::error::{Error, Result};

/// What a `.pt` file may hold.
const SUPPORTED: &str = "a state dict of tensors (float32, float16 or bfloat16), as torch.save writes it since PyTorch 1.6";

/// The tensors of a `.pt` state dict as float32 row-major values with their shapes, by name.
pub fn read_state_dict(path: &Path) -> Result<BTreeMap<String, (Vec<usize>, Vec<f32>)>> {
    let unsupported = |value: String| Error::Unsupported { what: "PyTorch file content", value, path: path.into(), supported: SUPPORTED };
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut zip = zip::ZipArchive::new(std::io::BufReader::new(file))
        .map_err(|_| unsupported("a file that is not a zip archive (torch.save before PyTorch 1.6, or not torch.save)".into()))?;
    let names = zip.file_names().collect::<std::result::Result<Vec<_>, _>>().map_err(|e| Error::invalid_file(path, e))?;
    let pickles: Vec<String> =
        names.iter().filter(|n| n.ends_with("/data.pkl") || *n == "data.pkl").map(|n| n.to_string()).collect();
    let [pickle] = pickles.as_slice() else {
        return Err(unsupported(format!("{} data.pkl records", pickles.len())));
    };
    let mut bytes = Vec::new();
    zip.by_name(pickle)
        .and_then(|mut f| f.read_to_end(&mut bytes).map_err(Into::into))
        .map_err(|e| Error::invalid_file(path, e))?;
    let mut stack = Stack::empty();
    stack.read_loop(&mut std::io::Cursor::new(&bytes)).map_err(|e| unsupported(format!("pickle: {e}")))?;
    let object = stack.finalize().map_err(|e| unsupported(format!("pickle: {e}")))?;
    let Object::Dict(entries) = object else {
        return Err(unsupported(format!("a top-level {} instead of a dict", describe(&object))));
    };
    let dir = Path::new(pickle.strip_suffix(".pkl").unwrap_or(pickle));
    let mut names = Vec::with_capacity(entries.len());
    for (key, value) in entries {
        let Object::Unicode(name) = key else {
            return Err(unsupported(format!("a key {} instead of a name", describe(&key))));
        };
        // `state_dict()` keeps the modules' versions as `_metadata`, plain nested dicts.
        if name == "_metadata" && is_plain_data(&value) {
            continue;
        }
        let what = describe(&value);
        match value.into_tensor_info(Object::Unicode(name.clone()), dir) {
            Ok(Some(_)) => names.push(name),
            _ => return Err(unsupported(format!("{name}: {what}, not a tensor"))),
        }
    }
    let tensors = PthTensors::new(path, None).map_err(|e| Error::invalid_file(path, e))?;
    let mut out = BTreeMap::new();
    for name in names {
        let tensor = tensors
            .get(&name)
            .map_err(|e| Error::invalid_file(path, format!("{name}: {e}")))?
            .ok_or_else(|| Error::invalid_file(path, format!("{name}: its data is missing")))?;
        let shape = tensor.dims().to_vec();
        let values = tensor
            .to_dtype(candle_core::DType::F32)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<f32>())
            .map_err(|_| unsupported(format!("{name}: a tensor of {:?}", tensor.dtype())))?;
        out.insert(name, (shape, values));
    }
    Ok(out)
}

/// Nested dicts of names, numbers and booleans only.
fn is_plain_data(object: &Object) -> bool {
    match object {
        Object::Dict(entries) => entries.iter().all(|(k, v)| is_plain_data(k) && is_plain_data(v)),
        Object::Unicode(_) | Object::Int(_) | Object::Long(_) | Object::Float(_) | Object::Bool(_) | Object::None => true,
        _ => false,
    }
}

/// An object as an error message names it: the global a call or class names, else its kind.
fn describe(object: &Object) -> String {
    match object {
        Object::Class { module_name, class_name } => format!("the global {module_name}.{class_name}"),
        Object::Reduce { callable, .. } | Object::Build { callable, .. } => match callable.as_ref() {
            Object::Class { module_name, class_name } => format!("a call of {module_name}.{class_name}"),
            other => format!("a call of {}", describe(other)),
        },
        Object::Int(_) | Object::Long(_) => "a number".into(),
        Object::Float(_) => "a float".into(),
        Object::Unicode(_) => "a string".into(),
        Object::Bool(_) => "a boolean".into(),
        Object::None => "None".into(),
        Object::Tuple(_) => "a tuple".into(),
        Object::List(_) => "a list".into(),
        Object::Dict(_) => "a dict".into(),
        Object::Mark => "a mark".into(),
        Object::PersistentLoad(_) => "a storage".into(),
    }
}
