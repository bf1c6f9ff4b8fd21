//! `COPY ... FROM STDIN` and `COPY ... TO STDOUT`: PostgreSQL's text and CSV formats on
//! the wire.
//!
//! ```text
//!  FROM STDIN:  CopyData* ─▶ Spool (text format converted to CSV on the fly; CSV as is)
//!               ─▶ temporary file ─▶ the engine's COPY FROM 'file' (parallel parser,
//!               one atomic append) ─▶ file removed
//!  TO STDOUT:   the query's result ─▶ one CopyData per row (text or CSV)
//! ```
//!
//! Spooling to a file keeps a large load out of memory and reuses the engine's loader,
//! its error messages and its all-or-nothing commit.

use std::io::Write;
use std::path::PathBuf;

use apiary::ast;
use apiary_types::Vector;
use bytes::{BufMut, BytesMut};

use crate::values::put_text;

/// The wire format of a COPY.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopyFormat {
    /// PostgreSQL's text format: delimiter (tab), NULL as `\N`, backslash escapes.
    Text { delimiter: u8, null: String },
    /// CSV: delimiter (comma), quote, NULL as an unquoted empty field (or the NULL text).
    Csv { delimiter: u8, quote: u8, escape: u8, null: String, header: bool },
}

/// Reads the format from a COPY statement's options (the ones that matter on the wire).
pub fn copy_format(options: &[ast::CopyOption]) -> Result<CopyFormat, String> {
    let mut csv = false;
    let mut delimiter = None;
    let mut null = None;
    let mut quote = b'"';
    let mut escape = None;
    let mut header = false;
    for option in options {
        match option {
            ast::CopyOption::Format(name) => match name.value.to_ascii_lowercase().as_str() {
                "csv" => csv = true,
                "text" => csv = false,
                other => return Err(format!("COPY format \"{other}\" is not supported with STDIN/STDOUT (text or csv)")),
            },
            ast::CopyOption::Delimiter(c) => delimiter = Some(ascii(*c, "DELIMITER")?),
            ast::CopyOption::Null(text) => null = Some(text.clone()),
            ast::CopyOption::Quote(c) => quote = ascii(*c, "QUOTE")?,
            ast::CopyOption::Escape(c) => escape = Some(ascii(*c, "ESCAPE")?),
            ast::CopyOption::Header(h) => header = *h,
            ast::CopyOption::Encoding(e) if e.eq_ignore_ascii_case("utf8") || e.eq_ignore_ascii_case("utf-8") => {}
            other => return Err(format!("COPY option {other} is not supported")),
        }
    }
    if csv {
        Ok(CopyFormat::Csv {
            delimiter: delimiter.unwrap_or(b','),
            quote,
            escape: escape.unwrap_or(quote),
            null: null.unwrap_or_default(),
            header,
        })
    } else {
        if header {
            return Err("COPY HEADER is available only in CSV mode".to_string());
        }
        Ok(CopyFormat::Text { delimiter: delimiter.unwrap_or(b'\t'), null: null.unwrap_or_else(|| "\\N".to_string()) })
    }
}

fn ascii(c: char, what: &str) -> Result<u8, String> {
    if c.is_ascii() && c != '\n' && c != '\r' {
        Ok(c as u8)
    } else {
        Err(format!("COPY {what} must be a single one-byte character"))
    }
}

/// The options of the engine's `COPY ... FROM 'spool file'` for data spooled in `format`.
pub fn spool_options(format: &CopyFormat) -> Vec<ast::CopyOption> {
    let ident = |s: &str| ast::Ident::new(s);
    match format {
        // Text is converted to plain CSV: empty unquoted fields are NULL.
        CopyFormat::Text { .. } => vec![ast::CopyOption::Format(ident("csv"))],
        CopyFormat::Csv { delimiter, quote, escape, null, header } => {
            let mut options = vec![
                ast::CopyOption::Format(ident("csv")),
                ast::CopyOption::Delimiter(*delimiter as char),
                ast::CopyOption::Quote(*quote as char),
                ast::CopyOption::Header(*header),
            ];
            if escape != quote {
                options.push(ast::CopyOption::Escape(*escape as char));
            }
            if !null.is_empty() {
                options.push(ast::CopyOption::Null(null.clone()));
            }
            options
        }
    }
}

/// Data of a COPY FROM STDIN on its way to a temporary file.
pub struct Spool {
    pub path: PathBuf,
    file: std::io::BufWriter<std::fs::File>,
    format: CopyFormat,
    /// Text format: the unfinished last line of the data so far.
    partial: Vec<u8>,
    /// Text format: `\.` was seen; the rest is ignored.
    ended: bool,
    line: u64,
    pub bytes: u64,
}

