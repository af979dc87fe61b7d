//! Image bytes to 8-bit RGB, as Pillow decodes them and transformers' `convert_to_rgb`
//! turns them into RGB.
//!
//! The dimensions are read from the header first and checked against the pixel limit, so an
//! image claiming billions of pixels (a decompression bomb) is refused before anything is
//! allocated for it; the decoder's [`image::Limits`] are a second guard. EXIF orientation is
//! not applied (transformers does not apply it either). Animated GIF, WebP and PNG give their
//! first frame, as `PIL.Image.open` does.
//!
//! Bit depths, as Pillow has them:
//! - 16-bit RGB, RGBA and grey+alpha keep their high byte (Pillow opens them as 8-bit RGB,
//!   RGBA and LA by the most significant byte).
//! - 16-bit greyscale is refused: Pillow opens it as mode `I;16`, and `convert("RGB")` clips
//!   every value above 255 to white instead of scaling, so transformers' result is a washed
//!   out image no one wants reproduced.
//! - Floating-point images (some TIFFs) are refused.
//! - CMYK JPEGs are decoded to RGB by the JPEG decoder (see the processor tests for how
//!   close that comes to Pillow's `convert("RGB")`).

use std::io::Cursor;

use image::{DynamicImage, ImageFormat, ImageReader, Limits};

use super::Rgb8;
use crate::error::{Error, Result};

/// The formats read, as named in messages.
pub const FORMATS: &str = "PNG, JPEG, WebP, GIF, BMP, TIFF";

/// `bytes` decoded and converted to RGB. `max_pixels` bounds width times height (0: no
/// bound but the decoder's own allocation limit).
pub fn decode_rgb(bytes: &[u8], max_pixels: u64) -> Result<Rgb8> {
    if bytes.is_empty() {
        return Err(Error::EmptyImage);
    }
    let format = image::guess_format(bytes).map_err(|_| Error::ImageDecode {
        reason: format!("not an image of a supported format ({FORMATS})"),
    })?;
    if !matches!(
        format,
        ImageFormat::Png
            | ImageFormat::Jpeg
            | ImageFormat::WebP
            | ImageFormat::Gif
            | ImageFormat::Bmp
            | ImageFormat::Tiff
    ) {
        return Err(Error::ImageDecode {
            reason: format!("{} images are not supported (supported: {FORMATS})", format_name(format)),
        });
    }
    let reader = |limits: Limits| {
        let mut reader = ImageReader::with_format(Cursor::new(bytes), format);
        reader.limits(limits);
        reader
    };
    // The header alone; the decoders read no pixel data for their dimensions.
    let (width, height) = reader(Limits::no_limits()).into_dimensions().map_err(decode_error)?;
    let (width, height) = (u64::from(width), u64::from(height));
    if width == 0 || height == 0 {
        return Err(Error::EmptyImage);
    }
    if max_pixels > 0 && width * height > max_pixels {
        return Err(Error::ImageTooLarge { width, height, limit: max_pixels });
    }
    // The second guard: no larger than the header said, and no more memory than its pixels
    // need in the largest pixel type (16-bit RGBA) plus the decoders' working buffers. With
    // no pixel limit, the image crate's default allocation limit (512 MiB) stays.
    let mut limits = Limits::default();
    limits.max_image_width = Some(width as u32);
    limits.max_image_height = Some(height as u32);
    if max_pixels > 0 {
        limits.max_alloc = Some(width * height * 8 + (64 << 20));
    }
    let image = reader(limits).decode().map_err(decode_error)?;
    to_rgb(image)
}

fn decode_error(err: image::ImageError) -> Error {
    Error::ImageDecode { reason: err.to_string() }
}

fn format_name(format: ImageFormat) -> String {
    format.extensions_str().first().map_or_else(|| format!("{format:?}"), |e| e.to_uppercase())
}

