//! LoRA task adapters against sentence-transformers 6.2 with peft: the tiny
//! jina-embeddings-v3 of scripts/gen_lora_fixtures.py with one PEFT adapter per task
//! (`jina_v3_peft`), and the same weights in jinaai's original layout (`jina_v3_original`),
//! whose outputs are the same golden values (tests/fixtures/lora/golden.json).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::*;
use serde::Deserialize;

use pg_embed_core::error::Error;
use pg_embed_core::options::Options;
use pg_embed_core::pipeline::Pipeline;

/// Parity bounds: cosine, and |got - want| <= TOLERANCE * max(1, |want|).
const COSINE: f32 = 0.99999;
const TOLERANCE: f32 = 1e-4;

#[derive(Deserialize)]
struct Golden {
    folders: BTreeMap<String, String>,
    /// How far PyTorch's bfloat16 autocast run moves each task's vectors.
    bfloat16: BTreeMap<String, Torch>,
    fixtures: BTreeMap<String, Fixture>,
}

#[derive(Deserialize)]
struct Torch {
    torch_bf16_max_abs: f32,
    torch_bf16_min_cosine: f64,
}

#[derive(Deserialize)]
struct Fixture {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    task: Option<String>,
    text: String,
    embedding: Vec<f32>,
}

fn dir() -> PathBuf {
    root().join("tests/fixtures/lora")
}

