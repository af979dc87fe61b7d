//! The output of a causal-LM reranker (sentence-transformers' CrossEncoder over a
//! `*ForCausalLM`: Transformer(text-generation), then LogitScore): a (query, document) pair
//! rendered by the tokenizer's chat template (the roles "query" and "document", the model's
//! prompt as a "system" message before them), tokenized without special tokens, cut at
//! max_length with the template's closing tokens written back over the last ones, run through
//! the backbone; the score read at each input's own last token from the LM head's rows of the
//! true and false tokens (`crate::score_head::ScoreHead`).

use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;

use tokenizers::Tokenizer;

use super::batch::{in_batches, Packed};
use super::text::{Encoded, Text};
use super::Pipeline;
use crate::chat::{ChatTemplate, Message};
use crate::error::{Error, Result};
use crate::files::read_json_opt;
use crate::score_head::ScoreHead;
use crate::options::LongInput;
use crate::st::Layout;

/// A pair of probes per role whose contents differ (sentence-transformers' PAIR_ROLE_PROBES):
/// a template that renders a role's content moves when it changes.
const PROBES: [(&str, &str); 3] = [("alpha", "bravo"), ("charlie", "bravo"), ("alpha", "foxtrot")];

/// What in a template's text makes sentence-transformers pass message contents as lists of
/// typed parts (`InputFormatter._infer_format`), when the module's config does not say.
const STRUCTURED_PATTERNS: [&str; 6] = ["content[0]", ".type", "'type'", "\"type\"", "item.type", "message.content["];

/// How a causal-LM reranker's pairs become tokens, and how `rerank` reports its score.
pub(crate) struct ScoreOutput {
    template: ChatTemplate,
    /// The model's default prompt, rendered as a "system" message before the pair.
    prompt: Option<String>,
    /// The template's closing tokens, written back over the last tokens of a cut input.
    suffix: Vec<u32>,
    max_length: usize,
    /// sentence-transformers' activation_fn in `predict` (and `rerank`): Sigmoid or Identity.
    pub(super) sigmoid: bool,
}

impl ScoreOutput {
    /// The chat template of `bdir` with the Transformer module's chat-template kwargs, the
    /// message format, the default prompt and the activation of the model in `dir`; a
    /// template that does not carry the query and document roles is refused, as
    /// sentence-transformers refuses it.
    pub(super) fn load(layout: &Layout, (bdir, dir): (&Path, &Path), text: &Text, max_length: usize) -> Result<Self> {
        let template = ChatTemplate::read(bdir)?.ok_or_else(|| Error::MissingFile { path: bdir.join("chat_template.jinja") })?;
        let t = &layout.transformer;
        let mut kwargs = t
            .processing_kwargs
            .as_ref()
            .and_then(|p| p.get("chat_template"))
            .and_then(|c| c.as_object())
            .cloned()
            .unwrap_or_default();
        let restore = kwargs.remove("restore_suffix").map_or(Ok(true), |v| v.as_bool().ok_or(v));
        for key in ["padding", "truncation", "max_length", "return_tensors"] {
            kwargs.remove(key);
        }
        let settings = bdir.join("sentence_bert_config.json");
        let restore = restore.map_err(|v| Error::invalid_file(&settings, format!("restore_suffix {v} is not a boolean")))?;
        if !restore {
            return Err(Error::Unsupported {
                what: "chat_template restore_suffix",
                value: "false".into(),
                path: settings,
                supported: "true (the template's closing tokens written back over a cut input)",
            });
        }
        let format = t.modality_config.as_ref().and_then(|m| m.pointer("/message/format")).and_then(|f| f.as_str());
        let mut template = template.with_values(&kwargs);
        template.structured = match format {
            // Not saved: sentence-transformers infers it from the template's text.
            None => STRUCTURED_PATTERNS.iter().any(|p| template.source.contains(p)),
            Some("flat") => false,
            Some("structured") => true,
            Some(other) => {
                return Err(Error::Unsupported {
                    what: "message format",
                    value: other.into(),
                    path: settings,
                    supported: "flat, structured",
                })
            }
        };
        let prompts = &layout.prompts;
        let prompt = prompts.default_prompt_name.as_ref().and_then(|n| prompts.prompts.get(n)).filter(|p| !p.is_empty()).cloned();
        let sigmoid = activation(dir, bdir)?;
        let mut out = ScoreOutput { template, prompt, suffix: Vec::new(), max_length, sigmoid };
        out.check_roles()?;
        out.suffix = out.closing_tokens(text.untruncated()?)?;
        Ok(out)
    }

