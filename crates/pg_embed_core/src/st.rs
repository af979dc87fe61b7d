//! The sentence-transformers directory layout, parsed as it is stored:
//! modules.json, sentence_bert_config.json and each module's folder.
//! A directory without modules.json is a plain Hugging Face backbone.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::files::{read_json, read_json_opt};
use crate::pooling::PoolingMode;

mod model2vec;
pub use model2vec::Model2VecConfig;
use model2vec::model2vec_config;

/// One entry of modules.json.
#[derive(Debug, Deserialize)]
struct ModuleEntry {
    #[serde(default)]
    path: String,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Transformer,
    Pooling,
    Dense,
    Normalize,
    /// A token embedding table averaged (sentence-transformers' StaticEmbedding).
    StaticEmbedding,
    /// A transformer with its masked-language-model head (SparseEncoder's MLMTransformer).
    MlmTransformer,
    SpladePooling,
    /// The query side of an inference-free sparse encoder: one weight per token.
    SparseStaticEmbedding,
    /// Routes inputs to module lists by task: an inference-free sparse encoder (the only
    /// module), or Dense heads per route after pooling (an asymmetric dense model;
    /// `models.Asym` before sentence-transformers 5).
    Router,
    /// PyLate's Dense: a projection of every token (a ColBERT model, no pooling).
    TokenDense,
    /// A top-k sparse autoencoder over the sentence embedding (CSR).
    SparseAutoEncoder,
    /// A score from a causal LM's logits of a true and a false token (a CrossEncoder reranker).
    LogitScore,
}

/// Module class paths as modules.json stores them: sentence-transformers < 6 and 6.x.
const MODULES: &[(&str, Kind)] = &[
    ("sentence_transformers.models.Transformer", Kind::Transformer),
    ("sentence_transformers.base.modules.transformer.Transformer", Kind::Transformer),
    ("sentence_transformers.models.Pooling", Kind::Pooling),
    ("sentence_transformers.sentence_transformer.modules.pooling.Pooling", Kind::Pooling),
    ("sentence_transformers.models.Dense", Kind::Dense),
    ("sentence_transformers.base.modules.dense.Dense", Kind::Dense),
    ("sentence_transformers.models.Normalize", Kind::Normalize),
    ("sentence_transformers.base.modules.normalize.Normalize", Kind::Normalize),
    ("sentence_transformers.models.StaticEmbedding", Kind::StaticEmbedding),
    ("sentence_transformers.sentence_transformer.modules.static_embedding.StaticEmbedding", Kind::StaticEmbedding),
    ("sentence_transformers.sparse_encoder.models.MLMTransformer", Kind::MlmTransformer),
    ("sentence_transformers.sparse_encoder.modules.mlm_transformer.MLMTransformer", Kind::MlmTransformer),
    ("sentence_transformers.sparse_encoder.models.SpladePooling", Kind::SpladePooling),
    ("sentence_transformers.sparse_encoder.modules.splade_pooling.SpladePooling", Kind::SpladePooling),
    ("sentence_transformers.sparse_encoder.models.SparseStaticEmbedding", Kind::SparseStaticEmbedding),
    (
        "sentence_transformers.sparse_encoder.modules.sparse_static_embedding.SparseStaticEmbedding",
        Kind::SparseStaticEmbedding,
    ),
    // sentence-transformers' own CLIP module (before 5.4): the whole CLIP model in its
    // folder, text and image features as the multimodal Transformer of 5.4 and later gives.
    ("sentence_transformers.models.CLIPModel", Kind::Transformer),
    ("sentence_transformers.models.Router", Kind::Router),
    ("sentence_transformers.base.modules.router.Router", Kind::Router),
    // sentence-transformers < 5 (5 and later: an alias of Router).
    ("sentence_transformers.models.Asym", Kind::Router),
    ("sentence_transformers.sparse_encoder.models.SparseAutoEncoder", Kind::SparseAutoEncoder),
    ("sentence_transformers.sparse_encoder.modules.sparse_auto_encoder.SparseAutoEncoder", Kind::SparseAutoEncoder),
    // PyLate (ColBERT): Dense projections of the token embeddings.
    ("pylate.models.Dense.Dense", Kind::TokenDense),
    ("sentence_transformers.cross_encoder.modules.logit_score.LogitScore", Kind::LogitScore),
];
const SUPPORTED_MODULES: &str = "Transformer, Pooling, Dense, Normalize, StaticEmbedding, CLIPModel, MLMTransformer, \
     SpladePooling, SparseAutoEncoder, a Router of SparseStaticEmbedding and MLMTransformer + SpladePooling, and a Router \
     (or Asym) of Dense modules per route after Pooling \
     (sentence_transformers.models.* and sparse_encoder.models.* or their 6.x paths), and PyLate's Dense \
     (pylate.models.Dense.Dense) after a Transformer, and LogitScore after a Transformer (text-generation)";
