//! Blocks and column stripes.

use std::cmp::Ordering;
use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock, RwLock};

use apiary_common::{internal_err, Bitmap, Result};

use apiary_types::vector::NativeType;
use apiary_types::{DataType, ScalarValue, StrColumn, StrView, Vector, VectorData};

use crate::encoding::{decode_with_dictionary, Codes, Dictionary};
use crate::file::StoredStripe;
use crate::packed::PackedInts;

/// Maximum number of rows in a block (= one scan work order).
pub const BLOCK_ROWS: usize = 65_536;

/// Smallest and largest non-NULL value of a stripe and its NULL count.
#[derive(Debug, Clone, PartialEq)]
pub struct ZoneMap {
    /// `Null` when the stripe has no non-NULL value (then `null_count` is its row count),
    /// or when its values are not known (then `null_count` is 0: see [`ZoneMap::unknown`]).
    pub min: ScalarValue,
    pub max: ScalarValue,
    pub null_count: usize,
}

impl ZoneMap {
    /// Computes the zone map of a vector.
    pub fn of(vector: &Vector) -> ZoneMap {
        let null_count = vector.null_count();
        let (min, max) = if null_count == vector.len() { (ScalarValue::Null, ScalarValue::Null) } else { min_max(vector) };
        ZoneMap { min, max, null_count }
    }

    /// A zone map that rules nothing out.
    pub fn unknown() -> ZoneMap {
        ZoneMap { min: ScalarValue::Null, max: ScalarValue::Null, null_count: 0 }
    }

    /// Whether every row of the stripe is NULL (and there is at least one).
    pub fn is_all_null(&self) -> bool {
        self.min.is_null() && self.null_count > 0
    }

    /// Whether some value `v` of the stripe may satisfy `lower <= v <= upper` (bounds
    /// inclusive when the flag is set; `None` = unbounded).
    pub fn may_contain_range(&self, lower: Option<(&ScalarValue, bool)>, upper: Option<(&ScalarValue, bool)>) -> bool {
        if self.min.is_null() {
            // All NULL: no value satisfies a range; not known: any may.
            return !self.is_all_null();
        }
        if let Some((bound, inclusive)) = lower {
            match self.max.total_cmp(bound) {
                Ordering::Less => return false,
                Ordering::Equal if !inclusive => return false,
                _ => {}
            }
        }
        if let Some((bound, inclusive)) = upper {
            match self.min.total_cmp(bound) {
                Ordering::Greater => return false,
                Ordering::Equal if !inclusive => return false,
                _ => {}
            }
        }
        true
    }
}

fn native_min_max<T: NativeType>(vector: &Vector, to_scalar: impl Fn(T) -> ScalarValue) -> (ScalarValue, ScalarValue) {
    let values = vector.values::<T>();
    if vector.validity.is_none() {
        // No NULLs: a branch-free fold (SQL's order, so NaN is the largest float).
        let Some(&first) = values.first() else { return (ScalarValue::Null, ScalarValue::Null) };
        let (min, max) =
            values.iter().fold((first, first), |(min, max), &v| (if v.sql_lt(min) { v } else { min }, if max.sql_lt(v) { v } else { max }));
        return (to_scalar(min), to_scalar(max));
    }
    let mut min: Option<T> = None;
    let mut max: Option<T> = None;
    for (idx, &value) in values.iter().enumerate() {
        if !vector.is_valid(idx) {
            continue;
        }
        // SQL's order: a float NaN is the largest value (and a zone of NaNs only has NaN
        // as its minimum), so `x > 5` does not skip a block holding NaN.
        if min.is_none_or(|m| value.sql_lt(m)) {
            min = Some(value);
        }
        if max.is_none_or(|m| m.sql_lt(value)) {
            max = Some(value);
        }
    }
    match (min, max) {
        (Some(min), Some(max)) => (to_scalar(min), to_scalar(max)),
        _ => (ScalarValue::Null, ScalarValue::Null),
    }
}

