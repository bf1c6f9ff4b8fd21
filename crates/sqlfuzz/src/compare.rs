//! Result comparison: rows as multisets (or sequences, when the order is fully
//! determined), with values normalised so that equal answers compare equal.
//!
//! * integers and decimals are exact numbers (`1.50` = `1.5` = `DECIMAL 1.500`);
//! * floats compare with a relative tolerance (sums add in any order), looser for REAL;
//!   NaN equals NaN, -0 equals 0;
//! * a DATE is the TIMESTAMP of its midnight; intervals are compared as PostgreSQL does,
//!   a month being 30 days (`1 mon` = `30 days`).

use std::cmp::Ordering;
use std::fmt;

use apiary::ScalarValue;

/// Relative tolerance for DOUBLE results.
const DOUBLE_TOLERANCE: f64 = 1e-9;
/// Relative tolerance when a REAL is involved (24-bit mantissa).
const REAL_TOLERANCE: f64 = 1e-5;
/// Significant digits kept when floats are sorted, so values within tolerance sort alike.
const SORT_DIGITS: i32 = 8;
const MICROS_PER_DAY: i64 = 86_400_000_000;

/// A normalised value.
#[derive(Debug, Clone)]
pub enum Cell {
    Null,
    Bool(bool),
    /// `mantissa / 10^scale`, without trailing zeros.
    Exact(i128, u8),
    /// A float; `real` when it came from a REAL (compared more loosely).
    Float(f64, bool),
    Text(String),
    /// Microseconds since 1970-01-01 (dates at midnight).
    Timestamp(i64),
    /// Microseconds, a month being 30 days and a day 24 hours.
    Interval(i128),
}

pub type Row = Vec<Cell>;

impl Cell {
    pub fn from_scalar(value: &ScalarValue) -> Cell {
        match value {
            ScalarValue::Null => Cell::Null,
            ScalarValue::Boolean(b) => Cell::Bool(*b),
            ScalarValue::Int16(v) => Cell::Exact(*v as i128, 0),
            ScalarValue::Int32(v) => Cell::Exact(*v as i128, 0),
            ScalarValue::Int64(v) => Cell::Exact(*v as i128, 0),
            ScalarValue::Float32(v) => Cell::Float(*v as f64, true),
            ScalarValue::Float64(v) => Cell::Float(*v, false),
            ScalarValue::Decimal(v, _, scale) => exact(*v, *scale),
            ScalarValue::Utf8(s) => Cell::Text(s.clone()),
            ScalarValue::Date(d) => Cell::Timestamp(*d as i64 * MICROS_PER_DAY),
            // Instants as UTC microseconds; times of day as microseconds since midnight.
            ScalarValue::Timestamp(t) | ScalarValue::TimestampTz(t) | ScalarValue::Time(t) => Cell::Timestamp(*t),
            ScalarValue::Interval(i) => Cell::Interval(i.normalized()),
        }
    }

    fn rank(&self) -> u8 {
        match self {
            Cell::Null => 0,
            Cell::Bool(_) => 1,
            Cell::Exact(..) | Cell::Float(..) => 2,
            Cell::Text(_) => 3,
            Cell::Timestamp(_) => 4,
            Cell::Interval(_) => 5,
        }
    }

    fn as_f64(&self) -> f64 {
        match self {
            Cell::Exact(m, s) => *m as f64 / 10f64.powi(*s as i32),
            Cell::Float(f, _) => *f,
            _ => 0.0,
        }
    }

    fn is_real(&self) -> bool {
        matches!(self, Cell::Float(_, true))
    }

    /// Equality with the tolerances above.
    pub fn matches(&self, other: &Cell) -> bool {
        match (self, other) {
            (Cell::Null, Cell::Null) => true,
            (Cell::Bool(a), Cell::Bool(b)) => a == b,
            (Cell::Exact(a, s), Cell::Exact(b, t)) => a == b && s == t,
            (Cell::Exact(..) | Cell::Float(..), Cell::Exact(..) | Cell::Float(..)) => {
                let tolerance = if self.is_real() || other.is_real() { REAL_TOLERANCE } else { DOUBLE_TOLERANCE };
                floats_match(self.as_f64(), other.as_f64(), tolerance)
            }
            (Cell::Text(a), Cell::Text(b)) => a == b,
            (Cell::Timestamp(a), Cell::Timestamp(b)) => a == b,
            (Cell::Interval(a), Cell::Interval(b)) => a == b,
            _ => false,
        }
    }

