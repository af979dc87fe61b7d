//! Image preprocessing: image bytes to a model's `pixel_values`, as transformers' PIL-based
//! image processors (`use_fast=False`) compute them for ViTImageProcessor,
//! CLIPImageProcessor, BitImageProcessor (DINOv2's), SiglipImageProcessor and SigLIP 2's
//! NaFlex Siglip2ImageProcessor (each image resized to the most patches within
//! `max_num_patches` at its own aspect ratio; the model cuts it into patches).
//!
//! The steps, each as transformers and Pillow do them:
//! 1. decode ([`decode`]): PNG, JPEG, WebP, GIF, BMP, TIFF, refused over a pixel limit
//!    before anything is allocated;
//! 2. convert to 8-bit RGB (`convert_to_rgb`: alpha composited onto white with Pillow's
//!    integer arithmetic);
//! 3. resize (`do_resize`) to `size` with the PIL filter `resample` names ([`resize`]);
//! 4. center crop (`do_center_crop`) to `crop_size`, zero-padded when the image is smaller;
//! 5. rescale (`do_rescale`: float64 multiply, then float32) and normalize
//!    (`do_normalize`: float32 `(x - mean) / std`), channel-first.
//!
//! A `*ImageProcessorFast` (torchvision) configuration is read too, and processed as its PIL
//! counterpart: the PIL backend is the reference this module reproduces.
//!
//! DINOv3ViTImageProcessor has no PIL backend: it is torchvision's, and its steps after
//! decoding are those of transformers' DINOv3 `_preprocess`: rescale (float32 multiply),
//! resize on float32 with torch's antialiased bilinear filter ([`torch_resize`]), normalize.

pub mod decode;
pub mod resize;
pub mod torch_resize;

use std::path::Path;

use serde_json::{json, Map, Value};

use crate::error::{Error, Result};
pub use resize::Filter;

/// An 8-bit RGB image, row-major, three bytes a pixel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rgb8 {
    pub width: usize,
    pub height: usize,
    pub data: Vec<u8>,
}

/// A preprocessed image: float32 `[3, height, width]`, channel-first, as the model's
/// `pixel_values` for one image.
#[derive(Debug, Clone, PartialEq)]
pub struct Pixels {
    pub data: Vec<f32>,
    pub height: usize,
    pub width: usize,
}

/// The image processor classes read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessorClass {
    Vit,
    Clip,
    Bit,
    Siglip,
    Siglip2,
    /// DINOv3ViTImageProcessor (torchvision only).
    Dinov3,
}

