//! Loading a pipeline: the model folder's files and the options resolved into the stages
//! (text input, backbone, pooling or classification head, projection heads, output).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use candle_core::Device;
use tokenizers::{PostProcessor, TruncationParams};

use super::text::{check_token_ids, prompt_length, Prompt, Text};
use super::routes::{Routes, Routing};
use super::{known_prompts, Input, Pipeline, PipelineInfo, Share, Sharing, SparseStage, Stats};
use crate::classifier::{Classifier, HeadConfig};
use crate::error::{Error, Result};
use crate::heads::Dense;
use crate::mlm::{MlmConfig, MlmHead};
use crate::sparse::{QueryRoute, Selection, Splade, SPARSEVEC_MAX_NNZ};
use crate::models::{BackboneConfig, Modality};
use crate::options::{LongInput, Options};
use crate::pooling::PoolingMode;
use crate::processor::ImageProcessor;
use crate::prepared::{key, KeyOf, Outcome, Store};
use crate::st::{Encoder, Layout};
use crate::tokenizer::{load_tokenizer, passes_type_ids, tokenizer_max_length};

impl Pipeline {
    /// Loads a model directory (sentence-transformers or plain Hugging Face layout).
    /// Head files named in the options must lie inside `dir`.
    pub fn load(dir: &Path, options: &Options) -> Result<Self> {
        Self::load_within(dir, dir, options)
    }

    /// As [`Pipeline::load`], with head files allowed anywhere inside `root`
    /// (pg_embed.model_dir); relative head paths are relative to `dir`.
    pub fn load_within(root: &Path, dir: &Path, options: &Options) -> Result<Self> {
        Self::load_shared(root, dir, options, None)
    }

