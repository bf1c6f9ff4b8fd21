//! Fuzzing the CSV reader: random and mutated CSV files through `COPY t FROM` (declared
//! types) and `read_csv` (inferred names and types).
//!
//! Each case writes one file and loads it both ways. Two kinds of case:
//!
//! * **Round trip**: a well-formed file of random strings (delimiters, quotes, line
//!   breaks, CR, unicode, empty strings and NULLs inside values; CRLF line ends, a BOM, a
//!   header, other delimiters, QUOTE/ESCAPE/NULL options). COPY into VARCHAR columns must
//!   succeed and give back exactly the values written, in order; read_csv must give as
//!   many rows or a clean error.
//! * **Hostile**: random typed values (valid and not) in a random layout, then byte-level
//!   damage: stray quotes, delimiters and line breaks, ragged rows, invalid UTF-8, NUL
//!   bytes, BOMs, huge fields, truncation, empty files, a header alone.
//!
//! Pass: a result or a clean error; never a panic, an "internal error", or a hang (the
//! watchdog names a case that runs for `APIARY_FUZZ_HANG_SECS`).
//!
//! ```text
//! cargo test -p apiary --test fuzz_csv                                   # the seeded run
//! APIARY_FUZZ_ITERATIONS=200000 cargo test -p apiary --test fuzz_csv    # longer
//! APIARY_FUZZ_SEED=7 APIARY_FUZZ_FIRST=123 APIARY_FUZZ_ITERATIONS=1 ... # replay a case
//! ```

mod fuzz_support;

use std::path::Path;
use std::time::Duration;

use apiary::{Connection, Database, ScalarValue};
use fuzz_support::{catch, excerpt, is_bug, FuzzConfig, Rng, Watchdog};

/// Cases in the default `cargo test` run (a few seconds in the dev profile).
const DEFAULT_CASES: u64 = 2000;

/// Delimiters the files use.
const DELIMITERS: [u8; 4] = [b',', b'|', b';', b'\t'];

/// Pieces random strings are built from: the characters CSV parsing is about.
const STRING_PIECES: &[&str] = &[
    "a",
    "b",
    "xyz",
    " ",
    "  lead",
    "trail  ",
    ",",
    "|",
    ";",
    "\t",
    "\"",
    "\"\"",
    "'",
    "\\",
    "\n",
    "\r\n",
    "\r",
    "é",
    "日本",
    "🐝",
    "\u{feff}",
    "\u{202e}",
    "NULL",
    "null",
    "NA",
    "0",
    "-1",
    "1.5",
    "1e9",
    "2024-02-29",
    "true",
];

/// Column types COPY loads into, with a generator of (mostly) valid text for each.
const TYPES: &[&str] = &[
    "INTEGER",
    "BIGINT",
    "SMALLINT",
    "DECIMAL(10,2)",
    "DECIMAL(38,5)",
    "DOUBLE",
    "REAL",
    "DATE",
    "TIMESTAMP",
    "BOOLEAN",
    "VARCHAR",
    "VARCHAR(5)",
    "CHAR(3)",
    "INTERVAL",
];