impl ProcessorClass {
    /// transformers' class name.
    pub fn name(self) -> &'static str {
        match self {
            ProcessorClass::Vit => "ViTImageProcessor",
            ProcessorClass::Clip => "CLIPImageProcessor",
            ProcessorClass::Bit => "BitImageProcessor",
            ProcessorClass::Siglip => "SiglipImageProcessor",
            ProcessorClass::Siglip2 => "Siglip2ImageProcessor",
            ProcessorClass::Dinov3 => "DINOv3ViTImageProcessor",
        }
    }

    /// The class of an `image_processor_type`, with or without the `Fast`/`Pil` suffix.
    fn from_type(name: &str) -> Option<ProcessorClass> {
        let base = name.strip_suffix("Fast").or_else(|| name.strip_suffix("Pil")).unwrap_or(name);
        [
            ProcessorClass::Vit,
            ProcessorClass::Clip,
            ProcessorClass::Bit,
            ProcessorClass::Siglip,
            ProcessorClass::Siglip2,
            ProcessorClass::Dinov3,
        ]
            .into_iter()
            .find(|c| c.name() == base)
    }

    /// The class attributes of transformers' `*ImageProcessorPil` (DINOv3's: of its only,
    /// torchvision, class), the defaults of every setting the configuration leaves out or
    /// sets to null.
    fn defaults(self) -> Defaults {
        const OPENAI_CLIP_MEAN: [f64; 3] = [0.48145466, 0.4578275, 0.40821073];
        const OPENAI_CLIP_STD: [f64; 3] = [0.26862954, 0.26130258, 0.27577711];
        match self {
            ProcessorClass::Dinov3 => Defaults {
                do_resize: true,
                size: Some(json!({"height": 224, "width": 224})),
                default_to_square: true,
                resample: Filter::Bilinear,
                do_center_crop: false,
                crop_size: None,
                do_convert_rgb: false,
                mean: [0.485, 0.456, 0.406],
                std: [0.229, 0.224, 0.225],
            },
            ProcessorClass::Vit => Defaults {
                do_resize: true,
                size: Some(json!({"height": 224, "width": 224})),
                default_to_square: true,
                resample: Filter::Bilinear,
                do_center_crop: false,
                crop_size: None,
                do_convert_rgb: false,
                mean: [0.5; 3],
                std: [0.5; 3],
            },
            // A fixed size, bicubic, no crop, IMAGENET_STANDARD mean and std (0.5).
            ProcessorClass::Siglip => Defaults {
                do_resize: true,
                size: Some(json!({"height": 224, "width": 224})),
                default_to_square: false,
                resample: Filter::Bicubic,
                do_center_crop: false,
                crop_size: None,
                do_convert_rgb: true,
                mean: [0.5; 3],
                std: [0.5; 3],
            },
            // NaFlex: the size comes from patch_size and max_num_patches; bilinear.
            ProcessorClass::Siglip2 => Defaults {
                do_resize: true,
                size: None,
                default_to_square: false,
                resample: Filter::Bilinear,
                do_center_crop: false,
                crop_size: None,
                do_convert_rgb: true,
                mean: [0.5; 3],
                std: [0.5; 3],
            },
            ProcessorClass::Clip | ProcessorClass::Bit => Defaults {
                do_resize: true,
                size: Some(json!({"shortest_edge": 224})),
                default_to_square: false,
                resample: Filter::Bicubic,
                do_center_crop: true,
                crop_size: Some(json!({"height": 224, "width": 224})),
                do_convert_rgb: true,
                mean: OPENAI_CLIP_MEAN,
                std: OPENAI_CLIP_STD,
            },
        }
    }
}

struct Defaults {
    do_resize: bool,
    size: Option<Value>,
    default_to_square: bool,
    resample: Filter,
    do_center_crop: bool,
    crop_size: Option<Value>,
    do_convert_rgb: bool,
    mean: [f64; 3],
    std: [f64; 3],
}

/// The target of the resize step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    /// Exactly this size.
    Exact { height: usize, width: usize },
    /// The short side becomes this long, the long side keeps the aspect ratio (truncated).
    ShortestEdge(usize),
    /// SigLIP 2's NaFlex: sides that are multiples of `patch`, at most `max` patches, the
    /// aspect ratio kept as nearly as the patches allow.
    Patches { patch: usize, max: usize },
}

impl Size {
    /// `(height, width)` for an image of `height` x `width`: transformers'
    /// `get_resize_output_image_size(..., default_to_square=False)` for a shortest edge.
    pub fn output(self, height: usize, width: usize) -> (usize, usize) {
        match self {
            Size::Exact { height, width } => (height, width),
            Size::ShortestEdge(edge) => {
                let (short, long) = if width <= height { (width, height) } else { (height, width) };
                // int(edge * long / short): Python's true division in double precision.
                let new_long = (edge as f64 * long as f64 / short as f64) as usize;
                if width <= height {
                    (new_long, edge)
                } else {
                    (edge, new_long)
                }
            }
            Size::Patches { patch, max } => max_patches_size(height, width, patch, max),
        }
    }

    fn describe(self) -> Value {
        match self {
            Size::Exact { height, width } => json!({"height": height, "width": width}),
            Size::ShortestEdge(edge) => json!({"shortest_edge": edge}),
            Size::Patches { patch, max } => json!({"patch_size": patch, "max_num_patches": max}),
        }
    }
}

