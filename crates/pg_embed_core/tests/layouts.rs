//! Folders that differ only in how a library version saves them give the numbers the
//! reference gives for the folder as generated: model2vec's `distill()` config
//! (`model_type: "model2vec"`, `architectures: ["StaticModel"]`), and a SparseEncoder whose
//! masked-LM module is sentence-transformers' plain `Transformer` with `transformer_task:
//! "fill-mask"` (what it saves since MLMTransformer was deprecated), alone and inside an
//! inference-free Router. Layouts pg_embed does not compute are refused with 0A000 naming
//! the module's class path. Golden values: tests/fixtures/sparse/golden.json (model2vec
//! and sentence-transformers' SparseEncoder).

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::{json, Value};

use pg_embed_core::error::{Error, SqlState};
use pg_embed_core::options::Options;
use pg_embed_core::pipeline::Pipeline;

fn golden() -> Value {
    serde_json::from_slice(&std::fs::read(root().join("tests/fixtures/sparse/golden.json")).unwrap()).unwrap()
}

/// A copy of tests/fixtures/sparse/`name`, changed by `edit`; removed when dropped.
struct Copy(PathBuf);

impl Copy {
    fn new(name: &str, tag: &str, edit: impl FnOnce(&Path)) -> Copy {
        let dir = std::env::temp_dir().join(format!("pg_embed_layouts_{tag}_{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        copy_model(&root().join("tests/fixtures/sparse").join(name), &dir);
        edit(&dir);
        Copy(dir)
    }

    fn load(&self) -> pg_embed_core::error::Result<Pipeline> {
        Pipeline::load(&self.0, &Options::default())
    }
}

impl Drop for Copy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn edit_json(path: &Path, edit: impl FnOnce(&mut Value)) {
    let mut v: Value = match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap(),
        Err(_) => json!({}),
    };
    edit(&mut v);
    std::fs::write(path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

fn floats(v: &Value) -> Vec<f32> {
    serde_json::from_value(v.clone()).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    serde_json::from_value(v.clone()).unwrap()
}

const TRANSFORMER_6: &str = "sentence_transformers.base.modules.transformer.Transformer";
const TRANSFORMER_5: &str = "sentence_transformers.models.Transformer";

#[test]
fn model2vec_distill_config_is_model2vec() {
    let g = golden();
    let configs = [
        json!({"model_type": "model2vec", "architectures": ["StaticModel"]}),
        json!({"architectures": ["StaticModel"]}),
        json!({"model_type": "model2vec", "architectures": null}),
    ];
    for (i, extra) in configs.into_iter().enumerate() {
        let copy = Copy::new("model2vec_layout", &format!("m2v{i}"), |d| {
            edit_json(&d.join("config.json"), |v| {
                for (k, x) in extra.as_object().unwrap() {
                    v[k] = x.clone();
                }
            })
        });
        let p = copy.load().unwrap();
        assert_eq!(p.info().architecture, "model2vec", "{extra}");
        let mut worst = 0f32;
        for case in g["models"]["model2vec_layout"]["cases"].as_array().unwrap() {
            let text = case["text"].as_str().unwrap();
            assert_eq!(p.tokenize(text).unwrap(), ids(&case["input_ids_model2vec"]), "{extra}: {text:?}");
            let got = p.embed(&[text]).unwrap().pop().unwrap();
            worst = worst.max(assert_close(&got, &floats(&case["embedding"]), &format!("{extra}: {text:?}")));
        }
        eprintln!("model2vec with {extra}: worst difference {worst:e}");
    }
    // Another model_type with model2vec's table is not model2vec (it then needs a backbone).
    let copy = Copy::new("model2vec_layout", "m2v_bert", |d| {
        edit_json(&d.join("config.json"), |v| v["model_type"] = "bert".into())
    });
    assert!(!matches!(copy.load().map(|p| p.info().architecture), Ok("model2vec")));
}

/// The splade_bert folder with its MLMTransformer saved as `Transformer` + fill-mask
/// (sentence-transformers 6.2 writes `transformer_task` for MLMTransformer too).
fn fill_mask(d: &Path, class: &str) {
    edit_json(&d.join("modules.json"), |v| v[0]["type"] = class.into());
    edit_json(&d.join("sentence_bert_config.json"), |v| v["transformer_task"] = "fill-mask".into());
}

#[test]
fn a_fill_mask_transformer_is_the_masked_lm_module() {
    let g = golden();
    for class in [TRANSFORMER_6, TRANSFORMER_5] {
        let copy = Copy::new("splade_bert", "fill_mask", |d| fill_mask(d, class));
        let p = copy.load().unwrap_or_else(|e| panic!("{class}: {e}"));
        let mut worst = 0f32;
        for case in g["models"]["splade_bert"]["cases"].as_array().unwrap() {
            let got = p.embed_sparse(&[case["text"].as_str().unwrap()], None, usize::MAX, 2, || Ok(())).unwrap().pop().unwrap();
            assert_eq!(got.indices, ids(&case["indices"]), "{class}: {}", case["name"]);
            worst = worst.max(max_abs_diff(&got.values, &floats(&case["values"])));
        }
        assert!(worst <= 1e-4, "{class}: weights differ by {worst}");
        eprintln!("splade_bert as {class} + fill-mask: worst difference {worst:e}");
    }
    // The same inside an inference-free Router's document route.
    let copy = Copy::new("inference_free", "router_fill_mask", |d| {
        let (old, new) = ("document_0_MLMTransformer", "document_0_Transformer");
        std::fs::rename(d.join(old), d.join(new)).unwrap();
        edit_json(&d.join("router_config.json"), |v| {
            let types = v["types"].as_object_mut().unwrap();
            types.remove(old);
            types.insert(new.into(), TRANSFORMER_6.into());
            v["structure"]["document"][0] = new.into();
        });
        edit_json(&d.join(new).join("sentence_bert_config.json"), |v| v["transformer_task"] = "fill-mask".into());
    });
    let p = copy.load().unwrap();
    for case in g["models"]["inference_free"]["cases"].as_array().unwrap() {
        let got = p.embed_sparse(&[case["text"].as_str().unwrap()], Some("document"), usize::MAX, 2, || Ok(())).unwrap().pop().unwrap();
        assert_eq!(got.indices, ids(&case["indices_document"]), "router {}", case["name"]);
        assert!(max_abs_diff(&got.values, &floats(&case["values_document"])) <= 1e-4);
    }
}

/// A module path of another sentence-transformers release (the package-level export, as
/// users write it by hand) loads as the class it names; a class outside sentence-transformers
/// with the same name does not.
#[test]
fn any_sentence_transformers_path_of_a_known_class_loads() {
    let g = golden();
    let copy = Copy::new("splade_bert", "package_paths", |d| {
        edit_json(&d.join("modules.json"), |v| {
            v[0]["type"] = "sentence_transformers.sparse_encoder.modules.MLMTransformer".into();
            v[1]["type"] = "sentence_transformers.sparse_encoder.modules.SpladePooling".into();
        })
    });
    let p = copy.load().unwrap();
    let case = &g["models"]["splade_bert"]["cases"][1];
    let got = p.embed_sparse(&[case["text"].as_str().unwrap()], None, usize::MAX, 2, || Ok(())).unwrap().pop().unwrap();
    assert_eq!(got.indices, ids(&case["indices"]));
    assert!(max_abs_diff(&got.values, &floats(&case["values"])) <= 1e-4);
    let copy = Copy::new("splade_bert", "foreign_path", |d| {
        edit_json(&d.join("modules.json"), |v| v[0]["type"] = "my_package.MLMTransformer".into())
    });
    refused(copy.load(), &["my_package.MLMTransformer"]);
}

fn refused(r: pg_embed_core::error::Result<Pipeline>, names: &[&str]) -> String {
    let e = r.err().expect("the layout must be refused");
    let m = format!("{e} {}", e.hint().unwrap_or_default());
    assert_eq!(e.sqlstate(), SqlState::FeatureNotSupported, "{m}");
    assert!(matches!(e, Error::Unsupported { .. }), "{m}");
    for name in names {
        assert!(m.contains(name), "{name} not in: {m}");
    }
    m
}

#[test]
fn layouts_pg_embed_does_not_compute_are_0a000_naming_the_class() {
    // A Transformer whose task is another (a causal-LM reranker's).
    let copy = Copy::new("splade_bert", "text_generation", |d| {
        fill_mask(d, TRANSFORMER_6);
        edit_json(&d.join("sentence_bert_config.json"), |v| v["transformer_task"] = "text-generation".into());
    });
    refused(copy.load(), &["transformer_task", "text-generation", "fill-mask"]);
    // SpladePooling after a Transformer computing hidden states.
    let copy = Copy::new("splade_bert", "feature_extraction", |d| {
        fill_mask(d, TRANSFORMER_6);
        edit_json(&d.join("sentence_bert_config.json"), |v| v["transformer_task"] = "feature-extraction".into());
    });
    refused(copy.load(), &["sentence_transformers.sparse_encoder.modules.splade_pooling.SpladePooling at position 1", "fill-mask"]);
    // A masked-LM module without SpladePooling.
    let copy = Copy::new("splade_bert", "no_splade", |d| {
        edit_json(&d.join("modules.json"), |v| {
            v.as_array_mut().unwrap().pop();
        })
    });
    refused(copy.load(), &["MLMTransformer]", "SpladePooling"]);
    // A dense route in a Router (an asymmetric dense model).
    let copy = Copy::new("inference_free", "dense_route", |d| {
        edit_json(&d.join("router_config.json"), |v| {
            v["types"]["document_1_SpladePooling"] = "sentence_transformers.sentence_transformer.modules.pooling.Pooling".into()
        })
    });
    refused(copy.load(), &["Router route", "sentence_transformers.sentence_transformer.modules.pooling.Pooling"]);
}
