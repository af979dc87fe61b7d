//! Property tests: each backbone fixture of tests/fixtures/backbones with random config,
//! tensor and file damage; loading and embedding end in `Ok` or `Err`; a model that loads
//! with plausible weights (finite, not huge) gives finite vectors of its dimension, and none
//! fails in the forward pass. Whatever a directory holds, never a panic, a hang or a huge
//! allocation (the reliability requirement "no input may crash a backend").

#![allow(unused_imports)]

mod guard;

use guard::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use proptest::prelude::*;
use serde_json::{json, Value};

use pg_embed_core::error::Error;
use pg_embed_core::options::Options;
use pg_embed_core::pipeline::Pipeline;

/// The backbone fixture directories (one per architecture, plus variants), sorted.
fn backbone_fixtures() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(fixtures().join("backbones"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("config.json").is_file())
        .collect();
    dirs.sort();
    dirs
}

const MODEL_TYPES: [&str; 12] = [
    "bert",
    "clip_text_model",
    "deberta-v2",
    "distilbert",
    "electra",
    "modernbert",
    "mpnet",
    "nomic_bert",
    "roberta",
    "t5",
    "xlm-roberta",
    "gpt2",
];

#[derive(Debug, Clone, Copy)]
enum Reshape {
    Flatten,
    AddDim,
    Shrink,
    Grow,
    Transpose,
    Empty,
}

/// One change to a model directory. Indexes pick among the config's numeric values (at
/// any depth), its keys, the checkpoint's tensors, the directory's other JSON files and
/// their values, or all its files (each sorted), modulo their count.
#[derive(Debug, Clone)]
enum Mutation {
    SetNumber {
        field: usize,
        value: Value,
    },
    /// A value (number, string or boolean, at any depth) of another JSON file: the
    /// tokenizer, tokenizer_config.json, sentence-transformers' module configs.
    EditJson {
        file: usize,
        field: usize,
        value: Value,
    },
    RemoveField {
        field: usize,
    },
    ModelType(&'static str),
    DropTensor(usize),
    RenameTensor {
        tensor: usize,
        to: usize,
    },
    MangleTensorName {
        tensor: usize,
        suffix: &'static str,
    },
    Reshape {
        tensor: usize,
        how: Reshape,
    },
    Dtype {
        tensor: usize,
        dtype: DType,
    },
    NonFinite {
        tensor: usize,
        value: f32,
        all: bool,
    },
    Truncate {
        file: usize,
        fraction: f64,
    },
}

fn odd_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(0)),
        Just(json!(1)),
        Just(json!(2)),
        Just(json!(-1)),
        Just(json!(-7)),
        Just(json!(1u64 << 20)),
        Just(json!(1u64 << 31)),
        Just(json!((1u64 << 32) - 1)),
        Just(json!(1u64 << 32)),
        Just(json!(1u64 << 40)),
        Just(json!(1u64 << 62)),
        Just(json!(u64::MAX)),
        Just(json!(i64::MIN)),
        Just(json!(0.5)),
        Just(json!(1.5)),
        Just(json!(-0.25)),
        Just(json!(1e-300)),
        Just(json!(1e300)),
        Just(json!(-1e300)),
        Just(json!("seven")),
        Just(Value::Null),
        Just(json!(true)),
        (0u64..600).prop_map(|n| json!(n)),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let index = 0usize..1000;
    prop_oneof![
        4 => (index.clone(), odd_value()).prop_map(|(field, value)| Mutation::SetNumber { field, value }),
        1 => index.clone().prop_map(|field| Mutation::RemoveField { field }),
        1 => proptest::sample::select(MODEL_TYPES.to_vec()).prop_map(Mutation::ModelType),
        1 => index.clone().prop_map(Mutation::DropTensor),
        1 => (index.clone(), index.clone()).prop_map(|(tensor, to)| Mutation::RenameTensor { tensor, to }),
        1 => (index.clone(), proptest::sample::select(vec![".x", "_", "s"]))
            .prop_map(|(tensor, suffix)| Mutation::MangleTensorName { tensor, suffix }),
        2 => (
            index.clone(),
            prop_oneof![
                Just(Reshape::Flatten),
                Just(Reshape::AddDim),
                Just(Reshape::Shrink),
                Just(Reshape::Grow),
                Just(Reshape::Transpose),
                Just(Reshape::Empty)
            ]
        )
            .prop_map(|(tensor, how)| Mutation::Reshape { tensor, how }),
        1 => (
            index.clone(),
            proptest::sample::select(vec![DType::F16, DType::BF16, DType::F64, DType::I64, DType::U8, DType::U32])
        )
            .prop_map(|(tensor, dtype)| Mutation::Dtype { tensor, dtype }),
        1 => (index.clone(), proptest::sample::select(vec![f32::NAN, f32::INFINITY, f32::NEG_INFINITY]), any::<bool>())
            .prop_map(|(tensor, value, all)| Mutation::NonFinite { tensor, value, all }),
        2 => (index.clone(), index.clone(), odd_value()).prop_map(|(file, field, value)| Mutation::EditJson { file, field, value }),
        1 => (index.clone(), 0.0f64..1.0).prop_map(|(file, fraction)| Mutation::Truncate { file, fraction }),
    ]
}