    /// As [`Pipeline::load_within`]; with `share`, the weights come from the model's shared
    /// prepared file (written first when there is none) instead of private memory.
    pub fn load_shared(root: &Path, dir: &Path, options: &Options, share: Option<&Share>) -> Result<Self> {
        crate::threads::fix_mmap_threshold();
        let layout = Layout::read(dir)?;
        let bdir = layout.backbone_dir.as_path();
        let sparse = layout.sparse.is_some();
        let is_static = matches!(layout.encoder, Encoder::Static | Encoder::Model2Vec);
        // bge-m3: its token heads beside the backbone, as FlagEmbedding saves them.
        let m3 = layout.colbert.is_none()
            && !sparse
            && !is_static
            && bdir.join("colbert_linear.pt").exists()
            && bdir.join("sparse_linear.pt").exists();
        let colbert = layout.colbert.is_some();

        // A static model has no config.json: its table's shape is its config.
        let (config, config_path, head_config, mlm_config) = if is_static {
            let architecture = if layout.encoder == Encoder::Model2Vec { "model2vec" } else { "static_embedding" };
            let config = BackboneConfig::static_embedding(bdir, architecture)?;
            (config, bdir.join("model.safetensors"), HeadConfig::default(), None)
        } else {
            let config_path = bdir.join("config.json");
            let config_bytes = std::fs::read(&config_path).map_err(|e| Error::io(&config_path, e))?;
            let config = BackboneConfig::parse(&config_path, &config_bytes)?;
            let head_config: HeadConfig =
                serde_json::from_slice(&config_bytes).map_err(|e| Error::invalid_file(&config_path, e))?;
            let mlm_config: Option<MlmConfig> = if sparse {
                Some(serde_json::from_slice(&config_bytes).map_err(|e| Error::invalid_file(&config_path, e))?)
            } else {
                None
            };
            (config, config_path, head_config, mlm_config)
        };
        let classify = match options.task.as_deref() {
            Some("embed") if colbert => {
                return Err(Error::InvalidOptions(
                    "task \"embed\" needs a model with a pooled output; a ColBERT model gives token vectors (task \"multi\")".into(),
                ))
            }
            Some("embed") => false,
            Some("multi") if colbert || m3 => false,
            Some("sparse") if m3 => false,
            Some(task @ ("multi" | "sparse")) => {
                return Err(Error::InvalidOptions(format!(
                    "task \"{task}\" needs a model with that output (multi: ColBERT or bge-m3; sparse: bge-m3); register a sparse encoder without a task"
                )))
            }
            Some("classify") if colbert || m3 => {
                return Err(Error::InvalidOptions("task \"classify\" needs a *ForSequenceClassification checkpoint; this is a late-interaction model".into()))
            }
            Some("classify") if sparse || is_static => {
                return Err(Error::InvalidOptions(format!(
                    "task \"classify\" needs a *ForSequenceClassification checkpoint; this is a {} model",
                    if sparse { "sparse (SPLADE)" } else { "static embedding" }
                )))
            }
            Some("classify") => true,
            None => !sparse && head_config.classification_architecture().is_some(),
            Some(other) => {
                return Err(Error::InvalidOptions(format!(
                    "unknown task \"{other}\"; expected embed, classify, sparse or multi"
                )))
            }
        };
        let selection = check_sparse_options(options, sparse, m3)?;
        if colbert {
            let pooled_only = [
                ("pooling", options.pooling.is_some()),
                ("normalize", options.normalize.is_some()),
                ("dimensions", options.dimensions.is_some()),
                ("heads", options.heads.is_some()),
                ("long_input", options.long_input.is_some()),
                ("max_length", options.max_length.is_some()),
            ];
            if let Some((key, _)) = pooled_only.iter().find(|(_, set)| *set) {
                return Err(Error::InvalidOptions(format!(
                    "option \"{key}\" does not apply to a ColBERT model: its lengths and token heads come from config_sentence_transformers.json and its Dense modules"
                )));
            }
        }
        if classify {
            let embedding_only = [
                ("pooling", options.pooling.is_some()),
                ("normalize", options.normalize.is_some()),
                ("dimensions", options.dimensions.is_some()),
                ("heads", options.heads.is_some()),
                ("prompt", options.prompt.is_some()),
                ("prompts", options.prompts.is_some()),
                ("include_prompt", options.include_prompt.is_some()),
                ("long_input: mean_of_chunks", options.long_input == Some(LongInput::MeanOfChunks)),
            ];
            if let Some((key, _)) = embedding_only.iter().find(|(_, set)| *set) {
                return Err(Error::InvalidOptions(format!(
                    "option \"{key}\" applies to embedding models; this one is a classifier (add \"task\": \"embed\" to embed with its backbone)"
                )));
            }
        }

        let modality = config.modality();
        if !modality.takes_text() {
            let text_only = [
                ("max_length", options.max_length.is_some()),
                ("prompt", options.prompt.is_some()),
                ("prompts", options.prompts.is_some()),
                ("include_prompt", options.include_prompt.is_some()),
                ("long_input", options.long_input.is_some()),
            ];
            if let Some((key, _)) = text_only.iter().find(|(_, set)| *set) {
                return Err(Error::InvalidOptions(format!(
                    "option \"{key}\" applies to text models; this one takes images"
                )));
            }
        }
        if let Some(module) = &layout.pooling {
            if let Some(dim) = module.dimension.filter(|d| *d != config.hidden_size()) {
                return Err(Error::invalid_file(
                    &module.path,
                    format!(
                        "word_embedding_dimension {dim} does not match the backbone's hidden_size {}",
                        config.hidden_size()
                    ),
                ));
            }
        }
        let (pooling, pooling_from) = match (&options.pooling, &layout.pooling) {
            // A classifier's head does its own pooling.
            _ if classify => (Vec::new(), "none (the classification head pools)".to_string()),
            // SpladePooling pools the MLM head's logits (see `sparse` in model_info).
            _ if sparse => {
                let splade = layout.sparse.as_ref().map(|s| s.pooling_path.display().to_string());
                (Vec::new(), format!("SpladePooling ({})", splade.unwrap_or_default()))
            }
            (None, None) if is_static => {
                (vec![PoolingMode::Mean], "the static model's mean of its token embeddings".into())
            }
            (Some(spec), _) => (parse_pooling(&spec.to_vec())?, "options".to_string()),
            (None, Some(module)) => (module.modes.clone(), module.path.display().to_string()),
            (None, None) => {
                (vec![config.default_pooling()], "default (no sentence-transformers Pooling module)".into())
            }
        };
        let normalize = options.normalize.unwrap_or(layout.normalize) && !classify;

        if modality == Modality::Both && pooling != [PoolingMode::Pooler] {
            return Err(Error::InvalidOptions(format!(
                "a model of text and images embeds both through its projections: pooling must be \"pooler\", not {}",
                serde_json::to_string(&pooling).unwrap_or_default()
            )));
        }

        let build = || {
            let parts = Parts { config: &config, head_config: &head_config, mlm_config: mlm_config.as_ref(), m3 };
            build_weights(root, dir, bdir, options, &parts, &config_path, classify, &pooling, &layout)
        };
        // The input stages (the tokenizer's JSON: most of a load from the shared file) load
        // on a thread of their own while this one maps or builds the weights (and may wait,
        // cancellably, for another process building them). Their errors come first.
        let (inputs, weights) = std::thread::scope(|scope| {
            let inputs = scope.spawn(|| -> Result<_> {
                let text =
                    if modality.takes_text() { Some(load_text(bdir, &config, &layout, options)?) } else { None };
                let query = match layout.sparse.as_ref().and_then(|s| s.query.as_ref()) {
                    Some((name, folder)) => Some(QueryRoute::load(name, folder, config.vocab_size())?),
                    None => None,
                };
                let images = if modality.takes_images() { Some(load_image_processor(bdir)?) } else { None };
                Ok((text, images, query))
            });
            let weights = match share {
                None => build().map(|w| (Arc::new(w), Sharing::default())),
                Some(share) => shared_weights(share, root, dir, options, &config, build),
            };
            (inputs.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)), weights)
        });
        let (text, images, query) = inputs?;
        let (weights, sharing) = weights?;
        let Weights { backbone, classifier, heads, parameters, mlm, routes, late: late_heads } = &*weights;
        let parameters = *parameters;
        let sparse = match (&layout.sparse, mlm) {
            (Some(layout), Some(mlm)) => Some(SparseStage {
                splade: Splade::from_config(&layout.pooling, &layout.pooling_path)?,
                vocab: mlm.vocab_size(),
                selection,
                query,
                document_route: layout.document_route.clone(),
                default_route: layout.default_route.clone(),
            }),
            (Some(_), None) => return Err(Error::invalid_file(bdir, "the sparse model's MLM head is missing from its weights")),
            _ => None,
        };
        let late = match (&text, late_heads) {
            (Some((t, _, _)), Some(_)) => Some(super::multi::Late::load(
                layout.colbert.as_ref().map(|(_, settings)| settings),
                &t.tokenizer,
                backbone.as_ref(),
                (bdir, dir),
                &config,
                selection,
            )?),
            _ => None,
        };
        // What the model gives by default (what the write paths store).
        let task = match (classifier, &sparse) {
            (Some(_), _) => "classify",
            (None, Some(_)) => "sparse",
            (None, None) if colbert => "multi",
            (None, None) => match options.task.as_deref() {
                Some("multi") => "multi",
                Some("sparse") => "sparse",
                _ => "embed",
            },
        };
        // The heads' sizes were checked in order when the weights were built.
        let dim = match (&sparse, late_heads.as_ref().and_then(|h| h.dim())) {
            (Some(s), _) => s.vocab,
            (None, Some(d)) if task == "multi" => d,
            (None, _) if task == "sparse" => config.vocab_size(),
            (None, _) => weights.output_dim().unwrap_or_else(|| pooled_dim(&pooling, backbone.as_ref(), &config)),
        };
        let routing = match (&layout.router, routes) {
            (Some(router), Some(routes)) => Some(Routing::new(router, routes, options)),
            _ => None,
        };
        let classifier = classifier.as_ref();
        let dimensions = match options.dimensions {
            Some(0) => return Err(Error::InvalidOptions("dimensions must be at least 1".into())),
            Some(n) if n > dim => {
                return Err(Error::InvalidOptions(format!(
                    "dimensions {n} exceeds the model's output dimension {dim}"
                )))
            }
            other => other,
        };
        let normalize_after_truncation = dimensions.is_some() && options.normalize == Some(true);

        let (max_length, lowercase, prompt_texts, default_prompt, include_prompt) = match &text {
            Some((t, max_length, texts)) => {
                (*max_length, t.lowercase, texts.clone(), t.default_prompt.clone(), t.include_prompt)
            }
            None => (0, false, BTreeMap::new(), None, true),
        };
        let info = PipelineInfo {
            task,
            multi: late.as_ref().zip(late_heads.as_ref()).map(|(l, h)| l.describe(h)),
            sparse: sparse.as_ref().map(|s| s.describe(mlm.as_ref())),
            classifier: classifier.map(Classifier::describe),
            labels: classifier.map(|c| c.labels.clone()),
            problem_type: classifier.map(|c| c.problem),
            architecture: config.architecture(),
            modality,
            preprocessing: images.as_ref().map(ImageProcessor::describe),
            backbone: config.summary(),
            zero_shot: weights.backbone.sigmoid_logits().map(|(scale, bias)| {
                serde_json::json!({"logit_scale": scale, "logit_bias": bias})
            }),
            parameters,
            precision: options.precision.unwrap_or_default(),
            pooling: pooling.clone(),
            pooling_from,
            heads: heads.iter().map(Dense::describe).collect(),
            router: routing.as_ref().zip(routes.as_ref()).map(|(routing, routes)| routing.describe(routes)),
            normalize,
            dimensions,
            normalize_after_truncation,
            dim: classifier.map_or(dimensions.unwrap_or(dim), |c| c.labels.len()),
            max_length,
            lowercase,
            prompts: prompt_texts,
            default_prompt,
            include_prompt,
            long_input: options.long_input.unwrap_or_default(),
            directory: dir.to_path_buf(),
        };
        let input = Input { text: text.map(|(t, _, _)| t), images };
        Ok(Pipeline {
            input,
            sparse,
            late,
            is_static,
            long_input: options.long_input.unwrap_or_default(),
            stats: Stats::default(),
            hidden_size: config.hidden_size(),
            weights,
            routing,
            pooling,
            normalize,
            dimensions,
            normalize_after_truncation,
            info,
            sharing,
        })
    }
}

