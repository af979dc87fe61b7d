//! The rotary settings of a config.json, read one way for every rotary family (the
//! decoders, GTE, jina-embeddings-v3, NomicBERT, ModernBERT): the base (`rope_theta`, or a
//! family's older key), the rotary type with its parameters (`rope_parameters`, flat or one
//! entry per layer type, and the older `rope_scaling`, merged as transformers 5.24's config
//! classes merge them) and the partial rotary factor. Every type transformers 5.24 computes
//! (`modeling_rope_utils`: default, linear, proportional, dynamic, yarn, longrope, llama3)
//! and GTE's published `ntk` are turned into the frequencies of a [`layers::Rotary`] here,
//! in float32 in transformers' order of operations; anything else is refused by name.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::checks::{check_rope_theta, unsupported};
use crate::error::Result;
use crate::layers::{self, default_inv_freq, Long};

/// The rotary keys of transformers' decoder configs (and GTE's, jina-embeddings-v3's,
/// NomicBERT's, ModernBERT's), as config.json has them.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct Fields {
    #[serde(default)]
    pub rope_theta: Option<f64>,
    #[serde(default)]
    pub rope_scaling: Option<Value>,
    #[serde(default)]
    pub rope_parameters: Option<Value>,
    /// Phi-3's key outside the rotary parameters, which transformers prefers to theirs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_max_position_embeddings: Option<usize>,
}

/// Where a family's rotary settings may say what.
#[derive(Debug, Clone, Copy)]
pub struct Family {
    /// The rotary base when config.json names none.
    pub theta: f64,
    /// `max_position_embeddings` (dynamic NTK's length, the others' default original length).
    pub max_positions: usize,
    /// GTE's `ntk` type (Alibaba-NLP's `NTKScalingRotaryEmbedding`) is known.
    pub ntk: bool,
}

impl Fields {
    /// The rotary of the global layers: `rope_parameters` (or its "full_attention" entry)
    /// with `rope_scaling`, else `rope_theta`, else the family's base.
    pub fn full_attention(&self, family: Family) -> Result<Rope> {
        self.rope("full_attention", true, self.rope_theta, family)
    }

    /// The rotary of the layers of `kind` ("full_attention" or "sliding_attention"):
    /// [`parameters`] of `kind`, with `rope_scaling` when `scaled` (Gemma 3 scales its
    /// global layers only), its base else `legacy` (the Hub's key: `rope_theta`, Gemma's
    /// `rope_local_base_freq`) else the family's.
    pub fn rope(&self, kind: &str, scaled: bool, legacy: Option<f64>, family: Family) -> Result<Rope> {
        let scaling = if scaled { self.rope_scaling.as_ref() } else { None };
        let (own, nested) = parameters(self.rope_parameters.as_ref(), scaling, kind);
        // transformers prefers a flat config's own `original_max_position_embeddings`.
        let original = if nested { None } else { self.original_max_position_embeddings };
        read(&own, &format!("rope_theta of {kind}"), legacy, family, original)
    }
}

/// One layer type's rotary parameters as transformers 5.24's config classes standardize
/// them, and whether `rope_parameters` is nested by layer type: its entry for `kind`
/// updated with the keys of `scaling` (Gemma 3, ModernBERT), or a flat `rope_parameters`
/// that a `scaling` (`rope_scaling`) replaces.
pub fn parameters(
    rope_parameters: Option<&Value>,
    scaling: Option<&Value>,
    kind: &str,
) -> (Map<String, Value>, bool) {
    let object = |v: Option<&Value>| v.and_then(Value::as_object).cloned();
    let scaling = object(scaling).filter(|s| !s.is_empty());
    let nested = rope_parameters
        .and_then(Value::as_object)
        .is_some_and(|p| p.contains_key("full_attention") || p.contains_key("sliding_attention"));
    if nested {
        let mut own = object(rope_parameters.and_then(|p| p.get(kind))).unwrap_or_default();
        own.extend(scaling.unwrap_or_default());
        // YaRN reads `truncate` from the top of `rope_parameters`, which a nested one does not
        // have: true, whatever the entry says.
        own.remove("truncate");
        (own, true)
    } else {
        (scaling.or_else(|| object(rope_parameters)).unwrap_or_default(), false)
    }
}