fn golden() -> Golden {
    let path = dir().join("golden.json");
    serde_json::from_slice(&std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .expect("golden.json parses")
}

fn load(name: &str, options: serde_json::Value) -> Pipeline {
    Pipeline::load(&dir().join(name), &Options::from_json(&options).unwrap()).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn close(got: &[f32], want: &[f32], what: &str) -> f32 {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let cos = cosine(got, want);
    assert!(cos >= COSINE, "{what}: cosine {cos}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= TOLERANCE * w.abs().max(1.0), "{what}: element {i}: {g} vs {w}");
    }
    max_abs_diff(got, want)
}

/// Every case, one call each: the base model without a task; each task under jinaai's name
/// and under its adapter folder's name (the same task, the same prompt).
fn check(name: &str, p: &Pipeline) -> f32 {
    let g = golden();
    let mut worst = 0f32;
    for case in &g.fixtures["jina_v3_peft"].cases {
        let names: Vec<Option<&str>> = match &case.task {
            None => vec![None],
            Some(t) => vec![Some(t.as_str()), Some(g.folders[t].as_str())],
        };
        for task in names {
            let got = p.embed_with_prompt(&[case.text.as_str()], task).unwrap().remove(0);
            worst = worst.max(close(&got, &case.embedding, &format!("{name} {task:?} {:?}", case.text)));
        }
    }
    eprintln!("{name}: max abs diff {worst:e}");
    worst
}

#[test]
fn peft_adapters_match_sentence_transformers_with_peft() {
    check("jina_v3_peft", &load("jina_v3_peft", serde_json::json!({})));
}

#[test]
fn the_original_layout_gives_the_same_outputs() {
    let p = load("jina_v3_original", serde_json::json!({}));
    assert_eq!(p.info().architecture, "jina_embeddings_v3", "read as transformers reads it");
    check("jina_v3_original", &p);
}

/// The `prompt` option names the default task: the two-argument form and the batched form
/// (arrays, triggers, backfill) compute it.
#[test]
fn a_default_task_is_what_plain_calls_compute() {
    let g = golden();
    for fixture in ["jina_v3_peft", "jina_v3_original"] {
        let p = load(fixture, serde_json::json!({"prompt": "retrieval.query"}));
        let cases: Vec<&Case> =
            g.fixtures["jina_v3_peft"].cases.iter().filter(|c| c.task.as_deref() == Some("retrieval.query")).collect();
        let texts: Vec<&str> = cases.iter().map(|c| c.text.as_str()).collect();
        let batched = p.embed_batched(&texts, 1 << 20, 1, || Ok(())).unwrap();
        for (case, got) in cases.iter().zip(&batched) {
            close(got, &case.embedding, &format!("{fixture} batched {:?}", case.text));
            let single = p.embed_with_prompt(&[case.text.as_str()], None).unwrap().remove(0);
            close(&single, &case.embedding, &format!("{fixture} single {:?}", case.text));
        }
        // '' still means no prompt, and with it the base model.
        let base = g.fixtures["jina_v3_peft"].cases.iter().find(|c| c.task.is_none()).unwrap();
        let got = p.embed_with_prompt(&[base.text.as_str()], Some("")).unwrap().remove(0);
        close(&got, &base.embedding, &format!("{fixture} no task"));
    }
}

#[test]
fn model_info_lists_each_task_and_its_cost() {
    let g = golden();
    for fixture in ["jina_v3_peft", "jina_v3_original"] {
        let p = load(fixture, serde_json::json!({}));
        let adapters = &p.info().adapters;
        assert_eq!(adapters.len(), g.folders.len(), "{fixture}");
        for a in adapters {
            assert!(a["bytes"].as_u64().unwrap() > 0 && a["changed_parameters"].as_u64().unwrap() > 0, "{fixture}: {a}");
        }
        let query = adapters.iter().find(|a| pg_embed_core::lora::same_task(a["name"].as_str().unwrap(), "retrieval.query")).unwrap();
        assert_eq!(query["prompt"], "Represent the query for retrieving evidence documents: ", "{fixture}");
        // In bfloat16 the copies are smaller, as the backbone is.
        let half = load(fixture, serde_json::json!({"precision": "bfloat16"}));
        assert!(half.info().adapters[0]["bytes"].as_u64() < adapters[0]["bytes"].as_u64(), "{fixture}");
    }
}

/// A task name that is neither a prompt nor a task is an error naming it.
#[test]
fn an_unknown_task_is_refused() {
    let p = load("jina_v3_peft", serde_json::json!({}));
    let e = p.embed_with_prompt(&["x"], Some("retrieval.document")).unwrap_err();
    assert!(matches!(e, Error::UnknownPrompt { ref name, .. } if name == "retrieval.document"), "{e}");
}

/// A copy of jina_v3_peft whose `retrieval_query` adapter is edited by `edit`, loaded.
fn with_adapter_edit(tag: &str, edit: impl FnOnce(&Path)) -> pg_embed_core::error::Result<Pipeline> {
    let tmp = std::env::temp_dir().join(format!("pg_embed_lora_{tag}_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    copy_model(&dir().join("jina_v3_peft"), &tmp);
    edit(&tmp.join("retrieval_query"));
    let r = Pipeline::load(&tmp, &Options::default());
    let _ = std::fs::remove_dir_all(&tmp);
    r
}

/// PEFT settings that change the numbers in a way not computed are refused by name.
#[test]
fn peft_settings_not_computed_are_refused_by_name() {
    for (key, value, what) in [
        ("use_dora", serde_json::json!(true), "PEFT LoRA setting"),
        ("bias", serde_json::json!("all"), "PEFT LoRA bias"),
        ("modules_to_save", serde_json::json!(["classifier"]), "PEFT LoRA setting"),
        ("rank_pattern", serde_json::json!({"fc1": 8}), "PEFT LoRA setting"),
        ("peft_type", serde_json::json!("IA3"), "peft_type"),
    ] {
        let e = with_adapter_edit(key, |d| {
            let path = d.join("adapter_config.json");
            let mut c: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            c[key] = value.clone();
            std::fs::write(&path, serde_json::to_vec(&c).unwrap()).unwrap();
        })
        .err()
        .unwrap_or_else(|| panic!("{key} accepted"));
        assert!(matches!(e, Error::Unsupported { what: w, .. } if w == what), "{key}: {e:?}");
    }
}

/// A delta for a weight the backbone never reads is refused, naming it: never a task that
/// silently computes less than its adapter.
#[test]
fn a_delta_the_backbone_does_not_read_is_refused() {
    let e = with_adapter_edit("stray", |d| {
        let path = d.join("adapter_model.safetensors");
        let bytes = std::fs::read(&path).unwrap();
        // Rename one module in the header (same length: the offsets stay valid).
        let head = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize + 8;
        let header = std::str::from_utf8(&bytes[8..head]).unwrap();
        let renamed = header.replacen("mlp.fc1.lora_A", "mlp.fcX.lora_A", 1).replacen("mlp.fc1.lora_B", "mlp.fcX.lora_B", 1);
        assert_ne!(renamed, header);
        let mut out = bytes[..8].to_vec();
        out.extend_from_slice(renamed.as_bytes());
        out.extend_from_slice(&bytes[head..]);
        std::fs::write(&path, out).unwrap();
    })
    .err()
    .expect("a stray delta is refused");
    assert!(matches!(e, Error::Unsupported { what: "LoRA target", ref value, .. } if value.contains("fcX")), "{e:?}");
}

/// The tasks' backbones are in the shared prepared file: a load that maps it computes what
/// the load that built it computed, bit for bit.
#[test]
fn the_tasks_are_shared_through_the_prepared_file() {
    let g = golden();
    let texts: Vec<&str> = g.fixtures["jina_v3_peft"].cases.iter().map(|c| c.text.as_str()).collect();
    for name in ["jina_v3_peft", "jina_v3_original"] {
        let (built, mapped) = built_and_mapped(&format!("lora_{name}"), &dir().join(name), &Options::default());
        for task in [None, Some("retrieval.passage"), Some("text_matching")] {
            assert_eq!(
                mapped.embed_with_prompt(&texts, task).unwrap(),
                built.embed_with_prompt(&texts, task).unwrap(),
                "{name} {task:?}"
            );
        }
    }
}

/// `precision: "bfloat16"`: each task's merged copy is packed in bfloat16 as the base is, and
/// moves the vectors no more than tests/bf16.rs allows against PyTorch's own bfloat16 run of
/// the task: element-wise 2.5x its max abs difference, 1 - cosine 4x its.
#[test]
fn bfloat16_moves_each_task_no_more_than_pytorch_bfloat16_does() {
    let g = golden();
    for fixture in ["jina_v3_peft", "jina_v3_original"] {
        let p = load(fixture, serde_json::json!({"precision": "bfloat16"}));
        for (task, torch) in &g.bfloat16 {
            let (mut max_abs, mut min_cos) = (0f32, 1f64);
            for case in g.fixtures["jina_v3_peft"].cases.iter().filter(|c| c.task.as_deref() == Some(task.as_str())) {
                let got = p.embed_with_prompt(&[case.text.as_str()], Some(task)).unwrap().remove(0);
                max_abs = max_abs.max(max_abs_diff(&got, &case.embedding));
                min_cos = min_cos.min(f64::from(cosine(&got, &case.embedding)));
            }
            eprintln!("{fixture} {task}: max abs {max_abs:.2e} (torch {:.2e})", torch.torch_bf16_max_abs);
            assert!(max_abs > 0.0 && max_abs <= 2.5 * torch.torch_bf16_max_abs, "{fixture} {task}: {max_abs} vs {}", torch.torch_bf16_max_abs);
            assert!(1.0 - min_cos <= 4.0 * (1.0 - torch.torch_bf16_min_cosine), "{fixture} {task}: cosine {min_cos}");
        }
    }
}
