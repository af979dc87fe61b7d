//! Loading a pipeline: the model folder's files and the options resolved into the stages
//! (text input, backbone, pooling or classification head, projection heads, output), in
//! named steps: read the folder, decide the task, check the options, resolve the pooling,
//! load the inputs and the weights, build the outputs, describe the pipeline.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::Device;

use super::input::{check_input_options, Inputs, TextInput};
use super::outputs::{self, DenseOutput, Gives, Outputs, TokenOutput};
use super::routes::{Routes, Routing};
use super::score::ScoreOutput;
use super::{Input, Pipeline, PipelineInfo, Share, Sharing, SparseStage, Stats, Weights};
use crate::autoencoder::SparseAutoEncoder;
use crate::classifier::{Classifier, HeadConfig};
use crate::error::{Error, Result};
use crate::heads::Dense;
use crate::score_head::ScoreHead;
use crate::mlm::{MlmConfig, MlmHead};
use crate::models::{BackboneConfig, Modality};
use crate::options::Options;
use crate::pooling::PoolingMode;
use crate::processor::ImageProcessor;
use crate::prepared::{key, KeyOf, Outcome, Store};
use crate::sparse::Selection;
use crate::st::{Encoder, Layout};

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
        let folder = Folder::read(dir)?;
        let task = Task::decide(options, &folder)?;
        let selection = outputs::check_output_options(
            options,
            (folder.sparse_kind(), folder.m3, folder.colbert, task.classify),
        )?;
        check_input_options(options, folder.config.modality())?;
        let pooling = Pooling::resolve(options, &folder, task.classify)?;
        let (inputs, weights, sharing) = load_parts(root, dir, options, share, &folder, task.classify, &pooling.modes)?;
        let Inputs { text, images, query } = inputs;
        let built = build_outputs(options, &folder, task, selection, &pooling, (text.as_ref(), query), &weights, dir)?;
        let info = describe(options, &folder, task, &pooling, &built, (text.as_ref(), images.as_ref()), &weights, dir);
        Ok(Pipeline {
            input: Input { text: text.map(|(t, _, _)| t), images },
            outputs: built.outputs,
            is_static: folder.is_static,
            long_input: options.long_input.unwrap_or_default(),
            stats: Stats::default(),
            hidden_size: folder.config.hidden_size(),
            weights,
            info,
            sharing,
        })
    }
}

/// A model folder read: its layout, its configs, and what kind of model they make.
struct Folder {
    layout: Layout,
    config: BackboneConfig,
    config_path: PathBuf,
    head_config: HeadConfig,
    /// A sparse encoder's: what its MLM head reads.
    mlm_config: Option<MlmConfig>,
    /// A sparse encoder (SPLADE, or CSR: a SparseAutoEncoder after the dense modules).
    sparse: bool,
    /// A static embedding model: no transformer, and no compute threads.
    is_static: bool,
    /// bge-m3: its token heads beside the backbone, as FlagEmbedding saves them.
    m3: bool,
    /// A ColBERT model as PyLate saves it.
    colbert: bool,
}

impl Folder {
    /// Reads the layout (modules.json and the modules' configs) and the backbone's configs
    /// (a static model has no config.json: its table's shape is its config).
    fn read(dir: &Path) -> Result<Self> {
        let layout = Layout::read(dir)?;
        let bdir = layout.backbone_dir.as_path();
        let sparse = layout.sparse.is_some() || layout.autoencoder.is_some();
        let is_static = matches!(layout.encoder, Encoder::Static | Encoder::Model2Vec);
        let m3 = layout.colbert.is_none()
            && layout.multi_vector.is_none()
            && !sparse
            && !is_static
            && bdir.join("colbert_linear.pt").exists()
            && bdir.join("sparse_linear.pt").exists();
        let colbert = layout.colbert.is_some() || layout.multi_vector.is_some();
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
            let mlm_config: Option<MlmConfig> = if layout.sparse.is_some() {
                Some(serde_json::from_slice(&config_bytes).map_err(|e| Error::invalid_file(&config_path, e))?)
            } else {
                None
            };
            (config, config_path, head_config, mlm_config)
        };
        Ok(Folder { layout, config, config_path, head_config, mlm_config, sparse, is_static, m3, colbert })
    }

    fn bdir(&self) -> &Path {
        &self.layout.backbone_dir
    }

    /// A sparse encoder's kind, for messages: "SPLADE" (an inference-free one too) or "CSR".
    fn sparse_kind(&self) -> Option<&'static str> {
        match (self.sparse, self.layout.autoencoder.is_some()) {
            (false, _) => None,
            (true, true) => Some("CSR"),
            (true, false) => Some("SPLADE"),
        }
    }
}

