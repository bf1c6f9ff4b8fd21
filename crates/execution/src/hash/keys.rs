//! Key packing.
//!
//! Hash tables compare and hash keys many times per row. Instead of looking at each key
//! column with a type switch, the key columns of a batch are packed column by column into
//! one machine word per row:
//!
//! ```text
//!  u64 / u128 / 256-bit key:  [ col0 bits | col1 bits | ... | null flags ]   (fixed offsets)
//!  bytes key:       [ null byte? | col0 bytes | len+bytes of strings | ... ]  (arena)
//! ```
//!
//! Widths: BOOLEAN 1 bit, SMALLINT 16, INTEGER/DATE/REAL 32, BIGINT/TIMESTAMP/DOUBLE and
//! DECIMAL(<=18) 64, DECIMAL(>18)/INTERVAL 128, short CHAR/VARCHAR (at most 3 characters)
//! 8 + 32*n; longer strings force the byte-string form. Packing only needs equality, so
//! signed values are stored as their raw bits. Keys up to 256 bits (two or three nullable
//! BIGINTs grouped: 130 or 195 bits with their NULL flags) are compared as two `u128`
//! words instead of as byte strings.

use apiary_common::hash::{hash_bytes, hash_u128, hash_u64, hash_u64_batch};
use apiary_types::datatype::PhysicalType;
use apiary_types::{DataType, Vector, VectorData};

/// How wide a packed key is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyWidth {
    /// No key columns (a global aggregate or a cross join).
    Empty,
    U64,
    U128,
    /// [`Key256`].
    U256,
    Bytes,
}

/// A 256-bit packed key (see [`KeyWidth::U256`]): as large as a `u128` and a `u64`
/// would be with the `u128`'s alignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Key256 {
    pub low: u128,
    pub high: u128,
}

impl Key256 {
    #[inline(always)]
    pub fn hash(self) -> u64 {
        hash_u64(hash_u128(self.low) ^ hash_u128(self.high).rotate_left(17))
    }
}

#[derive(Debug, Clone)]
struct Part {
    /// Bit offset of the value in the packed word.
    offset: u32,
    /// Width in bits of the value (strings: including the length byte).
    bits: u32,
    /// Bit offset of the NULL flag, when NULLs are part of the key.
    null_flag: Option<u32>,
}

/// Packs the key columns of a batch into fixed-width keys or byte strings.
#[derive(Debug, Clone)]
pub struct KeyPacker {
    pub width: KeyWidth,
    parts: Vec<Part>,
    /// NULL is a key value (GROUP BY, IS NOT DISTINCT FROM); otherwise rows with a NULL
    /// key are reported as not valid (they never match in a join).
    nulls_are_values: bool,
}

/// Maximum characters for a string to be packed into a fixed-width key.
const MAX_PACKED_STRING_CHARS: u32 = 3;

/// The bits a value of `data_type` takes in a fixed-width key; `None` when it needs the
/// byte-string form (strings that may be longer than [`MAX_PACKED_STRING_CHARS`]).
pub fn value_bits(data_type: &DataType) -> Option<u32> {
    Some(match data_type.physical() {
        PhysicalType::Bool => 1,
        PhysicalType::I16 => 16,
        PhysicalType::I32 | PhysicalType::F32 => 32,
        PhysicalType::I64 | PhysicalType::F64 => 64,
        PhysicalType::I128 | PhysicalType::Interval => 128,
        PhysicalType::Str => match data_type.max_length() {
            Some(n) if n <= MAX_PACKED_STRING_CHARS => 8 + 32 * n,
            _ => return None,
        },
    })
}

impl KeyPacker {
    /// Chooses the packing for key columns of the given types.
    pub fn new(types: &[DataType], nullable: &[bool], nulls_are_values: bool) -> KeyPacker {
        if types.is_empty() {
            return KeyPacker { width: KeyWidth::Empty, parts: Vec::new(), nulls_are_values };
        }
        let mut offset = 0u32;
        let mut parts = Vec::new();
        let mut fixed = true;
        for data_type in types {
            match value_bits(data_type) {
                Some(bits) => {
                    parts.push(Part { offset, bits, null_flag: None });
                    offset += bits;
                }
                None => fixed = false,
            }
        }
        if fixed && nulls_are_values {
            for (part, &nullable) in parts.iter_mut().zip(nullable) {
                if nullable {
                    part.null_flag = Some(offset);
                    offset += 1;
                }
            }
        }
        let width = if !fixed {
            KeyWidth::Bytes
        } else if offset <= 64 && !parts.iter().any(|p| p.bits > 64) {
            KeyWidth::U64
        } else if offset <= 128 {
            KeyWidth::U128
        } else if offset <= 256 {
            KeyWidth::U256
        } else {
            KeyWidth::Bytes
        };
        if width == KeyWidth::Bytes {
            parts = types.iter().map(|_| Part { offset: 0, bits: 0, null_flag: nulls_are_values.then_some(0) }).collect();
        }
        KeyPacker { width, parts, nulls_are_values }
    }