impl Drop for Spool {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Spool {
    pub fn create(format: CopyFormat, id: u64) -> std::io::Result<Spool> {
        let path = std::env::temp_dir().join(format!("apiary-copy-{}-{id}.csv", std::process::id()));
        let file = std::fs::OpenOptions::new().write(true).create_new(true).open(&path)?;
        Ok(Spool { path, file: std::io::BufWriter::new(file), format, partial: Vec::new(), ended: false, line: 0, bytes: 0 })
    }

    /// Takes one CopyData message. Errors are the client's (malformed data) or I/O.
    pub fn write(&mut self, data: &[u8]) -> Result<(), String> {
        self.bytes += data.len() as u64;
        match &self.format {
            CopyFormat::Csv { .. } => self.file.write_all(data).map_err(io_error),
            CopyFormat::Text { .. } => {
                let mut rest = data;
                while let Some(end) = memchr(b'\n', rest) {
                    if self.partial.is_empty() {
                        self.text_line(&rest[..end])?;
                    } else {
                        self.partial.extend_from_slice(&rest[..end]);
                        let line = std::mem::take(&mut self.partial);
                        self.text_line(&line)?;
                    }
                    rest = &rest[end + 1..];
                }
                self.partial.extend_from_slice(rest);
                Ok(())
            }
        }
    }

    /// Ends the data; the file is ready for the engine.
    pub fn finish(&mut self) -> Result<(), String> {
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            self.text_line(&line)?;
        }
        self.file.flush().map_err(io_error)
    }

    /// Converts one line of text format to a CSV record.
    fn text_line(&mut self, line: &[u8]) -> Result<(), String> {
        self.line += 1;
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if self.ended {
            return Ok(());
        }
        if line == b"\\." {
            self.ended = true;
            return Ok(());
        }
        let CopyFormat::Text { delimiter, null } = &self.format else { return Ok(()) };
        let mut record = Vec::with_capacity(line.len() + 8);
        for (idx, raw) in line.split(|&b| b == *delimiter).enumerate() {
            if idx > 0 {
                record.push(b',');
            }
            // NULL is matched before escapes are decoded, as in PostgreSQL.
            if raw == null.as_bytes() {
                continue;
            }
            let value = unescape_text(raw).map_err(|e| format!("COPY data, line {}: {e}", self.line))?;
            push_csv_field(&mut record, &value, b',', b'"');
        }
        record.push(b'\n');
        self.file.write_all(&record).map_err(io_error)
    }
}

fn io_error(e: std::io::Error) -> String {
    format!("writing the COPY spool file: {e}")
}

fn memchr(needle: u8, haystack: &[u8]) -> Option<usize> {
    haystack.iter().position(|&b| b == needle)
}

/// Decodes a text-format field's backslash escapes (`\t`, `\n`, `\\`, octal, `\x` hex).
fn unescape_text(raw: &[u8]) -> Result<Vec<u8>, String> {
    if !raw.contains(&b'\\') {
        return Ok(raw.to_vec());
    }
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        i += 1;
        if b != b'\\' {
            out.push(b);
            continue;
        }
        let Some(&next) = raw.get(i) else {
            return Err("a field ends with a backslash".to_string());
        };
        i += 1;
        match next {
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(11),
            b'0'..=b'7' => {
                let mut value = (next - b'0') as u32;
                for _ in 0..2 {
                    match raw.get(i) {
                        Some(&d @ b'0'..=b'7') => {
                            value = value * 8 + (d - b'0') as u32;
                            i += 1;
                        }
                        _ => break,
                    }
                }
                out.push(value as u8);
            }
            b'x' => {
                let mut value = 0u32;
                let mut digits = 0;
                while digits < 2 {
                    match raw.get(i).and_then(|d| (*d as char).to_digit(16)) {
                        Some(d) => {
                            value = value * 16 + d;
                            i += 1;
                            digits += 1;
                        }
                        None => break,
                    }
                }
                if digits == 0 {
                    out.push(b'x');
                } else {
                    out.push(value as u8);
                }
            }
            other => out.push(other),
        }
    }
    Ok(out)
}

/// Appends a CSV field, quoted when it must be (empty strings too: an unquoted empty
/// field is NULL).
fn push_csv_field(out: &mut Vec<u8>, value: &[u8], delimiter: u8, quote: u8) {
    let needs_quotes = value.is_empty() || value.iter().any(|&b| b == delimiter || b == quote || b == b'\n' || b == b'\r');
    if needs_quotes {
        push_csv_field_forced(out, value, quote);
    } else {
        out.extend_from_slice(value);
    }
}