/// The parts of a pipeline that hold weights: what a prepared file shares between processes.
#[derive(serde::Serialize)]
pub(crate) struct Weights {
    pub backbone: Box<dyn crate::models::Model>,
    pub classifier: Option<Classifier>,
    pub heads: Vec<Dense>,
    /// Parameters of the backbone's checkpoint and the heads.
    pub parameters: usize,
    /// A sparse encoder's masked-language-model head.
    pub mlm: Option<MlmHead>,
    /// An asymmetric model's Router: each route's heads, run among `heads`.
    pub routes: Option<Routes>,
    /// Late interaction: the token heads (ColBERT's Dense modules, bge-m3's .pt heads).
    pub late: Option<super::multi::LateHeads>,
}

impl Weights {
    /// The width the heads give (None: no heads, the pooling's width).
    pub(crate) fn output_dim(&self) -> Option<usize> {
        match &self.routes {
            Some(r) => Some(self.heads.get(r.at..).and_then(<[Dense]>::last).map_or(r.dim, |h| h.out_features)),
            None => self.heads.last().map(|h| h.out_features),
        }
    }
}

/// The parsed configs the weights are built from.
struct Parts<'a> {
    config: &'a BackboneConfig,
    head_config: &'a HeadConfig,
    /// A sparse encoder's: what its MLM head reads.
    mlm_config: Option<&'a MlmConfig>,
    /// Whether the folder is bge-m3's (its .pt heads).
    m3: bool,
}

