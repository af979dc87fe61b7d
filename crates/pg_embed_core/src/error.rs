//! The one error type of pg_embed. Plain Rust: the SQL layer (`sql.rs`) turns each
//! variant into an `ereport` with the SQLSTATE returned by [`Error::sqlstate`].

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// SQLSTATE classes used by pg_embed (names as in PostgreSQL's errcodes.txt).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqlState {
    /// 22023 invalid_parameter_value
    InvalidParameterValue,
    /// 57014 query_canceled
    QueryCanceled,
    /// 22001 string_data_right_truncation
    StringDataRightTruncation,
    /// 54000 program_limit_exceeded
    ProgramLimitExceeded,
    /// 42704 undefined_object
    UndefinedObject,
    /// 42501 insufficient_privilege
    InsufficientPrivilege,
    /// 55000 object_not_in_prerequisite_state
    ObjectNotInPrerequisiteState,
    /// 58P01 undefined_file
    UndefinedFile,
    /// 58030 io_error
    IoError,
    /// XX001 data_corrupted
    DataCorrupted,
    /// 0A000 feature_not_supported
    FeatureNotSupported,
    /// 22004 null_value_not_allowed
    NullValueNotAllowed,
    /// 22000 data_exception
    DataException,
    /// 42809 wrong_object_type
    WrongObjectType,
    /// XX000 internal_error
    InternalError,
    /// 22P03 invalid_binary_representation
    InvalidBinaryRepresentation,
    /// 42804 datatype_mismatch
    DatatypeMismatch,
    /// 25006 read_only_sql_transaction
    ReadOnlySqlTransaction,
    /// 53200 out_of_memory
    OutOfMemory,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("model \"{0}\" is not registered")]
    ModelNotRegistered(String),

    #[error("invalid model name \"{0}\"")]
    InvalidModelName(String),

    #[error("permission denied to {action}")]
    PermissionDenied { action: &'static str },

    /// A call that writes, on a hot standby (`function` as SQL names it).
    #[error("{function} cannot run on a hot standby: it writes to the database")]
    HotStandby { function: &'static str },

    #[error("pg_embed.model_dir is not set")]
    ModelDirNotSet,

    /// A registration an extension upgrade marked: this version computes the model
    /// differently from the version that registered it (`reason` says how).
    #[error("model \"{name}\" must be registered again with embed.register_model before it is used: {reason}")]
    RegisterAgain { name: String, reason: String },

    #[error("{what} \"{source_name}\" is outside pg_embed.model_dir")]
    SourceOutsideModelDir { what: &'static str, source_name: String },

    #[error("pg_embed.model_dir \"{model_dir}\" is not usable: {message}")]
    ModelDirInvalid { model_dir: String, message: String },

    #[error("invalid model source \"{source_name}\": {reason}")]
    InvalidSource { source_name: String, reason: String },

    #[error("model source \"{source_name}\" does not exist in pg_embed.model_dir")]
    SourceNotFound { source_name: String },

    #[error("model file \"{}\" is missing", path.display())]
    MissingFile { path: PathBuf },

    #[error("could not read model file \"{}\": {message}", path.display())]
    Io { path: PathBuf, message: String },

    /// The shared prepared-weights files (`pg_embed.cache_dir`): a directory, lock or file
    /// that could not be made, written, locked or mapped.
    #[error("could not use the shared weights at \"{}\": {message}", path.display())]
    SharedWeights { path: PathBuf, message: String },

    #[error("invalid model file \"{}\": {message}", path.display())]
    InvalidFile { path: PathBuf, message: String },

    #[error("unsupported {what} \"{value}\" in \"{}\"", path.display())]
    Unsupported { what: &'static str, value: String, path: PathBuf, supported: &'static str },

    #[error("invalid options: {0}")]
    InvalidOptions(String),

    #[error("model is for {task}, not {call}")]
    WrongTask { task: &'static str, call: &'static str },

    /// A sparse model called through embed(), or a dense one through embed_sparse().
    #[error("this model gives {gives}: call {instead}(), not {call}()")]
    WrongOutput { gives: &'static str, call: &'static str, instead: &'static str },

    #[error("this model's tokenizer has no sentence-pair template")]
    NoPairTemplate,

    #[error("rerank needs a cross-encoder with one label; this model has {labels} labels")]
    NotACrossEncoder { labels: usize },

    #[error("unknown prompt name \"{name}\"")]
    UnknownPrompt { name: String, known: String },

    /// An asymmetric model (a Router of heads per route) called without a route when it has
    /// no default route; `asym`: saved by sentence-transformers < 5 (models.Asym).
    #[error("this model has no default route: name one of its routes ({routes}) as the prompt_name argument")]
    NoRoute { routes: String, asym: bool },

    #[error("could not tokenize input: {0}")]
    Tokenize(String),

    #[error("{what} must not be NULL")]
    NullArgument { what: &'static str },

    #[error("{what} must not contain NULL (element {index})")]
    NullElement { what: &'static str, index: usize },

    #[error("catalog access failed: {0}")]
    Catalog(String),

    #[error("inference failed: {0}")]
    Inference(String),

    #[error("input has {tokens} tokens, more than the model's max_length of {max_length}")]
    InputTooLong { tokens: usize, max_length: usize },

    /// `mb`: the size of the model's prepared weights in `precision` (see
    /// `weights::prepared_bytes`): the server's one shared file.
    #[error("model \"{source_name}\" needs {mb} MB for its weights in {precision}, more than pg_embed.max_model_size ({limit_mb} MB)")]
    ModelTooLarge { source_name: String, mb: u64, limit_mb: u64, precision: &'static str },

    /// A build (a registration, or a load that builds its weights) that did not get the
    /// memory it needs within pg_embed.building_wait: see `prepared::budget`. Sizes in MB.
    #[error("{what} needs {need_mb} MB of memory to build its weights; {room}{held} (waited {waited_s:.1} s)")]
    BuildingMemory { what: String, need_mb: u64, room: String, held: String, waited_s: f64 },

    #[error("invalid {what}: {reason}")]
    InvalidArgument { what: &'static str, reason: String },

    #[error("\"{repo}\" at revision \"{revision}\" is not in the Hugging Face cache \"{}\"", cache.display())]
    NotInHubCache { repo: String, revision: String, cache: PathBuf },

    #[error("could not download \"{repo}\" from the Hugging Face hub: {message}")]
    HubDownload { repo: String, message: String },

    #[error("model file \"{}\" does not match its registration: sha256 {actual}, registered {expected}", path.display())]
    ChecksumMismatch { path: PathBuf, expected: String, actual: String },

    /// The bytes are no image of a supported format, or a damaged one: the decoder's reason.
    #[error("could not decode image: {reason}")]
    ImageDecode { reason: String },

    /// The image's header claims more pixels than pg_embed.max_image_pixels allows.
    #[error("image of {width}x{height} pixels is larger than pg_embed.max_image_pixels ({limit} pixels)")]
    ImageTooLarge { width: u64, height: u64, limit: u64 },

    /// An input that tokenizes to no tokens at all (a tokenizer that adds no special
    /// tokens, as GPT-2's, given an empty text): transformers fails on it too.
    #[error("input {input:?} has no tokens (the model's tokenizer adds none of its own)")]
    EmptyInput { input: String },

    /// Zero bytes, or an image of zero width or height.
    #[error("image is empty")]
    EmptyImage,

    /// A text input for an image model or an image for a text model; `model` and `call` are
    /// each "text" or "image": what the model takes and what the call passed.
    #[error("this model takes {}, not {}", modality_noun(model), modality_noun(call))]
    WrongModality { model: &'static str, call: &'static str },

    /// The caller asked the work to stop (a cancel, a statement timeout, a terminate) while
    /// it ran: what it computed is unfinished and was dropped.
    #[error("canceling statement due to user request")]
    Cancelled,
}

/// "text" or "images", for [`Error::WrongModality`]'s message.
fn modality_noun(kind: &str) -> &str {
    match kind {
        "image" => "images",
        other => other,
    }
}

impl Error {
    pub fn sqlstate(&self) -> SqlState {
        use Error::*;
        match self {
            ModelNotRegistered(_) => SqlState::UndefinedObject,
            InputTooLong { .. } => SqlState::StringDataRightTruncation,
            ModelTooLarge { .. } => SqlState::ProgramLimitExceeded,
            BuildingMemory { .. } => SqlState::OutOfMemory,
            NotInHubCache { .. } => SqlState::UndefinedFile,
            HubDownload { .. } => SqlState::IoError,
            ChecksumMismatch { .. } => SqlState::DataCorrupted,
            InvalidModelName(_)
            | InvalidOptions(_)
            | InvalidSource { .. }
            | UnknownPrompt { .. }
            | NoRoute { .. }
            | InvalidArgument { .. }
            | EmptyInput { .. } => SqlState::InvalidParameterValue,
            ModelDirInvalid { .. } => SqlState::UndefinedFile,
            PermissionDenied { .. } | SourceOutsideModelDir { .. } => SqlState::InsufficientPrivilege,
            ModelDirNotSet | RegisterAgain { .. } => SqlState::ObjectNotInPrerequisiteState,
            Unsupported { .. } | NoPairTemplate => SqlState::FeatureNotSupported,
            SourceNotFound { .. } | MissingFile { .. } => SqlState::UndefinedFile,
            Io { .. } | SharedWeights { .. } => SqlState::IoError,
            InvalidFile { .. } => SqlState::DataCorrupted,
            Tokenize(_) => SqlState::DataException,
            WrongTask { .. } | WrongOutput { .. } | NotACrossEncoder { .. } => SqlState::WrongObjectType,
            NullArgument { .. } | NullElement { .. } => SqlState::NullValueNotAllowed,
            Inference(_) | Catalog(_) => SqlState::InternalError,
            ImageDecode { .. } | EmptyImage => SqlState::InvalidBinaryRepresentation,
            ImageTooLarge { .. } => SqlState::ProgramLimitExceeded,
            WrongModality { .. } => SqlState::DatatypeMismatch,
            HotStandby { .. } => SqlState::ReadOnlySqlTransaction,
            Cancelled => SqlState::QueryCanceled,
        }
    }

    /// A hint for the user, where one helps.
    pub fn hint(&self) -> Option<String> {
        use Error::*;
        match self {
            ModelNotRegistered(_) => {
                Some("Register it with embed.register_model(name, source); see embed.models.".into())
            }
            ModelDirNotSet => Some(
                "A superuser sets it in postgresql.conf or with ALTER SYSTEM SET pg_embed.model_dir = '/path/to/models'."
                    .into(),
            ),
            SourceOutsideModelDir { .. } => Some(
                "Model sources and head files must lie inside pg_embed.model_dir; \"..\", absolute paths and symlinks may not leave it."
                    .into(),
            ),
            Unsupported { supported, .. } => Some(format!("Supported: {supported}.")),
            UnknownPrompt { known, .. } => Some(format!(
                "The model's prompts: {known}. Add prompts with options => '{{\"prompts\": {{\"name\": \"text\"}}}}'."
            )),
            NoRoute { routes, asym } => {
                // The document route where there is one: what a trigger or backfill embeds.
                let route = routes.split(", ").find(|r| *r == "document").or(routes.split(", ").last()).unwrap_or_default();
                let why = if *asym {
                    "sentence-transformers 3.x and 4.x (models.Asym) pass an input without a route key through no route's heads, a vector unlike either route's; "
                } else {
                    ""
                };
                Some(format!(
                    "{why}embed(model, input, '{route}') takes the route '{route}'; register the model with options => '{{\"prompt\": \"{route}\"}}' to make it the default."
                ))
            }
            PermissionDenied { .. } => Some(
                "Superusers and members of the role embed_admin may register, drop and auto-register models; everyone may run inference on registered models."
                    .into(),
            ),
            ModelTooLarge { precision, .. } => {
                let smaller = if *precision == "float32" {
                    " Registering it with options => '{\"precision\": \"bfloat16\"}' about halves them."
                } else {
                    ""
                };
                Some(format!(
                    "A server holds one copy of a model's weights, in a file every backend maps (pg_embed.cache_dir), which the backend that loads it first builds; with pg_embed.cache_dir = '' every backend keeps its own copy in its memory.{smaller} A superuser may raise pg_embed.max_model_size (0: no limit)."
                ))
            }
            BuildingMemory { .. } => Some(
                "A registration, or a load that builds a model's weights, is admitted only when the memory it holds while it builds fits what the machine has available (MemAvailable, and the cgroup's limit) and pg_embed.max_building_memory, counting the builds in progress in every backend. Retry when they are done, raise pg_embed.building_wait to wait longer, or (a superuser) raise pg_embed.max_building_memory."
                    .into(),
            ),
            InputTooLong { .. } => Some(
                "Split it with embed.chunk(), or register the model with options => '{\"long_input\": \"truncate\"}' or '{\"long_input\": \"mean_of_chunks\"}'."
                    .into(),
            ),
            NotInHubCache { .. } => Some(
                "Put the model into the cache (huggingface-cli download org/name, with HF_HOME or pg_embed.hf_cache pointing at the cache), or let a superuser SET pg_embed.allow_download = on."
                    .into(),
            ),
            ChecksumMismatch { .. } => Some(
                "The cached file changed after registration. Re-register the model (and re-embed) if the change is intended."
                    .into(),
            ),
            WrongTask { call: "embed", .. } => Some(
                "Use classify() or classify_labels(), or register it with options => '{\"task\": \"embed\"}' to embed with its backbone."
                    .into(),
            ),
            WrongTask { .. } => Some("classify(), classify_labels() and rerank() need a *ForSequenceClassification checkpoint.".into()),
            WrongOutput { instead: "embed_sparse", .. } => Some(
                "A sparse encoder (SPLADE) gives a weight per vocabulary id: embed_sparse(model, input)::sparsevec, or embed.sparse_terms(model, input) to read its terms.".into(),
            ),
            WrongOutput { instead: "embed", .. } => Some(
                "embed(model, input) gives this model's dense vector (real[], castable to vector).".into(),
            ),
            WrongOutput { .. } => None,
            HotStandby { .. } => Some(
                "Run it on the primary: what it writes reaches this standby by replication. embed(), classify() and the other read-only calls work here."
                    .into(),
            ),
            ImageTooLarge { .. } => Some(
                "The limit guards against decompression bombs. Scale the image down, or let a superuser raise pg_embed.max_image_pixels."
                    .into(),
            ),
            _ => None,
        }
    }

    /// An I/O error on the shared prepared-weights files (see [`Error::SharedWeights`]).
    pub(crate) fn shared(path: impl Into<PathBuf>, err: std::io::Error) -> Self {
        Error::SharedWeights { path: path.into(), message: err.to_string() }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, err: std::io::Error) -> Self {
        let path = path.into();
        if err.kind() == std::io::ErrorKind::NotFound {
            Error::MissingFile { path }
        } else {
            Error::Io { path, message: err.to_string() }
        }
    }

    pub(crate) fn invalid_file(path: impl Into<PathBuf>, message: impl ToString) -> Self {
        Error::InvalidFile { path: path.into(), message: message.to_string() }
    }

    /// Makes a relative file path in the error (as model files report them) absolute.
    pub(crate) fn in_dir(mut self, dir: &std::path::Path) -> Self {
        use Error::*;
        if let Unsupported { path, .. } | InvalidFile { path, .. } | MissingFile { path } | Io { path, .. } =
            &mut self
        {
            if path.is_relative() {
                *path = dir.join(&*path);
            }
        }
        self
    }

    pub(crate) fn inference(err: candle_core::Error) -> Self {
        Error::Inference(err.to_string())
    }
}
