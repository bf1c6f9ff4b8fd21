//! CSV and TPC-H `.tbl` reading (parallel) and CSV writing.
//!
//! The file is read a segment at a time (tens of MB per thread); each segment is cut at a
//! record boundary and then at line boundaries into pieces that worker threads parse at
//! the same time, each straight into typed column builders (no intermediate rows or
//! strings). Pieces go to the caller in file order, so the table's row order is the
//! file's, and memory holds a few segments, never the whole file. Segments containing
//! the quote character are parsed by one thread, since a quoted field may span lines.
//!
//! Errors name the file, the line and the column: `data.csv:17: column 3 ("price"):
//! invalid value 'abc' for DECIMAL(15,2)`.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use apiary_common::{ApiaryError, Bitmap, Result};
use apiary_execution::expr::datetime_format::{strptime, Item};
use apiary_types::datetime::{parse_date_bytes, parse_time, parse_timestamp, parse_timestamptz, Interval, MICROS_PER_DAY};
use apiary_types::decimal::{parse_decimal, parse_decimal_bytes_i64};
use apiary_types::vector::NativeType;
use apiary_types::{DataType, Field, StrColumnBuilder, TimeZone, Vector, VectorData};

pub mod sniff;

#[derive(Debug, Clone)]
pub struct CsvOptions {
    pub delimiter: u8,
    pub quote: Option<u8>,
    pub escape: Option<u8>,
    pub header: bool,
    /// Texts that mean NULL in an unquoted field of any column. When empty, an empty
    /// unquoted field does (PostgreSQL's CSV default).
    pub null: Vec<String>,
    /// A record that does not end within this many bytes is an error (a file without line
    /// breaks, `/dev/zero`, must not be read into memory whole).
    pub max_line_size: usize,
    /// How each column's text is read (NULL tokens, date formats), as sniffing found it;
    /// a column without an entry reads the defaults.
    pub columns: Vec<ColumnFormat>,
    /// Records that cannot be read are skipped and reported instead of failing the load.
    pub ignore_errors: bool,
    /// Lines skipped at the start of the file, before the header.
    pub skip_lines: usize,
    pub compression: Compression,
    /// The session's time zone: TIMESTAMPTZ text without a zone is read in it.
    pub time_zone: TimeZone,
}

/// The default [`CsvOptions::max_line_size`].
pub const DEFAULT_MAX_LINE_SIZE: usize = 8 << 20;

impl Default for CsvOptions {
    fn default() -> Self {
        CsvOptions {
            delimiter: b',',
            quote: Some(b'"'),
            escape: None,
            header: false,
            null: Vec::new(),
            max_line_size: DEFAULT_MAX_LINE_SIZE,
            columns: Vec::new(),
            ignore_errors: false,
            skip_lines: 0,
            compression: Compression::Auto,
            time_zone: TimeZone::UTC,
        }
    }
}

/// How one column's fields are read.
#[derive(Debug, Clone, Default)]
pub struct ColumnFormat {
    /// Field texts, quoted or not, that mean NULL in this column (`NA`, `\N`, ...).
    pub null_tokens: Vec<String>,
    /// Field texts that mean NULL when not quoted (in a text column, `"NA"` is text where
    /// a bare `NA` is the file's NULL).
    pub unquoted_null_tokens: Vec<String>,
    /// The `strptime` format of a DATE or TIMESTAMP column; `None` reads ISO 8601.
    pub format: Option<TemporalFormat>,
}

/// A compiled `strptime` format (or several alternatives, tried in order) and its text.
#[derive(Debug, Clone)]
pub struct TemporalFormat {
    pub text: String,
    /// Each alternative, and whether it reads a zone (`%z`: its values are instants).
    alternatives: Arc<[(Vec<Item>, bool)]>,
}

impl TemporalFormat {
    pub fn new(text: &str) -> Result<TemporalFormat> {
        Self::any_of(text, &[text])
    }

