//! The everyday functions of PostgreSQL and DuckDB beyond the core set in `function.rs`:
//! strings (`split_part`, `left`, `lpad`, `concat_ws`, `md5`, ...), regular expressions
//! (`regexp_matches`, `regexp_replace`, `regexp_extract`), dates and times
//! (`current_date`, `now()`, `date_diff`, `make_date`, `strftime`, `strptime`, `to_char`,
//! `age`, ...) and `TRY_CAST`. Each is resolved here to a typed [`ScalarFunction`] call
//! with coerced arguments; the kernels live in `apiary-execution` (`expr/text.rs`,
//! `expr/regex.rs`, `expr/datetime_functions.rs`).
//!
//! Arguments that select behaviour (a regular expression's flags, `regexp_extract`'s
//! group, `date_diff`'s part) must be constants, so that the kernel is specialised once
//! per query.

use apiary_common::{bind_err, type_err, Result};
use apiary_types::datetime::{DateField, MICROS_PER_DAY};
use apiary_types::{DataType, ScalarValue};

use super::Binder;
use crate::expr::{Expr, ScalarFunction};

/// What an argument is coerced to.
#[derive(Clone, Copy)]
enum Arg {
    /// A string (NULL becomes a VARCHAR NULL; other types are refused, as PostgreSQL).
    Text,
    /// Any value, converted to text (`concat_ws`).
    AnyText,
    /// An integer, as BIGINT.
    Integer,
    /// A number, as DOUBLE.
    Double,
    /// A DATE or TIMESTAMP (text and NULL become TIMESTAMP; a TIMESTAMPTZ becomes the
    /// TIMESTAMP of its local time in the session's zone).
    DateTime,
    /// As `DateTime`, but a TIMESTAMPTZ stays one and a TIME is accepted (formatting:
    /// `strftime`, `to_char`).
    Formattable,
}

/// The names resolved here, for "did you mean" hints.
pub(crate) const SCALAR_FUNCTIONS: &[&str] = &[
    "split_part",
    "left",
    "right",
    "lpad",
    "rpad",
    "concat_ws",
    "contains",
    "ends_with",
    "suffix",
    "repeat",
    "reverse",
    "md5",
    "initcap",
    "ascii",
    "chr",
    "regexp_matches",
    "regexp_like",
    "regexp_replace",
    "regexp_extract",
    "current_date",
    "current_timestamp",
    "now",
    "today",
    "localtimestamp",
    "current_time",
    "localtime",
    "transaction_timestamp",
    "statement_timestamp",
    "get_current_timestamp",
    "date_diff",
    "datediff",
    "make_date",
    "make_timestamp",
    "make_timestamptz",
    "make_time",
    "timezone",
    "strftime",
    "strptime",
    "try_strptime",
    "to_char",
    "dayname",
    "monthname",
    "age",
];

/// Units `date_diff` counts.
const DATE_DIFF_PARTS: &[DateField] = &[
    DateField::Year,
    DateField::Quarter,
    DateField::Month,
    DateField::Week,
    DateField::Day,
    DateField::Hour,
    DateField::Minute,
    DateField::Second,
    DateField::Millisecond,
    DateField::Microsecond,
    DateField::Decade,
    DateField::Century,
    DateField::Millennium,
    DateField::IsoYear,
];

