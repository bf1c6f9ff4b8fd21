//! Sniffing a CSV file, as DuckDB's `read_csv` does: from a sample of its first records,
//! the delimiter (`,` `|` `;` or tab: the one that splits the records into the same number
//! of fields), whether the first line is a header (its values do not fit the types the
//! other lines have), and each column's type: BIGINT, DOUBLE, DATE, TIMESTAMP,
//! TIMESTAMPTZ, TIME, BOOLEAN or VARCHAR, the first that every sampled value fits. Dates
//! and timestamps are tried in the common formats (`2012-01-31`, `2012/01/31`,
//! `01/31/2012`, `31.01.2012`, ISO 8601 with `T`, ...), and the format found is used to
//! read the whole column. ISO 8601 values with a zone (`2012-01-31T10:00:00+01:00`,
//! `...Z`) make a TIMESTAMPTZ column (values without one are read in the session's
//! zone); `10:30:00` and `10:30` make a TIME column.
//!
//! NULL tokens (`NA`, `NULL`, `\N`, `N/A`, empty, ...) are set aside while a column's type
//! is decided, so a numeric column with `NA` in it stays numeric and reads them as NULL. A
//! text column keeps such tokens as text (only an empty unquoted field is NULL there):
//! `NA` may well be a value. A `nullstr` given by the user replaces the tokens.
//!
//! Anything the user states (`delim`, `header`, `columns`, `types`, `dateformat`, ...) is
//! taken as given and not detected.

use apiary_types::datetime::{parse_date, parse_time, parse_timestamptz, timestamp_has_zone};

use super::*;

/// What the user stated about the file; what is not stated is detected.
#[derive(Debug, Clone, Default)]
pub struct SniffHints {
    pub delimiter: Option<u8>,
    pub header: Option<bool>,
    /// `columns = {'name': 'TYPE', ...}`: the columns, so no type detection.
    pub columns: Option<Vec<(String, DataType)>>,
    /// `types = {'name': 'TYPE'}`: these columns' types (by header name).
    pub types_by_name: Vec<(String, DataType)>,
    /// `types = ['TYPE', ...]`: the first columns' types.
    pub types_by_position: Vec<DataType>,
    /// `names = [...]`: the first columns' names.
    pub names: Option<Vec<String>>,
    /// `all_varchar = true`: every column is text.
    pub all_varchar: bool,
    pub date_format: Option<TemporalFormat>,
    pub timestamp_format: Option<TemporalFormat>,
    /// Records sampled (`sample_size`).
    pub sample_records: usize,
}

/// Records sampled when `sample_size` is not given (DuckDB's default).
pub const DEFAULT_SAMPLE_RECORDS: usize = 20_480;

/// Bytes read for the sample at first (more when one record does not fit).
const SAMPLE_BYTES: usize = 8 << 20;

/// Texts that often mean NULL in files written by other tools (R, pandas, MySQL, Excel).
pub const NULL_TOKENS: &[&str] = &["NA", "N/A", "#N/A", "NULL", "null", "Null", "\\N", "None", "nil"];

/// Date formats tried after ISO 8601 (`%Y-%m-%d`), in this order: month before day when
/// both could be either, as DuckDB and most US-made files do.
const DATE_FORMATS_WITH_ALTERNATIVES: &[(&str, &[&str])] = &[
    ("%Y/%m/%d", &["%Y/%m/%d"]),
    ("%m/%d/%Y", &["%m/%d/%Y"]),
    ("%d/%m/%Y", &["%d/%m/%Y"]),
    ("%d.%m.%Y", &["%d.%m.%Y"]),
    ("%Y.%m.%d", &["%Y.%m.%d"]),
    ("%m-%d-%Y", &["%m-%d-%Y"]),
    ("%d-%m-%Y", &["%d-%m-%Y"]),
    ("%d-%b-%Y", &["%d-%b-%Y"]),
    ("%d %b %Y", &["%d %b %Y"]),
    ("%b %d, %Y", &["%b %d, %Y"]),
    ("%B %d, %Y", &["%B %d, %Y"]),
    ("%d %B %Y", &["%d %B %Y"]),
];