/// The kind of a module class path: one of [`MODULES`], or another path of
/// sentence-transformers ending in the same class name (the modules moved between releases:
/// `models.X`, `sparse_encoder.models.X`, `base.modules.x.X`, ...).
fn kind_of_class(class: &str) -> Option<Kind> {
    if let Some((_, kind)) = MODULES.iter().find(|(path, _)| *path == class) {
        return Some(*kind);
    }
    let name = class.strip_prefix("sentence_transformers.")?.rsplit('.').next()?;
    MODULES.iter().find(|(path, _)| path.rsplit('.').next() == Some(name)).map(|(_, kind)| *kind)
}

/// jinaai's jina-embeddings-v3 names its Transformer module `custom_st.Transformer` (Hub code
/// that picks a LoRA task per call): read as the Transformer where the module's config.json
/// is jinaai's original layout (`lora_adaptations`), whose tasks `crate::lora` computes.
fn jina_custom(dir: &Path, module: &ModuleEntry) -> Option<Kind> {
    if module.kind != "custom_st.Transformer" {
        return None;
    }
    let config: serde_json::Value = read_json_opt(&dir.join(&module.path).join("config.json")).ok().flatten()?;
    crate::lora::folders::original_tasks(&config).is_some().then_some(Kind::Transformer)
}

/// The module sequences pg_embed computes.
const SUPPORTED_ORDERS: &str = "Transformer, then Pooling, Dense..., Normalize; StaticEmbedding, then \
     Dense..., Normalize; either with one Router (or Asym) of Dense modules per route among the Dense \
     modules; Transformer (transformer_task fill-mask) or MLMTransformer, then SpladePooling; \
     a Router of SparseStaticEmbedding (query) and MLMTransformer + SpladePooling (document); \
     Transformer, then PyLate's Dense modules (ColBERT); Transformer, then Pooling, Dense..., Normalize, \
     SparseAutoEncoder (CSR, the last module); Transformer (transformer_task text-generation), then \
     LogitScore (a causal-LM reranker)";
/// What the routes of a Router after pooling may hold.
const SUPPORTED_DENSE_ROUTES: &str = "routes of Dense modules only (sentence_embedding in and out), chosen by \
     task; an input module (Transformer, StaticEmbedding) per route is computed only as the inference-free \
     sparse Router";
/// The Transformer module's `transformer_task` values pg_embed computes.
const SUPPORTED_TASKS: &str = "feature-extraction (hidden states), fill-mask (masked-LM logits for \
     SpladePooling), sequence-classification (the classification head of config.json), text-generation (a causal \
     LM's logits for LogitScore)";

/// sentence_bert_config.json (the Transformer module's own settings).
#[derive(Debug, Default, Deserialize)]
pub struct TransformerConfig {
    pub max_seq_length: Option<usize>,
    #[serde(default)]
    pub do_lower_case: bool,
    /// sentence-transformers >= 5.4: what the module computes ("fill-mask": a masked-LM
    /// head, as MLMTransformer; none or "feature-extraction": hidden states).
    pub transformer_task: Option<String>,
    /// Settings of the processor (text-generation: the chat template's kwargs).
    #[serde(default)]
    pub processing_kwargs: Option<serde_json::Map<String, serde_json::Value>>,
    /// The modalities and, for "message", its format ("flat" or "structured").
    #[serde(default)]
    pub modality_config: Option<serde_json::Value>,
}

impl TransformerConfig {
    /// The module's config in `folder`; whether its task is the masked-LM one. A task
    /// pg_embed does not compute is refused (0A000) naming it.
    fn read(folder: &Path) -> Result<(Self, bool)> {
        let path = folder.join("sentence_bert_config.json");
        let config: TransformerConfig = read_json_opt(&path)?.unwrap_or_default();
        let masked_lm = match config.transformer_task.as_deref() {
            None | Some("feature-extraction" | "sequence-classification" | "text-generation") => false,
            Some("fill-mask") => true,
            Some(other) => {
                return Err(Error::Unsupported {
                    what: "transformer_task",
                    value: other.to_string(),
                    path,
                    supported: SUPPORTED_TASKS,
                })
            }
        };
        Ok((config, masked_lm))
    }
}

