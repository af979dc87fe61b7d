//! SigLIP against transformers: tiny seeded random SiglipModel, SiglipVisionModel,
//! SiglipTextModel, SiglipForImageClassification and SigLIP 2's NaFlex Siglip2Model and
//! Siglip2ForImageClassification from scripts/gen_siglip_fixtures.py.
//! The towers are checked on the image processor's own `pixel_values`
//! (pixels.safetensors), then end to end from the image files of tests/fixtures/images;
//! the text tower on the processor's ids (padded to max_length, with its attention mask),
//! the empty text and a cut one among them; zero-shot probabilities by SigLIP's recipe.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::*;
use serde::Deserialize;

use pg_embed_core::models::{Modality, Pixels};
use pg_embed_core::options::Options;
use pg_embed_core::pipeline::Pipeline;

#[derive(Deserialize)]
struct Golden {
    models: BTreeMap<String, Model>,
}

#[derive(Deserialize)]
struct Model {
    #[serde(default)]
    pixels_key: Option<String>,
    #[serde(default)]
    images: BTreeMap<String, Image>,
    #[serde(default)]
    texts: Vec<Text>,
    #[serde(default)]
    zero_shot: Option<ZeroShot>,
    #[serde(default)]
    logit_scale: Option<f32>,
    #[serde(default)]
    logit_bias: Option<f32>,
}

#[derive(Deserialize)]
struct Image {
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    pixel_shape: Option<[usize; 3]>,
    #[serde(default)]
    image_embeds: Option<Vec<f32>>,
    #[serde(default)]
    mean: Option<Vec<f32>>,
    #[serde(default)]
    logits: Option<Vec<f32>>,
}

#[derive(Deserialize)]
struct Text {
    text: String,
    ids: Vec<u32>,
    /// Absent where the tokenizer passes no attention mask.
    #[serde(default)]
    attention_mask: Vec<u32>,
    text_embeds: Vec<f32>,
}

#[derive(Deserialize)]
struct ZeroShot {
    prompts: Vec<String>,
    probabilities: BTreeMap<String, Vec<f32>>,
}

fn dir() -> PathBuf {
    root().join("tests/fixtures/siglip")
}

fn golden() -> Golden {
    let bytes = std::fs::read(dir().join("golden.json")).expect("tests/fixtures/siglip/golden.json");
    serde_json::from_slice(&bytes).expect("golden.json parses")
}

fn pixels() -> BTreeMap<String, Pixels> {
    let tensors = pg_embed_core::safetensors_io::read_safetensors(&dir().join("pixels.safetensors")).expect("pixels");
    tensors
        .into_iter()
        .map(|(name, t)| {
            let (_, height, width) = t.dims3().expect("[3, H, W]");
            (name, Pixels { data: t.flatten_all().unwrap().to_vec1::<f32>().unwrap(), height, width })
        })
        .collect()
}

fn load(name: &str, options: serde_json::Value) -> Pipeline {
    Pipeline::load(&dir().join(name), &Options::from_json(&options).unwrap())
        .unwrap_or_else(|e| panic!("{name} with {options}: {e}"))
}

/// Every stored image of `model` through `pipeline` against `want(image)`, one at a time
/// and as one batch; returns the worst difference.
fn check_pixels(model: &str, pipeline: &Pipeline, want: impl Fn(&Image) -> Option<Vec<f32>>, classify: bool) -> f32 {
    let golden = golden();
    let all = pixels();
    let key = golden.models[model].pixels_key.clone().expect("pixels_key");
    let run = |px: &[Pixels]| if classify { pipeline.classify_pixels(px) } else { pipeline.embed_pixels(px) }.unwrap();
    let (mut worst, mut batch, mut wants) = (0f32, Vec::new(), Vec::new());
    for (file, image) in &golden.models[model].images {
        let (Some(px), Some(w)) = (all.get(&format!("{key}/{file}")), want(image)) else { continue };
        let got = run(std::slice::from_ref(px));
        worst = worst.max(assert_close(&got[0], &w, &format!("{model} {file}")));
        batch.push(px.clone());
        wants.push(w);
    }
    assert!(batch.len() >= 10, "{model}: only {} images checked", batch.len());
    for (row, w) in run(&batch).iter().zip(&wants) {
        assert_close(row, w, &format!("{model} batched"));
    }
    eprintln!("{model}: {} images, max abs diff {worst:.2e}", batch.len());
    worst
}

