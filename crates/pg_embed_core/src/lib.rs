//! pg_embed's inference core, with no pgrx: model sources and the hub cache, weight I/O,
//! the layer library, the architectures, pooling, heads and the pipeline that joins them. The
//! extension crate at the repository root is the SQL edge over this crate; everything here
//! is tested with plain `cargo test -p pg_embed_core`.

pub mod autoencoder;
pub mod buffer;
pub mod changes;
pub mod chat;
pub mod chunk;
pub mod classifier;
pub mod cpu;
pub mod error;
pub mod files;
pub mod heads;
pub mod late;
pub mod logit_score;
pub mod lora;
pub mod hub;
// `#[macro_use]`: its `dispatch!` macro serves the modules after it (kernels).
#[macro_use]
pub mod layers;
pub mod kernels;
pub mod maxsim;
pub mod mlm;
pub mod multivector;
pub mod models;
pub mod options;
pub mod pipeline;
pub mod pooling;
pub mod prepared;
pub mod processor;
pub mod safetensors_io;
pub mod score_head;
pub mod sentencepiece;
pub mod source;
pub mod sparse;
pub mod st;
pub mod stages;
pub mod threads;
pub mod tokenizer;
pub mod torch_pt;
pub mod weights;
