//! Little-endian binary encoding of the catalog's pieces (types, schemas, values,
//! statistics) for the database file and the write-ahead log.
//!
//! Every read is bounds-checked: a truncated or damaged record yields
//! [`ApiaryError::Corruption`] naming what was being read, never a panic.

use apiary_common::{ApiaryError, Result};
use apiary_types::datetime::Interval;
use apiary_types::{DataType, Field, ScalarValue, Schema};

use crate::block::ZoneMap;
use crate::stats::{ColumnStats, HyperLogLog, TableStats};

/// The checksum of stored bytes (XXH3, 64 bits).
pub fn checksum(bytes: &[u8]) -> u64 {
    twox_hash::XxHash3_64::oneshot(bytes)
}

/// Appends values to a byte buffer.
#[derive(Default)]
pub struct Writer {
    pub bytes: Vec<u8>,
}

impl Writer {
    pub fn new() -> Self {
        Writer::default()
    }

    pub fn u8(&mut self, v: u8) {
        self.bytes.push(v);
    }

    pub fn u32(&mut self, v: u32) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }

    pub fn u64(&mut self, v: u64) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }

    pub fn i128(&mut self, v: i128) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }

    /// A length-prefixed byte string.
    pub fn blob(&mut self, v: &[u8]) {
        self.u64(v.len() as u64);
        self.bytes.extend_from_slice(v);
    }

    pub fn str(&mut self, v: &str) {
        self.blob(v.as_bytes());
    }

    pub fn data_type(&mut self, t: DataType) {
        match t {
            DataType::Null => self.u8(0),
            DataType::Boolean => self.u8(1),
            DataType::SmallInt => self.u8(2),
            DataType::Integer => self.u8(3),
            DataType::BigInt => self.u8(4),
            DataType::Real => self.u8(5),
            DataType::Double => self.u8(6),
            DataType::Decimal { precision, scale } => {
                self.u8(7);
                self.u8(precision);
                self.u8(scale);
            }
            DataType::Char(n) => {
                self.u8(8);
                self.u32(n);
            }
            DataType::Varchar(n) => {
                self.u8(9);
                self.u32(n.map_or(u32::MAX, |n| n));
            }
            DataType::Date => self.u8(10),
            DataType::Timestamp => self.u8(11),
            DataType::Interval => self.u8(12),
            DataType::TimestampTz => self.u8(13),
            DataType::Time => self.u8(14),
        }
    }

    pub fn schema(&mut self, schema: &Schema) {
        self.u32(schema.fields.len() as u32);
        for field in &schema.fields {
            self.str(&field.name);
            self.data_type(field.data_type);
            self.u8(field.nullable as u8);
        }
    }

    pub fn scalar(&mut self, v: &ScalarValue) {
        match v {
            ScalarValue::Null => self.u8(0),
            ScalarValue::Boolean(b) => {
                self.u8(1);
                self.u8(*b as u8);
            }
            ScalarValue::Int16(x) => {
                self.u8(2);
                self.u64(*x as i64 as u64);
            }
            ScalarValue::Int32(x) => {
                self.u8(3);
                self.u64(*x as i64 as u64);
            }
            ScalarValue::Int64(x) => {
                self.u8(4);
                self.u64(*x as u64);
            }
            ScalarValue::Float32(x) => {
                self.u8(5);
                self.u32(x.to_bits());
            }
            ScalarValue::Float64(x) => {
                self.u8(6);
                self.u64(x.to_bits());
            }
            ScalarValue::Decimal(x, p, s) => {
                self.u8(7);
                self.i128(*x);
                self.u8(*p);
                self.u8(*s);
            }
            ScalarValue::Utf8(s) => {
                self.u8(8);
                self.str(s);
            }
            ScalarValue::Date(x) => {
                self.u8(9);
                self.u64(*x as i64 as u64);
            }
            ScalarValue::Timestamp(x) => {
                self.u8(10);
                self.u64(*x as u64);
            }
            ScalarValue::TimestampTz(x) => {
                self.u8(12);
                self.u64(*x as u64);
            }
            ScalarValue::Time(x) => {
                self.u8(13);
                self.u64(*x as u64);
            }
            ScalarValue::Interval(i) => {
                self.u8(11);
                self.u32(i.months as u32);
                self.u32(i.days as u32);
                self.u64(i.micros as u64);
            }
        }
    }

    pub fn zone_map(&mut self, zone: &ZoneMap) {
        self.scalar(&zone.min);
        self.scalar(&zone.max);
        self.u64(zone.null_count as u64);
    }

    pub fn table_stats(&mut self, stats: &TableStats) {
        self.u64(stats.row_count as u64);
        self.u32(stats.columns.len() as u32);
        for column in &stats.columns {
            self.scalar(&column.min);
            self.scalar(&column.max);
            self.u64(column.null_count as u64);
            self.blob(column.sketch.registers());
        }
    }
}