/// Timestamp formats tried after ISO 8601 without a zone (`2012-01-31 10:00:00.5`,
/// `2012-01-31T10:00`): each entry is one format, with or without seconds or their
/// fraction. (ISO 8601 values with zones are TIMESTAMPTZ columns, detected before.)
const TIMESTAMP_FORMATS: &[(&str, &[&str])] = &[
    (
        "ISO 8601 with a time zone",
        &[
            "%Y-%m-%dT%H:%M:%S%z",
            "%Y-%m-%dT%H:%M:%S.%n%z",
            "%Y-%m-%dT%H:%M%z",
            "%Y-%m-%d %H:%M:%S%z",
            "%Y-%m-%d %H:%M:%S.%n%z",
            "%Y-%m-%d %H:%M%z",
            "%Y-%m-%dT%H:%M:%S",
            "%Y-%m-%dT%H:%M:%S.%n",
            "%Y-%m-%d %H:%M:%S",
            "%Y-%m-%d %H:%M:%S.%n",
        ],
    ),
    ("%Y/%m/%d %H:%M:%S", &["%Y/%m/%d %H:%M:%S", "%Y/%m/%d %H:%M:%S.%n", "%Y/%m/%d %H:%M"]),
    ("%m/%d/%Y %H:%M:%S", &["%m/%d/%Y %H:%M:%S", "%m/%d/%Y %H:%M:%S.%n", "%m/%d/%Y %H:%M"]),
    ("%m/%d/%Y %I:%M:%S %p", &["%m/%d/%Y %I:%M:%S %p", "%m/%d/%Y %I:%M %p"]),
    ("%d/%m/%Y %H:%M:%S", &["%d/%m/%Y %H:%M:%S", "%d/%m/%Y %H:%M:%S.%n", "%d/%m/%Y %H:%M"]),
    ("%d.%m.%Y %H:%M:%S", &["%d.%m.%Y %H:%M:%S", "%d.%m.%Y %H:%M"]),
];

/// Delimiters tried, in order of preference when several split the sample equally well.
const DELIMITERS: &[u8] = b",|;\t";

/// Detects what the hints leave open, sets it in `options` (delimiter, header, each
/// column's NULL tokens and date format) and returns the columns.
/// The most columns a sniffed file may have.
pub const MAX_COLUMNS: usize = 10_000;

