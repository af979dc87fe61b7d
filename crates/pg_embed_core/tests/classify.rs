//! Golden parity of every classification head with transformers (logits, labels, problem
//! types) and of rerank with sentence-transformers' CrossEncoder, on the tiny checkpoints of
//! scripts/gen_classify_fixtures.py.

mod common;

use common::*;
use serde::Deserialize;

use pg_embed_core::options::Options;
use pg_embed_core::pipeline::Pipeline;

#[derive(Deserialize)]
struct Golden {
    fixtures: std::collections::HashMap<String, Fixture>,
}

#[derive(Deserialize)]
struct Fixture {
    architecture: String,
    config: serde_json::Value,
    cases: Vec<ClassifyCase>,
    rerank: Option<Rerank>,
}

#[derive(Deserialize)]
struct ClassifyCase {
    text: String,
    pair: Option<String>,
    input_ids: Vec<u32>,
    token_type_ids: Vec<u32>,
    logits: Vec<f32>,
}

#[derive(Deserialize)]
struct Rerank {
    query: String,
    documents: Vec<String>,
    scores: Vec<f32>,
}

fn golden() -> Golden {
    let path = root().join("tests/fixtures/classify/golden.json");
    serde_json::from_slice(&std::fs::read(&path).unwrap()).expect("classify golden parses")
}

fn load(name: &str, options: serde_json::Value) -> pg_embed_core::error::Result<Pipeline> {
    Pipeline::load(&root().join("tests/fixtures/classify").join(name), &Options::from_json(&options).unwrap())
}

/// Every fixture, in name order.
fn names(g: &Golden) -> Vec<&str> {
    let mut names: Vec<&str> = g.fixtures.keys().map(String::as_str).collect();
    names.sort();
    names
}

#[test]
fn every_supported_architecture_has_a_fixture() {
    let g = golden();
    let mut covered: Vec<&str> = g.fixtures.values().map(|f| f.architecture.as_str()).collect();
    // Image classifiers are image fixtures (tests/images.rs, tests/siglip.rs).
    let mut image_classes: Vec<String> = Vec::new();
    for set in ["images", "siglip"] {
        let path = root().join(format!("tests/fixtures/{set}/golden.json"));
        let images: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
                .unwrap();
        image_classes.extend(images["models"].as_object().unwrap().values().filter_map(|m| {
            m["class"].as_str().filter(|c| c.ends_with("ForImageClassification")).map(String::from)
        }));
    }
    covered.extend(image_classes.iter().map(String::as_str));
    // Decoder, XLNet and the newer families' classifiers are fixtures of their own sets
    // (tests/decoders.rs, tests/families.rs).
    let mut set_classes: Vec<String> = Vec::new();
    for set in ["decoders", "families"] {
        let path = root().join(format!("tests/fixtures/{set}/golden.json"));
        let golden: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
                .unwrap();
        set_classes.extend(
            golden["fixtures"]
                .as_object()
                .unwrap()
                .values()
                .filter(|f| f["kind"] == "classify")
                .filter_map(|f| f["architecture"].as_str().map(String::from)),
        );
    }
    covered.extend(set_classes.iter().map(String::as_str));
    covered.sort();
    covered.dedup();
    let supported: Vec<&str> = pg_embed_core::classifier::SUPPORTED.split(", ").collect();
    assert_eq!(covered, supported);
}