/// Reads values back; `what` names the structure for error messages.
pub struct Reader<'a> {
    bytes: &'a [u8],
    position: usize,
    what: &'a str,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8], what: &'a str) -> Self {
        Reader { bytes, position: 0, what }
    }

    pub fn is_at_end(&self) -> bool {
        self.position == self.bytes.len()
    }

    pub fn position(&self) -> usize {
        self.position
    }

    /// Bytes not read yet.
    pub fn len_left(&self) -> usize {
        self.bytes.len() - self.position
    }

    pub fn corrupt(&self, detail: &str) -> ApiaryError {
        ApiaryError::Corruption(format!("{}: {detail} at byte {}", self.what, self.position))
    }

    pub fn take(&mut self, len: usize) -> Result<&'a [u8]> {
        let end = self.position.checked_add(len).filter(|&end| end <= self.bytes.len()).ok_or_else(|| self.corrupt("truncated"))?;
        let slice = &self.bytes[self.position..end];
        self.position = end;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.array::<1>()?[0])
    }

    pub fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub fn i128(&mut self) -> Result<i128> {
        Ok(i128::from_le_bytes(self.array()?))
    }

    /// A count or length that must fit in what is left of the input (guards allocations
    /// against damaged lengths).
    pub fn len(&mut self, min_bytes_each: usize) -> Result<usize> {
        let len = self.u64()?;
        let left = (self.bytes.len() - self.position) as u64;
        if len.saturating_mul(min_bytes_each as u64) > left {
            return Err(self.corrupt("length beyond the end"));
        }
        Ok(len as usize)
    }

    pub fn blob(&mut self) -> Result<&'a [u8]> {
        let len = self.len(1)?;
        self.take(len)
    }

    pub fn str(&mut self) -> Result<String> {
        let bytes = self.blob()?;
        String::from_utf8(bytes.to_vec()).map_err(|_| self.corrupt("invalid UTF-8"))
    }

    pub fn data_type(&mut self) -> Result<DataType> {
        Ok(match self.u8()? {
            0 => DataType::Null,
            1 => DataType::Boolean,
            2 => DataType::SmallInt,
            3 => DataType::Integer,
            4 => DataType::BigInt,
            5 => DataType::Real,
            6 => DataType::Double,
            7 => {
                let precision = self.u8()?;
                let scale = self.u8()?;
                if precision == 0 || precision > 38 || scale > precision {
                    return Err(self.corrupt("invalid DECIMAL precision"));
                }
                DataType::Decimal { precision, scale }
            }
            8 => DataType::Char(self.u32()?),
            9 => {
                let n = self.u32()?;
                DataType::Varchar((n != u32::MAX).then_some(n))
            }
            10 => DataType::Date,
            11 => DataType::Timestamp,
            12 => DataType::Interval,
            13 => DataType::TimestampTz,
            14 => DataType::Time,
            other => return Err(self.corrupt(&format!("unknown type tag {other}"))),
        })
    }

    pub fn schema(&mut self) -> Result<Schema> {
        let count = self.u32()? as usize;
        let mut fields = Vec::with_capacity(count.min(4096));
        for _ in 0..count {
            let name = self.str()?;
            let data_type = self.data_type()?;
            let nullable = self.u8()? != 0;
            fields.push(Field::new(name, data_type, nullable));
        }
        Ok(Schema::new(fields))
    }

    pub fn scalar(&mut self) -> Result<ScalarValue> {
        Ok(match self.u8()? {
            0 => ScalarValue::Null,
            1 => ScalarValue::Boolean(self.u8()? != 0),
            2 => ScalarValue::Int16(self.u64()? as i64 as i16),
            3 => ScalarValue::Int32(self.u64()? as i64 as i32),
            4 => ScalarValue::Int64(self.u64()? as i64),
            5 => ScalarValue::Float32(f32::from_bits(self.u32()?)),
            6 => ScalarValue::Float64(f64::from_bits(self.u64()?)),
            7 => {
                let value = self.i128()?;
                ScalarValue::Decimal(value, self.u8()?, self.u8()?)
            }
            8 => ScalarValue::Utf8(self.str()?),
            9 => ScalarValue::Date(self.u64()? as i64 as i32),
            10 => ScalarValue::Timestamp(self.u64()? as i64),
            11 => {
                let months = self.u32()? as i32;
                let days = self.u32()? as i32;
                ScalarValue::Interval(Interval { months, days, micros: self.u64()? as i64 })
            }
            12 => ScalarValue::TimestampTz(self.u64()? as i64),
            13 => ScalarValue::Time(self.u64()? as i64),
            other => return Err(self.corrupt(&format!("unknown value tag {other}"))),
        })
    }

    pub fn zone_map(&mut self) -> Result<ZoneMap> {
        Ok(ZoneMap { min: self.scalar()?, max: self.scalar()?, null_count: self.u64()? as usize })
    }

    pub fn table_stats(&mut self) -> Result<TableStats> {
        let row_count = self.u64()? as usize;
        let count = self.u32()? as usize;
        let mut columns = Vec::with_capacity(count.min(4096));
        for _ in 0..count {
            let min = self.scalar()?;
            let max = self.scalar()?;
            let null_count = self.u64()? as usize;
            let sketch = HyperLogLog::from_registers(self.blob()?).ok_or_else(|| self.corrupt("invalid distinct-count sketch"))?;
            columns.push(ColumnStats { min, max, null_count, sketch });
        }
        Ok(TableStats { row_count, columns })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_truncation_is_an_error() {
        let values = [
            ScalarValue::Null,
            ScalarValue::Boolean(true),
            ScalarValue::Int16(-7),
            ScalarValue::Int32(i32::MIN),
            ScalarValue::Int64(i64::MAX),
            ScalarValue::Float64(-0.5),
            ScalarValue::Decimal(-123456789012345678901234567890i128, 38, 4),
            ScalarValue::Utf8("héllo".into()),
            ScalarValue::Date(-3),
            ScalarValue::Interval(Interval { months: 1, days: -2, micros: 3 }),
        ];
        let mut writer = Writer::new();
        for v in &values {
            writer.scalar(v);
        }
        writer.data_type(DataType::Varchar(None));
        writer.data_type(DataType::decimal(15, 2));
        let mut reader = Reader::new(&writer.bytes, "test");
        for v in &values {
            assert_eq!(&reader.scalar().unwrap(), v);
        }
        assert_eq!(reader.data_type().unwrap(), DataType::Varchar(None));
        assert_eq!(reader.data_type().unwrap(), DataType::decimal(15, 2));
        assert!(reader.is_at_end());

        let cut = &writer.bytes[..writer.bytes.len() - 1];
        let mut reader = Reader::new(cut, "test");
        let error =
            (0..values.len() + 2)
                .try_for_each(|i| if i < values.len() { reader.scalar().map(|_| ()) } else { reader.data_type().map(|_| ()) });
        assert!(matches!(error, Err(ApiaryError::Corruption(_))));
    }

    #[test]
    fn damaged_lengths_do_not_allocate() {
        let mut writer = Writer::new();
        writer.u64(u64::MAX / 2);
        let mut reader = Reader::new(&writer.bytes, "test");
        assert!(matches!(reader.blob(), Err(ApiaryError::Corruption(_))));
    }
}