/// The rotary types transformers 5.24 computes, for messages.
const TYPES: &str = "default, linear, proportional, dynamic, yarn, longrope, llama3";
/// The same and GTE's ntk.
/// The largest rotary head size pg_embed builds frequencies for: 256 times the largest of the
/// supported models' (256).
const MAX_HEAD_DIM: usize = 1 << 16;

const GTE_TYPES: &str = "default, linear, proportional, dynamic, yarn, longrope, llama3, ntk";

/// How the layers of one type rotate: the base and the rotary type with its parameters
/// (transformers' defaults filled in), as model_info shows them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rope {
    pub rope_theta: f64,
    #[serde(flatten)]
    pub kind: Kind,
}

/// A rotary type and what it reads (see transformers' `modeling_rope_utils`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "rope_type", rename_all = "lowercase")]
pub enum Kind {
    Default,
    /// Frequencies / factor (also `proportional` over the whole head).
    Linear {
        factor: f64,
    },
    /// A sequence longer than `max_position_embeddings` takes the base theta (factor len /
    /// max - (factor - 1))^(d / (d - 2)).
    Dynamic {
        factor: f64,
        max_position_embeddings: usize,
    },
    Yarn {
        factor: f64,
        original_max_position_embeddings: usize,
        attention_factor: f64,
        beta_fast: f64,
        beta_slow: f64,
        truncate: bool,
    },
    /// Frequencies / short_factor, or / long_factor for a sequence longer than the original
    /// length; cos and sin times attention_factor.
    Longrope {
        short_factor: Vec<f64>,
        long_factor: Vec<f64>,
        original_max_position_embeddings: usize,
        attention_factor: f64,
    },
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_position_embeddings: usize,
    },
    /// GTE's: (theta factor)^(-2i/d) / factor^(2/d), or with `mixed_b` theta^(-2i/d) /
    /// exp(ln(factor) / (d/2)^b (i+1)^b).
    Ntk {
        factor: f64,
        mixed_b: Option<f64>,
    },
}