/// What the model is loaded for.
#[derive(Clone, Copy)]
struct Task {
    /// A classifier: the classification head, not the embedding outputs.
    classify: bool,
    /// What the model gives by default (what the write paths store): model_info's task.
    name: &'static str,
}

impl Task {
    /// `options.task` checked against what the folder holds; without one, a checkpoint
    /// that names a *ForSequenceClassification architecture is a classifier.
    fn decide(options: &Options, folder: &Folder) -> Result<Self> {
        let Folder { colbert, m3, sparse, is_static, .. } = *folder;
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
                    folder.sparse_kind().map_or("static embedding".into(), |kind| format!("sparse ({kind})"))
                )))
            }
            Some("classify") => true,
            None => !sparse && (folder.head_config.classification_architecture().is_some() || folder.layout.logit_score.is_some()),
            Some(other) => {
                return Err(Error::InvalidOptions(format!(
                    "unknown task \"{other}\"; expected embed, classify, sparse or multi"
                )))
            }
        };
        let name = match options.task.as_deref() {
            _ if classify => "classify",
            _ if sparse => "sparse",
            _ if colbert => "multi",
            Some("multi") => "multi",
            Some("sparse") => "sparse",
            _ => "embed",
        };
        Ok(Task { classify, name })
    }
}

/// The pooling of the dense output (every model's, as model_info shows it), and whether
/// the output is normalised.
struct Pooling {
    modes: Vec<PoolingMode>,
    /// Where the pooling came from: a file, "options", or the default.
    from: String,
    normalize: bool,
}

impl Pooling {
    /// The Pooling module's width checked against the backbone's, the pooling of the
    /// options, the Pooling module or the model's default, and normalize.
    fn resolve(options: &Options, folder: &Folder, classify: bool) -> Result<Self> {
        let (layout, config) = (&folder.layout, &folder.config);
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
        let (modes, from) = match (&options.pooling, &layout.pooling) {
            // A classifier's head does its own pooling.
            _ if classify => (Vec::new(), "none (the classification head pools)".to_string()),
            // SpladePooling pools the MLM head's logits (see `sparse` in model_info).
            _ if layout.sparse.is_some() => {
                let splade = layout.sparse.as_ref().map(|s| s.pooling_path.display().to_string());
                (Vec::new(), format!("SpladePooling ({})", splade.unwrap_or_default()))
            }
            (None, None) if folder.is_static => {
                (vec![PoolingMode::Mean], "the static model's mean of its token embeddings".into())
            }
            (Some(spec), _) => (parse_pooling(&spec.to_vec())?, "options".to_string()),
            (None, Some(module)) => (module.modes.clone(), module.path.display().to_string()),
            // bge-m3 as FlagEmbedding's trainer saves it (its token heads, no modules):
            // `BGEM3FlagModel.encode`'s dense vector, the [CLS] token, normalised.
            (None, None) if folder.m3 => (
                vec![PoolingMode::Cls],
                "FlagEmbedding's BGEM3FlagModel (bge-m3's token heads and no sentence-transformers modules): cls, normalized".into(),
            ),
            (None, None) => {
                (vec![config.default_pooling()], "default (no sentence-transformers Pooling module)".into())
            }
        };
        let flag_m3 = folder.m3 && layout.pooling.is_none() && options.pooling.is_none();
        let normalize = options.normalize.unwrap_or(layout.normalize || flag_m3) && !classify;
        if config.modality() == Modality::Both && modes != [PoolingMode::Pooler] {
            return Err(Error::InvalidOptions(format!(
                "a model of text and images embeds both through its projections: pooling must be \"pooler\", not {}",
                serde_json::to_string(&modes).unwrap_or_default()
            )));
        }
        Ok(Pooling { modes, from, normalize })
    }
}

/// The input stages and the weights (mapped from the shared file, or built). The input
/// stages (the tokenizer's JSON: most of a load from the shared file) load on a thread of
/// their own while this one maps or builds the weights (and may wait, cancellably, for
/// another process building them). Their errors come first.
fn load_parts(
    root: &Path,
    dir: &Path,
    options: &Options,
    share: Option<&Share>,
    folder: &Folder,
    classify: bool,
    pooling: &[PoolingMode],
) -> Result<(Inputs, Arc<Weights>, Sharing)> {
    let build = || build_weights((root, dir), options, folder, classify, pooling);
    let (inputs, weights) = std::thread::scope(|scope| {
        let inputs = scope.spawn(|| Inputs::load(folder.bdir(), &folder.config, &folder.layout, options));
        let weights = match share {
            None => build().map(|w| (Arc::new(w), Sharing::default())),
            Some(share) => shared_weights(share, root, dir, options, &folder.config, build),
        };
        (inputs.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)), weights)
    });
    let inputs = inputs?;
    let (weights, sharing) = weights?;
    Ok((inputs, weights, sharing))
}