/// A parsed preprocessor_config.json.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageProcessor {
    class: ProcessorClass,
    /// The resize step, if `do_resize`.
    resize: Option<(Size, Filter)>,
    /// The center crop `(height, width)`, if `do_center_crop`.
    crop: Option<(usize, usize)>,
    /// The rescale factor, if `do_rescale`.
    rescale: Option<f64>,
    /// Mean and std, as float32 (numpy casts them to the image's dtype), if `do_normalize`.
    normalize: Option<([f32; 3], [f32; 3])>,
    /// `do_convert_rgb` as configured. Non-RGB images are converted whatever it says:
    /// transformers fails on them (or, for palette images, reads the palette indices as
    /// grey values) when it is unset, so there is nothing to be faithful to.
    convert_rgb: bool,
}

/// Sizes beyond this are no image model's; refused so that no size overflows.
const MAX_SIDE: usize = 1 << 16;

impl ImageProcessor {
    /// Reads the preprocessor_config.json at `path`, or a processor_config.json that nests
    /// it under `image_processor` (as sentence-transformers saves CLIP).
    pub fn load(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let config: Value = serde_json::from_slice(&bytes).map_err(|e| Error::invalid_file(path, e))?;
        let Value::Object(mut config) = config else {
            return Err(Error::invalid_file(path, "not a JSON object"));
        };
        if !config.contains_key("image_processor_type") && !config.contains_key("feature_extractor_type") {
            if let Some(Value::Object(nested)) = config.remove("image_processor") {
                config = nested;
            }
        }
        Self::from_config(&config, path)
    }

