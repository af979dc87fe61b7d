//! Asymmetric dense models: a Router of Dense heads after pooling (sentence-transformers 5
//! and 6, `Router.for_query_document`) or its predecessor `models.Asym` (3.x, 4.x), as the
//! compatibility fixtures save them (tests/fixtures/compat/router__*; their numbers are
//! checked against each version in tests/compat.rs). Here: which route a call takes, what
//! model_info shows, the heads of every route in the shared prepared file, and the Routers
//! pg_embed refuses.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::{json, Value};

use pg_embed_core::error::{Error, SqlState};
use pg_embed_core::options::Options;
use pg_embed_core::pipeline::{Pipeline, Share};
use pg_embed_core::prepared::{file, Mapped, Store};

const TEXT: &str = "The quick brown fox jumps over the lazy dog.";

fn compat(name: &str) -> PathBuf {
    root().join("tests/fixtures/compat").join(name).canonicalize().unwrap()
}

fn load(dir: &Path, options: Value) -> pg_embed_core::error::Result<Pipeline> {
    Pipeline::load(dir, &Options::from_json(&options).unwrap())
}

fn embed(p: &Pipeline, prompt: Option<&str>) -> Vec<f32> {
    p.embed_with_prompt(&[TEXT], prompt).unwrap().remove(0)
}

/// A copy of a compat folder, changed by `edit`; removed when dropped.
struct Copy(PathBuf);

impl Copy {
    fn new(name: &str, tag: &str, edit: impl FnOnce(&Path)) -> Copy {
        let dir = std::env::temp_dir().join(format!("pg_embed_routes_{tag}_{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        copy_model(&compat(name), &dir);
        edit(&dir);
        Copy(dir)
    }
}

impl Drop for Copy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn edit_json(path: &Path, edit: impl FnOnce(&mut Value)) {
    let mut v: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

/// router_config.json of router__st6.2.0 with other parameters, written as sentence-transformers
/// writes it: the routes in their order (`edit_json` would sort them).
fn router_config(parameters: Value) -> String {
    format!(
        r#"{{"types": {{"query_0_Dense": "sentence_transformers.base.modules.dense.Dense",
  "document_0_Dense": "sentence_transformers.base.modules.dense.Dense"}},
 "structure": {{"query": ["query_0_Dense"], "document": ["document_0_Dense"]}},
 "parameters": {parameters}}}"#
    )
}

fn refused(r: pg_embed_core::error::Result<Pipeline>, names: &[&str]) -> String {
    let e = r.err().expect("the Router must be refused");
    let m = format!("{e} HINT: {}", e.hint().unwrap_or_default());
    assert_eq!(e.sqlstate(), SqlState::FeatureNotSupported, "{m}");
    assert!(matches!(e, Error::Unsupported { .. }), "{m}");
    for name in names {
        assert!(m.contains(name), "{name} not in: {m}");
    }
    m
}

#[test]
fn the_route_is_named_like_a_prompt_and_defaults_as_each_version_does() {
    for version in ["st5.7.0", "st6.2.0"] {
        let p = load(&compat(&format!("router__{version}")), json!({})).unwrap();
        let (query, document) = (embed(&p, Some("query")), embed(&p, Some("document")));
        assert_ne!(query, document, "{version}");
        // encode() without a task: the Router's default_route ("document").
        assert_eq!(embed(&p, None), document, "{version}");
        // Any other name is a prompt on the default route; "" is no prompt.
        assert_eq!(embed(&p, Some("")), document, "{version}");
        let e = p.embed_with_prompt(&[TEXT], Some("passage")).unwrap_err();
        assert!(matches!(e, Error::UnknownPrompt { .. }), "{e}");
        // Arrays (triggers, backfill, vectorize) take the default route too.
        let batch = p.embed_batched(&[TEXT, "x"], 1 << 20, 1, || Ok(())).unwrap();
        assert_eq!(batch[0], document, "{version}");
    }
    // Asym (3.x, 4.x): the routes by name; without one, the document route (embed(model,
    // text) is encode_document's vector in every layout).
    for version in ["st3.4.1", "st4.1.0"] {
        let dir = compat(&format!("router__{version}"));
        let p = load(&dir, json!({})).unwrap();
        let document = embed(&p, Some("document"));
        assert_ne!(embed(&p, Some("query")), document, "{version}");
        assert_eq!(embed(&p, None), document, "{version}");
        let batch = p.embed_batched(&[TEXT, "x"], 1 << 20, 1, || Ok(())).unwrap();
        assert_eq!(batch[0], document, "{version}");
        // options.prompt names the default route.
        let with_default = load(&dir, json!({"prompt": "document"})).unwrap();
        assert_eq!(embed(&with_default, None), document);
        assert_eq!(embed(&with_default, Some("query")), embed(&p, Some("query")));
    }
}

