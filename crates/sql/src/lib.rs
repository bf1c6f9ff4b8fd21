//! # apiary-sql
//!
//! From SQL text to a typed logical plan.
//!
//! ```text
//! text ──parser──▶ sqlparser AST ──binder──▶ LogicalPlan (+ Expr trees, ColumnIds)
//!                                  │
//!                                  └── catalog (apiary-storage) for tables and columns
//! ```
//!
//! * [`parser`] wraps the `sqlparser` crate and turns its errors into messages with line
//!   and column.
//! * [`binder`] resolves names (tables, columns, CTEs, aliases, outer references of
//!   correlated subqueries), checks and coerces types (inserting casts so that every
//!   operator sees operands of one physical type), and builds the [`plan::LogicalPlan`].
//! * Every column produced anywhere in a plan has a query-unique [`expr::ColumnId`], so
//!   optimizer rules can move operators around without renumbering positions.
//!
//! Subqueries stay in the plan as [`expr::Expr::Subquery`]; the optimizer's unnesting
//! rule turns them into joins before execution.

pub mod binder;
pub mod coercion;
pub mod expr;
pub mod parser;
pub mod plan;
pub mod window;

pub use binder::{Binder, BoundStatement, TableArg, TableFunctionProvider};
pub use expr::{AggregateCall, AggregateFunction, BinaryOp, ColumnId, ColumnRef, Expr, ScalarFunction, SortKey};
pub use plan::{CteScan, GroupingSets, JoinKind, LogicalPlan, WorkTableScan};
pub use window::{FrameBound, FrameExclude, FrameUnits, WindowCall, WindowFrame, WindowFunction};