fn min_max(vector: &Vector) -> (ScalarValue, ScalarValue) {
    let data_type = vector.data_type;
    match (&vector.data, data_type) {
        (VectorData::Bool(_), _) => native_min_max::<bool>(vector, ScalarValue::Boolean),
        (VectorData::I16(_), _) => native_min_max::<i16>(vector, ScalarValue::Int16),
        (VectorData::I32(_), DataType::Date) => native_min_max::<i32>(vector, ScalarValue::Date),
        (VectorData::I32(_), _) => native_min_max::<i32>(vector, ScalarValue::Int32),
        (VectorData::I64(_), DataType::Timestamp) => native_min_max::<i64>(vector, ScalarValue::Timestamp),
        (VectorData::I64(_), DataType::TimestampTz) => native_min_max::<i64>(vector, ScalarValue::TimestampTz),
        (VectorData::I64(_), DataType::Time) => native_min_max::<i64>(vector, ScalarValue::Time),
        (VectorData::I64(_), DataType::Decimal { precision, scale }) => {
            native_min_max::<i64>(vector, |v| ScalarValue::Decimal(v as i128, precision, scale))
        }
        (VectorData::I64(_), _) => native_min_max::<i64>(vector, ScalarValue::Int64),
        (VectorData::I128(_), DataType::Decimal { precision, scale }) => {
            native_min_max::<i128>(vector, |v| ScalarValue::Decimal(v, precision, scale))
        }
        (VectorData::I128(_), _) => native_min_max::<i128>(vector, |v| ScalarValue::Decimal(v, 38, 0)),
        (VectorData::F32(_), _) => native_min_max::<f32>(vector, ScalarValue::Float32),
        (VectorData::F64(_), _) => native_min_max::<f64>(vector, ScalarValue::Float64),
        (VectorData::Interval(_), _) => (ScalarValue::Null, ScalarValue::Null),
        (VectorData::Str(strings), _) if vector.validity.is_none() => match inline_min_max(strings.views().as_slice()) {
            Some((min, max)) => (ScalarValue::Utf8(strings.get(min).to_string()), ScalarValue::Utf8(strings.get(max).to_string())),
            None => string_min_max(vector, strings),
        },
        (VectorData::Str(strings), _) => string_min_max(vector, strings),
    }
}

/// The rows of the smallest and largest of `views` when all are inline (`None` at the
/// first long one, or when empty): each view as an integer in the strings' order (the
/// zero-padded bytes big-endian, then the length: a prefix pads with zeros and is
/// shorter), folded in one pass without branches on the data.
fn inline_min_max(views: &[StrView]) -> Option<(usize, usize)> {
    let key = |v: &StrView| {
        let bits = v.to_bits();
        u128::from_be_bytes((bits >> 32).to_le_bytes()) | (bits & 0xffff_ffff)
    };
    let first = (key(views.first()?), 0usize);
    let mut extremes = (first, first);
    // Chunks of views: one test per chunk that all are inline.
    for (chunk_index, chunk) in views.chunks(256).enumerate() {
        if !chunk.iter().fold(true, |all, v| all & v.is_inline()) {
            return None;
        }
        extremes = chunk.iter().enumerate().fold(extremes, |(min, max), (i, v)| {
            let k = (key(v), chunk_index * 256 + i);
            (if k.0 < min.0 { k } else { min }, if k.0 > max.0 { k } else { max })
        });
    }
    Some((extremes.0 .1, extremes.1 .1))
}

/// A string vector's minimum and maximum, any lengths and NULLs.
fn string_min_max(vector: &Vector, strings: &StrColumn) -> (ScalarValue, ScalarValue) {
    // Views decide most comparisons: a row whose view is the current minimum's or
    // maximum's (a repeated dictionary value) is skipped, and the first four bytes,
    // compared as a big-endian integer, order most others without reading heaps.
    let views = strings.views().as_slice();
    let heaps = strings.heaps.as_slice();
    let prefix = |idx: usize| u32::from_be_bytes(views[idx].prefix());
    let order = |a: usize, b: usize| {
        let (pa, pb) = (prefix(a), prefix(b));
        if pa != pb {
            // Shorter strings pad their prefix with zero bytes, which sort first
            // as a shorter string does.
            return pa.cmp(&pb);
        }
        views[a].bytes(heaps).cmp(views[b].bytes(heaps))
    };
    let mut min: Option<usize> = None;
    let mut max: Option<usize> = None;
    for idx in 0..strings.len() {
        if !vector.is_valid(idx) {
            continue;
        }
        let (Some(lo), Some(hi)) = (min, max) else {
            (min, max) = (Some(idx), Some(idx));
            continue;
        };
        let view = views[idx].to_bits();
        if view == views[lo].to_bits() || view == views[hi].to_bits() {
            continue;
        }
        if order(idx, lo) == Ordering::Less {
            min = Some(idx);
        } else if order(idx, hi) == Ordering::Greater {
            max = Some(idx);
        }
    }
    match (min, max) {
        (Some(min), Some(max)) => (ScalarValue::Utf8(strings.get(min).to_string()), ScalarValue::Utf8(strings.get(max).to_string())),
        _ => (ScalarValue::Null, ScalarValue::Null),
    }
}

