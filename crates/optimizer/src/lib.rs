//! # apiary-optimizer
//!
//! Rewrites a bound [`LogicalPlan`] into an equivalent one that is cheaper to run.
//!
//! ```text
//! LogicalPlan ─▶ unnest_subqueries ─▶ fold_constants ─▶ push_down_predicates
//!             ─▶ fold_constants ─▶ merge_scalar_aggregates ─▶ push_down_semi_joins
//!             ─▶ reorder_joins
//!             ─▶ reduce_aggregate_inputs ─▶ push_down_predicates ─▶ share_subplans
//!             ─▶ pre_aggregate_grouping_sets ─▶ eager_aggregation ─▶ prune_columns
//!             ─▶ LogicalPlan
//!                       ▲
//!                 cardinality: row counts, selectivities, distinct counts from table
//!                 statistics (apiary-storage) propagated through the plan
//! ```
//!
//! Every rule lives in its own file under [`rules`], has a name, can be switched off with
//! `SET disabled_optimizers = 'name,...'`, and reports whether it changed the plan (shown
//! by `EXPLAIN`). `unnest_subqueries` is required for execution and cannot be disabled.

pub mod cardinality;
pub mod nullability;
pub mod rules;

use std::collections::HashSet;

use apiary_common::{not_impl_err, Result};
use apiary_sql::expr::Expr;
use apiary_sql::{ColumnId, ColumnRef, LogicalPlan};
use apiary_types::{DataType, ScalarValue};

/// Evaluates constant expressions (supplied by the execution crate, which owns the kernels).
pub trait ConstantEvaluator {
    fn evaluate(&self, expr: &Expr) -> Result<ScalarValue>;
}

/// Materialized CTEs the rules create get ids from here up, above the binder's (which
/// count from 0 in each statement), so the two never meet.
const FIRST_OPTIMIZER_CTE_ID: usize = 1 << 20;

/// State shared by the rules of one optimization run.
pub struct OptimizerContext<'a> {
    next_column_id: u32,
    next_cte_id: usize,
    pub evaluator: &'a dyn ConstantEvaluator,
    pub disabled: HashSet<String>,
}

impl<'a> OptimizerContext<'a> {
    pub fn new(next_column_id: u32, evaluator: &'a dyn ConstantEvaluator) -> Self {
        OptimizerContext { next_column_id, next_cte_id: FIRST_OPTIMIZER_CTE_ID, evaluator, disabled: HashSet::new() }
    }

    /// An id for a materialized CTE a rule creates ([`LogicalPlan::Cte`]).
    pub fn new_cte_id(&mut self) -> usize {
        let id = self.next_cte_id;
        self.next_cte_id += 1;
        id
    }

    /// A fresh column (ids continue after the binder's).
    pub fn new_column(&mut self, name: &str, data_type: DataType, nullable: bool) -> ColumnRef {
        let id = ColumnId(self.next_column_id);
        self.next_column_id += 1;
        ColumnRef { id, name: name.into(), data_type, nullable }
    }
}

/// One rule's outcome, for EXPLAIN.
#[derive(Debug, Clone)]
pub struct RuleReport {
    pub rule: &'static str,
    pub changed: bool,
}

type RuleFn = fn(LogicalPlan, &mut OptimizerContext) -> Result<LogicalPlan>;

/// The rules in the order they run. The first one is mandatory.
pub const RULES: &[(&str, RuleFn)] = &[
    ("unnest_subqueries", rules::unnest_subqueries::run),
    ("fold_constants", rules::fold_constants::run),
    ("push_down_predicates", rules::push_down_predicates::run),
    // Pushed-down predicates can become constant (a UNION branch's literal column
    // compared with a constant): fold them, and drop what can produce no rows.
    ("fold_constants", rules::fold_constants::run),
    // Before join ordering: merged aggregations are fewer relations to order.
    ("merge_scalar_aggregates", rules::merge_scalar_aggregates::run),
    ("push_down_semi_joins", rules::push_down_semi_joins::run),
    ("reorder_joins", rules::reorder_joins::run),
    ("reduce_aggregate_inputs", rules::reduce_aggregate_inputs::run),
    ("push_down_predicates", rules::push_down_predicates::run),
    // After the predicates found their places: occurrences filtered alike are equal.
    ("share_subplans", rules::share_subplans::run),
    ("pre_aggregate_grouping_sets", rules::pre_aggregate_grouping_sets::run),
    ("eager_aggregation", rules::eager_aggregation::run),
    ("prune_columns", rules::prune_columns::run),
];

/// Names users may pass to `SET disabled_optimizers`.
pub fn rule_names() -> Vec<&'static str> {
    let mut names: Vec<&str> = Vec::new();
    for (name, _) in RULES {
        if !names.contains(name) {
            names.push(name);
        }
    }
    names
}

/// Runs all enabled rules.
pub fn optimize(mut plan: LogicalPlan, ctx: &mut OptimizerContext) -> Result<(LogicalPlan, Vec<RuleReport>)> {
    let mut reports = Vec::new();
    for (index, (name, rule)) in RULES.iter().enumerate() {
        if index > 0 && ctx.disabled.contains(*name) {
            continue;
        }
        let before = plan.clone();
        plan = rule(plan, ctx)?;
        // Rules place columns under outer joins: references must learn they can be NULL.
        plan = nullability::refresh(plan);
        reports.push(RuleReport { rule: name, changed: plan != before });
    }
    if plan.contains_subquery() {
        return Err(not_impl_err!("this form of subquery (it could not be rewritten into a join)"));
    }
    Ok((plan, reports))
}
