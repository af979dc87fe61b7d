//! LoRA task adapters (jina-embeddings-v3's, and any PEFT LoRA adapter saved beside a
//! backbone): each task's delta merged once into a copy of the backbone's weights, so a call
//! that names the task computes with plain weights (no per-call LoRA products).
//!
//! Two layouts give the same numbers:
//! - **PEFT** (transformers + peft): a subfolder of the backbone's folder per task, holding
//!   `adapter_config.json` (`peft_type` "LORA") and `adapter_model.safetensors`
//!   (`base_model.model.<module>.lora_A.weight` [r, in] and `lora_B.weight` [out, r]; for an
//!   embedding `lora_embedding_A` [r, rows] and `lora_embedding_B` [width, r]). The task is
//!   named by its folder. Delta = scaling * B @ A (transposed for an embedding), scaling =
//!   lora_alpha / r (lora_alpha / sqrt(r) with `use_rslora`).
//! - **jinaai's original** (`lora_adaptations` in config.json): torch parametrizations in the
//!   backbone's own file, `<module>.parametrizations.weight.original` and
//!   `<module>.parametrizations.weight.0.lora_A` / `lora_B` stacked over the tasks in
//!   `lora_adaptations` order (a linear layer: A [tasks, R, in], B [tasks, out, R]; an
//!   embedding: A [tasks, rows, R], B [tasks, R, width]); delta = lora_alpha / lora_rank * B @ A
//!   (A @ B for an embedding).
//!
//! A PEFT setting that changes the numbers in a way not computed here (DoRA, trained biases,
//! modules to save, per-layer ranks, ...) is refused by name, and so is a delta the backbone
//! never reads: never a silently different vector.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::VarBuilder;

use crate::error::{Error, Result};
use crate::weights::Tensors;
use folders::peft_folders;

pub mod folders;

/// The tasks of a folder with LoRA adapters.
pub struct Layout {
    base: Arc<Tensors>,
    pub tasks: Vec<Arc<Task>>,
    /// "peft" or "original".
    pub kind: &'static str,
}

/// One task's low-rank factors, by the name of the weight they change: each delta is
/// computed when its weight is read (a full-size delta per weight, one at a time, never all
/// of a task's at once: an embedding table's alone is as large as the table).
pub struct Task {
    /// The adapter's folder name (PEFT) or jinaai's task name (original).
    pub name: String,
    deltas: BTreeMap<String, Factors>,
    /// The deltas a backbone built with this task read.
    used: Mutex<BTreeSet<String>>,
}

/// A task's name as calls may spell it: '.', '-' and '_' are the same (jinaai's
/// `retrieval.query` is the folder `retrieval_query`).
pub fn same_task(a: &str, b: &str) -> bool {
    let norm = |s: &str| s.replace(['.', '-'], "_");
    norm(a) == norm(b)
}

impl Layout {
    /// The LoRA adapters of the backbone folder `dir` (whose config.json is `config`), or
    /// `None` when it has none.
    pub fn find(dir: &Path, config: &serde_json::Value) -> Result<Option<Layout>> {
        let original = folders::original_tasks(config).cloned();
        let peft = peft_folders(dir)?;
        if original.is_some() && !peft.is_empty() {
            return Err(Error::invalid_file(
                dir.join("config.json"),
                "both lora_adaptations (jinaai's original layout) and PEFT adapter folders: one or the other",
            ));
        }
        if original.is_none() && peft.is_empty() {
            return Ok(None);
        }
        let base = Arc::new(Tensors::open(&crate::weights::backbone_files(dir)?)?);
        let mut tasks = Vec::new();
        let kind = if let Some(names) = original {
            let names: Vec<String> = names
                .iter()
                .map(|n| n.as_str().map(str::to_string))
                .collect::<Option<_>>()
                .ok_or_else(|| Error::invalid_file(dir.join("config.json"), "lora_adaptations must be a list of names"))?;
            for (i, name) in names.iter().enumerate() {
                tasks.push(Arc::new(original_task(dir, config, &base, i, name)?));
            }
            "original"
        } else {
            for (name, folder) in peft {
                tasks.push(Arc::new(peft_task(&folder, &name)?));
            }
            "peft"
        };
        Ok(Some(Layout { base, tasks, kind }))
    }