/// One column of one block: its zone map, and its values either resident in memory,
/// stored in the database file, or both (a cached copy the buffer pool may evict).
pub struct ColumnStripe {
    /// Set when the stripe is built or read from the file, except for a scan-only
    /// table's stripes ([`ColumnStripe::resident_without_zone_map`]), whose zone map is
    /// computed from the resident values when a scan first asks.
    zone_map: OnceLock<ZoneMap>,
    rows: usize,
    data_type: DataType,
    /// The decoded values (and dictionary codes), when resident.
    resident: RwLock<Option<Resident>>,
    /// Where the stripe lives in the database file, once written.
    stored: OnceLock<StoredStripe>,
    /// The two most recent accesses (buffer-pool clock ticks), for LRU-2 eviction.
    pub(crate) accesses: [AtomicU64; 2],
    /// Times the stripe was read from the database file and decoded (shared scans read
    /// a block once for all the queries scanning it; `apiary_storage_info().loads`).
    loads: AtomicU64,
}

/// A stripe's values in memory.
struct Resident {
    form: Form,
    /// Codes and distinct values of a string stripe without NULLs: from the file when it
    /// was stored dictionary-encoded, else built on first request (`None`: too many
    /// distinct values, or not a string stripe). Packed strings hold only this.
    dictionary: OnceLock<Option<Arc<Dictionary>>>,
    /// What the values take in memory, computed once (strings by their lengths: stripes
    /// built from the same loaded piece share its heaps).
    bytes: usize,
}

/// How a resident stripe holds its values.
enum Form {
    /// Decoded values.
    Values(Vector),
    /// Frame-of-reference codes of integers, decimals, dates, timestamps.
    Ints(Arc<PackedInts>),
    /// Dictionary codes of strings (the dictionary is the resident's).
    Strings,
    /// The BIGINTs `first..first + len`, computed when read (the row ids a DELETE or
    /// UPDATE reads its target's rows with: nothing stored).
    Sequence { first: i64, len: usize },
}

impl Resident {
    /// `dictionary`: `None` to build it on demand.
    fn new(values: Vector, dictionary: Option<Option<Arc<Dictionary>>>) -> Resident {
        let bytes = values.data_bytes() + dictionary.as_ref().and_then(|d| d.as_ref()).map_or(0, |d| d.allocated_bytes());
        let slot = OnceLock::new();
        if let Some(dictionary) = dictionary {
            let _ = slot.set(dictionary);
        }
        Resident { form: Form::Values(values), dictionary: slot, bytes }
    }

    /// The values packed when that is narrower (integers as frame-of-reference codes,
    /// strings as dictionary codes, `dictionary` when known), else as they are.
    fn packed(values: Vector, dictionary: Option<Option<Arc<Dictionary>>>) -> Resident {
        if let Some(packed) = PackedInts::pack(&values) {
            let bytes = packed.allocated_bytes();
            return Resident { form: Form::Ints(Arc::new(packed)), dictionary: OnceLock::from(None), bytes };
        }
        if values.data_type.is_string() && values.validity.is_none() {
            let dictionary = match dictionary {
                Some(known) => known,
                None => Dictionary::of(&values).map(Arc::new),
            };
            if let Some(dictionary) = dictionary {
                return Resident { form: Form::Strings, bytes: dictionary.allocated_bytes(), dictionary: OnceLock::from(Some(dictionary)) };
            }
            return Resident::new(values, Some(None));
        }
        Resident::new(values, dictionary)
    }

    fn values(&self) -> StripeValues {
        match &self.form {
            Form::Values(values) => StripeValues::Plain(values.clone()),
            Form::Ints(packed) => StripeValues::Ints(Arc::clone(packed)),
            Form::Strings => StripeValues::Strings(self.dictionary().expect("packed strings keep their dictionary")),
            &Form::Sequence { first, len } => StripeValues::Sequence { first, len },
        }
    }

    fn dictionary(&self) -> Option<Arc<Dictionary>> {
        self.dictionary
            .get_or_init(|| match &self.form {
                Form::Values(values) => Dictionary::of(values).map(Arc::new),
                _ => None,
            })
            .clone()
    }

    fn bytes(&self) -> usize {
        self.bytes
    }
}

