//! A register-blocked Bloom filter over key hashes.
//!
//! ```text
//!  words: [ u64 ] x 2^b
//!  key hash:  word = hash >> (64 - b)         (the hash's top b bits)
//!  key hash ──× odd constant──▶ h:  4 bit positions from h's top 24 bits
//! ```
//!
//! Every key sets four bits of one 64-bit word, so a lookup is one load and one mask test,
//! with no branch: probes filter a whole vector of keys into a selection without
//! mispredictions. At 16 bits per key about 1% of absent keys pass. Hash joins build one
//! over their build keys and test probe keys against it before touching the hash-table
//! directory: most probe keys of a selective join are rejected in a few instructions.

use std::sync::atomic::{AtomicU64, Ordering};

/// The word a hash maps to in a filter of `64 - shift` address bits, and the bits it
/// sets there.
///
/// The word comes from the hash's top bits, like the hash-join partition (see
/// `join_table::partition_of`): the keys of one partition set bits in one contiguous range
/// of words, so partition tasks fill the filter in parallel without sharing a word.
#[inline(always)]
fn locate(shift: u32, hash: u64) -> (usize, u64) {
    // `shift` is at most 61 (at least eight words), so the shift never overflows.
    let word = (hash >> shift) as usize;
    let h = hash.wrapping_mul(SPREAD) >> 40;
    let mask = (1u64 << (h & 63)) | (1u64 << ((h >> 6) & 63)) | (1u64 << ((h >> 12) & 63)) | (1u64 << ((h >> 18) & 63));
    (word, mask)
}

/// Words of a filter for `keys` keys: a power of two, at least `min_words`.
fn word_count(keys: usize, min_words: usize) -> usize {
    (keys * BITS_PER_KEY).div_ceil(64).max(min_words).next_power_of_two()
}

/// Bits per key the filter is sized for.
pub const BITS_PER_KEY: usize = 16;

/// Multiplier that spreads the hash's bits before they are split (odd, so no bit is lost).
const SPREAD: u64 = 0x9e37_79b9_7f4a_7c15;

#[derive(Debug)]
pub struct BloomFilter {
    words: Vec<u64>,
    shift: u32,
}

impl BloomFilter {
    /// A filter sized for `keys` keys.
    pub fn with_capacity(keys: usize) -> BloomFilter {
        let words = word_count(keys, 8);
        BloomFilter { words: vec![0; words], shift: 64 - words.trailing_zeros() }
    }

    pub fn insert(&mut self, hash: u64) {
        let (word, mask) = locate(self.shift, hash);
        self.words[word] |= mask;
    }

    #[inline(always)]
    pub fn may_contain(&self, hash: u64) -> bool {
        let (word, mask) = locate(self.shift, hash);
        // `word < words.len()` by construction (the top bits of a 64-bit value).
        self.words[word] & mask == mask
    }

    /// Appends to `out` the indices `j` in `indices` whose `hashes[j]` may be in the
    /// filter and whose key is valid, without branching on the outcome.
    pub fn filter_into(&self, hashes: &[u64], valid: &[bool], out: &mut Vec<u32>) {
        let start = out.len();
        let n = hashes.len().min(valid.len());
        out.resize(start + n, 0);
        let slots = &mut out[start..];
        let mut done = 0;
        let mut count = 0;
        #[cfg(target_arch = "x86_64")]
        if apiary_common::cpu::avx512() {
            // SAFETY: the CPU has the AVX-512 subsets the kernel is compiled for.
            (done, count) = unsafe { self.filter_avx512(&hashes[..n], &valid[..n], slots) };
        }
        for j in done..n {
            slots[count] = j as u32;
            count += (valid[j] & self.may_contain(hashes[j])) as usize;
        }
        out.truncate(start + count);
    }

    /// [`Self::filter_into`] eight hashes at a time: the four bit positions and the word
    /// index computed in 64-bit lanes, the words gathered, the passing lanes' indices
    /// compressed into `slots`. Returns how many hashes it tested (a multiple of eight)
    /// and how many indices it wrote.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512dq,avx512vl,avx512bw")]
    unsafe fn filter_avx512(&self, hashes: &[u64], valid: &[bool], slots: &mut [u32]) -> (usize, usize) {
        use std::arch::x86_64::*;
        let lanes = hashes.len() / 8 * 8;
        let words = self.words.as_ptr() as *const i64;
        let shift = _mm_cvtsi32_si128(self.shift as i32);
        let spread = _mm512_set1_epi64(SPREAD as i64);
        let (six_bits, one) = (_mm512_set1_epi64(63), _mm512_set1_epi64(1));
        let mut ids = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let eight = _mm256_set1_epi32(8);
        let mut count = 0;
        let mut j = 0;
        while j < lanes {
            // SAFETY: `j + 8 <= hashes.len() == valid.len() <= slots.len()`, and
            // `count <= j`, so the compressed store of at most eight ids stays in `slots`.
            unsafe {
                let hash = _mm512_loadu_si512(hashes.as_ptr().add(j) as *const _);
                // Bools are 0 or 1: eight of them are one 64-bit load, lane `i` in byte `i`.
                let ok = _mm_test_epi8_mask(_mm_loadl_epi64(valid.as_ptr().add(j) as *const _), _mm_set1_epi8(1)) as __mmask8;
                // The word: the hash's top bits (as in `locate`), always in bounds.
                let word = _mm512_srl_epi64(hash, shift);
                let h = _mm512_srli_epi64::<40>(_mm512_mullo_epi64(hash, spread));
                let bit = |s: u32| {
                    let position = _mm512_and_si512(_mm512_srlv_epi64(h, _mm512_set1_epi64(s as i64)), six_bits);
                    _mm512_sllv_epi64(one, position)
                };
                let mask = _mm512_or_si512(_mm512_or_si512(bit(0), bit(6)), _mm512_or_si512(bit(12), bit(18)));
                let got = _mm512_mask_i64gather_epi64::<8>(_mm512_setzero_si512(), ok, word, words);
                let pass = _mm512_mask_cmpeq_epi64_mask(ok, _mm512_and_si512(got, mask), mask);
                _mm256_mask_compressstoreu_epi32(slots.as_mut_ptr().add(count) as *mut _, pass, ids);
                count += pass.count_ones() as usize;
            }
            ids = _mm256_add_epi32(ids, eight);
            j += 8;
        }
        (lanes, count)
    }