#[test]
fn logits_match_transformers_one_by_one_and_batched() {
    let g = golden();
    let mut per_architecture: std::collections::BTreeMap<&str, f32> = Default::default();
    for name in names(&g) {
        let fx = &g.fixtures[name];
        let p = load(name, serde_json::json!({})).unwrap();
        assert_eq!(p.info().task, "classify");
        assert!(p.info().pooling.is_empty() && p.info().heads.is_empty() && !p.info().normalize);
        assert!(fx.cases.len() >= 20, "{name}");
        let mut worst = 0f32;
        for c in &fx.cases {
            let what = format!("{name}/{:?}+{:?}", c.text, c.pair);
            let pair = c.pair.as_deref().and_then(Pipeline::pair_argument);
            let (ids, types) = p.tokenize_pair(&c.text, pair).unwrap();
            assert_eq!(ids, c.input_ids, "{what}: tokens");
            // A tokenizer that passes no type ids (RoBERTa's) leaves the model its zeros.
            if types.is_empty() {
                assert!(c.token_type_ids.iter().all(|&t| t == 0), "{what}: type ids dropped");
            } else {
                assert_eq!(types, c.token_type_ids, "{what}: type ids");
            }
            let got = p.classify(&[(c.text.as_str(), pair)]).unwrap().remove(0);
            assert_eq!(got.len(), c.logits.len(), "{what}");
            let d = max_abs_diff(&got, &c.logits);
            assert!(d <= 1e-4, "{what}: max abs diff {d}");
            worst = worst.max(d);
        }
        let inputs: Vec<(&str, Option<&str>)> = fx
            .cases
            .iter()
            .map(|c| (c.text.as_str(), c.pair.as_deref().and_then(Pipeline::pair_argument)))
            .collect();
        for (c, got) in fx.cases.iter().zip(p.classify(&inputs).unwrap()) {
            let d = max_abs_diff(&got, &c.logits);
            assert!(d <= 1e-4, "{name}/{:?} in a batch: max abs diff {d}", c.text);
            worst = worst.max(d);
        }
        assert_eq!(p.classifier().unwrap().architecture, fx.architecture);
        eprintln!("{name} ({}) logits: max abs diff {worst:e}", fx.architecture);
        let w = per_architecture.entry(fx.architecture.as_str()).or_default();
        *w = w.max(worst);
    }
    for (architecture, worst) in per_architecture {
        eprintln!("max abs diff {architecture}: {worst:e}");
    }
}