/// `max_terms` and `min_weight` checked (sparse models only), and the options a sparse
/// model has no use for refused.
fn check_sparse_options(options: &Options, sparse: bool, m3: bool) -> Result<Selection> {
    if m3 {
        // bge-m3: the selection applies to its lexical weights; the other options to its dense output.
        return check_selection(options);
    }
    if !sparse {
        if let Some(key) = [("max_terms", options.max_terms.is_some()), ("min_weight", options.min_weight.is_some())]
            .iter()
            .find_map(|(k, set)| set.then_some(*k))
        {
            return Err(Error::InvalidOptions(format!(
                "option \"{key}\" applies to sparse models (SPLADE); this one gives dense vectors"
            )));
        }
        return Ok(Selection::default());
    }
    let dense_only = [
        ("pooling", options.pooling.is_some()),
        ("normalize", options.normalize.is_some()),
        ("dimensions", options.dimensions.is_some()),
        ("heads", options.heads.is_some()),
        ("include_prompt", options.include_prompt.is_some()),
        ("precision", options.precision.is_some_and(|p| p != crate::options::Precision::Float32)),
        ("long_input: mean_of_chunks", options.long_input == Some(LongInput::MeanOfChunks)),
    ];
    if let Some((key, _)) = dense_only.iter().find(|(_, set)| *set) {
        return Err(Error::InvalidOptions(format!(
            "option \"{key}\" applies to dense embedding models; this one is sparse (SPLADE)"
        )));
    }
    check_selection(options)
}