    /// The messages of a pair: the prompt as "system", then "query" and "document".
    fn render(&self, query: &str, document: &str) -> Result<String> {
        let mut messages = Vec::with_capacity(3);
        if let Some(p) = &self.prompt {
            messages.push(Message { role: "system", content: p });
        }
        messages.push(Message { role: "query", content: query });
        messages.push(Message { role: "document", content: document });
        self.template.render(&messages)
    }

    /// sentence-transformers' check: a template whose render does not change with a role's
    /// content would score inputs without the query or the document.
    fn check_roles(&self) -> Result<()> {
        let render = |(q, d): (&str, &str)| {
            self.template.render(&[Message { role: "query", content: q }, Message { role: "document", content: d }])
        };
        let base = render(PROBES[0])?;
        for (role, probe) in [("query", PROBES[1]), ("document", PROBES[2])] {
            if render(probe)? == base {
                return Err(Error::Unsupported {
                    what: "chat template",
                    value: format!("the '{role}' content does not reach the rendered prompt"),
                    path: self.template.path.clone(),
                    supported: "a template that renders the 'query' and 'document' roles of a pair",
                });
            }
        }
        Ok(())
    }

    /// The template's closing tokens: the longest common token suffix of the pair rendered
    /// with the fillers "0" and "1 2 3 4" (the prompt kept), none when the two renders do not
    /// differ (sentence-transformers' `_chat_template_suffix_ids`).
    fn closing_tokens(&self, tokenizer: &Tokenizer) -> Result<Vec<u32>> {
        let ids = |filler: &str| -> Result<Vec<u32>> {
            let enc = tokenizer.encode_fast(self.render(filler, filler)?, false).map_err(|e| Error::Tokenize(e.to_string()))?;
            Ok(enc.get_ids().to_vec())
        };
        let (first, second) = (ids("0")?, ids("1 2 3 4")?);
        let count = first.iter().rev().zip(second.iter().rev()).take_while(|(a, b)| a == b).count();
        Ok(if count > 0 && count < first.len().min(second.len()) { first[first.len() - count..].to_vec() } else { Vec::new() })
    }

    /// The token ids of a pair, and whether it was cut: the render tokenized without special
    /// tokens, the first max_length kept, the closing tokens written over the last ones of an
    /// input that reached max_length.
    fn encode(&self, tokenizer: &Tokenizer, query: &str, document: &str) -> Result<(Vec<u32>, usize)> {
        let enc = tokenizer.encode_fast(self.render(query, document)?, false).map_err(|e| Error::Tokenize(e.to_string()))?;
        let mut ids = enc.get_ids().to_vec();
        let full = ids.len();
        if ids.len() >= self.max_length {
            ids.truncate(self.max_length);
            let keep = self.suffix.len().min(ids.len());
            let at = ids.len() - keep;
            ids[at..].copy_from_slice(&self.suffix[self.suffix.len() - keep..]);
        }
        Ok((ids, full))
    }

    /// What `embed.model_info` shows of the score.
    pub(super) fn describe(&self, head: &ScoreHead) -> serde_json::Value {
        serde_json::json!({
            "type": "logit_score",
            "true_token_id": head.true_token_id,
            "false_token_id": head.false_token_id,
            "score": if head.false_token_id.is_some() { "logit(true) - logit(false) at the last token" } else { "logit(true) at the last token" },
            "head_rows": head.from,
            "chat_template": self.template.path,
            "prompt": self.prompt,
            "closing_tokens": self.suffix.len(),
            "rerank_activation": if self.sigmoid { "sigmoid" } else { "identity" },
        })
    }
}

