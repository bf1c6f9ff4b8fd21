//! SIMD predicate evaluation (ROF §4.2): comparisons of a fixed-width column with
//! constants, writing the positions of qualifying rows as a full vector of tuple ids.
//!
//! ```text
//!  AVX-512:  load 16 x i32 ─▶ compare ─▶ 16-bit mask ─▶ vpcompressd(row ids, mask) ─▶ out
//!  AVX2:     load  8 x i32 ─▶ compare ─▶  8-bit mask ─▶ permute(row ids, LUT[mask])  ─▶ out
//!  scalar:   branch-free: out[n] = i; n += predicate
//! ```
//!
//! The instruction set is detected once at run time; `SET simd = off` forces the scalar
//! loop, which gives identical results (tested below).

use std::sync::OnceLock;

use apiary_types::vector::NativeType;

/// The comparison a kernel applies: `value OP constant`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpKind {
    Eq,
    NotEq,
    Lt,
    LtEq,
    Gt,
    GtEq,
}

impl CmpKind {
    #[inline(always)]
    pub fn test<T: NativeType>(self, a: T, b: T) -> bool {
        match self {
            CmpKind::Eq => a.sql_eq(b),
            CmpKind::NotEq => !a.sql_eq(b),
            CmpKind::Lt => a.sql_lt(b),
            CmpKind::LtEq => !b.sql_lt(a),
            CmpKind::Gt => b.sql_lt(a),
            CmpKind::GtEq => !a.sql_lt(b),
        }
    }

    /// Whether IEEE comparison (what SIMD instructions do) agrees with SQL's for NaN
    /// values: NaN sorts last, so `NaN > c` is TRUE in SQL but false in IEEE.
    fn ieee_agrees_on_nan(self) -> bool {
        matches!(self, CmpKind::Eq | CmpKind::NotEq | CmpKind::Lt | CmpKind::LtEq)
    }
}

/// Instruction sets usable for selection kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimdLevel {
    Scalar,
    Avx2,
    Avx512,
}

/// The best level this CPU supports (detected once).
pub fn detected_level() -> SimdLevel {
    static LEVEL: OnceLock<SimdLevel> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if apiary_common::cpu::avx512() {
                return SimdLevel::Avx512;
            }
            if apiary_common::cpu::avx2() {
                return SimdLevel::Avx2;
            }
        }
        SimdLevel::Scalar
    })
}

/// A type with SIMD selection kernels.
pub trait SimdSelect: Copy + PartialOrd {
    /// Writes the positions `i` where `lower(values[i]) && upper(values[i])` into `out`
    /// (which has room for `values.len()` entries); returns how many.
    /// `lower`/`upper` are `(kind, constant)`; `None` means no bound.
    fn select(values: &[Self], first: (CmpKind, Self), second: Option<(CmpKind, Self)>, out: &mut [u32], level: SimdLevel) -> usize;
}

