//! Packed in-memory stripes (issue 14; Hyper's Data Blocks, Quickstep §3.3): a sealed
//! stripe of integers, decimals, dates or timestamps is held in memory as
//! frame-of-reference codes of 1, 2 or 4 bytes rather than as 8-byte values, so a scan
//! streams a quarter to an eighth of the bytes.
//!
//! ```text
//!  values  [1994-01-03, 1994-01-01, 1995-06-30, ...]     (4 bytes each)
//!  packed  base = 1994-01-01, step = 1, codes: u16 [2, 0, 545, ...]
//!  value   = base + code * step
//! ```
//!
//! A range predicate on the values is a range on the codes (the map is monotonic), so a
//! scan tests 64 one-byte codes per AVX-512 instruction and decodes only the rows and
//! columns that survive ([`select_code_ranges`], [`PackedInts::gather`]).

use apiary_types::{DataType, PhysicalType, Vector, VectorData};

use crate::encoding::Codes;

/// A stripe's integer values as `base + code * step` (no NULLs).
#[derive(Debug)]
pub struct PackedInts {
    data_type: DataType,
    base: i64,
    step: i64,
    max_code: u32,
    codes: Codes,
}

/// Which codes satisfy a range predicate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeRange {
    /// No code: no row of the stripe passes.
    Empty,
    /// Every code: every row passes.
    All,
    /// Codes `lo..=hi`.
    Within(u32, u32),
}

