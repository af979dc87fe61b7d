//! The machine's FMA peak, measured in the same run as a bench so its figures can be read as a
//! share of what the cores can do (bench/pipeline.rs, bench/images.rs).

use std::time::Instant;

/// FMA peak of `threads` cores in GFLOP/s: independent chains of fused multiply-adds at the
/// widest vector width the CPU has (AVX-512 where present, else AVX2), as pg_embed uses.
pub fn fma_peak(threads: usize) -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        let chains: Option<unsafe fn(usize) -> f64> = if std::is_x86_feature_detected!("avx512f") {
            Some(fma_chains_512)
        } else if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            Some(fma_chains)
        } else {
            None
        };
        if let Some(chains) = chains {
            const ITERS: usize = 20_000_000;
            let t0 = Instant::now();
            let flops: f64 = std::thread::scope(|s| {
                let handles: Vec<_> =
                    (0..threads).map(|_| s.spawn(move || unsafe { chains(ITERS) })).collect();
                handles.into_iter().map(|h| h.join().unwrap_or(0.0)).sum()
            });
            return flops / t0.elapsed().as_secs_f64() / 1e9;
        }
    }
    f64::NAN
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn fma_chains_512(iters: usize) -> f64 {
    use std::arch::x86_64::*;
    let mut acc = [_mm512_set1_ps(0.0); 12];
    let a = _mm512_set1_ps(0.999_999);
    let b = _mm512_set1_ps(1e-7);
    for _ in 0..iters {
        for x in acc.iter_mut() {
            *x = _mm512_fmadd_ps(*x, a, b);
        }
    }
    std::hint::black_box(acc);
    (iters * 12 * 16 * 2) as f64
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fma_chains(iters: usize) -> f64 {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_set1_ps(0.0); 12];
    let a = _mm256_set1_ps(0.999_999);
    let b = _mm256_set1_ps(1e-7);
    for _ in 0..iters {
        for x in acc.iter_mut() {
            *x = _mm256_fmadd_ps(*x, a, b);
        }
    }
    let mut sum = [0f32; 8];
    for x in acc {
        let mut lanes = [0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), x);
        for (s, l) in sum.iter_mut().zip(lanes) {
            *s += l;
        }
    }
    std::hint::black_box(sum);
    (iters * 12 * 8 * 2) as f64
}