    /// Packs rows `rows` of `columns` (one vector per key column).
    pub fn pack(&self, columns: &[Vector], rows: &[u32]) -> PackedKeys {
        let mut valid = vec![true; rows.len()];
        if !self.nulls_are_values {
            for column in columns {
                if let Some(validity) = &column.validity {
                    for (j, &r) in rows.iter().enumerate() {
                        valid[j] &= validity.get(r as usize);
                    }
                }
            }
        }
        match self.width {
            KeyWidth::Empty => PackedKeys::Empty { rows: rows.len() },
            KeyWidth::U64 => {
                // One integer column (most join keys): a plain widening gather.
                if let ([part], [column]) = (self.parts.as_slice(), columns) {
                    if part.offset == 0 && (part.null_flag.is_none() || column.validity.is_none()) {
                        // Every row in order (a scan's membership test of a whole vector):
                        // a widening copy the compiler vectorises, instead of a gather.
                        let all_rows = |len: usize| rows.len() == len && rows.iter().enumerate().all(|(i, &r)| r as usize == i);
                        match &column.data {
                            VectorData::I32(v) if all_rows(v.len()) => {
                                return PackedKeys::U64 { keys: v.iter().map(|&x| x as u32 as u64).collect(), valid }
                            }
                            VectorData::I32(v) => {
                                return PackedKeys::U64 { keys: rows.iter().map(|&r| v[r as usize] as u32 as u64).collect(), valid }
                            }
                            VectorData::I64(v) if all_rows(v.len()) => {
                                return PackedKeys::U64 { keys: v.iter().map(|&x| x as u64).collect(), valid }
                            }
                            VectorData::I64(v) => {
                                return PackedKeys::U64 { keys: rows.iter().map(|&r| v[r as usize] as u64).collect(), valid }
                            }
                            _ => {}
                        }
                    }
                }
                let mut keys = vec![0u64; rows.len()];
                for (part, column) in self.parts.iter().zip(columns) {
                    pack_part(part, column, rows, &mut keys);
                }
                PackedKeys::U64 { keys, valid }
            }
            KeyWidth::U128 => {
                let mut keys = vec![0u128; rows.len()];
                for (part, column) in self.parts.iter().zip(columns) {
                    pack_part(part, column, rows, &mut keys);
                }
                PackedKeys::U128 { keys, valid }
            }
            KeyWidth::U256 => {
                let mut keys = vec![Key256::default(); rows.len()];
                for (part, column) in self.parts.iter().zip(columns) {
                    pack_part(part, column, rows, &mut keys);
                }
                PackedKeys::U256 { keys, valid }
            }
            KeyWidth::Bytes => {
                if let Some((arena, offsets)) = pack_fixed_bytes(columns, rows, self.nulls_are_values) {
                    return PackedKeys::Bytes { arena, offsets, valid };
                }
                let (arena, offsets) = pack_bytes(columns, rows, self.nulls_are_values);
                PackedKeys::Bytes { arena, offsets, valid }
            }
        }
    }
}

/// A packed key word (`u64` or `u128`).
trait KeyWord: Copy {
    /// ORs `bits` in at bit `shift`.
    fn put(&mut self, bits: u128, shift: u32);
    /// Clears `width` bits at `shift`.
    fn clear(&mut self, width: u32, shift: u32);
}

impl KeyWord for u64 {
    #[inline(always)]
    fn put(&mut self, bits: u128, shift: u32) {
        *self |= (bits as u64) << shift;
    }

    #[inline(always)]
    fn clear(&mut self, width: u32, shift: u32) {
        let mask = if width >= 64 { u64::MAX } else { (1u64 << width) - 1 };
        *self &= !(mask << shift);
    }
}

impl KeyWord for u128 {
    #[inline(always)]
    fn put(&mut self, bits: u128, shift: u32) {
        *self |= bits << shift;
    }

    #[inline(always)]
    fn clear(&mut self, width: u32, shift: u32) {
        let mask = if width >= 128 { u128::MAX } else { (1u128 << width) - 1 };
        *self &= !(mask << shift);
    }
}

impl KeyWord for Key256 {
    /// `bits` (at most 128 wide, ending by bit 256) may straddle the two words.
    #[inline(always)]
    fn put(&mut self, bits: u128, shift: u32) {
        if shift >= 128 {
            self.high |= bits << (shift - 128);
        } else {
            self.low |= bits << shift;
            if shift > 0 {
                self.high |= bits >> (128 - shift);
            }
        }
    }

