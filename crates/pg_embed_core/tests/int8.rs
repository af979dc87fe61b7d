//! `precision: "int8"` against float32, on every model: all-MiniLM-L6-v2 against
//! sentence-transformers' float32 vectors, and every fixture within a small factor of what
//! PyTorch's simulation of the same quantization moves it (tests/fixtures/
//! int8_reference.json, made by scripts/gen_int8_reference.py: quantize-dequantize in
//! float32 in groups of 32 inputs, the same quantized values pg_embed computes). Every int8
//! kernel this CPU can run gives the same outputs bit for bit.

mod common;

use std::collections::BTreeMap;
use std::sync::Mutex;

use common::deviation::{self, divergence, key, Deviation, Divergence, Reference};
use common::*;
use pg_embed_core::kernels::int8::{self, Kernel};
use pg_embed_core::options::{Options, Precision};
use pg_embed_core::pipeline::Pipeline;

/// Forcing a kernel is process-wide: every test here takes its turn.
static FORCING: Mutex<()> = Mutex::new(());

fn reference() -> Reference {
    deviation::reference("int8_reference.json")
}

fn int8_options() -> Options {
    Options { precision: Some(Precision::Int8), ..Options::default() }
}

/// The bound (see the every-model test): element-wise at most `ABS_FACTOR` times PyTorch's
/// max abs difference; for embeddings, 1 - cosine at most `COS_FACTOR` times PyTorch's.
const ABS_FACTOR: f32 = 2.5;
const COS_FACTOR: f32 = 4.0;

fn allows(torch: &Deviation, d: Divergence) -> bool {
    torch.allows(d, ABS_FACTOR, COS_FACTOR)
}

/// all-MiniLM-L6-v2 in int8 over the golden cases (81 texts, from the empty one and "." to
/// 256-token ones): the min cosine to sentence-transformers' float32 vectors. PyTorch's
/// simulation of the method gives 0.9981 here (its lowest: ".", 3 tokens) and 0.9992 over
/// the bench corpus.
#[test]
fn minilm_in_int8_stays_close_to_sentence_transformers() {
    let _turn = FORCING.lock().unwrap_or_else(|e| e.into_inner());
    let g = golden();
    let p = Pipeline::load(&root().join("models/all-MiniLM-L6-v2"), &int8_options()).unwrap();
    assert_eq!(p.info().precision, Precision::Int8);
    let texts: Vec<&str> = g.cases.iter().map(|c| c.text.as_str()).collect();
    let batch = p.embed(&texts).unwrap();
    let (mut min, mut sum) = (1.0f32, 0.0f32);
    for (case, got) in g.cases.iter().zip(&batch) {
        let cos = cosine(got, &case.embedding);
        assert!(cos >= 0.997, "case {}: cosine {cos} to sentence-transformers float32", case.name);
        // Quantization is per row, so a text alone gets its vector in a batch (bit for bit on
        // the CPUs measured; where float32 attention adds in another order for a batch, a
        // flipped rounding of one quantized value may move it by about int8's own deviation).
        let alone = p.embed(&[case.text.as_str()]).unwrap().remove(0);
        assert!(cosine(&alone, got) >= 0.999, "case {}: alone and in a batch", case.name);
        (min, sum) = (min.min(cos), sum + cos);
    }
    eprintln!(
        "all-MiniLM-L6-v2 int8 ({}), {} golden cases: min cosine {min}, mean {}",
        p.kernel(),
        g.cases.len(),
        sum / g.cases.len() as f32
    );
}