/// The physical integer values of a vector, widened.
enum Ints<'a> {
    I16(&'a [i16]),
    I32(&'a [i32]),
    I64(&'a [i64]),
}

impl Ints<'_> {
    fn len(&self) -> usize {
        match self {
            Ints::I16(v) => v.len(),
            Ints::I32(v) => v.len(),
            Ints::I64(v) => v.len(),
        }
    }

    fn min_max(&self) -> Option<(i64, i64)> {
        fn run<T: Copy + Ord + Into<i64>>(values: &[T]) -> Option<(i64, i64)> {
            let first = *values.first()?;
            let (min, max) = values.iter().fold((first, first), |(lo, hi), &v| (lo.min(v), hi.max(v)));
            Some((min.into(), max.into()))
        }
        match self {
            Ints::I16(v) => run(v),
            Ints::I32(v) => run(v),
            Ints::I64(v) => run(v),
        }
    }

    /// The greatest common divisor of the differences from `min` (1 as soon as it is).
    fn step(&self, min: i64) -> u64 {
        fn run<T: Copy + Into<i64>>(values: &[T], min: i64) -> u64 {
            let mut step = 0u64;
            for &v in values {
                let difference = v.into().wrapping_sub(min) as u64;
                if step == 0 || !difference.is_multiple_of(step) {
                    step = gcd(step, difference);
                    if step == 1 {
                        break;
                    }
                }
            }
            step.max(1)
        }
        match self {
            Ints::I16(v) => run(v, min),
            Ints::I32(v) => run(v, min),
            Ints::I64(v) => run(v, min),
        }
    }

    fn codes<C: TryFrom<u64> + Default + Copy>(&self, min: i64, step: u64) -> Vec<C> {
        fn run<T: Copy + Into<i64>, C: TryFrom<u64> + Default + Copy>(values: &[T], min: i64, step: u64) -> Vec<C> {
            if step == 1 {
                values.iter().map(|&v| C::try_from(v.into().wrapping_sub(min) as u64).unwrap_or_default()).collect()
            } else {
                values.iter().map(|&v| C::try_from(v.into().wrapping_sub(min) as u64 / step).unwrap_or_default()).collect()
            }
        }
        match self {
            Ints::I16(v) => run(v, min, step),
            Ints::I32(v) => run(v, min, step),
            Ints::I64(v) => run(v, min, step),
        }
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// An integer type a packed stripe decodes to.
trait Decoded: Copy {
    fn from_i64(v: i64) -> Self;
    fn wrap(values: Vec<Self>) -> VectorData;
}

macro_rules! decoded {
    ($t:ty, $variant:ident) => {
        impl Decoded for $t {
            #[inline(always)]
            fn from_i64(v: i64) -> Self {
                v as $t
            }
            fn wrap(values: Vec<Self>) -> VectorData {
                VectorData::$variant(values.into())
            }
        }
    };
}
decoded!(i16, I16);
decoded!(i32, I32);
decoded!(i64, I64);

/// `base + code * step` for each code (a loop the compiler vectorises; the common
/// `step = 1` without the multiplication).
#[inline(always)]
fn decode_codes<C: Copy + Into<u32>, T: Decoded>(codes: impl ExactSizeIterator<Item = C>, base: i64, step: i64) -> Vec<T> {
    if step == 1 {
        codes.map(|c| T::from_i64(base.wrapping_add(i64::from(c.into())))).collect()
    } else {
        codes.map(|c| T::from_i64(base.wrapping_add(i64::from(c.into()).wrapping_mul(step)))).collect()
    }
}

/// `codes[r]` for each of `rows`, prefetching the code `GATHER_AHEAD` rows ahead: the
/// survivors of a selective filter are scattered over the stripe, so most gathers miss
/// the cache, and the prefetches keep more of those misses in flight (Q6's
/// `l_extendedprice`).
fn gather_prefetched<C: Copy>(codes: &[C], rows: &[u32]) -> Vec<C> {
    const GATHER_AHEAD: usize = 16;
    let mut out = Vec::with_capacity(rows.len());
    for (i, &row) in rows.iter().enumerate() {
        #[cfg(target_arch = "x86_64")]
        if let Some(&ahead) = rows.get(i + GATHER_AHEAD) {
            if let Some(code) = codes.get(ahead as usize) {
                // SAFETY: a prefetch of an address inside `codes` (prefetches never fault).
                unsafe { std::arch::x86_64::_mm_prefetch(code as *const C as *const i8, std::arch::x86_64::_MM_HINT_T0) };
            }
        }
        out.push(codes[row as usize]);
    }
    out
}

/// A run of codes decoded: with AVX-512 when the CPU has it (the build targets plain
/// x86-64, whose two 64-bit lanes and missing 64-bit multiply left this loop scalar).
fn decode_slice<C: Copy + Into<u32>, T: Decoded>(codes: &[C], base: i64, step: i64) -> Vec<T> {
    #[cfg(target_arch = "x86_64")]
    if avx512() {
        // SAFETY: the features were detected.
        return unsafe { decode_slice_avx512(codes, base, step) };
    }
    decode_codes(codes.iter().copied(), base, step)
}

/// # Safety
/// Requires AVX-512F/BW/DQ/VL.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
unsafe fn decode_slice_avx512<C: Copy + Into<u32>, T: Decoded>(codes: &[C], base: i64, step: i64) -> Vec<T> {
    decode_codes(codes.iter().copied(), base, step)
}

/// Whether the CPU has the AVX-512 subsets the kernels here use.
fn avx512() -> bool {
    apiary_common::cpu::avx512()
}

impl PackedInts {
    /// Packs a vector of integers (16, 32 or 64 bits: integers, dates, timestamps,
    /// decimals up to 18 digits) without NULLs when its codes are narrower than its
    /// values; `None` otherwise.
    pub fn pack(vector: &Vector) -> Option<PackedInts> {
        if vector.validity.is_some() {
            return None;
        }
        let (ints, value_bytes) = match &vector.data {
            VectorData::I16(v) => (Ints::I16(v.as_slice()), 2),
            VectorData::I32(v) => (Ints::I32(v.as_slice()), 4),
            VectorData::I64(v) => (Ints::I64(v.as_slice()), 8),
            _ => return None,
        };
        if ints.len() == 0 {
            return None;
        }
        let (min, max) = ints.min_max()?;
        let range = max.wrapping_sub(min) as u64;
        let step = if range == 0 { 1 } else { ints.step(min) };
        let max_code = range / step;
        let code_bytes = match max_code {
            0..=0xff => 1,
            0x100..=0xffff => 2,
            0x1_0000..=0xffff_ffff => 4,
            _ => return None,
        };
        if code_bytes >= value_bytes {
            return None;
        }
        let codes = match code_bytes {
            1 => Codes::U8(ints.codes(min, step)),
            2 => Codes::U16(ints.codes(min, step)),
            _ => Codes::U32(ints.codes(min, step)),
        };
        Some(PackedInts { data_type: vector.data_type, base: min, step: step as i64, max_code: max_code as u32, codes })
    }

    pub fn len(&self) -> usize {
        self.codes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn data_type(&self) -> DataType {
        self.data_type
    }

    pub fn codes(&self) -> &Codes {
        &self.codes
    }

    /// Bytes held (the codes).
    pub fn allocated_bytes(&self) -> usize {
        self.codes.allocated_bytes()
    }

    fn decode<C: Copy + Into<u32>>(&self, codes: impl ExactSizeIterator<Item = C>) -> Vector {
        let (base, step) = (self.base, self.step);
        let data = match self.data_type.physical() {
            PhysicalType::I16 => i16::wrap(decode_codes::<C, i16>(codes, base, step)),
            PhysicalType::I32 => i32::wrap(decode_codes::<C, i32>(codes, base, step)),
            _ => i64::wrap(decode_codes::<C, i64>(codes, base, step)),
        };
        Vector::new(self.data_type, data, None)
    }

    /// Rows `offset..offset + len`, decoded.
    pub fn decode_range(&self, offset: usize, len: usize) -> Vector {
        fn run<C: Copy + Into<u32>>(packed: &PackedInts, codes: &[C]) -> VectorData {
            let (base, step) = (packed.base, packed.step);
            match packed.data_type.physical() {
                PhysicalType::I16 => i16::wrap(decode_slice::<C, i16>(codes, base, step)),
                PhysicalType::I32 => i32::wrap(decode_slice::<C, i32>(codes, base, step)),
                _ => i64::wrap(decode_slice::<C, i64>(codes, base, step)),
            }
        }
        let data = match &self.codes {
            Codes::U8(c) => run(self, &c[offset..offset + len]),
            Codes::U16(c) => run(self, &c[offset..offset + len]),
            Codes::U32(c) => run(self, &c[offset..offset + len]),
        };
        Vector::new(self.data_type, data, None)
    }

    /// The rows at positions `rows` (of the stripe), decoded.
    pub fn gather(&self, rows: &[u32]) -> Vector {
        match &self.codes {
            Codes::U8(c) => self.decode(rows.iter().map(|&r| c[r as usize])),
            Codes::U16(c) => self.decode(gather_prefetched(c, rows).into_iter()),
            Codes::U32(c) => self.decode(gather_prefetched(c, rows).into_iter()),
        }
    }

    /// The codes of the values `v` with `lower <= v <= upper` (physical values; bounds
    /// inclusive when flagged, `None` unbounded).
    pub fn code_range(&self, lower: Option<(i128, bool)>, upper: Option<(i128, bool)>) -> CodeRange {
        let (base, step) = (self.base as i128, self.step as i128);
        // v >= l  <=>  code >= ceil((l - base) / step); v > l  <=>  v >= l + 1.
        let lo = match lower {
            None => 0,
            Some((bound, inclusive)) => {
                let bound = if inclusive { bound } else { bound + 1 };
                // ceil(x / step) = -floor(-x / step)
                (-(base - bound).div_euclid(step)).max(0)
            }
        };
        // v <= u  <=>  code <= floor((u - base) / step); v < u  <=>  v <= u - 1.
        let hi = match upper {
            None => self.max_code as i128,
            Some((bound, inclusive)) => {
                let bound = if inclusive { bound } else { bound - 1 };
                (bound - base).div_euclid(step).min(self.max_code as i128)
            }
        };
        if lo > hi {
            CodeRange::Empty
        } else if lo == 0 && hi == self.max_code as i128 {
            CodeRange::All
        } else {
            CodeRange::Within(lo as u32, hi as u32)
        }
    }
}

impl Codes {
    pub fn len(&self) -> usize {
        match self {
            Codes::U8(c) => c.len(),
            Codes::U16(c) => c.len(),
            Codes::U32(c) => c.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn allocated_bytes(&self) -> usize {
        match self {
            Codes::U8(c) => c.capacity(),
            Codes::U16(c) => c.capacity() * 2,
            Codes::U32(c) => c.capacity() * 4,
        }
    }

    /// Whether the code of row `row` lies in `lo..=lo + span`.
    #[inline(always)]
    fn test(&self, row: usize, lo: u32, span: u32) -> bool {
        let code = match self {
            Codes::U8(c) => c[row] as u32,
            Codes::U16(c) => c[row] as u32,
            Codes::U32(c) => c[row],
        };
        code.wrapping_sub(lo) <= span
    }
}

/// A range of codes to test: rows pass whose code lies in `lo..=hi`.
#[derive(Clone, Copy)]
pub struct CodeTest<'a> {
    pub codes: &'a Codes,
    pub lo: u32,
    pub hi: u32,
}

/// The rows `i` of `offset..offset + len` (returned as `i - offset`) whose codes pass
/// every test, in order. With `simd` and AVX-512BW, 64 rows at a time: one unsigned
/// compare per 64, 32 or 16 codes and per test, then the row ids compressed under the
/// combined mask.
pub fn select_code_ranges(tests: &[CodeTest<'_>], offset: usize, len: usize, simd: bool) -> Vec<u32> {
    // Not zeroed first: the ids are written before they are counted (a memset of the
    // whole morsel was 5% of TPC-H Q6).
    let mut out: Vec<u32> = Vec::with_capacity(len);
    let ids = out.as_mut_ptr();
    let mut done = 0;
    let mut count = 0;
    #[cfg(target_arch = "x86_64")]
    if simd && avx512() && !tests.is_empty() {
        // SAFETY: AVX-512F/BW detected; `ids` has room for `len` ids.
        (done, count) = unsafe { x86::select_avx512(tests, offset, len, ids) };
    }
    let _ = simd;
    // The rest (or all) branch-free: every row is written, the count advances when it passes.
    for row in done..len {
        // SAFETY: count <= row < len, within the capacity.
        unsafe { ids.add(count).write(row as u32) };
        let pass = tests.iter().fold(true, |pass, t| pass & t.codes.test(offset + row, t.lo, t.hi - t.lo));
        count += pass as usize;
    }
    // SAFETY: ids 0..count were written above (each id below `count` was written before
    // `count` passed it), and count <= len, the capacity.
    unsafe { out.set_len(count) };
    out
}

/// Those of `rows` (positions from `offset`) whose codes pass every test, in order.
pub fn retain_code_ranges(tests: &[CodeTest<'_>], offset: usize, mut rows: Vec<u32>) -> Vec<u32> {
    let mut count = 0;
    for i in 0..rows.len() {
        let row = rows[i];
        rows[count] = row;
        let pass = tests.iter().fold(true, |pass, t| pass & t.codes.test(offset + row as usize, t.lo, t.hi - t.lo));
        count += pass as usize;
    }
    rows.truncate(count);
    rows
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{CodeTest, Codes};

    /// ANDs into `masks[g]` the mask of rows `offset + 64g ..+ 64` whose codes lie in
    /// `lo..=lo + span`: one tight loop per column, so each streams its codes alone.
    ///
    /// # Safety
    /// Requires AVX-512F/BW; the codes hold `offset + 64 * masks.len()` rows.
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn and_masks(codes: &Codes, offset: usize, lo: u32, span: u32, masks: &mut [u64]) {
        // SAFETY: every load reads inside rows offset .. offset + 64 * masks.len().
        unsafe {
            match codes {
                Codes::U8(c) => {
                    let (low, high) = (_mm512_set1_epi8(lo as u8 as i8), _mm512_set1_epi8(span as u8 as i8));
                    let base = c.as_ptr().add(offset);
                    for (g, mask) in masks.iter_mut().enumerate() {
                        let v = _mm512_loadu_si512(base.add(64 * g) as *const _);
                        *mask &= _mm512_cmple_epu8_mask(_mm512_sub_epi8(v, low), high);
                    }
                }
                Codes::U16(c) => {
                    let (low, high) = (_mm512_set1_epi16(lo as u16 as i16), _mm512_set1_epi16(span as u16 as i16));
                    let base = c.as_ptr().add(offset);
                    for (g, mask) in masks.iter_mut().enumerate() {
                        let a = _mm512_loadu_si512(base.add(64 * g) as *const _);
                        let b = _mm512_loadu_si512(base.add(64 * g + 32) as *const _);
                        let ma = _mm512_cmple_epu16_mask(_mm512_sub_epi16(a, low), high) as u64;
                        let mb = _mm512_cmple_epu16_mask(_mm512_sub_epi16(b, low), high) as u64;
                        *mask &= ma | (mb << 32);
                    }
                }
                Codes::U32(c) => {
                    let (low, high) = (_mm512_set1_epi32(lo as i32), _mm512_set1_epi32(span as i32));
                    let base = c.as_ptr().add(offset);
                    for (g, mask) in masks.iter_mut().enumerate() {
                        let mut m = 0u64;
                        for k in 0..4 {
                            let v = _mm512_loadu_si512(base.add(64 * g + 16 * k) as *const _);
                            m |= (_mm512_cmple_epu32_mask(_mm512_sub_epi32(v, low), high) as u64) << (16 * k);
                        }
                        *mask &= m;
                    }
                }
            }
        }
    }

    /// Selects whole groups of 64 rows; returns the rows done and the ids written. Each
    /// test ANDs its masks for the whole run, then the row ids are compressed under them.
    ///
    /// # Safety
    /// Requires AVX-512F/BW; `out` is valid for writes of `len` ids; every test's codes hold `offset + len` rows.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub unsafe fn select_avx512(tests: &[CodeTest<'_>], offset: usize, len: usize, out: *mut u32) -> (usize, usize) {
        let groups = len / 64;
        let mut masks = vec![u64::MAX; groups];
        for test in tests {
            // SAFETY: the codes hold offset + len >= offset + 64 * groups rows.
            unsafe { and_masks(test.codes, offset, test.lo, test.hi - test.lo, &mut masks) };
        }
        let mut count = 0;
        // SAFETY: each store writes at most 16 ids at out[count..], and count + 16 <=
        // 64 * g + 16 * (k + 1) <= len.
        unsafe {
            let mut ids = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
            let sixteen = _mm512_set1_epi32(16);
            let sixty_four = _mm512_set1_epi32(64);
            for &mask in &masks {
                if mask == 0 {
                    ids = _mm512_add_epi32(ids, sixty_four);
                    continue;
                }
                for k in 0..4 {
                    let part = (mask >> (16 * k)) as u16;
                    _mm512_mask_compressstoreu_epi32(out.add(count) as *mut _, part, ids);
                    count += part.count_ones() as usize;
                    ids = _mm512_add_epi32(ids, sixteen);
                }
            }
        }
        (64 * groups, count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(packed: &PackedInts) -> Vec<i64> {
        let v = packed.decode_range(0, packed.len());
        match &v.data {
            VectorData::I16(x) => x.iter().map(|&x| x as i64).collect(),
            VectorData::I32(x) => x.iter().map(|&x| x as i64).collect(),
            VectorData::I64(x) => x.to_vec(),
            _ => unreachable!(),
        }
    }

    #[test]
    fn packs_round_trip_with_steps_and_widths() {
        let cases: Vec<(DataType, Vec<i64>, usize)> = vec![
            // Scaled decimals with a step of 100: one byte.
            (DataType::Decimal { precision: 15, scale: 2 }, (1..=50).map(|q| q * 100).cycle().take(1000).collect(), 1),
            // Dates over ~7 years: two bytes.
            (DataType::Date, (0..3000).map(|d| 8000 + (d * 7919) % 2557).collect(), 2),
            // Prices: four bytes.
            (DataType::BigInt, (0..3000).map(|i| 90_000 + (i * 104_729) % 10_000_000).collect(), 4),
            // Negative values and a constant stripe.
            (DataType::Integer, (0..100).map(|i| -50 + i % 7).collect(), 1),
            (DataType::BigInt, vec![-7; 10], 1),
        ];
        for (data_type, ints, width) in cases {
            let vector = match data_type.physical() {
                PhysicalType::I32 => Vector::from_native(data_type, ints.iter().map(|&v| v as i32).collect::<Vec<_>>()),
                _ => Vector::from_native(data_type, ints.clone()),
            };
            let packed = PackedInts::pack(&vector).expect("packs");
            assert_eq!(packed.codes.allocated_bytes() / packed.len(), width, "{data_type:?}");
            assert_eq!(values(&packed), ints);
            let rows = [5u32, 0, 9, 3];
            let gathered = packed.gather(&rows);
            assert_eq!(gathered.len(), 4);
            for (i, &r) in rows.iter().enumerate() {
                assert_eq!(gathered.get_scalar(i), vector.get_scalar(r as usize));
            }
        }
        // Wide ranges, NULLs and narrow types whose codes would not be narrower stay plain.
        assert!(PackedInts::pack(&Vector::from_native(DataType::BigInt, vec![0i64, 1 << 40, 1])).is_none());
        assert!(PackedInts::pack(&Vector::from_native(DataType::SmallInt, vec![0i16, 1000, 1])).is_none());
        assert!(PackedInts::pack(&Vector::nulls(DataType::BigInt, 3)).is_none());
    }

    #[test]
    fn code_ranges_match_value_ranges() {
        // Values 100, 200, ..., 5000 (step 100), bounds on and between the steps.
        let ints: Vec<i64> = (1..=50).map(|q| q * 100).collect();
        let packed = PackedInts::pack(&Vector::from_native(DataType::BigInt, ints.clone())).unwrap();
        let bounds = [None, Some(50), Some(100), Some(150), Some(2400), Some(2450), Some(5000), Some(6000)];
        for lower in bounds {
            for upper in bounds {
                for (li, ui) in [(true, true), (false, false), (true, false), (false, true)] {
                    let lower = lower.map(|l| (l as i128, li));
                    let upper = upper.map(|u| (u as i128, ui));
                    let expected: Vec<u32> = (0..ints.len() as u32)
                        .filter(|&i| {
                            let v = ints[i as usize] as i128;
                            lower.is_none_or(|(l, inc)| if inc { v >= l } else { v > l })
                                && upper.is_none_or(|(u, inc)| if inc { v <= u } else { v < u })
                        })
                        .collect();
                    let got: Vec<u32> = match packed.code_range(lower, upper) {
                        CodeRange::Empty => vec![],
                        CodeRange::All => (0..ints.len() as u32).collect(),
                        CodeRange::Within(lo, hi) => select_code_ranges(&[CodeTest { codes: &packed.codes, lo, hi }], 0, ints.len(), false),
                    };
                    assert_eq!(got, expected, "{lower:?} {upper:?}");
                }
            }
        }
    }

    #[test]
    fn simd_selection_matches_scalar() {
        // Three code widths, lengths around the 64-row groups, offsets inside the stripe.
        let n = 1000;
        let a: Vec<i64> = (0..n).map(|i| (i * 37) % 200).collect();
        let b: Vec<i64> = (0..n).map(|i| (i * 7919) % 3000).collect();
        let c: Vec<i64> = (0..n).map(|i| (i * 104_729) % 100_000).collect();
        let pack = |v: &Vec<i64>| PackedInts::pack(&Vector::from_native(DataType::BigInt, v.clone())).unwrap();
        let (a, b, c) = (pack(&a), pack(&b), pack(&c));
        let tests = [
            CodeTest { codes: &a.codes, lo: 20, hi: 150 },
            CodeTest { codes: &b.codes, lo: 0, hi: 2000 },
            CodeTest { codes: &c.codes, lo: 10_000, hi: 90_000 },
        ];
        for k in 1..=3 {
            for (offset, len) in [(0, 1000), (3, 64), (100, 127), (900, 100), (0, 0), (5, 200)] {
                let scalar = select_code_ranges(&tests[..k], offset, len, false);
                let simd = select_code_ranges(&tests[..k], offset, len, true);
                assert_eq!(simd, scalar, "{k} tests at {offset}+{len}");
                // The same tests on a selection: every other row.
                let odd: Vec<u32> = (0..len as u32).filter(|r| r % 2 == 1).collect();
                let retained = retain_code_ranges(&tests[..k], offset, odd);
                assert_eq!(retained, scalar.iter().copied().filter(|r| r % 2 == 1).collect::<Vec<_>>());
                assert!(scalar.iter().all(|&r| (r as usize) < len));
            }
        }
    }
}
