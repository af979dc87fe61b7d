//! Image models against transformers: tiny seeded random ViT, ViTForImageClassification,
//! CLIPModel, CLIPVisionModelWithProjection, sentence-transformers' CLIP layout and Dinov2Model
//! from scripts/gen_image_fixtures.py. The backbones are checked on the image processor's
//! own `pixel_values` (pixels.safetensors), so a difference here is the model's alone; the
//! processor is checked against the same pixels in tests/processor.rs, and end to end
//! (image file -> vector) below.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::*;
use serde::Deserialize;

use pg_embed_core::models::Pixels;
use pg_embed_core::options::Options;
use pg_embed_core::pipeline::Pipeline;

#[derive(Deserialize)]
struct Golden {
    models: BTreeMap<String, Model>,
}

#[derive(Deserialize)]
struct Model {
    pixels_key: Option<String>,
    #[serde(default)]
    images: BTreeMap<String, Image>,
    #[serde(default)]
    texts: Vec<Text>,
}

#[derive(Deserialize)]
struct Image {
    resized: Option<bool>,
    #[serde(default)]
    outputs: BTreeMap<String, serde_json::Value>,
}

#[derive(Deserialize)]
struct Text {
    text: String,
    ids: Vec<u32>,
    #[serde(default)]
    text_embeds: Option<Vec<f32>>,
    #[serde(default)]
    st_embedding: Option<Vec<f32>>,
}

fn dir() -> PathBuf {
    root().join("tests/fixtures/images")
}

fn golden() -> Golden {
    let bytes = std::fs::read(dir().join("golden.json")).expect("tests/fixtures/images/golden.json");
    serde_json::from_slice(&bytes).expect("golden.json parses")
}

/// The processor's pixel_values by "<pixels_key>/<image file>".
fn pixels() -> BTreeMap<String, Pixels> {
    let tensors =
        pg_embed_core::safetensors_io::read_safetensors(&dir().join("pixels.safetensors")).expect("pixels");
    tensors
        .into_iter()
        .map(|(name, t)| {
            let (c, height, width) = t.dims3().expect("[3, H, W]");
            assert_eq!(c, 3, "{name}");
            let data = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            (name, Pixels { data, height, width })
        })
        .collect()
}

fn load(name: &str, options: serde_json::Value) -> Pipeline {
    Pipeline::load(&dir().join(name), &Options::from_json(&options).unwrap())
        .unwrap_or_else(|e| panic!("{name} with {options}: {e}"))
}

fn output(image: &Image, key: &str) -> Vec<f32> {
    serde_json::from_value(image.outputs[key].clone()).unwrap_or_else(|e| panic!("{key}: {e}"))
}

/// Runs `model`'s images (those whose pixels are stored) through `pipeline` and compares
/// each with the golden output `key` (several keys: concatenated); returns the worst diff.
fn check_pixels(model: &str, pipeline: &Pipeline, keys: &[&str], classify: bool) -> f32 {
    let golden = golden();
    let fx = &golden.models[model];
    let all = pixels();
    let prefix = fx.pixels_key.as_deref().unwrap_or(model);
    let mut worst = 0f32;
    let mut checked = 0;
    for (file, image) in &fx.images {
        let Some(px) = all.get(&format!("{prefix}/{file}")) else { continue };
        let want: Vec<f32> = keys.iter().flat_map(|k| output(image, k)).collect();
        let got = if classify {
            pipeline.classify_pixels(std::slice::from_ref(px)).unwrap()
        } else {
            pipeline.embed_pixels(std::slice::from_ref(px)).unwrap()
        };
        worst = worst.max(assert_close(&got[0], &want, &format!("{model} {file} {keys:?}")));
        checked += 1;
    }
    assert!(checked >= 5, "{model}: only {checked} images have stored pixels");
    // The same images as one batch give the same vectors as one at a time.
    let batch: Vec<Pixels> =
        fx.images.keys().filter_map(|f| all.get(&format!("{prefix}/{f}")).cloned()).collect();
    let together =
        if classify { pipeline.classify_pixels(&batch) } else { pipeline.embed_pixels(&batch) }.unwrap();
    for (px, row) in batch.iter().zip(&together) {
        let alone = if classify {
            pipeline.classify_pixels(std::slice::from_ref(px))
        } else {
            pipeline.embed_pixels(std::slice::from_ref(px))
        }
        .unwrap();
        assert!(max_abs_diff(&alone[0], row) <= 1e-5, "{model}: batched differs from single");
    }
    eprintln!("{model} {keys:?}: {checked} images, max abs diff {worst:.2e}");
    worst
}

