//! A cache-line-blocked Bloom filter over key hashes.
//!
//! ```text
//!  blocks: [ 512 bits = one 64-byte cache line ] x 2^b
//!  key hash ──remix──▶ h:  block = h >> (64 - b),  6 bit positions from h's low 54 bits
//! ```
//!
//! One cache line per lookup; about 12 bits per key gives roughly 1–2% false positives.
//! Hash joins build one over their build keys and test probe keys against it before
//! touching the (much larger) hash-table directory: most probe keys of a selective join
//! are rejected in cache.

/// Bits per key the filter is sized for.
pub const BITS_PER_KEY: usize = 12;
const BITS_PER_LOOKUP: u32 = 6;

#[derive(Debug)]
pub struct BloomFilter {
    blocks: Vec<[u64; 8]>,
    shift: u32,
}

#[inline(always)]
fn remix(hash: u64) -> u64 {
    // Independent of the bits the hash table uses for slots and partitions.
    apiary_common::hash::hash_u64(hash ^ 0x5bd1_e995_27d4_eb2f)
}

impl BloomFilter {
    /// A filter sized for `keys` keys.
    pub fn with_capacity(keys: usize) -> BloomFilter {
        let bits = (keys * BITS_PER_KEY).max(512);
        let blocks = bits.div_ceil(512).next_power_of_two();
        BloomFilter { blocks: vec![[0u64; 8]; blocks], shift: 64 - blocks.trailing_zeros() }
    }

    #[inline(always)]
    fn locate(&self, hash: u64) -> (usize, u64) {
        let h = remix(hash);
        let block = if self.shift == 64 { 0 } else { (h >> self.shift) as usize };
        (block, h)
    }

    pub fn insert(&mut self, hash: u64) {
        let (block, h) = self.locate(hash);
        let block = &mut self.blocks[block];
        for i in 0..BITS_PER_LOOKUP {
            let bit = (h >> (9 * i)) & 511;
            block[(bit >> 6) as usize] |= 1 << (bit & 63);
        }
    }

    #[inline(always)]
    pub fn may_contain(&self, hash: u64) -> bool {
        let (block, h) = self.locate(hash);
        let block = &self.blocks[block];
        let mut all = true;
        for i in 0..BITS_PER_LOOKUP {
            let bit = (h >> (9 * i)) & 511;
            all &= block[(bit >> 6) as usize] & (1 << (bit & 63)) != 0;
        }
        all
    }

    pub fn memory_bytes(&self) -> usize {
        self.blocks.len() * 64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apiary_common::hash::hash_u64;

    #[test]
    fn no_false_negatives_few_false_positives() {
        let mut filter = BloomFilter::with_capacity(10_000);
        for k in 0..10_000u64 {
            filter.insert(hash_u64(k));
        }
        assert!((0..10_000u64).all(|k| filter.may_contain(hash_u64(k))));
        let false_positives = (10_000..110_000u64).filter(|&k| filter.may_contain(hash_u64(k))).count();
        assert!(false_positives < 3_000, "{false_positives} false positives in 100000");
    }
}