    /// Values written in any of `formats` (ISO 8601 with or without fractional seconds);
    /// `text` names them in messages.
    pub fn any_of(text: &str, formats: &[&str]) -> Result<TemporalFormat> {
        let alternatives = formats
            .iter()
            .map(|format| {
                let items = apiary_execution::expr::datetime_format::compile_strftime(format)
                    .map_err(|e| apiary_common::bind_err!("invalid date format '{format}': {e}"))?;
                let zoned = items.iter().any(|item| matches!(item, Item::Code { code: 'z', .. }));
                Ok((items, zoned))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(TemporalFormat { text: text.to_string(), alternatives: alternatives.into() })
    }

    /// The timestamp `text` denotes in this format (a zone in it converts to UTC).
    pub fn timestamp(&self, text: &str) -> Option<i64> {
        let text = text.trim();
        self.alternatives.iter().find_map(|(items, _)| strptime(items, text))
    }

    /// The instant `text` denotes in this format: with a zone in the text, that zone's;
    /// without one, the time is read in `zone`.
    pub fn instant(&self, text: &str, zone: &TimeZone) -> Option<i64> {
        let text = text.trim();
        self.alternatives.iter().find_map(|(items, zoned)| {
            let parsed = strptime(items, text)?;
            if *zoned {
                Some(parsed)
            } else {
                zone.to_utc(parsed)
            }
        })
    }

    /// The date `text` denotes in this format (a time of day other than midnight does not
    /// fit a date).
    pub fn date(&self, text: &str) -> Option<i32> {
        let micros = self.timestamp(text)?;
        if micros.rem_euclid(MICROS_PER_DAY) != 0 {
            return None;
        }
        i32::try_from(micros.div_euclid(MICROS_PER_DAY)).ok()
    }
}

/// How a file is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// By the file's first bytes (gzip and zstd have magic numbers).
    Auto,
    None,
    Gzip,
    Zstd,
}

impl Compression {
    pub fn parse(text: &str) -> Option<Compression> {
        match text.to_ascii_lowercase().as_str() {
            "auto" | "infer" => Some(Compression::Auto),
            "none" | "uncompressed" => Some(Compression::None),
            "gzip" | "gz" => Some(Compression::Gzip),
            "zstd" | "zst" => Some(Compression::Zstd),
            _ => None,
        }
    }
}

/// Opens `path` for reading, decompressing gzip or zstd.
pub fn open_input(path: &Path, compression: Compression) -> Result<Box<dyn Read + Send>> {
    let open = || std::fs::File::open(path).map_err(|e| read_error(path, e));
    let compression = match compression {
        Compression::Auto => {
            let mut magic = [0u8; 4];
            let mut file = open()?;
            let mut read = 0;
            while read < magic.len() {
                match file.read(&mut magic[read..]).map_err(|e| read_error(path, e))? {
                    0 => break,
                    n => read += n,
                }
            }
            match &magic[..read] {
                [0x1f, 0x8b, ..] => Compression::Gzip,
                [0x28, 0xb5, 0x2f, 0xfd] => Compression::Zstd,
                _ => Compression::None,
            }
        }
        other => other,
    };
    let file = std::io::BufReader::with_capacity(1 << 20, open()?);
    Ok(match compression {
        Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(file)),
        Compression::Zstd => Box::new(zstd::stream::read::Decoder::with_buffer(file).map_err(|e| read_error(path, e))?),
        _ => Box::new(file),
    })
}

/// A record that could not be read (with `ignore_errors`, it is skipped and kept here).
#[derive(Debug, Clone)]
pub struct Reject {
    /// 1-based line where the record starts.
    pub line: u64,
    /// 1-based column, when one column is at fault.
    pub column: Option<usize>,
    pub column_name: Option<String>,
    /// DuckDB's names: `CAST`, `MISSING COLUMNS`, `TOO MANY COLUMNS`, `UNQUOTED VALUE`,
    /// `INVALID UNICODE`.
    pub error_type: &'static str,
    /// The record as it is in the file.
    pub csv_line: String,
    pub message: String,
}

/// The error for a record longer than `max_line_size`.
fn line_too_long(file: &str, line: u64, options: &CsvOptions) -> ApiaryError {
    ApiaryError::Load {
        file: file.to_string(),
        line,
        message: format!(
            "the record starting here is longer than max_line_size ({} bytes) or never ends; raise it with the max_line_size option",
            options.max_line_size
        ),
    }
}

/// A failure to open or read `path`, in words a user can act on.
fn read_error(path: &Path, e: std::io::Error) -> ApiaryError {
    match e.kind() {
        std::io::ErrorKind::NotFound => ApiaryError::Io(format!("file \"{}\" does not exist", path.display())),
        std::io::ErrorKind::IsADirectory => ApiaryError::Io(format!("\"{}\" is a directory, not a file", path.display())),
        _ => ApiaryError::Io(format!("cannot read \"{}\": {e}", path.display())),
    }
}

/// A typed column being filled from text fields.
struct ColumnParser {
    data_type: DataType,
    /// The `strptime` format of a DATE or TIMESTAMP column (`None`: ISO 8601).
    format: Option<TemporalFormat>,
    /// The zone TIMESTAMPTZ text without one is read in.
    zone: TimeZone,
    values: Values,
    validity: Option<Bitmap>,
    len: usize,
}