fn select_scalar<T: NativeType>(values: &[T], first: (CmpKind, T), second: Option<(CmpKind, T)>, out: &mut [u32], start: usize) -> usize {
    let mut count = 0;
    match second {
        None => {
            for (i, &v) in values.iter().enumerate() {
                out[count] = (start + i) as u32;
                count += first.0.test(v, first.1) as usize;
            }
        }
        Some(second) => {
            for (i, &v) in values.iter().enumerate() {
                out[count] = (start + i) as u32;
                count += (first.0.test(v, first.1) & second.0.test(v, second.1)) as usize;
            }
        }
    }
    count
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::CmpKind;

    #[inline(always)]
    unsafe fn mask_i32_512(v: __m512i, c: __m512i, kind: CmpKind) -> __mmask16 {
        // SAFETY: caller guarantees avx512f.
        unsafe {
            match kind {
                CmpKind::Eq => _mm512_cmpeq_epi32_mask(v, c),
                CmpKind::NotEq => _mm512_cmpneq_epi32_mask(v, c),
                CmpKind::Lt => _mm512_cmplt_epi32_mask(v, c),
                CmpKind::LtEq => _mm512_cmple_epi32_mask(v, c),
                CmpKind::Gt => _mm512_cmpgt_epi32_mask(v, c),
                CmpKind::GtEq => _mm512_cmpge_epi32_mask(v, c),
            }
        }
    }

    #[inline(always)]
    unsafe fn mask_i64_512(v: __m512i, c: __m512i, kind: CmpKind) -> __mmask8 {
        // SAFETY: caller guarantees avx512f.
        unsafe {
            match kind {
                CmpKind::Eq => _mm512_cmpeq_epi64_mask(v, c),
                CmpKind::NotEq => _mm512_cmpneq_epi64_mask(v, c),
                CmpKind::Lt => _mm512_cmplt_epi64_mask(v, c),
                CmpKind::LtEq => _mm512_cmple_epi64_mask(v, c),
                CmpKind::Gt => _mm512_cmpgt_epi64_mask(v, c),
                CmpKind::GtEq => _mm512_cmpge_epi64_mask(v, c),
            }
        }
    }

    #[inline(always)]
    unsafe fn mask_f64_512(v: __m512d, c: __m512d, kind: CmpKind) -> __mmask8 {
        // SAFETY: caller guarantees avx512f. Ordered comparisons: NaN never qualifies,
        // like the scalar `PartialOrd` (and `!=` is unordered: NaN != x).
        unsafe {
            match kind {
                CmpKind::Eq => _mm512_cmp_pd_mask::<_CMP_EQ_OQ>(v, c),
                CmpKind::NotEq => _mm512_cmp_pd_mask::<_CMP_NEQ_UQ>(v, c),
                CmpKind::Lt => _mm512_cmp_pd_mask::<_CMP_LT_OQ>(v, c),
                CmpKind::LtEq => _mm512_cmp_pd_mask::<_CMP_LE_OQ>(v, c),
                CmpKind::Gt => _mm512_cmp_pd_mask::<_CMP_GT_OQ>(v, c),
                CmpKind::GtEq => _mm512_cmp_pd_mask::<_CMP_GE_OQ>(v, c),
            }
        }
    }

    /// # Safety
    /// Requires AVX-512F; `out` has room for `values.len()` entries.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn select_i32_avx512(values: &[i32], first: (CmpKind, i32), second: Option<(CmpKind, i32)>, out: &mut [u32]) -> usize {
        let n = values.len();
        let mut count = 0;
        let mut i = 0;
        // SAFETY: loads read 16 values inside `values`; stores write at most 16 ids at
        // `out[count..]`, and count + 16 <= i + 16 <= n <= out.len().
        unsafe {
            let c1 = _mm512_set1_epi32(first.1);
            let c2 = _mm512_set1_epi32(second.map_or(0, |s| s.1));
            let mut ids = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
            let step = _mm512_set1_epi32(16);
            while i + 16 <= n {
                let v = _mm512_loadu_si512(values.as_ptr().add(i) as *const _);
                let mut mask = mask_i32_512(v, c1, first.0);
                if let Some((kind, _)) = second {
                    mask &= mask_i32_512(v, c2, kind);
                }
                _mm512_mask_compressstoreu_epi32(out.as_mut_ptr().add(count) as *mut _, mask, ids);
                count += mask.count_ones() as usize;
                ids = _mm512_add_epi32(ids, step);
                i += 16;
            }
        }
        count + super::select_scalar(&values[i..], first, second, &mut out[count..], i)
    }

    /// # Safety
    /// Requires AVX-512F and AVX-512VL; `out` has room for `values.len()` entries.
    #[target_feature(enable = "avx512f,avx512vl")]
    pub unsafe fn select_i64_avx512(values: &[i64], first: (CmpKind, i64), second: Option<(CmpKind, i64)>, out: &mut [u32]) -> usize {
        let n = values.len();
        let mut count = 0;
        let mut i = 0;
        // SAFETY: as in `select_i32_avx512`, with 8 lanes.
        unsafe {
            let c1 = _mm512_set1_epi64(first.1);
            let c2 = _mm512_set1_epi64(second.map_or(0, |s| s.1));
            let mut ids = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            let step = _mm256_set1_epi32(8);
            while i + 8 <= n {
                let v = _mm512_loadu_si512(values.as_ptr().add(i) as *const _);
                let mut mask = mask_i64_512(v, c1, first.0);
                if let Some((kind, _)) = second {
                    mask &= mask_i64_512(v, c2, kind);
                }
                _mm256_mask_compressstoreu_epi32(out.as_mut_ptr().add(count) as *mut _, mask, ids);
                count += mask.count_ones() as usize;
                ids = _mm256_add_epi32(ids, step);
                i += 8;
            }
        }
        count + super::select_scalar(&values[i..], first, second, &mut out[count..], i)
    }

    /// # Safety
    /// Requires AVX-512F and AVX-512VL; `out` has room for `values.len()` entries.
    #[target_feature(enable = "avx512f,avx512vl")]
    pub unsafe fn select_f64_avx512(values: &[f64], first: (CmpKind, f64), second: Option<(CmpKind, f64)>, out: &mut [u32]) -> usize {
        let n = values.len();
        let mut count = 0;
        let mut i = 0;
        // SAFETY: as in `select_i32_avx512`, with 8 lanes.
        unsafe {
            let c1 = _mm512_set1_pd(first.1);
            let c2 = _mm512_set1_pd(second.map_or(0.0, |s| s.1));
            let mut ids = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            let step = _mm256_set1_epi32(8);
            while i + 8 <= n {
                let v = _mm512_loadu_pd(values.as_ptr().add(i));
                let mut mask = mask_f64_512(v, c1, first.0);
                if let Some((kind, _)) = second {
                    mask &= mask_f64_512(v, c2, kind);
                }
                _mm256_mask_compressstoreu_epi32(out.as_mut_ptr().add(count) as *mut _, mask, ids);
                count += mask.count_ones() as usize;
                ids = _mm256_add_epi32(ids, step);
                i += 8;
            }
        }
        count + super::select_scalar(&values[i..], first, second, &mut out[count..], i)
    }

    /// Permutations that move the lanes selected by an 8-bit mask to the front.
    fn permutation_table() -> &'static [[i32; 8]; 256] {
        static TABLE: std::sync::OnceLock<[[i32; 8]; 256]> = std::sync::OnceLock::new();
        TABLE.get_or_init(|| {
            let mut table = [[0i32; 8]; 256];
            for (mask, row) in table.iter_mut().enumerate() {
                let mut k = 0;
                for lane in 0..8i32 {
                    if mask & (1 << lane) != 0 {
                        row[k] = lane;
                        k += 1;
                    }
                }
            }
            table
        })
    }

    #[inline(always)]
    unsafe fn mask_i32_256(v: __m256i, c: __m256i, kind: CmpKind) -> i32 {
        // SAFETY: caller guarantees avx2. AVX2 only has > and ==; the rest are derived.
        unsafe {
            let gt = _mm256_cmpgt_epi32(v, c);
            let eq = _mm256_cmpeq_epi32(v, c);
            let m = match kind {
                CmpKind::Eq => eq,
                CmpKind::NotEq => _mm256_xor_si256(eq, _mm256_set1_epi32(-1)),
                CmpKind::Gt => gt,
                CmpKind::GtEq => _mm256_or_si256(gt, eq),
                CmpKind::Lt => _mm256_xor_si256(_mm256_or_si256(gt, eq), _mm256_set1_epi32(-1)),
                CmpKind::LtEq => _mm256_xor_si256(gt, _mm256_set1_epi32(-1)),
            };
            _mm256_movemask_ps(_mm256_castsi256_ps(m))
        }
    }

    /// # Safety
    /// Requires AVX2; `out` has room for `values.len()` entries.
    #[target_feature(enable = "avx2")]
    pub unsafe fn select_i32_avx2(values: &[i32], first: (CmpKind, i32), second: Option<(CmpKind, i32)>, out: &mut [u32]) -> usize {
        let table = permutation_table();
        let n = values.len();
        let mut count = 0;
        let mut i = 0;
        // SAFETY: loads read 8 values inside `values`; the store writes 8 lanes at
        // `out[count..]` and count + 8 <= i + 8 <= n <= out.len().
        unsafe {
            let c1 = _mm256_set1_epi32(first.1);
            let c2 = _mm256_set1_epi32(second.map_or(0, |s| s.1));
            let mut ids = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            let step = _mm256_set1_epi32(8);
            while i + 8 <= n {
                let v = _mm256_loadu_si256(values.as_ptr().add(i) as *const _);
                let mut mask = mask_i32_256(v, c1, first.0);
                if let Some((kind, _)) = second {
                    mask &= mask_i32_256(v, c2, kind);
                }
                let permutation = _mm256_loadu_si256(table[mask as usize].as_ptr() as *const _);
                let packed = _mm256_permutevar8x32_epi32(ids, permutation);
                _mm256_storeu_si256(out.as_mut_ptr().add(count) as *mut _, packed);
                count += (mask as u32).count_ones() as usize;
                ids = _mm256_add_epi32(ids, step);
                i += 8;
            }
        }
        count + super::select_scalar(&values[i..], first, second, &mut out[count..], i)
    }

    /// `masks[i] &= table[values[i] - base]` for every `i` whose value is in the table;
    /// false when some value is not (its mask is left as it was).
    ///
    /// # Safety
    /// Requires AVX-512F and AVX-512VL; `masks.len() >= values.len()`; `table.len()` and
    /// `|base|` below 2^30 (so `values[i] - base` cannot wrap into the table's range).
    #[target_feature(enable = "avx512f,avx512vl")]
    pub unsafe fn lookup_and_i32_avx512(values: &[i32], base: i64, table: &[i64], masks: &mut [i64]) -> bool {
        let n = values.len();
        let mut i = 0;
        let mut all_found = true;
        // SAFETY: loads read 8 values inside `values`, loads and stores 8 masks inside
        // `masks`; gathers read only lanes whose index is below `table.len()`.
        unsafe {
            let vbase = _mm256_set1_epi32(base as i32);
            let vlen = _mm256_set1_epi32(table.len() as i32);
            let unchanged = _mm512_set1_epi64(-1);
            while i + 8 <= n {
                let index = _mm256_sub_epi32(_mm256_loadu_si256(values.as_ptr().add(i) as *const _), vbase);
                let found = _mm256_cmplt_epu32_mask(index, vlen);
                all_found &= found == 0xFF;
                let entries = _mm512_mask_i32gather_epi64::<8>(unchanged, found, index, table.as_ptr() as *const _);
                let target = masks.as_mut_ptr().add(i) as *mut __m512i;
                _mm512_storeu_si512(target as *mut _, _mm512_and_si512(_mm512_loadu_si512(target as *const _), entries));
                i += 8;
            }
        }
        super::lookup_and_scalar(&values[i..], base, table, &mut masks[i..]) && all_found
    }

    /// [`lookup_and_i32_avx512`] over 64-bit values.
    ///
    /// # Safety
    /// As for [`lookup_and_i32_avx512`] (`|base|` below 2^62).
    #[target_feature(enable = "avx512f,avx512vl")]
    pub unsafe fn lookup_and_i64_avx512(values: &[i64], base: i64, table: &[i64], masks: &mut [i64]) -> bool {
        let n = values.len();
        let mut i = 0;
        let mut all_found = true;
        // SAFETY: as in `lookup_and_i32_avx512`.
        unsafe {
            let vbase = _mm512_set1_epi64(base);
            let vlen = _mm512_set1_epi64(table.len() as i64);
            let unchanged = _mm512_set1_epi64(-1);
            while i + 8 <= n {
                let index = _mm512_sub_epi64(_mm512_loadu_si512(values.as_ptr().add(i) as *const _), vbase);
                let found = _mm512_cmplt_epu64_mask(index, vlen);
                all_found &= found == 0xFF;
                let entries = _mm512_mask_i64gather_epi64::<8>(unchanged, found, index, table.as_ptr() as *const _);
                let target = masks.as_mut_ptr().add(i) as *mut __m512i;
                _mm512_storeu_si512(target as *mut _, _mm512_and_si512(_mm512_loadu_si512(target as *const _), entries));
                i += 8;
            }
        }
        super::lookup_and_scalar(&values[i..], base, table, &mut masks[i..]) && all_found
    }
}

