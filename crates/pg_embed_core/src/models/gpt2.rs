//! GPT-2: transformers' `GPT2Model` on the layer library's pre-norm stack over packed
//! tokens: token plus learned absolute position embeddings (positions 0.. within each
//! sequence, as a single unpadded input has them), causal attention, LayerNorm before each
//! block and after the last, a plain MLP. GPT-2 stores its projections as `Conv1D`
//! ([inputs, outputs]), transposed here to torch's `Linear` layout. Token type ids, when
//! the tokenizer passes them, are looked up in the token embedding as transformers does.

use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use super::checks::{bad_weights, check_eps, check_positions, unsupported};
use crate::error::{Error, Result};
use crate::layers;

/// `transformers.GPT2Config`; defaults are transformers' defaults.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Config {
    #[serde(default = "d::vocab_size")]
    pub vocab_size: usize,
    #[serde(default = "d::n_positions")]
    pub n_positions: usize,
    #[serde(default = "d::n_embd")]
    pub n_embd: usize,
    #[serde(default = "d::n_layer")]
    pub n_layer: usize,
    #[serde(default = "d::n_head")]
    pub n_head: usize,
    #[serde(default)]
    pub n_inner: Option<usize>,
    #[serde(default = "d::gelu_new")]
    pub activation_function: String,
    #[serde(default = "d::layer_norm_epsilon")]
    pub layer_norm_epsilon: f64,
    #[serde(default = "d::yes")]
    pub scale_attn_weights: bool,
    #[serde(default)]
    pub scale_attn_by_inverse_layer_idx: bool,
    #[serde(default)]
    pub add_cross_attention: bool,
    #[serde(default)]
    pub pad_token_id: Option<u32>,
    #[serde(default = "d::eos_token_id")]
    pub eos_token_id: u32,
}

mod d {
    pub fn vocab_size() -> usize {
        50257
    }
    pub fn n_positions() -> usize {
        1024
    }
    pub fn n_embd() -> usize {
        768
    }
    pub fn n_layer() -> usize {
        12
    }
    pub fn n_head() -> usize {
        12
    }
    pub fn gelu_new() -> String {
        "gelu_new".into()
    }
    pub fn layer_norm_epsilon() -> f64 {
        1e-5
    }
    pub fn yes() -> bool {
        true
    }
    pub fn eos_token_id() -> u32 {
        50256
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Model {
    word: layers::Embedding,
    position: layers::Embedding,
    stack: layers::Stack,
}

pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Model> {
    let h = cfg.n_embd;
    if cfg.n_head == 0 || h % cfg.n_head != 0 {
        return Err(Error::invalid_file(
            "config.json",
            format!("n_embd {h} is not a multiple of n_head {}", cfg.n_head),
        ));
    }
    if cfg.n_layer == 0 {
        return Err(Error::invalid_file("config.json", "n_layer is 0"));
    }
    // The inverse-layer-index scaling of the scores is not implemented.
    if cfg.scale_attn_by_inverse_layer_idx {
        return Err(unsupported("scale_attn_by_inverse_layer_idx", "true", "false"));
    }
    if cfg.add_cross_attention {
        return Err(unsupported("add_cross_attention", "true", "false"));
    }
    let activation = layers::Activation::from_hidden_act(&cfg.activation_function).ok_or_else(|| {
        unsupported("activation_function", &cfg.activation_function, layers::Activation::HIDDEN_ACT_NAMES)
    })?;
    check_positions("n_positions", cfg.n_positions)?;
    check_eps("layer_norm_epsilon", cfg.layer_norm_epsilon)?;
    let inner = cfg.n_inner.unwrap_or(4 * h);
    // Weights under `transformer.*` (GPT2ForSequenceClassification, GPT2LMHeadModel); a
    // bare GPT2Model checkpoint stores the same names without it.
    let vb = if vb.contains_tensor("transformer.wte.weight") { vb.pp("transformer") } else { vb };
    let last = cfg.n_layer - 1;
    if !vb.contains_tensor(&format!("h.{last}.attn.c_attn.weight")) {
        return Err(Error::invalid_file(
            "model.safetensors",
            format!("n_layer is {}, and the checkpoint has no layer {last}", cfg.n_layer),
        ));
    }
    let eps = cfg.layer_norm_epsilon;
    let load = || -> candle_core::Result<Model> {
        // A Conv1D of `inputs` -> `outputs`: weight [inputs, outputs], bias [outputs].
        let conv1d = |vb: VarBuilder, inputs: usize, outputs: usize| -> candle_core::Result<layers::Linear> {
            let w = vb.get((inputs, outputs), "weight")?.t()?.contiguous()?;
            let b = vb.get(outputs, "bias")?.to_vec1::<f32>()?;
            layers::Linear::from_torch(w.flatten_all()?.to_vec1::<f32>()?, Some(b), outputs, inputs)
        };
        let norm = |vb: VarBuilder| crate::weights::layer_norm(&vb, h, eps, true);
        let stack = (0..cfg.n_layer)
            .map(|i| -> candle_core::Result<layers::Layer> {
                let l = vb.pp(format!("h.{i}"));
                Ok(layers::Layer {
                    // c_attn: Q, K and V side by side.
                    qkv: conv1d(l.pp("attn.c_attn"), h, 3 * h)?,
                    attention_out: conv1d(l.pp("attn.c_proj"), h, h)?,
                    attention_norm: norm(l.pp("ln_1"))?,
                    mlp: layers::Mlp::Plain {
                        up: conv1d(l.pp("mlp.c_fc"), h, inner)?,
                        down: conv1d(l.pp("mlp.c_proj"), inner, h)?,
                    },
                    output_norm: norm(l.pp("ln_2"))?,
                    qk_norms: None,
                    post_norms: None,
                })
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        let spec = layers::StackSpec {
            norm_position: layers::NormPosition::Pre,
            final_norm: Some(norm(vb.pp("ln_f"))?),
            scaled: cfg.scale_attn_weights,
            causal: true,
            ..layers::StackSpec::post_norm(h, cfg.n_head, activation)
        };
        Ok(Model {
            word: layers::Embedding::from_tensor(&vb.pp("wte").get((cfg.vocab_size, h), "weight")?)?,
            position: layers::Embedding::from_tensor(&vb.pp("wpe").get((cfg.n_positions, h), "weight")?)?,
            stack: layers::Stack::new(stack, spec)?,
        })
    };
    load().map_err(bad_weights)
}

impl super::Model for Model {
    fn forward(&self, batch: &super::Batch) -> candle_core::Result<Vec<f32>> {
        let lengths = batch.lengths()?;
        // transformers' order: tokens + positions, then + token types (from wte).
        let mut x = self.word.gather(batch.ids)?;
        let positions = lengths.iter().flat_map(|&len| 0..len as u32);
        self.position.add(positions, &mut x)?;
        if !batch.type_ids.is_empty() {
            self.word.add(batch.type_ids.iter().copied(), &mut x)?;
        }
        self.stack.try_forward(&mut x, &lengths)?;
        Ok(x)
    }
}

impl super::Config for Config {
    fn dims(&self) -> super::Dims {
        super::Dims::text(
            self.n_embd,
            self.n_positions,
            self.vocab_size,
            self.pad_token_id.unwrap_or(self.eos_token_id),
        )
    }
    fn load(&self, vb: VarBuilder) -> Result<Box<dyn super::Model>> {
        Ok(Box::new(load(vb, self)?))
    }
}
