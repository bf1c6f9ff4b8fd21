//! `apiary bench bandwidth`: the memory-bandwidth floor of a scan on this machine.
//!
//! Streams through one buffer of `--megabytes` MiB with `--threads` threads, each over
//! its own contiguous slice, and reports the best of `--runs` for each kernel:
//!
//! * `sum_u64`: the sum of the u64 words, a plain streaming read.
//! * `sum_u32`, `sum_u16`, `sum_u8`: the same bytes read as narrower lanes, each widened
//!   to u64 and summed: the compute cost of narrow codes at the same byte count.
//! * `memcpy`: a copy into a second buffer. Its `gb_per_s` counts the bytes read plus the
//!   bytes written (twice the buffer), as STREAM's copy does.
//!
//! The buffers are allocated and written once before timing, so page faults are not
//! measured. `gb_per_s` is in 10^9 bytes per second. Prints one JSON line per kernel and
//! a summary line per kernel on stderr.

use std::time::Instant;

use apiary::{ApiaryError, Result};

pub struct BandwidthOptions {
    pub megabytes: usize,
    pub threads: usize,
    pub runs: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    SumU64,
    SumU32,
    SumU16,
    SumU8,
    Memcpy,
}

impl Kernel {
    pub const ALL: [Kernel; 5] = [Kernel::SumU64, Kernel::SumU32, Kernel::SumU16, Kernel::SumU8, Kernel::Memcpy];

    fn name(self) -> &'static str {
        match self {
            Kernel::SumU64 => "sum_u64",
            Kernel::SumU32 => "sum_u32",
            Kernel::SumU16 => "sum_u16",
            Kernel::SumU8 => "sum_u8",
            Kernel::Memcpy => "memcpy",
        }
    }
}

/// The widest vector ISA the sums are compiled for. The binary targets baseline x86-64
/// (SSE2), while the engine's scan kernels dispatch to AVX2 / AVX-512 at run time; the
/// floor should be measured with the same instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    Baseline,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl Isa {
    pub fn detect() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            if apiary_common::cpu::avx512() {
                return Isa::Avx512;
            }
            if apiary_common::cpu::avx2() {
                return Isa::Avx2;
            }
        }
        Isa::Baseline
    }

    fn name(self) -> &'static str {
        match self {
            Isa::Baseline => "baseline",
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => "avx2",
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => "avx512",
        }
    }
}

/// An unsigned integer lane that a u64 buffer can be viewed as.
trait Lane: Copy + Into<u64> {}
impl Lane for u8 {}
impl Lane for u16 {}
impl Lane for u32 {}
impl Lane for u64 {}

fn lanes<T: Lane>(words: &[u64]) -> &[T] {
    let len = size_of_val(words) / size_of::<T>();
    // SAFETY: T is one of u8/u16/u32/u64 (the only `Lane`s): its alignment divides u64's,
    // every bit pattern is a valid T, and `len` lanes cover exactly the words' bytes.
    unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<T>(), len) }
}