/// Values with a table-lookup kernel: `masks[i] &= table[values[i] - base]` for every `i`
/// whose value is in the table (the shared selection of `query_mask`); false when some
/// value is not (its mask is left as it was).
pub trait SimdLookup: Copy + Into<i64> {
    fn lookup_and(values: &[Self], base: i64, table: &[i64], masks: &mut [i64], _level: SimdLevel) -> bool {
        lookup_and_scalar(values, base, table, masks)
    }
}

impl SimdLookup for i16 {}

impl SimdLookup for i32 {
    fn lookup_and(values: &[Self], base: i64, table: &[i64], masks: &mut [i64], level: SimdLevel) -> bool {
        assert!(masks.len() >= values.len());
        #[cfg(target_arch = "x86_64")]
        if level == SimdLevel::Avx512 && table.len() < 1 << 30 && base.unsigned_abs() < 1 << 30 {
            // SAFETY: AVX-512F/VL detected on this CPU; lengths and bounds checked above.
            return unsafe { x86::lookup_and_i32_avx512(values, base, table, masks) };
        }
        lookup_and_scalar(values, base, table, masks)
    }
}

impl SimdLookup for i64 {
    fn lookup_and(values: &[Self], base: i64, table: &[i64], masks: &mut [i64], level: SimdLevel) -> bool {
        assert!(masks.len() >= values.len());
        #[cfg(target_arch = "x86_64")]
        if level == SimdLevel::Avx512 && table.len() < 1 << 30 && base.unsigned_abs() < 1 << 62 {
            // SAFETY: AVX-512F/VL detected on this CPU; lengths and bounds checked above.
            return unsafe { x86::lookup_and_i64_avx512(values, base, table, masks) };
        }
        lookup_and_scalar(values, base, table, masks)
    }
}

