//! Golden parity of sparse encoders (SPLADE over BERT, DistilBERT, ModernBERT, RoBERTa and
//! XLM-RoBERTa masked-LM heads; an inference-free Router) with sentence-transformers'
//! SparseEncoder, and of static embedding models with sentence-transformers' StaticEmbedding
//! and model2vec, on the tiny models of scripts/gen_sparse_fixtures.py
//! (tests/fixtures/sparse/golden.json).

mod common;

use common::*;
use serde_json::Value;

use pg_embed_core::error::{Error, SqlState};
use pg_embed_core::options::Options;
use pg_embed_core::pipeline::Pipeline;
use pg_embed_core::sparse::SparseVector;

/// Weights within this of sentence-transformers' (the bound).
const WEIGHT_TOLERANCE: f32 = 1e-4;

fn golden() -> Value {
    let path = root().join("tests/fixtures/sparse/golden.json");
    serde_json::from_slice(&std::fs::read(&path).unwrap()).expect("sparse golden parses")
}

fn dir(name: &str) -> std::path::PathBuf {
    root().join("tests/fixtures/sparse").join(name)
}

fn load(name: &str, options: Value) -> pg_embed_core::error::Result<Pipeline> {
    Pipeline::load(&dir(name), &Options::from_json(&options)?)
}

fn ids(v: &Value) -> Vec<u32> {
    serde_json::from_value(v.clone()).unwrap()
}

fn floats(v: &Value) -> Vec<f32> {
    serde_json::from_value(v.clone()).unwrap()
}

fn sparse(p: &Pipeline, texts: &[&str], prompt: Option<&str>) -> Vec<SparseVector> {
    p.embed_sparse(texts, prompt, usize::MAX, 2, || Ok(())).unwrap()
}

/// Indices exactly, weights within `WEIGHT_TOLERANCE`; the largest weight difference.
fn check(got: &SparseVector, case: &Value, suffix: &str, what: &str) -> f32 {
    let (want_i, want_v) = (ids(&case[format!("indices{suffix}")]), floats(&case[format!("values{suffix}")]));
    assert_eq!(got.indices, want_i, "{what}: non-zero ids");
    let worst = max_abs_diff(&got.values, &want_v);
    assert!(worst <= WEIGHT_TOLERANCE, "{what}: weights differ by {worst}");
    worst
}

fn models(g: &Value, kind: &str) -> Vec<(String, Value)> {
    let all = g["models"].as_object().unwrap();
    all.iter().filter(|(_, m)| m["kind"] == kind).map(|(n, m)| (n.clone(), m.clone())).collect()
}

#[test]
fn splade_matches_sentence_transformers_one_by_one_and_batched() {
    let g = golden();
    let splade = models(&g, "splade");
    assert_eq!(splade.len(), 6, "BERT tied and untied, DistilBERT, ModernBERT, RoBERTa, XLM-R untied");
    for (name, model) in splade {
        let p = load(&name, serde_json::json!({})).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(p.info().task, "sparse");
        assert_eq!(p.dim(), model["vocab_size"].as_u64().unwrap() as usize, "{name}: dim is the vocabulary");
        let cases = model["cases"].as_array().unwrap();
        let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
        let mut worst = 0f32;
        for (case, text) in cases.iter().zip(&texts) {
            let what = format!("{name}/{}", case["name"]);
            assert_eq!(p.tokenize(text).unwrap(), ids(&case["input_ids"]), "{what}: input ids");
            let one = sparse(&p, &[text], None).pop().unwrap();
            assert_eq!(one.dim, p.dim());
            worst = worst.max(check(&one, case, "", &what));
        }
        for (got, case) in sparse(&p, &texts, None).iter().zip(cases) {
            worst = worst.max(check(got, case, "", &format!("{name}/{} (batched)", case["name"])));
        }
        // Batches of a few tokens: the same vectors, bit for bit where the float32 product
        // adds each output in one chain whatever the rows (AVX-512); elsewhere (AVX2: the
        // gemm crate, whose blocking depends on the rows) within the reference's tolerance.
        let small = p.embed_sparse(&texts, None, 16, 1, || Ok(())).unwrap();
        for (got, case) in small.iter().zip(cases) {
            worst = worst.max(check(got, case, "", &format!("{name}/{} (batches of 16 tokens)", case["name"])));
        }
        if pg_embed_core::kernels::float32::available() {
            assert_eq!(small, sparse(&p, &texts, None), "{name}: batching changes nothing");
        }
        eprintln!("{name}: {} cases, worst weight difference {worst:e}", cases.len());
    }
}