    /// The backbone's weights as the model's loader reads them (jinaai's parametrized names
    /// read under their plain ones), with `task`'s deltas added (none: the base model).
    pub fn weights(&self, task: Option<&Arc<Task>>) -> VarBuilder<'static> {
        let overlay = Overlay { base: self.base.clone(), task: task.cloned() };
        VarBuilder::from_backend(Box::new(overlay), DType::F32, Device::Cpu)
    }

    /// Parameters of the base checkpoint (the adapters' own not counted).
    pub fn parameters(&self) -> usize {
        self.base.parameters()
    }

    /// An error naming a delta that no backbone built with its task read (a module the
    /// loader does not know by that name).
    pub fn check_used(&self) -> Result<()> {
        for task in &self.tasks {
            let used = task.used.lock().map_or_else(|e| e.into_inner().clone(), |u| u.clone());
            if let Some(unread) = task.deltas.keys().find(|k| !used.contains(*k)) {
                return Err(Error::Unsupported {
                    what: "LoRA target",
                    value: format!("{unread} (task {})", task.name),
                    path: PathBuf::from(&task.name),
                    supported: "the weights the backbone reads (attention, feed-forward and embedding matrices)",
                });
            }
        }
        Ok(())
    }
}

/// A delta as its low-rank factors: scaling * left @ right, transposed for a PEFT embedding.
struct Factors {
    left: Tensor,
    right: Tensor,
    scaling: f64,
    transposed: bool,
}

impl Factors {
    /// The delta's [rows, columns], in the weight's orientation.
    fn dims(&self) -> [usize; 2] {
        let (rows, cols) = (self.left.dims()[0], self.right.dims()[1]);
        if self.transposed { [cols, rows] } else { [rows, cols] }
    }

    fn delta(&self) -> candle_core::Result<Tensor> {
        let d = self.left.matmul(&self.right)?.affine(self.scaling, 0.0)?;
        if self.transposed { d.t()?.contiguous() } else { Ok(d) }
    }
}

impl Task {
    /// Elements the deltas change.
    pub fn changed(&self) -> usize {
        self.deltas.values().map(|f| f.dims().iter().product::<usize>()).sum()
    }

    /// The delta of weight `name` as the loader names it: under that name, or jinaai's
    /// fused and renamed modules assembled from transformers' (PEFT's) module names.
    fn delta(&self, name: &str) -> candle_core::Result<Option<Tensor>> {
        let mut candidates = vec![name.to_string()];
        for prefix in ["roberta.", "model."] {
            if let Some(rest) = name.strip_prefix(prefix) {
                candidates.push(rest.to_string());
            }
        }
        for c in &candidates {
            if let Some(f) = self.deltas.get(c) {
                self.mark(c);
                return f.delta().map(Some);
            }
        }
        // jinaai's names of transformers' JinaEmbeddingsV3 modules.
        let plain = candidates.last().cloned().unwrap_or_default();
        let Some(rest) = plain.strip_prefix("encoder.layers.") else { return Ok(None) };
        let Some((layer, module)) = rest.split_once('.') else { return Ok(None) };
        let renamed = |m: &str| format!("layers.{layer}.{m}.weight");
        match module {
            "mixer.Wqkv.weight" => {
                let parts: Vec<String> = ["q_proj", "k_proj", "v_proj"].iter().map(|p| renamed(&format!("self_attn.{p}"))).collect();
                if !parts.iter().any(|p| self.deltas.contains_key(p)) {
                    return Ok(None);
                }
                let shape = parts.iter().find_map(|p| self.deltas.get(p)).map(Factors::dims).unwrap_or_default();
                let rows = parts
                    .iter()
                    .map(|p| {
                        self.mark(p);
                        self.deltas.get(p).map_or_else(|| Tensor::zeros(shape.as_slice(), DType::F32, &Device::Cpu), Factors::delta)
                    })
                    .collect::<candle_core::Result<Vec<_>>>()?;
                Ok(Some(Tensor::cat(&rows, 0)?))
            }
            "mixer.out_proj.weight" => self.take(&renamed("self_attn.o_proj")),
            "mlp.fc1.weight" | "mlp.fc2.weight" => self.take(&renamed(&module[..module.len() - ".weight".len()])),
            _ => Ok(None),
        }
    }

    fn take(&self, key: &str) -> candle_core::Result<Option<Tensor>> {
        let Some(f) = self.deltas.get(key) else { return Ok(None) };
        self.mark(key);
        f.delta().map(Some)
    }

    fn mark(&self, key: &str) {
        if let Ok(mut used) = self.used.lock() {
            used.insert(key.to_string());
        }
    }
}

/// The backbone's tensors with a task's deltas added.
struct Overlay {
    base: Arc<Tensors>,
    task: Option<Arc<Task>>,
}

