//! Checkpoints saved in shards, as transformers saves a model over its shard size (every
//! published 7B embedder): `model-0000k-of-0000n.safetensors` and
//! `model.safetensors.index.json` instead of one `model.safetensors`. The same tensors split
//! over three shards give the reference's vectors (tests/fixtures/families/golden.json);
//! a shard named outside the folder, a tensor in two shards and a shard that lies about its
//! offsets are refused.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::*;
use serde_json::{json, Value};

use pg_embed_core::error::Error;
use pg_embed_core::options::Options;
use pg_embed_core::pipeline::Pipeline;

/// The tensors of a safetensors file: name -> (header entry, bytes).
fn tensors(path: &Path) -> BTreeMap<String, (Value, Vec<u8>)> {
    let bytes = std::fs::read(path).unwrap();
    let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: BTreeMap<String, Value> = serde_json::from_slice(&bytes[8..8 + len]).unwrap();
    let data = &bytes[8 + len..];
    header
        .into_iter()
        .filter(|(name, _)| name != "__metadata__")
        .map(|(name, entry)| {
            let [from, to] = [0, 1].map(|i| entry["data_offsets"][i].as_u64().unwrap() as usize);
            (name, (entry, data[from..to].to_vec()))
        })
        .collect()
}

/// Writes `parts` as one safetensors file.
fn write(path: &Path, parts: &[(&String, &(Value, Vec<u8>))]) {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, (entry, bytes)) in parts {
        let mut entry = (*entry).clone();
        entry["data_offsets"] = json!([data.len(), data.len() + bytes.len()]);
        data.extend_from_slice(bytes);
        header.insert((*name).clone(), entry);
    }
    let header = serde_json::to_vec(&header).unwrap();
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&header);
    out.extend_from_slice(&data);
    std::fs::write(path, out).unwrap();
}

/// A copy of families/`name` with its weights in `shards` shards and an index naming
/// `rename(shard file)` for each tensor.
fn sharded(name: &str, tag: &str, shards: usize, rename: impl Fn(&str) -> String) -> std::path::PathBuf {
    let src = root().join("tests/fixtures/families").join(name);
    let dir = std::env::temp_dir().join(format!("pg_embed_shards_{tag}_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    copy_model(&src, &dir);
    let all = tensors(&dir.join("model.safetensors"));
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    let entries: Vec<_> = all.iter().collect();
    let mut weight_map = serde_json::Map::new();
    for k in 0..shards {
        let file = format!("model-{:05}-of-{:05}.safetensors", k + 1, shards);
        let part: Vec<_> = entries.iter().skip(k).step_by(shards).copied().collect();
        write(&dir.join(&file), &part);
        for (name, _) in part {
            weight_map.insert(name.clone(), json!(rename(&file)));
        }
    }
    let index = json!({"metadata": {"total_size": 0}, "weight_map": weight_map});
    std::fs::write(dir.join("model.safetensors.index.json"), serde_json::to_vec(&index).unwrap()).unwrap();
    dir
}

#[test]
fn a_sharded_checkpoint_gives_the_single_files_vectors() {
    let golden: Value =
        serde_json::from_slice(&std::fs::read(root().join("tests/fixtures/families/golden.json")).unwrap()).unwrap();
    for name in ["mistral_embed", "gte_embed"] {
        let dir = sharded(name, name, 3, str::to_string);
        let p = Pipeline::load(&dir, &Options::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let one = Pipeline::load(&root().join("tests/fixtures/families").join(name), &Options::default()).unwrap();
        for case in golden["fixtures"][name]["cases"].as_array().unwrap() {
            let (text, prompt) = (case["text"].as_str().unwrap(), case["prompt_name"].as_str());
            let got = p.embed_with_prompt(&[text], prompt).unwrap().remove(0);
            let want: Vec<f32> =
                case["output"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
            assert!(max_abs_diff(&got, &want) <= 1e-4 && cosine(&got, &want) >= 0.99999, "{name}: {text:?}");
            assert_eq!(got, one.embed_with_prompt(&[text], prompt).unwrap().remove(0), "{name}: {text:?}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn broken_shards_are_refused() {
    // A shard named outside the folder.
    let dir = sharded("mistral_embed", "outside", 2, |f| format!("../{f}"));
    let e = Pipeline::load(&dir, &Options::default()).err().expect("a shard outside the folder");
    assert!(matches!(e, Error::InvalidFile { .. }) && e.to_string().contains("not a file name"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
    // A tensor in two shards.
    let dir = sharded("mistral_embed", "twice", 2, str::to_string);
    let first = tensors(&dir.join("model-00001-of-00002.safetensors"));
    let second = tensors(&dir.join("model-00002-of-00002.safetensors"));
    let mut both: Vec<_> = second.iter().collect();
    both.push(first.iter().next().unwrap());
    write(&dir.join("model-00002-of-00002.safetensors"), &both);
    let e = Pipeline::load(&dir, &Options::default()).err().expect("a tensor in two shards");
    assert!(matches!(e, Error::InvalidFile { .. }) && e.to_string().contains("more than one file"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
    // Offsets past the end of the file.
    let dir = sharded("mistral_embed", "short", 2, str::to_string);
    let path = dir.join("model-00001-of-00002.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 4]).unwrap();
    let e = Pipeline::load(&dir, &Options::default()).err().expect("a truncated shard");
    assert!(matches!(e, Error::InvalidFile { .. }) && e.to_string().contains("offsets"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
