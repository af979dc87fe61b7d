//! Golden parity with sentence-transformers for the real all-MiniLM-L6-v2 (reference
//! vectors made by scripts/gen_golden.py, committed in tests/golden/).

mod common;

use common::*;
use pg_embed_core::options::Options;
use pg_embed_core::pipeline::Pipeline;

#[test]
fn minilm_pipeline_is_resolved_from_its_files() {
    let g = golden();
    let p = minilm();
    let info = p.info();
    assert_eq!(info.architecture, "bert");
    assert_eq!(info.dim, g.dim);
    assert_eq!(info.max_length, g.max_seq_length, "sentence_bert_config.json, not tokenizer.json's 128");
    assert_eq!(info.pooling, vec![pg_embed_core::pooling::PoolingMode::Mean]);
    assert!(info.normalize, "modules.json names a Normalize module");
}

#[test]
fn minilm_tokenization_matches_sentence_transformers() {
    let g = golden();
    let p = minilm();
    assert!(g.cases.len() >= 60, "golden set has {} cases", g.cases.len());
    for case in &g.cases {
        assert_eq!(p.tokenize(&case.text).unwrap(), case.input_ids, "case {}", case.name);
    }
}

#[test]
fn minilm_embeddings_match_sentence_transformers_one_by_one() {
    let g = golden();
    let p = minilm();
    let mut worst = (1.0f32, 0.0f32);
    for case in &g.cases {
        let got = p.embed(&[case.text.as_str()]).unwrap().remove(0);
        assert_eq!(got.len(), case.embedding.len(), "case {}", case.name);
        let (cos, diff) = (cosine(&got, &case.embedding), max_abs_diff(&got, &case.embedding));
        assert!(cos >= COSINE_MIN, "case {}: cosine {cos}", case.name);
        assert!(diff <= ABS_TOL, "case {}: max abs diff {diff}", case.name);
        worst = (worst.0.min(cos), worst.1.max(diff));
    }
    eprintln!("all-MiniLM-L6-v2 parity: min cosine {}, max abs diff {:e}", worst.0, worst.1);
}

#[test]
fn minilm_padded_batch_matches_sentence_transformers() {
    let g = golden();
    let p = minilm();
    let texts: Vec<&str> = g.cases.iter().map(|c| c.text.as_str()).collect();
    let got = p.embed(&texts).unwrap();
    assert_eq!(got.len(), g.cases.len());
    for (case, v) in g.cases.iter().zip(&got) {
        assert!(cosine(v, &case.embedding) >= COSINE_MIN, "case {} in a batch", case.name);
        assert!(max_abs_diff(v, &case.embedding) <= ABS_TOL, "case {} in a batch", case.name);
    }
}

/// The array form's batches (grouped by length under a token budget, on 1 or 2 threads)
/// give what one input at a time gives, within 1e-5, in input order.
#[test]
fn length_grouped_batches_equal_one_by_one() {
    let g = golden();
    let p = minilm();
    let texts: Vec<&str> = g.cases.iter().map(|c| c.text.as_str()).collect();
    let single: Vec<Vec<f32>> = texts.iter().map(|t| p.embed(&[t]).unwrap().remove(0)).collect();
    let longest = texts.iter().map(|t| p.tokenize(t).unwrap().len()).max().unwrap();
    for (budget, threads) in [(1, 1), (longest, 2), (4 * longest, 1), (usize::MAX, 2)] {
        let mut batches = 0;
        let got = p
            .embed_batched(&texts, budget, threads, || {
                batches += 1;
                Ok(())
            })
            .unwrap();
        assert_eq!(got.len(), texts.len());
        let worst = got.iter().zip(&single).map(|(a, b)| max_abs_diff(a, b)).fold(0f32, f32::max);
        assert!(worst <= 1e-5, "budget {budget}, {threads} threads: max abs diff {worst}");
        eprintln!("budget {budget}: {batches} batches, batched vs one by one {worst:e}");
    }
    // A cancel between batches stops the work with its error.
    let err = p
        .embed_batched(&texts, 1, 1, || Err(pg_embed_core::error::Error::Inference("cancelled".into())))
        .unwrap_err();
    assert_eq!(err.to_string(), "inference failed: cancelled");
}

#[test]
fn minilm_without_normalize_matches_the_pooled_output() {
    let g = golden();
    let dir = root().join("models/all-MiniLM-L6-v2");
    let options = Options { normalize: Some(false), ..Options::default() };
    let p = Pipeline::load(&dir, &options).unwrap();
    for case in g.cases.iter().step_by(4) {
        let got = p.embed(&[case.text.as_str()]).unwrap().remove(0);
        assert!(cosine(&got, &case.pooled) >= COSINE_MIN, "case {}", case.name);
        assert!(max_abs_diff(&got, &case.pooled) <= ABS_TOL, "case {}", case.name);
    }
}
