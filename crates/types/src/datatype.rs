//! Logical SQL types and their physical representation.

use std::fmt;
use std::sync::Arc;

/// Largest precision of DECIMAL(p, s) (fits in a 128-bit integer).
pub const MAX_DECIMAL_PRECISION: u8 = 38;
/// Largest precision whose values fit in a 64-bit integer.
pub const MAX_DECIMAL64_PRECISION: u8 = 18;

/// A SQL data type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataType {
    /// The type of an untyped NULL literal; it converts to any other type.
    Null,
    Boolean,
    SmallInt,
    Integer,
    BigInt,
    Real,
    Double,
    /// Exact fixed-point number: `precision` digits, `scale` of them after the point,
    /// stored as an integer scaled by `10^scale`.
    Decimal {
        precision: u8,
        scale: u8,
    },
    /// Fixed-length character string. Trailing blanks are insignificant: values are
    /// stored without them (like PostgreSQL's comparison semantics for `bpchar`).
    Char(u32),
    /// Variable-length character string with an optional maximum length (`None` = TEXT).
    Varchar(Option<u32>),
    /// Calendar date, days since 1970-01-01.
    Date,
    /// Date and time without time zone, microseconds since 1970-01-01 00:00:00.
    Timestamp,
    /// TIMESTAMP WITH TIME ZONE: an instant, microseconds since 1970-01-01 00:00:00 UTC,
    /// shown and split into fields in the session's time zone.
    TimestampTz,
    /// TIME (without time zone): microseconds since midnight, 00:00:00 to 24:00:00.
    Time,
    /// A span of months, days and microseconds.
    Interval,
}

/// How a type's values are laid out in memory; kernels are chosen by this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PhysicalType {
    Bool,
    I16,
    I32,
    I64,
    I128,
    F32,
    F64,
    Str,
    Interval,
}

impl PhysicalType {
    /// Bytes per value in a vector (for strings: the view; their bytes live in heaps).
    pub fn width(self) -> usize {
        match self {
            PhysicalType::Bool => 1,
            PhysicalType::I16 => 2,
            PhysicalType::I32 | PhysicalType::F32 => 4,
            PhysicalType::I64 | PhysicalType::F64 => 8,
            PhysicalType::I128 | PhysicalType::Str | PhysicalType::Interval => 16,
        }
    }
}

impl DataType {
    pub fn physical(&self) -> PhysicalType {
        match self {
            DataType::Null | DataType::Boolean => PhysicalType::Bool,
            DataType::SmallInt => PhysicalType::I16,
            DataType::Integer | DataType::Date => PhysicalType::I32,
            DataType::BigInt | DataType::Timestamp | DataType::TimestampTz | DataType::Time => PhysicalType::I64,
            DataType::Real => PhysicalType::F32,
            DataType::Double => PhysicalType::F64,
            DataType::Decimal { precision, .. } => {
                if *precision <= MAX_DECIMAL64_PRECISION {
                    PhysicalType::I64
                } else {
                    PhysicalType::I128
                }
            }
            DataType::Char(_) | DataType::Varchar(_) => PhysicalType::Str,
            DataType::Interval => PhysicalType::Interval,
        }
    }

    pub fn decimal(precision: u8, scale: u8) -> DataType {
        DataType::Decimal { precision, scale }
    }

    pub fn text() -> DataType {
        DataType::Varchar(None)
    }

    pub fn is_integer(&self) -> bool {
        matches!(self, DataType::SmallInt | DataType::Integer | DataType::BigInt)
    }

    pub fn is_float(&self) -> bool {
        matches!(self, DataType::Real | DataType::Double)
    }

    pub fn is_decimal(&self) -> bool {
        matches!(self, DataType::Decimal { .. })
    }

    pub fn is_numeric(&self) -> bool {
        self.is_integer() || self.is_float() || self.is_decimal()
    }

    pub fn is_string(&self) -> bool {
        matches!(self, DataType::Char(_) | DataType::Varchar(_))
    }

    pub fn is_temporal(&self) -> bool {
        matches!(self, DataType::Date | DataType::Timestamp | DataType::TimestampTz | DataType::Time)
    }

    /// DATE, TIMESTAMP or TIMESTAMPTZ: a point on the calendar.
    pub fn is_datetime(&self) -> bool {
        matches!(self, DataType::Date | DataType::Timestamp | DataType::TimestampTz)
    }

    /// Precision and scale when this numeric type is viewed as a decimal
    /// (integers are DECIMAL(p, 0) with p large enough for any value).
    pub fn as_decimal(&self) -> Option<(u8, u8)> {
        match self {
            DataType::SmallInt => Some((5, 0)),
            DataType::Integer => Some((10, 0)),
            DataType::BigInt => Some((19, 0)),
            DataType::Decimal { precision, scale } => Some((*precision, *scale)),
            _ => None,
        }
    }

    /// The maximum character length a string type admits, if bounded.
    pub fn max_length(&self) -> Option<u32> {
        match self {
            DataType::Char(n) => Some(*n),
            DataType::Varchar(n) => *n,
            _ => None,
        }
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DataType::Null => write!(f, "NULL"),
            DataType::Boolean => write!(f, "BOOLEAN"),
            DataType::SmallInt => write!(f, "SMALLINT"),
            DataType::Integer => write!(f, "INTEGER"),
            DataType::BigInt => write!(f, "BIGINT"),
            DataType::Real => write!(f, "REAL"),
            DataType::Double => write!(f, "DOUBLE"),
            DataType::Decimal { precision, scale } => write!(f, "DECIMAL({precision},{scale})"),
            DataType::Char(n) => write!(f, "CHAR({n})"),
            DataType::Varchar(Some(n)) => write!(f, "VARCHAR({n})"),
            DataType::Varchar(None) => write!(f, "VARCHAR"),
            DataType::Date => write!(f, "DATE"),
            DataType::Timestamp => write!(f, "TIMESTAMP"),
            DataType::TimestampTz => write!(f, "TIMESTAMP WITH TIME ZONE"),
            DataType::Time => write!(f, "TIME"),
            DataType::Interval => write!(f, "INTERVAL"),
        }
    }
}

/// A named, typed column of a table or of a query result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub data_type: DataType,
    pub nullable: bool,
}

impl Field {
    pub fn new(name: impl Into<String>, data_type: DataType, nullable: bool) -> Self {
        Field { name: name.into(), data_type, nullable }
    }
}

/// An ordered list of fields.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Schema {
    pub fields: Vec<Field>,
}

pub type SchemaRef = Arc<Schema>;

impl Schema {
    pub fn new(fields: Vec<Field>) -> Self {
        Schema { fields }
    }

    pub fn len(&self) -> usize {
        self.fields.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// Position of the column called `name` (case-insensitive).
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name.eq_ignore_ascii_case(name))
    }

    pub fn types(&self) -> Vec<DataType> {
        self.fields.iter().map(|f| f.data_type).collect()
    }
}