#[test]
fn image_features_through_the_attention_pooling_head() {
    let siglip = load("siglip", serde_json::json!({}));
    assert_eq!(siglip.modality(), Modality::Both);
    check_pixels("siglip", &siglip, |i| i.image_embeds.clone(), false);
    let vision = load("siglip_vision", serde_json::json!({}));
    assert_eq!(vision.modality(), Modality::Image);
    check_pixels("siglip_vision", &vision, |i| i.image_embeds.clone(), false);
    let mean = load("siglip_vision", serde_json::json!({"pooling": "mean"}));
    check_pixels("siglip_vision", &mean, |i| i.mean.clone(), false);
}

/// NaFlex: every image at its own patch grid (4x4, 4x5, 6x3, 1x20, 20x1 here), the
/// position table resized to each.
#[test]
fn siglip2_naflex_images_at_their_own_grids() {
    let p = load("siglip2", serde_json::json!({}));
    assert_eq!(p.modality(), Modality::Both);
    check_pixels("siglip2", &p, |i| i.image_embeds.clone(), false);
    check_pixels("siglip2_vision", &load("siglip2_vision", serde_json::json!({})), |i| i.image_embeds.clone(), false);
    let mean = load("siglip2_vision", serde_json::json!({"pooling": "mean"}));
    check_pixels("siglip2_vision", &mean, |i| i.mean.clone(), false);
    let golden = golden();
    let grids: std::collections::BTreeSet<[usize; 3]> =
        golden.models["siglip2"].images.values().filter_map(|i| i.pixel_shape).collect();
    assert!(grids.len() >= 5, "{grids:?}");
    check_pixels("siglip2_classify", &load("siglip2_classify", serde_json::json!({})), |i| i.logits.clone(), true);
}

/// The image processors give transformers' pixels for every file that is not a JPEG (JPEG
/// decoders differ by a few steps of 255; tests/processor.rs).
#[test]
fn processors_give_transformers_pixels() {
    let golden = golden();
    let all = pixels();
    let inputs = root().join("tests/fixtures/images/inputs");
    for model in ["siglip", "siglip2"] {
        let p = load(model, serde_json::json!({}));
        let mut checked = 0;
        for (file, image) in &golden.models[model].images {
            let Some(want) = all.get(&format!("{model}/{file}")) else { continue };
            let got = p.preprocess_image(&std::fs::read(inputs.join(file)).unwrap(), 1 << 26).unwrap();
            assert_eq!((got.height, got.width), (want.height, want.width), "{model} {file}");
            assert_eq!(image.pixel_shape, Some([3, want.height, want.width]));
            if !file.ends_with(".jpg") {
                let diff = max_abs_diff(&got.data, &want.data);
                assert!(diff <= 1e-6, "{model} {file}: pixels differ by {diff}");
            }
            checked += 1;
        }
        assert!(checked >= 15, "{model}: {checked}");
    }
}

#[test]
fn text_features_read_the_last_padding_position() {
    let golden = golden();
    for name in ["siglip", "siglip_text", "siglip2"] {
        let p = load(name, serde_json::json!({}));
        let texts = &golden.models[name].texts;
        assert!(texts.iter().any(|t| t.text.is_empty()), "the empty text is a case");
        assert!(texts.iter().any(|t| t.attention_mask.iter().all(|m| *m == 1)), "a cut text is a case");
        let mut worst = 0f32;
        for t in texts {
            let real: Vec<u32> = t.ids.iter().zip(&t.attention_mask).filter(|(_, m)| **m == 1).map(|(i, _)| *i).collect();
            assert_eq!(p.tokenize(&t.text).unwrap(), real, "{name}: ids of {:?}", t.text);
            let got = p.embed(&[&t.text]).unwrap();
            worst = worst.max(assert_close(&got[0], &t.text_embeds, &format!("{name} {:?}", t.text)));
        }
        // One batch of texts of every length gives the same vectors.
        let all: Vec<&str> = texts.iter().map(|t| t.text.as_str()).collect();
        for (row, t) in p.embed(&all).unwrap().iter().zip(texts) {
            assert_close(row, &t.text_embeds, &format!("{name} batched {:?}", t.text));
        }
        eprintln!("{name}: {} texts, max abs diff {worst:.2e}", texts.len());
    }
}