/// `max_terms` and `min_weight` checked.
fn check_selection(options: &Options) -> Result<Selection> {
    if let Some(k) = options.max_terms.filter(|k| !(1..=SPARSEVEC_MAX_NNZ).contains(k)) {
        return Err(Error::InvalidOptions(format!(
            "max_terms {k} is out of range: 1 to {SPARSEVEC_MAX_NNZ} (pgvector's limit for a sparsevec; its HNSW index takes at most 1000)"
        )));
    }
    if let Some(w) = options.min_weight.filter(|w| !(w.is_finite() && *w >= 0.0)) {
        return Err(Error::InvalidOptions(format!("min_weight {w} is out of range: a finite number, at least 0")));
    }
    Ok(Selection { max_terms: options.max_terms, min_weight: options.min_weight })
}

/// Reads the weights from the model's files: the backbone, the classification head or the
/// projection heads, each checked against the stage before it.
#[allow(clippy::too_many_arguments)]
fn build_weights(
    root: &Path,
    dir: &Path,
    bdir: &Path,
    options: &Options,
    parts: &Parts,
    config_path: &Path,
    classify: bool,
    pooling: &[PoolingMode],
    layout: &Layout,
) -> Result<Weights> {
    let Parts { config, head_config, mlm_config, m3 } = *parts;
    let device = Device::Cpu;
    let (vb, parameters) = crate::weights::load_weights(bdir, &device)?;
    let mlm = mlm_config.map(|c| MlmHead::load(&vb, c).map_err(|e| e.in_dir(bdir))).transpose()?;
    let classifier = if classify {
        let Some(architecture) = head_config.classification_architecture() else {
            return Err(Error::InvalidOptions(format!(
                "task \"classify\" needs a *ForSequenceClassification checkpoint; {} names architectures {:?}",
                config_path.display(),
                head_config.architectures
            )));
        };
        Some(
            Classifier::load(
                &vb,
                architecture,
                head_config,
                config.architecture(),
                config.hidden_size(),
            )
            .map_err(|e| e.in_dir(bdir))?,
        )
    } else {
        None
    };
    // The backbone's linear layers in the precision asked for; heads stay float32.
    let precision = options.precision.unwrap_or_default();
    let backbone = crate::layers::with_precision(precision, || config.load(vb)).map_err(|e| e.in_dir(bdir))?;
    if classifier.as_ref().is_some_and(Classifier::needs_pooler) && backbone.pooler_size().is_none() {
        return Err(Error::invalid_file(
            bdir.join("model.safetensors"),
            "the classifier needs the pooler, which the checkpoint lacks",
        ));
    }
    if pooling.contains(&PoolingMode::Pooler) && backbone.pooler_size().is_none() {
        return Err(Error::InvalidOptions(format!(
            "pooling mode \"pooler\" needs the backbone's pooler, and {} has no pooler weights",
            bdir.join("model.safetensors").display()
        )));
    }

    let mut heads = Vec::with_capacity(layout.dense.len());
    let mut routes = None;
    let mut dim = pooled_dim(pooling, backbone.as_ref(), config);
    // A classifier ends in its head: sentence-transformers' Dense modules (and a Router of
    // them) do not apply.
    for i in (0..=layout.dense.len()).filter(|_| !classify) {
        // An asymmetric model's Router, where it stands among the Dense modules.
        if let Some(router) = layout.router.as_ref().filter(|r| r.after_dense == i) {
            let loaded = Routes::load(router, dim, heads.len())?;
            dim = loaded.dim;
            routes = Some(loaded);
        }
        let Some(folder) = layout.dense.get(i) else { break };
        let head = Dense::load(folder)?;
        if head.in_features != dim {
            return Err(Error::invalid_file(
                folder.join("config.json"),
                format!(
                    "in_features {} does not match the previous stage's output dimension {dim}",
                    head.in_features
                ),
            ));
        }
        dim = head.out_features;
        heads.push(head);
    }
    for (index, spec) in options.heads.iter().flatten().enumerate() {
        let file = crate::source::resolve_file(root, dir, &spec.path, "head file")?;
        let head = Dense::from_spec(spec, &file, index, dim)?;
        dim = head.out_features;
        heads.push(head);
    }
    let late = super::multi::LateHeads::load(bdir, layout, m3, config.hidden_size())?;
    let parameters = parameters
        + heads.iter().map(Dense::parameters).sum::<usize>()
        + routes.as_ref().map_or(0, Routes::parameters)
        + late.as_ref().map_or(0, super::multi::LateHeads::parameters);
    Ok(Weights { backbone, classifier, heads, parameters, mlm, routes, late })
}