/// An untied head holds two biases of which transformers' forward adds one (BERT:
/// `cls.predictions.decoder.bias`, not `cls.predictions.bias`; RoBERTa and XLM-RoBERTa:
/// `lm_head.decoder.bias`, not `lm_head.bias`). The fixtures draw them apart, so the parity
/// above shows the right one is read: a copy with the two swapped misses every reference.
#[test]
fn untied_heads_add_the_bias_the_forward_adds() {
    let g = golden();
    let mut untied = Vec::new();
    for (name, model) in models(&g, "splade") {
        if model["tie_word_embeddings"] != false {
            continue;
        }
        let (added, unused) = match model["architecture"].as_str().unwrap() {
            "BertForMaskedLM" => ("cls.predictions.decoder.bias", "cls.predictions.bias"),
            "RobertaForMaskedLM" | "XLMRobertaForMaskedLM" => ("lm_head.decoder.bias", "lm_head.bias"),
            other => panic!("{name}: which bias does an untied {other} add?"),
        };
        let cpu = candle_core::Device::Cpu;
        let mut tensors = candle_core::safetensors::load(dir(&name).join("model.safetensors"), &cpu).unwrap();
        let (a, u) = (tensors.remove(added).unwrap(), tensors.remove(unused).unwrap());
        let gap = max_abs_diff(&a.to_vec1::<f32>().unwrap(), &u.to_vec1::<f32>().unwrap());
        assert!(gap > 1.0, "{name}: the two biases differ by only {gap}");

        let swapped =
            std::env::temp_dir().join(format!("pg_embed_swapped_bias_{name}_{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&swapped);
        copy_model(&dir(&name), &swapped);
        tensors.insert(added.to_string(), u);
        tensors.insert(unused.to_string(), a);
        candle_core::safetensors::save(&tensors, swapped.join("model.safetensors")).unwrap();
        let p = Pipeline::load(&swapped, &Options::default());
        let _ = std::fs::remove_dir_all(&swapped);
        let p = p.unwrap();
        let cases = model["cases"].as_array().unwrap();
        let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
        for (got, case) in sparse(&p, &texts, None).iter().zip(cases) {
            let same_ids = got.indices == ids(&case["indices"]);
            assert!(
                !same_ids || max_abs_diff(&got.values, &floats(&case["values"])) > WEIGHT_TOLERANCE,
                "{name}/{}: the unused bias gives the reference too",
                case["name"]
            );
        }
        untied.push(name);
    }
    assert_eq!(untied, ["splade_bert_sum_untied", "splade_xlm_roberta_untied"]);
}

#[test]
fn inference_free_routes_match_encode_query_and_encode_document() {
    let g = golden();
    let model = &g["models"]["inference_free"];
    let p = load("inference_free", serde_json::json!({})).unwrap();
    let cases = model["cases"].as_array().unwrap();
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
    let (mut q_worst, mut d_worst) = (0f32, 0f32);
    for (case, text) in cases.iter().zip(&texts) {
        let what = format!("inference_free/{}", case["name"]);
        let q = sparse(&p, &[text], Some("query")).pop().unwrap();
        q_worst = q_worst.max(check(&q, case, "_query", &format!("{what} query")));
        // The default route is the document route, as `encode` takes it.
        for prompt in [None, Some("document")] {
            let d = sparse(&p, &[text], prompt).pop().unwrap();
            d_worst = d_worst.max(check(&d, case, "_document", &format!("{what} document ({prompt:?})")));
        }
    }
    for (got, case) in sparse(&p, &texts, Some("query")).iter().zip(cases) {
        check(got, case, "_query", "batched query");
    }
    eprintln!("inference_free: query worst {q_worst:e}, document worst {d_worst:e}");
}

#[test]
fn sparse_terms_match_decode() {
    let g = golden();
    let model = &g["models"]["splade_bert"];
    let p = load("splade_bert", serde_json::json!({})).unwrap();
    for d in model["decode"].as_array().unwrap() {
        let case = model["cases"].as_array().unwrap().iter().find(|c| c["name"] == d["case"]).unwrap();
        let terms = p.sparse_terms(case["text"].as_str().unwrap(), 1).unwrap();
        let k = d["top_k"].as_u64().unwrap() as usize;
        let tokens: Vec<&str> = terms[..k].iter().map(|(t, _)| t.as_str()).collect();
        let want: Vec<&str> = d["tokens"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
        assert_eq!(tokens, want, "decode of {}", d["case"]);
        let weights: Vec<f32> = terms[..k].iter().map(|(_, w)| *w).collect();
        assert!(max_abs_diff(&weights, &floats(&d["weights"])) <= WEIGHT_TOLERANCE);
        assert!(terms.windows(2).all(|w| w[0].1 >= w[1].1), "best first");
        assert_eq!(terms.len(), case["nnz"].as_u64().unwrap() as usize, "every non-zero term");
    }
}

#[test]
fn max_terms_and_min_weight_select_from_the_reference_vector() {
    let g = golden();
    let case = &g["models"]["splade_bert"]["cases"][1];
    let text = case["text"].as_str().unwrap();
    let (indices, values) = (ids(&case["indices"]), floats(&case["values"]));
    // The reference's 5 largest weights, and its weights of at least 1.0.
    let mut ranked: Vec<(u32, f32)> = indices.iter().copied().zip(values.iter().copied()).collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut top5: Vec<u32> = ranked[..5].iter().map(|(i, _)| *i).collect();
    top5.sort();
    let heavy: Vec<u32> = ranked.iter().filter(|(_, w)| *w >= 1.0).map(|(i, _)| *i).collect::<Vec<_>>();
    let mut heavy_sorted = heavy.clone();
    heavy_sorted.sort();
    assert!(heavy.len() > 5 && heavy.len() < indices.len(), "the case separates the two options");

    let p = load("splade_bert", serde_json::json!({"max_terms": 5})).unwrap();
    assert_eq!(sparse(&p, &[text], None)[0].indices, top5);
    let p = load("splade_bert", serde_json::json!({"min_weight": 1.0})).unwrap();
    assert_eq!(sparse(&p, &[text], None)[0].indices, heavy_sorted);
    let p = load("splade_bert", serde_json::json!({"min_weight": 1.0, "max_terms": 5})).unwrap();
    assert_eq!(sparse(&p, &[text], None)[0].indices, top5);

    for bad in [serde_json::json!({"max_terms": 0}), serde_json::json!({"max_terms": 16001}), serde_json::json!({"min_weight": -1})] {
        let err = load("splade_bert", bad.clone()).err().unwrap_or_else(|| panic!("{bad} accepted"));
        assert!(matches!(err, Error::InvalidOptions(_)), "{bad}: {err}");
        assert_eq!(err.sqlstate(), SqlState::InvalidParameterValue, "{bad}");
    }
    let err = load("static_st", serde_json::json!({"max_terms": 5})).err().unwrap();
    assert!(err.to_string().contains("applies to sparse models"), "{err}");
    let err = load("splade_bert", serde_json::json!({"pooling": "mean"})).err().unwrap();
    assert!(err.to_string().contains("applies to dense embedding models"), "{err}");
}

#[test]
fn sparse_and_dense_calls_name_the_right_function() {
    let p = load("splade_bert", serde_json::json!({})).unwrap();
    let err = p.embed(&["hello"]).unwrap_err();
    assert!(matches!(err, Error::WrongOutput { instead: "embed_sparse", .. }), "{err}");
    assert!(err.to_string().contains("embed_sparse()"), "{err}");
    assert_eq!(err.sqlstate(), SqlState::WrongObjectType);
    let dense = load("static_st", serde_json::json!({})).unwrap();
    let err = dense.embed_sparse(&["hello"], None, usize::MAX, 1, || Ok(())).unwrap_err();
    assert!(err.to_string().contains("call embed(), not embed_sparse()"), "{err}");
}

#[test]
fn sparsevec_text_is_one_based_with_the_vocabulary_as_dimension() {
    let v = SparseVector { indices: vec![0, 7, 400], values: vec![0.5, 1.25, 3.0e-7], dim: 401 };
    assert_eq!(v.to_sparsevec_text(), "{1:0.5,8:1.25,401:0.0000003}/401");
    assert_eq!(SparseVector { indices: vec![], values: vec![], dim: 401 }.to_sparsevec_text(), "{}/401");
}

#[test]
fn static_models_match_sentence_transformers_and_model2vec() {
    let g = golden();
    for (name, key) in [("static_st", "embedding"), ("static_st_dense", "embedding"), ("model2vec_layout", "embedding")] {
        let model = &g["models"][name];
        let p = load(name, serde_json::json!({})).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(p.is_static(), "{name}");
        assert_eq!(p.dim(), model["dim"].as_u64().unwrap() as usize);
        let cases = model["cases"].as_array().unwrap();
        let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
        let ids_key = if name == "model2vec_layout" { "input_ids_model2vec" } else { "input_ids" };
        let mut worst = 0f32;
        for (case, text) in cases.iter().zip(&texts) {
            let what = format!("{name}/{}", case["name"]);
            assert_eq!(p.tokenize(text).unwrap(), ids(&case[ids_key]), "{what}: input ids");
            let got = p.embed(&[text]).unwrap().pop().unwrap();
            worst = worst.max(assert_close(&got, &floats(&case[key]), &what));
        }
        let batched = p.embed_batched(&texts, 16, 2, || Ok(())).unwrap();
        for (got, case) in batched.iter().zip(cases) {
            assert_close(got, &floats(&case[key]), &format!("{name}/{} (batched)", case["name"]));
        }
        eprintln!("{name}: {} cases, worst difference {worst:e}", cases.len());
    }
    // model2vec without normalisation (its encode(normalize=False)).
    let p = load("model2vec_layout", serde_json::json!({"normalize": false})).unwrap();
    for case in g["models"]["model2vec_layout"]["cases"].as_array().unwrap() {
        let got = p.embed(&[case["text"].as_str().unwrap()]).unwrap().pop().unwrap();
        assert_close(&got, &floats(&case["embedding_unnormalized"]), "model2vec unnormalized");
    }
}

// CSR: a dense model, then a top-k SparseAutoEncoder (scripts/gen_csr_fixtures.py,
// tests/fixtures/sparse/csr).

fn csr_golden() -> Value {
    let path = root().join("tests/fixtures/sparse/csr/golden.json");
    serde_json::from_slice(&std::fs::read(&path).unwrap()).expect("csr golden parses")
}

fn csr_load(name: &str, options: Value) -> pg_embed_core::error::Result<Pipeline> {
    Pipeline::load(&dir("csr").join(name), &Options::from_json(&options)?)
}

/// Latent ids exactly, values within 1e-4 x max(1, |value|); the largest relative difference.
fn check_csr(got: &SparseVector, case: &Value, suffix: &str, what: &str) -> f32 {
    let (want_i, want_v) = (ids(&case[format!("indices{suffix}")]), floats(&case[format!("values{suffix}")]));
    assert_eq!(got.indices, want_i, "{what}: active latents");
    let worst = got.values.iter().zip(&want_v).map(|(g, w)| (g - w).abs() / w.abs().max(1.0)).fold(0f32, f32::max);
    assert!(worst <= WEIGHT_TOLERANCE, "{what}: values differ by {worst} (relative)");
    worst
}

#[test]
fn csr_matches_sentence_transformers_encode() {
    let g = csr_golden();
    let all = g["models"].as_object().unwrap();
    assert_eq!(all.len(), 2);
    for (name, model) in all {
        let p = csr_load(name, serde_json::json!({})).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(p.info().task, "sparse");
        assert_eq!(p.dim(), model["dim"].as_u64().unwrap() as usize, "{name}: dim is the autoencoder's hidden_dim");
        let sparse_info = p.info().sparse.clone().unwrap();
        assert_eq!(sparse_info["max_active_dims"], model["model_max_active_dims"], "{name}");
        assert_eq!(sparse_info["autoencoder"]["k"], model["sae_config"]["k"], "{name}");
        let cases = model["cases"].as_array().unwrap();
        let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
        let mut worst = 0f32;
        for (case, text) in cases.iter().zip(&texts) {
            let what = format!("{name}/{}", case["name"]);
            assert_eq!(p.tokenize(text).unwrap(), ids(&case["input_ids"]), "{what}: input ids");
            let one = sparse(&p, &[text], None).pop().unwrap();
            assert_eq!(one.dim, p.dim());
            worst = worst.max(check_csr(&one, case, "", &what));
        }
        for (got, case) in sparse(&p, &texts, None).iter().zip(cases) {
            worst = worst.max(check_csr(got, case, "", &format!("{name}/{} (batched)", case["name"])));
        }
        let small = p.embed_sparse(&texts, None, 16, 1, || Ok(())).unwrap();
        for (got, case) in small.iter().zip(cases) {
            check_csr(got, case, "", &format!("{name}/{} (batches of 16 tokens)", case["name"]));
        }
        // max_terms is encode's max_active_dims: the autoencoder's top-k takes it, more
        // than the model's k included.
        let explicit: Vec<String> = cases[0]
            .as_object()
            .unwrap()
            .keys()
            .filter_map(|k| k.strip_prefix("indices_max_active_dims_").map(str::to_string))
            .collect();
        assert!(!explicit.is_empty());
        for k in explicit {
            let p = csr_load(name, serde_json::json!({"max_terms": k.parse::<usize>().unwrap()})).unwrap();
            for (got, case) in sparse(&p, &texts, None).iter().zip(cases) {
                let what = format!("{name}/{} max_active_dims {k}", case["name"]);
                worst = worst.max(check_csr(got, case, &format!("_max_active_dims_{k}"), &what));
            }
        }
        eprintln!("{name}: {} cases, worst relative difference {worst:e}", cases.len());
    }
}

#[test]
fn csr_terms_are_latent_ids_and_embed_names_embed_sparse() {
    let g = csr_golden();
    let model = &g["models"]["csr_dense_normalize"];
    let p = csr_load("csr_dense_normalize", serde_json::json!({})).unwrap();
    // sentence-transformers' decode looks the latent ids up in the vocabulary; they are not
    // tokens, so the terms are the ids (0-based), best first.
    let d = &model["decode"][0];
    let case = model["cases"].as_array().unwrap().iter().find(|c| c["name"] == d["case"]).unwrap();
    let terms = p.sparse_terms(case["text"].as_str().unwrap(), 1).unwrap();
    let mut want: Vec<(u32, f32)> = ids(&case["indices"]).into_iter().zip(floats(&case["values"])).collect();
    want.sort_by(|a, b| b.1.total_cmp(&a.1));
    let want_ids: Vec<String> = want.iter().map(|(i, _)| i.to_string()).collect();
    assert_eq!(terms.iter().map(|(t, _)| t.clone()).collect::<Vec<_>>(), want_ids);
    assert_eq!(terms.len(), case["nnz"].as_u64().unwrap() as usize);
    let k = d["top_k"].as_u64().unwrap() as usize;
    let weights: Vec<f32> = terms[..k.min(terms.len())].iter().map(|(_, w)| *w).collect();
    assert!(max_abs_diff(&weights, &floats(&d["weights"])) <= WEIGHT_TOLERANCE * 10.0);

    let err = p.embed(&["hello"]).unwrap_err();
    assert!(matches!(err, Error::WrongOutput { instead: "embed_sparse", .. }), "{err}");
    assert_eq!(err.sqlstate(), SqlState::WrongObjectType);
    // min_weight applies after the top-k.
    let p = csr_load("csr_mean", serde_json::json!({"min_weight": 6.0})).unwrap();
    let case = &g["models"]["csr_mean"]["cases"][0];
    let heavy: Vec<u32> =
        ids(&case["indices"]).into_iter().zip(floats(&case["values"])).filter(|(_, v)| *v >= 6.0).map(|(i, _)| i).collect();
    assert!(!heavy.is_empty() && heavy.len() < 8, "the case separates min_weight");
    assert_eq!(sparse(&p, &[case["text"].as_str().unwrap()], None)[0].indices, heavy);
}

/// A copy of a CSR fixture, edited by `edit` (given the copy's folder), loaded.
fn csr_edited(tag: &str, options: Value, edit: impl FnOnce(&std::path::Path)) -> pg_embed_core::error::Result<Pipeline> {
    let copy = std::env::temp_dir().join(format!("pg_embed_csr_{tag}_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&copy);
    copy_model(&dir("csr").join("csr_mean"), &copy);
    edit(&copy);
    let p = Pipeline::load(&copy, &Options::from_json(&options)?);
    let _ = std::fs::remove_dir_all(&copy);
    p
}

fn edit_json(path: &std::path::Path, edit: impl FnOnce(&mut Value)) {
    let mut v: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

#[test]
fn csr_layouts_pg_embed_does_not_compute_are_refused_by_name() {
    fn refused(tag: &str, options: Value, edit: &dyn Fn(&std::path::Path), state: SqlState, names: &[&str]) {
        let err = csr_edited(tag, options, edit).err().unwrap_or_else(|| panic!("{tag}: loaded"));
        let msg = err.to_string();
        assert_eq!(err.sqlstate(), state, "{tag}: {msg}");
        for n in names {
            assert!(msg.contains(n), "{tag}: {msg} does not name {n}");
        }
    }
    let sae = "2_SparseAutoEncoder";
    let fa = SqlState::FeatureNotSupported;
    refused("no_weights", serde_json::json!({}), &|d| std::fs::remove_file(d.join(sae).join("model.safetensors")).unwrap(), fa, &[
        "SparseAutoEncoder without weights",
        "model.safetensors",
    ]);
    refused("unknown_key", serde_json::json!({}), &|d| edit_json(&d.join(sae).join("config.json"), |c| c["use_bias"] = true.into()), fa, &[
        "SparseAutoEncoder config key",
        "use_bias",
    ]);
    refused("after_sae", serde_json::json!({}), &|d| edit_json(&d.join("modules.json"), |m| {
        let normalize = serde_json::json!({"idx": 3, "name": "3", "path": "3_Normalize", "type": "sentence_transformers.base.modules.normalize.Normalize"});
        m.as_array_mut().unwrap().push(normalize);
    }), fa, &["module sequence", "Normalize at position 3"]);
    refused("no_pooling", serde_json::json!({}), &|d| edit_json(&d.join("modules.json"), |m| {
        m.as_array_mut().unwrap().remove(1);
    }), fa, &["module sequence", "SparseAutoEncoder at position 1"]);
    let bad = SqlState::InvalidParameterValue;
    refused("max_terms", serde_json::json!({"max_terms": 129}), &|_| (), bad, &["max_terms 129", "hidden_dim 128"]);
    refused("pooling", serde_json::json!({"pooling": "cls"}), &|_| (), bad, &["\"pooling\"", "applies to dense embedding models; this one is sparse (CSR)"]);
    refused("dimensions", serde_json::json!({"dimensions": 8}), &|_| (), bad, &["\"dimensions\""]);
    // A width that does not fit, and a bad model max_active_dims: damaged files.
    let corrupt = SqlState::DataCorrupted;
    refused("input_dim", serde_json::json!({}), &|d| edit_json(&d.join(sae).join("config.json"), |c| c["input_dim"] = 16.into()), corrupt, &[
        "input_dim 16",
    ]);
    refused("max_active_dims", serde_json::json!({}), &|d| edit_json(&d.join("config_sentence_transformers.json"), |c| c["max_active_dims"] = 0.into()), corrupt, &[
        "max_active_dims 0",
    ]);
}

#[test]
fn csr_weights_mapped_from_the_shared_file_give_the_same_vectors() {
    use pg_embed_core::pipeline::Share;
    use pg_embed_core::prepared::Store;
    let tmp = std::env::temp_dir().join(format!("pg_embed_csr_store_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let store = Store::open(&tmp).unwrap();
    let no_interrupt = || -> pg_embed_core::error::Result<()> { Ok(()) };
    let repo = root().canonicalize().unwrap();
    let model = dir("csr").join("csr_dense_normalize").canonicalize().unwrap();
    let texts = ["Hello world", "The quick brown fox jumps over the lazy dog."];
    let private = csr_load("csr_dense_normalize", serde_json::json!({})).unwrap();
    let want = sparse(&private, &texts, None);
    let share = Share { store: &store, files: None, model: "m", source: "src", interrupt: &no_interrupt, admit: None };
    let built = Pipeline::load_shared(&repo, &model, &Options::default(), Some(&share)).unwrap();
    built.sharing().writing.as_ref().expect("the first load builds").wait().clone().unwrap();
    let mapped = Pipeline::load_shared(&repo, &model, &Options::default(), Some(&share)).unwrap();
    assert!(mapped.sharing().file.is_some(), "the second load maps the file");
    assert_eq!(sparse(&mapped, &texts, None), want);
    assert_eq!(mapped.info().parameters, private.info().parameters);
    let _ = std::fs::remove_dir_all(&tmp);
}
