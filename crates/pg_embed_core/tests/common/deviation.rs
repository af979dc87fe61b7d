//! How far a lower precision moves a model's outputs from its float32 ones, and the bound
//! PyTorch's own run of that precision sets (tests/fixtures/bf16_reference.json,
//! int8_reference.json; tests/bf16.rs and tests/int8.rs).

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::{cosine, max_abs_diff, root};

#[derive(Deserialize)]
pub struct Reference {
    pub inputs: Inputs,
    pub models: BTreeMap<String, Deviation>,
}

#[derive(Deserialize)]
pub struct Inputs {
    pub texts: Vec<String>,
}

/// PyTorch's deviation on one model: its largest element-wise difference and its smallest
/// cosine over the rows.
#[derive(Deserialize)]
pub struct Deviation {
    pub output: String,
    pub torch_max_abs: f32,
    pub torch_min_cosine: f32,
}

/// How far one run's outputs are from another's: the largest element-wise difference and
/// the smallest cosine over the rows (a 1-label row's "cosine" is the agreement of signs).
#[derive(Clone, Copy, Debug)]
pub struct Divergence {
    pub max_abs: f32,
    pub min_cos: f32,
}

pub fn divergence(got: &[Vec<f32>], want: &[Vec<f32>]) -> Divergence {
    assert_eq!(got.len(), want.len());
    let (mut max_abs, mut min_cos) = (0f32, 1f32);
    for (g, w) in got.iter().zip(want) {
        max_abs = max_abs.max(max_abs_diff(g, w));
        min_cos = min_cos.min(if w.len() == 1 { (g[0] * w[0]).signum() } else { cosine(g, w) });
    }
    Divergence { max_abs, min_cos }
}

impl Deviation {
    /// Whether a run that is `d` from the float32 one stays within `abs_factor` times
    /// PyTorch's max abs difference and, for embeddings, 1 - cosine within `cos_factor`
    /// times PyTorch's (a logit row of 1 to 3 labels has no useful cosine).
    pub fn allows(&self, d: Divergence, abs_factor: f32, cos_factor: f32) -> bool {
        d.max_abs <= abs_factor * self.torch_max_abs
            && (self.output != "embedding" || 1.0 - d.min_cos <= cos_factor * (1.0 - self.torch_min_cosine))
    }
}

/// The reference file `tests/fixtures/<name>`.
pub fn reference(name: &str) -> Reference {
    let path = root().join("tests/fixtures").join(name);
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap_or_else(|e| panic!("{name} parses: {e}"))
}

/// The reference files' key of a model folder.
pub fn key(dir: &Path) -> String {
    if dir.ends_with("models/all-MiniLM-L6-v2") {
        return "minilm".into();
    }
    let repo = root().canonicalize().unwrap();
    dir.canonicalize().unwrap().strip_prefix(&repo).unwrap().display().to_string()
}
