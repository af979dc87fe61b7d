//! Property tests: random but consistent tiny BERT, RoBERTa / XLM-RoBERTa, DistilBERT
//! and ELECTRA configs with seeded random weights under the names the loaders read, the
//! tokenizer of tests/fixtures/pool_mean, and a random pooling; they load, give the stated
//! dimension and finite vectors, and batching changes nothing.

#![allow(unused_imports)]

mod guard;

use guard::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use proptest::prelude::*;
use serde_json::{json, Value};

use pg_embed_core::error::Error;
use pg_embed_core::options::Options;
use pg_embed_core::pipeline::Pipeline;

/// The pool_mean fixture's tokenizer: BERT WordPiece, 401 tokens, [PAD] = 0.
const VOCAB: usize = 401;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Arch {
    Bert,
    Roberta,
    XlmRoberta,
    DistilBert,
    Electra,
}

/// Where the pooling comes from.
#[derive(Debug, Clone)]
enum Pooling {
    /// No Pooling module: the default (mean).
    Default,
    /// A sentence-transformers 1_Pooling/config.json, 6.x style (`pooling_mode` list) or
    /// with the legacy flags.
    File { modes: Vec<&'static str>, legacy: bool },
    /// `options.pooling`.
    Options(Vec<&'static str>),
}

#[derive(Debug, Clone)]
struct TinyModel {
    arch: Arch,
    heads: usize,
    head_dim: usize,
    /// ELECTRA's embedding width (projected to the hidden size).
    embedding_size: usize,
    layers: usize,
    intermediate: usize,
    max_positions: usize,
    type_vocab: usize,
    act: &'static str,
    eps: f64,
    /// RoBERTa's padding index (positions start after it).
    pad: u32,
    /// The prefix of a *Model checkpoint saved from a task model ("bert.", ...).
    prefixed: bool,
    /// BERT's pooler weights.
    pooler: bool,
    pooling: Pooling,
    normalize: bool,
    mean_of_chunks: bool,
    seed: u64,
}

const ST_MODES: [&str; 6] = ["cls", "mean", "max", "mean_sqrt_len_tokens", "weightedmean", "lasttoken"];

fn tiny_model() -> impl Strategy<Value = TinyModel> {
    let arch = prop_oneof![
        Just(Arch::Bert),
        Just(Arch::Roberta),
        Just(Arch::XlmRoberta),
        Just(Arch::DistilBert),
        Just(Arch::Electra)
    ];
    let modes = proptest::sample::subsequence(ST_MODES.to_vec(), 1..4).prop_shuffle();
    let pooling = prop_oneof![
        Just(Pooling::Default),
        (modes.clone(), any::<bool>()).prop_map(|(modes, legacy)| Pooling::File { modes, legacy }),
        (modes, any::<bool>()).prop_map(|(mut modes, pooler)| {
            if pooler {
                modes.push("pooler");
            }
            Pooling::Options(modes)
        }),
    ];
    let shape = (arch, 1usize..=4, 2usize..=8, 2usize..=16, 1usize..=3, 1usize..=40, 8usize..=64, 1usize..=2);
    let settings = (
        proptest::sample::select(vec!["gelu", "gelu_new", "gelu_pytorch_tanh", "relu"]),
        proptest::sample::select(vec![1e-12, 1e-7, 1e-5, 1e-3]),
        0u32..=1,
        any::<bool>(),
        any::<bool>(),
        pooling,
        any::<bool>(),
        any::<bool>(),
        any::<u64>(),
    );
    (shape, settings).prop_map(
        |(
            (arch, heads, head_dim, embedding_size, layers, intermediate, max_positions, type_vocab),
            (act, eps, pad, prefixed, pooler, pooling, normalize, mean_of_chunks, seed),
        )| {
            let mut pooling = pooling;
            // Only BERT here carries a pooler; "pooler" pooling needs one.
            let pooler = pooler && arch == Arch::Bert;
            if let Pooling::Options(modes) = &mut pooling {
                if !pooler {
                    modes.retain(|m| *m != "pooler");
                }
            }
            TinyModel {
                arch,
                heads,
                head_dim,
                embedding_size,
                layers,
                intermediate,
                max_positions,
                type_vocab,
                act,
                eps,
                pad,
                prefixed,
                pooler,
                pooling,
                normalize,
                mean_of_chunks,
                seed,
            }
        },
    )
}

impl TinyModel {
    fn hidden(&self) -> usize {
        self.heads * self.head_dim
    }

    fn model_type(&self) -> &'static str {
        match self.arch {
            Arch::Bert => "bert",
            Arch::Roberta => "roberta",
            Arch::XlmRoberta => "xlm-roberta",
            Arch::DistilBert => "distilbert",
            Arch::Electra => "electra",
        }
    }

    fn config(&self) -> Value {
        let h = self.hidden();
        match self.arch {
            Arch::DistilBert => json!({
                "model_type": "distilbert",
                "architectures": ["DistilBertModel"],
                "vocab_size": VOCAB,
                "dim": h,
                "n_heads": self.heads,
                "n_layers": self.layers,
                "hidden_dim": self.intermediate,
                "activation": self.act,
                "max_position_embeddings": self.max_positions,
            }),
            _ => {
                let mut c = json!({
                    "model_type": self.model_type(),
                    "vocab_size": VOCAB,
                    "hidden_size": h,
                    "num_attention_heads": self.heads,
                    "num_hidden_layers": self.layers,
                    "intermediate_size": self.intermediate,
                    "hidden_act": self.act,
                    "max_position_embeddings": self.max_positions,
                    "type_vocab_size": self.type_vocab,
                    "layer_norm_eps": self.eps,
                    "pad_token_id": if matches!(self.arch, Arch::Roberta | Arch::XlmRoberta) { self.pad } else { 0 },
                });
                if self.arch == Arch::Electra {
                    c["embedding_size"] = self.embedding_size.into();
                }
                c
            }
        }
    }

    /// Seeded random weights under the names the loader reads.
    fn weights(&self) -> HashMap<String, Tensor> {
        let (h, ff) = (self.hidden(), self.intermediate);
        let prefix = match (self.prefixed, self.arch) {
            (false, _) => "",
            (true, Arch::Bert) => "bert.",
            (true, Arch::Roberta | Arch::XlmRoberta) => "roberta.",
            (true, Arch::DistilBert) => "distilbert.",
            (true, Arch::Electra) => "electra.",
        };
        let mut w = Weights { tensors: HashMap::new(), noise: Noise(self.seed), prefix };
        let width = if self.arch == Arch::Electra { self.embedding_size } else { h };
        w.put("embeddings.word_embeddings.weight", &[VOCAB, width], 0.0, 0.5);
        w.put("embeddings.position_embeddings.weight", &[self.max_positions, width], 0.0, 0.5);
        if self.arch != Arch::DistilBert {
            w.put("embeddings.token_type_embeddings.weight", &[self.type_vocab, width], 0.0, 0.5);
        }
        w.norm("embeddings.LayerNorm", width);
        if self.arch == Arch::Electra && width != h {
            w.linear("embeddings_project", h, width);
        }
        for i in 0..self.layers {
            if self.arch == Arch::DistilBert {
                let l = format!("transformer.layer.{i}");
                for part in ["q_lin", "k_lin", "v_lin", "out_lin"] {
                    w.linear(&format!("{l}.attention.{part}"), h, h);
                }
                w.norm(&format!("{l}.sa_layer_norm"), h);
                w.linear(&format!("{l}.ffn.lin1"), ff, h);
                w.linear(&format!("{l}.ffn.lin2"), h, ff);
                w.norm(&format!("{l}.output_layer_norm"), h);
            } else {
                let l = format!("encoder.layer.{i}");
                for part in ["query", "key", "value"] {
                    w.linear(&format!("{l}.attention.self.{part}"), h, h);
                }
                w.linear(&format!("{l}.attention.output.dense"), h, h);
                w.norm(&format!("{l}.attention.output.LayerNorm"), h);
                w.linear(&format!("{l}.intermediate.dense"), ff, h);
                w.linear(&format!("{l}.output.dense"), h, ff);
                w.norm(&format!("{l}.output.LayerNorm"), h);
            }
        }
        if self.pooler {
            w.linear("pooler.dense", h, h);
        }
        w.tensors
    }

    /// The model directory: config.json, model.safetensors, the fixture's tokenizer, and
    /// modules.json with 1_Pooling and Normalize as the case says.
    fn write(&self, dir: &Path) {
        let write_json = |path: PathBuf, value: &Value| std::fs::write(path, value.to_string()).unwrap();
        write_json(dir.join("config.json"), &self.config());
        candle_core::safetensors::save(&self.weights(), dir.join("model.safetensors")).unwrap();
        std::fs::copy(fixtures().join("pool_mean/tokenizer.json"), dir.join("tokenizer.json")).unwrap();
        let mut modules = vec![
            json!({"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}),
        ];
        if let Pooling::File { modes, legacy } = &self.pooling {
            std::fs::create_dir_all(dir.join("1_Pooling")).unwrap();
            let config = if *legacy {
                let mut c = json!({"word_embedding_dimension": self.hidden()});
                for (flag, mode) in [
                    ("pooling_mode_cls_token", "cls"),
                    ("pooling_mode_mean_tokens", "mean"),
                    ("pooling_mode_max_tokens", "max"),
                    ("pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len_tokens"),
                    ("pooling_mode_weightedmean_tokens", "weightedmean"),
                    ("pooling_mode_lasttoken", "lasttoken"),
                ] {
                    c[flag] = modes.contains(&mode).into();
                }
                c
            } else {
                json!({"embedding_dimension": self.hidden(), "pooling_mode": modes, "include_prompt": true})
            };
            write_json(dir.join("1_Pooling/config.json"), &config);
            modules.push(json!({"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}));
        }
        if self.normalize {
            let idx = modules.len();
            modules.push(json!({"idx": idx, "name": idx.to_string(), "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}));
        }
        if modules.len() > 1 {
            write_json(dir.join("modules.json"), &Value::Array(modules));
        }
    }

    fn options(&self) -> Options {
        let mut o = json!({});
        if let Pooling::Options(modes) = &self.pooling {
            o["pooling"] = json!(modes);
        }
        if self.mean_of_chunks {
            o["long_input"] = "mean_of_chunks".into();
        }
        Options::from_json(&o).unwrap()
    }

    /// The output width the config implies: the hidden size once per pooling mode.
    fn dim(&self) -> usize {
        match &self.pooling {
            Pooling::Default => self.hidden(),
            Pooling::File { modes, .. } | Pooling::Options(modes) => modes.len() * self.hidden(),
        }
    }
}

proptest! {
    // A fixed seed: the same cases on every run (a failure is reproducible as it is).
    #![proptest_config(ProptestConfig {
        cases: 128,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0xf022_0de1_5eed),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn valid_random_models_load_and_embed(
        model in tiny_model(),
        extra in proptest::collection::vec("\\PC{0,60}", 0..3),
    ) {
        let tmp = TempDir::new("valid");
        model.write(&tmp.0);
        let mut texts = fixed_texts();
        texts.extend(extra);
        let case = format!("{model:?}");
        let (dir, options, inputs) = (tmp.0.clone(), model.options(), texts.clone());
        let outcome = guarded(&case, move || load_and_embed(&dir, &options, &inputs));
        let e = match outcome {
            Err(failure) => return Err(TestCaseError::fail(format!("{failure}\ncase: {case}"))),
            Ok(Err(error)) => return Err(TestCaseError::fail(format!("{error}\ncase: {case}"))),
            Ok(Ok(e)) => e,
        };
        prop_assert_eq!(e.dim, model.dim(), "case: {}", case);
        for (i, text) in texts.iter().enumerate() {
            let v = &e.one_by_one[i];
            prop_assert_eq!(v.len(), e.dim, "{:?}; case: {}", text, case);
            prop_assert!(v.iter().all(|x| x.is_finite()), "{:?} -> {:?}; case: {}", text, v, case);
            if model.normalize {
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                prop_assert!((norm - 1.0).abs() < 1e-4, "{:?}: norm {}; case: {}", text, norm, case);
            }
            for (how, other) in [("in one call", &e.together[i]), ("in batches", &e.batched[i])] {
                let d = max_difference(v, other);
                prop_assert!(other.len() == v.len() && d <= 1e-5, "{:?}: {} differs by {}; case: {}", text, how, d, case);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Property 2: damaged real fixtures.