// Wrapping: the u64 sum of a large buffer of random words overflows (and the dev profile
// checks overflow). A single accumulator is fine: LLVM splits integer reductions into
// vector accumulators.
#[inline(always)]
fn sum_lanes<T: Lane>(lanes: &[T]) -> u64 {
    let mut sum = 0u64;
    for &lane in lanes {
        sum = sum.wrapping_add(lane.into());
    }
    sum
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn sum_lanes_avx2<T: Lane>(lanes: &[T]) -> u64 {
    sum_lanes(lanes)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
fn sum_lanes_avx512<T: Lane>(lanes: &[T]) -> u64 {
    sum_lanes(lanes)
}

fn sum<T: Lane>(isa: Isa, words: &[u64]) -> u64 {
    let lanes = lanes::<T>(words);
    match isa {
        Isa::Baseline => sum_lanes(lanes),
        // SAFETY: `Isa::detect` saw the features on this CPU.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { sum_lanes_avx2(lanes) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { sum_lanes_avx512(lanes) },
    }
}

/// Word range of thread `index` of `threads` over `len` words (balanced, contiguous).
fn slice_range(len: usize, threads: usize, index: usize) -> std::ops::Range<usize> {
    len * index / threads..len * (index + 1) / threads
}

/// Runs `kernel` once over `src` (copying into `dst` for memcpy) with `threads` threads;
/// returns the wrapping sum of the per-thread sums (0 for memcpy).
pub fn run_kernel(kernel: Kernel, isa: Isa, threads: usize, src: &[u64], dst: &mut [u64]) -> u64 {
    let threads = threads.max(1);
    std::thread::scope(|scope| {
        let mut handles = Vec::with_capacity(threads);
        let mut rest = &mut dst[..];
        for index in 0..threads {
            let range = slice_range(src.len(), threads, index);
            let words = &src[range.clone()];
            let out: &mut [u64] = if kernel == Kernel::Memcpy {
                let (out, tail) = std::mem::take(&mut rest).split_at_mut(range.len());
                rest = tail;
                out
            } else {
                &mut []
            };
            handles.push(scope.spawn(move || {
                let result = match kernel {
                    Kernel::SumU64 => sum::<u64>(isa, words),
                    Kernel::SumU32 => sum::<u32>(isa, words),
                    Kernel::SumU16 => sum::<u16>(isa, words),
                    Kernel::SumU8 => sum::<u8>(isa, words),
                    Kernel::Memcpy => {
                        out.copy_from_slice(words);
                        std::hint::black_box(&mut *out);
                        0
                    }
                };
                std::hint::black_box(result)
            }));
        }
        handles.into_iter().fold(0u64, |total, handle| total.wrapping_add(handle.join().expect("bandwidth thread panicked")))
    })
}

/// Deterministic, non-repeating data, so that a kernel that skips words changes the sum.
pub fn fill(words: &mut [u64], seed: u64) {
    let mut state = seed;
    for word in words {
        // SplitMix64.
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        *word = z ^ (z >> 31);
    }
}

pub fn run(options: BandwidthOptions) -> Result<()> {
    if options.megabytes == 0 || options.threads == 0 {
        return Err(ApiaryError::Execution("--megabytes and --threads must be at least 1".to_string()));
    }
    let runs = options.runs.max(1);
    let words = options.megabytes * (1 << 20) / 8;
    let isa = Isa::detect();
    let mut src = vec![0u64; words];
    let mut dst = vec![0u64; words];
    // Writing every page before timing keeps page faults (and the kernel zeroing pages)
    // out of the measurements.
    fill(&mut src, 1);
    fill(&mut dst, 2);
    eprintln!("bandwidth: {} MiB, {} thread(s), best of {runs}, sums compiled for {}", options.megabytes, options.threads, isa.name());
    let bytes = (words * 8) as f64;
    for kernel in Kernel::ALL {
        let mut best = f64::INFINITY;
        for _ in 0..runs {
            let started = Instant::now();
            std::hint::black_box(run_kernel(kernel, isa, options.threads, &src, &mut dst));
            best = best.min(started.elapsed().as_secs_f64());
        }
        let moved = if kernel == Kernel::Memcpy { 2.0 * bytes } else { bytes };
        let gb_per_s = moved / best / 1e9;
        println!(
            "{{\"suite\":\"bandwidth\",\"kernel\":\"{}\",\"threads\":{},\"megabytes\":{},\"best_ms\":{:.3},\"gb_per_s\":{gb_per_s:.3}}}",
            kernel.name(),
            options.threads,
            options.megabytes,
            best * 1e3
        );
        let note = if kernel == Kernel::Memcpy { " (read + write)" } else { "" };
        eprintln!(
            "  {:<8} {:>9.2} ms  {gb_per_s:>7.2} GB/s{note}  ({} thread(s), {} MiB)",
            kernel.name(),
            best * 1e3,
            options.threads,
            options.megabytes
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sum of `words` read as `width`-byte lanes, from the bytes, without the kernels.
    fn reference(words: &[u64], width: usize) -> u64 {
        let mut sum = 0u64;
        for word in words {
            for lane in word.to_ne_bytes().chunks_exact(width) {
                let mut bytes = [0u8; 8];
                if cfg!(target_endian = "little") {
                    bytes[..width].copy_from_slice(lane);
                    sum = sum.wrapping_add(u64::from_le_bytes(bytes));
                } else {
                    bytes[8 - width..].copy_from_slice(lane);
                    sum = sum.wrapping_add(u64::from_be_bytes(bytes));
                }
            }
        }
        sum
    }

    #[test]
    fn bandwidth_kernels_match_reference() {
        // 1 MiB plus an odd tail, so that the thread slices are uneven.
        let words = (1 << 20) / 8 + 3;
        let mut src = vec![0u64; words];
        fill(&mut src, 7);
        let mut isas = vec![Isa::Baseline];
        if Isa::detect() != Isa::Baseline {
            isas.push(Isa::detect());
        }
        #[cfg(target_arch = "x86_64")]
        if Isa::detect() == Isa::Avx512 {
            isas.push(Isa::Avx2);
        }
        for isa in isas {
            for threads in [1, 2, 3] {
                for (kernel, width) in [(Kernel::SumU64, 8), (Kernel::SumU32, 4), (Kernel::SumU16, 2), (Kernel::SumU8, 1)] {
                    let got = run_kernel(kernel, isa, threads, &src, &mut []);
                    assert_eq!(got, reference(&src, width), "{kernel:?} {isa:?} {threads} thread(s)");
                }
                let mut dst = vec![0u64; words];
                run_kernel(Kernel::Memcpy, isa, threads, &src, &mut dst);
                assert!(dst == src, "memcpy {isa:?} {threads} thread(s)");
            }
        }
    }

    #[test]
    fn bandwidth_slices_cover_the_buffer() {
        for (len, threads) in [(10, 3), (3, 4), (131_072, 2), (0, 2)] {
            let ranges: Vec<_> = (0..threads).map(|i| slice_range(len, threads, i)).collect();
            assert_eq!(ranges.first().unwrap().start, 0);
            assert_eq!(ranges.last().unwrap().end, len);
            assert!(ranges.windows(2).all(|pair| pair[0].end == pair[1].start));
        }
    }
}