/// The decoded image as 8-bit RGB, as transformers' `convert_to_rgb` makes it: an image
/// with an alpha channel (or a transparent palette entry or colour key, which the decoders
/// expand to one) is composited onto opaque white; anything else is converted directly.
fn to_rgb(image: DynamicImage) -> Result<Rgb8> {
    let (width, height) = (image.width() as usize, image.height() as usize);
    let data = match image {
        DynamicImage::ImageRgb8(img) => img.into_raw(),
        DynamicImage::ImageLuma8(img) => img.into_raw().iter().flat_map(|&l| [l, l, l]).collect(),
        DynamicImage::ImageRgba8(img) => {
            img.into_raw().chunks_exact(4).flat_map(|p| over_white(p[0], p[1], p[2], p[3])).collect()
        }
        DynamicImage::ImageLumaA8(img) => {
            img.into_raw().chunks_exact(2).flat_map(|p| over_white(p[0], p[0], p[0], p[1])).collect()
        }
        DynamicImage::ImageRgb16(img) => img.into_raw().iter().map(|&v| high_byte(v)).collect(),
        DynamicImage::ImageRgba16(img) => img
            .into_raw()
            .chunks_exact(4)
            .flat_map(|p| over_white(high_byte(p[0]), high_byte(p[1]), high_byte(p[2]), high_byte(p[3])))
            .collect(),
        DynamicImage::ImageLumaA16(img) => img
            .into_raw()
            .chunks_exact(2)
            .flat_map(|p| {
                let l = high_byte(p[0]);
                over_white(l, l, l, high_byte(p[1]))
            })
            .collect(),
        DynamicImage::ImageLuma16(_) => {
            return Err(Error::ImageDecode {
                reason: "16-bit greyscale images are not supported (Pillow clips them to 8 bits); convert it to 8 bits"
                    .into(),
            })
        }
        other => {
            return Err(Error::ImageDecode {
                reason: format!("{:?} pixels are not supported", other.color()),
            })
        }
    };
    Ok(Rgb8 { width, height, data })
}

/// The most significant byte of a 16-bit sample, as Pillow's 16-bit unpackers keep it.
fn high_byte(v: u16) -> u8 {
    (v >> 8) as u8
}

/// One RGBA pixel composited onto opaque white with Pillow's `ImagingAlphaComposite`
/// integer arithmetic (`Image.alpha_composite(white, image)`), alpha dropped.
fn over_white(r: u8, g: u8, b: u8, a: u8) -> [u8; 3] {
    const PRECISION_BITS: u32 = 7;
    if a == 0 {
        return [255; 3];
    }
    let shift_div_255 = |v: u32| ((v >> 8) + v) >> 8;
    let (src_a, dst_a, dst_c) = (u32::from(a), 255u32, 255u32);
    let blend = dst_a * (255 - src_a);
    let outa255 = src_a * 255 + blend;
    let coef1 = src_a * 255 * 255 * (1 << PRECISION_BITS) / outa255;
    let coef2 = 255 * (1 << PRECISION_BITS) - coef1;
    let mix = |c: u8| {
        let tmp = u32::from(c) * coef1 + dst_c * coef2;
        (shift_div_255(tmp + (0x80 << PRECISION_BITS)) >> PRECISION_BITS) as u8
    };
    [mix(r), mix(g), mix(b)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opaque_pixels_are_unchanged_and_transparent_ones_white() {
        for c in 0..=255u8 {
            assert_eq!(over_white(c, 255 - c, c / 2, 255), [c, 255 - c, c / 2]);
            assert_eq!(over_white(c, 255 - c, c / 2, 0), [255; 3]);
        }
    }

    #[test]
    fn half_transparent_black_is_mid_grey() {
        // Pillow: Image.alpha_composite(white, (0, 0, 0, 128)) is (127, 127, 127).
        assert_eq!(over_white(0, 0, 0, 128), [127; 3]);
        assert_eq!(over_white(0, 0, 0, 127), [128; 3]);
    }

    #[test]
    fn empty_and_garbage_bytes_are_errors() {
        assert!(matches!(decode_rgb(&[], 0), Err(Error::EmptyImage)));
        assert!(matches!(decode_rgb(b"hello, world", 0), Err(Error::ImageDecode { .. })));
    }
}