#[test]
fn default_route_null_takes_the_first_route_unless_allow_empty_key_is_false() {
    let first = Copy::new("router__st6.2.0", "first_route", |d| {
        let config =
            router_config(json!({"default_route": null, "allow_empty_key": true, "route_mappings": {}}));
        std::fs::write(d.join("2_Router/router_config.json"), config).unwrap()
    });
    let p = load(&first.0, json!({})).unwrap();
    assert_eq!(embed(&p, None), embed(&p, Some("query")), "the first route listed");
    assert_eq!(p.info().router.as_ref().unwrap()["default_route"], "query");
    let none = Copy::new("router__st6.2.0", "no_route", |d| {
        let config = router_config(json!({"default_route": null, "allow_empty_key": false}));
        std::fs::write(d.join("2_Router/router_config.json"), config).unwrap()
    });
    let p = load(&none.0, json!({})).unwrap();
    let e = p.embed(&[TEXT]).unwrap_err();
    assert!(matches!(e, Error::NoRoute { asym: false, .. }), "{e}");
    assert!(p.embed_with_prompt(&[TEXT], Some("document")).is_ok());
}

#[test]
fn a_route_that_is_also_a_prompt_applies_both() {
    let copy = Copy::new("router__st6.2.0", "route_prompt", |d| {
        edit_json(&d.join("config_sentence_transformers.json"), |v| v["prompts"]["query"] = "query: ".into())
    });
    let plain = load(&compat("router__st6.2.0"), json!({})).unwrap();
    let prompted = load(&copy.0, json!({})).unwrap();
    let want = plain.embed_with_prompt(&[&format!("query: {TEXT}")], Some("query")).unwrap().remove(0);
    assert_eq!(embed(&prompted, Some("query")), want);
    // The document route keeps its empty prompt.
    assert_eq!(embed(&prompted, Some("document")), embed(&plain, Some("document")));
}