pub fn sniff(path: &Path, options: &mut CsvOptions, hints: &SniffHints) -> Result<Vec<Field>> {
    let file = path.display().to_string();
    let sample = read_sample(path, options)?;
    if let Some(delimiter) = hints.delimiter {
        options.delimiter = delimiter;
    } else {
        options.delimiter = detect_delimiter(&sample, options);
    }
    let records = sample.records(options, hints.sample_records.max(1) + 1);
    let mut parts = Vec::new();
    // The first record may be the header: its quoting must be sound (an open quote would
    // swallow the records after it). Other malformed records are reported by the load.
    if let Some(first) = records.first() {
        if let Err(error) = split_fields(first, options, &mut parts) {
            let what = if hints.header == Some(false) { "the first record" } else { "the header" };
            return Err(ApiaryError::Load {
                file,
                line: 1 + options.skip_lines as u64,
                message: format!("column {} of {what}: {}", error.column, error.message),
            });
        }
    }
    let rows: Vec<Vec<Option<String>>> = records
        .iter()
        .filter(|record| !record.is_empty())
        .filter_map(|record| {
            split_fields(record, options, &mut parts).ok()?;
            Some(
                parts
                    .iter()
                    .map(|p| match p {
                        RawField::Plain([]) => None,
                        RawField::Plain(f) => Some(String::from_utf8_lossy(f).into_owned()),
                        RawField::Quoted(f) => Some(String::from_utf8_lossy(f).into_owned()),
                    })
                    .collect(),
            )
        })
        .collect();
    let null_tokens: Vec<&str> = if options.null.is_empty() { NULL_TOKENS.to_vec() } else { Vec::new() };
    let is_null = |value: &Option<String>| match value {
        None => true,
        Some(v) => null_tokens.contains(&v.trim()) || options.null.iter().any(|n| n == v),
    };

    // The number of columns most records have (a malformed record does not add columns).
    let mut frequency: std::collections::HashMap<usize, usize> = std::collections::HashMap::new();
    for row in &rows {
        *frequency.entry(row.len()).or_default() += 1;
    }
    let mut width = frequency.iter().max_by_key(|(fields, records)| (**records, **fields)).map_or(0, |(fields, _)| *fields);
    // Records of other widths say nothing about the columns' types (the header is kept:
    // it may name one column fewer, as pandas' index column has no name).
    let rows: Vec<Vec<Option<String>>> =
        rows.into_iter().enumerate().filter(|(i, row)| *i == 0 || row.len() == width).map(|(_, row)| row).collect();
    if let Some(columns) = &hints.columns {
        width = columns.len();
    } else if width > 1 && rows.iter().all(|r| r.len() == width && r.last().is_some_and(|v| v.is_none())) {
        // A trailing delimiter on every line (TPC-H .tbl files) is not a column.
        width -= 1;
    }
    if width == 0 {
        return Err(ApiaryError::Load { file, line: 1, message: "the file has no columns".to_string() });
    }
    if width > MAX_COLUMNS {
        // Per-column parsers and table columns for each would take gigabytes (a fuzzed
        // file of 673,181 commas did).
        return Err(ApiaryError::Load {
            file,
            line: 1,
            message: format!(
                "the file has {width} columns; read_csv reads at most {MAX_COLUMNS} (is the delimiter right? pass delim = '...')"
            ),
        });
    }
    let column_values = |rows: &[Vec<Option<String>>], column: usize| -> Vec<String> {
        rows.iter().filter_map(|r| r.get(column)).filter(|v| !is_null(v)).filter_map(|v| v.as_ref().map(|v| v.trim().to_string())).collect()
    };

    // Types from every record but the first, then the first decides the header.
    let (first, rest) = match rows.split_first() {
        Some((first, rest)) => (Some(first), rest),
        None => (None, &rows[..]),
    };
    let given: Option<Vec<DataType>> = hints.columns.as_ref().map(|c| c.iter().map(|(_, t)| *t).collect());
    let detect = |rows: &[Vec<Option<String>>]| -> Vec<Detected> {
        (0..width)
            .map(|column| {
                let values = column_values(rows, column);
                match &given {
                    Some(types) => Detected::of_type(types[column], &values, hints),
                    None if hints.all_varchar => Detected::text(),
                    None => Detected::detect(&values, hints),
                }
            })
            .collect()
    };
    let without_first = detect(rest);
    let header = match (hints.header, first) {
        (Some(header), _) => header,
        (None, None) => false,
        (None, Some(first)) => looks_like_header(first, &without_first, &is_null),
    };
    options.header = header;
    let detected = if header || first.is_none() { without_first } else { detect(&rows) };

    let mut names: Vec<String> = match (header, first) {
        (true, Some(first)) => (0..width)
            .map(|i| match first.get(i) {
                Some(Some(name)) if !name.trim().is_empty() => name.trim().to_string(),
                _ => format!("column{}", i + 1),
            })
            .collect(),
        _ => (0..width).map(|i| format!("column{}", i + 1)).collect(),
    };
    if let Some(columns) = &hints.columns {
        names = columns.iter().map(|(name, _)| name.clone()).collect();
    }
    // `types` may name a column by its name in the file or by the name `names` gives it.
    let file_names = names.clone();
    if let Some(given) = &hints.names {
        if given.len() > width {
            return Err(apiary_common::bind_err!("names gives {} names for a file with {width} columns", given.len()));
        }
        for (name, given) in names.iter_mut().zip(given) {
            *name = given.clone();
        }
    }
    deduplicate(&mut names);

    let data_rows = if header { rest } else { &rows[..] };
    let mut detected = detected;
    for (column, (name, found)) in names.iter().zip(detected.iter_mut()).enumerate() {
        let overridden = hints
            .types_by_name
            .iter()
            .find(|(n, _)| n == name || *n == file_names[column])
            .map(|(_, t)| *t)
            .or_else(|| hints.types_by_position.get(column).copied());
        if let Some(data_type) = overridden {
            *found = Detected::of_type(data_type, &column_values(data_rows, column), hints);
        }
    }
    // The tokens the file uses for NULL: those found in its typed columns. In a text
    // column they are NULL too, but only unquoted (R quotes the text "NA", not its NULL).
    let mut file_tokens: Vec<String> = Vec::new();
    for (column, found) in detected.iter().enumerate() {
        if found.data_type.is_string() {
            continue;
        }
        for value in data_rows.iter().filter_map(|r| r.get(column)).flatten() {
            let value = value.trim();
            if null_tokens.contains(&value) && !file_tokens.iter().any(|t| t == value) {
                file_tokens.push(value.to_string());
            }
        }
    }
    let mut fields = Vec::with_capacity(width);
    options.columns.clear();
    for (name, found) in names.into_iter().zip(detected) {
        let (null_tokens, unquoted_null_tokens) = if found.data_type.is_string() && !found.all_null {
            (Vec::new(), file_tokens.clone())
        } else {
            (null_tokens.iter().map(|t| t.to_string()).chain(std::iter::once(String::new())).collect(), Vec::new())
        };
        options.columns.push(ColumnFormat { null_tokens, unquoted_null_tokens, format: found.format });
        fields.push(Field::new(name, found.data_type, true));
    }
    for (name, _) in &hints.types_by_name {
        if !fields.iter().any(|f| f.name == *name) && !file_names.contains(name) {
            return Err(apiary_common::bind_err!("types names column \"{name}\", which {file} does not have"));
        }
    }
    Ok(fields)
}