fn lookup_and_scalar<T: Copy + Into<i64>>(values: &[T], base: i64, table: &[i64], masks: &mut [i64]) -> bool {
    let mut all_found = true;
    for (mask, &v) in masks.iter_mut().zip(values) {
        match table.get(v.into().wrapping_sub(base) as usize) {
            Some(entry) => *mask &= entry,
            None => all_found = false,
        }
    }
    all_found
}

impl SimdSelect for i32 {
    fn select(values: &[Self], first: (CmpKind, Self), second: Option<(CmpKind, Self)>, out: &mut [u32], level: SimdLevel) -> usize {
        debug_assert!(out.len() >= values.len());
        #[cfg(target_arch = "x86_64")]
        match level {
            // SAFETY: the level was detected on this CPU; `out` is large enough.
            SimdLevel::Avx512 => return unsafe { x86::select_i32_avx512(values, first, second, out) },
            SimdLevel::Avx2 => return unsafe { x86::select_i32_avx2(values, first, second, out) },
            SimdLevel::Scalar => {}
        }
        select_scalar(values, first, second, out, 0)
    }
}

impl SimdSelect for i64 {
    fn select(values: &[Self], first: (CmpKind, Self), second: Option<(CmpKind, Self)>, out: &mut [u32], level: SimdLevel) -> usize {
        debug_assert!(out.len() >= values.len());
        #[cfg(target_arch = "x86_64")]
        if level == SimdLevel::Avx512 {
            // SAFETY: AVX-512F/VL detected on this CPU; `out` is large enough.
            return unsafe { x86::select_i64_avx512(values, first, second, out) };
        }
        select_scalar(values, first, second, out, 0)
    }
}