    /// A total order for sorting rows before a multiset comparison.
    fn sort_cmp(&self, other: &Cell) -> Ordering {
        let by_rank = self.rank().cmp(&other.rank());
        if by_rank != Ordering::Equal {
            return by_rank;
        }
        match (self, other) {
            (Cell::Bool(a), Cell::Bool(b)) => a.cmp(b),
            (Cell::Exact(a, s), Cell::Exact(b, t)) if s == t => a.cmp(b),
            (Cell::Exact(..) | Cell::Float(..), Cell::Exact(..) | Cell::Float(..)) => {
                sort_rounded(self.as_f64()).total_cmp(&sort_rounded(other.as_f64()))
            }
            (Cell::Text(a), Cell::Text(b)) => a.cmp(b),
            (Cell::Timestamp(a), Cell::Timestamp(b)) => a.cmp(b),
            (Cell::Interval(a), Cell::Interval(b)) => a.cmp(b),
            _ => Ordering::Equal,
        }
    }
}

fn exact(mantissa: i128, scale: u8) -> Cell {
    let (mut m, mut s) = (mantissa, scale);
    while s > 0 && m % 10 == 0 {
        m /= 10;
        s -= 1;
    }
    Cell::Exact(m, s)
}

fn floats_match(a: f64, b: f64, tolerance: f64) -> bool {
    if a.is_nan() || b.is_nan() {
        return a.is_nan() && b.is_nan();
    }
    if a == b {
        return true;
    }
    if a.is_infinite() || b.is_infinite() {
        return false;
    }
    let scale = a.abs().max(b.abs());
    (a - b).abs() <= tolerance * scale || (a - b).abs() <= 1e-12
}

/// `value` rounded to [`SORT_DIGITS`] significant digits; NaN sorts last, -0 as 0.
fn sort_rounded(value: f64) -> f64 {
    if value.is_nan() {
        return f64::INFINITY;
    }
    if value == 0.0 || value.is_infinite() {
        return if value == 0.0 { 0.0 } else { value };
    }
    let magnitude = value.abs().log10().floor() as i32;
    let factor = 10f64.powi(SORT_DIGITS - 1 - magnitude);
    if !factor.is_finite() || factor == 0.0 {
        return value;
    }
    (value * factor).round() / factor
}

fn row_cmp(a: &Row, b: &Row) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        let ordering = x.sort_cmp(y);
        if ordering != Ordering::Equal {
            return ordering;
        }
    }
    a.len().cmp(&b.len())
}

fn rows_match(a: &Row, b: &Row) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.matches(y))
}

/// Compares two results; `ordered` when both must list their rows in the same order.
/// `Err` describes the difference.
pub fn compare(left: &[Row], right: &[Row], ordered: bool) -> Result<(), String> {
    if ordered {
        if left.len() == right.len() && left.iter().zip(right).all(|(a, b)| rows_match(a, b)) {
            return Ok(());
        }
        if let Some(index) = left.iter().zip(right).position(|(a, b)| !rows_match(a, b)) {
            return Err(format!(
                "{} vs {} rows; first difference at row {}: {} vs {}",
                left.len(),
                right.len(),
                index + 1,
                show_row(&left[index]),
                show_row(&right[index])
            ));
        }
        // Same order as far as both go: the multiset difference shows the rest.
    }
    let mut a: Vec<&Row> = left.iter().collect();
    let mut b: Vec<&Row> = right.iter().collect();
    a.sort_by(|x, y| row_cmp(x, y));
    b.sort_by(|x, y| row_cmp(x, y));
    if a.len() == b.len() && a.iter().zip(&b).all(|(x, y)| rows_match(x, y)) {
        return if ordered { Err("same rows in a different order".to_string()) } else { Ok(()) };
    }
    // Walk both sorted lists and collect the rows that have no partner.
    let (mut only_left, mut only_right) = (Vec::new(), Vec::new());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if rows_match(a[i], b[j]) {
            i += 1;
            j += 1;
        } else if row_cmp(a[i], b[j]) == Ordering::Less {
            only_left.push(a[i]);
            i += 1;
        } else {
            only_right.push(b[j]);
            j += 1;
        }
    }
    only_left.extend(&a[i..]);
    only_right.extend(&b[j..]);
    // Rows whose sort keys tie after rounding may sit in a different order on each side:
    // pair the leftovers directly.
    only_left.retain(|row| match only_right.iter().position(|other| rows_match(row, other)) {
        Some(partner) => {
            only_right.remove(partner);
            false
        }
        None => true,
    });
    if only_left.is_empty() && only_right.is_empty() {
        return if ordered { Err("same rows in a different order".to_string()) } else { Ok(()) };
    }
    Err(format!(
        "{} vs {} rows; only in the first ({}): {}; only in the second ({}): {}",
        a.len(),
        b.len(),
        only_left.len(),
        show_rows(&only_left),
        only_right.len(),
        show_rows(&only_right)
    ))
}

