//! Scalar and aggregate functions: resolution by name and result types.

use apiary_common::{bind_err, not_impl_err, type_err, Result};
use apiary_types::datatype::MAX_DECIMAL_PRECISION;
use apiary_types::datetime::DateField;
use apiary_types::{DataType, ScalarValue};

use super::expr::trim_kind;
use super::Binder;
use crate::coercion::{common_type, DIVISION_MIN_SCALE};
use crate::expr::{AggregateCall, AggregateFunction, Expr, ScalarFunction, SortKey};

const AGGREGATES: &[&str] = &[
    "count",
    "sum",
    "avg",
    "mean",
    "min",
    "max",
    "any_value",
    "first",
    "arbitrary",
    "bool_and",
    "bool_or",
    "every",
    "stddev",
    "stddev_samp",
    "stddev_pop",
    "variance",
    "var_samp",
    "var_pop",
];

/// The type of `sum` over values of type `input` (PostgreSQL's: integers widen, so that
/// sums of INTEGER are BIGINT and sums of BIGINT are NUMERIC).
pub fn sum_type(input: DataType) -> DataType {
    match input {
        DataType::SmallInt | DataType::Integer => DataType::BigInt,
        DataType::BigInt => DataType::decimal(MAX_DECIMAL_PRECISION, 0),
        DataType::Decimal { scale, .. } => DataType::decimal(MAX_DECIMAL_PRECISION, scale),
        DataType::Real | DataType::Double => DataType::Double,
        _ => DataType::BigInt,
    }
}

pub fn is_aggregate_function(name: &str) -> bool {
    AGGREGATES.contains(&name) || super::aggregate_functions::MORE_AGGREGATES.contains(&name)
}

