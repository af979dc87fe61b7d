//! A tokenizer's chat template, rendered as transformers renders it: Jinja (minijinja) with
//! `trim_blocks` and `lstrip_blocks`, the loop controls, a single final newline of the
//! template dropped (Jinja's `keep_trailing_newline` false), `raise_exception`, a `tojson` that
//! writes what Python's `json.dumps(ensure_ascii=False)` writes, Python's string and dict
//! methods (`.strip()`, `.items()`, ...), and the tokenizer's named special tokens
//! (`bos_token`, `eos_token`, ...) beside `messages`, as `apply_chat_template` passes them.

use std::path::{Path, PathBuf};

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Environment, ErrorKind};

use crate::error::{Error, Result};
use crate::files::read_json_opt;

/// The special tokens `apply_chat_template` passes to a template by name.
const NAMED_TOKENS: &[&str] = &["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"];

/// A chat message: its role and its content, as a flat string or (sentence-transformers'
/// "structured" format) a list of one text part.
pub struct Message<'a> {
    pub role: &'a str,
    pub content: &'a str,
}

/// A compiled chat template with the values it is rendered with besides the messages.
pub struct ChatTemplate {
    env: Environment<'static>,
    /// Where it was read from, and its text.
    pub path: PathBuf,
    pub source: String,
    /// The named special tokens and extra settings (sentence-transformers' chat_template
    /// kwargs), passed to every render.
    globals: Vec<(String, Value)>,
    /// Content as a list of `{"type": "text", "text": ...}` parts (sentence-transformers'
    /// "structured" message format) instead of a string.
    pub structured: bool,
}

impl ChatTemplate {
    /// The chat template of the tokenizer in `dir`: `chat_template.jinja` (where transformers
    /// 5 saves it), else tokenizer_config.json's `chat_template` (a string, or a list of named
    /// templates of which "default" is taken). None when there is none.
    pub fn read(dir: &Path) -> Result<Option<Self>> {
        let file = dir.join("chat_template.jinja");
        let config_path = dir.join("tokenizer_config.json");
        let config: Option<serde_json::Value> = read_json_opt(&config_path)?;
        let (source, path) = if file.exists() {
            (std::fs::read_to_string(&file).map_err(|e| Error::io(&file, e))?, file)
        } else {
            match config.as_ref().and_then(|c| c.get("chat_template")) {
                None | Some(serde_json::Value::Null) => return Ok(None),
                Some(serde_json::Value::String(s)) => (s.clone(), config_path.clone()),
                Some(serde_json::Value::Array(named)) => {
                    let default = named.iter().find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"));
                    match default.and_then(|t| t.get("template")).and_then(|t| t.as_str()) {
                        Some(s) => (s.to_string(), config_path.clone()),
                        None => return Err(Error::invalid_file(&config_path, "chat_template lists no template named \"default\"")),
                    }
                }
                Some(other) => return Err(Error::invalid_file(&config_path, format!("chat_template is not a string: {other}"))),
            }
        };
        let mut globals = Vec::new();
        for name in NAMED_TOKENS {
            // A token as a string, or as an AddedToken's dict with its "content".
            let token = config.as_ref().and_then(|c| c.get(*name)).and_then(|t| match t {
                serde_json::Value::String(s) => Some(s.clone()),
                other => other.get("content").and_then(|c| c.as_str()).map(str::to_string),
            });
            if let Some(token) = token {
                globals.push((name.to_string(), Value::from(token)));
            }
        }
        Ok(Some(ChatTemplate { env: environment(source.clone(), &path)?, path, source, globals, structured: false }))
    }

    /// Extra values every render sees (sentence-transformers' chat_template kwargs).
    pub fn with_values(mut self, values: &serde_json::Map<String, serde_json::Value>) -> Self {
        for (k, v) in values {
            self.globals.retain(|(name, _)| name != k);
            self.globals.push((k.clone(), json_value(v)));
        }
        self
    }

    /// The template rendered over `messages`, no generation prompt, no tools or documents.
    pub fn render(&self, messages: &[Message]) -> Result<String> {
        let messages: Vec<Value> = messages
            .iter()
            .map(|m| {
                let content = if self.structured {
                    Value::from(vec![Value::from_pairs([("type", Value::from("text")), ("text", Value::from(m.content))])])
                } else {
                    Value::from(m.content)
                };
                Value::from_pairs([("role", Value::from(m.role)), ("content", content)])
            })
            .collect();
        let mut context: Vec<(String, Value)> = vec![
            ("messages".into(), Value::from(messages)),
            ("add_generation_prompt".into(), Value::from(false)),
            ("tools".into(), Value::from(())),
            ("documents".into(), Value::from(())),
        ];
        for (k, v) in &self.globals {
            context.retain(|(name, _)| name != k);
            context.push((k.clone(), v.clone()));
        }
        let template = self.env.get_template("chat").map_err(|e| self.error(e))?;
        template.render(Value::from_pairs(context)).map_err(|e| self.error(e))
    }

