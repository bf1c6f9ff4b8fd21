//! Optimizer rules, one per file. Each exposes `run(plan, ctx) -> plan`.

pub(crate) mod decorrelate;
pub mod eager_aggregation;
pub mod fold_constants;
pub mod merge_scalar_aggregates;
pub(crate) mod partial_aggregates;
pub mod pre_aggregate_grouping_sets;
pub mod prune_columns;
pub mod push_down_predicates;
pub mod push_down_semi_joins;
pub mod reduce_aggregate_inputs;
pub mod reorder_joins;
pub mod share_subplans;
pub mod unnest_subqueries;