    pub fn memory_bytes(&self) -> usize {
        self.words.len() * 8
    }
}

/// A [`BloomFilter`] being filled by several threads at once: the partition tasks of a
/// hash-join build, where the hashes of partition `p` have `p` as their top
/// `partition_bits` bits. Those hashes land in partition `p`'s own range of words (at
/// least eight, a cache line), so tasks neither contend for a word nor share a line, and
/// an insertion is a plain load and store.
pub struct SharedBloomBuilder {
    words: Vec<AtomicU64>,
    shift: u32,
}

impl SharedBloomBuilder {
    pub fn with_capacity(keys: usize, partition_bits: u32) -> SharedBloomBuilder {
        let words = word_count(keys, 8 << partition_bits);
        SharedBloomBuilder { words: (0..words).map(|_| AtomicU64::new(0)).collect(), shift: 64 - words.trailing_zeros() }
    }

    /// Inserts a hash. Concurrent callers must insert hashes of different partitions.
    pub fn insert(&self, hash: u64) {
        let (word, mask) = locate(self.shift, hash);
        // Not an atomic OR: only this partition's task writes this word.
        let word = &self.words[word];
        word.store(word.load(Ordering::Relaxed) | mask, Ordering::Relaxed);
    }

    pub fn finish(self) -> BloomFilter {
        BloomFilter { words: self.words.into_iter().map(AtomicU64::into_inner).collect(), shift: self.shift }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apiary_common::hash::hash_u64;

    #[test]
    fn no_false_negatives_few_false_positives() {
        for keys in [1usize, 10, 1000, 100_000] {
            let mut filter = BloomFilter::with_capacity(keys);
            for k in 0..keys as u64 {
                filter.insert(hash_u64(k));
            }
            assert!((0..keys as u64).all(|k| filter.may_contain(hash_u64(k))));
            let false_positives = (1 << 40..(1 << 40) + 100_000u64).filter(|&k| filter.may_contain(hash_u64(k))).count();
            assert!(false_positives < 2_500, "{keys} keys: {false_positives} false positives in 100000");
        }
    }

    #[test]
    fn shared_builder_sets_the_same_bits() {
        let mut plain = BloomFilter::with_capacity(5000);
        let shared = SharedBloomBuilder::with_capacity(5000, 2);
        let hashes: Vec<u64> = (0..5000u64).map(hash_u64).collect();
        std::thread::scope(|scope| {
            for part in 0..4u64 {
                let (shared, hashes) = (&shared, &hashes);
                scope.spawn(move || hashes.iter().filter(|&&h| h >> 62 == part).for_each(|&h| shared.insert(h)));
            }
        });
        hashes.iter().for_each(|&h| plain.insert(h));
        assert_eq!(shared.finish().words, plain.words);
    }

    #[test]
    fn partitions_own_disjoint_words() {
        // Even a filter for few keys gives each of 64 partitions its own cache line.
        let shared = SharedBloomBuilder::with_capacity(10, 6);
        assert!(shared.words.len() >= 8 << 6);
        let (word, _) = locate(shared.shift, 5u64 << 58);
        assert_eq!(word / 8, 5);
    }

    #[test]
    fn vector_and_scalar_probes_agree() {
        let mut filter = BloomFilter::with_capacity(3000);
        for k in 0..3000u64 {
            filter.insert(hash_u64(k * 3));
        }
        for n in [0usize, 1, 7, 8, 9, 100, 1027] {
            let hashes: Vec<u64> = (0..n as u64).map(hash_u64).collect();
            let valid: Vec<bool> = (0..n).map(|j| j % 5 != 1).collect();
            let mut out = Vec::new();
            filter.filter_into(&hashes, &valid, &mut out);
            let expected: Vec<u32> = (0..n).filter(|&j| valid[j] && filter.may_contain(hashes[j])).map(|j| j as u32).collect();
            assert_eq!(out, expected, "{n} hashes");
        }
    }

    #[test]
    fn filter_into_keeps_valid_members() {
        let mut filter = BloomFilter::with_capacity(100);
        for k in 0..100u64 {
            filter.insert(hash_u64(k * 2));
        }
        let hashes: Vec<u64> = (0..200u64).map(hash_u64).collect();
        let mut valid = vec![true; 200];
        valid[4] = false;
        let mut out = vec![7];
        filter.filter_into(&hashes, &valid, &mut out);
        assert_eq!(out[0], 7);
        for j in (0..200u32).step_by(2) {
            assert_eq!(out.contains(&j), j != 4, "{j}");
        }
    }
}
