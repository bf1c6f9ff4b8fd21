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
pub const MAX_GROUPS: usize = 16;

/// The group of a row that is not to be added (a dense group array's unselected rows).
pub const SKIP: u32 = u32::MAX;

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

/// The group of every row of a chunk ([`SKIP`] for rows not to add), shared by the
/// aggregates of one update, with each block's group sizes counted once for all of them
/// (every sum needs them, and counting them cost a third of each sum's pass).
pub struct DenseGroups {
    groups: Vec<u32>,
    group_count: usize,
    block_counts: std::cell::OnceCell<Vec<[i64; MAX_GROUPS]>>,
}

impl DenseGroups {
    /// `groups`: each below `group_count` (at most [`MAX_GROUPS`]) or [`SKIP`].
    pub fn new(groups: Vec<u32>, group_count: usize) -> DenseGroups {
        debug_assert!(group_count <= MAX_GROUPS);
        DenseGroups { groups, group_count, block_counts: std::cell::OnceCell::new() }
    }

    pub fn groups(&self) -> &[u32] {
        &self.groups
    }

    pub fn group_count(&self) -> usize {
        self.group_count
    }

    /// Per block of [`BLOCK`] rows, how many rows each group has.
    pub(super) fn block_counts(&self) -> &[[i64; MAX_GROUPS]] {
        self.block_counts.get_or_init(|| self.groups.chunks(BLOCK).map(|block| group_counts(block, self.group_count)).collect())
    }
}