/// The rotary of one layer type's parameters `p` ([`parameters`]): its base, else
/// `legacy`, else the family's, checked as `label` (see [`check_rope_theta`]); its type
/// with the keys transformers reads for it, `original` (a flat config's own
/// `original_max_position_embeddings`) before `p`'s. Refused by name: an unknown type, a
/// key the type needs that is missing or not a number, a partial rotary factor other than 1.
pub fn read(
    p: &Map<String, Value>,
    label: &str,
    legacy: Option<f64>,
    family: Family,
    original: Option<usize>,
) -> Result<Rope> {
    let t = p.get("rope_type").or(p.get("type")).and_then(Value::as_str).unwrap_or("default");
    let supported = if family.ntk { GTE_TYPES } else { TYPES };
    if let Some(f) = p.get("partial_rotary_factor").filter(|f| !f.is_null() && f.as_f64() != Some(1.0)) {
        return Err(unsupported("partial_rotary_factor", &f.to_string(), "1.0"));
    }
    let rope_theta = p.get("rope_theta").and_then(Value::as_f64).or(legacy).unwrap_or(family.theta);
    check_rope_theta(label, rope_theta)?;
    // A number, or None where the key is missing or null.
    let number = |key: &'static str| -> Result<Option<f64>> {
        match p.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_f64().filter(|x| x.is_finite()) {
                Some(x) => Ok(Some(x)),
                None => Err(unsupported(key, &v.to_string(), "a number")),
            },
        }
    };
    let needed = |key: &'static str| -> Result<f64> {
        number(key)?.ok_or_else(|| unsupported(key, &format!("missing (rope_type {t})"), "a number"))
    };
    let positive = |key: &'static str, x: f64| -> Result<f64> {
        if x > 0.0 {
            Ok(x)
        } else {
            Err(unsupported(key, &x.to_string(), "a number above 0"))
        }
    };
    let factor = || positive("factor", needed("factor")?);
    let original_length = || -> Result<usize> {
        let own = number("original_max_position_embeddings")?;
        let n = original.map(|n| n as f64).or(own).unwrap_or(family.max_positions as f64);
        if n < 1.0 || n.fract() != 0.0 {
            return Err(unsupported(
                "original_max_position_embeddings",
                &n.to_string(),
                "a positive whole number",
            ));
        }
        Ok(n as usize)
    };
    let list = |key: &'static str| -> Result<Vec<f64>> {
        let v = p
            .get(key)
            .ok_or_else(|| unsupported(key, &format!("missing (rope_type {t})"), "a list of numbers"))?;
        v.as_array()
            .and_then(|a| {
                a.iter().map(|x| x.as_f64().filter(|x| x.is_finite() && *x > 0.0)).collect::<Option<Vec<_>>>()
            })
            .ok_or_else(|| unsupported(key, &v.to_string(), "a list of numbers above 0"))
    };
    let kind = match t {
        "default" => Kind::Default,
        "linear" => Kind::Linear { factor: factor()? },
        "proportional" => Kind::Linear { factor: positive("factor", number("factor")?.unwrap_or(1.0))? },
        "dynamic" => Kind::Dynamic { factor: factor()?, max_position_embeddings: family.max_positions },
        "yarn" => {
            // A null factor is max_position_embeddings / the original length; a missing one
            // is refused, as transformers fails to read it.
            let original = original_length()?;
            if !p.contains_key("factor") {
                needed("factor")?;
            }
            let factor = positive(
                "factor",
                number("factor")?.unwrap_or(family.max_positions as f64 / original as f64),
            )?;
            let mscale = |scale: f64, m: f64| if scale <= 1.0 { 1.0 } else { 0.1 * m * scale.ln() + 1.0 };
            let attention_factor =
                match (number("attention_factor")?, number("mscale")?, number("mscale_all_dim")?) {
                    (Some(a), _, _) => a,
                    (None, Some(m), Some(all)) if m != 0.0 && all != 0.0 => {
                        mscale(factor, m) / mscale(factor, all)
                    }
                    _ => mscale(factor, 1.0),
                };
            // `or` in Python: a missing, null or 0 beta takes the default.
            let beta = |key, default: f64| {
                Ok::<_, crate::error::Error>(number(key)?.filter(|b| *b != 0.0).unwrap_or(default))
            };
            let truncate = match p.get("truncate") {
                None | Some(Value::Null) => true,
                Some(Value::Bool(b)) => *b,
                Some(v) => return Err(unsupported("truncate", &v.to_string(), "true or false")),
            };
            Kind::Yarn {
                factor,
                original_max_position_embeddings: original,
                attention_factor,
                beta_fast: beta("beta_fast", 32.0)?,
                beta_slow: beta("beta_slow", 1.0)?,
                truncate,
            }
        }
        "longrope" => {
            let original = original_length()?;
            let factor = number("factor")?.unwrap_or(family.max_positions as f64 / original as f64);
            let attention_factor = match number("attention_factor")? {
                Some(a) => a,
                None if factor <= 1.0 => 1.0,
                None => (1.0 + factor.ln() / (original as f64).ln()).sqrt(),
            };
            Kind::Longrope {
                short_factor: list("short_factor")?,
                long_factor: list("long_factor")?,
                original_max_position_embeddings: original,
                attention_factor,
            }
        }
        "llama3" => {
            let (low, high) = (needed("low_freq_factor")?, needed("high_freq_factor")?);
            if !(low > 0.0 && high > low) {
                let value = format!("low_freq_factor {low}, high_freq_factor {high}");
                return Err(unsupported(
                    "rope_type",
                    &value,
                    "llama3 with 0 < low_freq_factor < high_freq_factor",
                ));
            }
            Kind::Llama3 {
                factor: factor()?,
                low_freq_factor: low,
                high_freq_factor: high,
                original_max_position_embeddings: original_length()?,
            }
        }
        "ntk" if family.ntk => Kind::Ntk { factor: factor()?, mixed_b: number("mixed_b")? },
        other => return Err(unsupported("rope_type", other, supported)),
    };
    Ok(Rope { rope_theta, kind })
}

impl Rope {
    /// The unscaled rotary of `theta` (a family's sliding layers that name no type).
    pub fn plain(rope_theta: f64) -> Self {
        Rope { rope_theta, kind: Kind::Default }
    }

