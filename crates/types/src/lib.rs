//! # apiary-types
//!
//! SQL types and the in-memory columnar representation shared by storage and execution.
//!
//! ```text
//! datatype   DataType (logical SQL type) -> PhysicalType (how values are stored)
//! decimal    exact fixed-point helpers: scaled i64/i128, parsing, rescaling, formatting
//! datetime   DATE (days since 1970-01-01), TIMESTAMP/TIMESTAMPTZ (microseconds), TIME
//!            (microseconds since midnight), INTERVAL
//! timezone   TimeZone: fixed offsets and IANA zones (session zone, AT TIME ZONE)
//! scalar     ScalarValue: one value, for constants and the row-at-a-time API
//! buffer     Buffer<T>: a shared, sliceable, immutable array (zero-copy scans)
//! string     StrView: 16-byte string views (inline <= 12 bytes, else prefix + heap offset)
//! vector     Vector: one typed column slice + validity; the unit kernels work on
//! chunk      DataChunk: a batch of aligned vectors + an optional selection vector
//! builder    VectorBuilder: typed appends (loading, materialisation, results)
//! pg         PostgreSQL type OIDs, names and modifiers (wire protocol, pg_catalog)
//! ```
//!
//! No row-of-values representation is used on a hot path: vectors hold typed buffers and
//! kernels are monomorphised over the native type (`i32`, `i64`, `i128`, `f64`, ...).

pub mod buffer;
pub mod builder;
pub mod chunk;
pub mod datatype;
pub mod datetime;
pub mod decimal;
pub mod pg;
pub mod scalar;
pub mod string;
pub mod timezone;
pub mod vector;

pub use buffer::Buffer;
pub use builder::{ChunkBuilder, VectorBuilder};
pub use chunk::DataChunk;
pub use datatype::{DataType, Field, PhysicalType, Schema};
pub use datetime::Interval;
pub use scalar::ScalarValue;
pub use string::{DictionaryCodes, StrColumn, StrColumnBuilder, StrView};
pub use timezone::TimeZone;
pub use vector::{Vector, VectorData};
