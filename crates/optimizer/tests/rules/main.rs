//! Unit tests of the optimizer rules, one module per rule: what each rule must do and what
//! it must not do, on small plans bound from SQL over a catalog of test tables.
//!
//! Each test runs the rule under test alone, after the rules whose output it expects (such
//! as `unnest_subqueries` before anything that looks at a subquery's join), and asserts on
//! the plan's shape: EXPLAIN text or structural matches. Every plan is also checked for the
//! invariants the physical planner relies on ([`common::assert_well_formed`]).
//!
//! Run with `cargo test -p apiary-optimizer --test rules`.

mod common;

mod decorrelate;
mod eager_aggregation;
mod fold_constants;
mod merge_scalar_aggregates;
mod optimizer;
mod pre_aggregate_grouping_sets;
mod prune_columns;
mod push_down_predicates;
mod push_down_semi_joins;
mod reduce_aggregate_inputs;
mod reorder_joins;
mod share_subplans;
mod unnest_subqueries;