impl SimdSelect for f64 {
    fn select(values: &[Self], first: (CmpKind, Self), second: Option<(CmpKind, Self)>, out: &mut [u32], level: SimdLevel) -> usize {
        debug_assert!(out.len() >= values.len());
        // IEEE comparisons give SQL's answer for NaN values when no constant is NaN and
        // every bound agrees (or, for a range, one bound rejects NaN either way).
        let nan_safe = !first.1.is_nan()
            && second.is_none_or(|(_, c)| !c.is_nan())
            && match second {
                None => first.0.ieee_agrees_on_nan(),
                Some((kind, _)) => {
                    let rejects_nan = |k: CmpKind| matches!(k, CmpKind::Eq | CmpKind::Lt | CmpKind::LtEq);
                    rejects_nan(first.0) || rejects_nan(kind)
                }
            };
        #[cfg(target_arch = "x86_64")]
        if level == SimdLevel::Avx512 && nan_safe {
            // SAFETY: AVX-512F/VL detected on this CPU; `out` is large enough.
            return unsafe { x86::select_f64_avx512(values, first, second, out) };
        }
        select_scalar(values, first, second, out, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KINDS: [CmpKind; 6] = [CmpKind::Eq, CmpKind::NotEq, CmpKind::Lt, CmpKind::LtEq, CmpKind::Gt, CmpKind::GtEq];

    fn levels() -> Vec<SimdLevel> {
        let mut levels = vec![SimdLevel::Scalar];
        match detected_level() {
            SimdLevel::Avx512 => levels.extend([SimdLevel::Avx2, SimdLevel::Avx512]),
            SimdLevel::Avx2 => levels.push(SimdLevel::Avx2),
            SimdLevel::Scalar => {}
        }
        levels
    }

    fn check<T: SimdSelect + NativeType>(values: &[T], constants: &[T]) {
        for &kind in &KINDS {
            for &c in constants {
                for second in [None, Some((CmpKind::LtEq, c)), Some((CmpKind::Gt, c))] {
                    let expected: Vec<u32> = (0..values.len() as u32)
                        .filter(|&i| kind.test(values[i as usize], c) && second.is_none_or(|(k, s)| k.test(values[i as usize], s)))
                        .collect();
                    for level in levels() {
                        let mut out = vec![0u32; values.len()];
                        let n = T::select(values, (kind, c), second, &mut out, level);
                        assert_eq!(&out[..n], &expected[..], "{kind:?} {c:?} {second:?} {level:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn simd_matches_scalar() {
        // A pseudo-random sequence with duplicates and extremes; odd lengths hit the tails.
        let mut x: u64 = 42;
        let mut next = || {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            x >> 33
        };
        for len in [0usize, 1, 7, 15, 16, 17, 100, 1000] {
            let ints: Vec<i32> = (0..len).map(|_| (next() % 50) as i32 - 25).collect();
            check(&ints, &[-25, 0, 3, 24, i32::MIN, i32::MAX]);
            let longs: Vec<i64> = (0..len).map(|_| (next() % 50) as i64 * 1_000_000_007 - 7).collect();
            check(&longs, &[-7, 0, 3_000_000_014, i64::MAX]);
            let floats: Vec<f64> = (0..len).map(|i| if i % 13 == 0 { f64::NAN } else { (next() % 50) as f64 / 4.0 }).collect();
            // SQL order: NaN equals NaN and sorts after every value (also as a constant).
            check(&floats, &[0.0, 2.5, 10.0, f64::INFINITY, f64::NAN]);
        }
    }
}
