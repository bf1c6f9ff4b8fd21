//! Aggregates computed in two steps: partial results per group of a finer grouping, then
//! merged per group of the final one. Used by the rules that aggregate early
//! (`pre_aggregate_grouping_sets`, `eager_aggregation`).

use apiary_sql::binder::sum_type;
use apiary_sql::expr::{AggregateCall, AggregateFunction, ColumnRef, Expr, ScalarFunction};
use apiary_types::{DataType, ScalarValue};

use crate::OptimizerContext;

/// Whether the aggregate's result over some rows can be computed from its results over
/// groups that partition those rows: count, sum, avg of numbers, min, max, any_value,
/// bool_and/or; not DISTINCT (except in min/max), not with ORDER BY inside the call.
pub(crate) fn mergeable(call: &AggregateCall) -> bool {
    use AggregateFunction as F;
    if !call.order_by.is_empty() {
        return false;
    }
    match call.func {
        F::Min | F::Max | F::BoolAnd | F::BoolOr | F::AnyValue => true,
        F::CountStar | F::Count | F::Sum => !call.distinct,
        // A sum and a count of numbers; the average of intervals has no such sum type.
        F::Avg => !call.distinct && call.args.first().is_some_and(|a| a.data_type().is_numeric()),
        _ => false,
    }
}

/// Mergeable aggregates split in two steps.
pub(crate) struct SplitAggregates {
    /// The partial aggregates, over the original input (their FILTERs included).
    pub partials: Vec<(AggregateCall, ColumnRef)>,
    /// The merges, over the partials' columns.
    pub merges: Vec<(AggregateCall, ColumnRef)>,
    /// Per original aggregate, its result over the merges' columns, and its column.
    pub results: Vec<(Expr, ColumnRef)>,
}

/// Splits `aggregates` (each [`mergeable`]) into partials and merges. `empty_groups`: the
/// merging aggregation may produce a group of no rows (the total of an empty input),
/// whose counts must be 0.
pub(crate) fn split(aggregates: Vec<(AggregateCall, ColumnRef)>, empty_groups: bool, ctx: &mut OptimizerContext) -> SplitAggregates {
    use AggregateFunction as F;
    let mut partials = Vec::new();
    let mut merges = Vec::new();
    let mut merged = |partial: AggregateCall, merge: AggregateFunction, merged_type: DataType, ctx: &mut OptimizerContext| {
        let name = partial.func.name();
        let partial_column = ctx.new_column(name, partial.data_type, true);
        let merged_column = ctx.new_column(name, merged_type, true);
        let call = AggregateCall::new(merge, vec![partial_column.expr()], false, None, merged_type);
        partials.push((partial, partial_column));
        merges.push((call, merged_column.clone()));
        merged_column
    };
    let mut results = Vec::with_capacity(aggregates.len());
    for (call, output) in aggregates {
        let result = match call.func {
            F::Avg => {
                let total_type = sum_type(call.args[0].data_type());
                let sum = AggregateCall { func: F::Sum, data_type: total_type, ..call.clone() };
                let count = AggregateCall { func: F::Count, data_type: DataType::BigInt, ..call.clone() };
                let sum = merged(sum, F::Sum, total_type, ctx);
                let count = merged(count, F::Sum, DataType::BigInt, ctx);
                Expr::Function { func: ScalarFunction::AverageOf, args: vec![sum.expr(), count.expr()], data_type: call.data_type }
            }
            F::Count | F::CountStar if empty_groups => {
                let count = merged(call, F::Sum, DataType::BigInt, ctx);
                // A group over no rows sums no counts: NULL, where its count is 0.
                Expr::Function {
                    func: ScalarFunction::Coalesce,
                    args: vec![count.expr(), Expr::Literal(ScalarValue::Int64(0), DataType::BigInt)],
                    data_type: DataType::BigInt,
                }
            }
            F::Count | F::CountStar => merged(call, F::Sum, DataType::BigInt, ctx).expr(),
            func => {
                let data_type = call.data_type;
                merged(AggregateCall { distinct: false, ..call }, func, data_type, ctx).expr()
            }
        };
        results.push((result, output));
    }
    SplitAggregates { partials, merges, results }
}
