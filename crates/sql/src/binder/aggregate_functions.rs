//! The aggregates beyond the SQL core of `function.rs`: `string_agg`/`listagg` (with
//! ORDER BY inside the call), `median`, `quantile_cont`/`quantile_disc` (DuckDB) and
//! `percentile_cont`/`percentile_disc`/`mode` ... `WITHIN GROUP (ORDER BY x)`
//! (PostgreSQL), `mode`, `approx_count_distinct`, `arg_min`/`arg_max` (`min_by`/`max_by`),
//! and the two-variable statistics `corr`, `covar_pop`/`covar_samp` and `regr_*`.
//!
//! An ORDER BY inside a call is kept only where the result depends on it (`string_agg`,
//! the ordered-set aggregates); its keys are bound as trailing arguments of the call
//! (see [`AggregateCall::order_by`]).

use apiary_common::{bind_err, not_impl_err, type_err, Result};
use apiary_types::{DataType, ScalarValue};

use super::Binder;
use crate::expr::{AggregateCall, AggregateFunction, AggregateOrder, Expr, SortKey};

/// The names this module binds.
pub(crate) const MORE_AGGREGATES: &[&str] = &[
    "string_agg",
    "listagg",
    "group_concat",
    "median",
    "quantile",
    "quantile_cont",
    "quantile_disc",
    "percentile_cont",
    "percentile_disc",
    "mode",
    "approx_count_distinct",
    "arg_min",
    "argmin",
    "min_by",
    "arg_max",
    "argmax",
    "max_by",
    "corr",
    "covar_pop",
    "covar_samp",
    "regr_slope",
    "regr_intercept",
    "regr_count",
    "regr_r2",
    "regr_avgx",
    "regr_avgy",
    "regr_sxx",
    "regr_syy",
    "regr_sxy",
];

/// Aggregates whose result depends on the order of their input.
fn is_order_sensitive(func: AggregateFunction) -> bool {
    matches!(func, AggregateFunction::StringAgg)
}

/// Can the values of this type be ordered (quantiles, mode, arg_min)?
fn orderable(t: DataType) -> bool {
    t != DataType::Interval
}