    #[inline(always)]
    fn clear(&mut self, width: u32, shift: u32) {
        let mask = if width >= 128 { u128::MAX } else { (1u128 << width) - 1 };
        if shift >= 128 {
            self.high &= !(mask << (shift - 128));
        } else {
            self.low &= !(mask << shift);
            if shift > 0 {
                self.high &= !(mask >> (128 - shift));
            }
        }
    }
}

/// ORs the bits of one key column into the packed words.
fn pack_part<K: KeyWord>(part: &Part, column: &Vector, rows: &[u32], keys: &mut [K]) {
    let shift = part.offset;
    let put = |k: &mut K, bits: u128, shift: u32| k.put(bits, shift);
    macro_rules! each {
        ($values:expr, $to_bits:expr) => {{
            let values = $values;
            for (k, &r) in keys.iter_mut().zip(rows) {
                put(k, $to_bits(values[r as usize]), shift);
            }
        }};
    }
    match &column.data {
        VectorData::Bool(v) => each!(v, |x: bool| x as u128),
        VectorData::I16(v) => each!(v, |x: i16| x as u16 as u128),
        VectorData::I32(v) => each!(v, |x: i32| x as u32 as u128),
        VectorData::I64(v) => each!(v, |x: i64| x as u64 as u128),
        VectorData::I128(v) => each!(v, |x: i128| x as u128),
        VectorData::F32(v) => each!(v, |x: f32| canonical_f32(x) as u128),
        VectorData::F64(v) => each!(v, |x: f64| canonical_f64(x) as u128),
        // Equal intervals ('1 day', '24 hours') must pack equally: use the normalised value.
        VectorData::Interval(v) => each!(v, |x: apiary_types::Interval| x.normalized() as u128),
        VectorData::Str(s) => {
            let views = s.views().as_slice();
            for (k, &r) in keys.iter_mut().zip(rows) {
                // Short strings (all of a packed column's) are inline in their view:
                // read them as one integer, no byte loop.
                if let Some(bits) = views[r as usize].inline_bits() {
                    put(k, bits, shift);
                    continue;
                }
                let bytes = s.get_bytes(r as usize);
                let mut bits: u128 = bytes.len() as u128;
                for (i, b) in bytes.iter().enumerate() {
                    bits |= (*b as u128) << (8 * (i + 1));
                }
                put(k, bits, shift);
            }
        }
    }
    if let (Some(flag), Some(validity)) = (part.null_flag, &column.validity) {
        // A NULL key is (zero value bits, flag set): the slot under a NULL may hold any
        // value (Parquet, outer joins, NULLIF), so it is cleared, or NULLs would not be
        // one group.
        for (k, &r) in keys.iter_mut().zip(rows) {
            if !validity.get(r as usize) {
                k.clear(part.bits, shift);
                k.put(1, flag);
            }
        }
    }
}

fn canonical_f32(x: f32) -> u32 {
    if x == 0.0 {
        0
    } else if x.is_nan() {
        f32::NAN.to_bits()
    } else {
        x.to_bits()
    }
}

fn canonical_f64(x: f64) -> u64 {
    if x == 0.0 {
        0
    } else if x.is_nan() {
        f64::NAN.to_bits()
    } else {
        x.to_bits()
    }
}

/// Appends a prefix-free encoding of row `r` of `column`.
/// Bytes a value of fixed width takes in a byte-string key (`None` for strings).
fn fixed_byte_width(data: &VectorData) -> Option<usize> {
    Some(match data {
        VectorData::Bool(_) => 1,
        VectorData::I16(_) => 2,
        VectorData::I32(_) | VectorData::F32(_) => 4,
        VectorData::I64(_) | VectorData::F64(_) => 8,
        VectorData::I128(_) | VectorData::Interval(_) => 16,
        VectorData::Str(_) => return None,
    })
}

