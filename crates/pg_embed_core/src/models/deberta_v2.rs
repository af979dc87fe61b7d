//! DeBERTa-v2 / DeBERTa-v3 (disentangled relative attention). The network is
//! candle-transformers' `DebertaV2Model`; this file owns the config as transformers stores it.

use candle_core::Tensor;
use candle_nn::VarBuilder;
use candle_transformers::models::debertav2 as cd;
use serde::{Deserialize, Serialize};

use super::encoder::{bad_weights, check_eps, check_heads, check_positions, unsupported, with_prefix};
use crate::error::Result;

/// `transformers.DebertaV2Config`
/// (https://huggingface.co/docs/transformers/model_doc/deberta-v2#transformers.DebertaV2Config);
/// defaults are transformers' defaults (including the attributes its model reads with
/// `getattr(config, ..., default)`).
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
    #[serde(default = "d::gelu")]
    pub hidden_act: String,
    #[serde(default = "d::max_position_embeddings")]
    pub max_position_embeddings: usize,
    #[serde(default)]
    pub type_vocab_size: usize,
    #[serde(default = "d::layer_norm_eps")]
    pub layer_norm_eps: f64,
    #[serde(default)]
    pub relative_attention: bool,
    #[serde(default = "d::minus_one")]
    pub max_relative_positions: isize,
    #[serde(default)]
    pub pad_token_id: usize,
    #[serde(default = "d::yes")]
    pub position_biased_input: bool,
    #[serde(default)]
    pub pos_att_type: Option<PosAttType>,
    #[serde(default = "d::minus_one")]
    pub position_buckets: isize,
    #[serde(default)]
    pub share_att_key: bool,
    #[serde(default)]
    pub norm_rel_ebd: Option<String>,
    #[serde(default)]
    pub embedding_size: Option<usize>,
    #[serde(default)]
    pub attention_head_size: Option<usize>,
    #[serde(default)]
    pub conv_kernel_size: usize,
    /// The ContextPooler of the classification head (default: hidden_size).
    #[serde(default)]
    pub pooler_hidden_size: Option<usize>,
    #[serde(default = "d::gelu")]
    pub pooler_hidden_act: String,
}

/// `pos_att_type` as a list or as transformers' older "p2c|c2p" string.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(untagged)]
pub enum PosAttType {
    List(Vec<String>),
    Joined(String),
}

impl PosAttType {
    fn to_vec(&self) -> Vec<String> {
        match self {
            PosAttType::List(v) => v.clone(),
            PosAttType::Joined(s) => {
                s.split('|').map(|p| p.trim().to_string()).filter(|p| !p.is_empty()).collect()
            }
        }
    }
}

mod d {
    pub fn vocab_size() -> usize {
        128100
    }
    pub fn hidden_size() -> usize {
        1536
    }
    pub fn num_hidden_layers() -> usize {
        24
    }
    pub fn num_attention_heads() -> usize {
        24
    }
    pub fn intermediate_size() -> usize {
        6144
    }
    pub fn gelu() -> String {
        "gelu".into()
    }
    pub fn max_position_embeddings() -> usize {
        512
    }
    pub fn layer_norm_eps() -> f64 {
        1e-7
    }
    pub fn minus_one() -> isize {
        -1
    }
    pub fn yes() -> bool {
        true
    }
}

pub struct Model {
    inner: cd::DebertaV2Model,
}

fn act(name: &str) -> Result<cd::HiddenAct> {
    Ok(match name {
        "gelu" => cd::HiddenAct::Gelu,
        "gelu_new" | "gelu_pytorch_tanh" => cd::HiddenAct::GeluApproximate,
        "relu" => cd::HiddenAct::Relu,
        other => return Err(unsupported("hidden_act", other, "gelu, gelu_new, gelu_pytorch_tanh, relu")),
    })
}