/// The width of the pooling stage's output: each mode's, concatenated.
fn pooled_dim(pooling: &[PoolingMode], backbone: &dyn crate::models::Model, config: &BackboneConfig) -> usize {
    let pooler_size = backbone.pooler_size().unwrap_or(config.hidden_size());
    pooling.iter().map(|m| if *m == PoolingMode::Pooler { pooler_size } else { config.hidden_size() }).sum()
}

/// The weights mapped from the shared prepared file of this model; when there is none,
/// built (and written in the background for the next loads): see `crate::prepared`.
fn shared_weights(
    share: &Share,
    root: &Path,
    dir: &Path,
    options: &Options,
    config: &BackboneConfig,
    build: impl FnOnce() -> Result<Weights>,
) -> Result<(Arc<Weights>, Sharing)> {
    let memo = share.store.dir().join("digests");
    let remembered = match share.files {
        Some(files) => Some(files.clone()),
        None => key::remembered_dir_digests(&memo, root, dir)?,
    };
    let key = match remembered {
        Some(files) => KeyOf::Known(key_of(share.store, root, dir, options, files)?),
        None => {
            // Hashed after the build, in the background; a file changed since the build
            // read it gives no key (and no file).
            let before = key::dir_stamps(root, dir)?;
            let (store_dir, root, dir, options) =
                (share.store.dir().to_path_buf(), root.to_path_buf(), dir.to_path_buf(), options.clone());
            KeyOf::Later(Box::new(move || {
                let store = Store::open(&store_dir)?;
                let key = prepared_key(&store, &root, &dir, &options, None)?;
                if key::dir_stamps(&root, &dir)? != before {
                    return Err(Error::invalid_file(&dir, "its files changed while it loaded; no shared file written"));
                }
                Ok(key)
            }))
        }
    };
    match share.store.get_or_build(key, (share.model, share.source), share.interrupt, build)? {
        Outcome::Built { parts, writing, replaced } => {
            let note = replaced.map(|why| format!("replaced a file that could not be used: {why}"));
            Ok((parts, Sharing { file: None, shared_bytes: 0, note, writing: Some(writing) }))
        }
        Outcome::Mapped(file) => {
            #[derive(serde::Deserialize)]
            struct Described {
                backbone: serde_json::Value,
                classifier: Option<Classifier>,
                heads: Vec<Dense>,
                parameters: usize,
                #[serde(default)]
                mlm: Option<MlmHead>,
                #[serde(default)]
                routes: Option<Routes>,
                #[serde(default)]
                late: Option<super::multi::LateHeads>,
            }
            let weights = file.restore(|parts| {
                let d: Described = serde_json::from_value(parts)
                    .map_err(|e| Error::invalid_file(&file.path, format!("cannot restore the weights: {e}")))?;
                let backbone = config.restore(d.backbone)?;
                Ok(Weights {
                    backbone,
                    classifier: d.classifier,
                    heads: d.heads,
                    parameters: d.parameters,
                    mlm: d.mlm,
                    routes: d.routes,
                    late: d.late,
                })
            })?;
            let sharing = Sharing {
                file: Some(file.path.clone()),
                shared_bytes: file.data_bytes(),
                note: None,
                writing: None,
            };
            Ok((Arc::new(weights), sharing))
        }
    }
}

/// The name of the prepared file of a model folder loaded with `options`: a digest of its
/// files (`files`, a hub pin's, or computed and remembered in the store), of the head
/// files the options name, and of the options (see `crate::prepared::key`).
pub fn prepared_key(
    store: &Store,
    root: &Path,
    dir: &Path,
    options: &Options,
    files: Option<&BTreeMap<String, String>>,
) -> Result<String> {
    let files = match files {
        Some(files) => files.clone(),
        None => key::dir_digests(&store.dir().join("digests"), root, dir)?,
    };
    key_of(store, root, dir, options, files)
}

