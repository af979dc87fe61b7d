//! Image preprocessing against transformers' PIL image processors, on the image fixtures of
//! scripts/gen_image_fixtures.py (tests/fixtures/images; PG_EMBED_IMAGE_FIXTURES points
//! elsewhere), and the decoder's refusals: bad bytes, decompression bombs, odd pixel types.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use serde_json::{json, Value};

use pg_embed_core::error::{Error, SqlState};
use pg_embed_core::processor::{ImageProcessor, Pixels};

/// Pillow's default `Image.MAX_IMAGE_PIXELS`, pg_embed.max_image_pixels' default.
const MAX_PIXELS: u64 = 89_478_485;

// ---------------------------------------------------------------------------------------
// The largest single allocation made by this thread while tracking is on.

struct Tracking;

thread_local! {
    static TRACKING: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    let _ = TRACKING.try_with(|on| {
        if on.get() {
            LARGEST.with(|largest| largest.set(largest.get().max(size)));
        }
    });
}

unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Tracking = Tracking;

/// `f`'s result and the largest single allocation it made.
fn largest_allocation<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.with(|l| l.set(0));
    TRACKING.with(|t| t.set(true));
    let out = f();
    TRACKING.with(|t| t.set(false));
    (out, LARGEST.with(Cell::get))
}

// ---------------------------------------------------------------------------------------
// Fixtures

fn fixtures() -> PathBuf {
    match std::env::var_os("PG_EMBED_IMAGE_FIXTURES") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("tests/fixtures/images"),
    }
}

struct Golden {
    dir: PathBuf,
    images: BTreeMap<String, Value>,
    models: BTreeMap<String, Value>,
    pixels: HashMap<String, Tensor>,
}