    /// The processor of a parsed configuration; `path` names it in errors.
    pub fn from_config(config: &Map<String, Value>, path: &Path) -> Result<Self> {
        let unsupported = |what: &'static str, value: String, supported: &'static str| Error::Unsupported {
            what,
            value,
            path: path.to_path_buf(),
            supported,
        };
        let invalid = |message: String| Error::invalid_file(path, message);
        // transformers' AutoImageProcessor reads a legacy feature_extractor_type as the
        // processor of the same name.
        let type_name = match (config.get("image_processor_type"), config.get("feature_extractor_type")) {
            (Some(Value::String(name)), _) => name.clone(),
            (None | Some(Value::Null), Some(Value::String(name))) => {
                name.replace("FeatureExtractor", "ImageProcessor")
            }
            (None | Some(Value::Null), None | Some(Value::Null)) => {
                return Err(invalid("no image_processor_type".into()));
            }
            (Some(other), _) | (_, Some(other)) => {
                return Err(invalid(format!("image_processor_type {other} is not a string")))
            }
        };
        const SUPPORTED: &str = "ViTImageProcessor, CLIPImageProcessor, BitImageProcessor, SiglipImageProcessor, \
Siglip2ImageProcessor, DINOv3ViTImageProcessor";
        let class = ProcessorClass::from_type(&type_name)
            .ok_or_else(|| unsupported("image processor", type_name.clone(), SUPPORTED))?;
        let defaults = class.defaults();

        // A null or absent setting takes the class default, as transformers' _set_attributes.
        let get = |key: &str| config.get(key).filter(|v| !v.is_null());
        let flag = |key: &str, default: bool| -> Result<bool> {
            match get(key) {
                None => Ok(default),
                Some(Value::Bool(b)) => Ok(*b),
                Some(other) => Err(invalid(format!("{key} must be true or false, not {other}"))),
            }
        };
        let number = |key: &str| -> Result<Option<f64>> {
            match get(key) {
                None => Ok(None),
                Some(v) => {
                    v.as_f64().map(Some).ok_or_else(|| invalid(format!("{key} must be a number, not {v}")))
                }
            }
        };

        if flag("do_pad", false)? {
            return Err(unsupported("image processor setting", "do_pad: true".into(), "do_pad false"));
        }
        if let Some(format) = get("data_format") {
            if format.as_str() != Some("channels_first") {
                return Err(unsupported(
                    "image processor setting",
                    format!("data_format: {format}"),
                    "channels_first",
                ));
            }
        }

        let default_to_square = flag("default_to_square", defaults.default_to_square)?;
        // The resize's filter, read only where the processor resizes.
        let resample = || -> Result<Filter> {
            match get("resample") {
                None => Ok(defaults.resample),
                Some(v) => v.as_i64().and_then(Filter::from_pil).ok_or_else(|| {
                    unsupported(
                        "resample",
                        v.to_string(),
                        "0 (nearest), 1 (lanczos), 2 (bilinear), 3 (bicubic), 4 (box), 5 (hamming), 6 (mks2013), 7 (mks2021)",
                    )
                }),
            }
        };
        let resize = if class == ProcessorClass::Siglip2 {
            let count = |key: &str, default: usize| -> Result<usize> {
                match get(key) {
                    None => Ok(default),
                    Some(v) => match v.as_u64() {
                        Some(n) if n >= 1 && n as usize <= MAX_SIDE => Ok(n as usize),
                        _ => Err(invalid(format!("{key} has {v}, not a count of 1 to {MAX_SIDE}"))),
                    },
                }
            };
            let size = Size::Patches { patch: count("patch_size", 16)?, max: count("max_num_patches", 256)? };
            let filter = resample()?;
            // The patches must fill the image: without the resize transformers cuts an image
            // whose sides are not multiples of the patch (or fails), which is not reproduced.
            if !flag("do_resize", true)? {
                return Err(unsupported(
                    "image processor setting",
                    "do_resize: false".into(),
                    "do_resize true for Siglip2ImageProcessor",
                ));
            }
            Some((size, filter))
        } else if flag("do_resize", defaults.do_resize)? {
            let size = get("size")
                .or(defaults.size.as_ref())
                .ok_or_else(|| invalid("do_resize without a size".into()))?;
            let size = parse_size(size, default_to_square, "size").map_err(|m| match m {
                SizeError::Invalid(m) => invalid(m),
                SizeError::Unsupported(v) => unsupported(
                    "image size",
                    v,
                    "{\"height\", \"width\"}, {\"shortest_edge\"}, an integer or [height, width]",
                ),
            })?;
            let filter = resample()?;
            Some((size, filter))
        } else {
            None
        };

        let crop = if flag("do_center_crop", defaults.do_center_crop)? {
            let size = get("crop_size")
                .or(defaults.crop_size.as_ref())
                .ok_or_else(|| invalid("do_center_crop without a crop_size".into()))?;
            // transformers reads an integer crop_size as a square (get_size_dict's default);
            // its center_crop needs a height and a width.
            match parse_size(size, true, "crop_size") {
                Ok(Size::Exact { height, width }) => Some((height, width)),
                Err(SizeError::Invalid(m)) => return Err(invalid(m)),
                Ok(Size::ShortestEdge(_) | Size::Patches { .. }) => {
                    return Err(unsupported(
                        "crop size",
                        size.to_string(),
                        "{\"height\", \"width\"}, an integer or [height, width]",
                    ))
                }
                Err(SizeError::Unsupported(v)) => {
                    return Err(unsupported(
                        "crop size",
                        v,
                        "{\"height\", \"width\"}, an integer or [height, width]",
                    ))
                }
            }
        } else {
            None
        };

        let rescale = if flag("do_rescale", true)? {
            let factor = number("rescale_factor")?.unwrap_or(1.0 / 255.0);
            if !factor.is_finite() {
                return Err(invalid(format!("rescale_factor {factor} is not finite")));
            }
            Some(factor)
        } else {
            None
        };

        let normalize = if flag("do_normalize", true)? {
            let channels = |key: &str, default: [f64; 3]| -> Result<[f32; 3]> {
                let values = match get(key) {
                    None => default,
                    Some(Value::Array(items)) if items.len() == 3 => {
                        let mut out = [0.0; 3];
                        for (o, item) in out.iter_mut().zip(items) {
                            *o = item
                                .as_f64()
                                .ok_or_else(|| invalid(format!("{key} holds {item}, not a number")))?;
                        }
                        out
                    }
                    Some(Value::Array(items)) => {
                        return Err(invalid(format!(
                            "{key} has {} values, not one per RGB channel",
                            items.len()
                        )))
                    }
                    Some(v) => {
                        [v.as_f64()
                            .ok_or_else(|| invalid(format!("{key} must be a number or a list, not {v}")))?;
                            3]
                    }
                };
                let values = values.map(|v| v as f32);
                if values.iter().any(|v| !v.is_finite()) {
                    return Err(invalid(format!("{key} {values:?} is not finite in float32")));
                }
                Ok(values)
            };
            let mean = channels("image_mean", defaults.mean)?;
            let std = channels("image_std", defaults.std)?;
            if std.contains(&0.0) {
                return Err(invalid(format!("image_std {std:?} has a zero")));
            }
            Some((mean, std))
        } else {
            None
        };

        let convert_rgb = flag("do_convert_rgb", defaults.do_convert_rgb)?;
        if class == ProcessorClass::Dinov3 {
            // torch's antialiased float resize is reproduced for bilinear only; torchvision's
            // center crop rounds its offsets unlike the PIL backend's.
            if let Some((_, filter)) = resize.filter(|(_, f)| *f != Filter::Bilinear) {
                return Err(unsupported(
                    "resample",
                    format!("{} ({}) for {type_name}", get("resample").map_or(String::new(), |v| v.to_string()), filter.name()),
                    "2 (bilinear)",
                ));
            }
            if crop.is_some() {
                return Err(unsupported(
                    "image processor setting",
                    format!("do_center_crop: true for {type_name}"),
                    "do_center_crop false",
                ));
            }
        }
        Ok(ImageProcessor { class, resize, crop, rescale, normalize, convert_rgb })
    }