/// 1_Pooling/config.json (`sentence_transformers.models.Pooling`).
#[derive(Debug, Deserialize)]
/// Two formats exist: sentence-transformers < 6 stores one boolean per mode
/// (`pooling_mode_cls_token`, ...), concatenated in a fixed order; 6.x stores
/// `pooling_mode` (a name or a list, concatenated in the order listed) and renames
/// `word_embedding_dimension` to `embedding_dimension`.
pub struct PoolingConfig {
    #[serde(alias = "embedding_dimension")]
    pub word_embedding_dimension: Option<usize>,
    #[serde(default)]
    pub pooling_mode: Option<crate::options::OneOrMany>,
    #[serde(default)]
    pub pooling_mode_cls_token: bool,
    #[serde(default)]
    pub pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pub pooling_mode_max_tokens: bool,
    #[serde(default)]
    pub pooling_mode_mean_sqrt_len_tokens: bool,
    #[serde(default)]
    pub pooling_mode_weightedmean_tokens: bool,
    #[serde(default)]
    pub pooling_mode_lasttoken: bool,
    /// Whether prompt tokens take part in pooling (instructor-style models say false).
    #[serde(default = "yes")]
    pub include_prompt: bool,
}

fn yes() -> bool {
    true
}

/// config_sentence_transformers.json: the model's named prompts.
#[derive(Debug, Default, Deserialize)]
pub struct ModelConfig {
    #[serde(default)]
    pub prompts: BTreeMap<String, String>,
    #[serde(default)]
    pub default_prompt_name: Option<String>,
    /// A SparseEncoder's default `max_active_dims` (a CSR model's: the autoencoder's k).
    #[serde(default)]
    pub max_active_dims: Option<usize>,
}

/// A Pooling module as resolved from its config.json.
#[derive(Debug)]
pub struct PoolingModule {
    pub modes: Vec<PoolingMode>,
    /// `word_embedding_dimension`: must equal the backbone's hidden size.
    pub dimension: Option<usize>,
    pub include_prompt: bool,
    pub path: PathBuf,
}

/// What the first module computes per token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoder {
    /// A transformer's last hidden states (Transformer; a folder without modules.json).
    Transformer,
    /// A transformer's masked-language-model logits over the vocabulary (MLMTransformer).
    MaskedLm,
    /// Rows of a token embedding table: sentence-transformers' StaticEmbedding.
    Static,
    /// The same, as model2vec saves and computes it (see [`Layout::read`]).
    Model2Vec,
}

/// SpladePooling's config.json.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
pub struct SpladeConfig {
    /// "max" or "sum" over the tokens.
    #[serde(default = "splade_max")]
    pub pooling_strategy: String,
    /// "relu": log(1 + relu(x)); "log1p_relu": log(1 + log(1 + relu(x))).
    #[serde(default = "splade_relu")]
    pub activation_function: String,
    /// Saved as null by sentence-transformers (the vocabulary size comes from the MLM head).
    #[serde(default)]
    pub embedding_dimension: Option<usize>,
}

fn splade_max() -> String {
    "max".into()
}

fn splade_relu() -> String {
    "relu".into()
}

/// The sparse side of a SparseEncoder directory.
/// PyLate's settings, as `ColBERT.save` writes them into config_sentence_transformers.json.
/// A missing key takes PyLate's default.
#[derive(Debug, Default, Deserialize)]
pub struct ColbertConfig {
    pub query_prefix: Option<String>,
    pub document_prefix: Option<String>,
    pub query_length: Option<usize>,
    pub document_length: Option<usize>,
    pub attend_to_expansion_tokens: Option<bool>,
    pub do_query_expansion: Option<bool>,
    pub skiplist_words: Option<Vec<String>>,
}

#[derive(Debug)]
pub struct SparseLayout {
    /// The SpladePooling module after the MLMTransformer.
    pub pooling: SpladeConfig,
    pub pooling_path: PathBuf,
    /// An inference-free model's query route (a Router): its name and its
    /// SparseStaticEmbedding folder.
    pub query: Option<(String, PathBuf)>,
    /// The Router's route names: the document route (the MLM one), and the route taken when
    /// no task is given (`default_route`).
    pub document_route: Option<String>,
    pub default_route: Option<String>,
}