/// The key of a model folder whose files have the digests `files`.
fn key_of(store: &Store, root: &Path, dir: &Path, options: &Options, mut files: BTreeMap<String, String>) -> Result<String> {
    let memo = store.dir().join("digests");
    for spec in options.heads.iter().flatten() {
        let file = crate::source::resolve_file(root, dir, &spec.path, "head file")?;
        files.insert(format!("head:{}", spec.path), key::file_digest(&memo, &file)?);
    }
    let options = serde_json::to_value(options).map_err(|e| Error::InvalidOptions(e.to_string()))?;
    Ok(key::key(&files, &options))
}

fn parse_pooling(names: &[String]) -> Result<Vec<PoolingMode>> {
    if names.is_empty() {
        return Err(Error::InvalidOptions("pooling must name at least one mode".into()));
    }
    let mut modes = Vec::with_capacity(names.len());
    for n in names {
        let mode = PoolingMode::parse(n).ok_or_else(|| {
            Error::InvalidOptions(format!(
                "unknown pooling mode \"{n}\"; expected one of {}",
                PoolingMode::NAMES
            ))
        })?;
        if modes.contains(&mode) {
            return Err(Error::InvalidOptions(format!("pooling mode \"{n}\" is listed twice")));
        }
        modes.push(mode);
    }
    // Concatenated in the order listed, as sentence-transformers 6.x's Pooling(pooling_mode=[...]).
    Ok(modes)
}