fn golden() -> Golden {
    let dir = fixtures();
    let path = dir.join("golden.json");
    let json: Value = serde_json::from_slice(
        &std::fs::read(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (scripts/gen_image_fixtures.py writes it)", path.display())),
    )
    .expect("golden.json parses");
    let map = |key: &str| -> BTreeMap<String, Value> {
        json[key].as_object().unwrap_or_else(|| panic!("golden.json has {key}")).clone().into_iter().collect()
    };
    let pixels =
        candle_core::safetensors::load(dir.join("pixels.safetensors"), &Device::Cpu).expect("pixels");
    Golden { images: map("images"), models: map("models"), pixels, dir }
}

impl Golden {
    fn input(&self, file: &str) -> Vec<u8> {
        std::fs::read(self.dir.join("inputs").join(file)).unwrap()
    }

    /// The model directory's image processor: preprocessor_config.json, or the one nested
    /// in a sentence-transformers processor_config.json.
    fn processor(&self, model: &str) -> Option<ImageProcessor> {
        let dir = self.dir.join(model);
        let path = ["preprocessor_config.json", "processor_config.json"]
            .into_iter()
            .map(|name| dir.join(name))
            .find(|p| p.exists())?;
        Some(ImageProcessor::load(&path).unwrap_or_else(|e| panic!("{model}: {e}")))
    }
}

/// How far `pixels` is from the golden tensor: the largest absolute difference of the
/// values, and of the 8-bit pixels they were computed from (the difference scaled back by
/// the processor's std and rescale factor).
fn difference(pixels: &Pixels, want: &Tensor, processor: &ImageProcessor, what: &str) -> (f32, f64) {
    assert_eq!(want.dims(), &[3, pixels.height, pixels.width], "{what}: shape");
    let want: Vec<f32> = want.flatten_all().unwrap().to_vec1().unwrap();
    let settings = processor.describe();
    let rescale = settings["rescale"].as_f64().unwrap_or(1.0);
    let std: Vec<f64> = match settings["std"].as_array() {
        Some(std) => std.iter().map(|s| s.as_f64().unwrap()).collect(),
        None => vec![1.0; 3],
    };
    let plane = pixels.height * pixels.width;
    let mut max = (0f32, 0f64);
    for (i, (a, b)) in pixels.data.iter().zip(&want).enumerate() {
        let d = (a - b).abs();
        max.0 = max.0.max(d);
        max.1 = max.1.max(f64::from(d) * std[i / plane] / rescale);
    }
    max
}

/// JPEG inputs are decoded by zune-jpeg (through the image crate), Pillow's by libjpeg-turbo:
/// both are correct decoders but round the inverse DCT, the 4:2:0 chroma upsampling and the
/// YCbCr conversion differently. Decoded pixels differ by up to 8 steps of 255 on the
/// 4:2:0 images tried (99.9% by 2 or less; greyscale by 1); resizing averages that down.
/// Every other format decodes identically and must match exactly.
const JPEG_STEPS: f64 = 8.0;

fn is_jpeg(file: &str) -> bool {
    file.ends_with(".jpg") || file.ends_with(".jpeg")
}

#[test]
fn pixel_values_match_transformers() {
    let golden = golden();
    let mut report =
        vec![format!("{:<14} {:<22} {:>7}  max |diff|  in 8-bit steps", "processor", "image", "shape")];
    let mut failures = Vec::new();
    let mut compared = 0;
    let mut processors: BTreeMap<String, (String, ImageProcessor)> = BTreeMap::new();
    for (model, spec) in &golden.models {
        let Some(key) = spec["pixels_key"].as_str() else { continue };
        let processor = golden.processor(model).unwrap_or_else(|| panic!("{model}: no image processor"));
        // Models sharing pixel values share the processor, whichever file it came from.
        if let Some((first, seen)) = processors.get(key) {
            assert_eq!(&processor, seen, "{model} and {first} share {key}'s pixels but not their processor");
            continue;
        }
        processors.insert(key.to_string(), (model.clone(), processor.clone()));
        for (file, image) in &spec["images"].as_object().expect("images").clone() {
            let bytes = golden.input(file);
            let result = processor.preprocess(&bytes, MAX_PIXELS);
            let mode = golden.images[file]["mode"].as_str().unwrap_or("?");
            if let Some(error) = image.get("error") {
                let converts = processor.describe()["convert_rgb"].as_bool() == Some(true);
                match result {
                    Err(e) => {
                        report.push(format!("{key:<14} {file:<22} refused as by transformers ({error}): {e}"))
                    }
                    // Deliberate: without do_convert_rgb transformers fails on (or, for palette
                    // images, misreads) anything but RGB; this converts every image.
                    Ok(_) if !converts && mode != "RGB" => report
                        .push(format!("{key:<14} {file:<22} converted from {mode} (transformers: {error})")),
                    Ok(_) => {
                        failures.push(format!("{key}/{file}: transformers fails ({error}), this decodes"))
                    }
                }
                continue;
            }
            let got = match result {
                Ok(pixels) => pixels,
                // Deliberate: Pillow clips 16-bit greyscale to white instead of scaling it.
                Err(e @ Error::ImageDecode { .. }) if mode == "I;16" => {
                    report.push(format!("{key:<14} {file:<22} refused: {e}"));
                    continue;
                }
                Err(e) => panic!("{key}/{file}: {e}"),
            };
            let resize_to = image["resize_to"].as_array().expect("resize_to");
            let input = &golden.images[file];
            let (height, width) =
                (input["height"].as_u64().unwrap() as usize, input["width"].as_u64().unwrap() as usize);
            assert_eq!(
                json!(processor.resize_to(height, width)),
                json!([resize_to[0], resize_to[1]]),
                "{key}/{file}: resize target"
            );
            let Some(want) = golden.pixels.get(&format!("{key}/{file}")) else { continue };
            let (values, steps) = difference(&got, want, &processor, &format!("{key}/{file}"));
            compared += 1;
            report.push(format!(
                "{key:<14} {file:<22} {:>7}  {values:<10.3e}  {steps:.3}",
                format!("{}x{}", got.height, got.width)
            ));
            let allowed = if is_jpeg(file) { steps <= JPEG_STEPS } else { values <= 1e-6 };
            if !allowed {
                failures.push(format!("{key}/{file}: {values:e} ({steps:.3} steps)"));
            }
        }
    }
    println!("{}", report.join("\n"));
    assert!(compared >= 20, "only {compared} images compared");
    assert!(failures.is_empty(), "differ from transformers: {failures:#?}");
}

// ---------------------------------------------------------------------------------------
// Refusals and odd inputs

fn clip() -> ImageProcessor {
    let config = json!({"image_processor_type": "CLIPImageProcessor", "size": {"shortest_edge": 32},
                        "crop_size": {"height": 32, "width": 32}});
    ImageProcessor::from_config(config.as_object().unwrap(), Path::new("preprocessor_config.json")).unwrap()
}

fn encode(image: image::DynamicImage, format: image::ImageFormat) -> Vec<u8> {
    try_encode(image, format).unwrap()
}

/// `image` in `format`, if the image crate writes that pixel type in it.
fn try_encode(image: image::DynamicImage, format: image::ImageFormat) -> image::ImageResult<Vec<u8>> {
    let mut out = std::io::Cursor::new(Vec::new());
    image.write_to(&mut out, format)?;
    Ok(out.into_inner())
}

fn rgb(width: u32, height: u32) -> image::DynamicImage {
    image::DynamicImage::ImageRgb8(image::RgbImage::from_fn(width, height, |x, y| {
        image::Rgb([(x * 7 % 256) as u8, (y * 13 % 256) as u8, ((x + y) % 256) as u8])
    }))
}

/// A PNG of a signature and IHDR claiming `width` x `height` 8-bit RGB, one IDAT of a few
/// bytes and IEND: a decompression bomb's header.
fn png_header(width: u32, height: u32) -> Vec<u8> {
    fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        out.extend_from_slice(kind);
        out.extend_from_slice(data);
        let mut crc = 0xffff_ffffu32;
        for &b in kind.iter().chain(data) {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 { (crc >> 1) ^ 0xedb8_8320 } else { crc >> 1 };
            }
        }
        out.extend_from_slice(&(!crc).to_be_bytes());
    }
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(&mut out, b"IDAT", &[0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01]);
    chunk(&mut out, b"IEND", &[]);
    out
}

