//! Hash functions used by joins, aggregation, DISTINCT and Bloom filters.
//!
//! Keys are first normalised to `u64`, `u128` or byte strings (see the execution crate's
//! key packing); these functions then mix them. The 64-bit mixer is the Murmur3 finaliser
//! (`fmix64`): two multiplies and three xor-shifts, good avalanche, so the low bits can be
//! used as a bucket index and the high bits as a tag.

/// Murmur3's 64-bit finaliser.
#[inline(always)]
pub fn hash_u64(key: u64) -> u64 {
    let mut h = key;
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h
}

/// [`hash_u64`] of every key. With AVX-512 (checked at run time) the two 64-bit
/// multiplies run eight keys at a time; the results are the same bits either way.
pub fn hash_u64_batch(keys: &[u64]) -> Vec<u64> {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::cpu::avx512() {
            // SAFETY: the CPU has the features the function is compiled for.
            return unsafe { hash_u64_batch_avx512(keys) };
        }
    }
    hash_u64_batch_portable(keys)
}

fn hash_u64_batch_portable(keys: &[u64]) -> Vec<u64> {
    let mut out = vec![0u64; keys.len()];
    for (h, &k) in out.iter_mut().zip(keys) {
        *h = hash_u64(k);
    }
    out
}

/// The portable loop, compiled so that LLVM vectorises it with `vpmullq`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq")]
unsafe fn hash_u64_batch_avx512(keys: &[u64]) -> Vec<u64> {
    let mut out = vec![0u64; keys.len()];
    for (h, &k) in out.iter_mut().zip(keys) {
        *h = hash_u64(k);
    }
    out
}

/// Hash of a 128-bit key: both halves mixed, then combined.
#[inline(always)]
pub fn hash_u128(key: u128) -> u64 {
    let low = key as u64;
    let high = (key >> 64) as u64;
    hash_u64(low ^ hash_u64(high).rotate_left(29))
}

/// Combines an existing hash with another one (order-sensitive).
#[inline(always)]
pub fn combine_hashes(seed: u64, hash: u64) -> u64 {
    hash_u64(seed.rotate_left(23) ^ hash.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

const BYTES_MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;

/// Hash of a byte string: eight bytes at a time, then the Murmur3 finaliser.
#[inline]
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    let mut h: u64 = (bytes.len() as u64).wrapping_mul(BYTES_MULTIPLIER);
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let word = u64::from_le_bytes(chunk.try_into().expect("chunk of eight bytes"));
        h = (h ^ word).wrapping_mul(BYTES_MULTIPLIER).rotate_left(31);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut buf = [0u8; 8];
        buf[..rest.len()].copy_from_slice(rest);
        h = (h ^ u64::from_le_bytes(buf)).wrapping_mul(BYTES_MULTIPLIER).rotate_left(31);
    }
    hash_u64(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_hashes_equal_scalar_hashes() {
        let keys: Vec<u64> = (0..1000u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i << 7)).collect();
        let expected: Vec<u64> = keys.iter().map(|&k| hash_u64(k)).collect();
        assert_eq!(hash_u64_batch(&keys), expected);
        assert_eq!(hash_u64_batch_portable(&keys), expected);
    }

    #[test]
    fn low_bits_spread() {
        // Sequential keys must spread over buckets: count distinct values of the low 10 bits.
        let mut seen = vec![false; 1024];
        for key in 0..1024u64 {
            seen[(hash_u64(key) & 1023) as usize] = true;
        }
        let used = seen.iter().filter(|s| **s).count();
        assert!(used > 550, "only {used} of 1024 buckets used");
    }

    #[test]
    fn bytes_hash_depends_on_every_byte() {
        assert_ne!(hash_bytes(b"abcdefghi"), hash_bytes(b"abcdefghj"));
        assert_ne!(hash_bytes(b""), hash_bytes(b"\0"));
        assert_eq!(hash_bytes(b"same"), hash_bytes(b"same"));
    }
}
