//! Where a backbone folder keeps its LoRA task adapters (see `crate::lora`): PEFT adapter
//! subfolders, or jinaai's `lora_adaptations` in config.json. Read by the size estimate of
//! `crate::weights` too, so nothing here reads tensors.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The PEFT adapter folders right under `dir`, by folder name.
pub fn peft_folders(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return Ok(found) };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() && path.join("adapter_config.json").is_file() {
            found.push((entry.file_name().to_string_lossy().into_owned(), path));
        }
    }
    if dir.join("adapter_config.json").is_file() {
        return Err(Error::Unsupported {
            what: "PEFT adapter",
            value: "adapter_config.json beside the base weights".into(),
            path: dir.join("adapter_config.json"),
            supported: "one adapter per task, each in a subfolder named after the task",
        });
    }
    found.sort();
    Ok(found)
}

/// jinaai's original layout: the task names config.json lists in `lora_adaptations`.
pub fn original_tasks(config: &serde_json::Value) -> Option<&Vec<serde_json::Value>> {
    config.get("lora_adaptations").and_then(serde_json::Value::as_array)
}

/// How many LoRA tasks the backbone folder `dir` has (0 when it has none or cannot be read).
pub fn count(dir: &Path) -> usize {
    let config = crate::files::read_json::<serde_json::Value>(&dir.join("config.json")).ok();
    let original = config.as_ref().and_then(original_tasks).map(Vec::len);
    original.unwrap_or_else(|| peft_folders(dir).map_or(0, |f| f.len()))
}