impl Overlay {
    /// The base tensor's name: `name`, or jinaai's parametrized original of `<m>.weight`.
    fn base_name(&self, name: &str) -> Option<String> {
        if self.base.contains_tensor(name) {
            return Some(name.to_string());
        }
        let stem = name.strip_suffix(".weight")?;
        let original = format!("{stem}.parametrizations.weight.original");
        self.base.contains_tensor(&original).then_some(original)
    }

    fn read(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        let Some(base_name) = self.base_name(name) else { candle_core::bail!("cannot find tensor {name}") };
        let base = self.base.get_unchecked(&base_name, DType::F32, dev)?;
        let merged = match self.task.as_ref().map(|t| t.delta(name)).transpose()?.flatten() {
            Some(delta) => {
                if delta.dims() != base.dims() {
                    candle_core::bail!("LoRA delta of {name} is {:?}, the weight {:?}", delta.dims(), base.dims());
                }
                (base + delta)?
            }
            None => base,
        };
        merged.to_dtype(dtype)
    }
}

impl SimpleBackend for Overlay {
    fn get(&self, s: Shape, name: &str, _: candle_nn::Init, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        let t = self.read(name, dtype, dev)?;
        if t.shape() != &s {
            candle_core::bail!("shape mismatch for {name}, expected {s:?}, got {:?}", t.shape())
        }
        Ok(t)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        self.read(name, dtype, dev)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.base_name(name).is_some()
    }
}

/// One PEFT LoRA adapter's deltas, by the base weight's name.
fn peft_task(folder: &Path, name: &str) -> Result<Task> {
    let config_path = folder.join("adapter_config.json");
    let c: serde_json::Value = crate::files::read_json(&config_path)?;
    let refuse = |what: &'static str, value: String, supported: &'static str| {
        Err(Error::Unsupported { what, value, path: config_path.clone(), supported })
    };
    let text = |k: &str| c.get(k).and_then(serde_json::Value::as_str).unwrap_or_default().to_string();
    if text("peft_type") != "LORA" {
        return refuse("peft_type", text("peft_type"), "LORA");
    }
    // Settings that change what the adapter computes beyond W + scaling * B @ A.
    for key in ["use_dora", "lora_bias", "use_qalora", "use_bdlora", "fan_in_fan_out"] {
        if c.get(key).and_then(serde_json::Value::as_bool) == Some(true) {
            return refuse("PEFT LoRA setting", format!("{key}: true"), "plain LoRA: use_dora, lora_bias and fan_in_fan_out false");
        }
    }
    let bias = text("bias");
    if !(bias.is_empty() || bias == "none") {
        return refuse("PEFT LoRA bias", bias, "none");
    }
    for key in ["modules_to_save", "layers_to_transform", "layers_pattern", "target_parameters", "trainable_token_indices", "layer_replication"] {
        let set = match c.get(key) {
            None | Some(serde_json::Value::Null) => false,
            Some(serde_json::Value::Array(a)) => !a.is_empty(),
            Some(serde_json::Value::Object(o)) => !o.is_empty(),
            Some(_) => true,
        };
        if set {
            return refuse("PEFT LoRA setting", format!("{key}: {}", c[key]), "modules_to_save, layers_to_transform, target_parameters and trainable_token_indices unset");
        }
    }
    for key in ["rank_pattern", "alpha_pattern"] {
        if c.get(key).and_then(serde_json::Value::as_object).is_some_and(|o| !o.is_empty()) {
            return refuse("PEFT LoRA setting", format!("{key}: {}", c[key]), "one rank and one lora_alpha for every module");
        }
    }
    let r = c.get("r").and_then(serde_json::Value::as_f64).filter(|r| *r >= 1.0);
    let alpha = c.get("lora_alpha").and_then(serde_json::Value::as_f64);
    let (Some(r), Some(alpha)) = (r, alpha) else {
        return Err(Error::invalid_file(&config_path, "r (at least 1) and lora_alpha must be numbers"));
    };
    let rslora = c.get("use_rslora").and_then(serde_json::Value::as_bool) == Some(true);
    let scaling = if rslora { alpha / r.sqrt() } else { alpha / r };
    let weights = folder.join("adapter_model.safetensors");
    if !weights.is_file() {
        return Err(Error::MissingFile { path: weights });
    }
    let tensors = Tensors::open(&[weights.clone()])?;
    let dev = Device::Cpu;
    let read = |n: &str| tensors.get_unchecked(n, DType::F32, &dev).map_err(|e| Error::invalid_file(&weights, e));
    let mut modules: BTreeMap<String, [Option<String>; 2]> = BTreeMap::new();
    for key in tensors.names() {
        let stem = key.strip_prefix("base_model.model.").unwrap_or(&key).to_string();
        let (module, part) = if let Some(m) = stem.strip_suffix(".lora_A.weight") {
            (m, 0)
        } else if let Some(m) = stem.strip_suffix(".lora_B.weight") {
            (m, 1)
        } else if let Some(m) = stem.strip_suffix(".lora_embedding_A") {
            (m, 0)
        } else if let Some(m) = stem.strip_suffix(".lora_embedding_B") {
            (m, 1)
        } else {
            return Err(Error::Unsupported {
                what: "PEFT adapter tensor",
                value: key.clone(),
                path: weights.clone(),
                supported: "lora_A / lora_B (lora_embedding_A / lora_embedding_B) of each target module",
            });
        };
        modules.entry(module.to_string()).or_default()[part] = Some(key.clone());
    }
    let mut deltas = BTreeMap::new();
    for (module, [a, b]) in modules {
        let (Some(a), Some(b)) = (a, b) else {
            return Err(Error::invalid_file(&weights, format!("{module}: lora_A without lora_B or the reverse")));
        };
        // A [r, in], B [out, r]: the weight [out, in] gains B @ A. An embedding's A [r, rows]
        // and B [width, r]: the table [rows, width] gains (B @ A)^T.
        let transposed = a.ends_with("lora_embedding_A");
        let (a, b) = (read(&a)?, read(&b)?);
        if a.rank() != 2 || b.rank() != 2 || b.dims()[1] != a.dims()[0] {
            return Err(Error::invalid_file(&weights, format!("{module}: lora_A {:?} and lora_B {:?} do not multiply", a.dims(), b.dims())));
        }
        deltas.insert(format!("{module}.weight"), Factors { left: b, right: a, scaling, transposed });
    }
    Ok(Task { name: name.to_string(), deltas, used: Mutex::default() })
}