#[test]
fn vit_every_pooling() {
    for (pooling, keys) in [("cls", vec!["cls"]), ("pooler", vec!["pooler"]), ("mean", vec!["mean"])] {
        let p = load("vit", serde_json::json!({ "pooling": pooling }));
        check_pixels("vit", &p, &keys, false);
    }
    // The default is the layernormed [CLS].
    check_pixels("vit", &load("vit", serde_json::json!({})), &["cls"], false);
    let p = load("vit", serde_json::json!({ "pooling": ["cls", "mean"] }));
    check_pixels("vit", &p, &["cls", "mean"], false);
    assert_eq!(p.dim(), 64);
}

#[test]
fn vit_classification() {
    let p = load("vit_classify", serde_json::json!({}));
    assert_eq!(p.info().task, "classify");
    assert_eq!(p.info().labels.as_deref(), Some(&["cat".to_string(), "dog".into(), "bird".into()][..]));
    check_pixels("vit_classify", &p, &["logits"], true);
}

#[test]
fn vit_without_pooler_refuses_pooler_pooling() {
    // ViTForImageClassification's backbone has no pooler weights.
    let err = Pipeline::load(
        &dir().join("vit_classify"),
        &Options::from_json(&serde_json::json!({"task": "embed", "pooling": "pooler"})).unwrap(),
    )
    .err()
    .expect("refused");
    assert!(err.to_string().contains("pooler"), "{err}");
}

#[test]
fn dinov2_cls_mean_and_both_with_interpolated_positions() {
    for name in ["dinov2", "dinov2_nocrop"] {
        check_pixels(name, &load(name, serde_json::json!({})), &["cls"], false);
        check_pixels(name, &load(name, serde_json::json!({"pooling": "mean"})), &["mean"], false);
        check_pixels(
            name,
            &load(name, serde_json::json!({"pooling": ["cls", "mean"]})),
            &["cls", "mean"],
            false,
        );
    }
}

#[test]
fn clip_images_and_texts_in_one_space() {
    for name in ["clip", "clip_st"] {
        let p = load(name, serde_json::json!({}));
        assert_eq!(p.modality(), pg_embed_core::models::Modality::Both);
        let key = if name == "clip" { "image_embeds" } else { "st_embedding" };
        check_pixels(name, &p, &[key], false);
        let golden = golden();
        for t in &golden.models[name].texts {
            assert_eq!(p.tokenize(&t.text).unwrap(), t.ids, "{name}: ids of {:?}", t.text);
            let want = t.text_embeds.clone().or(t.st_embedding.clone()).expect("text output");
            assert_close(&p.embed(&[&t.text]).unwrap()[0], &want, &format!("{name} text {:?}", t.text));
        }
    }
    check_pixels("clip_vision", &load("clip_vision", serde_json::json!({})), &["image_embeds"], false);
}

#[test]
fn multilingual_student_lands_in_clip_space() {
    let p = load("clip_multilingual_student", serde_json::json!({}));
    let golden = golden();
    let texts = &golden.models["clip_multilingual_student"].texts;
    assert!(!texts.is_empty());
    for t in texts {
        assert_eq!(p.tokenize(&t.text).unwrap(), t.ids);
        let want = t.st_embedding.clone().expect("st_embedding");
        assert_close(&p.embed(&[&t.text]).unwrap()[0], &want, &format!("student {:?}", t.text));
    }
    let clip = load("clip", serde_json::json!({}));
    assert_eq!(p.dim(), clip.dim(), "the student's output is CLIP's projection width");
}

#[test]
fn wrong_modality_is_refused() {
    let vit = load("vit", serde_json::json!({}));
    let err = vit.embed(&["a photo"]).unwrap_err();
    assert_eq!(err.sqlstate(), pg_embed_core::error::SqlState::DatatypeMismatch, "{err}");
    let student = load("clip_multilingual_student", serde_json::json!({}));
    let err = student.embed_images(&[b"x"], 1 << 20, 1 << 20, 1, || Ok(())).unwrap_err();
    assert_eq!(err.sqlstate(), pg_embed_core::error::SqlState::DatatypeMismatch, "{err}");
    // Text options on an image model are refused at load.
    let err = Pipeline::load(
        &dir().join("vit"),
        &Options::from_json(&serde_json::json!({"max_length": 8})).unwrap(),
    )
    .err()
    .expect("refused");
    assert!(err.to_string().contains("max_length"), "{err}");
}

/// Unused golden fields are still read, so a renamed key fails here rather than silently.
#[test]
fn golden_marks_resized_images() {
    let golden = golden();
    let vit = &golden.models["vit"];
    assert_eq!(vit.images["exact_32x32.png"].resized, Some(false));
    assert_eq!(vit.images["rgb_40x30.png"].resized, Some(true));
}