/// A stripe's values as a scan reads them: decoded, or packed codes it tests and
/// decodes a vector at a time.
#[derive(Clone)]
pub enum StripeValues {
    Plain(Vector),
    Ints(Arc<PackedInts>),
    Strings(Arc<Dictionary>),
    /// The BIGINTs `first..first + len`.
    Sequence {
        first: i64,
        len: usize,
    },
}

impl StripeValues {
    pub fn len(&self) -> usize {
        match self {
            StripeValues::Plain(v) => v.len(),
            StripeValues::Ints(p) => p.len(),
            StripeValues::Strings(d) => d.codes.len(),
            StripeValues::Sequence { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn data_type(&self) -> DataType {
        match self {
            StripeValues::Plain(v) => v.data_type,
            StripeValues::Ints(p) => p.data_type(),
            StripeValues::Strings(d) => d.values.data_type,
            StripeValues::Sequence { .. } => DataType::BigInt,
        }
    }

    /// Rows `offset..offset + len` (a zero-copy slice of decoded values).
    pub fn range(&self, offset: usize, len: usize) -> Vector {
        match self {
            StripeValues::Plain(v) if offset == 0 && len == v.len() => v.clone(),
            StripeValues::Plain(v) => v.slice(offset, len),
            StripeValues::Ints(p) => p.decode_range(offset, len),
            StripeValues::Strings(d) => d.decode_range(offset, len),
            StripeValues::Sequence { first, .. } => {
                let start = first + offset as i64;
                Vector::from_native(DataType::BigInt, (start..start + len as i64).collect())
            }
        }
    }

    /// The rows at positions `rows`.
    pub fn gather(&self, rows: &[u32]) -> Vector {
        match self {
            StripeValues::Plain(v) => v.gather(rows),
            StripeValues::Ints(p) => p.gather(rows),
            StripeValues::Strings(d) => d.gather(rows),
            StripeValues::Sequence { first, .. } => Vector::from_native(DataType::BigInt, rows.iter().map(|&r| first + r as i64).collect()),
        }
    }

    /// All rows, decoded.
    pub fn all(&self) -> Vector {
        self.range(0, self.len())
    }
}

impl fmt::Debug for ColumnStripe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ColumnStripe")
            .field("rows", &self.rows)
            .field("data_type", &self.data_type)
            .field("stored", &self.stored.get())
            .finish()
    }
}

impl ColumnStripe {
    /// A resident stripe holding `values`.
    pub fn new(values: Vector) -> Self {
        let stripe = ColumnStripe::resident_without_zone_map(values);
        stripe.zone_map();
        stripe
    }

    /// A resident stripe holding `values` packed into codes when that is narrower (see
    /// [`crate::packed`]).
    pub fn packed(values: Vector) -> Self {
        let zone_map = ZoneMap::of(&values);
        ColumnStripe {
            zone_map: OnceLock::from(zone_map),
            rows: values.len(),
            data_type: values.data_type,
            resident: RwLock::new(Some(Resident::packed(values, None))),
            stored: OnceLock::new(),
            accesses: Default::default(),
            loads: AtomicU64::new(0),
        }
    }

    /// The BIGINTs `first..first + rows`, computed when read: nothing is stored.
    pub fn sequence(first: i64, rows: usize) -> Self {
        let zone_map = match rows {
            0 => ZoneMap { min: ScalarValue::Null, max: ScalarValue::Null, null_count: 0 },
            _ => ZoneMap { min: ScalarValue::Int64(first), max: ScalarValue::Int64(first + rows as i64 - 1), null_count: 0 },
        };
        ColumnStripe {
            zone_map: OnceLock::from(zone_map),
            rows,
            data_type: DataType::BigInt,
            resident: RwLock::new(Some(Resident { form: Form::Sequence { first, len: rows }, dictionary: OnceLock::from(None), bytes: 0 })),
            stored: OnceLock::new(),
            accesses: Default::default(),
            loads: AtomicU64::new(0),
        }
    }

    /// A resident stripe whose zone map is computed on first use: for the tables a
    /// query builds while it is planned (a Parquet file's columns), where summarising
    /// every column cost a seventh of the query and only predicate columns need it.
    pub fn resident_without_zone_map(values: Vector) -> Self {
        ColumnStripe {
            zone_map: OnceLock::new(),
            rows: values.len(),
            data_type: values.data_type,
            resident: RwLock::new(Some(Resident::new(values, None))),
            stored: OnceLock::new(),
            accesses: Default::default(),
            loads: AtomicU64::new(0),
        }
    }

