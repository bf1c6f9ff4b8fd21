//! A growable bit vector.
//!
//! Used as the validity mask of vectors and column stripes (bit set = value present,
//! i.e. NOT NULL) and as match flags in outer joins.

/// Bits packed in 64-bit words; bit `i` lives in word `i / 64` at position `i % 64`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bitmap {
    words: Vec<u64>,
    len: usize,
}

impl Bitmap {
    /// A bitmap of `len` bits, all set to `value`.
    pub fn new(len: usize, value: bool) -> Self {
        let word = if value { u64::MAX } else { 0 };
        let mut bitmap = Bitmap { words: vec![word; len.div_ceil(64)], len };
        bitmap.clear_tail();
        bitmap
    }

    pub fn with_capacity(capacity: usize) -> Self {
        Bitmap { words: Vec::with_capacity(capacity.div_ceil(64)), len: 0 }
    }

    /// A bitmap of `len` bits from 64-bit words (bit `i` in word `i / 64`, position
    /// `i % 64`, as Arrow lays out validity); bits past `len` are ignored.
    pub fn from_words(mut words: Vec<u64>, len: usize) -> Self {
        words.resize(len.div_ceil(64), 0);
        let mut bitmap = Bitmap { words, len };
        bitmap.clear_tail();
        bitmap
    }

    pub fn from_bools(bits: impl IntoIterator<Item = bool>) -> Self {
        let bits = bits.into_iter();
        let mut words = Vec::with_capacity(bits.size_hint().0.div_ceil(64));
        // Whole words at a time: a push per bit tests and indexes the word every time.
        let (mut word, mut len) = (0u64, 0usize);
        for bit in bits {
            word |= (bit as u64) << (len & 63);
            len += 1;
            if len.is_multiple_of(64) {
                words.push(word);
                word = 0;
            }
        }
        if !len.is_multiple_of(64) {
            words.push(word);
        }
        Bitmap { words, len }
    }

    /// The bits of a bool slice, 64 to a word without a branch per bit (a condition's
    /// values turned into a row mask).
    pub fn from_bool_slice(bits: &[bool]) -> Self {
        let chunks = bits.chunks_exact(64);
        let tail = chunks.remainder();
        let mut words: Vec<u64> =
            chunks.map(|chunk| chunk.iter().enumerate().fold(0u64, |word, (j, &b)| word | ((b as u64) << j))).collect();
        if !tail.is_empty() {
            words.push(tail.iter().enumerate().fold(0u64, |word, (j, &b)| word | ((b as u64) << j)));
        }
        Bitmap { words, len: bits.len() }
    }

    /// The bits at `indices`, in that order (a vector's validity gathered with its values).
    pub fn gather(&self, indices: &[u32]) -> Self {
        let words = indices
            .chunks(64)
            .map(|chunk| chunk.iter().enumerate().fold(0u64, |word, (bit, &i)| word | ((self.get(i as usize) as u64) << bit)))
            .collect();
        Bitmap { words, len: indices.len() }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline(always)]
    pub fn get(&self, idx: usize) -> bool {
        debug_assert!(idx < self.len, "bit {idx} out of {}", self.len);
        (self.words[idx >> 6] >> (idx & 63)) & 1 == 1
    }

    #[inline(always)]
    pub fn set(&mut self, idx: usize, value: bool) {
        debug_assert!(idx < self.len);
        let mask = 1u64 << (idx & 63);
        if value {
            self.words[idx >> 6] |= mask;
        } else {
            self.words[idx >> 6] &= !mask;
        }
    }

    #[inline]
    pub fn push(&mut self, value: bool) {
        if self.len.is_multiple_of(64) {
            self.words.push(0);
        }
        if value {
            self.words[self.len >> 6] |= 1u64 << (self.len & 63);
        }
        self.len += 1;
    }

    /// Drops the bits from `len` on (no-op when the bitmap is not longer).
    pub fn truncate(&mut self, len: usize) {
        if len < self.len {
            self.len = len;
            self.words.truncate(len.div_ceil(64));
            self.clear_tail();
        }
    }

    /// Appends `count` copies of `value`.
    pub fn push_n(&mut self, value: bool, count: usize) {
        // Simple and fast enough: fill whole words where possible.
        let mut remaining = count;
        while remaining > 0 && !self.len.is_multiple_of(64) {
            self.push(value);
            remaining -= 1;
        }
        let word = if value { u64::MAX } else { 0 };
        while remaining >= 64 {
            self.words.push(word);
            self.len += 64;
            remaining -= 64;
        }
        for _ in 0..remaining {
            self.push(value);
        }
    }

