//! Per-stripe compression (Quickstep §3.3): each column of each block gets the cheapest
//! order-preserving encoding for its values.
//!
//! * **Frame of reference** for integers, decimals, dates and timestamps: values are
//!   stored as `(value - min) / step` in 0 to 8 bytes, where `step` is the
//!   greatest common divisor of the differences (prices in whole units, quantities stored
//!   as scaled decimals). Width 0 is a constant stripe.
//! * **Dictionary** for low-cardinality strings: the sorted distinct values and 1-, 2- or
//!   4-byte codes. Codes preserve order, so a range predicate on values is a range
//!   predicate on codes.
//! * **Compressed strings** for the rest: lengths (frame of reference) and the
//!   concatenated bytes compressed with zstd, or stored raw when that does not pay.
//! * **Plain** otherwise (floats, intervals, booleans, wide integer ranges).
//!
//! Stripe bytes: `[tag u8][validity][body]`; validity is `0` (no NULLs) or `1` followed by
//! the bitmap words. Values under NULLs are encoded as the stripe's minimum.

use std::collections::HashMap;
use std::fmt;

use apiary_common::{Bitmap, Result};
use apiary_types::datetime::Interval;
use apiary_types::string::{StrView, INLINE_LEN};
use apiary_types::{Buffer, DataType, DictionaryCodes, PhysicalType, StrColumn, Vector, VectorData};

use crate::codec::{Reader, Writer};

/// zstd level for string data: fast to write, about 3x on TPC-H comments.
const ZSTD_LEVEL: i32 = 1;

/// Compressed strings are kept raw unless compression saves at least 1/this of the bytes.
const MIN_SAVING_DIVISOR: usize = 8;

/// The most rows a stored stripe (a block) may hold: `SET block_size`'s upper bound. A
/// larger count read from a file is damage, refused before anything is allocated for it.
pub const MAX_STRIPE_ROWS: usize = 1 << 24;

/// The codes of a dictionary-encoded stripe, kept beside its decoded values so a scan
/// can evaluate a predicate once per distinct value and then select rows by code.
#[derive(Debug)]
pub struct Dictionary {
    /// The distinct values, sorted.
    pub values: Vector,
    pub codes: Codes,
    /// Tells this dictionary's codes from another's in decoded vectors
    /// ([`DictionaryCodes::dictionary`]).
    id: u64,
}

#[derive(Debug)]
pub enum Codes {
    U8(Vec<u8>),
    U16(Vec<u16>),
    U32(Vec<u32>),
}

impl Dictionary {
    pub fn new(values: Vector, codes: Codes) -> Dictionary {
        Dictionary { values, codes, id: DictionaryCodes::new_dictionary_id() }
    }

    /// Those of `rows` (positions from `offset`) whose value's code is marked in `keep`.
    pub fn select(&self, keep: &[bool], offset: usize, rows: &[u32]) -> Vec<u32> {
        fn run<C: Copy + Into<u32>>(codes: &[C], keep: &[bool], rows: &[u32]) -> Vec<u32> {
            let mut out = vec![0; rows.len()];
            let mut count = 0;
            for &row in rows {
                out[count] = row;
                count += keep[codes[row as usize].into() as usize] as usize;
            }
            out.truncate(count);
            out
        }
        match &self.codes {
            Codes::U8(c) => run(&c[offset..], keep, rows),
            Codes::U16(c) => run(&c[offset..], keep, rows),
            Codes::U32(c) => run(&c[offset..], keep, rows),
        }
    }

    /// `index[j] = index[j] * (distinct values) + code of row offset + rows[j]`: applied
    /// for several dictionaries in turn, the index of each row's combination of codes.
    pub fn accumulate_codes(&self, offset: usize, rows: &[u32], index: &mut [u32]) {
        fn run<C: Copy + Into<u32>>(codes: &[C], rows: &[u32], radix: u32, index: &mut [u32]) {
            for (i, &row) in index.iter_mut().zip(rows) {
                *i = *i * radix + codes[row as usize].into();
            }
        }
        let radix = self.values.len() as u32;
        match &self.codes {
            Codes::U8(c) => run(&c[offset..], rows, radix, index),
            Codes::U16(c) => run(&c[offset..], rows, radix, index),
            Codes::U32(c) => run(&c[offset..], rows, radix, index),
        }
    }

    /// Rows `offset..offset + len`, decoded (views into the dictionary's values).
    pub fn decode_range(&self, offset: usize, len: usize) -> Vector {
        match &self.codes {
            Codes::U8(c) => self.decode_codes(c[offset..offset + len].to_vec()),
            Codes::U16(c) => self.decode_indices(c[offset..offset + len].iter().copied()),
            Codes::U32(c) => self.decode_indices(c[offset..offset + len].iter().copied()),
        }
    }