/// The text input stage of a model directory: the tokenizer as sentence-transformers uses
/// it, max_length, and the prompts (with the prompt texts as configured, for model_info).
fn load_text(
    bdir: &Path,
    config: &BackboneConfig,
    layout: &Layout,
    options: &Options,
) -> Result<(Text, usize, BTreeMap<String, String>)> {
    // A SentencePiece model alone: SigLIP's SiglipTokenizer is rebuilt from it
    // (`sentencepiece`); other slow tokenizers are refused by name.
    let (mut tokenizer, largest_id) = if !bdir.join("tokenizer.json").exists() && bdir.join("spiece.model").exists() {
        let tokenizer = crate::sentencepiece::siglip_tokenizer(bdir)?.ok_or_else(|| Error::Unsupported {
            what: "tokenizer",
            value: "spiece.model without tokenizer.json".into(),
            path: bdir.join("spiece.model"),
            supported: "SiglipTokenizer, or a tokenizer.json (tokenizers' format, as fast tokenizers save it)",
        })?;
        (tokenizer, None)
    } else {
        load_tokenizer(&bdir.join("tokenizer.json"))?
    };
    let (pad_id, pad_file) = match tokenizer.get_padding() {
        Some(p) => (p.pad_id, "tokenizer.json"),
        None => (config.pad_token_id(), "config.json"),
    };
    let is_static = matches!(layout.encoder, Encoder::Static | Encoder::Model2Vec);
    let max_positions = config.max_position_embeddings();
    let max_length = match options.max_length {
        Some(n) if n > max_positions => {
            return Err(Error::InvalidOptions(format!(
                "max_length {n} exceeds the model's max_position_embeddings {max_positions}"
            )))
        }
        Some(n) => Some(n),
        // A static model: model2vec truncates at its config's max_length; sentence-transformers'
        // StaticEmbedding keeps the tokenizer's own truncation, if any.
        None if is_static => match &layout.model2vec {
            Some(m) => m.max_length,
            None => tokenizer.get_truncation().map(|t| t.max_length),
        },
        // sentence-transformers: sentence_bert_config.json's max_seq_length, else the
        // tokenizer's model_max_length (where 6.x saves it), capped by the positions.
        None => Some(
            layout
                .transformer
                .max_seq_length
                .or(tokenizer_max_length(&bdir.join("tokenizer_config.json"))?)
                .unwrap_or(max_positions)
                .min(max_positions),
        ),
    };
    if is_static {
        // Static models tokenize without special tokens.
        tokenizer.with_post_processor(None::<tokenizers::PostProcessorWrapper>);
    }
    let specials = tokenizer.get_post_processor().map(|p| p.added_tokens(false)).unwrap_or(0);
    if max_length.is_some_and(|m| m <= specials) {
        return Err(Error::InvalidOptions(format!(
            "max_length {} leaves no room for text after {specials} special tokens",
            max_length.unwrap_or_default()
        )));
    }
    // A model2vec folder of the versions that leave the unknown token out before they keep
    // max_length tokens: the tokenizer does not truncate, the ids are cut after the drop.
    let keep_after_drop = match &layout.model2vec {
        Some(m) if m.unknown_dropped_first => max_length,
        _ => None,
    };
    // sentence-transformers ignores the padding and truncation stored in tokenizer.json:
    // it pads per batch and truncates at max_seq_length.
    tokenizer.with_padding(None);
    tokenizer
        .with_truncation(
            max_length
                .filter(|_| keep_after_drop.is_none())
                .map(|max_length| TruncationParams { max_length, ..Default::default() }),
        )
        .map_err(|e| Error::invalid_file(bdir.join("tokenizer.json"), e))?;
    // model2vec leaves the unknown token out of the mean.
    let drop_id = if layout.encoder == Encoder::Model2Vec { unknown_token_id(&tokenizer) } else { None };
    // model2vec cuts the text before it tokenizes: max_length times the median token length.
    let char_cut = match (layout.encoder, max_length) {
        (Encoder::Model2Vec, Some(m)) => Some(m.saturating_mul(super::text::median_token_length(&tokenizer))),
        _ => None,
    };
    let max_length = max_length.unwrap_or(0);

    // A pad id out of the vocabulary is a broken model (transformers would fail on
    // every padded batch), though pg_embed's packed batches never pad.
    if pad_id as usize >= config.vocab_size() {
        return Err(Error::invalid_file(
            bdir.join(pad_file),
            format!("pad_token_id {pad_id} is not below vocab_size {}", config.vocab_size()),
        ));
    }
    check_token_ids(&tokenizer, config.vocab_size(), largest_id, &bdir.join("tokenizer.json"))?;
    // Prompts: the model's own, then the options' (which win); "" means no prompt.
    let mut prompt_texts = layout.prompts.prompts.clone();
    prompt_texts.extend(options.prompts.clone().unwrap_or_default());
    let include_prompt =
        options.include_prompt.or(layout.pooling.as_ref().map(|p| p.include_prompt)).unwrap_or(true);
    let lowercase = layout.transformer.do_lower_case;
    let mut prompts = BTreeMap::new();
    for (name, text) in &prompt_texts {
        let length = prompt_length(&tokenizer, lowercase, text)?;
        prompts.insert(name.clone(), Prompt { text: text.clone(), length });
    }
    let default_prompt = match (&options.prompt, &layout.prompts.default_prompt_name) {
        (Some(name), _) => Some(name.clone()),
        (None, Some(name)) => Some(name.clone()),
        (None, None) => None,
    };
    // options.prompt may name a route of an asymmetric model instead (its default route).
    let is_route = |name: &str| layout.router.as_ref().is_some_and(|r| r.routes.iter().any(|(n, _)| n == name));
    if let Some(name) = &default_prompt {
        if !name.is_empty() && !prompts.contains_key(name) && !is_route(name) {
            return Err(Error::UnknownPrompt { name: name.clone(), known: known_prompts(&prompt_texts) });
        }
    }

    let type_ids = passes_type_ids(&bdir.join("tokenizer_config.json"))?;
    let untruncated = std::sync::OnceLock::new();
    let text = Text {
        tokenizer,
        untruncated,
        lowercase,
        prompts,
        default_prompt,
        include_prompt,
        type_ids,
        drop_id,
        char_cut,
        keep_after_drop,
    };
    Ok((text, max_length, prompt_texts))
}

/// The tokenizer model's unknown token, as model2vec finds it: `unk_token` (WordPiece, BPE,
/// WordLevel) or `unk_id` (Unigram).
fn unknown_token_id(tokenizer: &tokenizers::Tokenizer) -> Option<u32> {
    let model = serde_json::to_value(tokenizer.get_model()).ok()?;
    match (model.get("unk_token").and_then(|t| t.as_str()), model.get("unk_id").and_then(|i| i.as_u64())) {
        (Some(token), _) => tokenizer.token_to_id(token),
        (None, Some(id)) => u32::try_from(id).ok(),
        (None, None) => None,
    }
}

/// The image processor of a model directory: preprocessor_config.json as transformers saves
/// it, else processor_config.json (where sentence-transformers 6 saves a CLIP model's
/// processor, the image processor's settings under `image_processor`).
fn load_image_processor(bdir: &Path) -> Result<ImageProcessor> {
    let preprocessor = bdir.join("preprocessor_config.json");
    let processor = bdir.join("processor_config.json");
    match (preprocessor.exists(), processor.exists()) {
        (false, true) => ImageProcessor::load(&processor),
        _ => ImageProcessor::load(&preprocessor),
    }
}