/// A tokenizer whose `model_input_names` leave the attention mask out: transformers then
/// attends over the padding (to the positions), and so does pg_embed; the ids are the
/// masked tower's (`siglip_text`, the same weights), whose vectors differ.
#[test]
fn text_features_without_an_attention_mask_attend_over_the_padding() {
    let golden = golden();
    let name = "siglip_text_nomask";
    let p = load(name, serde_json::json!({}));
    let texts = &golden.models[name].texts;
    let masked = &golden.models["siglip_text"].texts;
    assert!(texts.iter().all(|t| t.attention_mask.is_empty()), "the reference passed no mask");
    let mut worst = 0f32;
    for (t, m) in texts.iter().zip(masked) {
        assert_eq!(t.ids, m.ids, "{:?}", t.text);
        let real: Vec<u32> = m.ids.iter().zip(&m.attention_mask).filter(|(_, k)| **k == 1).map(|(i, _)| *i).collect();
        assert_eq!(p.tokenize(&t.text).unwrap(), real, "ids of {:?}", t.text);
        let got = p.embed(&[&t.text]).unwrap();
        worst = worst.max(assert_close(&got[0], &t.text_embeds, &format!("{name} {:?}", t.text)));
    }
    let all: Vec<&str> = texts.iter().map(|t| t.text.as_str()).collect();
    for (row, t) in p.embed(&all).unwrap().iter().zip(texts) {
        assert_close(row, &t.text_embeds, &format!("{name} batched {:?}", t.text));
    }
    eprintln!("{name}: {} texts, max abs diff {worst:.2e}", texts.len());
}

#[test]
fn classification_reads_the_mean_of_the_tokens() {
    let p = load("siglip_classify", serde_json::json!({}));
    assert_eq!(p.modality(), Modality::Image);
    assert_eq!(p.info().labels.as_deref(), Some(&["cat".to_string(), "dog".into(), "bird".into()][..]));
    check_pixels("siglip_classify", &p, |i| i.logits.clone(), true);
}

/// SigLIP's zero-shot recipe, as the README gives it in SQL: sigmoid(exp(logit_scale) *
/// cos(image, text) + logit_bias), with the constants from model_info.
#[test]
fn zero_shot_probabilities_from_the_recipe() {
    for model in ["siglip", "siglip2"] {
        zero_shot(model);
    }
}

fn zero_shot(model: &str) {
    let golden = golden();
    let fx = &golden.models[model];
    let p = load(model, serde_json::json!({}));
    let info = p.info().zero_shot.clone().expect("model_info has the zero-shot constants");
    let (scale, bias) = (info["logit_scale"].as_f64().unwrap() as f32, info["logit_bias"].as_f64().unwrap() as f32);
    assert_eq!((scale, bias), (fx.logit_scale.unwrap(), fx.logit_bias.unwrap()));
    let zero_shot = fx.zero_shot.as_ref().expect("zero_shot");
    let prompts: Vec<&str> = zero_shot.prompts.iter().map(String::as_str).collect();
    let texts = p.embed(&prompts).unwrap();
    let all = pixels();
    let mut worst = 0f32;
    for (file, want) in &zero_shot.probabilities {
        let image = &p.embed_pixels(std::slice::from_ref(&all[&format!("{model}/{file}")])).unwrap()[0];
        for (text, w) in texts.iter().zip(want) {
            let logit = scale.exp() * cosine(image, text) + bias;
            let got = 1.0 / (1.0 + (-logit).exp());
            worst = worst.max((got - w).abs());
            assert!((got - w).abs() <= 1e-5, "{file}: {got} vs {w}");
        }
    }
    assert!(zero_shot.probabilities.len() >= 10);
    eprintln!("{model} zero-shot: max abs diff {worst:.2e}");
}