impl Binder<'_> {
    /// Binds a call of one of this module's aggregates. `order_by` are the keys of an
    /// ORDER BY inside the call, `within_group` those of `WITHIN GROUP (ORDER BY ...)`.
    pub(crate) fn more_aggregate_call(
        &mut self,
        name: &str,
        args: Vec<Expr>,
        distinct: bool,
        filter: Option<Box<Expr>>,
        order_by: Vec<SortKey>,
        within_group: Vec<SortKey>,
    ) -> Result<AggregateCall> {
        use AggregateFunction as F;
        if !within_group.is_empty() {
            return self.ordered_set_call(name, args, distinct, filter, within_group);
        }
        if matches!(name, "percentile_cont" | "percentile_disc") {
            return Err(bind_err!("{name} needs WITHIN GROUP (ORDER BY ...)"));
        }
        let count = args.len();
        let arity = |range: std::ops::RangeInclusive<usize>| -> Result<()> {
            if range.contains(&count) {
                Ok(())
            } else {
                Err(bind_err!("aggregate {name} takes {} arguments, got {count}", format_range(&range)))
            }
        };
        let mut args = args;
        let (func, data_type) = match name {
            "string_agg" | "listagg" | "group_concat" => {
                arity(1..=2)?;
                let separator =
                    if args.len() == 2 { args.pop().expect("two arguments") } else { Expr::literal(ScalarValue::Utf8(",".into())) };
                let value = self.text_value(args.pop().expect("one argument"))?;
                let separator = match separator.data_type() {
                    // PostgreSQL: a NULL separator joins without one.
                    DataType::Null => Expr::literal(ScalarValue::Utf8(String::new())),
                    t if t.is_string() => separator,
                    t => return Err(type_err!("the separator of {name} must be a string, not {t}")),
                };
                args = vec![value, separator];
                if distinct && !args[1].is_literal() {
                    return Err(not_impl_err!("{name}(DISTINCT ...) with a separator that is not a constant"));
                }
                if distinct && order_by.iter().any(|k| k.expr != args[0]) {
                    return Err(bind_err!("in an aggregate with DISTINCT, ORDER BY expressions must appear in argument list"));
                }
                (F::StringAgg, DataType::Varchar(None))
            }
            "median" => {
                arity(1..=1)?;
                let value = self.double_value(name, args.remove(0))?;
                args = vec![value, Expr::literal(ScalarValue::Float64(0.5))];
                (F::QuantileCont, DataType::Double)
            }
            "quantile_cont" => {
                arity(2..=2)?;
                let fraction = self.fraction(name, args.pop().expect("two arguments"))?;
                let value = self.double_value(name, args.pop().expect("two arguments"))?;
                args = vec![value, fraction];
                (F::QuantileCont, DataType::Double)
            }
            "quantile_disc" | "quantile" => {
                arity(2..=2)?;
                let fraction = self.fraction(name, args.pop().expect("two arguments"))?;
                let value = self.orderable_value(name, args.pop().expect("two arguments"))?;
                let t = value.data_type();
                args = vec![value, fraction];
                (F::QuantileDisc, t)
            }
            "mode" => {
                arity(1..=1)?;
                let value = self.orderable_value(name, args.remove(0))?;
                let t = value.data_type();
                args = vec![value];
                (F::Mode, t)
            }
            "approx_count_distinct" => {
                arity(1..=1)?;
                if args[0].data_type() == DataType::Null {
                    args[0] = self.cast(args.remove(0), DataType::Integer)?;
                }
                (F::ApproxCountDistinct, DataType::BigInt)
            }
            "arg_min" | "argmin" | "min_by" | "arg_max" | "argmax" | "max_by" => {
                arity(2..=2)?;
                let key = self.orderable_value(name, args.pop().expect("two arguments"))?;
                let mut value = args.pop().expect("two arguments");
                if value.data_type() == DataType::Null {
                    value = self.cast(value, DataType::Integer)?;
                }
                let t = value.data_type();
                args = vec![value, key];
                (if matches!(name, "arg_min" | "argmin" | "min_by") { F::ArgMin } else { F::ArgMax }, t)
            }
            _ => {
                arity(2..=2)?;
                let func = match name {
                    "corr" => F::Corr,
                    "covar_pop" => F::CovarPop,
                    "covar_samp" => F::CovarSamp,
                    "regr_slope" => F::RegrSlope,
                    "regr_intercept" => F::RegrIntercept,
                    "regr_count" => F::RegrCount,
                    "regr_r2" => F::RegrR2,
                    "regr_avgx" => F::RegrAvgX,
                    "regr_avgy" => F::RegrAvgY,
                    "regr_sxx" => F::RegrSxx,
                    "regr_syy" => F::RegrSyy,
                    "regr_sxy" => F::RegrSxy,
                    other => return Err(bind_err!("unknown aggregate function {other}")),
                };
                args = args.into_iter().map(|a| self.double_value(name, a)).collect::<Result<_>>()?;
                (func, if func == F::RegrCount { DataType::BigInt } else { DataType::Double })
            }
        };
        if distinct && !matches!(func, F::StringAgg | F::ApproxCountDistinct | F::QuantileCont | F::QuantileDisc | F::Mode) {
            return Err(not_impl_err!("{name}(DISTINCT ...)"));
        }
        let mut call = AggregateCall::new(func, args, distinct, filter, data_type);
        if is_order_sensitive(func) {
            for key in order_by {
                call.order_by.push(AggregateOrder { ascending: key.ascending, nulls_first: key.nulls_first });
                call.args.push(key.expr);
            }
        }
        Ok(call)
    }

    /// `percentile_cont(f) / percentile_disc(f) / mode() WITHIN GROUP (ORDER BY x)`.
    fn ordered_set_call(
        &mut self,
        name: &str,
        args: Vec<Expr>,
        distinct: bool,
        filter: Option<Box<Expr>>,
        within_group: Vec<SortKey>,
    ) -> Result<AggregateCall> {
        use AggregateFunction as F;
        if distinct {
            return Err(bind_err!("cannot use DISTINCT with WITHIN GROUP"));
        }
        let [key]: [SortKey; 1] =
            within_group.try_into().map_err(|_| bind_err!("{name} ... WITHIN GROUP takes exactly one ORDER BY expression"))?;
        let (func, mut call_args, data_type) = match (name, args.len()) {
            ("percentile_cont", 1) => {
                let fraction = self.fraction(name, args.into_iter().next().expect("one argument"))?;
                (F::QuantileCont, vec![self.double_value(name, key.expr.clone())?, fraction], DataType::Double)
            }
            ("percentile_disc", 1) => {
                let fraction = self.fraction(name, args.into_iter().next().expect("one argument"))?;
                let value = self.orderable_value(name, key.expr.clone())?;
                let t = value.data_type();
                (F::QuantileDisc, vec![value, fraction], t)
            }
            ("mode", 0) => {
                let value = self.orderable_value(name, key.expr.clone())?;
                let t = value.data_type();
                (F::Mode, vec![value], t)
            }
            ("percentile_cont" | "percentile_disc", n) => return Err(bind_err!("{name} takes one argument (the fraction), got {n}")),
            ("mode", n) => return Err(bind_err!("mode() WITHIN GROUP takes no arguments, got {n}")),
            _ => return Err(bind_err!("{name} is not an ordered-set aggregate: WITHIN GROUP is not allowed")),
        };
        let mut order_by = Vec::new();
        // Descending order: the value again as the key, so the state knows the direction.
        if !key.ascending {
            call_args.push(call_args[0].clone());
            order_by.push(AggregateOrder { ascending: false, nulls_first: key.nulls_first });
        }
        let mut call = AggregateCall::new(func, call_args, false, filter, data_type);
        call.order_by = order_by;
        Ok(call)
    }

    fn text_value(&self, value: Expr) -> Result<Expr> {
        match value.data_type() {
            t if t.is_string() => Ok(value),
            DataType::Null => Ok(Expr::Literal(ScalarValue::Null, DataType::Varchar(None))),
            _ => self.cast(value, DataType::Varchar(None)),
        }
    }

    fn double_value(&self, name: &str, value: Expr) -> Result<Expr> {
        match value.data_type() {
            t if t.is_numeric() || t == DataType::Null => self.cast(value, DataType::Double),
            t => Err(type_err!("{name} needs numeric values, not {t}")),
        }
    }

    fn orderable_value(&self, name: &str, value: Expr) -> Result<Expr> {
        match value.data_type() {
            DataType::Null => self.cast(value, DataType::Integer),
            t if orderable(t) => Ok(value),
            t => Err(type_err!("{name} is not defined for {t}")),
        }
    }

    /// A quantile's fraction: a constant between 0 and 1, as DOUBLE.
    fn fraction(&self, name: &str, fraction: Expr) -> Result<Expr> {
        let value = match &fraction {
            Expr::Literal(v, t) if t.is_numeric() => v.cast_to(&DataType::Double)?,
            Expr::Literal(ScalarValue::Null, _) => return Err(bind_err!("the fraction of {name} must not be NULL")),
            _ => return Err(bind_err!("the fraction of {name} must be a constant number")),
        };
        let f = value.as_f64().unwrap_or(f64::NAN);
        if !(0.0..=1.0).contains(&f) {
            return Err(bind_err!("percentile value {f} is not between 0 and 1"));
        }
        Ok(Expr::Literal(value, DataType::Double))
    }
}

fn format_range(range: &std::ops::RangeInclusive<usize>) -> String {
    if range.start() == range.end() {
        range.start().to_string()
    } else {
        format!("{} to {}", range.start(), range.end())
    }
}
