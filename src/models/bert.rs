//! BERT encoder (MiniLM, bge, e5, all-MiniLM-*). The network is candle-transformers'
//! `BertModel`; this file owns the config as transformers stores it.

use candle_core::Tensor;
use candle_nn::VarBuilder;
use candle_transformers::models::bert as cb;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

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

pub struct Model {
    inner: cb::BertModel,
    /// `BertPooler` (dense + tanh over [CLS]), when the checkpoint carries one.
    pooler: Option<candle_nn::Linear>,
}

fn unsupported(what: &'static str, value: &str, supported: &'static str) -> Error {
    Error::Unsupported { what, value: value.into(), path: "config.json".into(), supported }
}

pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Model> {
    let hidden_act = match cfg.hidden_act.as_str() {
        "gelu" => cb::HiddenAct::Gelu,
        // transformers' gelu_new and gelu_pytorch_tanh are the tanh approximation.
        "gelu_new" | "gelu_pytorch_tanh" => cb::HiddenAct::GeluApproximate,
        "relu" => cb::HiddenAct::Relu,
        other => return Err(unsupported("hidden_act", other, "gelu, gelu_new, gelu_pytorch_tanh, relu")),
    };
    if cfg.position_embedding_type != "absolute" {
        return Err(unsupported("position_embedding_type", &cfg.position_embedding_type, "absolute"));
    }
    if cfg.num_attention_heads == 0 || cfg.hidden_size % cfg.num_attention_heads != 0 {
        return Err(Error::invalid_file(
            "config.json",
            format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                cfg.hidden_size, cfg.num_attention_heads
            ),
        ));
    }
    let inner_cfg = cb::Config {
        vocab_size: cfg.vocab_size,
        hidden_size: cfg.hidden_size,
        num_hidden_layers: cfg.num_hidden_layers,
        num_attention_heads: cfg.num_attention_heads,
        intermediate_size: cfg.intermediate_size,
        hidden_act,
        hidden_dropout_prob: 0.0,
        max_position_embeddings: cfg.max_position_embeddings,
        type_vocab_size: cfg.type_vocab_size,
        initializer_range: 0.02,
        layer_norm_eps: cfg.layer_norm_eps,
        pad_token_id: cfg.pad_token_id,
        position_embedding_type: cb::PositionEmbeddingType::Absolute,
        use_cache: false,
        classifier_dropout: None,
        model_type: Some("bert".into()),
    };
    let bad_weights = |e| Error::invalid_file("model.safetensors", e);
    let pooler = ["pooler.dense", "bert.pooler.dense"]
        .into_iter()
        .find(|p| vb.contains_tensor(&format!("{p}.weight")))
        .map(|p| candle_nn::linear(cfg.hidden_size, cfg.hidden_size, vb.pp(p)))
        .transpose()
        .map_err(bad_weights)?;
    let inner = cb::BertModel::load(vb, &inner_cfg).map_err(bad_weights)?;
    Ok(Model { inner, pooler })
}

impl Model {
    pub fn forward(&self, ids: &Tensor, type_ids: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
        self.inner.forward(ids, type_ids, Some(mask))
    }

    pub fn has_pooler(&self) -> bool {
        self.pooler.is_some()
    }

    /// transformers' `BertPooler`: tanh(dense(hidden[:, 0])) -> [batch, hidden].
    pub fn pooler(&self, hidden: &Tensor) -> candle_core::Result<Option<Tensor>> {
        use candle_core::{IndexOp, Module};
        self.pooler.as_ref().map(|dense| dense.forward(&hidden.i((.., 0))?)?.tanh()).transpose()
    }
}
