//! SQL types as the generator sees them, and literal values for each: edge values (0, -1,
//! extremes, empty strings, leap days) and the small pools duplicates are drawn from.
//!
//! Literals are written so PostgreSQL, DuckDB and Apiary read them as the same typed value:
//! typed forms for everything that is not an integer or a string (`DATE '...'`,
//! `CAST(1.5 AS DOUBLE)`), negative numbers in parentheses, NULLs cast to their type.

use crate::rng::Rng;

/// A column or expression type. `Decimal(precision, scale)`, `Char(length)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SqlType {
    Boolean,
    SmallInt,
    Integer,
    BigInt,
    Real,
    Double,
    Decimal(u8, u8),
    Varchar,
    Char(u8),
    Date,
    Timestamp,
    Interval,
}

/// A family of types that expressions are generated for: operators and functions accept
/// every type of a family the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Bool,
    Int,
    Float,
    Decimal,
    Str,
    Date,
    Timestamp,
    Interval,
}

/// Types whose values compare with each other (`<`, `=`, `IN`, `BETWEEN`) without a cast.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    Bool,
    Numeric,
    Str,
    Temporal,
    Interval,
}

pub const ALL_KINDS: [Kind; 8] =
    [Kind::Bool, Kind::Int, Kind::Float, Kind::Decimal, Kind::Str, Kind::Date, Kind::Timestamp, Kind::Interval];

impl Kind {
    pub fn class(self) -> Class {
        match self {
            Kind::Bool => Class::Bool,
            Kind::Int | Kind::Float | Kind::Decimal => Class::Numeric,
            Kind::Str => Class::Str,
            Kind::Date | Kind::Timestamp => Class::Temporal,
            Kind::Interval => Class::Interval,
        }
    }

    pub fn is_numeric(self) -> bool {
        self.class() == Class::Numeric
    }

    /// Whether min/max are defined (Apiary has no max(INTERVAL); PostgreSQL no max(BOOLEAN)).
    pub fn has_min_max(self) -> bool {
        !matches!(self, Kind::Bool | Kind::Interval)
    }

    /// The type an expression of this kind has when nothing narrower is known.
    pub fn default_type(self) -> SqlType {
        match self {
            Kind::Bool => SqlType::Boolean,
            Kind::Int => SqlType::Integer,
            Kind::Float => SqlType::Double,
            Kind::Decimal => SqlType::Decimal(18, 4),
            Kind::Str => SqlType::Varchar,
            Kind::Date => SqlType::Date,
            Kind::Timestamp => SqlType::Timestamp,
            Kind::Interval => SqlType::Interval,
        }
    }
}

impl Class {
    /// The kinds of this class.
    pub fn kinds(self) -> &'static [Kind] {
        match self {
            Class::Bool => &[Kind::Bool],
            Class::Numeric => &[Kind::Int, Kind::Float, Kind::Decimal],
            Class::Str => &[Kind::Str],
            Class::Temporal => &[Kind::Date, Kind::Timestamp],
            Class::Interval => &[Kind::Interval],
        }
    }
}

impl SqlType {
    pub fn sql(self) -> String {
        match self {
            SqlType::Boolean => "BOOLEAN".into(),
            SqlType::SmallInt => "SMALLINT".into(),
            SqlType::Integer => "INTEGER".into(),
            SqlType::BigInt => "BIGINT".into(),
            SqlType::Real => "REAL".into(),
            SqlType::Double => "DOUBLE".into(),
            SqlType::Decimal(p, s) => format!("DECIMAL({p},{s})"),
            SqlType::Varchar => "VARCHAR".into(),
            SqlType::Char(n) => format!("CHAR({n})"),
            SqlType::Date => "DATE".into(),
            SqlType::Timestamp => "TIMESTAMP".into(),
            SqlType::Interval => "INTERVAL".into(),
        }
    }

    pub fn kind(self) -> Kind {
        match self {
            SqlType::Boolean => Kind::Bool,
            SqlType::SmallInt | SqlType::Integer | SqlType::BigInt => Kind::Int,
            SqlType::Real | SqlType::Double => Kind::Float,
            SqlType::Decimal(..) => Kind::Decimal,
            SqlType::Varchar | SqlType::Char(_) => Kind::Str,
            SqlType::Date => Kind::Date,
            SqlType::Timestamp => Kind::Timestamp,
            SqlType::Interval => Kind::Interval,
        }
    }

    /// A column type for a random table.
    pub fn random_column_type(rng: &mut Rng) -> SqlType {
        const TYPES: [SqlType; 16] = [
            SqlType::Boolean,
            SqlType::SmallInt,
            SqlType::Integer,
            SqlType::Integer,
            SqlType::BigInt,
            SqlType::Real,
            SqlType::Double,
            SqlType::Decimal(4, 1),
            SqlType::Decimal(9, 2),
            SqlType::Decimal(18, 4),
            SqlType::Decimal(38, 10),
            SqlType::Varchar,
            SqlType::Varchar,
            SqlType::Char(4),
            SqlType::Date,
            SqlType::Timestamp,
        ];
        if rng.chance(7) {
            return SqlType::Interval;
        }
        *rng.pick(&TYPES)
    }
}