/// The outputs built, with what model_info shows of them.
struct Built {
    outputs: Outputs,
    /// The dense output's settings (every model's, as model_info shows them).
    dense: DenseOutput,
    /// The width of the main output before `dimensions`.
    dim: usize,
}

/// Each output the folder holds built by its builder (a sparse encoder's, the token
/// outputs), then the dense output's truncation checked against the main output's width,
/// and the outputs the model gives assembled (see [`Gives::of`]), with its routing.
#[allow(clippy::too_many_arguments)]
fn build_outputs(
    options: &Options,
    folder: &Folder,
    task: Task,
    selection: Selection,
    pooling: &Pooling,
    (text, query): (Option<&TextInput>, Option<crate::sparse::QueryRoute>),
    weights: &Weights,
    dir: &Path,
) -> Result<Built> {
    let (layout, config, bdir) = (&folder.layout, &folder.config, folder.bdir());
    let sparse = match (&layout.sparse, &weights.sae) {
        (Some(layout), _) => Some(SparseStage::load(layout, weights.mlm.as_ref(), selection, query, bdir)?),
        // CSR: the dense output (no truncation: `dimensions` is refused) through the autoencoder.
        (None, Some(sae)) => {
            let dense = (pooling.modes.clone(), pooling.normalize);
            let config = dir.join("config_sentence_transformers.json");
            Some(SparseStage::autoencoder(sae, dense, selection, layout.prompts.max_active_dims, &config)?)
        }
        (None, None) => None,
    };
    let tokens = match (text, &weights.late) {
        (Some((t, max_length, _)), Some(_)) => Some(TokenOutput::load(
            (layout.colbert.as_ref().map(|(_, settings)| settings), layout.multi_vector.as_ref().map(|m| &m.settings)),
            (&t.tokenizer, *max_length),
            weights.backbone.as_ref(),
            (bdir, dir),
            config,
            selection,
        )?),
        _ => None,
    };
    // The heads' sizes were checked in order when the weights were built.
    let dim = match (&sparse, weights.late.as_ref().and_then(|h| h.dim())) {
        (Some(s), _) => s.dim,
        (None, Some(d)) if task.name == "multi" => d,
        (None, _) if task.name == "sparse" => config.vocab_size(),
        (None, _) => weights.output_dim().unwrap_or_else(|| pooled_dim(&pooling.modes, weights.backbone.as_ref(), config)),
    };
    let dimensions = match options.dimensions {
        Some(0) => return Err(Error::InvalidOptions("dimensions must be at least 1".into())),
        Some(n) if n > dim => {
            return Err(Error::InvalidOptions(format!("dimensions {n} exceeds the model's output dimension {dim}")))
        }
        other => other,
    };
    let dense = DenseOutput {
        pooling: pooling.modes.clone(),
        normalize: pooling.normalize,
        dimensions,
        normalize_after_truncation: dimensions.is_some() && options.normalize == Some(true),
    };
    let routing = match (&layout.router, &weights.routes) {
        (Some(router), Some(routes)) => Some(Routing::new(router, routes, options)),
        _ => None,
    };
    let gives = match (text, &weights.score) {
        (Some((t, max_length, _)), Some(_)) if task.classify => {
            Gives::Score(Box::new(ScoreOutput::load(layout, (bdir, dir), t, *max_length)?))
        }
        _ => Gives::of(task.classify, sparse, tokens, &dense),
    };
    Ok(Built { outputs: Outputs { gives, routing }, dense, dim })
}

