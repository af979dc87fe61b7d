//! MPNet (all-mpnet-base-v2, multi-qa-mpnet-*): BERT's layers under other names, positions
//! numbered after the padding index, and a relative position bias shared by all layers added
//! to the attention scores, as transformers' `MPNetModel` computes it. candle-transformers
//! has no MPNet; the shared BERT-family encoder carries it.

use candle_core::Tensor;
use candle_nn::VarBuilder;

use crate::layers::{Linear, RelativeBias};
use serde::{Deserialize, Serialize};

use super::checks::{bad_weights, check_buckets, with_prefix};
use super::encoder::{renamed, Encoder, Positions, Spec};
use crate::error::Result;

use super::Batch;

/// `transformers.MPNetConfig`
/// (https://huggingface.co/docs/transformers/model_doc/mpnet#transformers.MPNetConfig);
/// defaults are transformers' defaults.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    #[serde(default = "d::vocab_size")]
    pub vocab_size: usize,
    #[serde(default = "d::hidden_size")]
    pub hidden_size: usize,
    #[serde(default = "d::num_hidden_layers")]
    pub num_hidden_layers: usize,
    #[serde(default = "d::num_attention_heads")]
    pub num_attention_heads: usize,
    #[serde(default = "d::intermediate_size")]
    pub intermediate_size: usize,
    #[serde(default = "d::hidden_act")]
    pub hidden_act: String,
    #[serde(default = "d::max_position_embeddings")]
    pub max_position_embeddings: usize,
    #[serde(default = "d::layer_norm_eps")]
    pub layer_norm_eps: f64,
    #[serde(default = "d::relative_attention_num_buckets")]
    pub relative_attention_num_buckets: usize,
    #[serde(default = "d::pad_token_id")]
    pub pad_token_id: u32,
}

mod d {
    pub fn vocab_size() -> usize {
        30527
    }
    pub fn hidden_size() -> usize {
        768
    }
    pub fn num_hidden_layers() -> usize {
        12
    }
    pub fn num_attention_heads() -> usize {
        12
    }
    pub fn intermediate_size() -> usize {
        3072
    }
    pub fn hidden_act() -> String {
        "gelu".into()
    }
    pub fn max_position_embeddings() -> usize {
        514
    }
    pub fn layer_norm_eps() -> f64 {
        1e-12
    }
    pub fn relative_attention_num_buckets() -> usize {
        32
    }
    pub fn pad_token_id() -> u32 {
        1
    }
}

/// transformers' MPNet name -> the shared encoder's (BERT's) name, per layer.
const LAYER_NAMES: [(&str, &str); 8] = [
    ("attention.attn.q", "attention.self.query"),
    ("attention.attn.k", "attention.self.key"),
    ("attention.attn.v", "attention.self.value"),
    ("attention.attn.o", "attention.output.dense"),
    ("attention.LayerNorm", "attention.output.LayerNorm"),
    ("intermediate.dense", "intermediate.dense"),
    ("output.dense", "output.dense"),
    ("output.LayerNorm", "output.LayerNorm"),
];

/// MPNet's relative positions reach 128 tokens (`MPNetEncoder.relative_position_bucket`).
const MAX_DISTANCE: usize = 128;

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Model {
    encoder: Encoder,
    /// The relative position bias, added to every layer's attention scores.
    relative: RelativeBias,
    pooler: Option<(Linear, usize)>,
}

pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Model> {
    check_buckets(cfg.relative_attention_num_buckets, MAX_DISTANCE)?;
    let vb = with_prefix(vb, &["", "mpnet."], "embeddings.word_embeddings.weight");
    let pooler = super::bert::load_pooler(&vb, cfg.hidden_size)?;
    let (buckets, heads) = (cfg.relative_attention_num_buckets, cfg.num_attention_heads);
    let relative = (|| {
        let table = vb.pp("encoder.relative_attention_bias").get((buckets, heads), "weight")?;
        RelativeBias::new(table.flatten_all()?.to_vec1::<f32>()?, buckets, heads, MAX_DISTANCE)
    })()
    .map_err(bad_weights)?;
    let vb = renamed(
        &vb,
        &["word_embeddings.weight", "position_embeddings.weight", "LayerNorm.weight", "LayerNorm.bias"],
        "encoder.layer",
        cfg.num_hidden_layers,
        &LAYER_NAMES,
        &[],
    )?;
    let spec = Spec {
        vocab_size: cfg.vocab_size,
        embedding_size: cfg.hidden_size,
        hidden_size: cfg.hidden_size,
        num_hidden_layers: cfg.num_hidden_layers,
        num_attention_heads: cfg.num_attention_heads,
        intermediate_size: cfg.intermediate_size,
        hidden_act: &cfg.hidden_act,
        max_position_embeddings: cfg.max_position_embeddings,
        type_vocab_size: 0,
        layer_norm_eps: cfg.layer_norm_eps,
        positions: Positions::AfterPadding { padding_idx: cfg.pad_token_id },
    };
    Ok(Model { encoder: Encoder::load(vb, &spec)?, relative, pooler })
}

impl super::Config for Config {
    fn dims(&self) -> super::Dims {
        super::Dims::text(
            self.hidden_size,
            self.max_position_embeddings.saturating_sub(self.pad_token_id as usize + 1),
            self.vocab_size,
            self.pad_token_id,
        )
    }
    // RoBERTa-style positions: the first pad_token_id + 1 are never used by text.
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn super::Model>> {
        Ok(Box::new(load(vb, self)?))
    }
}

impl super::Model for Model {
    /// Tokens that are queries only are hidden as keys (`Batch::keys`).
    fn hides_keys(&self) -> bool {
        true
    }

    fn forward(&self, batch: &Batch) -> candle_core::Result<Vec<f32>> {
        let longest = batch.lengths()?.into_iter().max().unwrap_or(0);
        let bias = self.relative.values(longest);
        self.encoder.forward_with_bias(batch, Some((&bias, longest)))
    }

    fn pooler_size(&self) -> Option<usize> {
        self.pooler.as_ref().map(|(_, width)| *width)
    }

    /// transformers' `MPNetPooler`: tanh(dense(hidden[:, 0])).
    fn pooler(&self, hidden: &[f32], batch: &Batch) -> candle_core::Result<Option<Tensor>> {
        super::bert::tanh_pooler(self.pooler.as_ref(), hidden, batch)
    }
}

#[cfg(test)]
mod tests {
    use super::super::encoder::relative_position_bucket;

    /// Buckets as transformers' `MPNetEncoder.relative_position_bucket(torch.arange(-40, 41))`
    /// gives them for 32 buckets.
    #[test]
    fn buckets_match_transformers() {
        let got: Vec<u32> =
            (-40..=40).map(|r| relative_position_bucket(r, 32, super::MAX_DISTANCE)).collect();
        // transformers 5.23: MPNetEncoder.relative_position_bucket(torch.arange(-40, 41), num_buckets=32)
        let want: Vec<u32> = vec![
            12, 12, 12, 12, 12, 12, 12, 12, 12, 11, 11, 11, 11, 11, 11, 11, 11, 11, 10, 10, 10, 10, 10, 10,
            10, 9, 9, 9, 9, 8, 8, 8, 8, 7, 6, 5, 4, 3, 2, 1, 0, 17, 18, 19, 20, 21, 22, 23, 24, 24, 24, 24,
            25, 25, 25, 25, 26, 26, 26, 26, 26, 26, 26, 27, 27, 27, 27, 27, 27, 27, 27, 27, 28, 28, 28, 28,
            28, 28, 28, 28, 28,
        ];
        assert_eq!(got.len(), want.len());
        assert_eq!(got, want);
    }
}