/// Strings: empty, blanks, LIKE wildcards, case, non-ASCII, longer than the 12 bytes a
/// string view holds inline, and texts that look like other values. No backslashes (a LIKE
/// escape in PostgreSQL, not in DuckDB) and, for CHAR columns, no trailing blanks (CHAR
/// drops them in PostgreSQL and Apiary, DuckDB keeps them).
pub const STRINGS: &[&str] = &[
    "",
    "a",
    "A",
    "ab",
    "abc",
    "b",
    "B",
    "ba",
    "a b",
    " a",
    "a ",
    "a%",
    "%",
    "_",
    "x_y",
    "hello world",
    "abcdefghijklmno",
    "abcdefghijklmnopqrstuvwxyz",
    "é",
    "Ünïcode",
    "0",
    "-1",
    "1",
    "NULL",
    "true",
    "it's",
];

/// LIKE patterns.
pub const PATTERNS: &[&str] = &["%", "a%", "%a", "%b%", "_", "a_", "_b%", "", "a", "%o%", "A%", "x_y", "%é%", "__%"];

const DATES: &[&str] = &[
    "2020-01-01",
    "2020-02-29",
    "2019-12-31",
    "1970-01-01",
    "1969-12-31",
    "2000-01-01",
    "1999-12-31",
    "2038-01-19",
    "1900-03-01",
    "2100-12-31",
    "2024-06-15",
];

const TIMES: &[&str] = &["00:00:00", "12:34:56", "23:59:59.999999", "00:00:00.5", "06:00:00"];

const INTERVALS: &[&str] = &[
    "0 seconds",
    "1 day",
    "-1 day",
    "24 hours",
    "1 month",
    "30 days",
    "1 year 2 months 3 days",
    "-3 hours",
    "1 second",
    "2 hours 30 minutes",
    "7 days",
    "-1 month",
];

/// Reals that are exact in 32 bits, so every engine reads and prints the same number.
const REALS: &[&str] = &["0", "1.5", "-2.25", "0.5", "100", "3", "-1", "1e10", "0.125", "-0.75"];

const DOUBLES: &[&str] = &["0", "1.5", "-2.25", "0.1", "1e15", "-1e-05", "123456.789", "-1", "2", "0.3333333333333333", "1e-10"];

/// Values of special floats (behind `Features::special_floats`).
const SPECIAL_FLOATS: &[&str] = &["NaN", "Infinity", "-Infinity", "-0"];

/// Which unusual values data may hold.
#[derive(Debug, Clone, Copy, Default)]
pub struct ValueOptions {
    /// NaN, infinities and -0 in floats.
    pub special_floats: bool,
    /// DECIMAL(38,s) values beyond 64 bits (scaled).
    pub huge_decimals: bool,
}

/// A literal of `ty`, from edge values and a small pool so values repeat.
pub fn random_value(rng: &mut Rng, ty: SqlType, options: ValueOptions) -> String {
    match ty {
        SqlType::Boolean => if rng.chance(50) { "TRUE" } else { "FALSE" }.to_string(),
        SqlType::SmallInt => int_literal(rng, i16::MIN as i64, i16::MAX as i64),
        SqlType::Integer => int_literal(rng, i32::MIN as i64, i32::MAX as i64),
        SqlType::BigInt => int_literal(rng, i64::MIN, i64::MAX),
        SqlType::Real | SqlType::Double => {
            if options.special_floats && rng.chance(15) {
                return format!("CAST('{}' AS {})", rng.pick(SPECIAL_FLOATS), ty.sql());
            }
            let pool = if ty == SqlType::Real { REALS } else { DOUBLES };
            let text = if rng.chance(30) { format!("{}", rng.range(-20, 20)) } else { rng.pick(pool).to_string() };
            format!("CAST({} AS {})", parenthesize_negative(&text), ty.sql())
        }
        SqlType::Decimal(precision, scale) => decimal_literal(rng, precision, scale, options.huge_decimals),
        SqlType::Varchar => string_literal(rng.pick(STRINGS)),
        SqlType::Char(n) => {
            let fitting: Vec<&&str> =
                STRINGS.iter().filter(|s| s.chars().count() <= n as usize && !s.ends_with(' ') && !s.is_empty()).collect();
            string_literal(rng.pick(&fitting))
        }
        SqlType::Date => format!("DATE '{}'", random_date(rng)),
        SqlType::Timestamp => format!("TIMESTAMP '{} {}'", random_date(rng), rng.pick(TIMES)),
        SqlType::Interval => format!("INTERVAL '{}'", rng.pick(INTERVALS)),
    }
}