fn valid_value(rng: &mut Rng, data_type: &str) -> String {
    let pick = |rng: &mut Rng, items: &[&str]| rng.pick(items).to_string();
    match data_type {
        "INTEGER" => match rng.below(4) {
            0 => pick(rng, &["2147483647", "-2147483648", " 42 ", "+7", "0", "-0"]),
            _ => (rng.next_u64() as i32).to_string(),
        },
        "BIGINT" => match rng.below(4) {
            0 => pick(rng, &["9223372036854775807", "-9223372036854775808", "  -1", "+0"]),
            _ => (rng.next_u64() as i64 >> rng.below(60)).to_string(),
        },
        "SMALLINT" => match rng.below(4) {
            0 => pick(rng, &["32767", "-32768", "0"]),
            _ => (rng.next_u64() as i16).to_string(),
        },
        "DECIMAL(10,2)" => match rng.below(4) {
            0 => pick(rng, &["99999999.99", "-99999999.99", "0.005", ".5", "-.25", "1.", "7"]),
            _ => format!("{}.{:02}", rng.next_u64() as i32 / 100, rng.below(100)),
        },
        "DECIMAL(38,5)" => match rng.below(4) {
            0 => pick(rng, &["999999999999999999999999999999999.99999", "-1.00001", "0.00000"]),
            _ => format!("{}{}.{:05}", rng.next_u64(), rng.next_u64() % 1000, rng.below(100_000)),
        },
        "DOUBLE" | "REAL" => match rng.below(4) {
            0 => pick(rng, &["inf", "-inf", "NaN", "1e308", "-1e-320", "0.1", "1E5", "-0"]),
            _ => format!("{}", f64::from_bits(rng.next_u64() >> 2) * if rng.chance(1, 2) { -1.0 } else { 1.0 }),
        },
        "DATE" => match rng.below(4) {
            0 => pick(rng, &["2024-02-29", "1970-01-01", "0001-01-01", "9999-12-31", " 2000-01-01 "]),
            _ => format!("{:04}-{:02}-{:02}", rng.range(1, 9999), rng.range(1, 13), rng.range(1, 29)),
        },
        "TIMESTAMP" => match rng.below(4) {
            0 => pick(rng, &["2024-01-01 00:00:00", "1999-12-31 23:59:59.999999", "2024-06-01T12:00:00", "2020-01-01"]),
            _ => format!(
                "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
                rng.range(1, 9999),
                rng.range(1, 13),
                rng.range(1, 29),
                rng.below(24),
                rng.below(60),
                rng.below(60)
            ),
        },
        "BOOLEAN" => pick(rng, &["true", "false", "t", "f", "1", "0", "yes", "no", "TRUE", "N"]),
        "VARCHAR(5)" | "CHAR(3)" => random_string(rng, 3),
        "INTERVAL" => pick(rng, &["1 day", "2 months 3 days", "01:02:03", "-1 year", "3 hours", "P1D", "1 week 2 days"]),
        _ => random_string(rng, 8),
    }
}

fn invalid_value(rng: &mut Rng) -> String {
    let garbage = [
        "abc",
        "1.2.3",
        "99999999999999999999999999999999999999999",
        "--1",
        "2024-13-45",
        "2024-02-30",
        "0x1F",
        "1e99999",
        "\u{0}",
        "tru",
        "1 dayz",
        "+",
        "-",
        ".",
        "e5",
        "９",
        "1,5",
        " ",
        "NaNa",
    ];
    match rng.below(3) {
        0 => rng.pick(&garbage).to_string(),
        1 => random_string(rng, 12),
        _ => {
            let data_type = *rng.pick(TYPES);
            valid_value(rng, data_type)
        }
    }
}

fn random_string(rng: &mut Rng, max_pieces: usize) -> String {
    let pieces = rng.below(max_pieces + 1);
    (0..pieces).map(|_| *rng.pick(STRING_PIECES)).collect()
}

/// How a file is written and must be read.
#[derive(Clone, Debug)]
struct Layout {
    delimiter: u8,
    quote: u8,
    /// The ESCAPE option (a character that protects the next one inside quotes).
    escape: Option<u8>,
    /// The NULL option.
    null: Option<String>,
    header: bool,
    crlf: bool,
    bom: bool,
}

impl Layout {
    fn random(rng: &mut Rng) -> Layout {
        Layout {
            delimiter: *rng.pick(&DELIMITERS),
            quote: if rng.chance(1, 8) { b'\'' } else { b'"' },
            escape: rng.chance(1, 8).then_some(b'\\'),
            null: if rng.chance(1, 8) { Some(rng.pick(&["NA", "NULL", "\\N"]).to_string()) } else { None },
            header: rng.chance(1, 2),
            crlf: rng.chance(1, 4),
            bom: rng.chance(1, 8),
        }
    }

