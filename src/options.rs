//! `options jsonb` of `embed.register_model`: user overrides of what the model files say.
//! Unknown keys are rejected, never ignored.

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
        assert_eq!(
            Options::from_json(&json!({"pooling": "max"})).unwrap().pooling.unwrap().to_vec(),
            vec!["max"]
        );
    }

    #[test]
    fn rejects_unknown_keys_and_bad_values() {
        let err = Options::from_json(&json!({"polling": "cls"})).unwrap_err().to_string();
        assert!(err.contains("unknown field `polling`"), "{err}");
        for bad in [json!({"normalize": "yes"}), json!({"max_length": -1}), json!([1]), json!("x")] {
            assert!(matches!(Options::from_json(&bad), Err(Error::InvalidOptions(_))), "{bad}");
        }
    }
}