    /// A stripe stored in a database file, loaded on first use.
    pub fn stored(rows: usize, data_type: DataType, zone_map: ZoneMap, stored: StoredStripe) -> Self {
        ColumnStripe {
            zone_map: OnceLock::from(zone_map),
            rows,
            data_type,
            resident: RwLock::new(None),
            stored: OnceLock::from(stored),
            accesses: Default::default(),
            loads: AtomicU64::new(0),
        }
    }

    pub fn len(&self) -> usize {
        self.rows
    }

    /// The smallest and largest value and the NULL count. A stripe without a zone map
    /// is resident until it has one (`set_stored` and `evict` compute it first).
    pub fn zone_map(&self) -> &ZoneMap {
        self.zone_map.get_or_init(|| {
            let resident = self.resident.read().unwrap_or_else(|e| e.into_inner());
            match resident.as_ref() {
                Some(resident) => ZoneMap::of(&resident.values().all()),
                // Unreachable by the invariant above; a zone map that rules nothing out.
                None => ZoneMap::unknown(),
            }
        })
    }

    /// NULLs in the stripe, without computing a zone map for it.
    fn null_count(&self) -> usize {
        match self.zone_map.get() {
            Some(zone) => zone.null_count,
            None => self.resident.read().unwrap_or_else(|e| e.into_inner()).as_ref().map_or(0, |r| match &r.form {
                Form::Values(values) => values.null_count(),
                Form::Ints(_) | Form::Strings | Form::Sequence { .. } => 0,
            }),
        }
    }

    /// Times the stripe was read from the database file and decoded.
    pub fn loads(&self) -> u64 {
        self.loads.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    pub fn data_type(&self) -> DataType {
        self.data_type
    }

    /// All rows of the stripe, loading them from the database file if they are not
    /// resident: a cheap, shared copy, or the packed codes decoded.
    pub fn vector(self: &Arc<Self>) -> Result<Vector> {
        Ok(self.values()?.all())
    }

    /// The stripe's values as a scan reads them (loaded from the database file if not
    /// resident, and packed then when narrower).
    pub fn values(self: &Arc<Self>) -> Result<StripeValues> {
        if let Some(resident) = self.resident.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
            if let Some(stored) = self.stored.get() {
                stored.file.pool.touch(self);
            }
            return Ok(resident.values());
        }
        let stored = self.stored.get().ok_or_else(|| internal_err!("column stripe neither resident nor stored"))?;
        let mut slot = self.resident.write().unwrap_or_else(|e| e.into_inner());
        if let Some(resident) = slot.as_ref() {
            return Ok(resident.values());
        }
        let bytes = stored.file.read_extent(stored.extent, stored.checksum, &stored.label)?;
        self.loads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (values, dictionary) = decode_with_dictionary(&bytes, self.data_type, self.rows, &stored.label)?;
        // A stripe stored without a dictionary has too many distinct values for one.
        let resident = Resident::packed(values, Some(dictionary.map(Arc::new)));
        let size = resident.bytes();
        let loaded = resident.values();
        *slot = Some(resident);
        drop(slot);
        stored.file.pool.loaded(self, stored, size);
        stored.file.pool.touch(self);
        Ok(loaded)
    }

    /// The stripe's dictionary: codes and distinct values, for a string stripe without
    /// NULLs and with few distinct values (built on the first request if the stripe was
    /// never encoded).
    pub fn dictionary(self: &Arc<Self>) -> Result<Option<Arc<Dictionary>>> {
        if !self.data_type.is_string() || self.null_count() > 0 {
            return Ok(None);
        }
        loop {
            if let Some(resident) = self.resident.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
                return Ok(resident.dictionary());
            }
            self.values()?;
        }
    }

    /// Rows `[offset, offset + len)` as a vector (a zero-copy slice of the resident values).
    pub fn read(self: &Arc<Self>, offset: usize, len: usize) -> Result<Vector> {
        Ok(self.values()?.range(offset, len))
    }

    /// Where the stripe is stored, if it has been written to a database file.
    pub fn stored_location(&self) -> Option<&StoredStripe> {
        self.stored.get()
    }

    /// Records where the stripe was written (once), with the codes if it was
    /// dictionary-encoded; returns the resident bytes now cached.
    pub(crate) fn set_stored(&self, stored: StoredStripe, dictionary: Option<Dictionary>) -> usize {
        self.zone_map();
        let _ = self.stored.set(stored);
        let mut slot = self.resident.write().unwrap_or_else(|e| e.into_inner());
        match slot.as_mut() {
            // Decoded values take the file's dictionary; packed ones keep their codes.
            Some(resident) => {
                if let Form::Values(values) = &resident.form {
                    *resident = Resident::new(values.clone(), Some(dictionary.map(Arc::new)));
                }
                resident.bytes()
            }
            None => 0,
        }
    }