/// The first records of a file, as read for sniffing.
struct Sample {
    /// The bytes after a byte-order mark and the skipped lines.
    body: Vec<u8>,
    /// Whether `body` is the whole file.
    complete: bool,
}

impl Sample {
    /// Up to `limit` records (without their line ends); a record cut by the end of an
    /// incomplete sample is left out.
    fn records(&self, options: &CsvOptions, limit: usize) -> Vec<&[u8]> {
        let mut records = Vec::new();
        let mut start = 0;
        while start < self.body.len() && records.len() < limit {
            let end = record_end(&self.body, start, options);
            if end >= self.body.len() && !self.complete {
                break;
            }
            let record = &self.body[start..end];
            records.push(record.strip_suffix(b"\r").unwrap_or(record));
            start = end + 1;
        }
        records
    }
}

fn read_sample(path: &Path, options: &CsvOptions) -> Result<Sample> {
    let mut input = open_input(path, options.compression)?;
    let mut data = Vec::new();
    let mut complete = fill(&mut input, &mut data, SAMPLE_BYTES, path)?;
    loop {
        let body = data.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&data);
        let skipped = skipped_prefix(body, options.skip_lines);
        if complete || skipped.is_some_and(|s| record_end(body, s, options) < body.len()) {
            let body = match skipped {
                Some(s) => body[s..].to_vec(),
                None => Vec::new(),
            };
            return Ok(Sample { body, complete });
        }
        // Not even one record in the sample: read more, up to max_line_size.
        if data.len() > options.max_line_size.saturating_mul(options.skip_lines + 1) {
            return Err(line_too_long(&path.display().to_string(), 1 + options.skip_lines as u64, options));
        }
        let more = data.len();
        complete = fill(&mut input, &mut data, more, path)?;
    }
}