    /// The rows at positions `rows`, decoded.
    pub fn gather(&self, rows: &[u32]) -> Vector {
        match &self.codes {
            Codes::U8(c) => self.decode_codes(rows.iter().map(|&r| c[r as usize]).collect()),
            Codes::U16(c) => self.decode_indices(rows.iter().map(|&r| c[r as usize])),
            Codes::U32(c) => self.decode_indices(rows.iter().map(|&r| c[r as usize])),
        }
    }

    /// The values of `codes`, with the codes attached to the vector
    /// ([`StrColumn::codes`]).
    fn decode_codes(&self, codes: Vec<u8>) -> Vector {
        let (VectorData::Str(strings), None) = (&self.values.data, &self.values.validity) else {
            return self.decode_indices(codes.into_iter());
        };
        // The views are decoded when first asked for (often never: see StrColumn).
        let codes = DictionaryCodes { codes: Buffer::from_vec(codes), dictionary: self.id, values: strings.views().clone() };
        let column = StrColumn::from_codes(codes, std::sync::Arc::clone(&strings.heaps));
        Vector::new(self.values.data_type, VectorData::Str(column), None)
    }

    fn decode_indices<C: Into<u32>>(&self, codes: impl Iterator<Item = C>) -> Vector {
        let indices: Vec<u32> = codes.map(Into::into).collect();
        self.values.gather(&indices)
    }

    pub fn allocated_bytes(&self) -> usize {
        self.values.allocated_bytes() + self.codes.allocated_bytes()
    }
}

/// How one stripe is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Plain,
    /// `width` bytes per value (0 = every value equal).
    FrameOfReference {
        width: u8,
    },
    /// `width` bytes per code; `values` distinct values.
    Dictionary {
        width: u8,
        values: u32,
    },
    /// String lengths plus zstd-compressed bytes (`compressed` false: raw bytes).
    Strings {
        compressed: bool,
    },
}

impl Encoding {
    fn tag(&self) -> u8 {
        match self {
            Encoding::Plain => 0,
            Encoding::FrameOfReference { .. } => 1,
            Encoding::Dictionary { .. } => 2,
            Encoding::Strings { .. } => 3,
        }
    }
}

impl Encoding {
    /// The encoding without per-stripe details (dictionary sizes), for summaries.
    pub fn kind(&self) -> String {
        match self {
            Encoding::Dictionary { width, .. } => format!("dictionary({width} byte{})", if *width == 1 { "" } else { "s" }),
            other => other.to_string(),
        }
    }
}

impl fmt::Display for Encoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Encoding::Plain => write!(f, "plain"),
            Encoding::FrameOfReference { width: 0 } => write!(f, "constant"),
            Encoding::FrameOfReference { width } => write!(f, "frame_of_reference({width} byte{})", if *width == 1 { "" } else { "s" }),
            Encoding::Dictionary { width, values } => {
                write!(f, "dictionary({width} byte{}, {values} values)", if *width == 1 { "" } else { "s" })
            }
            Encoding::Strings { compressed: true } => write!(f, "zstd"),
            Encoding::Strings { compressed: false } => write!(f, "plain"),
        }
    }
}

/// Encodes all rows of `vector`; returns the chosen encoding and the stripe bytes.
pub fn encode(vector: &Vector) -> (Encoding, Vec<u8>) {
    let (encoding, bytes, _) = encode_with_dictionary(vector);
    (encoding, bytes)
}

/// [`encode`], also returning the codes when the stripe is dictionary-encoded and has no
/// NULLs (codes under NULLs mean nothing: predicates must see the NULLs).
pub fn encode_with_dictionary(vector: &Vector) -> (Encoding, Vec<u8>, Option<Dictionary>) {
    let mut dictionary = None;
    let mut writer = Writer::new();
    writer.u8(0); // tag, patched below
    match &vector.validity {
        Some(validity) if !validity.all_set() => {
            writer.u8(1);
            for word in validity.words() {
                writer.u64(*word);
            }
        }
        _ => writer.u8(0),
    }
    let valid = |i: usize| vector.is_valid(i);
    let encoding = match &vector.data {
        VectorData::I16(values) => encode_integers(&mut writer, values, valid),
        VectorData::I32(values) => encode_integers(&mut writer, values, valid),
        VectorData::I64(values) => encode_integers(&mut writer, values, valid),
        VectorData::I128(values) => encode_integers(&mut writer, values, valid),
        VectorData::Str(strings) => encode_strings(&mut writer, strings, valid, vector.data_type, &mut dictionary),
        VectorData::Bool(values) => {
            writer.bytes.extend(values.iter().map(|&b| b as u8));
            Encoding::Plain
        }
        VectorData::F32(values) => {
            values.iter().for_each(|v| writer.u32(v.to_bits()));
            Encoding::Plain
        }
        VectorData::F64(values) => {
            values.iter().for_each(|v| writer.u64(v.to_bits()));
            Encoding::Plain
        }
        VectorData::Interval(values) => {
            for v in values.iter() {
                writer.u32(v.months as u32);
                writer.u32(v.days as u32);
                writer.u64(v.micros as u64);
            }
            Encoding::Plain
        }
    };
    writer.bytes[0] = encoding.tag();
    (encoding, writer.bytes, dictionary.filter(|_| vector.validity.is_none()))
}

