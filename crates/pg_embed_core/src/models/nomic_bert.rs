//! NomicBERT (nomic-embed-text-v1 / v1.5): BERT-style post-LayerNorm layers with rotary
//! positions, bias-free attention and a SwiGLU feed-forward, as transformers'
//! `NomicBertModel` computes it. Reads both transformers' names and the names of the
//! checkpoints nomic-ai publishes (fused `Wqkv`, `fc11`/`fc12`/`fc2`, `norm1`/`norm2`,
//! `emb_ln`, config keys `n_embd`, `n_layer`, ...). Runs on the layer library's stack over
//! packed tokens.

use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::checks::{bad_weights, check_eps, check_heads, unsupported};
use super::rotary;
use crate::error::Result;
use crate::layers::{self, Activation};
use crate::weights;

/// `transformers.NomicBertConfig`, with the key names of nomic-ai's own config as aliases;
/// defaults are transformers' defaults.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    #[serde(default = "d::vocab_size")]
    pub vocab_size: usize,
    #[serde(default = "d::hidden_size", alias = "n_embd")]
    pub hidden_size: usize,
    #[serde(default = "d::num_hidden_layers", alias = "n_layer")]
    pub num_hidden_layers: usize,
    #[serde(default = "d::num_attention_heads", alias = "n_head")]
    pub num_attention_heads: usize,
    #[serde(default = "d::intermediate_size", alias = "n_inner")]
    pub intermediate_size: usize,
    #[serde(default = "d::hidden_act", alias = "activation_function")]
    pub hidden_act: String,
    #[serde(default = "d::max_position_embeddings", alias = "n_positions")]
    pub max_position_embeddings: usize,
    #[serde(default = "d::type_vocab_size")]
    pub type_vocab_size: usize,
    #[serde(default = "d::layer_norm_eps", alias = "layer_norm_epsilon")]
    pub layer_norm_eps: f64,
    #[serde(default)]
    pub pad_token_id: u32,
    #[serde(default)]
    pub head_dim: Option<usize>,
    /// `rope_parameters` (transformers 5), `rope_scaling`, `rope_theta`.
    #[serde(flatten)]
    pub rope: rotary::Fields,
    /// nomic-ai's name for the rotary base.
    #[serde(default)]
    pub rotary_emb_base: Option<f64>,
    #[serde(default)]
    pub rotary_emb_fraction: Option<f64>,
    #[serde(default)]
    pub rotary_emb_interleaved: Option<bool>,
    #[serde(default)]
    pub prenorm: Option<bool>,
    #[serde(default)]
    pub qkv_proj_bias: Option<bool>,
    #[serde(default)]
    pub mlp_fc1_bias: Option<bool>,
    #[serde(default)]
    pub mlp_fc2_bias: Option<bool>,
    #[serde(default)]
    pub rotary_scaling_factor: Option<f64>,
    #[serde(default)]
    pub causal: Option<bool>,
    /// nomic-embed-text-v2-moe's mixture-of-experts layers (every n-th layer's MLP).
    #[serde(default)]
    pub moe_every_n_layers: Option<usize>,
    #[serde(default)]
    pub num_experts: Option<usize>,
}