    /// Drops the resident copy of a stored stripe; returns the bytes released.
    pub(crate) fn evict(&self) -> usize {
        if self.stored.get().is_none() {
            return 0;
        }
        self.zone_map();
        let mut resident = self.resident.write().unwrap_or_else(|e| e.into_inner());
        resident.take().map_or(0, |r| r.bytes())
    }

    /// How the resident values are held (`None` when not resident): "values",
    /// "1-byte codes", "dictionary (2-byte codes)", ...
    pub fn memory_form(&self) -> Option<&'static str> {
        let resident = self.resident.read().unwrap_or_else(|e| e.into_inner());
        let width = |codes: &Codes| match codes {
            Codes::U8(_) => 0,
            Codes::U16(_) => 1,
            Codes::U32(_) => 2,
        };
        Some(match &resident.as_ref()?.form {
            Form::Values(_) => "values",
            Form::Sequence { .. } => "sequence",
            Form::Ints(packed) => ["1-byte codes", "2-byte codes", "4-byte codes"][width(packed.codes())],
            Form::Strings => match resident.as_ref()?.dictionary.get() {
                Some(Some(d)) => ["dictionary (1-byte codes)", "dictionary (2-byte codes)", "dictionary (4-byte codes)"][width(&d.codes)],
                _ => "dictionary",
            },
        })
    }

    /// Bytes held in memory (0 when not resident).
    pub fn memory_bytes(&self) -> usize {
        self.resident.read().unwrap_or_else(|e| e.into_inner()).as_ref().map_or(0, |r| r.bytes())
    }
}

impl Drop for ColumnStripe {
    fn drop(&mut self) {
        if let Some(stored) = self.stored.get() {
            let resident = self.resident.get_mut().unwrap_or_else(|e| e.into_inner());
            stored.file.stripe_dropped(stored, resident.as_ref().map_or(0, |r| r.bytes()));
        }
    }
}

/// Up to [`BLOCK_ROWS`] rows of a table, stored column by column.
///
/// A block never changes once published. Deleting rows publishes a new block with the
/// same stripes and a bitmap of the deleted rows (DuckDB's and Hyper's deletion vectors):
/// scans skip them, and row positions, which DELETE and UPDATE name rows by, stay put.
#[derive(Debug)]
pub struct Block {
    /// Rows stored, deleted ones included.
    pub row_count: usize,
    pub columns: Vec<Arc<ColumnStripe>>,
    /// Set bit = deleted row (bits past its length: not deleted); `None` when none is.
    pub deleted: Option<Arc<Bitmap>>,
    /// The set bits of `deleted`, counted once (the optimizer asks for row counts often).
    deleted_count: usize,
}

impl Block {
    pub fn new(columns: Vec<Vector>) -> Block {
        Block::of(columns, ColumnStripe::new)
    }

    /// A block of one stripe per column, made by `stripe`.
    fn of(columns: Vec<Vector>, stripe: impl Fn(Vector) -> ColumnStripe) -> Block {
        let row_count = columns.first().map_or(0, |c| c.len());
        debug_assert!(columns.iter().all(|c| c.len() == row_count));
        Block { row_count, columns: columns.into_iter().map(|c| Arc::new(stripe(c))).collect(), deleted: None, deleted_count: 0 }
    }

    /// A block of stored stripes with the given deleted rows.
    pub fn from_stripes(row_count: usize, columns: Vec<Arc<ColumnStripe>>, deleted: Option<Arc<Bitmap>>) -> Block {
        let deleted_count = deleted.as_ref().map_or(0, |d| d.count_ones());
        let deleted = deleted.filter(|_| deleted_count > 0);
        Block { row_count, columns, deleted, deleted_count }
    }

    /// Every column's values at `rows` (positions in the block).
    pub fn gather(&self, rows: &[u32]) -> Result<Vec<Vector>> {
        self.columns.iter().map(|stripe| Ok(stripe.values()?.gather(rows))).collect()
    }

    /// Number of deleted rows.
    pub fn deleted_count(&self) -> usize {
        self.deleted_count
    }

    /// Number of rows not deleted.
    pub fn live_count(&self) -> usize {
        self.row_count - self.deleted_count()
    }

    pub fn is_deleted(&self, row: usize) -> bool {
        self.deleted.as_ref().is_some_and(|d| row < d.len() && d.get(row))
    }

