//! The rotary settings of a config.json, read one way for every rotary family (the
//! decoders, GTE, jina-embeddings-v3, NomicBERT, ModernBERT): the base (`rope_theta`, or a
//! family's older key), scaling (`rope_scaling`, a `rope_type` other than "default") and
//! the partial rotary factor, in the transformers 5 form (`rope_parameters`, flat or one
//! entry per layer type) and the form on the Hub. Only the default rotary type over the
//! whole head is implemented: anything else is refused here, by name, and rotary scaling
//! is to be added here.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::checks::{check_rope_theta, unsupported};
use crate::error::Result;

/// The rotary keys of transformers' decoder configs (and GTE's, jina-embeddings-v3's), as
/// config.json has them.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct Fields {
    #[serde(default)]
    pub rope_theta: Option<f64>,
    #[serde(default)]
    pub rope_scaling: Option<Value>,
    #[serde(default)]
    pub rope_parameters: Option<Value>,
}

impl Fields {
    /// The base of the global layers: `rope_parameters`, else `rope_theta`, else `default`.
    pub fn full_attention(&self, default: f64) -> Result<f64> {
        self.theta("full_attention", true, self.rope_theta, default)
    }

    /// The base of the layers of `kind` ("full_attention" or "sliding_attention"):
    /// `rope_parameters` (its entry for `kind`, else itself), else `legacy` (the Hub's
    /// key: `rope_theta`, Gemma's `rope_local_base_freq`), else `default`; `rope_scaling`
    /// is read when `scaled` (Gemma 3 scales its global layers only).
    pub fn theta(&self, kind: &str, scaled: bool, legacy: Option<f64>, default: f64) -> Result<f64> {
        let scaling = if scaled { self.rope_scaling.as_ref() } else { None };
        let own = Settings::of_json(self.rope_parameters.as_ref(), kind);
        theta(own, scaling, &format!("rope_theta of {kind}"), legacy, default)
    }
}

/// One layer type's rotary parameters where a config types them (NomicBERT's
/// `rope_parameters`, each of ModernBERT's).
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Parameters {
    #[serde(default)]
    pub rope_type: Option<String>,
    #[serde(default)]
    pub rope_theta: Option<f64>,
}

/// What the reader takes of one layer type's rotary parameters, wherever config.json
/// keeps them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Settings<'a> {
    pub rope_type: Option<&'a str>,
    pub rope_theta: Option<f64>,
    pub partial_rotary_factor: Option<f64>,
}

impl<'a> Settings<'a> {
    /// From `rope_parameters` as a JSON value: its entry for `kind` when it has one, else
    /// itself (flat); `type` is the older name of `rope_type`.
    pub fn of_json(parameters: Option<&'a Value>, kind: &str) -> Self {
        let parameters = parameters.filter(|p| !p.is_null());
        let own = parameters.and_then(|p| p.get(kind)).or(parameters);
        Settings {
            rope_type: own.and_then(|p| p.get("rope_type").or(p.get("type"))).and_then(Value::as_str),
            rope_theta: own.and_then(|p| p.get("rope_theta")).and_then(Value::as_f64),
            partial_rotary_factor: own.and_then(|p| p.get("partial_rotary_factor")).and_then(Value::as_f64),
        }
    }

    /// From typed parameters (no partial rotary factor among them).
    pub fn of(parameters: Option<&'a Parameters>) -> Self {
        Settings {
            rope_type: parameters.and_then(|p| p.rope_type.as_deref()),
            rope_theta: parameters.and_then(|p| p.rope_theta),
            partial_rotary_factor: None,
        }
    }
}

/// The rotary base of `own` settings, else `legacy`, else `default`, checked as `label`
/// (see [`check_rope_theta`]). Refused by name: any `scaling` but null or the default
/// type, a `rope_type` other than "default", a partial rotary factor other than 1.
pub fn theta(
    own: Settings,
    scaling: Option<&Value>,
    label: &str,
    legacy: Option<f64>,
    default: f64,
) -> Result<f64> {
    if let Some(scaling) = scaling.filter(|s| !s.is_null()) {
        let kind = scaling.get("rope_type").or(scaling.get("type")).and_then(Value::as_str);
        if kind != Some("default") {
            return Err(unsupported("rope_scaling", &scaling.to_string(), "null (no rotary scaling)"));
        }
    }
    if let Some(t) = own.rope_type.filter(|t| *t != "default") {
        return Err(unsupported("rope_type", t, "default"));
    }
    if let Some(f) = own.partial_rotary_factor.filter(|f| *f != 1.0) {
        return Err(unsupported("partial_rotary_factor", &f.to_string(), "1.0"));
    }
    let theta = own.rope_theta.or(legacy).unwrap_or(default);
    check_rope_theta(label, theta)?;
    Ok(theta)
}