/// File -> vector for every input: non-JPEGs exactly (the processor gives transformers'
/// pixels), JPEGs within the image suite's cosine (tests/images.rs explains why).
#[test]
fn end_to_end_from_image_files() {
    let golden = golden();
    let inputs = root().join("tests/fixtures/images/inputs");
    for (model, classify) in [("siglip", false), ("siglip_classify", true), ("siglip2", false), ("siglip2_classify", true)] {
        let p = load(model, serde_json::json!({}));
        let mut files = 0;
        for (file, image) in &golden.models[model].images {
            let bytes = std::fs::read(inputs.join(file)).unwrap();
            let run = |b: &[u8]| {
                if classify {
                    p.classify_images(&[b], 1 << 26, 1 << 20, 1, || Ok(()))
                } else {
                    p.embed_images(&[b], 1 << 26, 1 << 20, 1, || Ok(()))
                }
            };
            if let Some(error) = &image.error {
                assert!(run(&bytes).is_err(), "{model} {file}: transformers failed ({error}), pg_embed did not");
                continue;
            }
            let want = if classify { image.logits.clone() } else { image.image_embeds.clone() }.unwrap();
            let got = run(&bytes).unwrap_or_else(|e| panic!("{model} {file}: {e}"));
            if file.ends_with(".jpg") {
                assert!(cosine(&got[0], &want) >= 0.9995, "{model} {file}");
            } else {
                assert_close(&got[0], &want, &format!("{model} {file}"));
            }
            files += 1;
        }
        assert!(files >= 15, "{model}: {files} files");
    }
}

/// SigLIP's own tokenizer (SiglipTokenizer: spiece.model, no tokenizer.json) gives
/// transformers' ids on a seeded fuzz of texts (words, punctuation, Unicode spaces, case and
/// compatibility forms, special-token text) and the tower's features on them.
#[test]
fn siglip_tokenizer_from_the_sentencepiece_model() {
    #[derive(Deserialize)]
    struct Fuzz {
        text: String,
        ids: Vec<u32>,
    }
    #[derive(Deserialize)]
    struct Spm {
        texts: Vec<Text>,
        fuzz: Vec<Fuzz>,
    }
    let bytes = std::fs::read(dir().join("golden.json")).unwrap();
    let golden: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    let spm: Spm = serde_json::from_value(golden["models"]["siglip_spm"].clone()).unwrap();
    assert!(!dir().join("siglip_spm/tokenizer.json").exists());
    let p = load("siglip_spm", serde_json::json!({}));
    assert!(spm.fuzz.len() >= 400);
    for f in &spm.fuzz {
        assert_eq!(p.tokenize(&f.text).unwrap(), f.ids, "ids of {:?}", f.text);
    }
    let mut worst = 0f32;
    for t in &spm.texts {
        let real: Vec<u32> = t.ids.iter().zip(&t.attention_mask).filter(|(_, m)| **m == 1).map(|(i, _)| *i).collect();
        assert_eq!(p.tokenize(&t.text).unwrap(), real, "ids of {:?}", t.text);
        worst = worst.max(assert_close(&p.embed(&[&t.text]).unwrap()[0], &t.text_embeds, &format!("{:?}", t.text)));
    }
    eprintln!("siglip_spm: {} fuzz texts' ids equal; {} texts, max abs diff {worst:.2e}", spm.fuzz.len(), spm.texts.len());
}

/// A SentencePiece model alone under another tokenizer class is refused by name (0A000):
/// only SiglipTokenizer's steps are rebuilt.
#[test]
fn another_sentencepiece_tokenizer_alone_is_refused() {
    let tmp = std::env::temp_dir().join(format!("pg_embed_siglip_spiece_{}", std::process::id()));
    copy_model(&dir().join("siglip_spm"), &tmp);
    let config = tmp.join("tokenizer_config.json");
    let text = std::fs::read_to_string(&config).unwrap().replace("SiglipTokenizer", "T5Tokenizer");
    std::fs::write(&config, text).unwrap();
    let err = Pipeline::load(&tmp, &Options::default()).err().expect("refused");
    std::fs::remove_dir_all(&tmp).ok();
    assert_eq!(err.sqlstate(), pg_embed_core::error::SqlState::FeatureNotSupported, "{err}");
    assert!(err.to_string().contains("spiece.model"), "{err}");
}