/// The activation `predict` applies: config_sentence_transformers.json's `activation_fn`,
/// else config.json's `sentence_transformers.activation_fn`, else Sigmoid (one score).
fn activation(dir: &Path, bdir: &Path) -> Result<bool> {
    let at = |path: std::path::PathBuf, pointer: &str| -> Result<Option<(String, std::path::PathBuf)>> {
        let v: Option<serde_json::Value> = read_json_opt(&path)?;
        Ok(v.and_then(|v| v.pointer(pointer).and_then(|a| a.as_str()).map(str::to_string)).map(|a| (a, path)))
    };
    let found = match at(dir.join("config_sentence_transformers.json"), "/activation_fn")? {
        Some(a) => Some(a),
        None => at(bdir.join("config.json"), "/sentence_transformers/activation_fn")?,
    };
    match found {
        None => Ok(true),
        Some((a, _)) if a == "torch.nn.modules.activation.Sigmoid" => Ok(true),
        Some((a, _)) if a == "torch.nn.modules.linear.Identity" => Ok(false),
        Some((a, path)) => Err(Error::Unsupported {
            what: "cross-encoder activation_fn",
            value: a,
            path,
            supported: "torch.nn.modules.activation.Sigmoid, torch.nn.modules.linear.Identity",
        }),
    }
}

impl Pipeline {
    /// The token ids a causal-LM reranker computes a (query, document) pair from, as
    /// CrossEncoder gives them (without its left padding).
    pub fn tokenize_scored_pair(&self, query: &str, document: &str) -> Result<Vec<u32>> {
        let score = self.outputs.score().ok_or_else(|| self.outputs.wrong_output("tokenize_scored_pair"))?;
        Ok(score.encode(self.text()?.untruncated()?, query, document)?.0)
    }

    /// LogitScore's value of each pair (as a one-value row), in length-grouped batches; a
    /// single input (no pair) is refused: the template renders pairs.
    pub(super) fn score_batched(
        &self,
        score: &ScoreOutput,
        inputs: &[(&str, Option<&str>)],
        max_batch_tokens: usize,
        threads: usize,
        before_batch: &mut dyn FnMut() -> Result<()>,
    ) -> Result<Vec<Vec<f32>>> {
        let Some(head) = self.weights.score.as_ref() else { return Err(self.outputs.wrong_output("classify")) };
        let tokenizer = self.text()?.untruncated()?;
        let mut rows = Vec::with_capacity(inputs.len());
        for (query, document) in inputs {
            let Some(document) = document else {
                return Err(Error::InvalidArgument {
                    what: "input",
                    reason: "a causal-LM reranker scores (query, document) pairs: call classify(model, query, document) or rerank".into(),
                });
            };
            let (ids, full) = score.encode(tokenizer, query, document)?;
            if full > score.max_length {
                if self.long_input == LongInput::Error {
                    return Err(Error::InputTooLong { tokens: full, max_length: score.max_length });
                }
                self.stats.truncated.fetch_add(1, Relaxed);
            }
            rows.push(Encoded { ids, types: Vec::new(), skip: 0 });
        }
        let lengths: Vec<usize> = rows.iter().map(|r| r.ids.len()).collect();
        self.stats.count_call(inputs.len(), lengths.iter().sum());
        in_batches(&lengths, max_batch_tokens, threads, before_batch, |batch| {
            let packed = Packed::of(&batch.iter().map(|&i| &rows[i]).collect::<Vec<_>>());
            let batch = packed.batch();
            self.stats.forward_passes.fetch_add(1, Relaxed);
            let hidden = self.weights.backbone.forward(&batch).map_err(Error::inference)?;
            let h = self.hidden_size;
            // Each input's own last token: the batch is packed, never padded.
            let last: Vec<f32> = (0..batch.len()).flat_map(|i| hidden[(batch.bounds[i + 1] - 1) * h..batch.bounds[i + 1] * h].iter().copied()).collect();
            Ok(head.scores(&last).into_iter().map(|s| vec![s]).collect())
        })
    }
}
