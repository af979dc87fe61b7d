//! BERT encoder (MiniLM, bge, e5, all-MiniLM-*): the shared BERT-family encoder with
//! absolute positions and token types, and BERT's pooler.

use candle_core::Tensor;
use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::checks::{bad_weights, unsupported, with_prefix};
use super::encoder::{Encoder, Positions, Spec};
use super::{first_tokens, Batch};
use crate::error::Result;

/// `transformers.BertConfig`
/// (https://huggingface.co/docs/transformers/model_doc/bert#transformers.BertConfig);
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
    #[serde(default = "d::type_vocab_size")]
    pub type_vocab_size: usize,
    #[serde(default = "d::layer_norm_eps")]
    pub layer_norm_eps: f64,
    #[serde(default)]
    pub pad_token_id: usize,
    #[serde(default = "d::position_embedding_type")]
    pub position_embedding_type: String,
}

mod d {
    pub fn vocab_size() -> usize {
        30522
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
        512
    }
    pub fn type_vocab_size() -> usize {
        2
    }
    pub fn layer_norm_eps() -> f64 {
        1e-12
    }
    pub fn position_embedding_type() -> String {
        "absolute".into()
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Model {
    encoder: Encoder,
    /// `BertPooler` (dense + tanh over [CLS]) and its width, when the checkpoint carries one.
    pooler: Option<(crate::layers::Linear, usize)>,
}

impl Config {
    /// The shared encoder's settings for a config of the BERT family (RoBERTa and ELECTRA
    /// configs carry the same fields).
    pub fn spec(&self, embedding_size: usize, positions: Positions) -> Result<Spec<'_>> {
        if self.position_embedding_type == "alibi" {
            // Jina BERT v2 (jina-embeddings-v2-base-en/de/zh/code): ALiBi and a gated MLP,
            // computed only by jinaai's Hub code; no released package on PyPI computes it.
            return Err(unsupported(
                "position_embedding_type",
                &self.position_embedding_type,
                "absolute (ALiBi, Jina BERT v2's, is refused: no released package on PyPI computes it as a reference)",
            ));
        }
        if self.position_embedding_type != "absolute" {
            return Err(unsupported("position_embedding_type", &self.position_embedding_type, "absolute"));
        }
        Ok(Spec {
            vocab_size: self.vocab_size,
            embedding_size,
            hidden_size: self.hidden_size,
            num_hidden_layers: self.num_hidden_layers,
            num_attention_heads: self.num_attention_heads,
            intermediate_size: self.intermediate_size,
            hidden_act: &self.hidden_act,
            max_position_embeddings: self.max_position_embeddings,
            type_vocab_size: self.type_vocab_size,
            layer_norm_eps: self.layer_norm_eps,
            positions,
        })
    }
}

pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Model> {
    let vb = with_prefix(vb, &["", "bert."], "embeddings.word_embeddings.weight");
    let encoder = Encoder::load(vb.clone(), &cfg.spec(cfg.hidden_size, Positions::Absolute)?)?;
    let pooler = load_pooler(&vb, cfg.hidden_size)?;
    Ok(Model { encoder, pooler })
}

impl super::Config for Config {
    fn dims(&self) -> super::Dims {
        super::Dims::text(
            self.hidden_size,
            self.max_position_embeddings,
            self.vocab_size,
            self.pad_token_id as u32,
        )
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

    fn forward(&self, batch: &Batch) -> candle_core::Result<Vec<f32>> {
        self.encoder.forward(batch)
    }

    fn pooler_size(&self) -> Option<usize> {
        self.pooler.as_ref().map(|(_, width)| *width)
    }

    /// transformers' `BertPooler`: tanh(dense(hidden[:, 0])) -> [batch, hidden].
    fn pooler(&self, hidden: &[f32], batch: &Batch) -> candle_core::Result<Option<Tensor>> {
        tanh_pooler(self.pooler.as_ref(), hidden, batch)
    }
}

/// BERT's and MPNet's pooler: tanh(dense(the first token)), with the dense layer's width.
pub(crate) fn tanh_pooler(
    pooler: Option<&(crate::layers::Linear, usize)>,
    hidden: &[f32],
    batch: &Batch,
) -> candle_core::Result<Option<Tensor>> {
    let Some((dense, width)) = pooler else { return Ok(None) };
    let first = first_tokens(hidden, *width, batch)?.flatten_all()?.to_vec1::<f32>()?;
    let mut pooled = dense.apply(&first);
    crate::layers::Activation::Tanh.apply(&mut pooled);
    Tensor::from_vec(pooled, (batch.len(), dense.outputs()), &candle_core::Device::Cpu).map(Some)
}

/// The pooler's dense layer under `vb`, if the checkpoint has one.
pub(crate) fn load_pooler(vb: &VarBuilder, hidden: usize) -> Result<Option<(crate::layers::Linear, usize)>> {
    vb.contains_tensor("pooler.dense.weight")
        .then(|| {
            crate::weights::torch_linear(&vb.pp("pooler.dense"), hidden, hidden, true).map(|l| (l, hidden))
        })
        .transpose()
        .map_err(bad_weights)
}