    /// Writes one field, quoted when it must be (or at random).
    fn write_field(&self, rng: &mut Rng, out: &mut Vec<u8>, value: Option<&str>) {
        let Some(value) = value else {
            if let Some(null) = &self.null {
                out.extend_from_slice(null.as_bytes());
            }
            return;
        };
        let bytes = value.as_bytes();
        let must_quote = bytes.is_empty()
            || bytes.first() == Some(&self.quote)
            || bytes.iter().any(|&b| b == self.delimiter || b == b'\n' || b == b'\r')
            || self.null.as_deref() == Some(value)
            // A byte-order mark at the start of the file is not data.
            || value.starts_with('\u{feff}');
        if !must_quote && !rng.chance(1, 4) {
            out.extend_from_slice(bytes);
            return;
        }
        out.push(self.quote);
        for &b in bytes {
            if b == self.quote {
                match self.escape {
                    Some(escape) if rng.chance(1, 2) => out.push(escape),
                    _ => out.push(self.quote),
                }
            } else if Some(b) == self.escape {
                out.push(b);
            }
            out.push(b);
        }
        out.push(self.quote);
    }

    fn line_end(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(if self.crlf { b"\r\n" } else { b"\n" });
    }

    fn sql_char(c: u8) -> String {
        if c == b'\'' {
            "''''".to_string()
        } else {
            format!("'{}'", c as char)
        }
    }

    /// The options of `COPY ... FROM`.
    fn copy_options(&self) -> String {
        let mut options = vec!["FORMAT csv".to_string(), format!("DELIMITER {}", Self::sql_char(self.delimiter))];
        if self.header {
            options.push("HEADER".to_string());
        }
        if self.quote != b'"' {
            options.push(format!("QUOTE {}", Self::sql_char(self.quote)));
        }
        if let Some(escape) = self.escape {
            options.push(format!("ESCAPE {}", Self::sql_char(escape)));
        }
        if let Some(null) = &self.null {
            options.push(format!("NULL '{null}'"));
        }
        options.join(", ")
    }

    /// The named arguments of `read_csv` (`header` only when `explicit_header`).
    fn read_csv_options(&self, explicit_header: bool) -> String {
        let mut options = vec![format!("delim => {}", Self::sql_char(self.delimiter))];
        if explicit_header {
            options.push(format!("header => {}", self.header));
        }
        if self.quote != b'"' {
            options.push(format!("quote => {}", Self::sql_char(self.quote)));
        }
        if let Some(escape) = self.escape {
            options.push(format!("escape => {}", Self::sql_char(escape)));
        }
        if let Some(null) = &self.null {
            options.push(format!("nullstr => '{null}'"));
        }
        options.join(", ")
    }
}

/// A generated file: its bytes, the table it loads into, and (for round trips) the rows.
struct Case {
    layout: Layout,
    bytes: Vec<u8>,
    types: Vec<&'static str>,
    /// The rows COPY must produce; `None` when the file was damaged.
    expected: Option<Vec<Vec<Option<String>>>>,
    /// Whether read_csv is told about the header (else it guesses).
    explicit_header: bool,
    /// A damaged round trip: all columns VARCHAR, so [`reference_parse`] says what COPY
    /// must do (fail, or load exactly its rows).
    compare_with_reference: bool,
}

fn round_trip_case(rng: &mut Rng) -> Case {
    let layout = Layout::random(rng);
    let columns = rng.range(1, 6);
    let rows = if rng.chance(1, 10) { 0 } else { rng.range(1, 40) };
    let mut bytes = Vec::new();
    if layout.bom {
        bytes.extend_from_slice("\u{feff}".as_bytes());
    }
    if layout.header {
        for column in 0..columns {
            if column > 0 {
                bytes.push(layout.delimiter);
            }
            layout.write_field(rng, &mut bytes, Some(&format!("c{column}")));
        }
        layout.line_end(&mut bytes);
    }
    let mut expected = Vec::with_capacity(rows);
    for _ in 0..rows {
        let row: Vec<Option<String>> = (0..columns)
            .map(|_| {
                // A NULL in a one-column row would be an empty line, which holds no row.
                let null = columns > 1 && rng.chance(1, 6);
                (!null).then(|| random_string(rng, 6))
            })
            .collect();
        for (column, value) in row.iter().enumerate() {
            if column > 0 {
                bytes.push(layout.delimiter);
            }
            layout.write_field(rng, &mut bytes, value.as_deref());
        }
        if rng.chance(9, 10) || expected.len() + 1 < rows {
            layout.line_end(&mut bytes);
        }
        expected.push(row);
    }
    Case { layout, bytes, types: vec!["VARCHAR"; columns], expected: Some(expected), explicit_header: true, compare_with_reference: false }
}