    fn error(&self, e: minijinja::Error) -> Error {
        Error::invalid_file(&self.path, format!("the chat template failed: {e}"))
    }
}

/// The environment transformers compiles a chat template in, holding the template "chat".
fn environment(source: String, path: &Path) -> Result<Environment<'static>> {
    let mut env = Environment::new();
    let syntax = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .keep_trailing_newline(false)
        .build()
        .map_err(|e| Error::invalid_file(path, e))?;
    env.set_syntax(syntax);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", |message: String| -> std::result::Result<Value, minijinja::Error> {
        Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
    });
    env.add_filter("tojson", tojson);
    env.add_template_owned("chat", source)
        .map_err(|e| Error::invalid_file(path, format!("the chat template does not compile: {e}")))?;
    Ok(env)
}

/// transformers' `tojson`: `json.dumps(x, ensure_ascii=False)` with Python's separators
/// (`", "`, `": "`); `indent` and the other options are refused.
fn tojson(value: Value, kwargs: Kwargs) -> std::result::Result<String, minijinja::Error> {
    if let Some(key) = kwargs.args().next() {
        return Err(minijinja::Error::new(ErrorKind::InvalidOperation, format!("tojson's \"{key}\" is not supported")));
    }
    let mut out = String::new();
    write_json(&value, &mut out)?;
    Ok(out)
}

fn write_json(value: &Value, out: &mut String) -> std::result::Result<(), minijinja::Error> {
    let unsupported = || minijinja::Error::new(ErrorKind::InvalidOperation, format!("tojson cannot write {value}"));
    match value.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number if value.is_integer() => out.push_str(&value.to_string()),
        // Python's repr of a float: "2.0", not "2".
        ValueKind::Number => match f64::try_from(value.clone()) {
            Ok(f) if f.is_finite() && f.fract() == 0.0 && f.abs() < 1e16 => out.push_str(&format!("{f:.1}")),
            Ok(f) => out.push_str(&f.to_string()),
            Err(_) => return Err(unsupported()),
        },
        ValueKind::String => out.push_str(&serde_json::to_string(value.as_str().unwrap_or_default()).map_err(|_| unsupported())?),
        ValueKind::Seq | ValueKind::Iterable => {
            out.push('[');
            for (i, item) in value.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_json(&item, out)?;
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            for (i, key) in value.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                let name = key.as_str().map(str::to_string).unwrap_or_else(|| key.to_string());
                out.push_str(&serde_json::to_string(&name).map_err(|_| unsupported())?);
                out.push_str(": ");
                write_json(&value.get_item(&key)?, out)?;
            }
            out.push('}');
        }
        _ => return Err(unsupported()),
    }
    Ok(())
}

/// A JSON value as a template value.
fn json_value(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::from(()),
        serde_json::Value::Bool(b) => Value::from(*b),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Value::from(i),
            (None, Some(f)) => Value::from(f),
            _ => Value::from(n.to_string()),
        },
        serde_json::Value::String(s) => Value::from(s.as_str()),
        serde_json::Value::Array(items) => Value::from(items.iter().map(json_value).collect::<Vec<_>>()),
        serde_json::Value::Object(map) => Value::from_pairs(map.iter().map(|(k, v)| (k.as_str(), json_value(v))).collect::<Vec<_>>()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(source: &str) -> ChatTemplate {
        let env = environment(source.into(), Path::new("t")).unwrap();
        ChatTemplate { env, path: "t".into(), source: source.into(), globals: Vec::new(), structured: false }
    }

    #[test]
    fn jinja_drops_one_final_newline_and_trims_blocks() {
        let t = template("{% for m in messages %}\n  {{ m.role }}:{{ m.content.strip() }}\n{% endfor %}\n\n");
        let out = t.render(&[Message { role: "query", content: " a " }, Message { role: "document", content: "b" }]).unwrap();
        // What jinja2 gives with transformers' settings.
        assert_eq!(out, "  query:a\n  document:b\n");
    }

    #[test]
    fn tojson_as_python_writes_it() {
        let t = template("{{ {'a': [1, 2.0, 'é<'], 'b': none} | tojson }}");
        assert_eq!(t.render(&[]).unwrap(), r#"{"a": [1, 2.0, "é<"], "b": null}"#);
    }

    #[test]
    fn raise_exception_is_an_error_naming_the_file() {
        let t = template("{{ raise_exception('no roles') }}");
        let e = t.render(&[]).unwrap_err().to_string();
        assert!(e.contains("no roles") && e.contains("\"t\""), "{e}");
    }
}