/// Byte-string keys of columns that are all of fixed width (several nullable BIGINT keys,
/// too wide for 128 bits with their NULL flags): every key has the same length, and each
/// column is written for all rows at once, without a type switch per value. A NULL is a 0
/// flag byte and zero value bytes, a value a 1 byte and its bytes (with `nulls_are_values`;
/// otherwise no flag bytes). Returns the arena and the offsets.
fn pack_fixed_bytes(columns: &[Vector], rows: &[u32], nulls_are_values: bool) -> Option<(Vec<u8>, Vec<u32>)> {
    let widths: Vec<usize> = columns.iter().map(|c| fixed_byte_width(&c.data)).collect::<Option<_>>()?;
    let flag = usize::from(nulls_are_values);
    let stride: usize = widths.iter().map(|w| w + flag).sum();
    if rows.len().checked_mul(stride)? > u32::MAX as usize {
        return None;
    }
    let mut arena = vec![0u8; rows.len() * stride];
    let mut offset = 0;
    for (column, &width) in columns.iter().zip(&widths) {
        let at = offset + flag;
        fn put<const N: usize>(arena: &mut [u8], rows: &[u32], stride: usize, at: usize, bytes: impl Fn(usize) -> [u8; N]) {
            for (j, &r) in rows.iter().enumerate() {
                let start = j * stride + at;
                arena[start..start + N].copy_from_slice(&bytes(r as usize));
            }
        }
        match &column.data {
            VectorData::Bool(v) => put(&mut arena, rows, stride, at, |r| [v[r] as u8]),
            VectorData::I16(v) => put(&mut arena, rows, stride, at, |r| v[r].to_le_bytes()),
            VectorData::I32(v) => put(&mut arena, rows, stride, at, |r| v[r].to_le_bytes()),
            VectorData::I64(v) => put(&mut arena, rows, stride, at, |r| v[r].to_le_bytes()),
            VectorData::I128(v) => put(&mut arena, rows, stride, at, |r| v[r].to_le_bytes()),
            VectorData::F32(v) => put(&mut arena, rows, stride, at, |r| canonical_f32(v[r]).to_le_bytes()),
            VectorData::F64(v) => put(&mut arena, rows, stride, at, |r| canonical_f64(v[r]).to_le_bytes()),
            VectorData::Interval(v) => put(&mut arena, rows, stride, at, |r| v[r].normalized().to_le_bytes()),
            VectorData::Str(_) => return None,
        }
        if nulls_are_values {
            for (j, &r) in rows.iter().enumerate() {
                let start = j * stride + offset;
                if column.is_null(r as usize) {
                    // Whatever value sits under a NULL must not tell two NULLs apart.
                    arena[start..start + 1 + width].fill(0);
                } else {
                    arena[start] = 1;
                }
            }
        }
        offset += width + flag;
    }
    let offsets = (0..=rows.len()).map(|i| (i * stride) as u32).collect();
    Some((arena, offsets))
}

/// Byte-string keys of any columns, written column by column (a type switch per column,
/// not per value): first every key's length, then each column's bytes at every key's
/// cursor. Per column and key, with `nulls_are_values`: a NULL is one 0 byte, a value a 1
/// byte and then its bytes (without: just its bytes); a string's bytes are its length
/// (4 bytes) and its bytes. Returns the arena and the offsets.
fn pack_bytes(columns: &[Vector], rows: &[u32], nulls_are_values: bool) -> (Vec<u8>, Vec<u32>) {
    let flag = usize::from(nulls_are_values);
    let is_null = |column: &Vector, r: usize| nulls_are_values && column.is_null(r);
    let mut lengths = vec![0usize; rows.len()];
    for column in columns {
        let rows_and_lengths = lengths.iter_mut().zip(rows).map(|(length, &r)| (length, r as usize));
        match &column.data {
            VectorData::Str(s) => {
                let views = s.views().as_slice();
                rows_and_lengths.for_each(|(length, r)| *length += if is_null(column, r) { 1 } else { flag + 4 + views[r].len() })
            }
            data => {
                let width = fixed_byte_width(data).unwrap_or_default();
                rows_and_lengths.for_each(|(length, r)| *length += if is_null(column, r) { 1 } else { flag + width })
            }
        }
    }
    let mut offsets = Vec::with_capacity(rows.len() + 1);
    let mut total = 0usize;
    offsets.push(0u32);
    for length in &lengths {
        total += length;
        offsets.push(total as u32);
    }
    let mut arena = vec![0u8; total];
    // Each key's write position; reuses `lengths`' memory.
    let mut cursors = lengths;
    cursors.iter_mut().zip(&offsets).for_each(|(cursor, &offset)| *cursor = offset as usize);
    for column in columns {
        // Writes the NULL flag of key `j`: true when the value follows.
        let mut flagged = |arena: &mut [u8], cursor: &mut usize, r: usize| -> bool {
            if !nulls_are_values {
                return true;
            }
            let valid = !column.is_null(r);
            arena[*cursor] = valid as u8;
            *cursor += 1;
            valid
        };
        fn put<const N: usize>(
            arena: &mut [u8],
            cursors: &mut [usize],
            rows: &[u32],
            flagged: &mut impl FnMut(&mut [u8], &mut usize, usize) -> bool,
            bytes: impl Fn(usize) -> [u8; N],
        ) {
            for (cursor, &r) in cursors.iter_mut().zip(rows) {
                if flagged(arena, cursor, r as usize) {
                    arena[*cursor..*cursor + N].copy_from_slice(&bytes(r as usize));
                    *cursor += N;
                }
            }
        }
        let cursors = cursors.as_mut_slice();
        match &column.data {
            VectorData::Bool(v) => put(&mut arena, cursors, rows, &mut flagged, |r| [v[r] as u8]),
            VectorData::I16(v) => put(&mut arena, cursors, rows, &mut flagged, |r| v[r].to_le_bytes()),
            VectorData::I32(v) => put(&mut arena, cursors, rows, &mut flagged, |r| v[r].to_le_bytes()),
            VectorData::I64(v) => put(&mut arena, cursors, rows, &mut flagged, |r| v[r].to_le_bytes()),
            VectorData::I128(v) => put(&mut arena, cursors, rows, &mut flagged, |r| v[r].to_le_bytes()),
            VectorData::F32(v) => put(&mut arena, cursors, rows, &mut flagged, |r| canonical_f32(v[r]).to_le_bytes()),
            VectorData::F64(v) => put(&mut arena, cursors, rows, &mut flagged, |r| canonical_f64(v[r]).to_le_bytes()),
            VectorData::Interval(v) => put(&mut arena, cursors, rows, &mut flagged, |r| v[r].normalized().to_le_bytes()),
            VectorData::Str(s) => {
                for (cursor, &r) in cursors.iter_mut().zip(rows) {
                    let r = r as usize;
                    if flagged(&mut arena, cursor, r) {
                        let bytes = s.get_bytes(r);
                        arena[*cursor..*cursor + 4].copy_from_slice(&(bytes.len() as u32).to_le_bytes());
                        arena[*cursor + 4..*cursor + 4 + bytes.len()].copy_from_slice(bytes);
                        *cursor += 4 + bytes.len();
                    }
                }
            }
        }
    }
    (arena, offsets)
}