/// A round trip with a few byte-level injuries: COPY must agree with [`reference_parse`].
fn damaged_round_trip_case(rng: &mut Rng) -> Case {
    let mut case = round_trip_case(rng);
    for _ in 0..rng.range(1, 4) {
        damage(rng, &mut case.bytes, &case.layout);
    }
    case.expected = None;
    case.compare_with_reference = true;
    case
}

/// What COPY into `columns` VARCHAR columns must load from `bytes`, written independently
/// of the loader from the rules it documents: a leading BOM is skipped; with HEADER the
/// first record is; records end at a newline outside quotes and lose a trailing CR; empty
/// records hold no row; a field is quoted only when it starts with the quote, inside which
/// a doubled quote or the ESCAPE character protects a byte; only spaces may follow the
/// closing quote; a trailing empty field beyond the columns is ignored; an empty unquoted
/// field (or the NULL text, when given) is NULL; values must be UTF-8.
fn reference_parse(bytes: &[u8], layout: &Layout, columns: usize) -> Result<Vec<Vec<Option<String>>>, String> {
    let bytes = bytes.strip_prefix("\u{feff}".as_bytes()).unwrap_or(bytes);
    let escape = layout.escape.filter(|&e| e != layout.quote);
    // Split into records of fields: (bytes, quoted).
    let mut records: Vec<Vec<(Vec<u8>, bool)>> = Vec::new();
    let mut record: Vec<(Vec<u8>, bool)> = Vec::new();
    let mut field = Vec::new();
    let mut quoted = false;
    let mut i = 0;
    let mut at_field_start = true;
    let mut error = None;
    while i < bytes.len() {
        let b = bytes[i];
        if at_field_start && b == layout.quote {
            // A quoted field, to its closing quote.
            quoted = true;
            i += 1;
            let mut closed = false;
            while i < bytes.len() {
                if Some(bytes[i]) == escape && i + 1 < bytes.len() {
                    field.push(bytes[i + 1]);
                    i += 2;
                } else if bytes[i] == layout.quote {
                    if bytes.get(i + 1) == Some(&layout.quote) {
                        field.push(layout.quote);
                        i += 2;
                    } else {
                        i += 1;
                        closed = true;
                        break;
                    }
                } else {
                    field.push(bytes[i]);
                    i += 1;
                }
            }
            if !closed {
                error.get_or_insert_with(|| "unterminated quote".to_string());
            }
            at_field_start = false;
            // Only spaces up to the delimiter or the end of the record.
            while i < bytes.len() && bytes[i] != layout.delimiter && bytes[i] != b'\n' {
                if bytes[i] != b' ' && bytes[i] != b'\t' && !(bytes[i] == b'\r' && bytes.get(i + 1).is_none_or(|&n| n == b'\n')) {
                    error.get_or_insert_with(|| "text after a closing quote".to_string());
                }
                i += 1;
            }
            continue;
        }
        at_field_start = false;
        if b == layout.delimiter {
            record.push((std::mem::take(&mut field), quoted));
            quoted = false;
            at_field_start = true;
        } else if b == b'\n' {
            record.push((std::mem::take(&mut field), quoted));
            records.push(std::mem::take(&mut record));
            quoted = false;
            at_field_start = true;
        } else {
            field.push(b);
        }
        i += 1;
    }
    if !at_field_start || !field.is_empty() || !record.is_empty() || quoted {
        record.push((field, quoted));
        records.push(record);
    }
    if let Some(error) = error {
        return Err(error);
    }
    let mut rows = Vec::new();
    for (number, mut record) in records.into_iter().enumerate() {
        if layout.header && number == 0 {
            continue;
        }
        // A trailing CR belongs to the line end (of an unquoted last field).
        if let Some((last, false)) = record.last_mut() {
            if last.last() == Some(&b'\r') {
                last.pop();
            }
        }
        if record.len() == 1 && !record[0].1 && record[0].0.is_empty() {
            continue; // an empty line
        }
        if record.len() == columns + 1 && matches!(record.last(), Some((last, false)) if last.is_empty()) {
            record.pop();
        }
        if record.len() != columns {
            return Err(format!("record {number} has {} fields", record.len()));
        }
        let mut row = Vec::with_capacity(columns);
        for (value, quoted) in record {
            let is_null = !quoted
                && match &layout.null {
                    Some(null) => value == null.as_bytes(),
                    None => value.is_empty(),
                };
            if is_null {
                row.push(None);
            } else {
                row.push(Some(String::from_utf8(value).map_err(|_| format!("record {number}: invalid UTF-8"))?));
            }
        }
        rows.push(row);
    }
    Ok(rows)
}