/// A Router after pooling (an asymmetric dense model): Dense modules per route, the route
/// picked by task (`encode_query`, `encode_document`, `encode(task=...)`).
/// sentence-transformers 5 and later save it as `N_Router/router_config.json` with
/// `<route>_<i>_Dense/` folders; 3.x and 4.x as `models.Asym`, `N_Asym/config.json`.
#[derive(Debug)]
pub struct DenseRouter {
    /// The module's class path, as modules.json names it.
    pub class: String,
    /// The config it was read from (router_config.json, or an Asym's config.json).
    pub path: PathBuf,
    /// Each route's name and Dense module folders, in the order the config lists them.
    pub routes: Vec<(String, Vec<PathBuf>)>,
    /// The route a call that names none takes: a Router's `default_route`, or its first
    /// route when that is null and `allow_empty_key` is true (what sentence-transformers 5
    /// and 6 do); for an Asym its `document` route. None for a Router without either.
    pub default_route: Option<String>,
    /// Where `default_route` came from (or why there is none), for model_info.
    pub default_from: &'static str,
    /// Saved by sentence-transformers < 5 (`models.Asym`, config.json): there an input
    /// without a route key passes the Asym untouched (no route's heads: a vector of the
    /// pooling's width), which pg_embed does not give; a call that names no route takes the
    /// `document` route, as the 5.x / 6.x layout of the same model does.
    pub legacy_asym: bool,
    /// How many of the layout's `dense` modules come before the Router (the rest after it).
    pub after_dense: usize,
}

/// A Router's (or Asym's) config: router_config.json, else (sentence-transformers < 5)
/// config.json, as sentence-transformers 5 and 6 read it.
struct RouterConfig {
    path: PathBuf,
    legacy: bool,
    types: BTreeMap<String, String>,
    /// Routes in the order listed (the first is the default of a Router without one).
    structure: Vec<(String, Vec<String>)>,
    default_route: Option<String>,
    allow_empty_key: bool,
    route_mappings: serde_json::Map<String, serde_json::Value>,
}

impl RouterConfig {
    fn read(folder: &Path) -> Result<Self> {
        #[derive(Deserialize)]
        struct Raw {
            types: BTreeMap<String, String>,
            structure: Ordered<Vec<String>>,
            #[serde(default)]
            parameters: Parameters,
        }
        #[derive(Deserialize)]
        struct Parameters {
            default_route: Option<String>,
            #[serde(default = "yes")]
            allow_empty_key: bool,
            #[serde(default)]
            route_mappings: Option<serde_json::Map<String, serde_json::Value>>,
        }
        impl Default for Parameters {
            fn default() -> Self {
                Parameters { default_route: None, allow_empty_key: true, route_mappings: None }
            }
        }
        let mut path = folder.join("router_config.json");
        let mut legacy = false;
        if !path.exists() && folder.join("config.json").exists() {
            path = folder.join("config.json");
            legacy = true;
        }
        let raw: Raw = read_json(&path)?;
        if raw.structure.0.is_empty() {
            return Err(Error::invalid_file(&path, "the Router has no routes"));
        }
        for (route, modules) in &raw.structure.0 {
            if let Some(m) = modules.iter().find(|m| !raw.types.contains_key(*m)) {
                return Err(Error::invalid_file(&path, format!("route \"{route}\" names module \"{m}\", which \"types\" does not list")));
            }
        }
        let p = raw.parameters;
        if let Some(route) = p.default_route.as_ref().filter(|r| !raw.structure.0.iter().any(|(n, _)| n == *r)) {
            return Err(Error::invalid_file(&path, format!("default_route \"{route}\" is not a route")));
        }
        Ok(RouterConfig {
            path,
            legacy,
            types: raw.types,
            structure: raw.structure.0,
            default_route: p.default_route,
            allow_empty_key: p.allow_empty_key,
            route_mappings: p.route_mappings.unwrap_or_default(),
        })
    }

    fn kind(&self, module: &str) -> Option<Kind> {
        kind_of_class(self.types.get(module).map(String::as_str).unwrap_or_default())
    }