/// Packed keys of a batch, one per input row.
#[derive(Debug)]
pub enum PackedKeys {
    Empty { rows: usize },
    U64 { keys: Vec<u64>, valid: Vec<bool> },
    U128 { keys: Vec<u128>, valid: Vec<bool> },
    U256 { keys: Vec<Key256>, valid: Vec<bool> },
    Bytes { arena: Vec<u8>, offsets: Vec<u32>, valid: Vec<bool> },
}

impl PackedKeys {
    pub fn len(&self) -> usize {
        match self {
            PackedKeys::Empty { rows } => *rows,
            PackedKeys::U64 { keys, .. } => keys.len(),
            PackedKeys::U128 { keys, .. } => keys.len(),
            PackedKeys::U256 { keys, .. } => keys.len(),
            PackedKeys::Bytes { offsets, .. } => offsets.len() - 1,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether key `j` has no NULL (always true when NULLs are key values).
    #[inline]
    pub fn is_valid(&self, j: usize) -> bool {
        match self {
            PackedKeys::Empty { .. } => true,
            PackedKeys::U64 { valid, .. }
            | PackedKeys::U128 { valid, .. }
            | PackedKeys::U256 { valid, .. }
            | PackedKeys::Bytes { valid, .. } => valid[j],
        }
    }

    /// Per-key validity (empty for key-less packs, whose keys are all valid).
    pub fn validity(&self) -> &[bool] {
        match self {
            PackedKeys::Empty { .. } => &[],
            PackedKeys::U64 { valid, .. }
            | PackedKeys::U128 { valid, .. }
            | PackedKeys::U256 { valid, .. }
            | PackedKeys::Bytes { valid, .. } => valid,
        }
    }

    #[inline]
    pub fn bytes(&self, j: usize) -> &[u8] {
        match self {
            PackedKeys::Bytes { arena, offsets, .. } => &arena[offsets[j] as usize..offsets[j + 1] as usize],
            _ => &[],
        }
    }

    /// The keys of `pieces` one after the other (all packed by the same packer).
    pub fn concat(pieces: Vec<PackedKeys>) -> PackedKeys {
        let total: usize = pieces.iter().map(PackedKeys::len).sum();
        let mut pieces = pieces.into_iter();
        let Some(mut all) = pieces.next() else { return PackedKeys::Empty { rows: 0 } };
        all.reserve(total - all.len());
        for piece in pieces {
            all.extend(piece);
        }
        debug_assert_eq!(all.len(), total, "pieces packed by different packers");
        all
    }

    /// Room for `additional` more keys.
    fn reserve(&mut self, additional: usize) {
        match self {
            PackedKeys::Empty { .. } => {}
            PackedKeys::U64 { keys, valid } => {
                keys.reserve(additional);
                valid.reserve(additional);
            }
            PackedKeys::U128 { keys, valid } => {
                keys.reserve(additional);
                valid.reserve(additional);
            }
            PackedKeys::U256 { keys, valid } => {
                keys.reserve(additional);
                valid.reserve(additional);
            }
            PackedKeys::Bytes { offsets, valid, .. } => {
                offsets.reserve(additional);
                valid.reserve(additional);
            }
        }
    }

    /// Appends the keys of `other` (packed by the same packer; keys of another width are
    /// not appended).
    pub fn extend(&mut self, other: PackedKeys) {
        match (self, other) {
            (PackedKeys::Empty { rows }, PackedKeys::Empty { rows: more }) => *rows += more,
            (PackedKeys::U64 { keys, valid }, PackedKeys::U64 { keys: k, valid: v }) => {
                keys.extend_from_slice(&k);
                valid.extend_from_slice(&v);
            }
            (PackedKeys::U128 { keys, valid }, PackedKeys::U128 { keys: k, valid: v }) => {
                keys.extend_from_slice(&k);
                valid.extend_from_slice(&v);
            }
            (PackedKeys::U256 { keys, valid }, PackedKeys::U256 { keys: k, valid: v }) => {
                keys.extend_from_slice(&k);
                valid.extend_from_slice(&v);
            }
            (PackedKeys::Bytes { arena, offsets, valid }, PackedKeys::Bytes { arena: a, offsets: o, valid: v }) => {
                let base = arena.len() as u32;
                arena.extend_from_slice(&a);
                offsets.extend(o[1..].iter().map(|&x| x + base));
                valid.extend_from_slice(&v);
            }
            _ => debug_assert!(false, "keys packed by different packers"),
        }
    }

    /// The hash of key `j` (the same bits as [`Self::hashes`] gives for it).
    #[inline]
    pub fn hash_at(&self, j: usize) -> u64 {
        match self {
            PackedKeys::Empty { .. } => 0,
            PackedKeys::U64 { keys, .. } => hash_u64(keys[j]),
            PackedKeys::U128 { keys, .. } => hash_u128(keys[j]),
            PackedKeys::U256 { keys, .. } => keys[j].hash(),
            PackedKeys::Bytes { .. } => hash_bytes(self.bytes(j)),
        }
    }

    /// The hash of every key.
    pub fn hashes(&self) -> Vec<u64> {
        match self {
            PackedKeys::Empty { rows } => vec![0; *rows],
            PackedKeys::U64 { keys, .. } => hash_u64_batch(keys),
            PackedKeys::U128 { keys, .. } => keys.iter().map(|&k| hash_u128(k)).collect(),
            PackedKeys::U256 { keys, .. } => keys.iter().map(|&k| k.hash()).collect(),
            PackedKeys::Bytes { .. } => (0..self.len()).map(|j| hash_bytes(self.bytes(j))).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apiary_types::VectorBuilder;

    #[test]
    fn chooses_widths() {
        assert_eq!(KeyPacker::new(&[DataType::Integer], &[false], false).width, KeyWidth::U64);
        assert_eq!(KeyPacker::new(&[DataType::Integer, DataType::Integer], &[false, false], false).width, KeyWidth::U64);
        assert_eq!(KeyPacker::new(&[DataType::Integer, DataType::Integer], &[true, false], true).width, KeyWidth::U128);
        assert_eq!(KeyPacker::new(&[DataType::Char(1), DataType::Char(1)], &[false, false], true).width, KeyWidth::U128);
        assert_eq!(KeyPacker::new(&[DataType::Varchar(Some(25))], &[false], true).width, KeyWidth::Bytes);
    }

    #[test]
    fn one_integer_key_packs_the_same_for_all_rows_and_for_some() {
        for (data_type, column) in [
            (DataType::Integer, Vector::from_native(DataType::Integer, vec![5i32, -1, 7, i32::MAX])),
            (DataType::BigInt, Vector::from_native(DataType::BigInt, vec![5i64, -1, 7, i64::MIN])),
        ] {
            let packer = KeyPacker::new(&[data_type], &[false], false);
            let all = packer.pack(std::slice::from_ref(&column), &[0, 1, 2, 3]);
            for rows in [vec![0u32, 1, 2, 3], vec![3, 1], vec![1, 0, 2, 3], vec![]] {
                let some = packer.pack(std::slice::from_ref(&column), &rows);
                let (PackedKeys::U64 { keys: all, .. }, PackedKeys::U64 { keys: some, .. }) = (&all, &some) else { panic!("64-bit keys") };
                let expected: Vec<u64> = rows.iter().map(|&r| all[r as usize]).collect();
                assert_eq!(some, &expected, "{data_type:?} rows {rows:?}");
            }
        }
    }

    #[test]
    fn concat_keeps_every_key_in_order() {
        let packer = KeyPacker::new(&[DataType::Varchar(None)], &[true], false);
        let piece = |values: &[&str]| {
            let mut b = VectorBuilder::new(DataType::Varchar(None));
            values.iter().for_each(|v| b.push_scalar(&apiary_types::ScalarValue::Utf8(v.to_string())));
            let rows: Vec<u32> = (0..values.len() as u32).collect();
            packer.pack(&[b.finish()], &rows)
        };
        let all = PackedKeys::concat(vec![piece(&["a", "bb"]), piece(&[]), piece(&["ccc"])]);
        let expected = piece(&["a", "bb", "ccc"]);
        assert_eq!(all.len(), 3);
        for j in 0..3 {
            assert_eq!(all.bytes(j), expected.bytes(j));
        }
    }

    #[test]
    fn nulls_pack_equal_whatever_their_slots_hold() {
        // NULL slots with different hidden values (Parquet, outer joins, NULLIF).
        let validity = apiary_common::Bitmap::from_bools([false, true, false, true]);
        let values = Vector::new(DataType::Integer, VectorData::I32(vec![5, 7, 9, 7].into()), Some(validity));
        for types in [vec![DataType::Integer], vec![DataType::Integer, DataType::Integer]] {
            let columns: Vec<Vector> = types.iter().map(|_| values.clone()).collect();
            let packer = KeyPacker::new(&types, &vec![true; types.len()], true);
            let packed = packer.pack(&columns, &[0, 1, 2, 3]);
            assert_eq!(packed.hash_at(0), packed.hash_at(2), "{types:?}");
            assert_eq!(packed.hash_at(1), packed.hash_at(3), "{types:?}");
            assert_ne!(packed.hash_at(0), packed.hash_at(1), "{types:?}");
        }
    }

    #[test]
    fn group_keys_up_to_256_bits_pack_fixed_width() {
        // Two nullable BIGINTs: 130 bits. Values that differ only in the bits above 128
        // (the NULL flags) or across the word boundary must stay distinct.
        let validity = apiary_common::Bitmap::from_bools([true, false, true, false, true, true]);
        let a = Vector::new(DataType::BigInt, VectorData::I64(vec![1, 5, 1, 6, 0, -1].into()), Some(validity.clone()));
        let b = Vector::new(DataType::BigInt, VectorData::I64(vec![2, 3, 2, 3, 0, -1].into()), Some(validity));
        let packer = KeyPacker::new(&[DataType::BigInt, DataType::BigInt], &[true, true], true);
        assert_eq!(packer.width, KeyWidth::U256);
        let PackedKeys::U256 { keys, .. } = packer.pack(&[a, b], &[0, 1, 2, 3, 4, 5]) else { panic!("256-bit keys") };
        assert_eq!(keys[0], keys[2]);
        assert_eq!(keys[1], keys[3], "NULLs pack equal whatever their slots hold");
        assert_ne!(keys[1], keys[4], "NULL is not 0");
        assert_eq!(keys[5], Key256 { low: u128::MAX, high: 0 });
        assert_eq!(keys[1], Key256 { low: 0, high: 0b11 });
        // Three nullable BIGINTs grouped are 195 bits; 257 bits and more are byte strings.
        let three = [DataType::BigInt, DataType::BigInt, DataType::BigInt];
        assert_eq!(KeyPacker::new(&three, &[true; 3], true).width, KeyWidth::U256);
        let four = [DataType::BigInt, DataType::BigInt, DataType::BigInt, DataType::BigInt];
        assert_eq!(KeyPacker::new(&four, &[false; 4], true).width, KeyWidth::U256);
        assert_eq!(KeyPacker::new(&four, &[true, false, false, false], true).width, KeyWidth::Bytes);
    }

    #[test]
    fn a_part_straddling_the_words_is_cleared_under_nulls() {
        // BIGINT then DECIMAL(38): the 128-bit value sits at bits 64..192.
        let wide = DataType::decimal(38, 2);
        let validity = apiary_common::Bitmap::from_bools([true, false, false]);
        let a = Vector::from_native(DataType::BigInt, vec![7i64, 7, 7]);
        let b = Vector::new(wide, VectorData::I128(vec![-3, 99, -42].into()), Some(validity));
        // And its NULL flag at bit 192.
        let packer = KeyPacker::new(&[DataType::BigInt, wide], &[false, true], true);
        assert_eq!(packer.width, KeyWidth::U256);
        let PackedKeys::U256 { keys, .. } = packer.pack(&[a, b], &[0, 1, 2]) else { panic!("256-bit keys") };
        assert_eq!(keys[0], Key256 { low: 7 | ((-3i128 as u128) << 64), high: u64::MAX as u128 });
        assert_eq!(keys[1], Key256 { low: 7, high: 1 << 64 }, "the NULL's hidden value is cleared in both words");
        assert_eq!(keys[1], keys[2]);
        let packer = KeyPacker::new(&[DataType::BigInt, wide, wide], &[false, false, false], true);
        assert_eq!(packer.width, KeyWidth::Bytes, "64 + 2 * 128 bits");
    }

    #[test]
    fn four_bigints_with_a_nullable_one_pack_into_equal_length_byte_keys() {
        // 4 * 64 bits and a NULL flag: byte strings of 4 * (1 + 8) bytes.
        let validity = apiary_common::Bitmap::from_bools([true, false, true, false, true]);
        let a = Vector::new(DataType::BigInt, VectorData::I64(vec![1, 5, 1, 6, 0].into()), Some(validity));
        let b = Vector::from_native(DataType::BigInt, vec![2i64, 3, 2, 3, 0]);
        let c = Vector::from_native(DataType::BigInt, vec![9i64; 5]);
        let types = [DataType::BigInt, DataType::BigInt, DataType::BigInt, DataType::BigInt];
        let packer = KeyPacker::new(&types, &[true, false, false, false], true);
        assert_eq!(packer.width, KeyWidth::Bytes);
        let packed = packer.pack(&[a, b, c.clone(), c], &[0, 1, 2, 3, 4]);
        for j in 0..5 {
            assert_eq!(packed.bytes(j).len(), 36);
        }
        // Equal values and NULLs with different hidden values pack equal; NULL is not 0.
        assert_eq!(packed.bytes(0), packed.bytes(2));
        assert_eq!(packed.bytes(1), packed.bytes(3));
        assert_ne!(packed.bytes(0), packed.bytes(1));
        assert_ne!(packed.bytes(4)[..9], packed.bytes(1)[..9]);
        assert_eq!(packed.bytes(0)[..9], [1, 1, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn byte_keys_of_strings_and_numbers_are_written_column_by_column() {
        let mut strings = VectorBuilder::new(DataType::Varchar(None));
        for v in [Some("ab"), None, Some(""), Some("ab"), Some("a-string-longer-than-twelve-bytes")] {
            match v {
                Some(v) => strings.push_scalar(&apiary_types::ScalarValue::Utf8(v.to_string())),
                None => strings.push_null(),
            }
        }
        let strings = strings.finish();
        let validity = apiary_common::Bitmap::from_bools([true, true, false, true, true]);
        let numbers = Vector::new(DataType::Integer, VectorData::I32(vec![7, 8, 9, 7, -1].into()), Some(validity));
        let packer = KeyPacker::new(&[DataType::Varchar(None), DataType::Integer], &[true, true], true);
        let packed = packer.pack(&[strings.clone(), numbers.clone()], &[0, 1, 2, 3, 4]);
        assert_eq!(packed.bytes(0), [1, 2, 0, 0, 0, b'a', b'b', 1, 7, 0, 0, 0]);
        assert_eq!(packed.bytes(1), [0, 1, 8, 0, 0, 0], "a NULL string is one 0 byte");
        assert_eq!(packed.bytes(2), [1, 0, 0, 0, 0, 0], "the empty string is not NULL; a NULL number is one 0 byte");
        assert_eq!(packed.bytes(0), packed.bytes(3));
        assert_eq!(packed.bytes(4).len(), 1 + 4 + 33 + 1 + 4);
        // A subset of the rows, in another order, packs the same keys.
        let subset = packer.pack(&[strings, numbers], &[4, 0]);
        assert_eq!(subset.bytes(0), packed.bytes(4));
        assert_eq!(subset.bytes(1), packed.bytes(0));
        // Without NULLs as values there are no flag bytes, and NULL keys are not valid.
        let join = KeyPacker::new(&[DataType::Varchar(None)], &[true], false);
        let mut b = VectorBuilder::new(DataType::Varchar(None));
        b.push_scalar(&apiary_types::ScalarValue::Utf8("xyz".into()));
        b.push_null();
        let keys = join.pack(&[b.finish()], &[0, 1]);
        assert_eq!(keys.bytes(0), [3, 0, 0, 0, b'x', b'y', b'z']);
        assert!(keys.is_valid(0) && !keys.is_valid(1));
    }

    #[test]
    fn nulls_as_values_are_distinct_from_zero() {
        let mut b = VectorBuilder::new(DataType::Integer);
        b.push_scalar(&apiary_types::ScalarValue::Int32(0));
        b.push_null();
        let v = b.finish();
        let packer = KeyPacker::new(&[DataType::Integer], &[true], true);
        let PackedKeys::U64 { keys, .. } = packer.pack(std::slice::from_ref(&v), &[0, 1]) else { panic!() };
        assert_ne!(keys[0], keys[1]);
        let join_packer = KeyPacker::new(&[DataType::Integer], &[true], false);
        let packed = join_packer.pack(&[v], &[0, 1]);
        assert!(packed.is_valid(0) && !packed.is_valid(1));
    }
}