enum Values {
    Bool(Vec<bool>),
    I16(Vec<i16>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    I128(Vec<i128>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Str(StrColumnBuilder),
    Interval(Vec<Interval>),
}

impl ColumnParser {
    fn new(data_type: DataType, format: Option<TemporalFormat>, zone: TimeZone, capacity: usize) -> Self {
        let values = match data_type {
            DataType::Boolean | DataType::Null => Values::Bool(Vec::with_capacity(capacity)),
            DataType::SmallInt => Values::I16(Vec::with_capacity(capacity)),
            DataType::Integer | DataType::Date => Values::I32(Vec::with_capacity(capacity)),
            DataType::BigInt | DataType::Timestamp | DataType::TimestampTz | DataType::Time => Values::I64(Vec::with_capacity(capacity)),
            DataType::Decimal { precision, .. } if precision <= 18 => Values::I64(Vec::with_capacity(capacity)),
            DataType::Decimal { .. } => Values::I128(Vec::with_capacity(capacity)),
            DataType::Real => Values::F32(Vec::with_capacity(capacity)),
            DataType::Double => Values::F64(Vec::with_capacity(capacity)),
            DataType::Char(_) | DataType::Varchar(_) => Values::Str(StrColumnBuilder::with_capacity(capacity)),
            DataType::Interval => Values::Interval(Vec::with_capacity(capacity)),
        };
        ColumnParser { data_type, format, zone, values, validity: None, len: 0 }
    }

    /// Drops the values from row `len` on (a record that failed in a later column).
    fn truncate(&mut self, len: usize) {
        if len >= self.len {
            return;
        }
        match &mut self.values {
            Values::Bool(v) => v.truncate(len),
            Values::I16(v) => v.truncate(len),
            Values::I32(v) => v.truncate(len),
            Values::I64(v) => v.truncate(len),
            Values::I128(v) => v.truncate(len),
            Values::F32(v) => v.truncate(len),
            Values::F64(v) => v.truncate(len),
            Values::Str(v) => v.truncate(len),
            Values::Interval(v) => v.truncate(len),
        }
        if let Some(validity) = &mut self.validity {
            validity.truncate(len);
        }
        self.len = len;
    }

    fn push_null(&mut self) {
        self.validity.get_or_insert_with(|| Bitmap::new(self.len, true)).push(false);
        match &mut self.values {
            Values::Bool(v) => v.push(false),
            Values::I16(v) => v.push(0),
            Values::I32(v) => v.push(0),
            Values::I64(v) => v.push(0),
            Values::I128(v) => v.push(0),
            Values::F32(v) => v.push(0.0),
            Values::F64(v) => v.push(0.0),
            Values::Str(v) => v.push_empty(),
            Values::Interval(v) => v.push(Interval::default()),
        }
        self.len += 1;
    }

    /// Parses one non-NULL field; `Err` carries the reason.
    fn push(&mut self, field: &[u8]) -> std::result::Result<(), String> {
        let invalid = || match &self.format {
            Some(format) => format!("invalid value '{}' for {} in the format '{}'", excerpt(field), self.data_type, format.text),
            None => format!("invalid value '{}' for {}", excerpt(field), self.data_type),
        };
        let text = || std::str::from_utf8(field).map_err(|_| "invalid UTF-8".to_string());
        match (&mut self.values, self.data_type) {
            (Values::Bool(v), _) => v.push(match trim(field).to_ascii_lowercase().as_slice() {
                b"true" | b"t" | b"1" | b"yes" | b"y" => true,
                b"false" | b"f" | b"0" | b"no" | b"n" => false,
                _ => return Err(invalid()),
            }),
            (Values::I16(v), _) => v.push(parse_int(field).and_then(|x| i16::try_from(x).ok()).ok_or_else(invalid)?),
            (Values::I32(v), DataType::Date) => v.push(match &self.format {
                None => parse_date_bytes(trim(field)).ok_or_else(invalid)?,
                Some(format) => format.date(text()?).ok_or_else(invalid)?,
            }),
            (Values::I32(v), _) => v.push(parse_int(field).and_then(|x| i32::try_from(x).ok()).ok_or_else(invalid)?),
            (Values::I64(v), DataType::Timestamp) => v.push(match &self.format {
                None => parse_timestamp(text()?).ok_or_else(invalid)?,
                Some(format) => format.timestamp(text()?).ok_or_else(invalid)?,
            }),
            (Values::I64(v), DataType::TimestampTz) => v.push(match &self.format {
                None => parse_timestamptz(text()?, &self.zone).ok_or_else(invalid)?,
                Some(format) => format.instant(text()?, &self.zone).ok_or_else(invalid)?,
            }),
            (Values::I64(v), DataType::Time) => v.push(parse_time(text()?).ok_or_else(invalid)?),
            (Values::I64(v), DataType::Decimal { precision, scale }) => {
                let parsed = match parse_decimal_bytes_i64(trim(field), scale) {
                    Some(x) if (x as i128).unsigned_abs() < 10u128.pow(precision as u32) => x,
                    _ => parse_decimal(text()?, precision, scale).map_err(|e| e.to_string())? as i64,
                };
                v.push(parsed)
            }
            (Values::I64(v), _) => v.push(parse_int(field).ok_or_else(invalid)?),
            (Values::I128(v), DataType::Decimal { precision, scale }) => {
                v.push(parse_decimal(text()?, precision, scale).map_err(|e| e.to_string())?)
            }
            (Values::I128(v), _) => v.push(text()?.trim().parse().map_err(|_| invalid())?),
            (Values::F32(v), _) => v.push(text()?.trim().parse().map_err(|_| invalid())?),
            (Values::F64(v), _) => v.push(text()?.trim().parse().map_err(|_| invalid())?),
            (Values::Interval(v), _) => v.push(Interval::parse(text()?, None).ok_or_else(invalid)?),
            (Values::Str(builder), data_type) => {
                let mut value = text()?;
                if matches!(data_type, DataType::Char(_)) {
                    value = value.trim_end_matches(' ');
                }
                if let Some(max) = data_type.max_length() {
                    // Byte length bounds the character count from above: check cheaply first.
                    if value.len() > max as usize && value.chars().count() > max as usize {
                        return Err(format!("value too long for {data_type}: '{value}'"));
                    }
                }
                builder.push(value);
            }
        }
        if let Some(validity) = &mut self.validity {
            validity.push(true);
        }
        self.len += 1;
        Ok(())
    }

    fn finish(self) -> Vector {
        fn wrap<T: NativeType>(v: Vec<T>) -> VectorData {
            T::wrap(v.into())
        }
        let data = match self.values {
            Values::Bool(v) => wrap(v),
            Values::I16(v) => wrap(v),
            Values::I32(v) => wrap(v),
            Values::I64(v) => wrap(v),
            Values::I128(v) => wrap(v),
            Values::F32(v) => wrap(v),
            Values::F64(v) => wrap(v),
            Values::Str(b) => VectorData::Str(b.finish()),
            Values::Interval(v) => wrap(v),
        };
        Vector::new(self.data_type, data, self.validity.filter(|v| !v.all_set()))
    }
}

fn trim(field: &[u8]) -> &[u8] {
    let start = field.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(field.len());
    let end = field.iter().rposition(|b| !b.is_ascii_whitespace()).map_or(start, |p| p + 1);
    &field[start..end.max(start)]
}

#[inline]
fn parse_int(field: &[u8]) -> Option<i64> {
    let field = trim(field);
    let (negative, digits) = match field.first()? {
        b'-' => (true, &field[1..]),
        b'+' => (false, &field[1..]),
        _ => (false, field),
    };
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    let mut value: i64 = 0;
    for &b in digits {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        value = value.checked_mul(10)?.checked_add(d as i64)?;
    }
    Some(if negative { -value } else { value })
}

/// Why a record could not be split into fields: the 1-based column and the reason.
#[derive(Debug)]
struct SplitError {
    column: usize,
    message: String,
}

/// At most this many bytes of a field are quoted in an error message.
const MAX_QUOTED_BYTES: usize = 40;

/// `bytes` for an error message: lossy UTF-8, cut after [`MAX_QUOTED_BYTES`].
fn excerpt(bytes: &[u8]) -> String {
    let cut = &bytes[..bytes.len().min(MAX_QUOTED_BYTES)];
    let mut text = String::new();
    for c in String::from_utf8_lossy(cut).chars() {
        if c.is_control() {
            text.extend(c.escape_default());
        } else {
            text.push(c);
        }
    }
    if cut.len() < bytes.len() {
        text.push_str("...");
    }
    text
}

/// Splits one record into fields. A field that starts with the quote character is quoted:
/// it ends at the next quote that is not doubled (or escaped), and only spaces may follow
/// it before the delimiter. Text after the closing quote (`1,"ab"cd,3`) and a quote that
/// is never closed are errors, never silently dropped or absorbed. A quote inside an
/// unquoted field is an ordinary character (`5"` stays `5"`).
fn split_fields<'a>(line: &'a [u8], options: &CsvOptions, fields: &mut Vec<RawField<'a>>) -> std::result::Result<(), SplitError> {
    fields.clear();
    let delimiter = options.delimiter;
    match options.quote {
        Some(quote) if line.contains(&quote) => {
            let escape = options.escape.filter(|&e| e != quote);
            let mut i = 0;
            loop {
                if i < line.len() && line[i] == quote {
                    // Quoted field: doubled quotes (or the escape character) escape.
                    let opening = i;
                    let mut value = Vec::new();
                    let mut closed = false;
                    i += 1;
                    while i < line.len() {
                        let b = line[i];
                        if Some(b) == escape && i + 1 < line.len() {
                            value.push(line[i + 1]);
                            i += 2;
                        } else if b == quote {
                            if i + 1 < line.len() && line[i + 1] == quote {
                                value.push(quote);
                                i += 2;
                            } else {
                                i += 1;
                                closed = true;
                                break;
                            }
                        } else {
                            value.push(b);
                            i += 1;
                        }
                    }
                    let column = fields.len() + 1;
                    if !closed {
                        return Err(SplitError { column, message: format!("unterminated quoted field {}", excerpt(&line[opening..])) });
                    }
                    let end = line[i..].iter().position(|&b| b == delimiter).map_or(line.len(), |p| i + p);
                    let trailing = &line[i..end];
                    if trailing.iter().any(|&b| b != b' ' && b != b'\t') {
                        return Err(SplitError {
                            column,
                            message: format!(
                                "unexpected text after the closing quote: {} (a quote inside a quoted field must be doubled)",
                                excerpt(&line[opening..end])
                            ),
                        });
                    }
                    fields.push(RawField::Quoted(value));
                    i = end;
                } else {
                    let end = line[i..].iter().position(|&b| b == delimiter).map_or(line.len(), |p| i + p);
                    fields.push(RawField::Plain(&line[i..end]));
                    i = end;
                }
                if i >= line.len() {
                    break;
                }
                i += 1; // the delimiter
                if i == line.len() {
                    fields.push(RawField::Plain(&line[i..]));
                    break;
                }
            }
        }
        _ => {
            let mut start = 0;
            for end in memchr::memchr_iter(delimiter, line) {
                fields.push(RawField::Plain(&line[start..end]));
                start = end + 1;
            }
            fields.push(RawField::Plain(&line[start..]));
        }
    }
    Ok(())
}

enum RawField<'a> {
    Plain(&'a [u8]),
    Quoted(Vec<u8>),
}

/// What a piece of a file parsed into: its columns and the records skipped under
/// `ignore_errors`.
struct ParsedPiece {
    columns: Vec<Vector>,
    rejects: Vec<Reject>,
}

/// A record that could not be read: where and why.
struct RecordError {
    column: Option<usize>,
    error_type: &'static str,
    message: String,
}

/// Parses `data` (whole lines) into columns; `first_line` numbers the first line.
fn parse_piece(data: &[u8], first_line: u64, fields: &[Field], options: &CsvOptions, file: &str) -> Result<ParsedPiece> {
    // A record takes at least a byte per field: a wide table has fewer rows per byte.
    let estimated_rows = data.len() / (4 * fields.len()).max(64) + 1;
    let default_format = ColumnFormat::default();
    let formats: Vec<&ColumnFormat> = (0..fields.len()).map(|i| options.columns.get(i).unwrap_or(&default_format)).collect();
    let mut parsers: Vec<ColumnParser> = fields
        .iter()
        .zip(&formats)
        .map(|(f, format)| ColumnParser::new(f.data_type, format.format.clone(), options.time_zone, estimated_rows))
        .collect();
    let column_nulls: Vec<Vec<&[u8]>> = formats.iter().map(|f| f.null_tokens.iter().map(|t| t.as_bytes()).collect()).collect();
    let unquoted_nulls: Vec<Vec<&[u8]>> = formats.iter().map(|f| f.unquoted_null_tokens.iter().map(|t| t.as_bytes()).collect()).collect();
    let null_texts: Vec<&[u8]> = options.null.iter().map(|t| t.as_bytes()).collect();
    let mut rejects = Vec::new();
    let mut rows = 0usize;
    let mut line_number = first_line;
    let mut parts: Vec<RawField> = Vec::with_capacity(fields.len() + 1);
    let mut start = 0;
    let quote = options.quote.filter(|q| memchr::memchr(*q, data).is_some());
    let mut record_lines = 1u64;
    while start < data.len() {
        line_number += record_lines - 1;
        let end = match quote {
            // A quoted field may contain line breaks: the record ends at the first
            // newline outside quotes.
            Some(_) => record_end(data, start, options),
            None => memchr::memchr(b'\n', &data[start..]).map_or(data.len(), |p| start + p),
        };
        let mut line = &data[start..end];
        record_lines = 1 + if quote.is_some() { memchr::memchr_iter(b'\n', line).count() as u64 } else { 0 };
        start = end + 1;
        if line.last() == Some(&b'\r') {
            line = &line[..line.len() - 1];
        }
        if line.is_empty() {
            line_number += 1;
            continue;
        }
        let nulls = NullTexts { all_columns: &null_texts, column: &column_nulls, unquoted: &unquoted_nulls };
        let outcome = parse_record(line, fields, options, &mut parts, &mut parsers, &nulls);
        match outcome {
            Ok(()) => rows += 1,
            Err(error) => {
                for parser in parsers.iter_mut() {
                    parser.truncate(rows);
                }
                let column_name = error.column.and_then(|c| fields.get(c - 1)).map(|f| f.name.clone());
                if !options.ignore_errors {
                    let place = match (error.column, &column_name) {
                        (Some(c), Some(name)) => format!("column {c} (\"{name}\"): "),
                        (Some(c), None) => format!("column {c}: "),
                        _ => String::new(),
                    };
                    return Err(ApiaryError::Load {
                        file: file.to_string(),
                        line: line_number,
                        message: format!("{place}{}", error.message),
                    });
                }
                rejects.push(Reject {
                    line: line_number,
                    column: error.column,
                    column_name,
                    error_type: error.error_type,
                    csv_line: String::from_utf8_lossy(line).into_owned(),
                    message: error.message,
                });
            }
        }
        line_number += 1;
    }
    Ok(ParsedPiece { columns: parsers.into_iter().map(|p| p.finish()).collect(), rejects })
}

/// The texts that mean NULL: in an unquoted field of any column (the `NULL` option;
/// empty: an empty unquoted field), in a column's fields, in its unquoted fields.
struct NullTexts<'a> {
    all_columns: &'a [&'a [u8]],
    column: &'a [Vec<&'a [u8]>],
    unquoted: &'a [Vec<&'a [u8]>],
}

