//! What every architecture checks of its config.json and checkpoint before anything is
//! allocated: the refusal of an unsupported setting, the error of a bad checkpoint, bounds
//! on positions, heads, norm epsilons, rotary bases and relative-position buckets, the
//! activation of a `hidden_act` string, and the prefix a checkpoint stores its weights
//! under. Every family's file imports them from here.

use candle_nn::VarBuilder;

use crate::error::{Error, Result};
use crate::layers;

/// A config.json setting (`what`, its `value`) that is not implemented, with what is.
pub fn unsupported(what: &'static str, value: &str, supported: &'static str) -> Error {
    Error::Unsupported { what, value: value.into(), path: "config.json".into(), supported }
}

/// A checkpoint whose tensors do not match the config (missing, misshapen, unreadable).
pub fn bad_weights(e: candle_core::Error) -> Error {
    Error::invalid_file("model.safetensors", e)
}

/// The activation of a `hidden_act` string (`what`: the config key naming it), any the
/// layer library implements.
pub fn activation(what: &'static str, name: &str) -> Result<layers::Activation> {
    layers::Activation::from_hidden_act(name)
        .ok_or_else(|| unsupported(what, name, layers::Activation::HIDDEN_ACT_NAMES))
}

/// The most positions a config may name where a table of that length is built from the
/// config alone, with no tensor of the checkpoint to bound it (candle's ModernBERT rotary
/// tables, its DeBERTa-v2 position ids): 16 times the longest context of the supported
/// models (ModernBERT's 8192).
pub const MAX_POSITIONS: usize = 1 << 17;

/// Refuses a number of positions (`what`, from config.json) above [`MAX_POSITIONS`]
/// before anything is allocated.
pub fn check_positions(what: &'static str, positions: usize) -> Result<()> {
    if positions > MAX_POSITIONS {
        return Err(unsupported(what, &positions.to_string(), "at most 131072"));
    }
    Ok(())
}

/// A LayerNorm or RMSNorm epsilon (`what`, from config.json): a negative one turns the
/// norm of a row whose variance is below it into NaN.
pub fn check_eps(what: &str, eps: f64) -> Result<()> {
    if eps.is_nan() || eps < 0.0 {
        return Err(Error::invalid_file("config.json", format!("{what} {eps:?} is negative")));
    }
    Ok(())
}

/// A rotary base (`what`, from config.json): at or below 0 the frequencies are NaN or
/// infinite, and below 1 they grow with the dimension instead of falling.
pub fn check_rope_theta(what: &str, theta: f64) -> Result<()> {
    if theta.is_nan() || theta < 1.0 {
        return Err(Error::invalid_file("config.json", format!("{what} {theta:?} is less than 1")));
    }
    Ok(())
}

/// The relative-position buckets of T5 and MPNet (see [`crate::layers::relative_position_bucket`]): with
/// fewer than 4 buckets, or a maximum distance not beyond a quarter of them (the exact
/// buckets), positions fall outside the bucket table or overflow.
pub fn check_buckets(num_buckets: usize, max_distance: usize) -> Result<()> {
    let exact = num_buckets / 4;
    if exact == 0 || max_distance <= exact {
        return Err(Error::invalid_file(
            "config.json",
            format!(
                "relative_attention_num_buckets {num_buckets} does not work with a maximum distance of {max_distance}: it takes at least 4 buckets and a distance above a quarter of them"
            ),
        ));
    }
    Ok(())
}

/// Refuses heads that do not divide the width (or no heads at all).
pub fn check_heads(hidden_size: usize, heads: usize) -> Result<()> {
    if heads == 0 || hidden_size % heads != 0 {
        return Err(Error::invalid_file(
            "config.json",
            format!("hidden_size {hidden_size} is not a multiple of num_attention_heads {heads}"),
        ));
    }
    Ok(())
}

/// The first of `prefixes` under which the checkpoint has `probe` (e.g. "bert." for a
/// `BertForSequenceClassification`, "" for a bare `BertModel`).
pub fn with_prefix<'a>(vb: VarBuilder<'a>, prefixes: &[&str], probe: &str) -> VarBuilder<'a> {
    prefixes.iter().find(|p| vb.contains_tensor(&format!("{p}{probe}"))).map_or(vb.clone(), |p| {
        if p.is_empty() {
            vb.clone()
        } else {
            vb.pp(p.trim_end_matches('.'))
        }
    })
}