    /// A route's modules as their class paths.
    fn classes(&self, modules: &[String]) -> String {
        let classes: Vec<&str> = modules.iter().map(|m| self.types.get(m).map_or(m.as_str(), String::as_str)).collect();
        classes.join(", ")
    }
}

/// A JSON object read as its (key, value) pairs in the order written (serde_json's map
/// sorts its keys).
struct Ordered<V>(Vec<(String, V)>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Ordered<V> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Pairs<V>(std::marker::PhantomData<V>);
        impl<'de, V: Deserialize<'de>> serde::de::Visitor<'de> for Pairs<V> {
            type Value = Ordered<V>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> std::result::Result<Ordered<V>, A::Error> {
                let mut pairs: Vec<(String, V)> = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, V>()? {
                    // A key given twice: the last one wins, in the first one's place (as Python's dict).
                    match pairs.iter_mut().find(|(name, _)| *name == k) {
                        Some(pair) => pair.1 = v,
                        None => pairs.push((k, v)),
                    }
                }
                Ok(Ordered(pairs))
            }
        }
        d.deserialize_map(Pairs(std::marker::PhantomData))
    }
}

/// What a sentence-transformers directory says about the pipeline.
#[derive(Debug)]
pub struct Layout {
    /// What the first module is.
    pub encoder: Encoder,
    /// SpladePooling and the Router's query side (sparse encoders).
    pub sparse: Option<SparseLayout>,
    /// model2vec's config.json (`normalize`, `max_length`), for a model2vec folder.
    pub model2vec: Option<Model2VecConfig>,
    /// Folder holding config.json, the weights and the tokenizer.
    pub backbone_dir: PathBuf,
    pub transformer: TransformerConfig,
    /// The Pooling module, if there is one.
    pub pooling: Option<PoolingModule>,
    /// Dense module folders, in pipeline order (a Router's routes not included).
    pub dense: Vec<PathBuf>,
    /// A Router (or Asym) of Dense modules per route, among the Dense modules.
    pub router: Option<DenseRouter>,
    pub normalize: bool,
    /// Named prompts and the default prompt name (config_sentence_transformers.json).
    pub prompts: ModelConfig,
    /// A ColBERT model as PyLate saves it: its Dense folders (projections of every token)
    /// and its settings (config_sentence_transformers.json).
    pub colbert: Option<(Vec<PathBuf>, ColbertConfig)>,
    /// A multi-vector model as sentence-transformers' MultiVectorEncoder reads it.
    pub multi_vector: Option<crate::multivector::MultiVectorLayout>,
    /// A CSR model's SparseAutoEncoder folder, after the dense modules.
    pub autoencoder: Option<PathBuf>,
    /// A causal-LM reranker's LogitScore module (after a text-generation Transformer).
    pub logit_score: Option<crate::logit_score::LogitScoreModule>,
}