/// Splits one record and appends its values to `parsers` (some of them, on an error: the
/// caller truncates).
fn parse_record<'a>(
    line: &'a [u8],
    fields: &[Field],
    options: &CsvOptions,
    parts: &mut Vec<RawField<'a>>,
    parsers: &mut [ColumnParser],
    nulls: &NullTexts,
) -> std::result::Result<(), RecordError> {
    if let Err(error) = split_fields(line, options, parts) {
        return Err(RecordError { column: Some(error.column), error_type: "UNQUOTED VALUE", message: error.message });
    }
    // A trailing delimiter (TPC-H .tbl files) leaves one empty field at the end.
    if parts.len() == fields.len() + 1 && matches!(parts.last(), Some(RawField::Plain(f)) if f.is_empty()) {
        parts.pop();
    }
    if parts.len() != fields.len() {
        return Err(RecordError {
            column: None,
            error_type: if parts.len() < fields.len() { "MISSING COLUMNS" } else { "TOO MANY COLUMNS" },
            message: format!("expected {} columns, found {}", fields.len(), parts.len()),
        });
    }
    for (column, (parser, part)) in parsers.iter_mut().zip(parts.iter()).enumerate() {
        let value: &[u8] = match part {
            RawField::Plain(f) => f,
            RawField::Quoted(f) => f,
        };
        let is_null = match part {
            // Without NULL strings an empty unquoted field is NULL; with them, only they are.
            RawField::Plain(f) => {
                (nulls.all_columns.is_empty() && f.is_empty())
                    || nulls.all_columns.contains(f)
                    || nulls.column[column].contains(f)
                    || nulls.unquoted[column].contains(f)
            }
            RawField::Quoted(f) => nulls.column[column].contains(&f.as_slice()),
        };
        if is_null {
            parser.push_null();
        } else if let Err(message) = parser.push(value) {
            let error_type = if message == "invalid UTF-8" { "INVALID UNICODE" } else { "CAST" };
            return Err(RecordError { column: Some(column + 1), error_type, message });
        }
    }
    Ok(())
}