/// Per group `g < group_count`, the sum of `values[i]` with `groups[i] == g` (at most
/// [`BLOCK`] of each); rows of group [`SKIP`] are left out, whatever their value. `None`
/// when a value of such a row is too large to sum unchecked.
pub(super) fn dense_sums(values: &[i64], groups: &[u32], group_count: usize) -> Option<[i64; MAX_GROUPS]> {
    debug_assert!(values.len() <= BLOCK && values.len() == groups.len() && group_count <= MAX_GROUPS);
    #[cfg(target_arch = "x86_64")]
    {
        if apiary_common::cpu::avx512() {
            // SAFETY: the CPU has the features the function is compiled for.
            return unsafe { dense_sums_avx512(values, groups, group_count) };
        }
        if apiary_common::cpu::avx2() {
            // SAFETY: as above.
            return unsafe { dense_sums_avx2(values, groups, group_count) };
        }
    }
    dense_sums_portable(values, groups, group_count)
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
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
unsafe fn dense_sums_avx512(values: &[i64], groups: &[u32], group_count: usize) -> Option<[i64; MAX_GROUPS]> {
    dense_sums_portable(values, groups, group_count)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn dense_sums_avx2(values: &[i64], groups: &[u32], group_count: usize) -> Option<[i64; MAX_GROUPS]> {
    dense_sums_portable(values, groups, group_count)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn group_counts_avx2(groups: &[u32], group_count: usize) -> [i64; MAX_GROUPS] {
    group_counts_portable(groups, group_count)
}

/// The sums only: a dense update takes the counts from [`DenseGroups`].
#[inline(always)]
fn dense_sums_portable(values: &[i64], groups: &[u32], group_count: usize) -> Option<[i64; MAX_GROUPS]> {
    masked_sums::<false>(values, groups, group_count).map(|sums| sums.map(|(sum, _)| sum))
}

#[inline(always)]
fn block_sums_portable(values: &[i64], rows: &[u32], groups: &[u32], group_count: usize) -> Option<[(i64, i64); MAX_GROUPS]> {
    // Rows that are a run (a chunk without a selection, the survivors of a filter
    // gathered by the scan) are read in place.
    let mut buffer = [0i64; BLOCK];
    let gathered: &[i64] = if let Some(run) = crate::operators::run_of(rows).filter(|run| run.end <= values.len()) {
        &values[run]
    } else {
        let buffer = &mut buffer[..rows.len()];
        for (slot, &r) in buffer.iter_mut().zip(rows) {
            *slot = values[r as usize];
        }
        buffer
    };
    masked_sums::<true>(gathered, groups, group_count)
}

/// Per group `g < group_count`, the sum of `values[i]` with `groups[i] == g` and, with
/// `COUNT`, their number (else 0); `None` when a value of such a row is too large to sum
/// unchecked.
#[inline(always)]
fn masked_sums<const COUNT: bool>(values: &[i64], groups: &[u32], group_count: usize) -> Option<[(i64, i64); MAX_GROUPS]> {
    // One pass over the values for all groups: the group count is a constant of each
    // loop, so its per-group sums unroll into vector registers.
    match group_count {
        1 => masked_sums_of::<1, COUNT>(values, groups),
        2 => masked_sums_of::<2, COUNT>(values, groups),
        3 => masked_sums_of::<3, COUNT>(values, groups),
        4 => masked_sums_of::<4, COUNT>(values, groups),
        5 => masked_sums_of::<5, COUNT>(values, groups),
        6 => masked_sums_of::<6, COUNT>(values, groups),
        7 => masked_sums_of::<7, COUNT>(values, groups),
        8 => masked_sums_of::<8, COUNT>(values, groups),
        9 => masked_sums_of::<9, COUNT>(values, groups),
        10 => masked_sums_of::<10, COUNT>(values, groups),
        11 => masked_sums_of::<11, COUNT>(values, groups),
        12 => masked_sums_of::<12, COUNT>(values, groups),
        13 => masked_sums_of::<13, COUNT>(values, groups),
        14 => masked_sums_of::<14, COUNT>(values, groups),
        15 => masked_sums_of::<15, COUNT>(values, groups),
        _ => masked_sums_of::<16, COUNT>(values, groups),
    }
}

#[inline(always)]
fn masked_sums_of<const G: usize, const COUNT: bool>(values: &[i64], groups: &[u32]) -> Option<[(i64, i64); MAX_GROUPS]> {
    let (mut sums, mut counts) = ([0i64; G], [0i64; G]);
    // The OR of the magnitudes bounds the largest (|v| for v >= 0, |v| - 1 otherwise);
    // rows of no group (SKIP) do not count.
    let mut magnitudes = 0u64;
    for (&v, &group) in values.iter().zip(groups) {
        let counted = ((group as usize) < G) as u64;
        magnitudes |= (v ^ (v >> 63)) as u64 & counted.wrapping_neg();
        for g in 0..G {
            let hit = (group == g as u32) as i64;
            // Wrapping: sums with a value too large are thrown away below.
            sums[g] = sums[g].wrapping_add(v & hit.wrapping_neg());
            if COUNT {
                counts[g] += hit;
            }
        }
    }
    if magnitudes >= SAFE_MAGNITUDE {
        return None;
    }
    let mut out = [(0i64, 0i64); MAX_GROUPS];
    for g in 0..G {
        out[g] = (sums[g], counts[g]);
    }
    Some(out)
}

#[inline(always)]
fn group_counts_portable(groups: &[u32], group_count: usize) -> [i64; MAX_GROUPS] {
    let mut out = [0i64; MAX_GROUPS];
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
                // Scattered rows (gathered), a run (read in place), a run but for one row.
                let scattered: Vec<u32> = (0..len as u32).map(|k| (k * 3 + 1) % 3000).collect();
                let run: Vec<u32> = (0..len as u32).map(|k| k + 17).collect();
                let mut almost = run.clone();
                if let Some(last) = almost.last_mut() {
                    *last += 1;
                }
                for rows in [scattered, run, almost] {
                    let groups: Vec<u32> = (0..len as u32).map(|k| (k * 5 + k / 3) % group_count as u32).collect();
                    let sums = block_sums(&values, &rows, &groups, group_count).expect("small values");
                    assert_eq!(
                        sums[..group_count].to_vec(),
                        reference(&values, &rows, &groups, group_count),
                        "{group_count} groups, {rows:?}"
                    );
                    let counts = group_counts(&groups, group_count);
                    assert_eq!(counts[..group_count].iter().sum::<i64>(), len as i64);
                    assert!(counts[..group_count].iter().zip(sums).all(|(&c, (_, n))| c == n));
                }
            }
        }
    }

    #[test]
    fn dense_sums_leave_out_skipped_rows() {
        let values: Vec<i64> = (0..BLOCK as i64).map(|i| i * 1_000_003 - 77).collect();
        for group_count in 1..=MAX_GROUPS {
            let groups: Vec<u32> = (0..BLOCK as u32).map(|i| if i % 5 == 3 { SKIP } else { i % group_count as u32 }).collect();
            let rows: Vec<u32> = (0..BLOCK as u32).filter(|&i| groups[i as usize] != SKIP).collect();
            let kept: Vec<u32> = rows.iter().map(|&r| groups[r as usize]).collect();
            let sums = dense_sums(&values, &groups, group_count).expect("small values");
            let expected = reference(&values, &rows, &kept, group_count);
            assert_eq!(sums[..group_count].to_vec(), expected.iter().map(|&(sum, _)| sum).collect::<Vec<_>>());
            let counts = group_counts(&groups, group_count);
            assert_eq!(counts[..group_count].to_vec(), expected.iter().map(|&(_, count)| count).collect::<Vec<_>>());
            // The shared per-block counts are the same counts.
            let dense = DenseGroups::new(groups.clone(), group_count);
            assert_eq!(dense.block_counts(), &[counts]);
        }
        // A huge value under a skipped row does not matter; under a counted one it does.
        let values = vec![5i64, i64::MAX, -3];
        assert_eq!(dense_sums(&values, &[0, SKIP, 0], 1).map(|s| s[0]), Some(2));
        assert!(dense_sums(&values, &[0, 0, SKIP], 1).is_none());
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