fn hostile_case(rng: &mut Rng) -> Case {
    let layout = Layout::random(rng);
    let columns = rng.range(1, 7);
    let types: Vec<&'static str> = (0..columns).map(|_| *rng.pick(TYPES)).collect();
    let mut bytes = Vec::new();
    if layout.bom {
        bytes.extend_from_slice("\u{feff}".as_bytes());
    }
    if layout.header {
        for column in 0..columns {
            if column > 0 {
                bytes.push(layout.delimiter);
            }
            layout.write_field(rng, &mut bytes, Some(&format!("col{column}")));
        }
        layout.line_end(&mut bytes);
    }
    let rows = match rng.below(20) {
        0 => 0,
        1 => rng.range(2_000, 8_000), // spans several parallel pieces when unquoted
        _ => rng.range(1, 30),
    };
    for _ in 0..rows {
        // Ragged rows now and then.
        let width = if rng.chance(1, 30) { rng.below(columns + 3) } else { columns };
        for column in 0..width {
            if column > 0 {
                bytes.push(layout.delimiter);
            }
            let value = match rng.below(12) {
                0 => None,
                1 => Some(invalid_value(rng)),
                _ => Some(valid_value(rng, types.get(column).copied().unwrap_or("VARCHAR"))),
            };
            layout.write_field(rng, &mut bytes, value.as_deref());
        }
        layout.line_end(&mut bytes);
    }
    let damages = rng.below(5);
    for _ in 0..damages {
        damage(rng, &mut bytes, &layout);
    }
    let explicit_header = rng.chance(1, 2);
    let mut layout = layout;
    // Now and then options that contradict each other.
    match rng.below(20) {
        0 => layout.quote = layout.delimiter,
        1 => layout.escape = Some(layout.quote),
        2 => layout.delimiter = b'\n',
        3 => layout.escape = Some(layout.delimiter),
        4 => layout.delimiter = layout.quote,
        _ => {}
    }
    Case { layout, bytes, types, expected: None, explicit_header, compare_with_reference: false }
}