/// A small literal of a kind, for expressions (no extremes: expressions add and multiply).
pub fn small_literal(rng: &mut Rng, kind: Kind) -> (String, SqlType) {
    match kind {
        Kind::Int => {
            let value = if rng.chance(20) { *rng.pick(&[0, -1, 1, 2, 100]) } else { rng.range(-5, 50) };
            (parenthesize_negative(&value.to_string()), SqlType::Integer)
        }
        Kind::Float => {
            let ty = if rng.chance(20) { SqlType::Real } else { SqlType::Double };
            (random_value(rng, ty, ValueOptions::default()), ty)
        }
        Kind::Decimal => {
            let ty = *rng.pick(&[SqlType::Decimal(4, 1), SqlType::Decimal(9, 2), SqlType::Decimal(18, 4)]);
            let SqlType::Decimal(_, scale) = ty else { return ("0".into(), SqlType::Integer) };
            let whole = rng.range(-99, 99);
            let frac = rng.range(0, 10i64.pow(scale as u32) - 1);
            let text = format!("{}{}.{:0width$}", if whole < 0 { "-" } else { "" }, whole.abs(), frac, width = scale as usize);
            (format!("CAST({} AS {})", parenthesize_negative(&text), ty.sql()), ty)
        }
        Kind::Str => {
            // No trailing blank: PostgreSQL compares such a literal with a CHAR value as
            // CHAR (blank-insensitive), DuckDB as VARCHAR.
            let text = rng.pick(STRINGS).trim_end_matches(' ');
            (string_literal(text), SqlType::Varchar)
        }
        other => {
            let ty = other.default_type();
            (random_value(rng, ty, ValueOptions::default()), ty)
        }
    }
}

pub fn typed_null(ty: SqlType) -> String {
    format!("CAST(NULL AS {})", ty.sql())
}

pub fn string_literal(text: impl AsRef<str>) -> String {
    format!("'{}'", text.as_ref().replace('\'', "''"))
}

fn parenthesize_negative(text: &str) -> String {
    if text.starts_with('-') {
        format!("({text})")
    } else {
        text.to_string()
    }
}

fn random_date(rng: &mut Rng) -> String {
    if rng.chance(60) {
        return rng.pick(DATES).to_string();
    }
    // 2020-01-01 plus up to about three years.
    let (year, month, day) = civil_from_days(18262 + rng.range(-400, 1000));
    format!("{year:04}-{month:02}-{day:02}")
}

/// Days since 1970-01-01 to (year, month, day) (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn int_literal(rng: &mut Rng, min: i64, max: i64) -> String {
    let value = match rng.below(10) {
        0 => *rng.pick(&[min, max, 0, -1, 1]),
        1 => *rng.pick(&[min + 1, max - 1, 1000, -1000, 42]),
        _ => rng.range(-20, 60),
    };
    parenthesize_negative(&value.to_string())
}

fn decimal_literal(rng: &mut Rng, precision: u8, scale: u8, huge: bool) -> String {
    // Whole digits allowed; 38-digit columns stay below 10^20 so sums of them never
    // overflow in an engine that keeps 38 digits (PostgreSQL's NUMERIC never does). Without
    // `huge`, scaled values stay within 64 bits.
    let max_digits = if huge { 20 } else { 18u32.saturating_sub(scale as u32).max(1) };
    let whole_digits = ((precision - scale) as u32).min(max_digits);
    let max_whole = 10i128.pow(whole_digits) - 1;
    let max_frac = 10i128.pow(scale as u32) - 1;
    let (whole, frac) = match rng.below(8) {
        0 => (max_whole, max_frac),
        1 => (-max_whole, max_frac),
        2 => (0, 0),
        3 => (-1, 0),
        _ => (rng.range(-50, 200) as i128, rng.range(0, max_frac.min(999) as i64) as i128),
    };
    let sign = if whole < 0 { "-" } else { "" };
    let text = if scale == 0 {
        format!("{sign}{}", whole.abs())
    } else {
        format!("{sign}{}.{:0width$}", whole.abs(), frac, width = scale as usize)
    };
    format!("CAST({} AS DECIMAL({precision},{scale}))", parenthesize_negative(&text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(18262), (2020, 1, 1));
        assert_eq!(civil_from_days(18262 + 59), (2020, 2, 29));
    }

    #[test]
    fn literals_are_well_formed() {
        let mut rng = Rng::new(3);
        for _ in 0..200 {
            let v = decimal_literal(&mut rng, 4, 1, false);
            assert!(v.starts_with("CAST("), "{v}");
            let v = random_value(&mut rng, SqlType::Char(4), ValueOptions::default());
            assert!(v.len() <= 4 * 4 + 2, "{v}");
        }
    }
}
