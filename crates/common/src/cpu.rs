//! The instruction sets of the CPU the process runs on, detected once.
//!
//! Kernels compiled with `#[target_feature(enable = ...)]` are called only when the
//! matching function here says the CPU has those features; everything else runs the
//! portable loops (x86-64 baseline).

use std::sync::OnceLock;

/// AVX2 (256-bit integer lanes).
pub fn avx2() -> bool {
    static DETECTED: OnceLock<bool> = OnceLock::new();
    *DETECTED.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("avx2")
        }
        #[cfg(not(target_arch = "x86_64"))]
        false
    })
}

/// The AVX-512 subsets the engine's kernels use together: F, BW (8- and 16-bit
/// lanes), DQ (64-bit multiplies) and VL (the same instructions on 128/256-bit lanes).
pub fn avx512() -> bool {
    static DETECTED: OnceLock<bool> = OnceLock::new();
    *DETECTED.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512dq")
                && std::arch::is_x86_feature_detected!("avx512vl")
        }
        #[cfg(not(target_arch = "x86_64"))]
        false
    })
}
