//! DistilBERT (distiluse-*, msmarco-distilbert-*): BERT's layers under other names, without
//! token types. The checkpoint's weights are renamed into the shared encoder's layout.
//! (candle-transformers' DistilBERT applies the tanh approximation of GELU where
//! transformers applies the exact one, so it is not used.)

use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::checks::with_prefix;
use super::encoder::{renamed, Encoder, Positions, Spec};
use crate::error::Result;

/// `transformers.DistilBertConfig`
/// (https://huggingface.co/docs/transformers/model_doc/distilbert#transformers.DistilBertConfig);
/// defaults are transformers' defaults.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    #[serde(default = "d::vocab_size")]
    pub vocab_size: usize,
    #[serde(default = "d::max_position_embeddings")]
    pub max_position_embeddings: usize,
    #[serde(default = "d::n_layers")]
    pub n_layers: usize,
    #[serde(default = "d::n_heads")]
    pub n_heads: usize,
    #[serde(default = "d::dim")]
    pub dim: usize,
    #[serde(default = "d::hidden_dim")]
    pub hidden_dim: usize,
    #[serde(default = "d::activation")]
    pub activation: String,
}

mod d {
    pub fn vocab_size() -> usize {
        30522
    }
    pub fn max_position_embeddings() -> usize {
        512
    }
    pub fn n_layers() -> usize {
        6
    }
    pub fn n_heads() -> usize {
        12
    }
    pub fn dim() -> usize {
        768
    }
    pub fn hidden_dim() -> usize {
        3072
    }
    pub fn activation() -> String {
        "gelu".into()
    }
}

/// transformers' DistilBERT name -> the shared encoder's (BERT's) name, per layer.
const LAYER_NAMES: [(&str, &str); 8] = [
    ("attention.q_lin", "attention.self.query"),
    ("attention.k_lin", "attention.self.key"),
    ("attention.v_lin", "attention.self.value"),
    ("attention.out_lin", "attention.output.dense"),
    ("sa_layer_norm", "attention.output.LayerNorm"),
    ("ffn.lin1", "intermediate.dense"),
    ("ffn.lin2", "output.dense"),
    ("output_layer_norm", "output.LayerNorm"),
];

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Model {
    encoder: Encoder,
}

pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Model> {
    let vb = with_prefix(vb, &["", "distilbert."], "embeddings.word_embeddings.weight");
    let vb = renamed(
        &vb,
        &["word_embeddings.weight", "position_embeddings.weight", "LayerNorm.weight", "LayerNorm.bias"],
        "transformer.layer",
        cfg.n_layers,
        &LAYER_NAMES,
        &[],
    )?;
    let spec = Spec {
        vocab_size: cfg.vocab_size,
        embedding_size: cfg.dim,
        hidden_size: cfg.dim,
        num_hidden_layers: cfg.n_layers,
        num_attention_heads: cfg.n_heads,
        intermediate_size: cfg.hidden_dim,
        hidden_act: &cfg.activation,
        max_position_embeddings: cfg.max_position_embeddings,
        type_vocab_size: 0,
        // transformers' DistilBERT fixes its LayerNorm epsilon.
        layer_norm_eps: 1e-12,
        positions: Positions::Absolute,
    };
    Ok(Model { encoder: Encoder::load(vb, &spec)? })
}

impl super::Config for Config {
    fn dims(&self) -> super::Dims {
        super::Dims::text(self.dim, self.max_position_embeddings, self.vocab_size, 0)
    }
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn super::Model>> {
        Ok(Box::new(load(vb, self)?))
    }
}

impl super::Model for Model {
    /// Tokens that are queries only are hidden as keys (`Batch::keys`).
    fn hides_keys(&self) -> bool {
        true
    }

    fn forward(&self, batch: &super::Batch) -> candle_core::Result<Vec<f32>> {
        self.encoder.forward(batch)
    }
}