    /// This block with `rows` (positions, each below `row_count`) deleted too; the
    /// stripes are shared.
    pub fn with_deleted(&self, rows: impl IntoIterator<Item = u32>) -> Block {
        let mut deleted = match &self.deleted {
            Some(d) => {
                let mut bits = Bitmap::new(self.row_count, false);
                d.iter_ones().filter(|&r| r < self.row_count).for_each(|r| bits.set(r, true));
                bits
            }
            None => Bitmap::new(self.row_count, false),
        };
        for row in rows {
            deleted.set(row as usize, true);
        }
        Block::from_stripes(self.row_count, self.columns.clone(), Some(Arc::new(deleted)))
    }

    /// Whether a row of `offset..offset + len` is deleted.
    pub fn has_deleted(&self, offset: usize, len: usize) -> bool {
        let Some(deleted) = &self.deleted else { return false };
        let end = (offset + len).min(deleted.len());
        if offset >= end {
            return false;
        }
        let words = deleted.words();
        let (first, last) = (offset / 64, (end - 1) / 64);
        (first..=last).any(|w| {
            let mut word = words[w];
            if w == first {
                word &= u64::MAX << (offset % 64);
            }
            if w == last && end % 64 != 0 {
                word &= u64::MAX >> (64 - end % 64);
            }
            word != 0
        })
    }

    /// The positions (relative to `offset`) of the rows of `offset..offset + len` not
    /// deleted; `None` when none of them is deleted.
    pub fn live_rows(&self, offset: usize, len: usize) -> Option<Vec<u32>> {
        if !self.has_deleted(offset, len) {
            return None;
        }
        let deleted = self.deleted.as_ref()?;
        // Every row is written and the position advances past live ones: no branch per row.
        let mut live = vec![0u32; len];
        let mut count = 0;
        for row in 0..len {
            let position = offset + row;
            live[count] = row as u32;
            count += usize::from(position >= deleted.len() || !deleted.get(position));
        }
        live.truncate(count);
        Some(live)
    }

    /// Of `rows` (positions relative to `offset`), those not deleted.
    pub fn retain_live(&self, offset: usize, mut rows: Vec<u32>) -> Vec<u32> {
        if let Some(deleted) = &self.deleted {
            rows.retain(|&r| {
                let position = offset + r as usize;
                position >= deleted.len() || !deleted.get(position)
            });
        }
        rows
    }

    /// A block whose stripes are packed into codes where that is narrower (`pack`), else
    /// hold their values as they are.
    pub fn sealed(columns: Vec<Vector>, pack: bool) -> Block {
        Block::of(columns, if pack { ColumnStripe::packed } else { ColumnStripe::new })
    }

    /// A block whose stripes compute their zone maps when a scan first asks (see
    /// [`ColumnStripe::resident_without_zone_map`]).
    pub fn without_zone_maps(columns: Vec<Vector>) -> Block {
        Block::of(columns, ColumnStripe::resident_without_zone_map)
    }

    pub fn column(&self, idx: usize) -> &Arc<ColumnStripe> {
        &self.columns[idx]
    }