mod d {
    pub fn vocab_size() -> usize {
        30528
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
        "silu".into()
    }
    pub fn max_position_embeddings() -> usize {
        2048
    }
    pub fn type_vocab_size() -> usize {
        2
    }
    pub fn layer_norm_eps() -> f64 {
        1e-12
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Model {
    word: layers::Embedding,
    token_type: Option<layers::Embedding>,
    norm: layers::Norm,
    stack: layers::Stack,
}

impl Config {
    fn check(&self) -> Result<Activation> {
        let act = match self.hidden_act.as_str() {
            // nomic-ai's "swiglu" is SiLU on the gate.
            "silu" | "swish" | "swiglu" => Activation::Silu,
            "gelu" | "geglu" => Activation::Gelu,
            other => return Err(unsupported("hidden_act", other, "silu, swiglu, gelu, geglu")),
        };
        // Settings of nomic-ai's config that would change the numbers: refused unless they
        // have the values of the published models.
        let bad = |set: bool, value: String| set.then_some(value);
        let head_dim_differs = self.head_dim.is_some_and(|d| {
            self.num_attention_heads == 0 || d != self.hidden_size / self.num_attention_heads
        });
        let flags = [
            (
                "rotary_emb_fraction",
                bad(
                    self.rotary_emb_fraction.is_some_and(|f| f != 1.0),
                    format!("{:?}", self.rotary_emb_fraction),
                ),
            ),
            ("rotary_emb_interleaved", bad(self.rotary_emb_interleaved == Some(true), "true".into())),
            ("prenorm", bad(self.prenorm == Some(true), "true".into())),
            ("qkv_proj_bias", bad(self.qkv_proj_bias == Some(true), "true".into())),
            ("mlp_fc1_bias", bad(self.mlp_fc1_bias == Some(true), "true".into())),
            ("mlp_fc2_bias", bad(self.mlp_fc2_bias == Some(true), "true".into())),
            (
                "rotary_scaling_factor",
                bad(self.rotary_scaling_factor.is_some(), format!("{:?}", self.rotary_scaling_factor)),
            ),
            ("causal", bad(self.causal == Some(true), "true".into())),
            (
                "moe_every_n_layers",
                bad(self.moe_every_n_layers.is_some_and(|n| n > 0), format!("{:?}", self.moe_every_n_layers)),
            ),
            ("num_experts", bad(self.num_experts.is_some_and(|n| n > 1), format!("{:?}", self.num_experts))),
            ("head_dim", bad(head_dim_differs, format!("{:?}", self.head_dim))),
        ];
        if let Some((what, Some(value))) = flags.iter().find(|(_, v)| v.is_some()) {
            if what.contains("moe") || what.contains("experts") {
                // nomic-embed-text-v2-moe: only nomic-ai's Hub code computes it; no released
                // package on PyPI does, so there is no reference to check it against.
                return Err(unsupported(what, value, "dense MLP layers (the mixture-of-experts layers of nomic-embed-text-v2-moe are refused: no released package on PyPI computes them as a reference)"));
            }
            return Err(unsupported(
                what,
                value,
                "the published nomic-embed-text settings: rotary_emb_fraction 1.0, head_dim hidden_size / heads, the others false or null",
            ));
        }
        Ok(act)
    }
}

pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Model> {
    let act = cfg.check()?;
    check_heads(cfg.hidden_size, cfg.num_attention_heads)?;
    check_eps("layer_norm_eps", cfg.layer_norm_eps)?;
    // nomic-ai's `rotary_emb_base` is the Hub's key for the base.
    let family = rotary::Family { theta: 1000.0, max_positions: cfg.max_position_embeddings, ntk: false };
    let r = &cfg.rope;
    let (own, _) = rotary::parameters(r.rope_parameters.as_ref(), r.rope_scaling.as_ref(), "full_attention");
    let rope = rotary::read(&own, "rope_theta", r.rope_theta.or(cfg.rotary_emb_base), family, None)?;
    let (h, ff) = (cfg.hidden_size, cfg.intermediate_size);
    let head_dim = h / cfg.num_attention_heads;
    let rotary = rope.rotary(head_dim)?;
    let eps = cfg.layer_norm_eps;
    // nomic-ai's checkpoints fuse q, k and v into `attn.Wqkv` and name layers differently.
    let hub = vb.contains_tensor("encoder.layers.0.attn.Wqkv.weight");
    let load = || -> candle_core::Result<Model> {
        let weight =
            |vb: VarBuilder, o: usize, i: usize| weights::torch_parts(&vb, o, i, false).map(|(w, _)| w);
        let no_bias = |vb: VarBuilder, i: usize, o: usize| weights::torch_linear(&vb, o, i, false);
        let norm = |vb: VarBuilder| weights::layer_norm(&vb, h, eps, true);
        // SwiGLU: act(gate x) * (up x), gate and up side by side in one product.
        let gated =
            |gate: Vec<f32>, up: Vec<f32>| layers::Linear::side_by_side(vec![(gate, None), (up, None)], h);
        let stack = (0..cfg.num_hidden_layers)
            .map(|i| -> candle_core::Result<layers::Layer> {
                if hub {
                    let l = vb.pp(format!("encoder.layers.{i}"));
                    let qkv =
                        layers::Linear::from_torch(weight(l.pp("attn.Wqkv"), 3 * h, h)?, None, 3 * h, h)?;
                    let attention_out = no_bias(l.pp("attn.out_proj"), h, h)?;
                    let attention_norm = norm(l.pp("norm1"))?;
                    let (up, gate) = (weight(l.pp("mlp.fc11"), ff, h)?, weight(l.pp("mlp.fc12"), ff, h)?);
                    let mlp = layers::Mlp::Gated {
                        gate_up: gated(gate, up)?,
                        down: no_bias(l.pp("mlp.fc2"), ff, h)?,
                    };
                    Ok(layers::Layer {
                        qkv,
                        attention_out,
                        attention_norm,
                        mlp,
                        output_norm: norm(l.pp("norm2"))?,
                        qk_norms: None,
                        post_norms: None,
                    })
                } else {
                    let l = vb.pp(format!("layers.{i}"));
                    let a = l.pp("self_attn");
                    let (q, k, v) = (
                        weight(a.pp("q_proj"), h, h)?,
                        weight(a.pp("k_proj"), h, h)?,
                        weight(a.pp("v_proj"), h, h)?,
                    );
                    let qkv = layers::Linear::side_by_side(vec![(q, None), (k, None), (v, None)], h)?;
                    let attention_out = no_bias(a.pp("o_proj"), h, h)?;
                    let attention_norm = norm(l.pp("post_attention_layernorm"))?;
                    let (gate, up) =
                        (weight(l.pp("mlp.gate_proj"), ff, h)?, weight(l.pp("mlp.up_proj"), ff, h)?);
                    let mlp = layers::Mlp::Gated {
                        gate_up: gated(gate, up)?,
                        down: no_bias(l.pp("mlp.down_proj"), ff, h)?,
                    };
                    let output_norm = norm(l.pp("post_mlp_layernorm"))?;
                    Ok(layers::Layer {
                        qkv,
                        attention_out,
                        attention_norm,
                        mlp,
                        output_norm,
                        qk_norms: None,
                        post_norms: None,
                    })
                }
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        let e = vb.pp("embeddings");
        let table =
            |vb: VarBuilder, rows: usize| layers::Embedding::from_tensor(&vb.get((rows, h), "weight")?);
        let word = table(e.pp("word_embeddings"), cfg.vocab_size)?;
        let token_type = (cfg.type_vocab_size > 0)
            .then(|| table(e.pp("token_type_embeddings"), cfg.type_vocab_size))
            .transpose()?;
        let norm = norm(if hub { vb.pp("emb_ln") } else { e.pp("LayerNorm") })?;
        let spec = layers::StackSpec {
            head_dim,
            rotary: Some(rotary),
            ..layers::StackSpec::post_norm(h, cfg.num_attention_heads, act)
        };
        Ok(Model { word, token_type, norm, stack: layers::Stack::new(stack, spec)? })
    };
    load().map_err(bad_weights)
}

impl Model {
    /// The last hidden states [tokens, hidden] of a packed batch: `ids` and `type_ids` of
    /// every sequence end to end, sequence i at tokens bounds[i]..bounds[i + 1]; rotary
    /// positions 0.. within each.
    pub fn forward_packed(
        &self,
        ids: &[u32],
        type_ids: &[u32],
        bounds: &[usize],
    ) -> candle_core::Result<Vec<f32>> {
        let lengths = layers::lengths_of(bounds, ids.len())?;
        let mut x = self.word.gather(ids)?;
        if let Some(token_type) = &self.token_type {
            if type_ids.len() != ids.len() {
                candle_core::bail!("{} token type ids for {} tokens", type_ids.len(), ids.len());
            }
            token_type.add(type_ids.iter().copied(), &mut x)?;
        }
        self.norm.forward(&mut x);
        self.stack.try_forward(&mut x, &lengths)?;
        Ok(x)
    }
}

impl super::Config for Config {
    fn dims(&self) -> super::Dims {
        // Rotary positions: the config's length is what the model was trained for.
        super::Dims::text(self.hidden_size, self.max_position_embeddings, self.vocab_size, self.pad_token_id)
    }
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn super::Model>> {
        Ok(Box::new(load(vb, self)?))
    }
}

impl super::Model for Model {
    fn forward(&self, batch: &super::Batch) -> candle_core::Result<Vec<f32>> {
        self.forward_packed(batch.ids, &batch.type_ids_or_zeros(), batch.bounds)
    }
}