/// Decodes a stripe of `rows` values of `data_type`; `what` names it in errors.
pub fn decode(bytes: &[u8], data_type: DataType, rows: usize, what: &str) -> Result<Vector> {
    Ok(decode_with_dictionary(bytes, data_type, rows, what)?.0)
}

/// [`decode`], also returning the codes of a dictionary-encoded stripe without NULLs.
pub fn decode_with_dictionary(bytes: &[u8], data_type: DataType, rows: usize, what: &str) -> Result<(Vector, Option<Dictionary>)> {
    let mut dictionary = None;
    let mut reader = Reader::new(bytes, what);
    if rows > MAX_STRIPE_ROWS {
        return Err(reader.corrupt(&format!("{rows} rows in one stripe")));
    }
    let tag = reader.u8()?;
    let validity = match reader.u8()? {
        0 => None,
        1 => {
            // Check the words are there before allocating for `rows`.
            if rows.div_ceil(64) > reader.len_left() / 8 {
                return Err(reader.corrupt("validity bitmap beyond the end"));
            }
            let mut bitmap = Bitmap::new(rows, true);
            for word in bitmap.words_mut() {
                *word = reader.u64()?;
            }
            Some(bitmap)
        }
        _ => return Err(reader.corrupt("invalid validity flag")),
    };
    let data = match (data_type.physical(), tag) {
        (PhysicalType::I16, 0 | 1) => VectorData::I16(decode_integers(&mut reader, tag, rows)?),
        (PhysicalType::I32, 0 | 1) => VectorData::I32(decode_integers(&mut reader, tag, rows)?),
        (PhysicalType::I64, 0 | 1) => VectorData::I64(decode_integers(&mut reader, tag, rows)?),
        (PhysicalType::I128, 0 | 1) => VectorData::I128(decode_integers(&mut reader, tag, rows)?),
        (PhysicalType::Str, 2) => VectorData::Str(decode_dictionary(&mut reader, rows, data_type, &mut dictionary)?),
        (PhysicalType::Str, 3) => VectorData::Str(decode_strings(&mut reader, rows)?),
        (PhysicalType::Bool, 0) => VectorData::Bool(reader.take(rows)?.iter().map(|&b| b != 0).collect::<Vec<_>>().into()),
        (PhysicalType::F32, 0) => VectorData::F32(
            reader
                .take(value_bytes(&reader, rows, 4)?)?
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect::<Vec<_>>()
                .into(),
        ),
        (PhysicalType::F64, 0) => VectorData::F64(
            reader
                .take(value_bytes(&reader, rows, 8)?)?
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
                .collect::<Vec<_>>()
                .into(),
        ),
        (PhysicalType::Interval, 0) => {
            let raw = reader.take(value_bytes(&reader, rows, 16)?)?;
            let values: Vec<Interval> = raw
                .chunks_exact(16)
                .map(|c| Interval {
                    months: i32::from_le_bytes(c[0..4].try_into().unwrap()),
                    days: i32::from_le_bytes(c[4..8].try_into().unwrap()),
                    micros: i64::from_le_bytes(c[8..16].try_into().unwrap()),
                })
                .collect();
            VectorData::Interval(values.into())
        }
        (physical, tag) => return Err(reader.corrupt(&format!("encoding {tag} is not valid for {physical:?} values"))),
    };
    if !reader.is_at_end() {
        return Err(reader.corrupt("trailing bytes"));
    }
    let validity = validity.filter(|v| !v.all_set());
    let dictionary = dictionary.filter(|_| validity.is_none());
    Ok((Vector::new(data_type, data, validity), dictionary))
}

/// Bytes of `rows` values of `width` bytes each, or a corruption error when that does not
/// fit in memory (a damaged row count).
fn value_bytes(reader: &Reader<'_>, rows: usize, width: usize) -> Result<usize> {
    rows.checked_mul(width).ok_or_else(|| reader.corrupt("row count out of range"))
}