#[test]
fn a_decompression_bomb_is_refused_before_anything_is_allocated() {
    let processor = clip();
    let bomb = png_header(100_000, 100_000);
    let (result, largest) = largest_allocation(|| processor.preprocess(&bomb, MAX_PIXELS));
    match result {
        Err(e @ Error::ImageTooLarge { width: 100_000, height: 100_000, limit: MAX_PIXELS }) => {
            assert_eq!(e.sqlstate(), SqlState::ProgramLimitExceeded);
            let message = e.to_string();
            assert!(
                message.contains("100000x100000") && message.contains("pg_embed.max_image_pixels"),
                "{message}"
            );
        }
        other => panic!("expected ImageTooLarge, got {other:?}"),
    }
    assert!(largest < 1 << 20, "the refusal allocated {largest} bytes at once");
    // Just over and just at a limit of 2000 pixels.
    assert!(matches!(
        processor.preprocess(&encode(rgb(2001, 1), image::ImageFormat::Png), 2000),
        Err(Error::ImageTooLarge { .. })
    ));
    assert!(processor.preprocess(&encode(rgb(2000, 1), image::ImageFormat::Png), 2000).is_ok());
    // Without a pixel limit the decoder's own allocation limit still refuses the bomb.
    let (result, largest) = largest_allocation(|| processor.preprocess(&bomb, 0));
    assert!(matches!(result, Err(Error::ImageDecode { .. })), "{result:?}");
    assert!(largest < 1 << 20, "the refusal allocated {largest} bytes at once");
}

#[test]
fn a_thin_image_resized_without_a_crop_is_bounded_too() {
    // 1x2000 to a shortest edge of 224 without a crop: 224x448000 pixels out.
    let config = json!({"image_processor_type": "CLIPImageProcessor", "do_center_crop": false});
    let processor =
        ImageProcessor::from_config(config.as_object().unwrap(), Path::new("preprocessor_config.json"))
            .unwrap();
    let thin = encode(rgb(1, 2000), image::ImageFormat::Png);
    let err = processor.preprocess(&thin, 1_000_000).unwrap_err();
    assert!(err.to_string().contains("224x448000"), "{err}");
    // With the crop only the cropped window is resized: cheap whatever the aspect ratio.
    let (pixels, largest) = largest_allocation(|| {
        clip().preprocess(&encode(rgb(1, 20_000), image::ImageFormat::Png), MAX_PIXELS)
    });
    assert_eq!((pixels.unwrap().height, largest < 4 << 20), (32, true));
}

