//! DINOv3 against transformers: tiny seeded random DINOv3ViTModels and their
//! DINOv3ViTImageProcessor (torchvision) from scripts/gen_dinov3_fixtures.py, over the shared
//! inputs of tests/fixtures/images/inputs. Checked: the processor's pixel values, the token
//! count and the full last_hidden_state (2-D rotary positions over every grid), the pooled
//! outputs (pooler_output, the patch mean, both) on transformers' own pixels, and image file
//! -> vector.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::*;
use serde::Deserialize;

use pg_embed_core::error::SqlState;
use pg_embed_core::models::{Batch, BackboneConfig, Pixels};
use pg_embed_core::options::Options;
use pg_embed_core::pipeline::Pipeline;
use pg_embed_core::processor::ImageProcessor;

#[derive(Deserialize)]
struct Golden {
    models: BTreeMap<String, Model>,
}

#[derive(Deserialize)]
struct Model {
    num_register_tokens: usize,
    images: BTreeMap<String, Image>,
}

#[derive(Deserialize)]
struct Image {
    pixel_shape: [usize; 3],
    outputs: Outputs,
}

#[derive(Deserialize)]
struct Outputs {
    pooler: Vec<f32>,
    mean: Vec<f32>,
    tokens: usize,
    last_hidden_state: Option<Vec<Vec<f32>>>,
}

const MODELS: [&str; 2] = ["dinov3", "dinov3_gated"];

fn dir() -> PathBuf {
    root().join("tests/fixtures/dinov3")
}

fn input(file: &str) -> Vec<u8> {
    std::fs::read(root().join("tests/fixtures/images/inputs").join(file)).unwrap()
}

fn golden() -> Golden {
    let bytes = std::fs::read(dir().join("golden.json")).expect("tests/fixtures/dinov3/golden.json");
    serde_json::from_slice(&bytes).expect("golden.json parses")
}

/// transformers' pixel_values by "<model>/<image file>".
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