/// End of the record starting at `start`: the first newline outside a quoted field. Reads
/// quotes exactly as [`split_fields`] does (a quote opens a field only at its start, and
/// the escape character protects the byte after it), so both agree on where records end.
fn record_end(data: &[u8], start: usize, options: &CsvOptions) -> usize {
    let Some(quote) = options.quote else {
        return memchr::memchr(b'\n', &data[start..]).map_or(data.len(), |p| start + p);
    };
    let delimiter = options.delimiter;
    let escape = options.escape.filter(|&e| e != quote);
    let mut i = start;
    // At the start of a field.
    while i < data.len() {
        if data[i] == quote {
            // A quoted field: skip to its closing quote.
            i += 1;
            loop {
                let Some(p) = (match escape {
                    Some(e) => memchr::memchr2(quote, e, &data[i..]),
                    None => memchr::memchr(quote, &data[i..]),
                }) else {
                    return data.len();
                };
                i += p;
                // An escaped byte or a doubled quote is part of the value.
                if Some(data[i]) == escape || data.get(i + 1) == Some(&quote) {
                    i += 2;
                } else {
                    i += 1;
                    break;
                }
                if i >= data.len() {
                    return data.len();
                }
            }
        }
        // The rest of the field (unquoted text, or what follows a closing quote).
        match memchr::memchr2(delimiter, b'\n', &data[i.min(data.len())..]) {
            Some(p) if data[i + p] == b'\n' => return i + p,
            Some(p) => i += p + 1,
            None => return data.len(),
        }
    }
    data.len()
}