impl Binder<'_> {
    /// An aggregate call, with the keys of an ORDER BY inside the call and of
    /// `WITHIN GROUP (ORDER BY ...)`.
    pub(crate) fn aggregate_call_ordered(
        &mut self,
        name: &str,
        args: Vec<Expr>,
        star: bool,
        distinct: bool,
        filter: Option<Expr>,
        order_by: Vec<SortKey>,
        within_group: Vec<SortKey>,
    ) -> Result<AggregateCall> {
        use AggregateFunction as F;
        let filter = filter.map(Box::new);
        if super::aggregate_functions::MORE_AGGREGATES.contains(&name) && !star {
            return self.more_aggregate_call(name, args, distinct, filter, order_by, within_group);
        }
        if !within_group.is_empty() {
            return Err(bind_err!("{name} is not an ordered-set aggregate: WITHIN GROUP is not allowed"));
        }
        if !order_by.is_empty() && matches!(name, "any_value" | "first" | "arbitrary") {
            return Err(not_impl_err!("ORDER BY inside {name}(...)"));
        }
        if star {
            if name != "count" || !args.is_empty() {
                return Err(bind_err!("{name}(*) is not valid; only count(*) takes *"));
            }
            return Ok(AggregateCall::new(F::CountStar, args, false, filter, DataType::BigInt));
        }
        if name == "count" && args.is_empty() {
            return Ok(AggregateCall::new(F::CountStar, args, false, filter, DataType::BigInt));
        }
        if args.len() != 1 {
            return Err(bind_err!("aggregate {name} takes exactly one argument, got {}", args.len()));
        }
        // A bare NULL (`sum(NULL)`) aggregates as an INTEGER column of NULLs, as in DuckDB.
        let mut args = args;
        if args[0].data_type() == DataType::Null {
            let null = args.pop().expect("one argument");
            let target = if matches!(name, "bool_and" | "every" | "bool_or") { DataType::Boolean } else { DataType::Integer };
            args.push(self.cast(null, target)?);
        }
        let input = args[0].data_type();
        let numeric = |what: &str| -> Result<()> {
            if input.is_numeric() || input == DataType::Null {
                Ok(())
            } else {
                Err(type_err!("{what} is not defined for {input}"))
            }
        };
        let (func, data_type) = match name {
            "count" => (F::Count, DataType::BigInt),
            "sum" => {
                numeric("sum")?;
                (F::Sum, sum_type(input))
            }
            "avg" | "mean" => {
                numeric("avg")?;
                let t = match input {
                    // The scale of decimal division (sum / count), at least 16 digits.
                    DataType::Decimal { scale, .. } => DataType::decimal(MAX_DECIMAL_PRECISION, scale.max(DIVISION_MIN_SCALE)),
                    _ => DataType::Double,
                };
                (F::Avg, t)
            }
            "min" | "max" => {
                if input == DataType::Interval {
                    return Err(type_err!("{name} is not defined for INTERVAL"));
                }
                (if name == "min" { F::Min } else { F::Max }, if input == DataType::Null { DataType::Integer } else { input })
            }
            "any_value" | "first" | "arbitrary" => (F::AnyValue, input),
            "bool_and" | "every" | "bool_or" => {
                if input != DataType::Boolean && input != DataType::Null {
                    return Err(type_err!("{name} needs a BOOLEAN argument, not {input}"));
                }
                (if name == "bool_or" { F::BoolOr } else { F::BoolAnd }, DataType::Boolean)
            }
            "stddev" | "stddev_samp" | "stddev_pop" | "variance" | "var_samp" | "var_pop" => {
                numeric(name)?;
                let func = match name {
                    "stddev" | "stddev_samp" => F::StddevSamp,
                    "stddev_pop" => F::StddevPop,
                    "variance" | "var_samp" => F::VarSamp,
                    _ => F::VarPop,
                };
                (func, DataType::Double)
            }
            other => return Err(bind_err!("unknown aggregate function {other}")),
        };
        let args = if matches!(func, F::StddevSamp | F::StddevPop | F::VarSamp | F::VarPop) {
            vec![self.cast(args.into_iter().next().expect("one argument"), DataType::Double)?]
        } else {
            args
        };
        Ok(AggregateCall::new(func, args, distinct, filter, data_type))
    }

    pub(crate) fn bind_scalar_function(&mut self, name: &str, args: Vec<Expr>) -> Result<Expr> {
        use ScalarFunction as F;
        let arity = |min: usize, max: usize| -> Result<()> {
            if args.len() < min || args.len() > max {
                let expected = if min == max { format!("{min}") } else { format!("{min} to {max}") };
                return Err(bind_err!("function {name} takes {expected} arguments, got {}", args.len()));
            }
            Ok(())
        };
        let text = DataType::Varchar(None);
        match name {
            "nextval" | "currval" => {
                arity(1, 1)?;
                let handle = self.sequence_arg(name, &args[0])?;
                let func = if name == "nextval" { F::NextVal } else { F::CurrVal };
                Ok(Expr::Function { func, args: vec![handle, self.session_arg()], data_type: DataType::BigInt })
            }
            "lastval" => {
                arity(0, 0)?;
                Ok(Expr::Function { func: F::LastVal, args: vec![self.session_arg()], data_type: DataType::BigInt })
            }
            "setval" => {
                arity(2, 3)?;
                let mut it = args.into_iter();
                let handle = self.sequence_arg(name, &it.next().expect("arity"))?;
                let value = self.integer_arg(name, it.next().expect("arity"))?;
                let called = match it.next() {
                    Some(called) if called.data_type() == DataType::Boolean => called,
                    Some(other) => return Err(type_err!("function setval needs a boolean is_called, not {}", other.data_type())),
                    None => Expr::boolean(true),
                };
                let session = self.session_arg();
                Ok(Expr::Function { func: F::SetVal, args: vec![handle, value, called, session], data_type: DataType::BigInt })
            }
            "substring" | "substr" => {
                arity(2, 3)?;
                let mut it = args.into_iter();
                let value = self.string_arg(name, it.next().expect("arity"))?;
                let rest = it.map(|a| self.integer_arg(name, a)).collect::<Result<Vec<_>>>()?;
                let mut args = vec![value];
                args.extend(rest);
                Ok(Expr::Function { func: F::Substring, args, data_type: text })
            }
            "upper" | "lower" | "ucase" | "lcase" => {
                arity(1, 1)?;
                let value = self.string_arg(name, args.into_iter().next().expect("arity"))?;
                let func = if name == "upper" || name == "ucase" { F::Upper } else { F::Lower };
                Ok(Expr::Function { func, args: vec![value], data_type: text })
            }
            "length" | "char_length" | "character_length" | "len" => {
                arity(1, 1)?;
                let value = self.string_arg(name, args.into_iter().next().expect("arity"))?;
                Ok(Expr::Function { func: F::Length, args: vec![value], data_type: DataType::Integer })
            }
            "trim" | "ltrim" | "rtrim" | "btrim" => {
                arity(1, 2)?;
                let args = args.into_iter().map(|a| self.string_arg(name, a)).collect::<Result<Vec<_>>>()?;
                Ok(Expr::Function { func: F::Trim(trim_kind(name)), args, data_type: text })
            }
            "replace" => {
                arity(3, 3)?;
                let args = args.into_iter().map(|a| self.string_arg(name, a)).collect::<Result<Vec<_>>>()?;
                Ok(Expr::Function { func: F::Replace, args, data_type: text })
            }
            "strpos" | "instr" => {
                arity(2, 2)?;
                let args = args.into_iter().map(|a| self.string_arg(name, a)).collect::<Result<Vec<_>>>()?;
                Ok(Expr::Function { func: F::Position, args, data_type: DataType::Integer })
            }
            "starts_with" | "prefix" => {
                arity(2, 2)?;
                let args = args.into_iter().map(|a| self.string_arg(name, a)).collect::<Result<Vec<_>>>()?;
                Ok(Expr::Function { func: F::StartsWith, args, data_type: DataType::Boolean })
            }
            "concat" => {
                if args.is_empty() {
                    return Err(bind_err!("function concat needs at least one argument"));
                }
                let args = args
                    .into_iter()
                    .map(|a| if a.data_type().is_string() { Ok(a) } else { self.cast(a, DataType::Varchar(None)) })
                    .collect::<Result<Vec<_>>>()?;
                Ok(Expr::Function { func: F::Concat, args, data_type: text })
            }
            "abs" | "sign" => {
                arity(1, 1)?;
                let value = self.numeric_arg(name, args.into_iter().next().expect("arity"))?;
                let value = if value.data_type() == DataType::Real { self.cast(value, DataType::Double)? } else { value };
                let t = value.data_type();
                let func = if name == "abs" { F::Abs } else { F::Sign };
                Ok(Expr::Function { func, args: vec![value], data_type: t })
            }
            "round" => {
                arity(1, 2)?;
                let mut it = args.into_iter();
                let value = self.numeric_arg(name, it.next().expect("arity"))?;
                let digits = match it.next() {
                    Some(d) => match self.integer_arg(name, d)? {
                        Expr::Literal(v, _) => v.as_i128().unwrap_or(0) as i32,
                        _ => return Err(bind_err!("the second argument of round must be a constant")),
                    },
                    None => 0,
                };
                let data_type = match value.data_type() {
                    DataType::Decimal { precision, scale } => {
                        let new_scale = digits.clamp(0, scale as i32) as u8;
                        // Rounding can carry into one more integer digit (99.5 -> 100).
                        DataType::decimal((precision + 1).min(MAX_DECIMAL_PRECISION), new_scale)
                    }
                    DataType::Real | DataType::Double => DataType::Double,
                    other => other,
                };
                let value = if data_type == DataType::Double { self.cast(value, DataType::Double)? } else { value };
                let digits = Expr::literal(ScalarValue::Int32(digits));
                Ok(Expr::Function { func: F::Round, args: vec![value, digits], data_type })
            }
            "ceil" | "ceiling" | "floor" => {
                arity(1, 1)?;
                let value = self.numeric_arg(name, args.into_iter().next().expect("arity"))?;
                let data_type = match value.data_type() {
                    DataType::Decimal { precision, .. } => DataType::decimal(precision, 0),
                    DataType::Real => DataType::Double,
                    other => other,
                };
                let value = if data_type == DataType::Double { self.cast(value, DataType::Double)? } else { value };
                let func = if name == "floor" { F::Floor } else { F::Ceil };
                Ok(Expr::Function { func, args: vec![value], data_type })
            }
            "sqrt" | "ln" | "exp" | "power" | "pow" => {
                let (func, n) = match name {
                    "sqrt" => (F::Sqrt, 1),
                    "ln" => (F::Ln, 1),
                    "exp" => (F::Exp, 1),
                    _ => (F::Power, 2),
                };
                arity(n, n)?;
                let args = args
                    .into_iter()
                    .map(|a| {
                        let a = self.numeric_arg(name, a)?;
                        self.cast(a, DataType::Double)
                    })
                    .collect::<Result<Vec<_>>>()?;
                Ok(Expr::Function { func, args, data_type: DataType::Double })
            }
            "coalesce" | "ifnull" | "nvl" | "greatest" | "least" => {
                if args.is_empty() || ((name == "ifnull" || name == "nvl") && args.len() != 2) {
                    return Err(bind_err!("function {name} has the wrong number of arguments"));
                }
                let mut t = DataType::Null;
                for a in &args {
                    t = common_type(&t, &a.data_type())
                        .ok_or_else(|| type_err!("{name} types {t} and {} cannot be matched", a.data_type()))?;
                }
                if t == DataType::Null {
                    t = DataType::Integer;
                }
                let args = args.into_iter().map(|a| self.coerce(a, &t)).collect::<Result<Vec<_>>>()?;
                let func = match name {
                    "greatest" => F::Greatest,
                    "least" => F::Least,
                    _ => F::Coalesce,
                };
                Ok(Expr::Function { func, args, data_type: t })
            }
            "nullif" => {
                arity(2, 2)?;
                let mut it = args.into_iter();
                let a = it.next().expect("arity");
                let b = it.next().expect("arity");
                let t = common_type(&a.data_type(), &b.data_type())
                    .ok_or_else(|| type_err!("nullif types {} and {} cannot be matched", a.data_type(), b.data_type()))?;
                let a = self.coerce(a, &t)?;
                let b = self.coerce(b, &t)?;
                Ok(Expr::Function { func: F::NullIf, args: vec![a, b], data_type: t })
            }
            "date_part" | "datepart" => {
                arity(2, 2)?;
                let mut it = args.into_iter();
                let field = match it.next().expect("arity") {
                    Expr::Literal(ScalarValue::Utf8(s), _) => DateField::parse(&s).ok_or_else(|| bind_err!("unknown date field '{s}'"))?,
                    _ => return Err(bind_err!("the first argument of date_part must be a constant string")),
                };
                self.date_field_function(field, it.next().expect("arity"))
            }
            "year" | "month" | "day" | "quarter" | "hour" | "minute" | "second" | "dayofweek" | "dayofyear" | "week" | "weekofyear"
            | "dayofmonth" | "weekday" | "isodow" | "isoyear" | "millisecond" | "microsecond" | "decade" | "century" | "millennium"
            | "epoch" => {
                arity(1, 1)?;
                let field = DateField::parse(name).expect("listed names parse");
                self.date_field_function(field, args.into_iter().next().expect("arity"))
            }
            "date_trunc" => {
                arity(2, 3)?;
                let mut it = args.into_iter();
                let unit = it.next().expect("arity");
                const DAY_UNITS: &[&str] = &["millennium", "century", "decade", "year", "quarter", "month", "week", "day"];
                const TIME_UNITS: &[&str] = &["hour", "minute", "second", "milliseconds", "millisecond", "microseconds", "microsecond"];
                let unit_name = match &unit {
                    Expr::Literal(ScalarValue::Utf8(s), _) => s.to_lowercase(),
                    _ => return Err(bind_err!("date_trunc unit must be a constant string")),
                };
                let value = it.next().expect("arity");
                let zone = it.next();
                // DATE stays DATE (for units of a day or longer); TIMESTAMP stays
                // TIMESTAMP; TIMESTAMPTZ is truncated in the session's zone (or the
                // third argument's) and stays TIMESTAMPTZ.
                let value = match value.data_type() {
                    _ if zone.is_some() => self.cast(value, DataType::TimestampTz)?,
                    DataType::Date if TIME_UNITS.contains(&unit_name.as_str()) => self.cast(value, DataType::Timestamp)?,
                    DataType::Date | DataType::Timestamp | DataType::TimestampTz => value,
                    DataType::Null => self.cast(value, DataType::Timestamp)?,
                    t if t.is_string() => self.cast(value, DataType::Timestamp)?,
                    t => return Err(type_err!("date_trunc needs a DATE, TIMESTAMP or TIMESTAMPTZ, not {t}")),
                };
                if !DAY_UNITS.contains(&unit_name.as_str()) && !TIME_UNITS.contains(&unit_name.as_str()) {
                    return Err(bind_err!("date_trunc unit \"{unit_name}\" is not one of {}", [DAY_UNITS, TIME_UNITS].concat().join(", ")));
                }
                let data_type = value.data_type();
                let mut args = vec![unit, value];
                if let Some(zone) = zone {
                    match zone {
                        Expr::Literal(ScalarValue::Utf8(name), _) => {
                            if apiary_types::TimeZone::for_input(&name).is_none() {
                                return Err(apiary_common::exec_err!("time zone \"{name}\" not recognized"));
                            }
                            args.push(Expr::Literal(ScalarValue::Utf8(name), DataType::Varchar(None)));
                        }
                        Expr::Literal(ScalarValue::Null, _) => return Ok(Expr::Literal(ScalarValue::Null, data_type)),
                        _ => return Err(bind_err!("the time zone of date_trunc must be a constant string")),
                    }
                }
                Ok(Expr::Function { func: F::DateTrunc, args, data_type })
            }
            other if super::scalar_functions::SCALAR_FUNCTIONS.contains(&other) => {
                let args_count = args.len();
                self.bind_more_scalar_functions(other, args)?
                    .ok_or_else(|| bind_err!("function {other} cannot take {args_count} arguments"))
            }
            other if self.table_functions.has_engine_function(other) => {
                // Engine functions with an effect (apiary_cancel) run once, here: their
                // arguments must be constants.
                let mut values = Vec::with_capacity(args.len());
                for arg in &args {
                    match arg {
                        Expr::Literal(value, _) => values.push(value.clone()),
                        _ => return Err(bind_err!("the arguments of {other} must be constants")),
                    }
                }
                let value = self.table_functions.call_engine_function(other, &values)?;
                let data_type = value.data_type();
                Ok(Expr::Literal(value, data_type))
            }
            other => {
                let known = KNOWN_SCALAR_FUNCTIONS.iter().chain(super::scalar_functions::SCALAR_FUNCTIONS);
                let hint =
                    apiary_common::error::closest_name(other, known.copied()).map(|c| format!(" (did you mean {c}?)")).unwrap_or_default();
                Err(bind_err!("function {other} does not exist{hint}"))
            }
        }
    }

    pub(crate) fn date_field_function(&mut self, field: DateField, value: Expr) -> Result<Expr> {
        let value = match value.data_type() {
            DataType::Date | DataType::Timestamp | DataType::TimestampTz | DataType::Time => value,
            t if t.is_string() => self.cast(value, DataType::Timestamp)?,
            t => return Err(type_err!("date part needs a DATE, TIMESTAMP, TIMESTAMPTZ or TIME, not {t}")),
        };
        super::expr::extract_call(field, value)
    }

    /// The sequence a `nextval` / `setval` names (a string literal, read as an
    /// identifier: lower-cased unless double-quoted) as its handle literal.
    /// The session's id (see `Binder::session`) as a literal argument.
    fn session_arg(&self) -> Expr {
        Expr::Literal(ScalarValue::Int64(self.session as i64), DataType::BigInt)
    }

    fn sequence_arg(&self, function: &str, arg: &Expr) -> Result<Expr> {
        let Expr::Literal(ScalarValue::Utf8(text), _) = arg else {
            return Err(not_impl_err!("{function} of a sequence named by anything but a string literal"));
        };
        let name = match text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
            Some(quoted) => quoted.replace("\"\"", "\""),
            None => text.to_lowercase(),
        };
        let own = self.default_sequences.iter().find(|s| s.name == name).cloned();
        let sequence = own
            .or_else(|| self.catalog.get_sequence(&name))
            .ok_or_else(|| apiary_common::ApiaryError::Catalog(format!("relation \"{name}\" does not exist (no sequence of that name)")))?;
        Ok(Expr::Literal(ScalarValue::Int64(sequence.handle() as i64), DataType::BigInt))
    }

    pub(crate) fn string_arg(&self, function: &str, arg: Expr) -> Result<Expr> {
        let t = arg.data_type();
        if t.is_string() {
            Ok(arg)
        } else if t == DataType::Null {
            Ok(Expr::Literal(ScalarValue::Null, DataType::Varchar(None)))
        } else {
            Err(type_err!("function {function} needs a string argument, not {t}"))
        }
    }

    pub(crate) fn integer_arg(&self, function: &str, arg: Expr) -> Result<Expr> {
        let t = arg.data_type();
        if t.is_integer() || t == DataType::Null {
            self.coerce(arg, &DataType::BigInt)
        } else {
            Err(type_err!("function {function} needs an integer argument, not {t}"))
        }
    }

    pub(crate) fn numeric_arg(&self, function: &str, arg: Expr) -> Result<Expr> {
        let t = arg.data_type();
        if t.is_numeric() {
            Ok(arg)
        } else if t == DataType::Null {
            Ok(Expr::Literal(ScalarValue::Null, DataType::Double))
        } else {
            Err(type_err!("function {function} needs a numeric argument, not {t}"))
        }
    }
}

const KNOWN_SCALAR_FUNCTIONS: &[&str] = &[
    "nextval",
    "setval",
    "substring",
    "substr",
    "upper",
    "lower",
    "length",
    "char_length",
    "trim",
    "ltrim",
    "rtrim",
    "replace",
    "strpos",
    "starts_with",
    "concat",
    "abs",
    "round",
    "ceil",
    "floor",
    "sqrt",
    "ln",
    "exp",
    "power",
    "coalesce",
    "greatest",
    "least",
    "nullif",
    "date_part",
    "date_trunc",
    "year",
    "month",
    "day",
];
