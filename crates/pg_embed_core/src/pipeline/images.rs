//! Images through a pipeline: the image processor's input stage, batched by tokens, then
//! the backbone and the same pooling, heads and normalize as text (`embed_images`), or the
//! classification head (`classify_images`).

use super::batch::in_batches;
use super::Pipeline;
use crate::error::{Error, Result};
use crate::models::{Batch, Pixels};
use crate::pooling::PoolingMode;

impl Pipeline {
    /// Images (the bytes of PNG, JPEG, WebP, GIF, BMP or TIFF files) through the image
    /// processor and `run`, in batches of at most `max_batch_tokens` tokens (an image's
    /// patches and [CLS] count as its tokens) on `threads` threads, `before_batch` on the
    /// calling thread before each; images larger than `max_pixels` are refused from their
    /// header. One result per image, in input order.
    fn images_batched<T: Send>(
        &self,
        images: &[&[u8]],
        max_pixels: u64,
        max_batch_tokens: usize,
        threads: usize,
        before_batch: &mut dyn FnMut() -> Result<()>,
        run: impl Fn(&[Pixels]) -> Result<Vec<T>> + Sync,
    ) -> Result<Vec<T>> {
        use rayon::prelude::*;
        let processor = self.image_processor()?;
        let tokens = |height: usize, width: usize| self.image_tokens(height, width);
        // With a fixed output size every image has the same tokens: decode batch by batch.
        // Otherwise each image's size decides its tokens: decode all first.
        let decoded: Option<Vec<Pixels>> = match processor.output_size() {
            Some(_) => None,
            None => Some(
                images.iter().map(|bytes| processor.preprocess(bytes, max_pixels)).collect::<Result<_>>()?,
            ),
        };
        let lengths: Vec<usize> = match (&decoded, processor.output_size()) {
            (Some(all), _) => all.iter().map(|p| tokens(p.height, p.width)).collect::<Result<_>>()?,
            (None, Some((height, width))) => vec![tokens(height, width)?; images.len()],
            (None, None) => Vec::new(),
        };
        self.stats.count_call(images.len(), lengths.iter().sum());
        in_batches(&lengths, max_batch_tokens, threads, before_batch, |batch| match &decoded {
            Some(all) => run(&batch.iter().map(|&i| all[i].clone()).collect::<Vec<_>>()),
            None => {
                let pixels = batch
                    .par_iter()
                    .map(|&i| processor.preprocess(images[i], max_pixels))
                    .collect::<Result<Vec<_>>>()?;
                run(&pixels)
            }
        })
    }

    /// The tokens the backbone makes of a preprocessed image of `height` x `width` pixels.
    pub fn image_tokens(&self, height: usize, width: usize) -> Result<usize> {
        self.weights
            .backbone
            .image_tokens(height, width)
            .map_err(|reason| Error::InvalidArgument { what: "image", reason })
    }

    /// One forward pass of the backbone over preprocessed images, packed end to end (each
    /// its [CLS] and patches), pooled with `modes`: one row per image.
    fn pool_images(&self, pixels: &[Pixels], modes: &[PoolingMode]) -> Result<Vec<Vec<f32>>> {
        let mut bounds = Vec::with_capacity(pixels.len() + 1);
        bounds.push(0);
        for p in pixels {
            bounds.push(bounds[bounds.len() - 1] + self.image_tokens(p.height, p.width)?);
        }
        let batch = Batch { ids: &[], type_ids: &[], bounds: &bounds, images: pixels, keys: &[], pads_attended: false };
        self.pool_batch(&batch, &vec![0; pixels.len()], modes, &[], self.weights.backbone.as_ref())
    }

    /// Embeds images (encoded image files): one vector per image, in input order, through
    /// the same pooling, heads and normalize as text (see `images_batched` for the batching).
    pub fn embed_images(
        &self,
        images: &[&[u8]],
        max_pixels: u64,
        max_batch_tokens: usize,
        threads: usize,
        mut before_batch: impl FnMut() -> Result<()>,
    ) -> Result<Vec<Vec<f32>>> {
        self.outputs.dense("embed")?;
        self.images_batched(images, max_pixels, max_batch_tokens, threads, &mut before_batch, |pixels| {
            self.embed_pixels(pixels)
        })
    }

    /// Embeds preprocessed images (`pixel_values` as the image processor gives them).
    pub fn embed_pixels(&self, pixels: &[Pixels]) -> Result<Vec<Vec<f32>>> {
        if pixels.is_empty() {
            return Ok(Vec::new());
        }
        let dense = self.outputs.dense("embed")?;
        let pooled = self.pool_images(pixels, &dense.pooling)?;
        self.finish(dense, pooled, self.route_of(None)?)
    }

    /// Raw logits [num_labels] per image of an image-classification model, in input order
    /// (batched as `embed_images`).
    pub fn classify_images(
        &self,
        images: &[&[u8]],
        max_pixels: u64,
        max_batch_tokens: usize,
        threads: usize,
        mut before_batch: impl FnMut() -> Result<()>,
    ) -> Result<Vec<Vec<f32>>> {
        self.classifier()?;
        self.images_batched(images, max_pixels, max_batch_tokens, threads, &mut before_batch, |pixels| {
            self.classify_pixels(pixels)
        })
    }

    /// Logits of preprocessed images.
    pub fn classify_pixels(&self, pixels: &[Pixels]) -> Result<Vec<Vec<f32>>> {
        let classifier = self.classifier()?;
        if pixels.is_empty() {
            return Ok(Vec::new());
        }
        let pooled = self.pool_images(pixels, &[classifier.pooling()])?;
        Ok(classifier.logits(&pooled))
    }

    /// The image processor's `pixel_values` of one image file.
    pub fn preprocess_image(&self, image: &[u8], max_pixels: u64) -> Result<Pixels> {
        self.image_processor()?.preprocess(image, max_pixels)
    }
}