/// Appends one row of `columns` in `format`, with its line end (TIMESTAMPTZ in `zone`).
pub fn put_row(
    out: &mut BytesMut,
    columns: &[Vector],
    row: usize,
    format: &CopyFormat,
    scratch: &mut BytesMut,
    zone: &apiary_types::TimeZone,
) {
    let (delimiter, null) = match format {
        CopyFormat::Text { delimiter, null } | CopyFormat::Csv { delimiter, null, .. } => (*delimiter, null),
    };
    for (idx, column) in columns.iter().enumerate() {
        if idx > 0 {
            out.put_u8(delimiter);
        }
        if column.is_null(row) {
            out.put_slice(null.as_bytes());
            continue;
        }
        scratch.clear();
        put_text(scratch, column, row, zone);
        match format {
            CopyFormat::Text { .. } => {
                for &b in scratch.iter() {
                    match b {
                        b'\\' => out.put_slice(b"\\\\"),
                        b'\n' => out.put_slice(b"\\n"),
                        b'\r' => out.put_slice(b"\\r"),
                        b'\t' => out.put_slice(b"\\t"),
                        _ if b == delimiter => {
                            out.put_u8(b'\\');
                            out.put_u8(b);
                        }
                        _ => out.put_u8(b),
                    }
                }
            }
            CopyFormat::Csv { quote, .. } => {
                let mut field = Vec::with_capacity(scratch.len() + 2);
                // An empty string, or a value equal to the NULL text, is quoted so that it
                // reads back as a value.
                if scratch.is_empty() || scratch[..] == *null.as_bytes() {
                    push_csv_field_forced(&mut field, scratch, *quote);
                } else {
                    push_csv_field(&mut field, scratch, delimiter, *quote);
                }
                out.put_slice(&field);
            }
        }
    }
    out.put_u8(b'\n');
}

fn push_csv_field_forced(out: &mut Vec<u8>, value: &[u8], quote: u8) {
    out.push(quote);
    for &b in value {
        if b == quote {
            out.push(quote);
        }
        out.push(b);
    }
    out.push(quote);
}

/// The CSV header line (column names).
pub fn put_header(out: &mut BytesMut, names: &[String], delimiter: u8, quote: u8) {
    for (idx, name) in names.iter().enumerate() {
        if idx > 0 {
            out.put_u8(delimiter);
        }
        let mut field = Vec::new();
        push_csv_field(&mut field, name.as_bytes(), delimiter, quote);
        out.put_slice(&field);
    }
    out.put_u8(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spool_text(chunks: &[&[u8]]) -> String {
        let format = CopyFormat::Text { delimiter: b'\t', null: "\\N".into() };
        let mut spool = Spool::create(format, rand_id()).unwrap();
        for chunk in chunks {
            spool.write(chunk).unwrap();
        }
        spool.finish().unwrap();
        std::fs::read_to_string(&spool.path).unwrap()
    }

    fn rand_id() -> u64 {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1_000_000);
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    #[test]
    fn text_format_becomes_csv() {
        // A line split across messages, NULL, an empty string, escapes, a comma and a quote.
        let csv = spool_text(&[b"1\ta\\tb\t\\N\n2\t", b"\tx,\"y\"\\\\\n\\.\nignored\n"]);
        assert_eq!(csv, "1,a\tb,\n2,\"\",\"x,\"\"y\"\"\\\"\n");
        assert_eq!(unescape_text(b"\\101\\x41\\q").unwrap(), b"AAq");
        assert!(unescape_text(b"abc\\").is_err());
    }

    #[test]
    fn formats_from_options() {
        assert_eq!(copy_format(&[]).unwrap(), CopyFormat::Text { delimiter: b'\t', null: "\\N".into() });
        let csv = copy_format(&[ast::CopyOption::Format(ast::Ident::new("csv")), ast::CopyOption::Header(true)]).unwrap();
        assert_eq!(csv, CopyFormat::Csv { delimiter: b',', quote: b'"', escape: b'"', null: String::new(), header: true });
        assert!(copy_format(&[ast::CopyOption::Format(ast::Ident::new("binary"))]).is_err());
        assert!(copy_format(&[ast::CopyOption::Header(true)]).is_err());
    }

    #[test]
    fn rows_in_both_formats() {
        let strings = Vector::from_scalar(&apiary::ScalarValue::Utf8("a\tb,c".into()), apiary::DataType::Varchar(None), 1);
        let null = Vector::nulls(apiary::DataType::Integer, 1);
        let empty = Vector::from_scalar(&apiary::ScalarValue::Utf8(String::new()), apiary::DataType::Varchar(None), 1);
        let columns = vec![strings, null, empty];
        let mut out = BytesMut::new();
        let mut scratch = BytesMut::new();
        put_row(
            &mut out,
            &columns,
            0,
            &CopyFormat::Text { delimiter: b'\t', null: "\\N".into() },
            &mut scratch,
            &apiary_types::TimeZone::UTC,
        );
        assert_eq!(&out[..], b"a\\tb,c\t\\N\t\n");
        out.clear();
        let csv = CopyFormat::Csv { delimiter: b',', quote: b'"', escape: b'"', null: String::new(), header: false };
        put_row(&mut out, &columns, 0, &csv, &mut scratch, &apiary_types::TimeZone::UTC);
        assert_eq!(&out[..], b"\"a\tb,c\",,\"\"\n");
    }
}