/// Cuts `data` into about `pieces` slices that end at line boundaries.
fn line_pieces(data: &[u8], pieces: usize) -> Vec<(usize, usize)> {
    let target = (data.len() / pieces.max(1)).max(1 << 16);
    let mut ranges = Vec::new();
    let mut start = 0;
    while start < data.len() {
        let mut end = (start + target).min(data.len());
        if end < data.len() {
            end = memchr::memchr(b'\n', &data[end..]).map_or(data.len(), |p| end + p + 1);
        }
        ranges.push((start, end));
        start = end;
    }
    ranges
}

/// Bytes read from the file per worker thread and round: large enough that every thread
/// gets whole pieces, small enough that a load never holds the whole file in memory.
const SEGMENT_BYTES_PER_THREAD: usize = 32 << 20;

/// Streams a delimited file through `sink`, one parsed piece (columns) at a time, in file
/// order. The file is read a segment at a time; each segment is cut at a record boundary
/// and parsed by all threads, so memory stays at a few segments however large the file.
/// Returns the records skipped under `ignore_errors`.
pub fn for_each_piece(
    path: &Path,
    options: &CsvOptions,
    fields: &[Field],
    threads: usize,
    sink: impl FnMut(Vec<Vector>) -> Result<()>,
) -> Result<Vec<Reject>> {
    stream_pieces(path, options, fields, threads, SEGMENT_BYTES_PER_THREAD * threads.max(1), sink)
}

/// At most this many skipped records are kept for `reject_errors` (all are counted).
pub const MAX_KEPT_REJECTS: usize = 100_000;

/// Reads until `buffer` holds `wanted` more bytes or the input ends; whether it ended.
fn fill(input: &mut dyn Read, buffer: &mut Vec<u8>, wanted: usize, path: &Path) -> Result<bool> {
    let read = input.take(wanted as u64).read_to_end(buffer).map_err(|e| read_error(path, e))?;
    Ok(read < wanted)
}

/// The length of the first `lines` lines of `data` (`None`: fewer lines end in it).
fn skipped_prefix(data: &[u8], lines: usize) -> Option<usize> {
    if lines == 0 {
        return Some(0);
    }
    memchr::memchr_iter(b'\n', data).nth(lines - 1).map(|p| p + 1)
}

fn stream_pieces(
    path: &Path,
    options: &CsvOptions,
    fields: &[Field],
    threads: usize,
    segment_bytes: usize,
    mut sink: impl FnMut(Vec<Vector>) -> Result<()>,
) -> Result<Vec<Reject>> {
    let mut input = open_input(path, options.compression)?;
    let mut rejects = Vec::new();
    let file_name = path.display().to_string();
    let threads = threads.max(1);
    let mut segment_bytes = segment_bytes.max(1);
    let mut buffer: Vec<u8> = Vec::new();
    let mut at_start = true;
    let mut line = 1u64;
    let mut eof = false;
    while !eof || !buffer.is_empty() {
        // Top the buffer up to a segment (what the last round left over comes first). The
        // buffer grows with what is read, so a small file never allocates a whole segment.
        if !eof && buffer.len() < segment_bytes {
            let wanted = segment_bytes - buffer.len();
            eof = fill(&mut input, &mut buffer, wanted, path)?;
        }
        let mut skip = 0;
        if at_start {
            if buffer.starts_with(b"\xEF\xBB\xBF") {
                skip = 3;
            }
            if options.skip_lines > 0 {
                match skipped_prefix(&buffer[skip..], options.skip_lines) {
                    Some(n) => skip += n,
                    None if eof => skip = buffer.len(),
                    None if buffer.len() > options.max_line_size.saturating_mul(options.skip_lines.max(1)) => {
                        return Err(line_too_long(&file_name, 1, options))
                    }
                    None => {
                        segment_bytes *= 2;
                        continue;
                    }
                }
                line = 1 + options.skip_lines as u64;
            }
            if options.header {
                // The header is one record (a quoted name may hold a line break). Its
                // quoting must be sound: an open quote would swallow the rows after it.
                let end = record_end(&buffer, skip, options);
                let header = &buffer[skip..end.min(buffer.len())];
                if end < buffer.len() {
                    skip = end + 1;
                } else if eof {
                    skip = buffer.len();
                } else if buffer.len() > options.max_line_size {
                    return Err(line_too_long(&file_name, 1, options));
                } else {
                    segment_bytes *= 2;
                    continue;
                }
                let header = header.strip_suffix(b"\r").unwrap_or(header);
                if let Err(error) = split_fields(header, options, &mut Vec::new()) {
                    return Err(ApiaryError::Load {
                        file: file_name,
                        line: 1,
                        message: format!("column {} of the header: {}", error.column, error.message),
                    });
                }
                line = 1 + memchr::memchr_iter(b'\n', &buffer[..skip]).count() as u64;
            }
            at_start = false;
        }
        let body = &buffer[skip..];
        let end = if eof { body.len() } else { last_record_end(body, options) };
        if end == 0 && !eof {
            // One record longer than a segment: read more before parsing, up to the limit.
            if body.len() > options.max_line_size {
                return Err(line_too_long(&file_name, line, options));
            }
            buffer.drain(..skip);
            segment_bytes *= 2;
            continue;
        }
        let body = &body[..end];
        line = parse_segment(body, line, fields, options, threads, &file_name, &mut sink, &mut rejects)?;
        buffer.drain(..skip + end);
    }
    Ok(rejects)
}