#[test]
fn model_info_shows_each_route_and_its_heads() {
    for (version, default) in [
        ("st3.4.1", json!("document")),
        ("st4.1.0", json!("document")),
        ("st5.7.0", json!("document")),
        ("st6.2.0", json!("document")),
    ] {
        let p = load(&compat(&format!("router__{version}")), json!({})).unwrap();
        let info = serde_json::to_value(p.info()).unwrap();
        assert_eq!(info["dim"], 16, "{version}");
        assert_eq!(info["heads"], json!([]), "{version}: no heads outside the routes");
        let router = &info["router"];
        assert_eq!(router["default_route"], default, "{version}: {router}");
        assert_eq!(router["dim"], 16);
        assert_eq!(router["after_heads"], 0);
        let routes = router["routes"].as_array().unwrap();
        let names: Vec<&str> = routes.iter().map(|r| r["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["query", "document"], "{version}: in the order the config lists them");
        for route in routes {
            let heads = route["heads"].as_array().unwrap();
            assert_eq!(heads.len(), 1, "{version}");
            assert_eq!(
                (heads[0]["in_features"].as_u64(), heads[0]["out_features"].as_u64()),
                (Some(32), Some(16))
            );
            assert_eq!(heads[0]["activation"], "tanh");
            assert_eq!(route["dim"], 16);
        }
        let asym = version < "st5";
        assert_eq!(router["saved_as"].as_str().unwrap().starts_with("Asym"), asym, "{router}");
        assert!(router["module"].as_str().unwrap().ends_with(if asym { ".Asym" } else { ".Router" }));
    }
    // Parameters count both routes' heads.
    let p = load(&compat("router__st6.2.0"), json!({})).unwrap();
    let dense = load(&root().join("tests/fixtures/compat/dense__st6.2.0"), json!({})).unwrap();
    assert_eq!(p.info().parameters, dense.info().parameters + (32 * 16 + 16));
}

fn no_interrupt() -> pg_embed_core::error::Result<()> {
    Ok(())
}

#[test]
fn the_prepared_file_holds_every_route() {
    let dir = std::env::temp_dir().join(format!("pg_embed_routes_store_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = Store::open(&dir).unwrap();
    let repo = root().canonicalize().unwrap();
    for version in ["st3.4.1", "st6.2.0"] {
        let model = compat(&format!("router__{version}"));
        let options = Options::from_json(&json!({"prompt": "document"})).unwrap();
        let share = Share { store: &store, files: None, model: "m", source: "src", interrupt: &no_interrupt, admit: None };
        let private = Pipeline::load(&model, &options).unwrap();
        let built = Pipeline::load_shared(&repo, &model, &options, Some(&share)).unwrap();
        let written =
            built.sharing().writing.as_ref().expect("this load builds the file").wait().clone().unwrap();
        let found = Pipeline::load_shared(&repo, &model, &options, Some(&share)).unwrap();
        assert_eq!(found.sharing().file.as_ref(), Some(&written), "{version}: the second load maps the file");
        for route in [None, Some("query"), Some("document")] {
            let want = embed(&private, route);
            assert_eq!(embed(&built, route), want, "{version} {route:?}: built");
            assert_eq!(embed(&found, route), want, "{version} {route:?}: mapped");
        }
        assert_eq!(found.info().parameters, private.info().parameters);
        assert_eq!(found.info().router, private.info().router, "{version}");
        // The file's description: both routes, each head's weights in the mapped data.
        let key = file::peek(&written).unwrap().key;
        let mapped = Mapped::open(&written, &file::Expect::current(&key)).unwrap();
        let routes = mapped.restore(|parts| Ok(parts["routes"].clone())).unwrap();
        let listed: Vec<(&str, usize)> = routes["routes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["name"].as_str().unwrap(), r["heads"].as_array().unwrap().len()))
            .collect();
        assert_eq!(listed, [("query", 1), ("document", 1)], "{version}: {routes}");
        assert_eq!(routes["dim"], 16);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn routers_pg_embed_does_not_compute_are_refused() {
    // Routes of different widths (an empty route is the pooling's 32): one model, one dim.
    let copy = Copy::new("router__st6.2.0", "dims", |d| {
        edit_json(&d.join("2_Router/router_config.json"), |v| v["structure"]["document"] = json!([]))
    });
    refused(
        load(&copy.0, json!({})),
        &["Router routes of different output dimensions", "query: 16", "document: 32"],
    );
    // The same in an Asym folder.
    let copy = Copy::new("router__st4.1.0", "dims_asym", |d| {
        edit_json(&d.join("2_Asym/config.json"), |v| v["structure"]["query"] = json!([]))
    });
    refused(load(&copy.0, json!({})), &["query: 32", "document: 16", "2_Asym/config.json"]);
    // A route with its own Transformer (an input module per route).
    let copy = Copy::new("router__st6.2.0", "transformer_route", |d| {
        edit_json(&d.join("2_Router/router_config.json"), |v| {
            v["types"]["query_0_Dense"] = "sentence_transformers.base.modules.transformer.Transformer".into()
        })
    });
    refused(
        load(&copy.0, json!({})),
        &[
            "Router route",
            "query",
            "sentence_transformers.base.modules.transformer.Transformer",
            "routes of Dense modules only",
        ],
    );
    // A Normalize inside a route.
    let copy = Copy::new("router__st3.4.1", "normalize_route", |d| {
        edit_json(&d.join("2_Asym/config.json"), |v| {
            v["types"]["3_Normalize"] = "sentence_transformers.models.Normalize".into();
            v["structure"]["document"] = json!(["2_Dense", "3_Normalize"]);
        })
    });
    refused(
        load(&copy.0, json!({})),
        &["document", "sentence_transformers.models.Normalize", "sentence_transformers.models.Asym"],
    );
    // Routes picked by (task, modality) mappings.
    let copy = Copy::new("router__st6.2.0", "mappings", |d| {
        edit_json(&d.join("2_Router/router_config.json"), |v| {
            v["parameters"]["route_mappings"] = json!({"(None, 'text')": "query"})
        })
    });
    refused(load(&copy.0, json!({})), &["Router route_mappings", "(None, 'text')"]);
    // A Router before pooling (routes of whole encoders) stays a module-sequence refusal.
    let copy = Copy::new("router__st6.2.0", "router_first", |d| {
        edit_json(&d.join("modules.json"), |v| {
            let modules = v.as_array_mut().unwrap();
            modules.swap(0, 2);
        })
    });
    refused(
        load(&copy.0, json!({})),
        &["module sequence", "sentence_transformers.base.modules.router.Router at position 0"],
    );
    // A default_route that is no route is a broken file.
    let copy = Copy::new("router__st5.7.0", "bad_default", |d| {
        edit_json(&d.join("2_Router/router_config.json"), |v| {
            v["parameters"]["default_route"] = "passage".into()
        })
    });
    let e = load(&copy.0, json!({})).err().unwrap();
    assert!(
        matches!(e, Error::InvalidFile { .. }) && e.to_string().contains("default_route \"passage\""),
        "{e}"
    );
}
