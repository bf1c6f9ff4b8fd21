//! Binding window function calls: `f(args) [IGNORE NULLS] [FILTER (...)] OVER (window)`.
//!
//! A call is bound where aggregates may be (the SELECT list, ORDER BY and QUALIFY of its
//! query), collected next to the query's aggregates and replaced by a column; the query
//! then computes it in a `Window` node above the aggregation and HAVING. Its arguments,
//! partition and order keys may contain aggregates (`sum(sum(x)) OVER (...)`), which the
//! aggregation computes first.

use apiary_common::{bind_err, not_impl_err, Result};
use apiary_types::DataType;
use sqlparser::ast;

use super::{Binder, Scope};
use crate::expr::{AggregateFunction, Expr, SortKey};
use crate::window::{FrameBound, FrameExclude, FrameUnits, WindowCall, WindowFrame, WindowFunction};

impl Binder<'_> {
    pub(crate) fn bind_window_call(&mut self, name: &str, function: &ast::Function, scope: &Scope) -> Result<Expr> {
        let Some(over) = &function.over else { return Err(bind_err!("{name} is not a window call")) };
        if !matches!(self.aggregate_stack.last(), Some(Some(_))) || self.binding_window {
            return Err(if self.binding_window {
                bind_err!("window function calls cannot be nested")
            } else {
                bind_err!("window functions are not allowed here ({name} OVER ...); use them in the SELECT list, ORDER BY or QUALIFY")
            });
        }
        let (spec, exclude) = self.resolve_window(over)?;
        self.binding_window = true;
        let call = self.bind_window_parts(name, function, &spec, exclude, scope);
        self.binding_window = false;
        let call = call?;
        let Some(Some(collector)) = self.aggregate_stack.last_mut() else {
            return Err(bind_err!("window function {name} is not allowed here"));
        };
        if let Some((_, column)) = collector.windows.iter().find(|(c, _)| *c == call) {
            return Ok(column.expr());
        }
        let nullable = !matches!(
            call.func,
            WindowFunction::RowNumber
                | WindowFunction::Rank
                | WindowFunction::DenseRank
                | WindowFunction::PercentRank
                | WindowFunction::CumeDist
                | WindowFunction::Aggregate(AggregateFunction::Count | AggregateFunction::CountStar)
        );
        let column = self.new_column(&call.to_string(), call.data_type, nullable);
        if let Some(Some(collector)) = self.aggregate_stack.last_mut() {
            collector.windows.push((call, column.clone()));
        }
        Ok(column.expr())
    }

    /// The window a call names: its own specification, or a named one of the query's
    /// WINDOW clause (which an inline `OVER (w ORDER BY ...)` may extend); and its frame's
    /// EXCLUDE clause (the parser's marker, in the specification that has the frame).
    fn resolve_window(&self, over: &ast::WindowType) -> Result<(ast::WindowSpec, FrameExclude)> {
        let named = |name: &ast::Ident| {
            self.named_windows
                .iter()
                .rev()
                .find(|(n, _)| *n == super::normalize_ident(name))
                .map(|(_, spec)| spec.clone())
                .ok_or_else(|| bind_err!("window \"{}\" does not exist", name.value))
        };
        let spec = match over {
            ast::WindowType::NamedWindow(name) => return Ok(take_frame_exclude(named(name)?)),
            ast::WindowType::WindowSpec(spec) => spec,
        };
        let (spec, exclude) = take_frame_exclude(spec.clone());
        let Some(base_name) = &spec.window_name else { return Ok((spec, exclude)) };
        // A base window with a frame (the only place its own marker could be) is refused.
        let base = named(base_name)?;
        if !spec.partition_by.is_empty() {
            return Err(bind_err!("cannot override PARTITION BY clause of window \"{}\"", base_name.value));
        }
        if !base.order_by.is_empty() && !spec.order_by.is_empty() {
            return Err(bind_err!("cannot override ORDER BY clause of window \"{}\"", base_name.value));
        }
        if base.window_frame.is_some() {
            return Err(bind_err!("cannot copy window \"{}\" because it has a frame clause", base_name.value));
        }
        let spec = ast::WindowSpec {
            window_name: None,
            partition_by: base.partition_by,
            order_by: if spec.order_by.is_empty() { base.order_by } else { spec.order_by },
            window_frame: spec.window_frame,
        };
        Ok((spec, exclude))
    }

    fn bind_window_parts(
        &mut self,
        name: &str,
        function: &ast::Function,
        spec: &ast::WindowSpec,
        exclude: FrameExclude,
        scope: &Scope,
    ) -> Result<WindowCall> {
        let (arg_list, distinct, argument_order) = super::expr::function_arguments_with_order(function, name)?;
        let mut star = false;
        let mut args = Vec::new();
        for arg in &arg_list {
            match arg {
                ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Wildcard) => star = true,
                ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) => args.push(self.bind_expr(e, scope)?),
                other => return Err(bind_err!("unsupported argument {other} to window function {name}")),
            }
        }
        let ignore_nulls = matches!(function.null_treatment, Some(ast::NullTreatment::IgnoreNulls));
        let (mut aggregate_order, mut distinct_aggregate) = (Vec::new(), false);
        let (func, args, filter, data_type) = match WindowFunction::from_name(name) {
            Some(func) => {
                if distinct || star {
                    return Err(bind_err!("{name} takes neither DISTINCT nor *"));
                }
                if !argument_order.is_empty() {
                    return Err(bind_err!("{name} takes no ORDER BY inside its arguments"));
                }
                if function.filter.is_some() {
                    return Err(not_impl_err!("FILTER is implemented only for aggregate window functions"));
                }
                if ignore_nulls
                    && !matches!(
                        func,
                        WindowFunction::Lag
                            | WindowFunction::Lead
                            | WindowFunction::FirstValue
                            | WindowFunction::LastValue
                            | WindowFunction::NthValue
                    )
                {
                    return Err(bind_err!("IGNORE NULLS is not valid for {name}"));
                }
                let (args, data_type) = self.window_function_args(func, name, args)?;
                (func, args, None, data_type)
            }
            None if super::is_aggregate_function(name) => {
                if ignore_nulls {
                    return Err(bind_err!("IGNORE NULLS is not valid for aggregate {name}"));
                }
                let filter = match &function.filter {
                    Some(f) => {
                        let bound = self.bind_expr(f, scope)?;
                        Some(self.boolean_condition(bound, "FILTER")?)
                    }
                    None => None,
                };
                if !function.within_group.is_empty() {
                    return Err(not_impl_err!("{name}(...) WITHIN GROUP (...) as a window function (use {name}'s argument form)"));
                }
                let mut keys = Vec::new();
                for key in &argument_order {
                    let expr = self.bind_expr(&key.expr, scope)?;
                    keys.push(super::query::sort_key(expr, &key.options)?);
                }
                let call = self.aggregate_call_ordered(name, args, star, distinct, filter, keys, Vec::new())?;
                aggregate_order = call.order_by;
                distinct_aggregate = call.distinct;
                (WindowFunction::Aggregate(call.func), call.args, call.filter, call.data_type)
            }
            None => return Err(bind_err!("{name} is not a window function or an aggregate")),
        };
        let mut partition_by = Vec::new();
        for e in &spec.partition_by {
            partition_by.push(self.bind_expr(e, scope)?);
        }
        let mut order_by = Vec::new();
        for key in &spec.order_by {
            let expr = self.bind_expr(&key.expr, scope)?;
            order_by.push(super::query::sort_key(expr, &key.options)?);
        }
        let frame = match &spec.window_frame {
            None => WindowFrame::default_frame(),
            Some(frame) => WindowFrame { exclude, ..self.bind_frame(frame, &order_by, scope)? },
        };
        Ok(WindowCall {
            func,
            args,
            distinct: distinct_aggregate,
            aggregate_order,
            filter: filter.map(|f| *f).map(Box::new),
            ignore_nulls,
            partition_by,
            order_by,
            frame,
            data_type,
        })
    }

    /// Checks and types the arguments of a ranking or value function; its result type.
    fn window_function_args(&mut self, func: WindowFunction, name: &str, mut args: Vec<Expr>) -> Result<(Vec<Expr>, DataType)> {
        use WindowFunction::*;
        let arity = |range: std::ops::RangeInclusive<usize>, args: &[Expr]| {
            if range.contains(&args.len()) {
                Ok(())
            } else {
                Err(bind_err!(
                    "{name} takes {} argument(s), not {}",
                    if range.start() == range.end() { range.start().to_string() } else { format!("{} to {}", range.start(), range.end()) },
                    args.len()
                ))
            }
        };
        let data_type = match func {
            RowNumber | Rank | DenseRank => {
                arity(0..=0, &args)?;
                DataType::BigInt
            }
            PercentRank | CumeDist => {
                arity(0..=0, &args)?;
                DataType::Double
            }
            Ntile => {
                arity(1..=1, &args)?;
                args[0] = self.integer_argument(args[0].clone(), name)?;
                DataType::BigInt
            }
            Lag | Lead => {
                arity(1..=3, &args)?;
                let value_type = args[0].data_type();
                if args.len() >= 2 {
                    args[1] = self.integer_argument(args[1].clone(), name)?;
                }
                if args.len() == 3 {
                    args[2] = self.cast(args[2].clone(), value_type)?;
                }
                value_type
            }
            FirstValue | LastValue => {
                arity(1..=1, &args)?;
                args[0].data_type()
            }
            NthValue => {
                arity(2..=2, &args)?;
                args[1] = self.integer_argument(args[1].clone(), name)?;
                args[0].data_type()
            }
            Aggregate(_) => return Err(bind_err!("{name} is an aggregate")),
        };
        if data_type == DataType::Null {
            // `lag(NULL)`: a column of NULLs needs a type.
            return Ok((args, DataType::Integer));
        }
        Ok((args, data_type))
    }

    fn integer_argument(&mut self, expr: Expr, name: &str) -> Result<Expr> {
        match expr.data_type() {
            DataType::SmallInt | DataType::Integer | DataType::BigInt => self.cast(expr, DataType::BigInt),
            DataType::Null => Ok(Expr::Literal(apiary_types::ScalarValue::Null, DataType::BigInt)),
            other => Err(bind_err!("{name} takes an integer here, not {other}")),
        }
    }

    fn bind_frame(&mut self, frame: &ast::WindowFrame, order_by: &[SortKey], scope: &Scope) -> Result<WindowFrame> {
        let units = match frame.units {
            ast::WindowFrameUnits::Rows => FrameUnits::Rows,
            ast::WindowFrameUnits::Range => FrameUnits::Range,
            ast::WindowFrameUnits::Groups => FrameUnits::Groups,
        };
        if units == FrameUnits::Groups && order_by.is_empty() {
            return Err(bind_err!("GROUPS mode requires an ORDER BY clause"));
        }
        let bound = |b: &ast::WindowFrameBound, binder: &mut Self| -> Result<FrameBound> {
            let offset = |e: &ast::Expr, binder: &mut Self| -> Result<Expr> {
                let bound = binder.bind_expr(e, scope)?;
                let mut columns = std::collections::BTreeSet::new();
                bound.collect_columns(&mut columns);
                if !columns.is_empty() || bound.contains_subquery() {
                    return Err(bind_err!("frame offsets must be constants, not {bound}"));
                }
                match units {
                    FrameUnits::Rows | FrameUnits::Groups => binder.integer_argument(bound, "a ROWS or GROUPS frame offset"),
                    FrameUnits::Range => {
                        if order_by.len() != 1 {
                            return Err(bind_err!("RANGE with offset PRECEDING/FOLLOWING requires exactly one ORDER BY column"));
                        }
                        Ok(bound)
                    }
                }
            };
            Ok(match b {
                ast::WindowFrameBound::CurrentRow => FrameBound::CurrentRow,
                ast::WindowFrameBound::Preceding(None) => FrameBound::UnboundedPreceding,
                ast::WindowFrameBound::Following(None) => FrameBound::UnboundedFollowing,
                ast::WindowFrameBound::Preceding(Some(e)) => FrameBound::Preceding(offset(e, binder)?),
                ast::WindowFrameBound::Following(Some(e)) => FrameBound::Following(offset(e, binder)?),
            })
        };
        let start = bound(&frame.start_bound, self)?;
        let end = match &frame.end_bound {
            Some(end) => bound(end, self)?,
            None => FrameBound::CurrentRow,
        };
        if matches!(start, FrameBound::UnboundedFollowing) {
            return Err(bind_err!("frame start cannot be UNBOUNDED FOLLOWING"));
        }
        if matches!(end, FrameBound::UnboundedPreceding) {
            return Err(bind_err!("frame end cannot be UNBOUNDED PRECEDING"));
        }
        let order = |b: &FrameBound| match b {
            FrameBound::UnboundedPreceding => 0,
            FrameBound::Preceding(_) => 1,
            FrameBound::CurrentRow => 2,
            FrameBound::Following(_) => 3,
            FrameBound::UnboundedFollowing => 4,
        };
        if order(&start) == 2 && order(&end) == 1 {
            return Err(bind_err!("frame starting from current row cannot have preceding rows"));
        }
        if order(&start) == 3 && order(&end) <= 2 {
            return Err(bind_err!("frame starting from following row cannot have preceding rows"));
        }
        Ok(WindowFrame { units, start, end, exclude: FrameExclude::NoOthers })
    }
}

/// Takes the marker the parser puts in front of the PARTITION BY list for a frame's
/// EXCLUDE clause ([`crate::parser::FRAME_EXCLUDE_MARKER`]) out of `spec`.
fn take_frame_exclude(mut spec: ast::WindowSpec) -> (ast::WindowSpec, FrameExclude) {
    let code = match spec.partition_by.first() {
        Some(ast::Expr::Function(f)) if f.name.to_string() == crate::parser::FRAME_EXCLUDE_MARKER => f.args.to_string(),
        _ => return (spec, FrameExclude::NoOthers),
    };
    spec.partition_by.remove(0);
    let exclude = match code.trim_matches(|c| c == '(' || c == ')') {
        "1" => FrameExclude::CurrentRow,
        "2" => FrameExclude::Group,
        "3" => FrameExclude::Ties,
        _ => FrameExclude::NoOthers,
    };
    (spec, exclude)
}