/// What `embed.model_info` shows of the pipeline.
#[allow(clippy::too_many_arguments)]
fn describe(
    options: &Options,
    folder: &Folder,
    task: Task,
    pooling: &Pooling,
    built: &Built,
    (text, images): (Option<&TextInput>, Option<&ImageProcessor>),
    weights: &Weights,
    dir: &Path,
) -> PipelineInfo {
    let Built { outputs, dense, dim } = built;
    let classifier = weights.classifier.as_ref();
    let score = outputs.score().zip(weights.score.as_ref()).map(|(s, head)| s.describe(head));
    let (max_length, lowercase, prompt_texts, default_prompt, include_prompt) = match text {
        Some((t, max_length, texts)) => {
            (*max_length, t.lowercase, texts.clone(), t.default_prompt.clone(), t.include_prompt)
        }
        None => (0, false, BTreeMap::new(), None, true),
    };
    let sparse = match &outputs.gives {
        Gives::Sparse(s) => Some(s.describe(weights)),
        _ => None,
    };
    PipelineInfo {
        task: task.name,
        multi: outputs.describe_multi(weights),
        sparse,
        dim: match (classifier, &score) {
            (Some(c), _) => c.labels.len(),
            (None, Some(_)) => 1,
            (None, None) => dense.dimensions.unwrap_or(*dim),
        },
        classifier: classifier.map(Classifier::describe).or(score),
        labels: classifier.map(|c| c.labels.clone()),
        problem_type: classifier.map(|c| c.problem),
        architecture: folder.config.architecture(),
        modality: folder.config.modality(),
        preprocessing: images.map(ImageProcessor::describe),
        backbone: folder.config.summary(),
        zero_shot: weights
            .backbone
            .sigmoid_logits()
            .map(|(scale, bias)| serde_json::json!({"logit_scale": scale, "logit_bias": bias})),
        parameters: weights.parameters,
        precision: options.precision.unwrap_or_default(),
        pooling: pooling.modes.clone(),
        pooling_from: pooling.from.clone(),
        heads: weights.heads.iter().map(Dense::describe).collect(),
        router: outputs.routing.as_ref().zip(weights.routes.as_ref()).map(|(routing, routes)| routing.describe(routes)),
        adapters: {
            let copy = if weights.adapters.is_empty() {
                0
            } else {
                crate::weights::checkpoint_bytes(folder.bdir(), options.precision.unwrap_or_default()).unwrap_or(0)
            };
            weights
                .adapters
                .iter()
                .map(|a| {
                    let prompt = prompt_texts.iter().find(|(k, _)| crate::lora::same_task(k, &a.name)).map(|(_, p)| p.clone());
                    serde_json::json!({"name": a.name, "prompt": prompt, "changed_parameters": a.changed, "bytes": copy})
                })
                .collect()
        },
        normalize: dense.normalize,
        dimensions: dense.dimensions,
        normalize_after_truncation: dense.normalize_after_truncation,
        max_length,
        lowercase,
        prompts: prompt_texts,
        default_prompt,
        include_prompt,
        long_input: options.long_input.unwrap_or_default(),
        directory: dir.to_path_buf(),
    }
}