/// Image file -> vector, the whole way: decode, the image processor, the model. Every
/// non-JPEG file gives exactly transformers' pixels, resized or not (tests/processor.rs), so
/// the outputs are the model's own parity. JPEGs decode 1 to 3 steps of 255 away from
/// libjpeg-turbo (Pillow's decoder) in some pixels: a step is 1/255 / std in the normalised
/// pixels, which moves these tiny random models' outputs by up to ~5e-2 in absolute value,
/// hence a cosine bound for them instead of the element-wise one.
#[test]
fn end_to_end_from_image_files() {
    let golden = golden();
    let cases: [(&str, &str, serde_json::Value, bool); 6] = [
        ("vit", "cls", serde_json::json!({}), false),
        ("vit", "pooler", serde_json::json!({"pooling": "pooler"}), false),
        ("vit_classify", "logits", serde_json::json!({}), true),
        ("clip", "image_embeds", serde_json::json!({}), false),
        ("dinov2", "cls", serde_json::json!({}), false),
        ("dinov2_nocrop", "mean", serde_json::json!({"pooling": "mean"}), false),
    ];
    for (model, key, options, classify) in cases {
        let p = load(model, options);
        let (mut exact_worst, mut jpeg_worst, mut jpeg_cos) = (0f32, 0f32, 1f32);
        let fx = &golden.models[model];
        let mut files = Vec::new();
        // The bad inputs have no outputs (bad_image_files_are_clear_errors).
        for (file, image) in fx.images.iter().filter(|(_, i)| i.outputs.contains_key(key)) {
            let bytes = std::fs::read(dir().join("inputs").join(file)).unwrap();
            let got = if classify {
                p.classify_images(&[&bytes], 1 << 26, 1 << 20, 1, || Ok(()))
            } else {
                p.embed_images(&[&bytes], 1 << 26, 1 << 20, 1, || Ok(()))
            }
            .unwrap_or_else(|e| panic!("{model} {file}: {e}"));
            let want = output(image, key);
            let cos = cosine(&got[0], &want);
            if !file.ends_with(".jpg") {
                exact_worst = exact_worst.max(assert_close(&got[0], &want, &format!("{model} {file}")));
            } else {
                assert!(cos >= JPEG_COSINE_MIN, "{model} {file}: cosine {cos}");
                jpeg_worst = jpeg_worst.max(max_abs_diff(&got[0], &want));
                jpeg_cos = jpeg_cos.min(cos);
            }
            files.push(bytes);
        }
        // All of them in one call (batched) give the same as one at a time.
        let refs: Vec<&[u8]> = files.iter().map(Vec::as_slice).collect();
        let together = if classify {
            p.classify_images(&refs, 1 << 26, 64, 2, || Ok(()))
        } else {
            p.embed_images(&refs, 1 << 26, 64, 2, || Ok(()))
        }
        .unwrap();
        assert_eq!(together.len(), files.len());
        for (bytes, row) in refs.iter().zip(&together) {
            let alone = if classify {
                p.classify_images(&[bytes], 1 << 26, 1 << 20, 1, || Ok(()))
            } else {
                p.embed_images(&[bytes], 1 << 26, 1 << 20, 1, || Ok(()))
            }
            .unwrap();
            assert!(max_abs_diff(&alone[0], row) <= 1e-5, "{model}: batched differs from single");
        }
        eprintln!(
            "{model} {key}: {} files; not JPEG: max abs diff {exact_worst:.2e}; JPEG: max abs diff {jpeg_worst:.2e}, min cosine {jpeg_cos:.6}",
            files.len()
        );
    }
}

/// See `end_to_end_from_image_files`.
const JPEG_COSINE_MIN: f32 = 0.9995;

#[test]
fn bad_image_files_are_clear_errors() {
    use pg_embed_core::error::SqlState;
    let p = load("vit", serde_json::json!({}));
    for (file, state) in [
        ("not_an_image.bin", SqlState::InvalidBinaryRepresentation),
        ("truncated.png", SqlState::InvalidBinaryRepresentation),
        ("empty.bin", SqlState::InvalidBinaryRepresentation),
    ] {
        let bytes = std::fs::read(dir().join("inputs").join(file)).unwrap();
        let err = p.embed_images(&[&bytes], 1 << 26, 1 << 20, 1, || Ok(())).unwrap_err();
        assert_eq!(err.sqlstate(), state, "{file}: {err}");
    }
    // Over the pixel limit: refused from the header.
    let bytes = std::fs::read(dir().join("inputs/large_300x200.png")).unwrap();
    let err = p.embed_images(&[&bytes], 300 * 200 - 1, 1 << 20, 1, || Ok(())).unwrap_err();
    assert_eq!(err.sqlstate(), SqlState::ProgramLimitExceeded, "{err}");
    assert!(err.to_string().contains("300x200"), "{err}");
}