/// JSON pointers of every number in `v`, or with `all` of every number, string and boolean.
fn leaves(v: &Value, at: String, all: bool, out: &mut Vec<String>) {
    match v {
        Value::Number(_) => out.push(at),
        Value::String(_) | Value::Bool(_) if all => out.push(at),
        Value::Object(m) => m.iter().for_each(|(k, v)| leaves(v, format!("{at}/{}", escape(k)), all, out)),
        Value::Array(a) => a.iter().enumerate().for_each(|(i, v)| leaves(v, format!("{at}/{i}"), all, out)),
        _ => {}
    }
}

/// A key as a JSON pointer token.
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Sets the `field`-th leaf of the JSON file at `path` (modulo the count) to `value`.
fn edit_json(path: &Path, field: usize, value: &Value) -> String {
    let Ok(mut json) = serde_json::from_slice::<Value>(&std::fs::read(path).unwrap()) else {
        return "not JSON".into();
    };
    let mut pointers = Vec::new();
    leaves(&json, String::new(), true, &mut pointers);
    let Some(p) = pointers.get(field % pointers.len().max(1)) else { return "no value".into() };
    if let Some(slot) = json.pointer_mut(p) {
        *slot = value.clone();
    }
    std::fs::write(path, json.to_string()).unwrap();
    format!("{p} = {value}")
}

/// Every file under `dir`, as paths relative to it, sorted.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = pg_embed_core::files::files_under(dir, |_| Ok(()))
        .unwrap()
        .into_iter()
        .map(|p| p.strip_prefix(dir).unwrap().to_path_buf())
        .collect();
    out.sort();
    out
}

/// Applies `m` to the config and tensors held in memory; returns what was changed.
fn apply(
    m: &Mutation,
    config: &mut Value,
    tensors: &mut HashMap<String, Tensor>,
    noise: &mut Noise,
) -> String {
    let mut names: Vec<String> = tensors.keys().cloned().collect();
    names.sort();
    let pick = |i: usize| names.get(i % names.len().max(1)).cloned();
    match m {
        Mutation::SetNumber { field, value } => {
            let mut pointers = Vec::new();
            leaves(config, String::new(), false, &mut pointers);
            let Some(p) = pointers.get(field % pointers.len().max(1)) else { return "no number".into() };
            if let Some(slot) = config.pointer_mut(p) {
                *slot = value.clone();
            }
            format!("config {p} = {value}")
        }
        Mutation::RemoveField { field } => {
            let Some(map) = config.as_object_mut() else { return "config not an object".into() };
            let mut keys: Vec<String> = map.keys().cloned().collect();
            keys.sort();
            let Some(k) = keys.get(field % keys.len().max(1)) else { return "no key".into() };
            map.remove(k);
            format!("config -{k}")
        }
        Mutation::ModelType(t) => {
            config["model_type"] = (*t).into();
            format!("config model_type = {t}")
        }
        Mutation::DropTensor(i) => {
            let Some(n) = pick(*i) else { return "no tensor".into() };
            tensors.remove(&n);
            format!("drop {n}")
        }
        Mutation::RenameTensor { tensor, to } => {
            let (Some(from), Some(to)) = (pick(*tensor), pick(*to)) else { return "no tensor".into() };
            if let Some(t) = tensors.remove(&from) {
                tensors.insert(to.clone(), t);
            }
            format!("rename {from} -> {to} (replacing it)")
        }
        Mutation::MangleTensorName { tensor, suffix } => {
            let Some(from) = pick(*tensor) else { return "no tensor".into() };
            if let Some(t) = tensors.remove(&from) {
                tensors.insert(format!("{from}{suffix}"), t);
            }
            format!("rename {from} -> {from}{suffix}")
        }
        Mutation::Reshape { tensor, how } => {
            let Some(n) = pick(*tensor) else { return "no tensor".into() };
            let t = tensors[&n].clone();
            let dims = t.dims().to_vec();
            let mut grown = dims.clone();
            let new = match how {
                Reshape::Flatten => t.flatten_all().unwrap(),
                Reshape::AddDim => t.unsqueeze(0).unwrap(),
                Reshape::Transpose if dims.len() == 2 => t.t().unwrap().contiguous().unwrap(),
                Reshape::Shrink if dims.last().is_some_and(|d| *d > 1) => {
                    t.narrow(dims.len() - 1, 0, dims[dims.len() - 1] - 1).unwrap().contiguous().unwrap()
                }
                Reshape::Empty => {
                    match grown.first_mut() {
                        Some(first) => *first = 0,
                        None => grown.push(0),
                    }
                    Tensor::zeros(grown, t.dtype(), &Device::Cpu).unwrap()
                }
                _ => {
                    if let Some(last) = grown.last_mut() {
                        *last += 1;
                    } else {
                        grown.push(2);
                    }
                    noise.tensor(&grown, 0.0, 0.5).to_dtype(t.dtype()).unwrap()
                }
            };
            let shape = new.dims().to_vec();
            tensors.insert(n.clone(), new);
            format!("reshape {n} {dims:?} -> {shape:?} ({how:?})")
        }
        Mutation::Dtype { tensor, dtype } => {
            let Some(n) = pick(*tensor) else { return "no tensor".into() };
            let t = tensors[&n].to_dtype(*dtype).unwrap();
            tensors.insert(n.clone(), t);
            format!("{n} as {dtype:?}")
        }
        Mutation::NonFinite { tensor, value, all } => {
            let Some(n) = pick(*tensor) else { return "no tensor".into() };
            let t = &tensors[&n];
            let mut values = t.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
            match (all, values.first_mut()) {
                (true, _) => values.iter_mut().for_each(|x| *x = *value),
                (false, Some(x)) => *x = *value,
                (false, None) => {}
            }
            let new = Tensor::from_vec(values, t.dims(), &Device::Cpu).unwrap().to_dtype(t.dtype()).unwrap();
            tensors.insert(n.clone(), new);
            format!("{n} {} = {value}", if *all { "all" } else { "[0]" })
        }
        // Applied to the files once written.
        Mutation::EditJson { .. } | Mutation::Truncate { .. } => String::new(),
    }
}