    pub fn memory_bytes(&self) -> usize {
        self.columns.iter().map(|c| c.memory_bytes()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apiary_types::VectorBuilder;

    #[test]
    fn zone_maps_skip_nulls() {
        let mut builder = VectorBuilder::new(DataType::Integer);
        for v in [Some(5), None, Some(-3), Some(9)] {
            match v {
                Some(v) => builder.push_scalar(&ScalarValue::Int32(v)),
                None => builder.push_null(),
            }
        }
        let zone = ZoneMap::of(&builder.finish());
        assert_eq!(zone.min, ScalarValue::Int32(-3));
        assert_eq!(zone.max, ScalarValue::Int32(9));
        assert_eq!(zone.null_count, 1);
        let ten = ScalarValue::Int32(10);
        let nine = ScalarValue::Int32(9);
        assert!(!zone.may_contain_range(Some((&ten, true)), None));
        assert!(zone.may_contain_range(Some((&nine, true)), None));
        assert!(!zone.may_contain_range(Some((&nine, false)), None));
    }

    #[test]
    fn unknown_zone_maps_rule_nothing_out_and_all_null_ones_everything() {
        let five = ScalarValue::Int32(5);
        assert!(ZoneMap::unknown().may_contain_range(Some((&five, true)), Some((&five, true))));
        let all_null = ZoneMap::of(&Vector::nulls(DataType::Integer, 3));
        assert!(all_null.is_all_null());
        assert!(!all_null.may_contain_range(Some((&five, true)), None));
    }

    #[test]
    fn a_stripe_without_a_zone_map_computes_it_when_asked() {
        let values = Vector::new(DataType::Integer, VectorData::I32(vec![4, -2, 7].into()), None);
        let stripe = ColumnStripe::resident_without_zone_map(values);
        assert!(stripe.zone_map.get().is_none());
        assert_eq!((&stripe.zone_map().min, &stripe.zone_map().max), (&ScalarValue::Int32(-2), &ScalarValue::Int32(7)));
    }

    #[test]
    fn zone_maps_of_strings_order_by_bytes_whatever_the_prefixes() {
        // Prefixes of four bytes tie ("abcd..."), pad short strings with zeros ("ab" before
        // "ab\u{1}"), and repeat (the same view); NULLs are skipped.
        let values = [Some("abcdz"), Some("ab"), None, Some("abcda"), Some("ab\u{1}"), Some("b"), Some("abcdzz"), Some("b"), Some("a")];
        let mut builder = VectorBuilder::new(DataType::Varchar(None));
        for v in values {
            match v {
                Some(v) => builder.push_scalar(&ScalarValue::Utf8(v.to_string())),
                None => builder.push_null(),
            }
        }
        let zone = ZoneMap::of(&builder.finish());
        assert_eq!((zone.min, zone.max, zone.null_count), (ScalarValue::Utf8("a".into()), ScalarValue::Utf8("b".into()), 1));
        let long: Vec<String> = (0..50).map(|i| format!("a long string that lives in a heap {:02}", (i * 37) % 50)).collect();
        let mut builder = VectorBuilder::new(DataType::Varchar(None));
        long.iter().for_each(|s| builder.push_scalar(&ScalarValue::Utf8(s.clone())));
        let zone = ZoneMap::of(&builder.finish());
        assert_eq!(zone.min, ScalarValue::Utf8("a long string that lives in a heap 00".into()));
        assert_eq!(zone.max, ScalarValue::Utf8("a long string that lives in a heap 49".into()));
    }

    #[test]
    fn zone_maps_of_short_strings_without_nulls_order_as_bytes() {
        // The fast path (every string inline, no NULL) against byte order: shared
        // prefixes, a string and its extension by a NUL byte, 12-byte strings, non-ASCII.
        let cases: [&[&str]; 4] = [
            &["tag1", "tag10", "tag0", "tag24", "tag9", "tag2"],
            &["a\0", "a", "a\0b", "\0"],
            &["zzzzzzzzzzzz", "zzzzzzzzzzzy", "", "zzzzzzzzzzz"],
            &["é", "e", "ё", "ea"],
        ];
        // Past the first chunk of 256 views: the minimum and maximum late, and a long
        // string late (the general path takes over).
        let many: Vec<String> = (0..1000).map(|i| format!("k{:03}", (i * 7 + 500) % 1000)).collect();
        let mut with_long = many.clone();
        with_long[700] = "a string of more than twelve bytes".to_string();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let with_long: Vec<&str> = with_long.iter().map(String::as_str).collect();
        for strings in cases.into_iter().chain([&many[..], &with_long[..]]) {
            let values: Vec<String> = strings.iter().map(|s| s.to_string()).collect();
            let zone = ZoneMap::of(&Vector::new(
                DataType::Varchar(None),
                VectorData::Str(StrColumn::from_strs(values.iter().map(String::as_str))),
                None,
            ));
            let min = values.iter().min_by(|a, b| a.as_bytes().cmp(b.as_bytes())).cloned();
            let max = values.iter().max_by(|a, b| a.as_bytes().cmp(b.as_bytes())).cloned();
            assert_eq!((zone.min, zone.max), (ScalarValue::Utf8(min.unwrap()), ScalarValue::Utf8(max.unwrap())), "{values:?}");
        }
    }

    #[test]
    fn zone_maps_without_nulls_put_nan_last() {
        let zone = ZoneMap::of(&Vector::from_native(DataType::Double, vec![2.0, f64::NAN, -1.5, 7.0]));
        assert_eq!(zone.min, ScalarValue::Float64(-1.5));
        assert!(matches!(zone.max, ScalarValue::Float64(v) if v.is_nan()), "{:?}", zone.max);
        let zone = ZoneMap::of(&Vector::from_native(DataType::Integer, vec![4, -8, 15]));
        assert_eq!((zone.min, zone.max, zone.null_count), (ScalarValue::Int32(-8), ScalarValue::Int32(15), 0));
    }
}
