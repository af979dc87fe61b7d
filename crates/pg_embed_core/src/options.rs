//! `options jsonb` of `embed.register_model`: user overrides of what the model files say.
//! Unknown keys are rejected, never ignored.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Options {
    /// A pooling mode or an array of modes to concatenate, e.g. "cls" or ["cls", "mean"].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pooling: Option<OneOrMany>,
    /// L2-normalise the output (default: whether the model has a Normalize module).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normalize: Option<bool>,
    /// Tokens per input, special tokens included; longer inputs are truncated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_length: Option<usize>,
    /// Output dimensions kept (Matryoshka truncation, as sentence-transformers' truncate_dim).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dimensions: Option<usize>,
    /// Named prompts added to (or replacing) those of config_sentence_transformers.json.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts: Option<BTreeMap<String, String>>,
    /// The prompt name used when `embed` is called without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// Whether prompt tokens take part in pooling (default: the Pooling module's include_prompt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_prompt: Option<bool>,
    /// "embed" or "classify" (default: classify for a *ForSequenceClassification checkpoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// Linear heads from safetensors files, applied after the model's own Dense modules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heads: Option<Vec<HeadSpec>>,
    /// What happens to an input longer than max_length tokens (default: truncate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub long_input: Option<LongInput>,
    /// The numbers the backbone's linear layers compute with (default: float32).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<Precision>,
    /// Sparse models: keep the `max_terms` largest weights of each vector (1 to 16,000,
    /// pgvector's limit; its HNSW index takes at most 1,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_terms: Option<usize>,
    /// Sparse models: drop weights below `min_weight` (a finite number, at least 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_weight: Option<f32>,
}

/// `precision`: float32, exactly as the reference computes; or bfloat16, where the
/// backbone's linear layers keep their weights in bfloat16, round their inputs to it and
/// add in float32 (norms, softmax, activations, attention, pooling and heads stay float32);
/// or int8, where those layers' weights and inputs are quantized to int8 in groups of 32
/// inputs and summed exactly in int32 (`crate::kernels::int8`), the rest as in bfloat16.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    #[default]
    Float32,
    Bfloat16,
    Int8,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::Float32 => "float32",
            Precision::Bfloat16 => "bfloat16",
            Precision::Int8 => "int8",
        }
    }
}

/// `long_input`: an input with more tokens than max_length is truncated (as
/// sentence-transformers does), refused, or embedded as the mean of its chunks' embeddings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LongInput {
    #[default]
    Truncate,
    Error,
    MeanOfChunks,
}

/// One user-supplied linear head: `activation(x W^T + b)`, W stored as torch.nn.Linear
/// stores it, [out_features, in_features].
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HeadSpec {
    /// A safetensors file, relative to the model directory; it must lie inside
    /// pg_embed.model_dir.
    pub path: String,
    /// Name of the weight tensor.
    #[serde(default = "default_weight")]
    pub weight: String,
    /// Name of the bias tensor. Absent: `<weight prefix>.bias` if the file has it;
    /// null: no bias.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub bias: Option<Option<String>>,
    /// identity (default), tanh, relu, gelu, gelu_tanh, sigmoid, leaky_relu, silu, softplus,
    /// or a torch class path as sentence-transformers stores it.
    #[serde(default = "default_activation")]
    pub activation: String,
}

fn default_weight() -> String {
    "linear.weight".into()
}

fn default_activation() -> String {
    "identity".into()
}

/// Tells a key given as null (`Some(None)`) from an absent key (`None`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub fn to_vec(&self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s.clone()],
            OneOrMany::Many(v) => v.clone(),
        }
    }
}

impl Options {
    pub fn from_json(value: &serde_json::Value) -> Result<Self> {
        if !value.is_object() {
            return Err(Error::InvalidOptions(format!("expected a JSON object, got {value}")));
        }
        serde_json::from_value(value.clone()).map_err(|e| Error::InvalidOptions(e.to_string()))
    }

    pub fn from_json_str(text: &str) -> Result<Self> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| Error::InvalidOptions(e.to_string()))?;
        Self::from_json(&value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_known_keys() {
        let o =
            Options::from_json(&json!({"pooling": ["cls", "mean"], "normalize": false, "max_length": 128}))
                .unwrap();
        assert_eq!(o.pooling.unwrap().to_vec(), vec!["cls", "mean"]);
        assert_eq!(o.normalize, Some(false));
        assert_eq!(o.max_length, Some(128));
        assert_eq!(Options::from_json(&json!({})).unwrap(), Options::default());
        let o = Options::from_json(&json!({
            "dimensions": 8, "prompt": "query", "prompts": {"query": "query: "}, "include_prompt": false,
            "heads": [{"path": "a.safetensors"}, {"path": "b.safetensors", "weight": "w", "bias": null,
                       "activation": "tanh"}, {"path": "c.safetensors", "bias": "c.b"}]
        }))
        .unwrap();
        assert_eq!(
            (o.dimensions, o.prompt.as_deref(), o.include_prompt),
            (Some(8), Some("query"), Some(false))
        );
        assert_eq!(o.prompts.unwrap()["query"], "query: ");
        let heads = o.heads.unwrap();
        assert_eq!(
            (heads[0].weight.as_str(), &heads[0].bias, heads[0].activation.as_str()),
            ("linear.weight", &None, "identity")
        );
        assert_eq!((heads[1].weight.as_str(), &heads[1].bias), ("w", &Some(None)));
        assert_eq!(heads[2].bias, Some(Some("c.b".to_string())));
        assert_eq!(
            Options::from_json(&json!({"pooling": "max"})).unwrap().pooling.unwrap().to_vec(),
            vec!["max"]
        );
        for (text, mode) in [
            ("truncate", LongInput::Truncate),
            ("error", LongInput::Error),
            ("mean_of_chunks", LongInput::MeanOfChunks),
        ] {
            assert_eq!(Options::from_json(&json!({"long_input": text})).unwrap().long_input, Some(mode));
        }
        for (text, precision) in [("float32", Precision::Float32), ("bfloat16", Precision::Bfloat16), ("int8", Precision::Int8)] {
            assert_eq!(Options::from_json(&json!({"precision": text})).unwrap().precision, Some(precision));
        }
    }

    #[test]
    fn rejects_unknown_keys_and_bad_values() {
        let err = Options::from_json(&json!({"polling": "cls"})).unwrap_err().to_string();
        assert!(err.contains("unknown field `polling`"), "{err}");
        let err = Options::from_json(&json!({"heads": [{"path": "p", "activaton": "tanh"}]})).unwrap_err();
        assert!(err.to_string().contains("unknown field `activaton`"), "{err}");
        for bad in [
            json!({"normalize": "yes"}),
            json!({"max_length": -1}),
            json!({"dimensions": 2.5}),
            json!({"prompts": ["query: "]}),
            json!({"heads": {"path": "p"}}),
            json!({"heads": [{"weight": "w"}]}),
            json!({"long_input": "split"}),
            json!({"precision": "float16"}),
            json!({"precision": 16}),
            json!([1]),
            json!("x"),
        ] {
            assert!(matches!(Options::from_json(&bad), Err(Error::InvalidOptions(_))), "{bad}");
        }
    }
}
