//! Static embedding models: a table of one vector per token and nothing else
//! (sentence-transformers' `StaticEmbedding`, model2vec's `StaticModel`). The "forward
//! pass" is the lookup of each token's row; the pipeline's mean pooling then gives what
//! torch's `EmbeddingBag(mode="mean")` and model2vec's mean give.
//!
//! There is no config.json to read: the table's shape is the config, read from the
//! safetensors header. sentence-transformers stores the table as `embedding.weight`,
//! model2vec as `embeddings`.

use std::path::Path;

use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::Batch;
use crate::error::{Error, Result};
use crate::layers::Embedding;
use crate::pooling::PoolingMode;

/// Where the table is in model.safetensors: sentence-transformers' name, then model2vec's.
const TABLE_NAMES: [&str; 2] = ["embedding.weight", "embeddings"];

/// model2vec layouts pg_embed does not reproduce: per-token weights and vocabulary
/// quantization (a token -> row mapping).
const UNSUPPORTED_TENSORS: [&str; 2] = ["weights", "mapping"];

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Config {
    /// The table's rows.
    pub vocab_size: usize,
    /// The table's width: the embedding dimension.
    pub hidden_size: usize,
    /// The tensor the table was read from.
    pub tensor: String,
}

impl Config {
    /// The table's name and shape from the header of `dir`/model.safetensors.
    pub fn read(dir: &Path) -> Result<Self> {
        let path = dir.join("model.safetensors");
        let header = crate::safetensors_io::safetensors_shapes(&path)?;
        if let Some(name) = UNSUPPORTED_TENSORS.iter().find(|n| header.contains_key(**n)) {
            return Err(Error::Unsupported {
                what: "static model tensor",
                value: name.to_string(),
                path,
                supported: "a plain embedding table (model2vec models with per-token weights or a vocabulary mapping are not reproduced)",
            });
        }
        let Some((tensor, shape)) = TABLE_NAMES.iter().find_map(|n| header.get(*n).map(|s| (n.to_string(), s))) else {
            return Err(Error::invalid_file(&path, "no embedding table (\"embedding.weight\" or \"embeddings\")"));
        };
        match shape.as_slice() {
            [rows, width] if *rows > 0 && *width > 0 => {
                Ok(Config { vocab_size: *rows as usize, hidden_size: *width as usize, tensor })
            }
            other => Err(Error::invalid_file(&path, format!("the embedding table {tensor} has shape {other:?}, not [tokens, dimensions]"))),
        }
    }
}

/// The embedding table.
#[derive(Serialize, Deserialize)]
pub struct Model {
    table: Embedding,
}

impl super::Config for Config {
    /// No position embeddings: any number of tokens. No padding is ever needed (and the
    /// table may have no pad row).
    fn dims(&self) -> super::Dims {
        super::Dims::text(self.hidden_size, usize::MAX, self.vocab_size, 0)
    }
    fn default_pooling(&self) -> PoolingMode {
        PoolingMode::Mean
    }
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn super::Model>> {
        let table = vb
            .get((self.vocab_size, self.hidden_size), &self.tensor)
            .and_then(|t| Embedding::from_tensor(&t))
            .map_err(|e| Error::invalid_file("model.safetensors", e))?;
        Ok(Box::new(Model { table }))
    }
}

impl super::Model for Model {
    /// Each token's row of the table.
    fn forward(&self, batch: &Batch) -> candle_core::Result<Vec<f32>> {
        self.table.gather(batch.ids)
    }

    /// The pipeline pools the rows in place: a long input's [tokens, width] copy (3.3 GB
    /// for 16 MB of text at 256 dimensions) is never made.
    fn token_table(&self) -> Option<&Embedding> {
        Some(&self.table)
    }
}