    /// Appends bits `[offset, offset + count)` of `other`.
    pub fn extend_from(&mut self, other: &Bitmap, offset: usize, count: usize) {
        for idx in offset..offset + count {
            self.push(other.get(idx));
        }
    }

    pub fn count_ones(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub fn count_zeros(&self) -> usize {
        self.len - self.count_ones()
    }

    pub fn all_set(&self) -> bool {
        self.count_ones() == self.len
    }

    /// The raw words (the bits past `len` are zero).
    #[inline]
    pub fn words(&self) -> &[u64] {
        &self.words
    }

    #[inline]
    pub fn words_mut(&mut self) -> &mut [u64] {
        &mut self.words
    }

    /// Bitwise AND with another bitmap of the same length.
    pub fn and_inplace(&mut self, other: &Bitmap) {
        debug_assert_eq!(self.len, other.len);
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a &= *b;
        }
    }

    /// Bits `[offset, offset + len)` as a new bitmap.
    pub fn slice(&self, offset: usize, len: usize) -> Bitmap {
        if offset.is_multiple_of(64) {
            let first = offset / 64;
            let last = (offset + len).div_ceil(64);
            let mut bitmap = Bitmap { words: self.words[first..last].to_vec(), len };
            bitmap.clear_tail();
            return bitmap;
        }
        let mut bitmap = Bitmap::with_capacity(len);
        bitmap.extend_from(self, offset, len);
        bitmap
    }

    /// Iterates over the indices of set bits.
    pub fn iter_ones(&self) -> impl Iterator<Item = usize> + '_ {
        self.words.iter().enumerate().flat_map(|(word_idx, &word)| {
            let mut w = word;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let bit = w.trailing_zeros() as usize;
                w &= w - 1;
                Some(word_idx * 64 + bit)
            })
        })
    }

    fn clear_tail(&mut self) {
        let tail = self.len % 64;
        if tail != 0 {
            if let Some(last) = self.words.last_mut() {
                *last &= (1u64 << tail) - 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_bool_slice_matches_from_bools() {
        for len in [0, 1, 63, 64, 65, 128, 130, 2048] {
            let bits: Vec<bool> = (0..len).map(|i| (i * 7 + i / 5) % 3 == 0).collect();
            assert_eq!(Bitmap::from_bool_slice(&bits), Bitmap::from_bools(bits.iter().copied()), "length {len}");
        }
    }

    #[test]
    fn push_get_slice() {
        let bits: Vec<bool> = (0..200).map(|i| i % 3 == 0).collect();
        let bitmap = Bitmap::from_bools(bits.iter().copied());
        for (i, b) in bits.iter().enumerate() {
            assert_eq!(bitmap.get(i), *b);
        }
        assert_eq!(bitmap.count_ones(), bits.iter().filter(|b| **b).count());
        let slice = bitmap.slice(5, 100);
        for i in 0..100 {
            assert_eq!(slice.get(i), bits[i + 5]);
        }
        let aligned = bitmap.slice(64, 70);
        for i in 0..70 {
            assert_eq!(aligned.get(i), bits[i + 64]);
        }
        let ones: Vec<usize> = bitmap.iter_ones().collect();
        let expected: Vec<usize> = (0..200).filter(|i| i % 3 == 0).collect();
        assert_eq!(ones, expected);
    }

    #[test]
    fn gather_picks_bits_in_index_order() {
        let bitmap = Bitmap::from_bools((0..300).map(|i| i % 5 != 0));
        for len in [0, 1, 63, 64, 65, 200] {
            let indices: Vec<u32> = (0..len).map(|i| (i * 7 % 300) as u32).collect();
            let gathered = bitmap.gather(&indices);
            assert_eq!(gathered.len(), len);
            let expected = Bitmap::from_bools(indices.iter().map(|&i| i % 5 != 0));
            assert_eq!(gathered, expected, "{len} indices");
            assert_eq!(gathered.count_ones(), indices.iter().filter(|&&i| i % 5 != 0).count());
        }
    }

    #[test]
    fn push_n_mixed() {
        let mut bitmap = Bitmap::default();
        bitmap.push(true);
        bitmap.push_n(false, 130);
        bitmap.push_n(true, 3);
        assert_eq!(bitmap.len(), 134);
        assert_eq!(bitmap.count_ones(), 4);
        assert!(bitmap.get(0) && bitmap.get(131) && !bitmap.get(130));
    }
}