#[test]
fn bad_bytes_are_decode_errors() {
    let processor = clip();
    let png = encode(rgb(40, 30), image::ImageFormat::Png);
    let jpeg = encode(rgb(40, 30), image::ImageFormat::Jpeg);
    let expect_decode = |bytes: &[u8], what: &str| match processor.preprocess(bytes, MAX_PIXELS) {
        Err(e @ Error::ImageDecode { .. }) => {
            assert_eq!(e.sqlstate(), SqlState::InvalidBinaryRepresentation);
            assert!(e.to_string().starts_with("could not decode image: "), "{e}");
        }
        other => panic!("{what}: expected ImageDecode, got {other:?}"),
    };
    expect_decode(b"this is not an image", "text");
    expect_decode(&png[..png.len() / 2], "half a PNG");
    expect_decode(&png[..40], "a PNG cut in its header");
    expect_decode(&jpeg[..jpeg.len() / 2], "half a JPEG");
    expect_decode(&jpeg[..20], "a JPEG cut in its header");
    expect_decode(b"GIF89a", "a bare GIF signature");
    // Formats the image crate knows but pg_embed does not read.
    expect_decode(b"qoif\0\0\0\x01\0\0\0\x01\x03\0", "QOI");
    let empty = processor.preprocess(&[], MAX_PIXELS).unwrap_err();
    assert!(matches!(empty, Error::EmptyImage) && empty.sqlstate() == SqlState::InvalidBinaryRepresentation);
    // Every prefix of a small PNG and JPEG is an error or an image, never a panic.
    for bytes in [&png, &jpeg] {
        for end in 0..bytes.len() {
            let _ = processor.preprocess(&bytes[..end], MAX_PIXELS);
        }
    }
}

#[test]
fn zero_sized_images_are_empty() {
    let processor = clip();
    // A GIF whose logical screen and only frame are 0x0.
    let gif = b"GIF89a\0\0\0\0\0\0\0,\0\0\0\0\0\0\0\0\0\x02\x02D\x01\0;";
    let err = processor.preprocess(gif, MAX_PIXELS).unwrap_err();
    assert!(
        matches!(err, Error::EmptyImage) && err.sqlstate() == SqlState::InvalidBinaryRepresentation,
        "{err:?}"
    );
    // PNG forbids a zero width: its decoder refuses the header ("Invalid image dimensions").
    let err = processor.preprocess(&png_header(0, 5), MAX_PIXELS).unwrap_err();
    assert!(
        matches!(err, Error::ImageDecode { .. }) && err.sqlstate() == SqlState::InvalidBinaryRepresentation,
        "{err:?}"
    );
}

#[test]
fn one_pixel_wide_tall_and_exact_images() {
    let processor = clip();
    for (w, h) in [(1, 1), (1, 500), (500, 1), (32, 32), (3, 1000)] {
        let pixels = processor.preprocess(&encode(rgb(w, h), image::ImageFormat::Png), MAX_PIXELS).unwrap();
        assert_eq!((pixels.height, pixels.width, pixels.data.len()), (32, 32, 3 * 32 * 32), "{w}x{h}");
        assert!(pixels.data.iter().all(|v| v.is_finite()));
    }
}