    /// The processor class.
    pub fn class(&self) -> ProcessorClass {
        self.class
    }

    /// The image `bytes` decoded and preprocessed into the model's pixel values. Images of
    /// more than `max_pixels` pixels (width times height, from the header; 0: no limit) are
    /// refused before they are decoded, and so is a resize without a crop to more than
    /// `max_pixels` (a very thin image resized to a shortest edge).
    pub fn preprocess(&self, bytes: &[u8], max_pixels: u64) -> Result<Pixels> {
        let image = decode::decode_rgb(bytes, max_pixels)?;
        let (height, width) = self.plan(image.height, image.width).output;
        if max_pixels > 0 && (height as u64).saturating_mul(width as u64) > max_pixels {
            return Err(Error::InvalidArgument {
                what: "image",
                reason: format!(
                    "its {}x{} pixels resize to {width}x{height}, more than pg_embed.max_image_pixels ({max_pixels})",
                    image.width, image.height
                ),
            });
        }
        Ok(self.preprocess_rgb(&image))
    }

    /// The sizes of each step for an image of `height` x `width`.
    fn plan(&self, height: usize, width: usize) -> Plan {
        let resized = match self.resize {
            Some((size, _)) => size.output(height, width),
            None => (height, width),
        };
        let output = self.crop.unwrap_or(resized);
        // transformers' center_crop: top = (h - crop_h) // 2, left likewise; an image smaller
        // than the crop is first centred on zeros, ceil((crop - size) / 2) before it.
        let offset = |size: usize, crop: usize| -> isize {
            if crop <= size {
                ((size - crop) / 2) as isize
            } else {
                -((crop - size).div_ceil(2) as isize)
            }
        };
        Plan { resized, output, offset: (offset(resized.0, output.0), offset(resized.1, output.1)) }
    }

    /// `(height, width)` of the resize step for an image of `height` x `width` (its own size
    /// when the processor does not resize), before any crop.
    pub fn resize_to(&self, height: usize, width: usize) -> (usize, usize) {
        self.plan(height, width).resized
    }