/// Integers stored natively in vectors and encodable with a frame of reference.
trait Integer: Copy + Default + PartialOrd + 'static {
    const BYTES: usize;
    fn to_i128(self) -> i128;
    /// `min + code * step`, computed with wrapping arithmetic in the narrowest type that
    /// holds `Self` (the result fits: it was a value of the stripe when encoded).
    fn from_code(min: i128, code: u64, step: i128) -> Self;
    fn write(self, out: &mut Vec<u8>);
    fn read(bytes: &[u8]) -> Self;
}

macro_rules! integer {
    ($t:ty, $wide:ty) => {
        impl Integer for $t {
            const BYTES: usize = std::mem::size_of::<$t>();
            #[inline]
            fn to_i128(self) -> i128 {
                self as i128
            }
            #[inline]
            fn from_code(min: i128, code: u64, step: i128) -> Self {
                (min as $wide).wrapping_add((code as $wide).wrapping_mul(step as $wide)) as $t
            }
            #[inline]
            fn write(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            #[inline]
            fn read(bytes: &[u8]) -> Self {
                <$t>::from_le_bytes(bytes.try_into().unwrap())
            }
        }
    };
}
integer!(i16, i64);
integer!(i32, i64);
integer!(i64, i64);
integer!(i128, i128);

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Bytes per frame-of-reference code for codes up to `max_code` (0 to 16).
fn code_width(max_code: u128) -> u8 {
    (128 - max_code.leading_zeros()).div_ceil(8) as u8
}

/// Bytes per dictionary code for `values` distinct values: 1, 2 or 4.
fn dictionary_width(values: usize) -> u8 {
    match values {
        0..=0x100 => 1,
        0x101..=0x1_0000 => 2,
        _ => 4,
    }
}

fn write_code(out: &mut Vec<u8>, code: u64, width: u8) {
    out.extend_from_slice(&code.to_le_bytes()[..width as usize]);
}

/// The codes of a dictionary body (1, 2 or 4 bytes each), widened to `u64`.
fn read_codes(reader: &mut Reader<'_>, width: u8, rows: usize) -> Result<Vec<u64>> {
    let width = width as usize;
    if width == 0 {
        return Ok(vec![0; rows]);
    }
    let raw = reader.take(value_bytes(reader, rows, width)?)?;
    Ok(match width {
        1 => raw.iter().map(|&b| b as u64).collect(),
        2 => raw.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]]) as u64).collect(),
        4 => raw.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap()) as u64).collect(),
        8 => raw.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect(),
        _ => return Err(reader.corrupt(&format!("invalid code width {width}"))),
    })
}

fn encode_integers<T: Integer>(writer: &mut Writer, values: &[T], valid: impl Fn(usize) -> bool) -> Encoding {
    let mut min: Option<T> = None;
    let mut max: Option<T> = None;
    for (i, &v) in values.iter().enumerate() {
        if valid(i) {
            if min.is_none_or(|m| v < m) {
                min = Some(v);
            }
            if max.is_none_or(|m| v > m) {
                max = Some(v);
            }
        }
    }
    let (min, max) = (min.unwrap_or_default().to_i128(), max.unwrap_or_default().to_i128());
    let range = max.checked_sub(min).map(|r| r as u128);
    let step = match range {
        Some(range) if range > 0 => {
            let mut step = 0u128;
            for (i, &v) in values.iter().enumerate() {
                if valid(i) {
                    step = gcd(step, (v.to_i128() - min) as u128);
                    if step == 1 {
                        break;
                    }
                }
            }
            step
        }
        _ => 1,
    };
    let width = range.map_or(16, |r| code_width(r / step));
    // Codes are at most 8 bytes: a wider range (DECIMAL(38) values spanning more than
    // 2^64 steps) is stored plain.
    if width as usize >= T::BYTES || width > 8 {
        values.iter().for_each(|v| v.write(&mut writer.bytes));
        return Encoding::Plain;
    }
    writer.i128(min);
    writer.i128(step as i128);
    for (i, &v) in values.iter().enumerate() {
        let code = if valid(i) { ((v.to_i128() - min) as u128 / step) as u64 } else { 0 };
        write_code(&mut writer.bytes, code, width);
    }
    Encoding::FrameOfReference { width }
}