impl Config {
    pub fn pooler_hidden_size(&self) -> usize {
        self.pooler_hidden_size.unwrap_or(self.hidden_size)
    }
}

pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Model> {
    check_heads(cfg.hidden_size, cfg.num_attention_heads)?;
    // candle builds position ids for max_position_embeddings before reading a weight, and
    // doubles the relative position span in isize.
    check_positions("max_position_embeddings", cfg.max_position_embeddings)?;
    check_positions("max_relative_positions", cfg.max_relative_positions.max(0) as usize)?;
    check_positions("position_buckets", cfg.position_buckets.max(0) as usize)?;
    check_eps("layer_norm_eps", cfg.layer_norm_eps)?;
    if cfg.conv_kernel_size > 0 {
        return Err(unsupported(
            "conv_kernel_size",
            &cfg.conv_kernel_size.to_string(),
            "0 (no convolution layer)",
        ));
    }
    let pos_att_type = cfg.pos_att_type.as_ref().map(PosAttType::to_vec).unwrap_or_default();
    if let Some(bad) = pos_att_type.iter().find(|p| !matches!(p.as_str(), "c2p" | "p2c")) {
        return Err(unsupported("pos_att_type", bad, "c2p, p2c"));
    }
    let inner_cfg = cd::Config {
        vocab_size: cfg.vocab_size,
        hidden_size: cfg.hidden_size,
        num_hidden_layers: cfg.num_hidden_layers,
        num_attention_heads: cfg.num_attention_heads,
        intermediate_size: cfg.intermediate_size,
        hidden_act: act(&cfg.hidden_act)?,
        hidden_dropout_prob: 0.0,
        attention_probs_dropout_prob: 0.0,
        max_position_embeddings: cfg.max_position_embeddings,
        type_vocab_size: cfg.type_vocab_size,
        initializer_range: 0.02,
        layer_norm_eps: cfg.layer_norm_eps,
        relative_attention: cfg.relative_attention,
        max_relative_positions: cfg.max_relative_positions,
        pad_token_id: Some(cfg.pad_token_id),
        position_biased_input: cfg.position_biased_input,
        pos_att_type,
        position_buckets: Some(cfg.position_buckets),
        share_att_key: Some(cfg.share_att_key),
        attention_head_size: cfg.attention_head_size,
        embedding_size: cfg.embedding_size,
        norm_rel_ebd: cfg.norm_rel_ebd.clone(),
        conv_kernel_size: None,
        conv_groups: None,
        conv_act: None,
        id2label: None,
        label2id: None,
        pooler_dropout: Some(0.0),
        pooler_hidden_act: Some(act(&cfg.pooler_hidden_act)?),
        pooler_hidden_size: Some(cfg.pooler_hidden_size()),
        cls_dropout: None,
    };
    let vb = with_prefix(vb, &["", "deberta."], "embeddings.word_embeddings.weight");
    let inner = cd::DebertaV2Model::load(vb, &inner_cfg).map_err(bad_weights)?;
    Ok(Model { inner })
}

impl Model {
    pub fn forward(&self, ids: &Tensor, type_ids: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
        self.inner.forward(ids, Some(type_ids.clone()), Some(mask.clone()))
    }
}

impl super::Config for Config {
    fn hidden_size(&self) -> usize {
        self.hidden_size
    }
    fn max_position_embeddings(&self) -> usize {
        self.max_position_embeddings
    }
    fn vocab_size(&self) -> usize {
        self.vocab_size
    }
    fn pad_token_id(&self) -> u32 {
        self.pad_token_id as u32
    }
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn super::Model>> {
        Ok(Box::new(load(vb, self)?))
    }
}

impl super::Model for Model {
    /// One sequence at a time through the padded forward pass.
    fn forward(&self, batch: &super::Batch) -> candle_core::Result<Vec<f32>> {
        super::one_by_one(batch, |ids, types, mask| Model::forward(self, ids, types, mask))
    }
}