/// Exact equality, as DISTINCT sees it: NULL equals NULL, NaN equals NaN, -0 equals 0,
/// numbers by value, intervals with a month of 30 days.
fn cells_identical(a: &Cell, b: &Cell) -> bool {
    match (a, b) {
        (Cell::Exact(..) | Cell::Float(..), Cell::Exact(..) | Cell::Float(..)) => {
            let (x, y) = (a.as_f64(), b.as_f64());
            match (a, b) {
                (Cell::Exact(m, s), Cell::Exact(n, t)) => m == n && s == t,
                _ => x == y || (x.is_nan() && y.is_nan()),
            }
        }
        _ => a.matches(b),
    }
}

/// A row that appears twice in `rows` (for results that must be duplicate-free).
pub fn find_duplicate(rows: &[Row]) -> Option<&Row> {
    let mut sorted: Vec<&Row> = rows.iter().collect();
    sorted.sort_by(|x, y| row_cmp(x, y));
    sorted.windows(2).find(|w| w[0].len() == w[1].len() && w[0].iter().zip(w[1]).all(|(a, b)| cells_identical(a, b))).map(|w| w[0])
}

/// Up to five rows, as text.
pub fn show_rows(rows: &[&Row]) -> String {
    const SHOWN: usize = 5;
    let mut text: Vec<String> = rows.iter().take(SHOWN).map(|r| show_row(r)).collect();
    if rows.len() > SHOWN {
        text.push(format!("... {} more", rows.len() - SHOWN));
    }
    text.join(" ")
}

pub fn show_row(row: &Row) -> String {
    format!("({})", row.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(", "))
}

impl fmt::Display for Cell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cell::Null => write!(f, "NULL"),
            Cell::Bool(b) => write!(f, "{b}"),
            Cell::Exact(m, 0) => write!(f, "{m}"),
            Cell::Exact(m, s) => {
                let divisor = 10i128.pow(*s as u32);
                let sign = if *m < 0 { "-" } else { "" };
                write!(f, "{sign}{}.{:0width$}", (m / divisor).abs(), (m % divisor).abs(), width = *s as usize)
            }
            Cell::Float(v, _) => write!(f, "{v:?}"),
            Cell::Text(s) => write!(f, "'{s}'"),
            Cell::Timestamp(t) => write!(f, "ts:{t}"),
            Cell::Interval(i) => write!(f, "interval:{i}us"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(v: i128) -> Cell {
        Cell::Exact(v, 0)
    }

    #[test]
    fn multisets() {
        let a = vec![vec![int(1)], vec![Cell::Null], vec![int(1)]];
        let b = vec![vec![Cell::Null], vec![int(1)], vec![int(1)]];
        assert!(compare(&a, &b, false).is_ok());
        assert!(compare(&a, &b, true).is_err());
        let c = vec![vec![Cell::Null], vec![int(1)]];
        let err = compare(&a, &c, false).unwrap_err();
        assert!(err.contains("only in the first (1): (1)"), "{err}");
    }

    #[test]
    fn duplicates() {
        let rows = vec![vec![Cell::Null], vec![int(7)], vec![Cell::Null]];
        assert!(find_duplicate(&rows).is_some());
        let rows = vec![vec![Cell::Float(0.3, false)], vec![Cell::Float(0.1 + 0.2, false)]];
        assert!(find_duplicate(&rows).is_none());
    }

    #[test]
    fn numbers() {
        assert!(exact(150, 2).matches(&exact(15, 1)));
        assert!(Cell::Float(0.1 + 0.2, false).matches(&Cell::Float(0.3, false)));
        assert!(Cell::Float(f64::NAN, false).matches(&Cell::Float(f64::NAN, false)));
        assert!(Cell::Float(-0.0, false).matches(&Cell::Float(0.0, false)));
        assert!(!Cell::Float(1.0, false).matches(&Cell::Float(1.001, false)));
        assert!(exact(25, 1).matches(&Cell::Float(2.5, false)));
        assert_eq!(exact(-1505, 2).to_string(), "-15.05");
    }
}