#[test]
fn sixteen_bit_and_cmyk_inputs() {
    let processor = clip();
    // 16-bit RGB and RGBA keep their high bytes, as Pillow reads them.
    let wide = image::DynamicImage::ImageRgb16(image::ImageBuffer::from_fn(8, 8, |x, y| {
        image::Rgb([(x * 8000 + 255) as u16, (y * 8000) as u16, 0xffff])
    }));
    let narrow = image::DynamicImage::ImageRgb8(image::ImageBuffer::from_fn(8, 8, |x, y| {
        image::Rgb([((x * 8000 + 255) >> 8) as u8, ((y * 8000) >> 8) as u8, 0xff])
    }));
    let a = processor.preprocess(&encode(wide, image::ImageFormat::Png), MAX_PIXELS).unwrap();
    let b = processor.preprocess(&encode(narrow, image::ImageFormat::Png), MAX_PIXELS).unwrap();
    assert_eq!(a, b);
    // 16-bit greyscale is refused with a reason (Pillow would clip it to white).
    let grey16 = image::DynamicImage::ImageLuma16(image::ImageBuffer::from_fn(4, 4, |x, _| {
        image::Luma([x as u16 * 300])
    }));
    let err = processor.preprocess(&encode(grey16, image::ImageFormat::Png), MAX_PIXELS).unwrap_err();
    assert!(
        matches!(err, Error::ImageDecode { .. }) && err.to_string().contains("16-bit greyscale"),
        "{err}"
    );
    // A 32-bit float TIFF is refused, not converted.
    let float = image::DynamicImage::ImageRgb32F(image::ImageBuffer::from_fn(4, 4, |_, _| {
        image::Rgb([0.5, 0.25, 1.0])
    }));
    let err = processor.preprocess(&encode(float, image::ImageFormat::Tiff), MAX_PIXELS).unwrap_err();
    assert!(matches!(err, Error::ImageDecode { .. }), "{err}");
}

/// A CMYK JPEG (Adobe, inverted, as Pillow and Photoshop write them) decodes to RGB close
/// to Pillow's `convert("RGB")`: the stored file is Pillow's; its RGB is recorded below.
#[test]
fn a_cmyk_jpeg_decodes() {
    // Pillow 13: Image.new("CMYK", (16, 8), (0, 128, 255, 64)).save(f, "JPEG", quality=95);
    // Image.open(f).convert("RGB").getpixel((0, 0)) == (191, 95, 0).
    let cmyk = include_bytes!("processor_cmyk.jpg");
    let config = json!({"image_processor_type": "CLIPImageProcessor", "do_resize": false, "do_center_crop": false,
                        "do_rescale": false, "do_normalize": false});
    let raw = ImageProcessor::from_config(config.as_object().unwrap(), Path::new("preprocessor_config.json"))
        .unwrap();
    let pixels = raw.preprocess(cmyk, MAX_PIXELS).unwrap();
    assert_eq!((pixels.height, pixels.width), (8, 16));
    let plane = 8 * 16;
    let first = [pixels.data[0], pixels.data[plane], pixels.data[2 * plane]];
    for (got, want) in first.iter().zip([191.0, 95.0, 0.0]) {
        assert!((got - want).abs() <= 1.0, "{first:?}");
    }
}

#[test]
fn transparency_composites_onto_white() {
    let config = json!({"image_processor_type": "CLIPImageProcessor", "do_resize": false, "do_center_crop": false,
                        "do_rescale": false, "do_normalize": false});
    let raw = ImageProcessor::from_config(config.as_object().unwrap(), Path::new("preprocessor_config.json"))
        .unwrap();
    let rgba = image::DynamicImage::ImageRgba8(image::ImageBuffer::from_fn(3, 1, |x, _| {
        image::Rgba([[10, 20, 30, 255], [0, 0, 0, 0], [0, 0, 0, 128]][x as usize])
    }));
    let la = image::DynamicImage::ImageLumaA8(image::ImageBuffer::from_fn(3, 1, |x, _| {
        image::LumaA([[40, 255], [0, 0], [0, 127]][x as usize])
    }));
    // Pillow: alpha_composite(white, ...) gives (10, 20, 30), white, and 127 / 128 grey.
    for (image, want) in
        [(rgba, [[10., 20., 30.], [255.; 3], [127.; 3]]), (la, [[40.; 3], [255.; 3], [128.; 3]])]
    {
        let mut formats = 0;
        for format in [image::ImageFormat::Png, image::ImageFormat::WebP, image::ImageFormat::Tiff] {
            let Ok(bytes) = try_encode(image.clone(), format) else { continue };
            let p = raw.preprocess(&bytes, MAX_PIXELS).unwrap();
            let got: Vec<[f32; 3]> = (0..3).map(|x| [p.data[x], p.data[3 + x], p.data[6 + x]]).collect();
            assert_eq!(got, want, "{format:?}");
            formats += 1;
        }
        assert!(formats >= 1, "no format writes {:?}", image.color());
    }
}