/// The length of the longest prefix of `data` made of whole records (0: none ends).
fn last_record_end(data: &[u8], options: &CsvOptions) -> usize {
    match options.quote.filter(|q| memchr::memchr(*q, data).is_some()) {
        // Newlines may sit inside quoted fields: walk the records.
        Some(_) => {
            let mut start = 0;
            loop {
                let end = record_end(data, start, options);
                if end >= data.len() {
                    return start;
                }
                start = end + 1;
            }
        }
        None => memchr::memrchr(b'\n', data).map_or(0, |p| p + 1),
    }
}

/// Parses whole records in parallel pieces and hands them to `sink` in order; returns the
/// number of the line after the segment.
fn parse_segment(
    body: &[u8],
    first_line: u64,
    fields: &[Field],
    options: &CsvOptions,
    threads: usize,
    file: &str,
    sink: &mut impl FnMut(Vec<Vector>) -> Result<()>,
    rejects: &mut Vec<Reject>,
) -> Result<u64> {
    let quoted = options.quote.is_some_and(|q| memchr::memchr(q, body).is_some());
    let ranges = if quoted { vec![(0, body.len())] } else { line_pieces(body, threads * 4) };
    // Each piece with the number of its first line.
    let mut pieces = Vec::with_capacity(ranges.len());
    let mut line = first_line;
    for (s, e) in ranges {
        pieces.push((line, s, e));
        line += memchr::memchr_iter(b'\n', &body[s..e]).count() as u64;
    }
    let results =
        apiary_common::parallel::map_in_parallel(&pieces, threads, |&(start, s, e)| parse_piece(&body[s..e], start, fields, options, file));
    for piece in results {
        let piece = piece?;
        let room = MAX_KEPT_REJECTS.saturating_sub(rejects.len());
        rejects.extend(piece.rejects.into_iter().take(room));
        sink(piece.columns)?
    }
    Ok(line)
}