fn backbone(name: &str) -> Box<dyn pg_embed_core::models::Model> {
    let d = dir().join(name);
    let tensors = pg_embed_core::safetensors_io::read_safetensors(&d.join("model.safetensors")).unwrap();
    let vb = candle_nn::VarBuilder::from_tensors(tensors, candle_core::DType::F32, &candle_core::Device::Cpu);
    let path = d.join("config.json");
    let config = BackboneConfig::parse(&path, &std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(config.architecture(), "dinov3_vit");
    config.load(vb).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// JPEGs decode up to this many steps of 1/255 away from libjpeg-turbo (Pillow's decoder);
/// see tests/processor.rs.
const JPEG_STEPS: f64 = 8.0;

/// The largest difference from transformers' pixel values of the non-JPEG inputs that this
/// crate's processor may have: torch's antialiased resize adds in an order of its own when
/// it shrinks (src/processor/torch_resize.rs), and normalising divides by std ~0.22.
/// Measured (torch 2.15, transformers 5.24): 17 of the 21 non-JPEG inputs bit-exact, the
/// others within 8.4e-7.
const PIXEL_TOL: f32 = 1e-6;

#[test]
fn pixel_values_match_transformers() {
    let golden = golden();
    let all = pixels();
    let (mut worst, mut compared, mut exact) = (0f32, 0, 0);
    for name in MODELS {
        let processor = ImageProcessor::load(&dir().join(name).join("preprocessor_config.json")).unwrap();
        assert_eq!(processor.class().name(), "DINOv3ViTImageProcessor");
        for (file, image) in &golden.models[name].images {
            let got = processor.preprocess(&input(file), 1 << 26).unwrap_or_else(|e| panic!("{name} {file}: {e}"));
            assert_eq!([3, got.height, got.width], image.pixel_shape, "{name} {file}: shape");
            let Some(want) = all.get(&format!("{name}/{file}")) else { continue };
            let d = max_abs_diff(&got.data, &want.data);
            if file.ends_with(".jpg") {
                // A step of 1/255 is 1/255/0.224 after normalising, at most.
                assert!(f64::from(d) * 0.229 * 255.0 <= JPEG_STEPS + 1e-3, "{name} {file}: {d}");
                continue;
            }
            assert!(d <= PIXEL_TOL, "{name} {file}: max abs diff {d:e}");
            worst = worst.max(d);
            exact += usize::from(d == 0.0);
            compared += 1;
        }
    }
    assert!(compared >= 20, "only {compared} images compared");
    eprintln!("dinov3 pixels: {compared} non-JPEG images, {exact} bit-exact, max abs diff {worst:.2e}");
}

#[test]
fn last_hidden_state_and_tokens_match_transformers() {
    let golden = golden();
    let all = pixels();
    for name in MODELS {
        let model = backbone(name);
        let fx = &golden.models[name];
        assert_eq!(model.summary_tokens(), 1 + fx.num_register_tokens);
        let mut full = 0;
        for (file, image) in &fx.images {
            let [_, h, w] = image.pixel_shape;
            assert_eq!(model.image_tokens(h, w), Ok(image.outputs.tokens), "{name} {file}: tokens");
            let (Some(want), Some(px)) = (&image.outputs.last_hidden_state, all.get(&format!("{name}/{file}")))
            else {
                continue;
            };
            let bounds = [0, image.outputs.tokens];
            let batch = Batch { ids: &[], type_ids: &[], bounds: &bounds, images: std::slice::from_ref(px), keys: &[], pads_attended: false };
            let got = model.forward(&batch).unwrap();
            assert_eq!(want.len(), image.outputs.tokens);
            let d = assert_close(&got, &want.concat(), &format!("{name} {file} last_hidden_state"));
            eprintln!("{name} {file}: last_hidden_state [{}, 32] max abs diff {d:.2e}", want.len());
            full += 1;
        }
        assert_eq!(full, 1, "{name}: one full last_hidden_state");
    }
}

/// Every input with stored pixels through the pipeline, one at a time and as one batch.
fn check_pooled(name: &str, options: serde_json::Value, keys: &[&str]) -> f32 {
    let golden = golden();
    let all = pixels();
    let p = load(name, options);
    let (mut worst, mut batch) = (0f32, Vec::new());
    for (file, image) in &golden.models[name].images {
        let Some(px) = all.get(&format!("{name}/{file}")) else { continue };
        let want: Vec<f32> = keys
            .iter()
            .flat_map(|k| match *k {
                "pooler" => image.outputs.pooler.clone(),
                _ => image.outputs.mean.clone(),
            })
            .collect();
        let mut got = p.embed_pixels(std::slice::from_ref(px)).unwrap();
        worst = worst.max(assert_close(&got[0], &want, &format!("{name} {file} {keys:?}")));
        batch.push((px.clone(), got.remove(0)));
    }
    assert!(batch.len() >= 7, "{name}: {} images", batch.len());
    let images: Vec<Pixels> = batch.iter().map(|(px, _)| px.clone()).collect();
    for (row, (_, alone)) in p.embed_pixels(&images).unwrap().iter().zip(&batch) {
        assert!(max_abs_diff(row, alone) <= 1e-5, "{name}: batched differs from single");
    }
    eprintln!("{name} {keys:?}: {} images, max abs diff {worst:.2e}", batch.len());
    worst
}

#[test]
fn pooler_mean_and_both_match_transformers() {
    for name in MODELS {
        // The default is pooler_output, the normed [CLS].
        check_pooled(name, serde_json::json!({}), &["pooler"]);
        check_pooled(name, serde_json::json!({"pooling": "cls"}), &["pooler"]);
        check_pooled(name, serde_json::json!({"pooling": "mean"}), &["mean"]);
        check_pooled(name, serde_json::json!({"pooling": ["cls", "mean"]}), &["pooler", "mean"]);
    }
}

/// Image file -> vector for every input: non-JPEG inputs element-wise, JPEGs (another
/// decoder) by cosine, as tests/images.rs.
#[test]
fn end_to_end_from_image_files() {
    let golden = golden();
    for name in MODELS {
        for (pooling, key) in [("cls", "pooler"), ("mean", "mean")] {
            let p = load(name, serde_json::json!({ "pooling": pooling }));
            let (mut worst, mut jpeg_cos, mut files) = (0f32, 1f32, Vec::new());
            for (file, image) in &golden.models[name].images {
                let bytes = input(file);
                let mut got = p.embed_images(&[&bytes], 1 << 26, 1 << 20, 1, || Ok(())).unwrap();
                let want = if key == "pooler" { &image.outputs.pooler } else { &image.outputs.mean };
                if file.ends_with(".jpg") {
                    let cos = cosine(&got[0], want);
                    assert!(cos >= 0.9995, "{name} {file}: cosine {cos}");
                    jpeg_cos = jpeg_cos.min(cos);
                } else {
                    worst = worst.max(assert_close(&got[0], want, &format!("{name} {file} {key}")));
                }
                files.push((bytes, got.remove(0)));
            }
            let refs: Vec<&[u8]> = files.iter().map(|(b, _)| b.as_slice()).collect();
            let together = p.embed_images(&refs, 1 << 26, 64, 2, || Ok(())).unwrap();
            for (row, (_, alone)) in together.iter().zip(&files) {
                assert!(max_abs_diff(row, alone) <= 1e-5, "{name}: batched differs from single");
            }
            eprintln!(
                "{name} {key}: {} files; not JPEG: max abs diff {worst:.2e}; JPEG: min cosine {jpeg_cos:.6}",
                files.len()
            );
        }
    }
}

#[test]
fn unsupported_processor_settings_are_refused_by_name() {
    let base = serde_json::json!({"image_processor_type": "DINOv3ViTImageProcessorFast", "size": {"height": 32, "width": 32}});
    let edit = |key: &str, value: serde_json::Value| {
        let mut config = base.clone();
        config[key] = value;
        ImageProcessor::from_config(config.as_object().unwrap(), std::path::Path::new("preprocessor_config.json"))
    };
    let ok = edit("resample", serde_json::json!(2)).unwrap();
    assert_eq!(ok.describe()["mean"], serde_json::json!([0.485f32, 0.456f32, 0.406f32]));
    let err = edit("resample", serde_json::json!(3)).unwrap_err();
    assert_eq!(err.sqlstate(), SqlState::FeatureNotSupported, "{err}");
    assert!(err.to_string().contains("bicubic"), "{err}");
    let mut cropped = base.clone();
    cropped["do_center_crop"] = serde_json::json!(true);
    cropped["crop_size"] = serde_json::json!({"height": 16, "width": 16});
    let err = ImageProcessor::from_config(cropped.as_object().unwrap(), std::path::Path::new("p.json")).unwrap_err();
    assert_eq!(err.sqlstate(), SqlState::FeatureNotSupported, "{err}");
    assert!(err.to_string().contains("do_center_crop"), "{err}");
}