/// Reads the weights from the model's files: the backbone, then each output's weights (a
/// sparse encoder's MLM head, the classification head, the projection heads, the token
/// heads), each checked against the stage before it.
fn build_weights(
    (root, dir): (&Path, &Path),
    options: &Options,
    folder: &Folder,
    classify: bool,
    pooling: &[PoolingMode],
) -> Result<Weights> {
    let (config, bdir) = (&folder.config, folder.bdir());
    let device = Device::Cpu;
    // LoRA task adapters: the backbone read through them (the base), and a copy per task.
    let lora = if folder.is_static {
        None
    } else {
        crate::lora::Layout::find(bdir, &crate::files::read_json(&folder.config_path)?)?
    };
    let (vb, parameters) = match &lora {
        Some(l) => (l.weights(None), l.parameters()),
        None => crate::weights::load_weights(bdir, &device)?,
    };
    let mlm = folder.mlm_config.as_ref().map(|c| MlmHead::load(&vb, c).map_err(|e| e.in_dir(bdir))).transpose()?;
    // A classifier: the classification head, or a causal-LM reranker's LM-head rows.
    let score = match &folder.layout.logit_score {
        Some(module) if classify => {
            let h = &folder.head_config;
            let arch = (h.architectures.as_slice(), config.architecture(), h.tie_word_embeddings.unwrap_or(false));
            Some(ScoreHead::load(&vb, module, arch, (config.vocab_size(), config.hidden_size()), &folder.config_path)?)
        }
        _ => None,
    };
    let classifier = if classify && score.is_none() {
        Some(outputs::classifier_head(&vb, config, &folder.head_config, (&folder.config_path, bdir))?)
    } else {
        None
    };
    // The backbone's linear layers in the precision asked for; heads stay float32.
    let precision = options.precision.unwrap_or_default();
    let late = super::multi::LateHeads::load(bdir, &folder.layout, folder.m3, config.hidden_size(), &vb)?;
    let backbone = crate::layers::with_precision(precision, || config.load(vb)).map_err(|e| e.in_dir(bdir))?;
    let adapters = match &lora {
        Some(l) => {
            if classify || folder.mlm_config.is_some() || late.is_some() {
                return Err(Error::Unsupported {
                    what: "LoRA task adapters",
                    value: format!("{} ({})", crate::lora::names(&l.tasks), l.kind),
                    path: bdir.to_path_buf(),
                    supported: "an embedding model's adapters (embed); a classifier, sparse or multi-vector model with adapters is refused",
                });
            }
            let adapted = l
                .tasks
                .iter()
                .map(|task| {
                    let backbone = crate::layers::with_precision(precision, || config.load(l.weights(Some(task))))
                        .map_err(|e| e.in_dir(bdir))?;
                    Ok(super::Adapted { name: task.name.clone(), changed: task.changed(), backbone })
                })
                .collect::<Result<Vec<_>>>()?;
            l.check_used()?;
            adapted
        }
        None => Vec::new(),
    };
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
    // A classifier ends in its head: sentence-transformers' Dense modules (and a Router of
    // them) do not apply (and the options name no heads for it).
    let (heads, routes) = if classify {
        (Vec::new(), None)
    } else {
        let dim = pooled_dim(pooling, backbone.as_ref(), config);
        outputs::dense_heads(&folder.layout, options, (root, dir), dim)?
    };
    // A CSR model's SparseAutoEncoder, over what the heads give (no Router before it).
    let sae = match &folder.layout.autoencoder {
        Some(folder_of) => {
            let width = heads.last().map_or_else(|| pooled_dim(pooling, backbone.as_ref(), config), |h| h.out_features);
            Some(SparseAutoEncoder::load(folder_of, width)?)
        }
        None => None,
    };
    let parameters = parameters
        + heads.iter().map(Dense::parameters).sum::<usize>()
        + routes.as_ref().map_or(0, Routes::parameters)
        + late.as_ref().map_or(0, super::multi::LateHeads::parameters)
        + sae.as_ref().map_or(0, SparseAutoEncoder::parameters);
    Ok(Weights { backbone, adapters, classifier, heads, parameters, mlm, routes, late, sae, score })
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
            // A file changed since the build read it gives no key (and no file).
            // Hashed while the build runs (on another core), checked after it.
            let before = key::dir_stamps(root, dir)?;
            let (store_dir, root, dir, options) =
                (share.store.dir().to_path_buf(), root.to_path_buf(), dir.to_path_buf(), options.clone());
            let (hash_root, hash_dir) = (root.clone(), dir.clone());
            let hashing = crate::threads::spawn_quiet(move || -> Result<String> {
                let store = Store::open(&store_dir)?;
                prepared_key(&store, &hash_root, &hash_dir, &options, None)
            });
            KeyOf::Later(Box::new(move || {
                let key = hashing
                    .join()
                    .map_err(|_| Error::Inference("the thread hashing the model's files panicked".into()))??;
                if key::dir_stamps(&root, &dir)? != before {
                    return Err(Error::invalid_file(&dir, "its files changed while it loaded; no shared file written"));
                }
                Ok(key)
            }))
        }
    };
    let build = || {
        let _admitted = share.admit.map(|admit| admit()).transpose()?;
        build()
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
                #[serde(default)]
                adapters: Vec<super::Adapted<serde_json::Value>>,
                classifier: Option<Classifier>,
                heads: Vec<Dense>,
                parameters: usize,
                #[serde(default)]
                mlm: Option<MlmHead>,
                #[serde(default)]
                routes: Option<Routes>,
                #[serde(default)]
                late: Option<super::multi::LateHeads>,
                #[serde(default)]
                sae: Option<SparseAutoEncoder>,
                score: Option<ScoreHead>,
            }
            let weights = file.restore(|parts| {
                let d: Described = serde_json::from_value(parts)
                    .map_err(|e| Error::invalid_file(&file.path, format!("cannot restore the weights: {e}")))?;
                let backbone = config.restore(d.backbone)?;
                let adapters = d
                    .adapters
                    .into_iter()
                    .map(|a| Ok(super::Adapted { name: a.name, changed: a.changed, backbone: config.restore(a.backbone)? }))
                    .collect::<Result<Vec<_>>>()?;
                Ok(Weights {
                    backbone,
                    adapters,
                    classifier: d.classifier,
                    heads: d.heads,
                    parameters: d.parameters,
                    mlm: d.mlm,
                    routes: d.routes,
                    late: d.late,
                    sae: d.sae,
                    score: d.score,
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