/// One random byte-level injury.
fn damage(rng: &mut Rng, bytes: &mut Vec<u8>, layout: &Layout) {
    let at = rng.below(bytes.len() + 1);
    let insert = |bytes: &mut Vec<u8>, piece: &[u8]| {
        bytes.splice(at..at, piece.iter().copied());
    };
    match rng.below(14) {
        0 => insert(bytes, &[layout.quote]),
        1 => insert(bytes, &[layout.delimiter]),
        2 => insert(bytes, b"\n"),
        3 => insert(bytes, b"\r"),
        4 if at < bytes.len() => {
            bytes.remove(at);
        }
        5 if at < bytes.len() => bytes[at] ^= 1 << rng.below(8),
        6 => {
            let invalid: &[&[u8]] = &[b"\xff", b"\xc3", b"\xe6\x97", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x00"];
            let piece = *rng.pick(invalid);
            insert(bytes, piece);
        }
        7 => insert(bytes, "\u{feff}".as_bytes()),
        8 => bytes.truncate(at),
        9 => {
            // A huge field: plain, quoted, or a run of quotes.
            let len = if rng.chance(1, 8) { rng.range(1 << 20, 1 << 21) } else { rng.range(1 << 12, 1 << 17) };
            // (Delimiters make a very wide row: a table of that many columns for read_csv.)
            let fill = *rng.pick(&[b'x', b'x', layout.quote, layout.delimiter, b'\n', b'7']);
            let mut field = vec![fill; len];
            if rng.chance(1, 2) {
                field.insert(0, layout.quote);
                field.push(layout.quote);
            }
            insert(bytes, &field);
        }
        10 => bytes.clear(),
        11 => {
            // Duplicate a stretch (repeats lines, splits quotes).
            let end = (at + rng.below(200)).min(bytes.len());
            let stretch = bytes[at..end].to_vec();
            let to = rng.below(bytes.len() + 1);
            bytes.splice(to..to, stretch);
        }
        12 => {
            // Only the header line survives.
            if let Some(p) = bytes.iter().position(|&b| b == b'\n') {
                bytes.truncate(p + 1);
            }
        }
        _ => insert(bytes, &[layout.escape.unwrap_or(b'\\')]),
    }
}

fn sql_path(path: &Path) -> String {
    path.display().to_string().replace('\'', "''")
}

/// Runs `sql`; a bug (panic or internal error) is returned as `Err`.
fn run(conn: &mut Connection, sql: &str) -> Result<Option<apiary::QueryResult>, String> {
    match catch(|| conn.query(sql)) {
        Ok(Ok(result)) => Ok(Some(result)),
        Ok(Err(error)) if is_bug(&error) => Err(format!("internal error: {error}")),
        Ok(Err(_)) => Ok(None),
        Err(panic) => Err(format!("panic: {panic}")),
    }
}

fn check_case(conn: &mut Connection, case: &Case, path: &Path) -> Result<(), String> {
    std::fs::write(path, &case.bytes).map_err(|e| format!("writing the file: {e}"))?;
    let columns: Vec<String> = case.types.iter().enumerate().map(|(i, t)| format!("c{i} {t}")).collect();
    conn.execute("DROP TABLE IF EXISTS c").map_err(|e| e.to_string())?;
    conn.execute(&format!("CREATE TABLE c ({})", columns.join(", "))).map_err(|e| e.to_string())?;
    let copy = format!("COPY c FROM '{}' ({})", sql_path(path), case.layout.copy_options());
    let copied = match catch(|| conn.query(&copy)) {
        Ok(Ok(_)) => true,
        Ok(Err(error)) if is_bug(&error) => return Err(format!("{copy}: internal error: {error}")),
        Ok(Err(error)) => {
            if case.expected.is_some() {
                return Err(format!("{copy}: a well-formed file was refused: {error}"));
            }
            false
        }
        Err(panic) => return Err(format!("{copy}: panic: {panic}")),
    };
    let rows: Vec<Vec<ScalarValue>> = match run(conn, "SELECT * FROM c")? {
        Some(result) => result.rows().collect(),
        None => return Err("SELECT * FROM c failed after COPY".to_string()),
    };
    if !copied && !rows.is_empty() {
        return Err(format!("a failed COPY left {} rows in the table", rows.len()));
    }
    let reference = case.compare_with_reference.then(|| reference_parse(&case.bytes, &case.layout, case.types.len()));
    match &reference {
        Some(Ok(_)) if !copied => return Err(format!("{copy} failed, but the reference parser reads the file")),
        Some(Err(reason)) if copied => return Err(format!("{copy} succeeded, but the reference parser refuses the file: {reason}")),
        _ => {}
    }
    if let Some(expected) = case.expected.as_ref().or(reference.as_ref().and_then(|r| r.as_ref().ok())) {
        let expected: Vec<Vec<ScalarValue>> =
            expected.iter().map(|row| row.iter().map(|v| v.clone().map_or(ScalarValue::Null, ScalarValue::Utf8)).collect()).collect();
        if rows != expected {
            let first = rows.iter().zip(&expected).position(|(a, b)| a != b).unwrap_or(rows.len().min(expected.len()));
            return Err(format!(
                "COPY read back different values ({} rows, expected {}); first difference at row {first}: {:?} vs {:?}",
                rows.len(),
                expected.len(),
                rows.get(first),
                expected.get(first)
            ));
        }
    }
    let read = format!("SELECT count(*) FROM read_csv('{}', {})", sql_path(path), case.layout.read_csv_options(case.explicit_header));
    if let Some(result) = run(conn, &read)? {
        if let Some(expected) = &case.expected {
            let counted = result.rows().next().and_then(|r| r.into_iter().next());
            if counted != Some(ScalarValue::Int64(expected.len() as i64)) && !expected.is_empty() {
                return Err(format!("{read}: {counted:?} rows, expected {}", expected.len()));
            }
        }
    }
    Ok(())
}

#[test]
fn csv_files_load_or_fail_cleanly() {
    let config = FuzzConfig::from_env(DEFAULT_CASES);
    let dir = fuzz_support::scratch("csv");
    let path = dir.join("case.csv");
    let db = Database::open_in_memory().unwrap();
    let mut conn = db.connect();
    conn.execute("SET threads = 2").unwrap();
    let watchdog = Watchdog::start("fuzz_csv", Duration::from_secs(60));
    let mut failures = Vec::new();
    let mut round_trips = 0;
    for case_number in config.cases() {
        let mut rng = Rng::for_case(config.seed, case_number);
        let case = match rng.below(3) {
            0 => round_trip_case(&mut rng),
            1 => damaged_round_trip_case(&mut rng),
            _ => hostile_case(&mut rng),
        };
        round_trips += case.expected.is_some() as u32;
        watchdog.begin(format!("case {case_number}: {}", config.replay("fuzz_csv", case_number)), Some(conn.interrupt_flag()));
        let outcome = check_case(&mut conn, &case, &path);
        watchdog.end();
        if let Err(message) = outcome {
            let kept = dir.join(format!("failure-{case_number}.csv"));
            let _ = std::fs::write(&kept, &case.bytes);
            failures.push(format!(
                "case {case_number} ({:?}, types {:?}): {}\n  file kept at {}\n  replay: {}",
                case.layout,
                case.types,
                excerpt(&message, 2000),
                kept.display(),
                config.replay("fuzz_csv", case_number)
            ));
            if failures.len() >= 10 {
                break;
            }
        }
    }
    drop(watchdog);
    if failures.is_empty() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    eprintln!("fuzz_csv: {} cases ({round_trips} round trips) from seed {}", config.iterations, config.seed);
    assert!(failures.is_empty(), "{} failing case(s):\n{}", failures.len(), failures.join("\n\n"));
}

/// Regression (a fuzzed file of one line of commas took the process down): a file wider
/// than read_csv's column limit is refused cleanly, and a wide file within it loads.
#[test]
fn very_wide_files_are_refused_or_loaded() {
    let dir = fuzz_support::scratch("csv-wide");
    let db = Database::open_in_memory().unwrap();
    let mut conn = db.connect();
    let too_wide = dir.join("too_wide.csv");
    std::fs::write(&too_wide, ",".repeat(200_000)).unwrap();
    let error = conn.query(&format!("SELECT count(*) FROM read_csv('{}')", too_wide.display())).unwrap_err().to_string();
    assert!(error.contains("200000 columns") && error.contains("at most 10000"), "{error}");
    let wide = dir.join("wide.csv");
    let header: Vec<String> = (0..3000).map(|i| format!("c{i}")).collect();
    let values: Vec<String> = (0..3000).map(|i| i.to_string()).collect();
    std::fs::write(&wide, format!("{}\n{}\n", header.join(","), values.join(","))).unwrap();
    let result = conn.query(&format!("SELECT c0, c2999 FROM read_csv('{}')", wide.display())).unwrap();
    let rows: Vec<Vec<ScalarValue>> = result.rows().collect();
    assert_eq!(rows, vec![vec![ScalarValue::Int64(0), ScalarValue::Int64(2999)]]);
    let _ = std::fs::remove_dir_all(&dir);
}