#[test]
fn labels_problem_types_and_scores() {
    use pg_embed_core::classifier::Problem;
    let g = golden();
    let expect = [
        ("bert_single_label", Problem::SingleLabelClassification, vec!["negative", "neutral", "positive"]),
        ("bert_multi_label", Problem::MultiLabelClassification, vec!["sports", "politics", "science", "art"]),
        ("bert_default_labels", Problem::SingleLabelClassification, vec!["LABEL_0", "LABEL_1"]),
        ("bert_cross_encoder", Problem::Regression, vec!["LABEL_0"]),
        ("electra_multi_label", Problem::MultiLabelClassification, vec!["joy", "anger", "fear"]),
        ("modernbert_mean_regression", Problem::Regression, vec!["LABEL_0"]),
        ("xlm_roberta_cross_encoder", Problem::Regression, vec!["LABEL_0"]),
        (
            "deberta_v2_single_label",
            Problem::SingleLabelClassification,
            vec!["entailment", "neutral", "contradiction"],
        ),
    ];
    for (name, problem, labels) in expect {
        let p = load(name, serde_json::json!({})).unwrap();
        let c = p.classifier().unwrap();
        assert_eq!((c.problem, c.labels.clone()), (problem, labels.iter().map(|s| s.to_string()).collect()));
        let want_labels: Vec<String> = g.fixtures[name].config["id2label"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        assert_eq!(c.labels, want_labels, "{name}: labels as transformers resolves them");
        let logits = &g.fixtures[name].cases[0].logits;
        let scores = c.scores(logits);
        // Best first, and each score from its own logit.
        assert!(scores.windows(2).all(|w| w[0].1 >= w[1].1), "{name}: {scores:?}");
        for (label, score) in &scores {
            let i = c.labels.iter().position(|l| l == label).unwrap();
            let want = match problem {
                Problem::SingleLabelClassification => {
                    let sum: f32 = logits.iter().map(|x| x.exp()).sum();
                    logits[i].exp() / sum
                }
                Problem::MultiLabelClassification => 1.0 / (1.0 + (-logits[i]).exp()),
                Problem::Regression => logits[i],
            };
            assert!((score - want).abs() < 1e-6, "{name}/{label}: {score} vs {want}");
        }
    }
}

#[test]
fn rerank_scores_match_cross_encoder_predict() {
    let g = golden();
    let with_rerank: Vec<&str> = names(&g).into_iter().filter(|n| g.fixtures[*n].rerank.is_some()).collect();
    assert_eq!(
        with_rerank,
        ["bert_cross_encoder", "modernbert_mean_regression", "xlm_roberta_cross_encoder"]
    );
    for name in with_rerank {
        let r = g.fixtures[name].rerank.as_ref().unwrap();
        let p = load(name, serde_json::json!({})).unwrap();
        assert!(p.classifier().unwrap().rerank_sigmoid);
        let inputs: Vec<(&str, Option<&str>)> =
            r.documents.iter().map(|d| (r.query.as_str(), Some(d.as_str()))).collect();
        let logits = p.classify(&inputs).unwrap();
        let mut worst = 0f32;
        for ((l, want), doc) in logits.iter().zip(&r.scores).zip(&r.documents) {
            let got = pg_embed_core::classifier::sigmoid(l[0]);
            assert!((got - want).abs() <= 1e-5, "{name} {doc:?}: {got} vs {want}");
            worst = worst.max((got - want).abs());
        }
        eprintln!("{name} rerank scores: max abs diff {worst:e}");
    }
}

#[test]
fn task_checks() {
    use pg_embed_core::error::Error;
    let p = load("bert_single_label", serde_json::json!({})).unwrap();
    let e = p.embed(&["x"]).unwrap_err();
    assert!(
        matches!(e, Error::WrongTask { .. }) && e.to_string() == "model is for classify, not embed",
        "{e}"
    );
    // A classifier embedded through its backbone on request.
    let p = load("bert_single_label", serde_json::json!({"task": "embed"})).unwrap();
    assert_eq!((p.info().task, p.dim()), ("embed", 32));
    assert_eq!(p.embed(&["x"]).unwrap()[0].len(), 32);
    let e = fixture("pool_mean").classify(&[("x", None)]).unwrap_err();
    assert_eq!(e.to_string(), "model is for embed, not classify");
    let e = load("bert_single_label", serde_json::json!({"pooling": "cls"})).err().unwrap().to_string();
    assert!(e.contains("option \"pooling\" applies to embedding models"), "{e}");
    let e = Pipeline::load(
        &root().join("tests/fixtures/pool_mean"),
        &Options::from_json(&serde_json::json!({"task": "classify"})).unwrap(),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("task \"classify\" needs a *ForSequenceClassification checkpoint"), "{e}");
    let e = load("bert_single_label", serde_json::json!({"task": "rank"})).err().unwrap().to_string();
    assert!(e.contains("unknown task \"rank\""), "{e}");
}

/// A copy of bert_single_label with its config.json edited.
fn edited(tag: &str, edit: impl FnOnce(&mut serde_json::Value)) -> pg_embed_core::error::Result<Pipeline> {
    load_edited(&root().join("tests/fixtures/classify/bert_single_label"), tag, edit)
}

#[test]
fn bad_classifier_configs_are_named() {
    let e = edited("arch", |c| c["architectures"] = serde_json::json!(["FunnelForSequenceClassification"]))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("unsupported architecture \"FunnelForSequenceClassification\""), "{e}");
    let e = edited("id2label", |c| {
        c["id2label"].as_object_mut().unwrap().remove("2");
    })
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("id2label has no entry for label 2 of the classifier's 3"), "{e}");
    let e = edited("problem", |c| c["problem_type"] = "ranking".into()).err().unwrap().to_string();
    assert!(e.contains("unsupported problem_type \"ranking\""), "{e}");
    let e =
        edited("family", |c| c["architectures"] = serde_json::json!(["RobertaForSequenceClassification"]))
            .err()
            .unwrap()
            .to_string();
    assert!(
        e.contains("architecture RobertaForSequenceClassification does not match model_type \"bert\""),
        "{e}"
    );
}

/// A tokenizer without a post-processor that joins pairs (no special tokens around and
/// between the two texts) cannot tokenize sentence pairs for a classifier.
#[test]
fn pair_without_a_pair_template() {
    let src = root().join("tests/fixtures/classify/bert_single_label");
    let dir = std::env::temp_dir().join(format!("pg_embed_no_pair_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["model.safetensors", "config.json", "tokenizer_config.json"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let mut tok: serde_json::Value =
        serde_json::from_slice(&std::fs::read(src.join("tokenizer.json")).unwrap()).unwrap();
    tok["post_processor"] = serde_json::Value::Null;
    std::fs::write(dir.join("tokenizer.json"), serde_json::to_vec(&tok).unwrap()).unwrap();
    let loaded = Pipeline::load(&dir, &Options::default());
    let _ = std::fs::remove_dir_all(&dir);
    let p = loaded.unwrap();
    assert!(p.classify(&[("one", None)]).is_ok(), "single inputs still work");
    let err = p.classify(&[("one", Some("two"))]).unwrap_err();
    assert!(matches!(err, pg_embed_core::error::Error::NoPairTemplate), "{err:?}");
}