/// The delimiter that splits the first records into the same number (more than one) of
/// fields most often; `,` when none does.
fn detect_delimiter(sample: &Sample, options: &CsvOptions) -> u8 {
    let mut best = (b',', (false, 0usize, 0usize));
    for &delimiter in DELIMITERS {
        let probe = CsvOptions { delimiter, ..options.clone() };
        let mut counts: Vec<usize> = Vec::new();
        let mut parts = Vec::new();
        for record in sample.records(&probe, 200) {
            if !record.is_empty() && split_fields(record, &probe, &mut parts).is_ok() {
                counts.push(parts.len());
            }
        }
        let mut frequency: std::collections::HashMap<usize, usize> = std::collections::HashMap::new();
        for &count in &counts {
            *frequency.entry(count).or_default() += 1;
        }
        let Some((&fields, &records)) = frequency.iter().max_by_key(|(fields, records)| (**records, **fields)) else {
            continue;
        };
        let score = (fields > 1, records, fields);
        if fields > 1 && score > best.1 {
            best = (delimiter, score);
        }
    }
    best.0
}

/// Whether the first record is a header: some value in it does not fit its column's type
/// (the type the other records have); when every column is text, when none of its values
/// is a number or a date.
fn looks_like_header(first: &[Option<String>], detected: &[Detected], is_null: &dyn Fn(&Option<String>) -> bool) -> bool {
    let typed = detected.iter().any(|d| !d.data_type.is_string() && !d.all_null);
    if typed {
        return first.iter().zip(detected).any(|(value, d)| {
            !d.data_type.is_string() && !d.all_null && !is_null(value) && !d.fits(value.as_deref().unwrap_or("").trim())
        });
    }
    let numeric_or_date = |v: &str| v.parse::<f64>().is_ok() || parse_date(v).is_some();
    !first.iter().any(|v| v.as_deref().is_some_and(|v| numeric_or_date(v.trim())))
}

/// Renames repeated names `a`, `a` to `a`, `a_1` (DuckDB's rule).
fn deduplicate(names: &mut [String]) {
    let mut seen = std::collections::HashSet::new();
    for i in 0..names.len() {
        if seen.insert(names[i].clone()) {
            continue;
        }
        let mut n = 1;
        while !seen.insert(format!("{}_{n}", names[i])) {
            n += 1;
        }
        names[i] = format!("{}_{n}", names[i]);
    }
}

/// A column's detected type and how to read it.
struct Detected {
    data_type: DataType,
    format: Option<TemporalFormat>,
    /// Every sampled value was NULL (or there were none).
    all_null: bool,
}

impl Detected {
    fn text() -> Detected {
        Detected { data_type: DataType::Varchar(None), format: None, all_null: false }
    }

    /// The first type every value fits.
    fn detect(values: &[String], hints: &SniffHints) -> Detected {
        if values.is_empty() {
            return Detected { data_type: DataType::Varchar(None), format: None, all_null: true };
        }
        let all = |f: &dyn Fn(&str) -> bool| values.iter().all(|v| f(v));
        if all(&|v| parse_int(v.as_bytes()).is_some()) {
            return Detected { data_type: DataType::BigInt, format: None, all_null: false };
        }
        if all(&|v| v.parse::<f64>().is_ok()) {
            return Detected { data_type: DataType::Double, format: None, all_null: false };
        }
        if let Some(format) = temporal_format(DataType::Date, values, hints) {
            return Detected { data_type: DataType::Date, format, all_null: false };
        }
        // Instants: ISO 8601 timestamps of which some carry a zone.
        if hints.timestamp_format.is_none()
            && values.iter().any(|v| timestamp_has_zone(v))
            && all(&|v| parse_timestamptz(v, &TimeZone::UTC).is_some())
        {
            return Detected { data_type: DataType::TimestampTz, format: None, all_null: false };
        }
        if let Some(format) = temporal_format(DataType::Timestamp, values, hints) {
            return Detected { data_type: DataType::Timestamp, format, all_null: false };
        }
        if all(&|v| looks_like_time(v)) {
            return Detected { data_type: DataType::Time, format: None, all_null: false };
        }
        if all(&|v| matches!(v.to_ascii_lowercase().as_str(), "true" | "false" | "t" | "f" | "yes" | "no")) {
            return Detected { data_type: DataType::Boolean, format: None, all_null: false };
        }
        Detected::text()
    }