impl Layout {
    /// Reads modules.json and the modules' configs. A folder without modules.json is a
    /// plain Hugging Face backbone, or a model2vec model (its config.json has no
    /// `model_type`). A model2vec folder is computed as model2vec computes it even when
    /// it ships a modules.json for sentence-transformers: its tokenizer truncates at
    /// config.json's `max_length`, the unknown token is dropped before the mean, and
    /// config.json's `normalize` decides the normalisation.
    pub fn read(dir: &Path) -> Result<Self> {
        let modules_path = dir.join("modules.json");
        let model2vec = model2vec_config(dir)?;
        let empty = |encoder| Layout {
            encoder,
            sparse: None,
            model2vec: None,
            backbone_dir: dir.to_path_buf(),
            transformer: TransformerConfig::default(),
            pooling: None,
            dense: Vec::new(),
            router: None,
            normalize: false,
            prompts: ModelConfig::default(),
            colbert: None,
            multi_vector: None,
            autoencoder: None,
            logit_score: None,
        };
        if let Some(config) = model2vec {
            let normalize = config.normalize;
            return Ok(Layout { model2vec: Some(config), normalize, ..empty(Encoder::Model2Vec) });
        }
        let Some(modules) = read_json_opt::<Vec<ModuleEntry>>(&modules_path)? else {
            if let Some(mv) = crate::multivector::read_stanford(dir)? {
                return Ok(Layout { multi_vector: Some(mv), ..empty(Encoder::Transformer) });
            }
            return Ok(Layout {
                transformer: read_json_opt(&dir.join("sentence_bert_config.json"))?.unwrap_or_default(),
                ..empty(Encoder::Transformer)
            });
        };
        let classes: Vec<&str> = modules.iter().map(|m| m.kind.as_str()).collect();
        if crate::multivector::is_native(dir, &classes)? {
            let folders = modules.iter().map(|m| Ok((safe_join(dir, &m.path, &modules_path)?, m.kind.clone())));
            let mv = crate::multivector::read_native(dir, &folders.collect::<Result<Vec<_>>>()?, &modules_path)?;
            let (transformer, backbone_dir) = (TransformerConfig::read(&mv.transformer_dir)?.0, mv.transformer_dir.clone());
            return Ok(Layout { multi_vector: Some(mv), transformer, backbone_dir, ..empty(Encoder::Transformer) });
        }
        let mut layout = Layout {
            prompts: read_json_opt(&dir.join("config_sentence_transformers.json"))?.unwrap_or_default(),
            ..empty(Encoder::Transformer)
        };
        let kind_of = |module: &ModuleEntry| kind_of_class(&module.kind).or_else(|| jina_custom(dir, module));
        if let [only] = modules.as_slice() {
            if kind_of(only) == Some(Kind::Router) {
                layout.read_router(&safe_join(dir, &only.path, &modules_path)?)?;
                return Ok(layout);
            }
        }
        let mut seen_transformer = false;
        let sequence = |value| Error::Unsupported {
            what: "module sequence",
            value,
            path: modules_path.clone(),
            supported: SUPPORTED_ORDERS,
        };
        for (i, module) in modules.iter().enumerate() {
            let folder = safe_join(dir, &module.path, &modules_path)?;
            let kind = kind_of(module);
            // The SparseAutoEncoder's output is the model's: nothing may follow it.
            if kind.is_some() && layout.autoencoder.is_some() {
                return Err(sequence(format!("{} at position {i} of {}", module.kind, class_list(&modules))));
            }
            match kind {
                Some(Kind::Transformer | Kind::MlmTransformer) if i == 0 => {
                    seen_transformer = true;
                    let (config, masked_lm) = TransformerConfig::read(&folder)?;
                    layout.transformer = config;
                    layout.backbone_dir = folder;
                    if masked_lm || kind == Some(Kind::MlmTransformer) {
                        layout.encoder = Encoder::MaskedLm;
                    }
                }
                Some(Kind::StaticEmbedding) if i == 0 => {
                    seen_transformer = true;
                    layout.encoder = Encoder::Static;
                    layout.backbone_dir = folder;
                }
                Some(Kind::SpladePooling) if layout.encoder == Encoder::MaskedLm && layout.sparse.is_none() => {
                    let path = folder.join("config.json");
                    layout.sparse = Some(SparseLayout {
                        pooling: read_json(&path)?,
                        pooling_path: path,
                        query: None,
                        document_route: None,
                        default_route: None,
                    });
                }
                // Dense heads per route after pooling (an asymmetric dense model).
                Some(Kind::Router)
                    if (layout.pooling.is_some() || layout.encoder == Encoder::Static)
                        && layout.router.is_none()
                        && !layout.normalize =>
                {
                    layout.router = Some(read_dense_router(&folder, &module.kind, layout.dense.len())?)
                }
                // A StaticEmbedding pools (its mean) itself.
                Some(Kind::Dense)
                    if (layout.pooling.is_some() || layout.encoder == Encoder::Static) && !layout.normalize =>
                {
                    layout.dense.push(folder)
                }
                Some(Kind::Pooling)
                    if layout.encoder == Encoder::Transformer
                        && seen_transformer
                        && layout.pooling.is_none()
                        && !layout.normalize =>
                {
                    let path = folder.join("config.json");
                    let cfg: PoolingConfig = read_json(&path)?;
                    let modes = pooling_modes(&cfg, &path)?;
                    layout.pooling = Some(PoolingModule {
                        modes,
                        dimension: cfg.word_embedding_dimension,
                        include_prompt: cfg.include_prompt,
                        path,
                    });
                }
                Some(Kind::TokenDense)
                    if layout.encoder == Encoder::Transformer
                        && seen_transformer
                        && layout.pooling.is_none()
                        && layout.dense.is_empty()
                        && !layout.normalize =>
                {
                    let path = dir.join("config_sentence_transformers.json");
                    match &mut layout.colbert {
                        Some((folders, _)) => folders.push(folder),
                        None => layout.colbert = Some((vec![folder], read_json_opt(&path)?.unwrap_or_default())),
                    }
                }
                Some(Kind::SparseAutoEncoder) if layout.pooling.is_some() && layout.router.is_none() => {
                    layout.autoencoder = Some(folder)
                }
                Some(Kind::LogitScore) if i == 1 && layout.transformer.transformer_task.as_deref() == Some("text-generation") => {
                    layout.logit_score = Some(crate::logit_score::LogitScoreModule::read(&folder)?)
                }
                // Sentence-transformers builds Normalize without reading its folder,
                // which released models often do not ship.
                Some(Kind::Normalize) if seen_transformer && layout.encoder != Encoder::MaskedLm => {
                    layout.normalize = true
                }
                Some(_) => return Err(sequence(format!("{} at position {i} of {}", module.kind, class_list(&modules)))),
                None => {
                    let other = module.kind.as_str();
                    return Err(Error::Unsupported {
                        what: "sentence-transformers module",
                        value: other.to_string(),
                        path: modules_path.clone(),
                        supported: SUPPORTED_MODULES,
                    });
                }
            }
        }
        // No Transformer first (an empty list among them), a masked-LM without SpladePooling, or
        // a causal LM's logits (text-generation) without LogitScore or with other modules.
        let generation = layout.transformer.transformer_task.as_deref() == Some("text-generation");
        if !seen_transformer
            || (layout.encoder == Encoder::MaskedLm && layout.sparse.is_none())
            || (generation && (layout.logit_score.is_none() || modules.len() != 2))
        {
            return Err(sequence(class_list(&modules)));
        }
        Ok(layout)
    }