/// Whether every tensor holds plausible weights (as the loader reads them, in f32): finite
/// and at most `MAX_WEIGHT` in magnitude. An infinity cast to an integer type is finite but
/// near 2^63, and its products overflow f32 as they would in any float implementation.
fn all_plausible(tensors: &HashMap<String, Tensor>) -> bool {
    const MAX_WEIGHT: f32 = 1e4;
    tensors.values().all(|t| {
        t.to_dtype(DType::F32)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<f32>())
            .is_ok_and(|v| v.iter().all(|x| x.abs() <= MAX_WEIGHT))
    })
}

/// A copy of `fixture` in `dir` with `mutations` applied; the changes made, and whether
/// the weights written are all plausible (finite and not huge).
fn damage(fixture: &Path, dir: &Path, mutations: &[Mutation], seed: u64) -> (Vec<String>, bool) {
    copy_dir(fixture, dir);
    let config_path = dir.join("config.json");
    let weights_path = dir.join("model.safetensors");
    let mut config: Value = serde_json::from_slice(&std::fs::read(&config_path).unwrap()).unwrap();
    let mut tensors = candle_core::safetensors::load(&weights_path, &Device::Cpu).unwrap();
    let mut noise = Noise(seed);
    let mut done: Vec<String> = mutations
        .iter()
        .map(|m| apply(m, &mut config, &mut tensors, &mut noise))
        .filter(|d| !d.is_empty())
        .collect();
    std::fs::write(&config_path, config.to_string()).unwrap();
    candle_core::safetensors::save(&tensors, &weights_path).unwrap();
    let all = files(dir);
    let other_json: Vec<&PathBuf> = all
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "json") && *p != Path::new("config.json"))
        .collect();
    for m in mutations {
        if let Mutation::EditJson { file, field, value } = m {
            let Some(path) = other_json.get(file % other_json.len().max(1)) else { continue };
            done.push(format!("{} {}", path.display(), edit_json(&dir.join(path), *field, value)));
        }
    }
    for m in mutations {
        if let Mutation::Truncate { file, fraction } = m {
            let path = &all[file % all.len()];
            let bytes = std::fs::read(dir.join(path)).unwrap();
            let at = ((bytes.len() as f64) * fraction) as usize;
            std::fs::write(dir.join(path), &bytes[..at.min(bytes.len())]).unwrap();
            done.push(format!("truncate {} to {at} of {} bytes", path.display(), bytes.len()));
        }
    }
    (done, all_plausible(&tensors))
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0xda4a_9ed0_5eed),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn mutated_fixtures_never_panic(
        fixture in proptest::sample::select(backbone_fixtures()),
        mutations in proptest::collection::vec(mutation(), 1..6),
        seed in any::<u64>(),
    ) {
        let tmp = TempDir::new("mutated");
        let (done, plausible) = damage(&fixture, &tmp.0, &mutations, seed);
        let case = format!("{}: {}", fixture.file_name().unwrap().to_string_lossy(), done.join("; "));
        let dir = tmp.0.clone();
        let texts = damaged_texts();
        let outcome = guarded(&case, move || load_and_embed(&dir, &Options::default(), &texts));
        match outcome {
            Err(failure) => return Err(TestCaseError::fail(format!("{failure}\ncase: {case}"))),
            // A clean refusal: any error but an internal one from inference, which would
            // mean the load accepted what the forward pass cannot run.
            Ok(Err(error)) => {
                prop_assert!(!matches!(error, Error::Inference(_)) || !plausible, "loaded, then {}; case: {}", error, case);
            }
            Ok(Ok(e)) => {
                for v in e.one_by_one.iter().chain(&e.together).chain(&e.batched) {
                    prop_assert_eq!(v.len(), e.dim, "case: {}", case);
                    prop_assert!(!plausible || v.iter().all(|x| x.is_finite()), "{:?}; case: {}", v, case);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Regressions: what the properties found, one deterministic case each.