/// Appends `value` as a CSV field, quoting when needed.
pub fn write_field(out: &mut String, value: &str, delimiter: char) {
    if value.contains([delimiter, '"', '\n', '\r']) || value.is_empty() {
        out.push('"');
        out.push_str(&value.replace('"', "\"\""));
        out.push('"');
    } else {
        out.push_str(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses a delimited file into column vectors (one `Vec<Vector>` per piece, in order).
    fn read_delimited(path: &Path, options: &CsvOptions, fields: &[Field], threads: usize) -> Result<Vec<Vec<Vector>>> {
        let mut pieces = Vec::new();
        for_each_piece(path, options, fields, threads, |piece| {
            pieces.push(piece);
            Ok(())
        })?;
        Ok(pieces)
    }

    fn fields_of(line: &str) -> Vec<String> {
        let mut parts = Vec::new();
        split_fields(line.as_bytes(), &CsvOptions::default(), &mut parts).unwrap();
        parts
            .iter()
            .map(|p| match p {
                RawField::Plain(f) => String::from_utf8_lossy(f).to_string(),
                RawField::Quoted(f) => format!("[{}]", String::from_utf8_lossy(f)),
            })
            .collect()
    }

    #[test]
    fn splits_quoted_fields() {
        assert_eq!(fields_of("a,b,c"), ["a", "b", "c"]);
        assert_eq!(fields_of("\"x,y\",2"), ["[x,y]", "2"]);
        assert_eq!(fields_of("\"say \"\"hi\"\"\",3"), ["[say \"hi\"]", "3"]);
        assert_eq!(fields_of("1,"), ["1", ""]);
        assert_eq!(fields_of("\"\",x"), ["[]", "x"]);
        assert_eq!(fields_of("\"a\"  ,b"), ["[a]", "b"], "spaces may follow a closing quote");
        assert_eq!(fields_of("5\",6\"\"x"), ["5\"", "6\"\"x"], "a quote inside an unquoted field is text");
    }

    fn split_error(line: &str, options: &CsvOptions) -> (usize, String) {
        let mut parts = Vec::new();
        let error = split_fields(line.as_bytes(), options, &mut parts).unwrap_err();
        (error.column, error.message)
    }

    /// Regression (issue 10, item 5): `1,"ab"cd,3` silently dropped `cd`.
    #[test]
    fn text_after_a_closing_quote_or_an_open_quote_is_an_error() {
        let (column, message) = split_error("1,\"ab\"cd,3", &CsvOptions::default());
        assert_eq!(column, 2);
        assert!(message.contains("after the closing quote") && message.contains("\"ab\"cd"), "{message}");
        let (column, message) = split_error("1,2,\"open", &CsvOptions::default());
        assert_eq!(column, 3);
        assert!(message.contains("unterminated quoted field"), "{message}");
        let escaped = CsvOptions { escape: Some(b'\\'), ..CsvOptions::default() };
        let (column, _) = split_error("\"a\\\"b\"c", &escaped);
        assert_eq!(column, 1, "an escaped quote does not close the field, the next one does");
    }

    /// `record_end` and `split_fields` read quotes the same way: a quote in the middle of
    /// an unquoted field does not start a quoted section spanning lines, and an escaped
    /// quote does not end one.
    #[test]
    fn records_end_where_fields_say() {
        let options = CsvOptions::default();
        let data = b"5\",a\n6\",b\n";
        assert_eq!(record_end(data, 0, &options), 4);
        let data = b"1,\"x\ny\",z\n2";
        assert_eq!(record_end(data, 0, &options), 9);
        let escaped = CsvOptions { escape: Some(b'\\'), ..CsvOptions::default() };
        let data = b"\"a\\\"\nb\",c\nnext";
        assert_eq!(record_end(data, 0, &escaped), 9);
        let open = b"\"never closed\n";
        assert_eq!(record_end(open, 0, &options), open.len(), "an open quote runs to the end");
    }

    /// Through the loader: the error names the file, the line and the column.
    #[test]
    fn malformed_quotes_name_line_and_column() {
        let dir = std::env::temp_dir().join(format!("apiary-csv-quotes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("quotes.csv");
        let fields: Vec<Field> = ["a", "b", "c"].iter().map(|name| Field::new(*name, DataType::Varchar(None), true)).collect();
        std::fs::write(&path, "x,\"multi\nline\",y\n1,\"ab\"cd,3\n").unwrap();
        let error = read_delimited(&path, &CsvOptions::default(), &fields, 2).unwrap_err().to_string();
        assert!(error.contains("quotes.csv:3: column 2 (\"b\"): unexpected text after the closing quote"), "{error}");
        std::fs::write(&path, "x,y,z\n1,2,\"open\n4,5,6\n").unwrap();
        let error = read_delimited(&path, &CsvOptions::default(), &fields, 2).unwrap_err().to_string();
        assert!(error.contains("quotes.csv:2: column 3 (\"c\"): unterminated quoted field"), "{error}");
        std::fs::remove_dir_all(&dir).ok();
    }

    /// Tiny segments cut records everywhere (inside quoted fields, CRLF pairs, the
    /// header): the result must not depend on where the segments fall.
    #[test]
    fn streamed_segments_parse_like_one_read() {
        let dir = std::env::temp_dir().join(format!("apiary-csv-stream-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("data.csv");
        let mut text = String::from("\u{feff}id,note\r\n");
        for i in 0..300 {
            match i % 3 {
                0 => text.push_str(&format!("{i},plain {i}\r\n")),
                1 => text.push_str(&format!("{i},\"quoted, with\nnewline {i}\"\n")),
                _ => text.push_str(&format!("{i},\n")),
            }
        }
        std::fs::write(&path, &text).unwrap();
        let fields = vec![Field::new("id", DataType::Integer, true), Field::new("note", DataType::Varchar(None), true)];
        let options = CsvOptions { header: true, ..CsvOptions::default() };
        let collect = |segment: usize, threads: usize| {
            let mut rows: Vec<String> = Vec::new();
            stream_pieces(&path, &options, &fields, threads, segment, |piece| {
                for r in 0..piece[0].len() {
                    rows.push(format!("{}|{}", piece[0].get_scalar(r), piece[1].get_scalar(r)));
                }
                Ok(())
            })
            .unwrap();
            rows
        };
        let whole = collect(1 << 20, 1);
        assert_eq!(whole.len(), 300);
        assert_eq!(whole[1], "1|quoted, with\nnewline 1");
        assert_eq!(whole[2], "2|NULL");
        for segment in [1, 7, 64, 1000] {
            assert_eq!(collect(segment, 2), whole, "segment of {segment} bytes");
        }
        // Errors still name the right line when the bad record is in a later segment.
        std::fs::write(&path, "id,note\n1,a\n2,b\nx,c\n").unwrap();
        let error = stream_pieces(&path, &options, &fields, 2, 5, |_| Ok(())).unwrap_err().to_string();
        assert!(error.contains(":4:"), "{error}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn pieces_end_at_newlines() {
        let data: Vec<u8> = (0..100_000).flat_map(|i| format!("{i}\n").into_bytes()).collect();
        let pieces = line_pieces(&data, 8);
        assert!(pieces.len() > 1);
        for (s, e) in &pieces {
            assert!(*e == data.len() || data[e - 1] == b'\n');
            assert!(*s == 0 || data[s - 1] == b'\n');
        }
    }
}