impl Binder<'_> {
    /// Binds one of the functions of this module; `None` when `name` is none of them.
    pub(crate) fn bind_more_scalar_functions(&mut self, name: &str, args: Vec<Expr>) -> Result<Option<Expr>> {
        use Arg::*;
        use ScalarFunction as F;
        let text = DataType::Varchar(None);
        let (func, signature, required, data_type): (F, &[Arg], usize, DataType) = match name {
            "split_part" => (F::SplitPart, &[Text, Text, Integer], 3, text),
            "left" => (F::Left, &[Text, Integer], 2, text),
            "right" => (F::Right, &[Text, Integer], 2, text),
            "lpad" => (F::Lpad, &[Text, Integer, Text], 2, text),
            "rpad" => (F::Rpad, &[Text, Integer, Text], 2, text),
            "contains" => (F::Contains, &[Text, Text], 2, DataType::Boolean),
            "ends_with" | "suffix" => (F::EndsWith, &[Text, Text], 2, DataType::Boolean),
            "repeat" => (F::Repeat, &[Text, Integer], 2, text),
            "reverse" => (F::Reverse, &[Text], 1, text),
            "md5" => (F::Md5, &[Text], 1, text),
            "initcap" => (F::Initcap, &[Text], 1, text),
            "ascii" => (F::Ascii, &[Text], 1, DataType::Integer),
            "chr" => (F::Chr, &[Integer], 1, text),
            "regexp_matches" | "regexp_like" => (F::RegexpMatches, &[Text, Text, Text], 2, DataType::Boolean),
            "regexp_replace" => (F::RegexpReplace, &[Text, Text, Text, Text], 3, text),
            "regexp_extract" => (F::RegexpExtract, &[Text, Text, Integer, Text], 2, text),
            "make_date" => (F::MakeDate, &[Integer, Integer, Integer], 3, DataType::Date),
            "make_timestamp" => (F::MakeTimestamp, &[Integer, Integer, Integer, Integer, Integer, Double], 6, DataType::Timestamp),
            "make_timestamptz" => {
                (F::MakeTimestampTz, &[Integer, Integer, Integer, Integer, Integer, Double, Text], 6, DataType::TimestampTz)
            }
            "make_time" => (F::MakeTime, &[Integer, Integer, Double], 3, DataType::Time),
            "timezone" => {
                let [zone, value]: [Expr; 2] =
                    args.try_into().map_err(|args: Vec<Expr>| bind_err!("function timezone takes 2 arguments, got {}", args.len()))?;
                return self.bind_at_time_zone(value, zone).map(Some);
            }
            "strptime" => (F::Strptime, &[Text, Text], 2, DataType::Timestamp),
            "try_strptime" => (F::TryStrptime, &[Text, Text], 2, DataType::Timestamp),
            "dayname" => (F::DayName, &[DateTime], 1, text),
            "monthname" => (F::MonthName, &[DateTime], 1, text),
            "concat_ws" => {
                if args.len() < 2 {
                    return Err(bind_err!("function concat_ws needs a separator and at least one value"));
                }
                let mut bound = Vec::with_capacity(args.len());
                for (i, arg) in args.into_iter().enumerate() {
                    bound.push(self.coerce_arg(name, arg, if i == 0 { Text } else { AnyText })?);
                }
                return Ok(Some(Expr::Function { func: F::ConcatWs, args: bound, data_type: text }));
            }
            "strftime" => return self.bind_strftime(args).map(Some),
            "to_char" => return self.bind_to_char(args).map(Some),
            "current_date"
            | "today"
            | "current_timestamp"
            | "now"
            | "localtimestamp"
            | "current_time"
            | "localtime"
            | "get_current_timestamp"
            | "transaction_timestamp"
            | "statement_timestamp" => {
                if !args.is_empty() {
                    return Err(bind_err!("function {name} takes no arguments"));
                }
                let now = *self.statement_time.get_or_insert_with(current_micros);
                // The session's wall-clock time, for the functions that answer in it.
                let local = self.time_zone.to_local(now).unwrap_or(now);
                return Ok(Some(match name {
                    "current_date" | "today" => Expr::literal(ScalarValue::Date(local.div_euclid(MICROS_PER_DAY) as i32)),
                    "localtimestamp" => Expr::literal(ScalarValue::Timestamp(local)),
                    // PostgreSQL's current_time is a TIME WITH TIME ZONE, which Apiary does
                    // not have: both give the local TIME.
                    "current_time" | "localtime" => Expr::literal(ScalarValue::Time(local.rem_euclid(MICROS_PER_DAY))),
                    _ => Expr::literal(ScalarValue::TimestampTz(now)),
                }));
            }
            "date_diff" | "datediff" => return self.bind_date_diff(name, args).map(Some),
            "age" => return self.bind_age(args).map(Some),
            _ => return Ok(None),
        };
        if args.len() < required || args.len() > signature.len() {
            let expected = if required == signature.len() { required.to_string() } else { format!("{required} to {}", signature.len()) };
            return Err(bind_err!("function {name} takes {expected} arguments, got {}", args.len()));
        }
        let mut bound = Vec::with_capacity(args.len());
        for (arg, kind) in args.into_iter().zip(signature) {
            bound.push(self.coerce_arg(name, arg, *kind)?);
        }
        match func {
            F::RegexpMatches => constant_args(name, &bound[2..], "the flags")?,
            F::RegexpReplace => constant_args(name, &bound[3..], "the flags")?,
            F::RegexpExtract => constant_args(name, &bound[2..], "the group and the flags")?,
            _ => {}
        }
        Ok(Some(Expr::Function { func, args: bound, data_type }))
    }

    /// `TRY_CAST(value AS to)`: a failing conversion gives NULL, and so does one that is
    /// never possible (DATE to INTEGER), as in DuckDB.
    pub(crate) fn try_cast(&self, value: Expr, to: DataType) -> Result<Expr> {
        if value.data_type() == to {
            return Ok(value);
        }
        if self.cast(Expr::Literal(ScalarValue::Null, value.data_type()), to).is_err() {
            return Ok(Expr::Literal(ScalarValue::Null, to));
        }
        match value {
            Expr::Literal(v, _) => Ok(Expr::Literal(v.cast_to_in(&to, &self.time_zone).unwrap_or(ScalarValue::Null), to)),
            other => Ok(Expr::Function { func: ScalarFunction::TryCast, args: vec![other], data_type: to }),
        }
    }

    fn coerce_arg(&self, function: &str, arg: Expr, kind: Arg) -> Result<Expr> {
        match kind {
            Arg::Text => self.string_arg(function, arg),
            Arg::AnyText => match arg.data_type() {
                t if t.is_string() => Ok(arg),
                DataType::Null => Ok(Expr::Literal(ScalarValue::Null, DataType::Varchar(None))),
                _ => self.cast(arg, DataType::Varchar(None)),
            },
            Arg::Integer => self.integer_arg(function, arg),
            Arg::Double => {
                let arg = self.numeric_arg(function, arg)?;
                self.cast(arg, DataType::Double)
            }
            Arg::DateTime => match arg.data_type() {
                DataType::Date | DataType::Timestamp => Ok(arg),
                DataType::TimestampTz => self.cast(arg, DataType::Timestamp),
                t if t.is_string() || t == DataType::Null => self.cast(arg, DataType::Timestamp),
                t => Err(type_err!("function {function} needs a DATE or TIMESTAMP, not {t}")),
            },
            Arg::Formattable => match arg.data_type() {
                DataType::Date | DataType::Timestamp | DataType::TimestampTz | DataType::Time => Ok(arg),
                t if t.is_string() || t == DataType::Null => self.cast(arg, DataType::Timestamp),
                t => Err(type_err!("function {function} needs a DATE, TIMESTAMP, TIMESTAMPTZ or TIME, not {t}")),
            },
        }
    }

    /// `strftime(value, format)` (DuckDB also accepts `strftime(format, value)`).
    fn bind_strftime(&mut self, args: Vec<Expr>) -> Result<Expr> {
        let [first, second]: [Expr; 2] =
            args.try_into().map_err(|args: Vec<Expr>| bind_err!("function strftime takes 2 arguments, got {}", args.len()))?;
        let (value, format) =
            if first.data_type().is_string() && second.data_type().is_temporal() { (second, first) } else { (first, second) };
        let value = self.coerce_arg("strftime", value, Arg::Formattable)?;
        let format = self.coerce_arg("strftime", format, Arg::Text)?;
        Ok(Expr::Function { func: ScalarFunction::Strftime, args: vec![value, format], data_type: DataType::Varchar(None) })
    }

    /// `to_char(date, timestamp, timestamptz or time, pattern)`.
    fn bind_to_char(&mut self, args: Vec<Expr>) -> Result<Expr> {
        let [value, pattern]: [Expr; 2] =
            args.try_into().map_err(|args: Vec<Expr>| bind_err!("function to_char takes 2 arguments, got {}", args.len()))?;
        if value.data_type().is_numeric() || value.data_type() == DataType::Interval {
            return Err(apiary_common::not_impl_err!("to_char of {} (only dates, times and timestamps)", value.data_type()));
        }
        let value = self.coerce_arg("to_char", value, Arg::Formattable)?;
        let pattern = self.coerce_arg("to_char", pattern, Arg::Text)?;
        Ok(Expr::Function { func: ScalarFunction::ToChar, args: vec![value, pattern], data_type: DataType::Varchar(None) })
    }

    /// `date_diff(part, start, end)`: the part is a constant; DATE and TIMESTAMP
    /// arguments meet as TIMESTAMP when they differ.
    fn bind_date_diff(&mut self, name: &str, args: Vec<Expr>) -> Result<Expr> {
        let [part, start, end]: [Expr; 3] =
            args.try_into().map_err(|args: Vec<Expr>| bind_err!("function {name} takes 3 arguments, got {}", args.len()))?;
        let field = match &part {
            Expr::Literal(ScalarValue::Utf8(s), _) => DateField::parse(s).ok_or_else(|| bind_err!("unknown date part '{s}'"))?,
            Expr::Literal(ScalarValue::Null, _) => return Ok(Expr::Literal(ScalarValue::Null, DataType::BigInt)),
            _ => return Err(bind_err!("the first argument of {name} (the date part) must be a constant string")),
        };
        let field = match field {
            // DuckDB counts days for these.
            DateField::DayOfWeek | DateField::DayOfYear | DateField::IsoDayOfWeek => DateField::Day,
            DateField::Epoch => DateField::Second,
            other => other,
        };
        if !DATE_DIFF_PARTS.contains(&field) {
            return Err(bind_err!("{name} does not count {field:?} parts"));
        }
        let mut start = self.coerce_arg(name, start, Arg::DateTime)?;
        let mut end = self.coerce_arg(name, end, Arg::DateTime)?;
        if start.data_type() != end.data_type() {
            start = self.cast(start, DataType::Timestamp)?;
            end = self.cast(end, DataType::Timestamp)?;
        }
        Ok(Expr::Function { func: ScalarFunction::DateDiff(field), args: vec![start, end], data_type: DataType::BigInt })
    }

    /// `age(a, b)` = the interval from b to a; `age(a)` = from a to today's midnight.
    fn bind_age(&mut self, args: Vec<Expr>) -> Result<Expr> {
        let mut args = args;
        if args.len() == 1 {
            // From today's midnight in the session's zone.
            let now = *self.statement_time.get_or_insert_with(current_micros);
            let local = self.time_zone.to_local(now).unwrap_or(now);
            let midnight = local - local.rem_euclid(MICROS_PER_DAY);
            args.insert(0, Expr::literal(ScalarValue::Timestamp(midnight)));
        }
        if args.len() != 2 {
            return Err(bind_err!("function age takes 1 or 2 arguments, got {}", args.len()));
        }
        let args = args
            .into_iter()
            .map(|a| {
                let a = self.coerce_arg("age", a, Arg::DateTime)?;
                self.cast(a, DataType::Timestamp)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Expr::Function { func: ScalarFunction::Age, args, data_type: DataType::Interval })
    }
}

/// Requires `args` to be literals (what the kernel is specialised to).
fn constant_args(name: &str, args: &[Expr], what: &str) -> Result<()> {
    if args.iter().all(Expr::is_literal) {
        Ok(())
    } else {
        Err(bind_err!("{what} of {name} must be constants"))
    }
}

/// Microseconds since 1970-01-01 00:00:00 UTC now.
fn current_micros() -> i64 {
    let elapsed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(elapsed.as_micros()).unwrap_or(i64::MAX)
}