// ---------------------------------------------------------------------------------------
// Properties: no configuration or byte string makes the processor panic.

use proptest::prelude::*;

/// Plausible and implausible values for each setting.
fn setting() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-3i64..300).prop_map(Value::from),
        (-1.0f64..2.0).prop_map(Value::from),
        Just(json!("channels_first")),
        Just(json!("x")),
        prop::collection::vec(-2i64..70, 0..4).prop_map(Value::from),
        (0u64..70, 0u64..70).prop_map(|(h, w)| json!({"height": h, "width": w})),
        (0u64..70).prop_map(|e| json!({"shortest_edge": e})),
        Just(json!({"shortest_edge": 10, "longest_edge": 20})),
        Just(json!({"height": null, "width": 9, "shortest_edge": null})),
    ]
}

const KEYS: [&str; 14] = [
    "do_resize",
    "size",
    "resample",
    "do_center_crop",
    "crop_size",
    "do_rescale",
    "rescale_factor",
    "do_normalize",
    "image_mean",
    "image_std",
    "do_convert_rgb",
    "default_to_square",
    "do_pad",
    "data_format",
];

proptest! {
    // A fixed seed: the same cases on every run.
    #![proptest_config(ProptestConfig {
        cases: 400,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x1a6e_5eed_0400),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn any_configuration_loads_or_is_refused(
        class in prop::sample::select(vec!["ViTImageProcessor", "CLIPImageProcessor", "BitImageProcessorFast", "Other"]),
        settings in prop::collection::vec((prop::sample::select(KEYS.to_vec()), setting()), 0..8),
        (w, h) in (1u32..40, 1u32..40),
    ) {
        let mut config = serde_json::Map::new();
        config.insert("image_processor_type".into(), json!(class));
        for (key, value) in settings {
            config.insert(key.into(), value);
        }
        if let Ok(processor) = ImageProcessor::from_config(&config, Path::new("preprocessor_config.json")) {
            let bytes = encode(rgb(w, h), image::ImageFormat::Png);
            if let Ok(pixels) = processor.preprocess(&bytes, 1 << 20) {
                prop_assert_eq!(pixels.data.len(), 3 * pixels.height * pixels.width);
                if let Some((height, width)) = processor.output_size() {
                    prop_assert_eq!((pixels.height, pixels.width), (height, width));
                }
            }
        }
    }

    #[test]
    fn damaged_images_decode_or_are_refused(
        format in prop::sample::select(vec![
            image::ImageFormat::Png, image::ImageFormat::Jpeg, image::ImageFormat::Gif,
            image::ImageFormat::Bmp, image::ImageFormat::Tiff, image::ImageFormat::WebP,
        ]),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        let mut bytes = encode(rgb(23, 17), format);
        for (at, byte) in edits {
            let i = at.index(bytes.len());
            bytes[i] = byte;
        }
        let _ = clip().preprocess(&bytes, 1 << 20);
    }
}

/// An animated GIF gives its first frame, as `PIL.Image.open` does.
#[test]
fn an_animated_gif_gives_its_first_frame() {
    let frame = |shade: u8| {
        image::RgbaImage::from_fn(12, 9, |x, y| image::Rgba([shade, (x * 20) as u8, (y * 25) as u8, 255]))
    };
    let mut animated = Vec::new();
    {
        let mut encoder = image::codecs::gif::GifEncoder::new(&mut animated);
        for shade in [10, 200, 90] {
            encoder.encode_frame(image::Frame::new(frame(shade))).unwrap();
        }
    }
    let mut still = Vec::new();
    image::codecs::gif::GifEncoder::new(&mut still).encode_frame(image::Frame::new(frame(10))).unwrap();
    let processor = clip();
    assert_eq!(
        processor.preprocess(&animated, MAX_PIXELS).unwrap(),
        processor.preprocess(&still, MAX_PIXELS).unwrap()
    );
}