    /// The steps after decoding, on an RGB image of at least one pixel.
    pub fn preprocess_rgb(&self, image: &Rgb8) -> Pixels {
        if self.class == ProcessorClass::Dinov3 {
            return self.preprocess_float(image);
        }
        let plan = self.plan(image.height, image.width);
        let (height, width) = plan.output;
        let (top, left) = plan.offset;
        // The resized pixels the crop keeps: resizing only those gives the same values.
        let visible = |offset: isize, out: usize, resized: usize| {
            let first = offset.max(0) as usize;
            let last = (offset + out as isize).clamp(0, resized as isize) as usize;
            first..last.max(first)
        };
        let rows = visible(top, height, plan.resized.0);
        let cols = visible(left, width, plan.resized.1);
        let window = resize::Window { x: cols.start, y: rows.start, width: cols.len(), height: rows.len() };
        let kept = match self.resize {
            Some((_, filter)) => resize::resize_window(image, plan.resized.1, plan.resized.0, filter, window),
            None => resize::resize_window(image, image.width, image.height, Filter::Nearest, window),
        };
        // `kept` pixel (ky, kx) is output pixel (ky + rows.start - top, kx + cols.start - left).
        let (dy, dx) = ((rows.start as isize - top) as usize, (cols.start as isize - left) as usize);
        let plane = height * width;
        let value = |v: u8| -> f32 {
            match self.rescale {
                // numpy: image.astype(float64) * scale, then astype(float32).
                Some(factor) => (f64::from(v) * factor) as f32,
                None => f32::from(v),
            }
        };
        let finish = |v: u8, c: usize| -> f32 {
            match &self.normalize {
                Some((mean, std)) => (value(v) - mean[c]) / std[c],
                None => value(v),
            }
        };
        let mut data = vec![0f32; 3 * plane];
        for c in 0..3 {
            let padding = finish(0, c);
            let channel = &mut data[c * plane..(c + 1) * plane];
            channel.fill(padding);
            for ky in 0..kept.height {
                let out_row = &mut channel[(ky + dy) * width + dx..(ky + dy) * width + dx + kept.width];
                let in_row = &kept.data[ky * kept.width * 3..(ky + 1) * kept.width * 3];
                for (out, pixel) in out_row.iter_mut().zip(in_row.chunks_exact(3)) {
                    *out = finish(pixel[c], c);
                }
            }
        }
        Pixels { data, height, width }
    }

    /// The torchvision steps of DINOv3's processor: rescale (`uint8 * factor`, a float32
    /// product), resize the float32 planes, normalize (`(x - mean) / std` in float32).
    fn preprocess_float(&self, image: &Rgb8) -> Pixels {
        let (h, w) = (image.height, image.width);
        let factor = self.rescale.map(|f| f as f32);
        let mut planes = vec![0f32; 3 * h * w];
        for (i, pixel) in image.data.chunks_exact(3).enumerate() {
            for c in 0..3 {
                let v = f32::from(pixel[c]);
                planes[c * h * w + i] = factor.map_or(v, |f| v * f);
            }
        }
        let (height, width) = self.plan(h, w).resized;
        let mut data = torch_resize::resize_bilinear_antialiased(&planes, 3, (h, w), (height, width));
        if let Some((mean, std)) = &self.normalize {
            for (c, plane) in data.chunks_exact_mut(height * width).enumerate() {
                plane.iter_mut().for_each(|v| *v = (*v - mean[c]) / std[c]);
            }
        }
        Pixels { data, height, width }
    }

    /// The settings, for model_info: class, size, crop, resample, mean, std, rescale,
    /// convert_rgb (null where a step is off).
    pub fn describe(&self) -> Value {
        json!({
            "class": self.class.name(),
            "size": self.resize.map(|(size, _)| size.describe()),
            "resample": self.resize.map(|(_, filter)| filter.name()),
            "crop": self.crop.map(|(height, width)| json!({"height": height, "width": width})),
            "rescale": self.rescale,
            "mean": self.normalize.map(|(mean, _)| mean),
            "std": self.normalize.map(|(_, std)| std),
            "convert_rgb": self.convert_rgb,
        })
    }

    /// The `(height, width)` every image comes out at, when the steps fix one: the crop, or
    /// an exact resize without a crop.
    pub fn output_size(&self) -> Option<(usize, usize)> {
        self.crop.or(match self.resize {
            Some((Size::Exact { height, width }, _)) => Some((height, width)),
            _ => None,
        })
    }
}