/// Every model: pg_embed's int8 outputs differ from its float32 ones about as much as
/// PyTorch's simulation differs from PyTorch's float32 run. Both quantize the same values;
/// they add in other orders, so a value on a rounding edge of the quantization lands on
/// either side in one or the other, and the difference is carried through the later layers
/// (the simulation also quantizes the heads, which pg_embed keeps in float32). A layer left
/// in float32 shows as no change; a wrong product as differences of the size of the outputs.
#[test]
fn every_model_in_int8_moves_about_as_much_as_pytorchs_simulation() {
    let _turn = FORCING.lock().unwrap_or_else(|e| e.into_inner());
    let reference = reference();
    assert_eq!(reference.inputs.texts, TEXTS, "the reference was made on the texts the tests use");
    let (mut checked, mut failed) = (0, Vec::new());
    let mut ratios = Vec::new();
    for dir in model_dirs() {
        let name = key(&dir);
        let Ok(f32_pipeline) = Pipeline::load(&dir, &Options::default()) else {
            continue; // a folder that needs options (prepared.rs checks it refuses alike)
        };
        let torch = reference.models.get(&name).unwrap_or_else(|| panic!("{name} is not in int8_reference.json"));
        let want = outputs(&f32_pipeline);
        let p = Pipeline::load(&dir, &int8_options()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let got = outputs(&p);
        assert_eq!(got.len(), want.len(), "{name}");
        let d = divergence(&got, &want);
        eprintln!(
            "{name}: max abs {:.2e} (torch {:.2e}), min cosine {:.6} (torch {:.6})",
            d.max_abs, torch.torch_max_abs, d.min_cos, torch.torch_min_cosine
        );
        ratios.push(d.max_abs / torch.torch_max_abs);
        assert!(d.max_abs > 0.0, "{name}: int8 changed nothing: were the weights quantized?");
        if !allows(torch, d) {
            failed.push(name);
        }
        checked += 1;
    }
    ratios.sort_by(f32::total_cmp);
    eprintln!("max abs / torch's: {:.2} to {:.2}, median {:.2}", ratios[0], ratios[ratios.len() - 1], ratios[ratios.len() / 2]);
    assert!(failed.is_empty(), "beyond the bound from torch's int8 simulation: {failed:?}");
    assert!(checked >= 60, "{checked} models checked");
}

/// Every int8 kernel this CPU can run, forced in turn on whole models: the same outputs bit
/// for bit (their int32 sums are exact; everything else is the same code).
#[test]
fn forced_int8_kernels_agree_bit_for_bit_on_whole_models() {
    let _turn = FORCING.lock().unwrap_or_else(|e| e.into_inner());
    let dirs = [
        root().join("models/all-MiniLM-L6-v2"),
        root().join("tests/fixtures/backbones/deberta_v2"),
        root().join("tests/fixtures/decoders/qwen3_embed"),
        root().join("tests/fixtures/images/clip"),
    ];
    let mut failed = Vec::new();
    for dir in dirs {
        let name = key(&dir);
        let mut by_kernel = Vec::new();
        for kernel in Kernel::ALL {
            match int8::force(Some(kernel)) {
                Ok(()) => {
                    let p = Pipeline::load(&dir, &int8_options()).unwrap();
                    assert!(p.kernel().starts_with(kernel.name()), "{}", p.kernel());
                    by_kernel.push((kernel, outputs(&p)));
                }
                Err(why) => eprintln!("{name}: {} not tested here: {why}", kernel.name()),
            }
        }
        int8::force(None).unwrap();
        let portable = &by_kernel.iter().find(|(k, _)| *k == Kernel::Portable).unwrap().1;
        for (kernel, got) in &by_kernel {
            if got != portable {
                failed.push(format!("{name}: {}", kernel.name()));
            }
        }
    }
    assert!(failed.is_empty(), "not portable-int8's outputs bit for bit: {failed:?}");
}

/// int8 weights are a prepared file of their own, mapped with the same numbers as in
/// private memory; the linear layers take 1.25 bytes a weight (int8, and a float32 scale
/// and an int32 offset per 32), against 4 in float32.
#[test]
fn an_int8_model_shares_its_own_prepared_file() {
    use pg_embed_core::pipeline::Share;
    use pg_embed_core::prepared::Store;
    let _turn = FORCING.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = std::env::temp_dir().join(format!("pg_embed_int8_store_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let store = Store::open(&tmp).unwrap();
    let repo = root().canonicalize().unwrap();
    let dir = root().join("models/all-MiniLM-L6-v2").canonicalize().unwrap();
    let no_interrupt = || Ok(());
    let share = Share { store: &store, files: None, model: "m", source: "s", interrupt: &no_interrupt, admit: None };
    let mut sizes = BTreeMap::new();
    for options in [Options::default(), int8_options()] {
        let built = Pipeline::load_shared(&repo, &dir, &options, Some(&share)).unwrap();
        if let Some(w) = &built.sharing().writing {
            w.wait().clone().unwrap();
        }
        let mapped = Pipeline::load_shared(&repo, &dir, &options, Some(&share)).unwrap();
        assert!(!mapped.sharing().built() && mapped.sharing().file.is_some());
        assert_eq!(outputs(&mapped), outputs(&built), "{options:?}");
        sizes.insert(built.info().precision.name(), mapped.sharing().shared_bytes as f64);
    }
    // all-MiniLM-L6-v2: 10,764,288 weights in linear layers (the pooler's among them); the
    // rest (the token table, norms, biases) is float32 in both.
    let linear = 10_764_288f64;
    let saved = sizes["float32"] - sizes["int8"];
    eprintln!("all-MiniLM-L6-v2 shared weights: {sizes:?}; int8 saves {saved} bytes");
    // 2.75 bytes saved per linear weight, less the padding of partial panels (none here)
    // and the file's alignment.
    assert!((saved - 2.75 * linear).abs() < 0.01 * linear * 4.0, "{sizes:?}");
    let _ = std::fs::remove_dir_all(&tmp);
}