fn decode_integers<T: Integer>(reader: &mut Reader<'_>, tag: u8, rows: usize) -> Result<Buffer<T>> {
    if tag == 0 {
        let raw = reader.take(value_bytes(reader, rows, T::BYTES)?)?;
        return Ok(raw.chunks_exact(T::BYTES).map(T::read).collect::<Vec<T>>().into());
    }
    let min = reader.i128()?;
    let step = reader.i128()?;
    let remaining = reader.len_left();
    let width = remaining.checked_div(rows).unwrap_or(0);
    if width * rows != remaining || width > 8 {
        return Err(reader.corrupt("frame-of-reference codes do not match the row count"));
    }
    let raw = reader.take(remaining)?;
    let values: Vec<T> = match width {
        0 => vec![T::from_code(min, 0, step); rows],
        1 => raw.iter().map(|&c| T::from_code(min, c as u64, step)).collect(),
        2 => raw.chunks_exact(2).map(|c| T::from_code(min, u16::from_le_bytes([c[0], c[1]]) as u64, step)).collect(),
        4 => raw.chunks_exact(4).map(|c| T::from_code(min, u32::from_le_bytes(c.try_into().unwrap()) as u64, step)).collect(),
        8 => raw.chunks_exact(8).map(|c| T::from_code(min, u64::from_le_bytes(c.try_into().unwrap()), step)).collect(),
        _ => raw
            .chunks_exact(width)
            .map(|c| {
                let mut code = [0u8; 8];
                code[..width].copy_from_slice(c);
                T::from_code(min, u64::from_le_bytes(code), step)
            })
            .collect(),
    };
    Ok(values.into())
}

/// The sorted distinct values of the valid rows and each row's code (0 under NULLs), or
/// `None` when there are more than `limit` distinct values.
fn sorted_codes(strings: &StrColumn, valid: impl Fn(usize) -> bool, limit: usize) -> Option<(Vec<&[u8]>, Vec<u32>)> {
    let rows = strings.len();
    // One hash per row: each row gets the number of its value in order of first
    // appearance, renumbered in sorted order at the end.
    let mut distinct: HashMap<&[u8], u32, BuildBytesHasher> = HashMap::default();
    let mut first_seen: Vec<&[u8]> = Vec::new();
    let mut numbers = vec![0u32; rows];
    for (i, number) in numbers.iter_mut().enumerate() {
        if valid(i) {
            let value = strings.get_bytes(i);
            let next = first_seen.len() as u32;
            let assigned = *distinct.entry(value).or_insert(next);
            if assigned == next {
                if first_seen.len() == limit {
                    return None;
                }
                first_seen.push(value);
            }
            *number = assigned;
        }
    }
    if first_seen.is_empty() {
        first_seen.push(b"");
    }
    let mut order: Vec<u32> = (0..first_seen.len() as u32).collect();
    order.sort_unstable_by(|&a, &b| first_seen[a as usize].cmp(first_seen[b as usize]));
    let mut code_of = vec![0u32; first_seen.len()];
    for (code, &number) in order.iter().enumerate() {
        code_of[number as usize] = code as u32;
    }
    let sorted = order.iter().map(|&n| first_seen[n as usize]).collect();
    // A NULL row's code is 0 (its number stayed 0; the code of number 0 is not).
    let codes = numbers.iter().enumerate().map(|(i, &n)| if valid(i) { code_of[n as usize] } else { 0 }).collect();
    Some((sorted, codes))
}

/// Hashes byte strings with [`apiary_common::hash::hash_bytes`] (the std hasher,
/// SipHash, took a third of sealing a block of strings).
#[derive(Default, Clone, Copy)]
struct BuildBytesHasher;

#[derive(Default)]
struct BytesHasher(u64);

impl std::hash::BuildHasher for BuildBytesHasher {
    type Hasher = BytesHasher;
    fn build_hasher(&self) -> BytesHasher {
        BytesHasher(0)
    }
}

