//! Sums and counts into a handful of groups without a per-row read-modify-write.
//!
//! The general update loop is `sums[groups[k]] += values[rows[k]]`. With few groups
//! (TPC-H Q1 has four) consecutive rows hit the same accumulator, so every row waits for
//! the previous row's store to that accumulator to be forwarded to its load: a chain of
//! dependent memory round trips, one per row and aggregate. Here the values are gathered
//! into a block and summed once per group with a mask (`v & -(group == g)`), which the
//! compiler turns into vector compares and adds with no dependency between rows.
//!
//! A block's sums are plain 64-bit adds: the block is summed this way only when every
//! value's magnitude is below [`SAFE_MAGNITUDE`], so that no block sum can overflow;
//! the caller adds each block sum to its group with the usual checked add.

/// Groups up to which [`block_sums`] applies (one masked pass per group).
pub(super) const MAX_GROUPS: usize = 8;

/// Rows per block.
pub(super) const BLOCK: usize = 1024;

/// `BLOCK` values of smaller magnitude sum to less than 2^62 in absolute value.
const SAFE_MAGNITUDE: u64 = 1 << 52;

/// Per group `g < group_count`: the sum and the number of the values `values[rows[k]]`
/// with `groups[k] == g` (`rows`, `groups`: at most [`BLOCK`] entries). `None` when a
/// value's magnitude is too large to sum unchecked (the caller sums that block row by
/// row).
pub(super) fn block_sums(values: &[i64], rows: &[u32], groups: &[u32], group_count: usize) -> Option<[(i64, i64); MAX_GROUPS]> {
    debug_assert!(rows.len() <= BLOCK && rows.len() == groups.len() && group_count <= MAX_GROUPS);
    #[cfg(target_arch = "x86_64")]
    {
        if apiary_common::cpu::avx512() {
            // SAFETY: the CPU has the features the function is compiled for.
            return unsafe { block_sums_avx512(values, rows, groups, group_count) };
        }
        if apiary_common::cpu::avx2() {
            // SAFETY: as above.
            return unsafe { block_sums_avx2(values, rows, groups, group_count) };
        }
    }
    block_sums_portable(values, rows, groups, group_count)
}

/// Per group `g < group_count`: how many of `groups` are `g` (no limit on the length).
pub(super) fn group_counts(groups: &[u32], group_count: usize) -> [i64; MAX_GROUPS] {
    debug_assert!(group_count <= MAX_GROUPS);
    #[cfg(target_arch = "x86_64")]
    {
        if apiary_common::cpu::avx2() {
            // SAFETY: the CPU has the features the function is compiled for.
            return unsafe { group_counts_avx2(groups, group_count) };
        }
    }
    group_counts_portable(groups, group_count)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
unsafe fn block_sums_avx512(values: &[i64], rows: &[u32], groups: &[u32], group_count: usize) -> Option<[(i64, i64); MAX_GROUPS]> {
    block_sums_portable(values, rows, groups, group_count)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn block_sums_avx2(values: &[i64], rows: &[u32], groups: &[u32], group_count: usize) -> Option<[(i64, i64); MAX_GROUPS]> {
    block_sums_portable(values, rows, groups, group_count)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn group_counts_avx2(groups: &[u32], group_count: usize) -> [i64; MAX_GROUPS] {
    group_counts_portable(groups, group_count)
}

#[inline(always)]
fn block_sums_portable(values: &[i64], rows: &[u32], groups: &[u32], group_count: usize) -> Option<[(i64, i64); MAX_GROUPS]> {
    let mut gathered = [0i64; BLOCK];
    let gathered = &mut gathered[..rows.len()];
    for (slot, &r) in gathered.iter_mut().zip(rows) {
        *slot = values[r as usize];
    }
    // The OR of the magnitudes bounds the largest (|v| for v >= 0, |v| - 1 otherwise).
    let magnitudes = gathered.iter().fold(0u64, |acc, &v| acc | (v ^ (v >> 63)) as u64);
    if magnitudes >= SAFE_MAGNITUDE {
        return None;
    }
    let mut out = [(0i64, 0i64); MAX_GROUPS];
    if group_count == 1 {
        out[0] = (gathered.iter().sum(), gathered.len() as i64);
        return Some(out);
    }
    for (g, slot) in out.iter_mut().enumerate().take(group_count) {
        let g = g as u32;
        let (mut sum, mut count) = (0i64, 0i64);
        for (&v, &group) in gathered.iter().zip(groups) {
            let hit = (group == g) as i64;
            sum += v & hit.wrapping_neg();
            count += hit;
        }
        *slot = (sum, count);
    }
    Some(out)
}

#[inline(always)]
fn group_counts_portable(groups: &[u32], group_count: usize) -> [i64; MAX_GROUPS] {
    let mut out = [0i64; MAX_GROUPS];
    if group_count == 1 {
        out[0] = groups.len() as i64;
        return out;
    }
    for (g, slot) in out.iter_mut().enumerate().take(group_count) {
        let g = g as u32;
        // u32 lanes per block, then widened: a block of at most 2^31 rows cannot overflow.
        *slot = groups.chunks(1 << 20).map(|block| block.iter().map(|&group| (group == g) as u32).sum::<u32>() as i64).sum();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(values: &[i64], rows: &[u32], groups: &[u32], group_count: usize) -> Vec<(i64, i64)> {
        let mut out = vec![(0i64, 0i64); group_count];
        for (&r, &g) in rows.iter().zip(groups) {
            out[g as usize].0 += values[r as usize];
            out[g as usize].1 += 1;
        }
        out
    }

    #[test]
    fn block_sums_match_the_row_loop() {
        let values: Vec<i64> = (0..3000i64).map(|i| (i * 7919 % 2003 - 1000) * 1_000_003).collect();
        for group_count in 1..=MAX_GROUPS {
            for len in [0usize, 1, 7, 64, 1000, BLOCK] {
                let rows: Vec<u32> = (0..len as u32).map(|k| (k * 3 + 1) % 3000).collect();
                let groups: Vec<u32> = (0..len as u32).map(|k| (k * 5 + k / 3) % group_count as u32).collect();
                let sums = block_sums(&values, &rows, &groups, group_count).expect("small values");
                assert_eq!(
                    sums[..group_count].to_vec(),
                    reference(&values, &rows, &groups, group_count),
                    "{group_count} groups, {len} rows"
                );
                let counts = group_counts(&groups, group_count);
                assert_eq!(counts[..group_count].iter().sum::<i64>(), len as i64);
                assert!(counts[..group_count].iter().zip(sums).all(|(&c, (_, n))| c == n));
            }
        }
    }

    #[test]
    fn large_magnitudes_are_left_to_the_checked_loop() {
        let values = vec![1i64, i64::MIN, 3];
        assert!(block_sums(&values, &[0, 1, 2], &[0, 1, 0], 2).is_none());
        let values = vec![1i64 << 52, 5];
        assert!(block_sums(&values, &[0, 1], &[0, 0], 1).is_none());
        let values = vec![(1i64 << 52) - 1, -(1i64 << 52)];
        assert_eq!(block_sums(&values, &[0, 1], &[0, 1], 2).map(|s| s[..2].to_vec()), Some(vec![((1 << 52) - 1, 1), (-(1 << 52), 1)]));
    }
}