    /// An inference-free sparse encoder: a Router (router_config.json) with one route of a
    /// SparseStaticEmbedding (the query side: a weight per token, no model run) and one of
    /// an MLMTransformer and a SpladePooling (the document side).
    fn read_router(&mut self, folder: &Path) -> Result<()> {
        let config = RouterConfig::read(folder)?;
        let path = config.path.clone();
        let kind = |name: &str| config.kind(name);
        let (mut query, mut document) = (None, None);
        for (route, modules) in &config.structure {
            let kinds: Vec<Option<Kind>> = modules.iter().map(|m| kind(m)).collect();
            match kinds.as_slice() {
                [Some(Kind::SparseStaticEmbedding)] if query.is_none() => {
                    query = Some((route.clone(), safe_join(folder, &modules[0], &path)?))
                }
                [Some(Kind::MlmTransformer | Kind::Transformer), Some(Kind::SpladePooling)]
                    if document.is_none()
                        && (kinds[0] == Some(Kind::MlmTransformer)
                            || TransformerConfig::read(&safe_join(folder, &modules[0], &path)?)?.1) =>
                {
                    document = Some((route.clone(), safe_join(folder, &modules[0], &path)?, safe_join(folder, &modules[1], &path)?))
                }
                _ => {
                    return Err(Error::Unsupported {
                        what: "Router route",
                        value: format!("{route}: {}", config.classes(modules)),
                        path,
                        supported: SPARSE_ROUTER,
                    })
                }
            }
        }
        let Some((document_route, mlm, splade)) = document else {
            return Err(Error::Unsupported {
                what: "Router",
                value: format!("routes {}", config.structure.iter().map(|(r, _)| r.as_str()).collect::<Vec<_>>().join(", ")),
                path,
                supported: SPARSE_ROUTER,
            });
        };
        let default_route = config.default_route;
        self.encoder = Encoder::MaskedLm;
        self.transformer = TransformerConfig::read(&mlm)?.0;
        self.backbone_dir = mlm;
        let pooling_path = splade.join("config.json");
        self.sparse = Some(SparseLayout {
            pooling: read_json(&pooling_path)?,
            pooling_path,
            query,
            document_route: Some(document_route),
            default_route,
        });
        Ok(())
    }
}

/// What a Router as the only module may hold.
const SPARSE_ROUTER: &str = "a route of SparseStaticEmbedding (query) and one of MLMTransformer, SpladePooling \
     (document); a Router of Dense modules per route comes after a Transformer and Pooling";