impl std::hash::Hasher for BytesHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0 = apiary_common::hash::combine_hashes(self.0, apiary_common::hash::hash_bytes(bytes));
    }

    fn write_usize(&mut self, n: usize) {
        self.0 = apiary_common::hash::combine_hashes(self.0, apiary_common::hash::hash_u64(n as u64));
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Most distinct values a block's dictionary may have: a quarter of its rows.
fn dictionary_limit(rows: usize) -> usize {
    (rows / 4).max(1)
}

impl Dictionary {
    /// The dictionary of a string vector without NULLs whose distinct values are few
    /// enough (built on demand for stripes that were never encoded).
    pub fn of(vector: &Vector) -> Option<Dictionary> {
        let VectorData::Str(strings) = &vector.data else { return None };
        if vector.validity.is_some() {
            return None;
        }
        let (sorted, codes) = sorted_codes(strings, |_| true, dictionary_limit(strings.len()))?;
        Some(dictionary_from(vector.data_type, &sorted, codes))
    }
}

fn dictionary_from(data_type: DataType, sorted: &[&[u8]], codes: Vec<u32>) -> Dictionary {
    let width = dictionary_width(sorted.len());
    let values =
        Vector::new(data_type, VectorData::Str(StrColumn::from_strs(sorted.iter().map(|v| std::str::from_utf8(v).unwrap_or("")))), None);
    Dictionary::new(values, narrow_codes(codes, width))
}

fn encode_strings(
    writer: &mut Writer,
    strings: &StrColumn,
    valid: impl Fn(usize) -> bool,
    data_type: DataType,
    dictionary_out: &mut Option<Dictionary>,
) -> Encoding {
    let rows = strings.len();
    let views = strings.views().as_slice();
    let total_bytes: usize = (0..rows).filter(|&i| valid(i)).map(|i| views[i].len()).sum();
    // Dictionary when the distinct values are few (at most a quarter of the rows) and codes
    // plus dictionary take no more room than the strings with a byte of length each.
    if let Some((sorted, codes)) = sorted_codes(strings, &valid, dictionary_limit(rows)) {
        let width = dictionary_width(sorted.len());
        let dictionary_bytes: usize = sorted.iter().map(|v| v.len() + 4).sum();
        if dictionary_bytes + rows * width as usize <= total_bytes + rows {
            writer.u32(sorted.len() as u32);
            for value in &sorted {
                writer.u32(value.len() as u32);
                writer.bytes.extend_from_slice(value);
            }
            writer.u8(width);
            for &code in &codes {
                write_code(&mut writer.bytes, code as u64, width);
            }
            *dictionary_out = Some(dictionary_from(data_type, &sorted, codes));
            return Encoding::Dictionary { width, values: sorted.len() as u32 };
        }
    }
    // Lengths, then the bytes (NULLs are empty).
    let lengths: Vec<i32> = (0..rows).map(|i| if valid(i) { views[i].len() as i32 } else { 0 }).collect();
    let mut lengths_writer = Writer::new();
    let lengths_encoding = encode_integers(&mut lengths_writer, &lengths, |_| true);
    writer.u8(lengths_encoding.tag());
    writer.blob(&lengths_writer.bytes);
    let mut raw = Vec::with_capacity(total_bytes);
    for i in 0..rows {
        if valid(i) {
            raw.extend_from_slice(strings.get_bytes(i));
        }
    }
    let compressed = zstd::bulk::compress(&raw, ZSTD_LEVEL).ok().filter(|c| c.len() + raw.len() / MIN_SAVING_DIVISOR < raw.len());
    match compressed {
        Some(compressed) => {
            writer.u8(1);
            writer.u64(raw.len() as u64);
            writer.bytes.extend_from_slice(&compressed);
            Encoding::Strings { compressed: true }
        }
        None => {
            writer.u8(0);
            writer.u64(raw.len() as u64);
            writer.bytes.extend_from_slice(&raw);
            Encoding::Strings { compressed: false }
        }
    }
}

/// Views over `heap` (heap index 0) for strings of the given lengths laid end to end.
fn views_over(heap: &[u8], lengths: impl Iterator<Item = usize>, reader: &Reader<'_>) -> Result<Vec<StrView>> {
    let mut views = Vec::with_capacity(lengths.size_hint().0);
    let mut offset = 0usize;
    for len in lengths {
        let end =
            offset.checked_add(len).filter(|&end| end <= heap.len()).ok_or_else(|| reader.corrupt("string lengths exceed the data"))?;
        let bytes = &heap[offset..end];
        if std::str::from_utf8(bytes).is_err() {
            return Err(reader.corrupt("invalid UTF-8 in string data"));
        }
        views.push(if len <= INLINE_LEN { StrView::inline(bytes) } else { StrView::long(bytes, 0, offset as u32) });
        offset = end;
    }
    if offset != heap.len() {
        return Err(reader.corrupt("string data longer than its lengths"));
    }
    Ok(views)
}

fn narrow_codes(codes: Vec<u32>, width: u8) -> Codes {
    match width {
        1 => Codes::U8(codes.into_iter().map(|c| c as u8).collect()),
        2 => Codes::U16(codes.into_iter().map(|c| c as u16).collect()),
        _ => Codes::U32(codes),
    }
}

fn decode_dictionary(
    reader: &mut Reader<'_>,
    rows: usize,
    data_type: DataType,
    dictionary_out: &mut Option<Dictionary>,
) -> Result<StrColumn> {
    let count = reader.u32()? as usize;
    if count > reader.len_left() / 4 {
        return Err(reader.corrupt("dictionary size beyond the end"));
    }
    let mut heap = Vec::new();
    let mut lengths = Vec::with_capacity(count);
    for _ in 0..count {
        let len = reader.u32()? as usize;
        heap.extend_from_slice(reader.take(len)?);
        lengths.push(len);
    }
    let dictionary = views_over(&heap, lengths.into_iter(), reader)?;
    let width = reader.u8()?;
    let codes = read_codes(reader, width, rows)?;
    let mut views = Vec::with_capacity(rows);
    for &code in &codes {
        views.push(*dictionary.get(code as usize).ok_or_else(|| reader.corrupt("dictionary code out of range"))?);
    }
    let heaps = std::sync::Arc::new(vec![std::sync::Arc::new(heap)]);
    if matches!(width, 1 | 2 | 4) {
        let values = Vector::new(data_type, VectorData::Str(StrColumn::new(dictionary.into(), std::sync::Arc::clone(&heaps))), None);
        *dictionary_out = Some(Dictionary::new(values, narrow_codes(codes.into_iter().map(|c| c as u32).collect(), width)));
    }
    Ok(StrColumn::new(views.into(), heaps))
}

fn decode_strings(reader: &mut Reader<'_>, rows: usize) -> Result<StrColumn> {
    let lengths_tag = reader.u8()?;
    let lengths_bytes = reader.blob()?;
    let mut lengths_reader = Reader::new(lengths_bytes, "string lengths");
    let lengths: Buffer<i32> = decode_integers(&mut lengths_reader, lengths_tag, rows)?;
    let compressed = reader.u8()?;
    let raw_len = reader.u64()?;
    let rest = reader.take(reader.len_left())?;
    if lengths.iter().any(|&l| l < 0) {
        return Err(reader.corrupt("negative string length"));
    }
    if lengths.iter().map(|&l| l as u64).sum::<u64>() != raw_len {
        return Err(reader.corrupt("string lengths do not add up to the data"));
    }
    let heap = match compressed {
        0 => rest.to_vec(),
        1 => {
            // Streamed, and cut one byte past the expected size: memory follows what the
            // data holds, never a damaged size field.
            use std::io::Read;
            let mut heap = Vec::new();
            let decoder = zstd::stream::read::Decoder::with_buffer(rest).map_err(|e| reader.corrupt(&format!("zstd: {e}")))?;
            decoder.take(raw_len.saturating_add(1)).read_to_end(&mut heap).map_err(|e| reader.corrupt(&format!("zstd: {e}")))?;
            if heap.len() as u64 != raw_len {
                return Err(reader.corrupt("decompressed size mismatch"));
            }
            heap
        }
        _ => return Err(reader.corrupt("invalid compression flag")),
    };
    let views = views_over(&heap, lengths.iter().map(|&l| l as usize), reader)?;
    Ok(StrColumn::new(views.into(), std::sync::Arc::new(vec![std::sync::Arc::new(heap)])))
}

#[cfg(test)]
mod tests {
    use super::*;
    use apiary_types::{ScalarValue, VectorBuilder};

    fn round_trip(vector: &Vector) -> Encoding {
        let (encoding, bytes) = encode(vector);
        let decoded = decode(&bytes, vector.data_type, vector.len(), "test").unwrap();
        for i in 0..vector.len() {
            assert_eq!(decoded.get_scalar(i), vector.get_scalar(i), "row {i} of {encoding}");
        }
        // Any truncation is an error, never a panic.
        for cut in [0, 1, bytes.len() / 2, bytes.len().saturating_sub(1)] {
            if cut < bytes.len() {
                assert!(decode(&bytes[..cut], vector.data_type, vector.len(), "test").is_err());
            }
        }
        encoding
    }

    fn with_nulls(data_type: DataType, values: Vec<ScalarValue>) -> Vector {
        let mut builder = VectorBuilder::new(data_type);
        values.iter().for_each(|v| builder.push_scalar(v));
        builder.finish()
    }

    #[test]
    fn integers_choose_frame_of_reference() {
        let quantities: Vec<i64> = (0..1000).map(|i| (i % 50 + 1) * 100).collect();
        let vector = Vector::from_native(DataType::decimal(15, 2), quantities);
        assert_eq!(round_trip(&vector), Encoding::FrameOfReference { width: 1 }, "step 100 makes 50 values fit a byte");
        let keys = Vector::from_native(DataType::Integer, (1_000_000..1_060_000).collect::<Vec<i32>>());
        assert_eq!(round_trip(&keys), Encoding::FrameOfReference { width: 2 });
        let wider = Vector::from_native(DataType::Integer, (0..200_000).step_by(4).collect::<Vec<i32>>());
        assert_eq!(round_trip(&wider), Encoding::FrameOfReference { width: 2 }, "step 4");
        let three = Vector::from_native(DataType::Integer, (0..200_000).step_by(7).map(|v| v + v % 2).collect::<Vec<i32>>());
        assert_eq!(round_trip(&three), Encoding::FrameOfReference { width: 3 });
        let constant = Vector::from_native(DataType::Date, vec![9000; 100]);
        assert_eq!(round_trip(&constant), Encoding::FrameOfReference { width: 0 });
        let wide = Vector::from_native(DataType::BigInt, vec![i64::MIN, i64::MAX, 0]);
        assert_eq!(round_trip(&wide), Encoding::Plain);
        let huge = Vector::from_native(DataType::decimal(38, 0), vec![i128::MIN, 5, i128::MAX]);
        assert_eq!(round_trip(&huge), Encoding::Plain);
        // Regression (found by fuzz_file): a range of 2^64 to 2^120 steps needs 9 to 15
        // bytes per code, more than a code holds; encoding panicked.
        let wide = Vector::from_native(DataType::decimal(30, 3), vec![0i128, 1 << 70, 3 << 100, 5]);
        assert_eq!(round_trip(&wide), Encoding::Plain);
        let small = Vector::from_native(DataType::SmallInt, vec![-3i16, 7, 100]);
        assert_eq!(round_trip(&small), Encoding::FrameOfReference { width: 1 });
        let nullable = with_nulls(DataType::Integer, vec![ScalarValue::Int32(5), ScalarValue::Null, ScalarValue::Int32(-5)]);
        assert_eq!(round_trip(&nullable), Encoding::FrameOfReference { width: 1 });
        let all_null = with_nulls(DataType::Integer, vec![ScalarValue::Null; 3]);
        round_trip(&all_null);
    }

    #[test]
    fn strings_choose_dictionary_or_compression() {
        let flags: Vec<&str> = (0..1000).map(|i| ["A", "N", "R"][i % 3]).collect();
        let vector = Vector::new(DataType::Char(1), VectorData::Str(StrColumn::from_strs(flags)), None);
        assert_eq!(round_trip(&vector), Encoding::Dictionary { width: 1, values: 3 });
        let comments: Vec<String> = (0..1000).map(|i| format!("carefully final deposits {} detect slyly", i % 97 * 31 + i)).collect();
        let vector = Vector::new(DataType::Varchar(None), VectorData::Str(StrColumn::from_strs(comments.iter().map(|s| s.as_str()))), None);
        assert_eq!(round_trip(&vector), Encoding::Strings { compressed: true });
        let nullable = with_nulls(
            DataType::Varchar(None),
            vec![ScalarValue::Utf8("x".repeat(20)), ScalarValue::Null, ScalarValue::Utf8("short".into())],
        );
        round_trip(&nullable);
        let empty = Vector::new(DataType::Varchar(None), VectorData::Str(StrColumn::from_strs(Vec::<&str>::new())), None);
        round_trip(&empty);
    }

    #[test]
    fn other_types_are_plain() {
        let vector = Vector::from_native(DataType::Double, vec![1.5f64, -0.0, f64::NAN]);
        let (encoding, bytes) = encode(&vector);
        assert_eq!(encoding, Encoding::Plain);
        let decoded = decode(&bytes, DataType::Double, 3, "t").unwrap();
        assert!(decoded.values::<f64>()[2].is_nan());
        round_trip(&Vector::from_native(DataType::Boolean, vec![true, false]));
    }

    /// Damaged sizes are errors before anything is allocated for them.
    #[test]
    fn damaged_sizes_do_not_allocate() {
        let nullable = with_nulls(DataType::Double, vec![ScalarValue::Float64(1.0), ScalarValue::Null]);
        let (_, bytes) = encode(&nullable);
        for rows in [1 << 40, usize::MAX / 4, usize::MAX] {
            assert!(decode(&bytes, DataType::Double, rows, "test").is_err(), "{rows} rows");
        }
        let strings: Vec<String> = (0..200).map(|i| format!("a fairly compressible string {}", i * 7919 % 1000)).collect();
        let vector = Vector::new(DataType::Varchar(None), VectorData::Str(StrColumn::from_strs(strings.iter().map(|s| s.as_str()))), None);
        let (encoding, mut bytes) = encode(&vector);
        assert_eq!(encoding, Encoding::Strings { compressed: true });
        // The uncompressed size sits after the lengths: claim 2^60 bytes.
        let lengths_len = u64::from_le_bytes(bytes[3..11].try_into().unwrap()) as usize;
        let size_at = 2 + 1 + 8 + lengths_len + 1;
        bytes[size_at..size_at + 8].copy_from_slice(&(1u64 << 60).to_le_bytes());
        assert!(decode(&bytes, DataType::Varchar(None), 200, "test").is_err());
    }

    #[test]
    fn damaged_bytes_never_panic() {
        let vector = Vector::new(DataType::Char(1), VectorData::Str(StrColumn::from_strs((0..100).map(|i| ["A", "B"][i % 2]))), None);
        let (_, bytes) = encode(&vector);
        for position in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[position] ^= 0x5A;
            let _ = decode(&damaged, DataType::Char(1), 100, "test");
        }
    }
}