/// Task `index` of jinaai's original layout: every parametrized module's delta.
fn original_task(dir: &Path, config: &serde_json::Value, base: &Tensors, index: usize, name: &str) -> Result<Task> {
    let path = dir.join("config.json");
    let rank = config.get("lora_rank").and_then(serde_json::Value::as_f64).filter(|r| *r >= 1.0);
    let alpha = config.get("lora_alpha").and_then(serde_json::Value::as_f64);
    let (Some(rank), Some(alpha)) = (rank, alpha) else {
        return Err(Error::invalid_file(&path, "lora_rank (at least 1) and lora_alpha must be numbers"));
    };
    let scaling = alpha / rank;
    let dev = Device::Cpu;
    let bad = |e: candle_core::Error| Error::invalid_file(dir.join("model.safetensors"), e);
    let mut deltas = BTreeMap::new();
    for key in base.names() {
        let Some(module) = key.strip_suffix(".parametrizations.weight.0.lora_A") else { continue };
        let a = base.get_unchecked(&key, DType::F32, &dev).map_err(bad)?;
        let b = base.get_unchecked(&format!("{module}.parametrizations.weight.0.lora_B"), DType::F32, &dev).map_err(bad)?;
        let tasks = a.dims().first().copied().unwrap_or(0);
        if a.rank() != 3 || b.rank() != 3 || index >= tasks || b.dims()[0] != tasks {
            return Err(Error::invalid_file(
                dir.join("model.safetensors"),
                format!("{module}: lora_A {:?} and lora_B {:?} do not hold task {index} of a stack", a.dims(), b.dims()),
            ));
        }
        let (a, b) = (a.get(index).map_err(bad)?, b.get(index).map_err(bad)?);
        // A linear layer's weight is [out, in]: B @ A. An embedding's table is [rows, width]
        // with A [rows, R] and B [R, width]: A @ B.
        let (left, right) = if module.ends_with("embeddings") { (a, b) } else { (b, a) };
        if left.dims()[1] != right.dims()[0] {
            return Err(bad(candle_core::Error::Msg(format!("{module}: lora_A and lora_B do not multiply"))));
        }
        deltas.insert(format!("{module}.weight"), Factors { left, right, scaling, transposed: false });
    }
    if deltas.is_empty() {
        return Err(Error::invalid_file(
            dir.join("model.safetensors"),
            "lora_adaptations is set but no weight has parametrizations.weight.0.lora_A",
        ));
    }
    Ok(Task { name: name.to_string(), deltas, used: Mutex::default() })
}

/// The names of a folder's tasks, for messages.
pub fn names(tasks: &[Arc<Task>]) -> String {
    tasks.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")
}

/// Which task of `tasks` a call's name picks (see [`same_task`]).
pub fn pick<'a, T>(tasks: &'a [T], name: &str, task_name: impl Fn(&T) -> &str) -> Option<&'a T> {
    tasks.iter().find(|t| same_task(task_name(t), name))
}