/// transformers' `get_image_size_for_max_num_patches`: a binary search (in float64, as
/// Python computes it) for the largest scale whose sides, each rounded up to a multiple of
/// `patch` (and at least one patch), give at most `max` patches.
fn max_patches_size(height: usize, width: usize, patch: usize, max: usize) -> (usize, usize) {
    let scaled = |scale: f64, size: usize| -> usize {
        let p = patch as f64;
        (((size as f64 * scale) / p).ceil() * p).max(p) as usize
    };
    const EPS: f64 = 1e-5;
    let (mut low, mut high) = (EPS / 10.0, 100.0);
    while high - low >= EPS {
        let scale = (low + high) / 2.0;
        let patches = (scaled(scale, height) / patch) as f64 * (scaled(scale, width) / patch) as f64;
        if patches <= max as f64 {
            low = scale;
        } else {
            high = scale;
        }
    }
    (scaled(low, height), scaled(low, width))
}

/// The sizes of the steps for one image: `(height, width)` after the resize and at the
/// end, and the crop's `(top, left)` in the resized image (negative: zero padding).
struct Plan {
    resized: (usize, usize),
    output: (usize, usize),
    offset: (isize, isize),
}

enum SizeError {
    Invalid(String),
    Unsupported(String),
}

/// transformers' `get_size_dict`: an integer is a square when `default_to_square`, else a
/// shortest edge; a list is `[height, width]`; a dict has `height` and `width` or
/// `shortest_edge` (other key sets, such as `longest_edge` or `max_height`, are not
/// supported).
fn parse_size(value: &Value, default_to_square: bool, key: &str) -> std::result::Result<Size, SizeError> {
    let side = |v: &Value| -> std::result::Result<usize, SizeError> {
        match v.as_u64() {
            Some(n) if n >= 1 && n as usize <= MAX_SIDE => Ok(n as usize),
            _ => Err(SizeError::Invalid(format!("{key} has {v}, not a side of 1 to {MAX_SIDE} pixels"))),
        }
    };
    match value {
        Value::Number(_) => {
            let n = side(value)?;
            Ok(if default_to_square { Size::Exact { height: n, width: n } } else { Size::ShortestEdge(n) })
        }
        Value::Array(items) if items.len() == 2 => {
            Ok(Size::Exact { height: side(&items[0])?, width: side(&items[1])? })
        }
        Value::Array(items) if items.len() == 1 => parse_size(&items[0], default_to_square, key),
        Value::Object(map) => {
            let mut keys: Vec<&str> =
                map.iter().filter(|(_, v)| !v.is_null()).map(|(k, _)| k.as_str()).collect();
            keys.sort_unstable();
            match keys.as_slice() {
                ["height", "width"] => {
                    Ok(Size::Exact { height: side(&map["height"])?, width: side(&map["width"])? })
                }
                ["shortest_edge"] => Ok(Size::ShortestEdge(side(&map["shortest_edge"])?)),
                _ => Err(SizeError::Unsupported(value.to_string())),
            }
        }
        other => Err(SizeError::Invalid(format!("{key} is {other}, not a size"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn processor(config: Value) -> Result<ImageProcessor> {
        ImageProcessor::from_config(config.as_object().unwrap(), Path::new("preprocessor_config.json"))
    }

    #[test]
    fn class_defaults_fill_what_the_config_leaves_out() {
        let clip = processor(json!({"image_processor_type": "CLIPImageProcessor"})).unwrap();
        assert_eq!(clip.resize, Some((Size::ShortestEdge(224), Filter::Bicubic)));
        assert_eq!(clip.crop, Some((224, 224)));
        assert_eq!(clip.output_size(), Some((224, 224)));
        assert!(clip.convert_rgb);
        let vit = processor(
            json!({"feature_extractor_type": "ViTFeatureExtractor", "size": 384, "do_center_crop": null}),
        )
        .unwrap();
        assert_eq!(vit.class(), ProcessorClass::Vit);
        assert_eq!(vit.resize, Some((Size::Exact { height: 384, width: 384 }, Filter::Bilinear)));
        assert_eq!(vit.crop, None);
        assert_eq!(vit.output_size(), Some((384, 384)));
        assert_eq!(vit.normalize, Some(([0.5; 3], [0.5; 3])));
        // An integer size is a shortest edge for CLIP (default_to_square = False), the crop a square.
        let legacy = processor(
            json!({"feature_extractor_type": "CLIPFeatureExtractor", "size": 224, "crop_size": 224}),
        )
        .unwrap();
        assert_eq!(legacy.resize, Some((Size::ShortestEdge(224), Filter::Bicubic)));
        assert_eq!(legacy.crop, Some((224, 224)));
        let bare = processor(json!({"image_processor_type": "BitImageProcessorFast", "do_resize": false, "do_center_crop": false})).unwrap();
        assert_eq!(bare.output_size(), None);
        assert_eq!(bare.describe()["size"], Value::Null);
    }

    #[test]
    fn unknown_classes_and_settings_are_refused_by_name() {
        let message = |config: Value| processor(config).unwrap_err().to_string();
        assert!(
            message(json!({"image_processor_type": "DetrImageProcessor"})).contains("DetrImageProcessor")
        );
        assert!(message(json!({})).contains("image_processor_type"));
        assert!(
            message(json!({"image_processor_type": "ViTImageProcessor", "resample": 8})).contains("resample")
        );
        assert!(message(json!({"image_processor_type": "Siglip2ImageProcessor", "do_resize": false}))
            .contains("do_resize"));
        assert!(message(json!({"image_processor_type": "ViTImageProcessor", "size": {"longest_edge": 5}}))
            .contains("longest_edge"));
        assert!(message(json!({"image_processor_type": "ViTImageProcessor", "size": 0})).contains("size"));
        assert!(message(json!({"image_processor_type": "ViTImageProcessor", "image_mean": [1, 2]}))
            .contains("image_mean"));
        assert!(message(json!({"image_processor_type": "ViTImageProcessor", "image_std": 0}))
            .contains("image_std"));
        assert!(
            message(json!({"image_processor_type": "ViTImageProcessor", "do_pad": true})).contains("do_pad")
        );
        assert!(message(json!({"image_processor_type": "ViTImageProcessor", "do_resize": "yes"}))
            .contains("do_resize"));
        assert!(message(json!({"image_processor_type": "ViTImageProcessor", "do_center_crop": true}))
            .contains("crop_size"));
        let edge_crop =
            json!({"image_processor_type": "CLIPImageProcessor", "crop_size": {"shortest_edge": 5}});
        assert!(message(edge_crop).contains("shortest_edge"));
    }

    #[test]
    fn shortest_edge_sizes_as_transformers() {
        let s = Size::ShortestEdge(224);
        assert_eq!(s.output(480, 640), (224, 298)); // int(224 * 640 / 480) = 298
        assert_eq!(s.output(640, 480), (298, 224));
        assert_eq!(s.output(7, 1000), (224, 32000));
        assert_eq!(s.output(1, 1), (224, 224));
        assert_eq!(s.output(300, 300), (224, 224));
    }

    #[test]
    fn center_crop_pads_small_images_with_zeros() {
        let p = processor(json!({
            "image_processor_type": "CLIPImageProcessor", "do_resize": false, "crop_size": {"height": 4, "width": 3},
            "do_rescale": false, "do_normalize": false
        }))
        .unwrap();
        // A 1x2 image (two pixels side by side) in a 4x3 crop: ceil(3/2) = 2 rows above,
        // ceil(1/2) = 1 column to the left.
        let image = Rgb8 { width: 2, height: 1, data: vec![10, 20, 30, 40, 50, 60] };
        let out = p.preprocess_rgb(&image);
        assert_eq!((out.height, out.width), (4, 3));
        let red: Vec<f32> = out.data[..12].to_vec();
        assert_eq!(red, vec![0., 0., 0., 0., 0., 0., 0., 10., 40., 0., 0., 0.]);
    }
}