/// A Router (or Asym) after pooling: each route's Dense module folders, and the route a call
/// without one takes. `class` is its class path in modules.json; `after_dense` how many Dense
/// modules come before it. A route holding anything but Dense modules, or `route_mappings`
/// (routes by modality), is refused naming it.
fn read_dense_router(folder: &Path, class: &str, after_dense: usize) -> Result<DenseRouter> {
    let config = RouterConfig::read(folder)?;
    if !config.route_mappings.is_empty() {
        return Err(Error::Unsupported {
            what: "Router route_mappings",
            value: serde_json::Value::Object(config.route_mappings.clone()).to_string(),
            path: config.path,
            supported: "routes chosen by task name (pg_embed passes text only: no (task, modality) mappings)",
        });
    }
    let mut routes = Vec::with_capacity(config.structure.len());
    for (route, modules) in &config.structure {
        if let Some(other) = modules.iter().find(|m| config.kind(m) != Some(Kind::Dense)) {
            let class_of = config.types.get(other).map_or(other.as_str(), String::as_str);
            return Err(Error::Unsupported {
                what: "Router route",
                value: format!("{route}: {} (module {other}: {class_of}) in {class}", config.classes(modules)),
                path: config.path.clone(),
                supported: SUPPORTED_DENSE_ROUTES,
            });
        }
        let folders = modules.iter().map(|m| safe_join(folder, m, &config.path)).collect::<Result<Vec<_>>>()?;
        routes.push((route.clone(), folders));
    }
    let (default_route, default_from) = match (config.legacy, config.default_route, config.allow_empty_key) {
        // sentence-transformers 3.x / 4.x: an input without a key passes the Asym untouched;
        // pg_embed gives the document route there, as `encode` and `encode_document` do for
        // the same model saved by 5.x / 6.x (see `legacy_asym`).
        (true, _, _) => match config.structure.iter().find(|(r, _)| r == "document") {
            Some((r, _)) => (Some(r.clone()), "the document route (an Asym has no default; encode_document's)"),
            None => (None, "none: an Asym (sentence-transformers < 5) without a document route"),
        },
        (false, Some(route), _) => (Some(route), "default_route"),
        (false, None, true) => {
            (config.structure.first().map(|(r, _)| r.clone()), "the first route (default_route null, allow_empty_key true)")
        }
        (false, None, false) => (None, "none: default_route null, allow_empty_key false"),
    };
    Ok(DenseRouter {
        class: class.to_string(),
        path: config.path,
        routes,
        default_route,
        default_from,
        legacy_asym: config.legacy,
        after_dense,
    })
}

/// The modules' class paths in order, as modules.json lists them.
fn class_list(modules: &[ModuleEntry]) -> String {
    let classes: Vec<&str> = modules.iter().map(|m| m.kind.as_str()).collect();
    format!("[{}]", classes.join(", "))
}

fn safe_join(dir: &Path, sub: &str, file: &Path) -> Result<PathBuf> {
    let p = Path::new(sub);
    if p.components().all(|c| matches!(c, std::path::Component::Normal(_) | std::path::Component::CurDir)) {
        Ok(dir.join(p))
    } else {
        Err(Error::invalid_file(file, format!("module path \"{sub}\" leaves the model directory")))
    }
}

fn pooling_modes(cfg: &PoolingConfig, path: &Path) -> Result<Vec<PoolingMode>> {
    // The legacy flags, in sentence-transformers' legacy concatenation order.
    let legacy = [
        (cfg.pooling_mode_cls_token, "cls"),
        (cfg.pooling_mode_max_tokens, "max"),
        (cfg.pooling_mode_mean_tokens, "mean"),
        (cfg.pooling_mode_mean_sqrt_len_tokens, "mean_sqrt_len_tokens"),
        (cfg.pooling_mode_weightedmean_tokens, "weightedmean"),
        (cfg.pooling_mode_lasttoken, "lasttoken"),
    ];
    let names: Vec<String> = match &cfg.pooling_mode {
        Some(listed) => listed.to_vec(),
        None => legacy.iter().filter(|(on, _)| *on).map(|(_, name)| name.to_string()).collect(),
    };
    if names.is_empty() {
        return Err(Error::invalid_file(path, "no pooling mode is enabled"));
    }
    let mut modes = Vec::with_capacity(names.len());
    for name in names {
        let Some(mode) = PoolingMode::parse(&name) else {
            return Err(Error::Unsupported {
                what: "pooling mode",
                value: name,
                path: path.into(),
                supported: PoolingMode::NAMES,
            });
        };
        if !modes.contains(&mode) {
            modes.push(mode);
        }
    }
    Ok(modes)
}