    /// A type the user gave; a date or timestamp column gets the format its values have.
    fn of_type(data_type: DataType, values: &[String], hints: &SniffHints) -> Detected {
        let format = match data_type {
            DataType::Date | DataType::Timestamp => temporal_format(data_type, values, hints).unwrap_or_else(|| match data_type {
                DataType::Date => hints.date_format.clone(),
                _ => hints.timestamp_format.clone(),
            }),
            // ISO 8601 (with or without zones) unless the user gave a format.
            DataType::TimestampTz => {
                let iso = values.iter().all(|v| parse_timestamptz(v, &TimeZone::UTC).is_some());
                if iso {
                    None
                } else {
                    hints.timestamp_format.clone().or_else(|| temporal_format(DataType::Timestamp, values, hints).flatten())
                }
            }
            _ => None,
        };
        Detected { data_type, format, all_null: values.is_empty() }
    }

    /// Whether `value` reads as this column's type.
    fn fits(&self, value: &str) -> bool {
        match (self.data_type, &self.format) {
            (DataType::BigInt, _) => parse_int(value.as_bytes()).is_some(),
            (DataType::Double, _) => value.parse::<f64>().is_ok(),
            (DataType::Date, None) => parse_date(value).is_some(),
            (DataType::Date, Some(format)) => format.date(value).is_some(),
            (DataType::Timestamp, None) => parse_timestamp(value).is_some(),
            (DataType::Timestamp, Some(format)) => format.timestamp(value).is_some(),
            (DataType::TimestampTz, None) => parse_timestamptz(value, &TimeZone::UTC).is_some(),
            (DataType::TimestampTz, Some(format)) => format.instant(value, &TimeZone::UTC).is_some(),
            (DataType::Time, _) => looks_like_time(value),
            (DataType::Boolean, _) => matches!(value.to_ascii_lowercase().as_str(), "true" | "false" | "t" | "f" | "yes" | "no"),
            _ => true,
        }
    }
}

/// A time of day as files write it: `10:30`, `10:30:00`, `10:30:00.5`, `10:30 PM`
/// (digits first; a date in front would make it a timestamp).
fn looks_like_time(value: &str) -> bool {
    value.len() <= 20
        && value.starts_with(|c: char| c.is_ascii_digit())
        && value.contains(':')
        && !value.contains('-')
        && parse_time(value).is_some()
}

/// The format every value of a DATE or TIMESTAMP column is written in: `Some(None)` for
/// ISO 8601, `Some(Some(format))` for another, `None` when no format fits them all. A
/// format the user gave (`dateformat`, `timestampformat`) is the only one tried.
fn temporal_format(data_type: DataType, values: &[String], hints: &SniffHints) -> Option<Option<TemporalFormat>> {
    let (given, iso, formats): (_, &dyn Fn(&str) -> bool, _) = match data_type {
        DataType::Date => (&hints.date_format, &|v: &str| parse_date(v).is_some(), DATE_FORMATS_WITH_ALTERNATIVES),
        _ => (&hints.timestamp_format, &|v: &str| parse_timestamp(v).is_some(), TIMESTAMP_FORMATS),
    };
    let fits = |format: &TemporalFormat| match data_type {
        DataType::Date => values.iter().all(|v| format.date(v).is_some()),
        _ => values.iter().all(|v| format.timestamp(v).is_some()),
    };
    if let Some(format) = given {
        return fits(format).then(|| Some(format.clone()));
    }
    // Every value must at least look like a date: a digit first (or a month name), so a
    // column of words is not tried against every format.
    if values.is_empty() || !values.iter().all(|v| v.len() >= 6 && v.len() <= 40) {
        return None;
    }
    if values.iter().all(|v| iso(v)) {
        return Some(None);
    }
    formats.iter().filter_map(|(text, alternatives)| TemporalFormat::any_of(text, alternatives).ok()).find(|f| fits(f)).map(Some)
}