    /// The rotary positions of heads of `head_dim` (even), its frequencies in float32 as
    /// transformers computes them.
    /// The head size comes from config.json alone and the frequencies are built before any
    /// tensor bounds it: one above [`MAX_HEAD_DIM`] is refused first.
    pub fn rotary(&self, head_dim: usize) -> Result<layers::Rotary> {
        if head_dim > MAX_HEAD_DIM {
            return Err(unsupported("rotary head size", &head_dim.to_string(), "at most 65536"));
        }
        let (d, half) = (head_dim, head_dim / 2);
        let theta = self.rope_theta as f32;
        let scaled = |inv_freq: Vec<f32>, scale: f64, long: Option<Long>| {
            Ok(layers::Rotary::scaled(inv_freq, scale as f32, long))
        };
        // theta^(2i / d), float32.
        let powers = || (0..d).step_by(2).map(move |i| theta.powf(i as f32 / d as f32));
        match &self.kind {
            Kind::Default => Ok(layers::Rotary::new(d, self.rope_theta)),
            Kind::Linear { factor } => scaled(
                default_inv_freq(d, theta).into_iter().map(|f| f / *factor as f32).collect(),
                1.0,
                None,
            ),
            Kind::Dynamic { factor, max_position_embeddings } => {
                let long = Long::Dynamic {
                    above: *max_position_embeddings,
                    theta: self.rope_theta,
                    factor: *factor,
                };
                scaled(default_inv_freq(d, theta), 1.0, Some(long))
            }
            Kind::Yarn {
                factor,
                original_max_position_embeddings: original,
                attention_factor,
                beta_fast,
                beta_slow,
                truncate,
            } => {
                let correction = |rotations: f64| {
                    (d as f64 * (*original as f64 / (rotations * 2.0 * std::f64::consts::PI)).ln())
                        / (2.0 * self.rope_theta.ln())
                };
                let (mut low, mut high) = (correction(*beta_fast), correction(*beta_slow));
                if *truncate {
                    (low, high) = (low.floor(), high.ceil());
                }
                let (low, mut high) = (low.max(0.0), high.min((d - 1) as f64));
                if low == high {
                    high += 0.001;
                }
                let inv_freq = powers()
                    .enumerate()
                    .map(|(i, p)| {
                        let (extrapolation, interpolation) = (1.0 / p, 1.0 / (*factor as f32 * p));
                        let ramp = ((i as f32 - low as f32) / (high - low) as f32).clamp(0.0, 1.0);
                        let e = 1.0 - ramp;
                        interpolation * (1.0 - e) + extrapolation * e
                    })
                    .collect();
                scaled(inv_freq, *attention_factor, None)
            }
            Kind::Longrope {
                short_factor,
                long_factor,
                original_max_position_embeddings,
                attention_factor,
            } => {
                for (key, factors) in [("short_factor", short_factor), ("long_factor", long_factor)] {
                    if factors.len() != half {
                        let value = format!("{} numbers for heads of {d}", factors.len());
                        return Err(unsupported(key, &value, "head_dim / 2 numbers"));
                    }
                }
                let inv = |factors: &[f64]| {
                    powers().zip(factors).map(|(p, f)| 1.0 / (*f as f32 * p)).collect::<Vec<f32>>()
                };
                let long = Long::Frequencies {
                    above: *original_max_position_embeddings,
                    inv_freq: inv(long_factor),
                };
                scaled(inv(short_factor), *attention_factor, Some(long))
            }
            Kind::Llama3 {
                factor,
                low_freq_factor: low,
                high_freq_factor: high,
                original_max_position_embeddings,
            } => {
                let (factor, old) = (*factor as f32, *original_max_position_embeddings as f64);
                let (low_wavelen, high_wavelen) = ((old / low) as f32, (old / high) as f32);
                let inv_freq = default_inv_freq(d, theta)
                    .into_iter()
                    .map(|f| {
                        let wavelen = (2.0 * std::f64::consts::PI) as f32 / f;
                        let f = if wavelen > low_wavelen { f / factor } else { f };
                        let smooth = (old as f32 / wavelen - *low as f32) / (high - low) as f32;
                        let medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
                        if medium {
                            (1.0 - smooth) * f / factor + smooth * f
                        } else {
                            f
                        }
                    })
                    .collect();
                scaled(inv_freq, 1.0, None)
            }
            Kind::Ntk { factor, mixed_b: None } => {
                let shrink = factor.powf(2.0 / d as f64) as f32;
                let base = (self.rope_theta * factor) as f32;
                scaled(default_inv_freq(d, base).into_iter().map(|f| f / shrink).collect(), 1.0, None)
            }
            Kind::Ntk { factor, mixed_b: Some(b) } => {
                let a = (*factor as f32).ln() / (half as f64).powf(*b) as f32;
                let inv_freq = default_inv_freq(d, theta)
                    .into_iter()
                    .enumerate()
                    .map(|(i, f)| f / (a * ((i + 1) as f32).powf(*b as f32)).exp())
                    .collect();
                scaled(inv_freq, 1.0, None)
            }
        }
    }
}
