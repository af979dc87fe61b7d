//! Placeholder until the image processor lands.

/// An image as the backbone takes it: [3, height, width], channel-first.
#[derive(Debug, Clone)]
pub struct Pixels {
    pub data: Vec<f32>,
    pub height: usize,
    pub width: usize,
}

/// Placeholder.
pub struct ImageProcessor;

impl ImageProcessor {
    pub fn load(path: &std::path::Path) -> crate::error::Result<Self> {
        let _ = path;
        Ok(ImageProcessor)
    }
    pub fn preprocess(&self, _bytes: &[u8], _max_pixels: u64) -> crate::error::Result<Pixels> {
        Err(crate::error::Error::EmptyImage)
    }
    pub fn describe(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
    pub fn output_size(&self) -> Option<(usize, usize)> {
        None
    }
}
