//! The logical plan: what to compute, not how.
//!
//! Every node lists its output columns as [`ColumnRef`]s; parents refer to them by
//! [`ColumnId`], never by position. The optimizer rewrites this tree; the execution crate
//! turns it into pipelines.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;

use apiary_storage::Table;

use crate::expr::{AggregateCall, ColumnId, ColumnRef, Expr, SortKey, SubqueryKind};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JoinKind {
    Inner,
    Left,
    Right,
    Full,
    /// Left rows with at least one match.
    Semi,
    /// Left rows with no match. With `null_aware`, implements `NOT IN`: no row qualifies
    /// if the right side has a NULL key, and a NULL left key qualifies only when the
    /// right side is empty.
    Anti {
        null_aware: bool,
    },
    /// Left rows plus a BOOLEAN column: TRUE when a match exists, FALSE when not. With
    /// `null_aware` (for `IN`), NULL instead of FALSE when the left key is NULL or the
    /// right side has a NULL key (three-valued logic).
    Mark {
        null_aware: bool,
    },
    /// Left join that fails if a left row finds more than one match (scalar subqueries).
    Single,
}

impl JoinKind {
    pub fn name(&self) -> &'static str {
        match self {
            JoinKind::Inner => "INNER",
            JoinKind::Left => "LEFT",
            JoinKind::Right => "RIGHT",
            JoinKind::Full => "FULL",
            JoinKind::Semi => "SEMI",
            JoinKind::Anti { null_aware: false } => "ANTI",
            JoinKind::Anti { null_aware: true } => "NULL-AWARE ANTI",
            JoinKind::Mark { .. } => "MARK",
            JoinKind::Single => "SINGLE",
        }
    }

    /// Whether the right side's columns appear in the output.
    pub fn outputs_right(&self) -> bool {
        matches!(self, JoinKind::Inner | JoinKind::Left | JoinKind::Right | JoinKind::Full | JoinKind::Single)
    }
}

#[derive(Clone, Debug)]
pub struct Scan {
    pub table: Arc<Table>,
    /// Name shown in plans (alias if given).
    pub label: String,
    /// Table column index and the column it becomes.
    pub columns: Vec<(usize, ColumnRef)>,
    /// Conjuncts pushed into the scan (evaluated on each block right after reading).
    pub filters: Vec<Expr>,
}

impl PartialEq for Scan {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.table, &other.table) && self.columns == other.columns && self.filters == other.filters
    }
}

/// `GROUPING SETS`, `ROLLUP` and `CUBE`: the input is grouped once per set, by that set's
/// keys; in a set's rows the keys outside the set are NULL. Equal sets listed twice give
/// their rows twice, as in PostgreSQL.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupingSets {
    /// Per set, the indices (ascending) into the aggregate's `groups` of its keys.
    pub sets: Vec<Vec<usize>>,
    /// An INTEGER output column: the index in `sets` of the set a row was grouped by
    /// (`GROUPING(...)` is computed from it).
    pub id: ColumnRef,
}

impl GroupingSets {
    /// The sets as key positions, `(0, 1), (0), ()`.
    pub fn display_sets(&self) -> String {
        let sets: Vec<String> =
            self.sets.iter().map(|set| format!("({})", set.iter().map(|k| k.to_string()).collect::<Vec<_>>().join(", "))).collect();
        sets.join(", ")
    }

    /// Whether key `key` (an index into the aggregate's groups) is NULL in some set's rows.
    pub fn omits(&self, key: usize) -> bool {
        self.sets.iter().any(|set| !set.contains(&key))
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum LogicalPlan {
    Scan(Scan),
    /// Literal rows (VALUES, SELECT without FROM). Expressions are constant.
    Values {
        rows: Vec<Vec<Expr>>,
        output: Vec<ColumnRef>,
    },
    Filter {
        predicate: Expr,
        input: Box<LogicalPlan>,
    },
    Project {
        exprs: Vec<(Expr, ColumnRef)>,
        input: Box<LogicalPlan>,
    },
    /// Groups its input by `groups` (all of them, or once per grouping set) and computes
    /// `aggregates` per group. Output: the key columns, the grouping set's id (with
    /// grouping sets), then the aggregates.
    Aggregate {
        groups: Vec<(Expr, ColumnRef)>,
        aggregates: Vec<(AggregateCall, ColumnRef)>,
        grouping_sets: Option<GroupingSets>,
        input: Box<LogicalPlan>,
    },
    Join {
        kind: JoinKind,
        left: Box<LogicalPlan>,
        right: Box<LogicalPlan>,
        condition: Option<Expr>,
        mark: Option<ColumnRef>,
    },
    Sort {
        keys: Vec<SortKey>,
        input: Box<LogicalPlan>,
    },
    Limit {
        limit: Option<u64>,
        offset: u64,
        input: Box<LogicalPlan>,
    },
    /// UNION ALL: input `i`'s columns map positionally onto `output`.
    Union {
        inputs: Vec<LogicalPlan>,
        output: Vec<ColumnRef>,
    },
    /// Window functions: the input's rows and columns, and one column per call.
    Window {
        windows: Vec<(crate::window::WindowCall, ColumnRef)>,
        input: Box<LogicalPlan>,
    },
    /// A WITH query computed once (`MATERIALIZED`, or referenced more than once): its rows
    /// are kept, and every [`LogicalPlan::CteScan`] of `id` in `body` reads them. The
    /// output is `body`'s.
    Cte {
        id: usize,
        name: String,
        definition: Box<LogicalPlan>,
        body: Box<LogicalPlan>,
    },
    /// The rows of materialized CTE `id`: `columns` pairs an output column of the
    /// definition (by id) with the column it is here (each reference has its own ids).
    CteScan(CteScan),
    /// `WITH RECURSIVE`'s `anchor UNION [ALL] recursive` (PostgreSQL's iteration): the
    /// rows of `anchor`, then of `recursive` run again and again, each time with its
    /// [`LogicalPlan::WorkTableScan`] of `id` reading the rows the previous run added,
    /// until a run adds none. With `distinct` (UNION), rows already produced (and
    /// duplicates within a run) are dropped. Both inputs map positionally onto `output`.
    /// Nothing is pushed into it from above or moved across it.
    RecursiveCte {
        id: usize,
        name: String,
        distinct: bool,
        anchor: Box<LogicalPlan>,
        recursive: Box<LogicalPlan>,
        output: Vec<ColumnRef>,
    },
    /// Inside the recursive term of [`LogicalPlan::RecursiveCte`] `id`: the rows its
    /// previous iteration added, columns in the CTE's order.
    WorkTableScan(WorkTableScan),
}

/// The self-reference in a recursive CTE's recursive term (see [`LogicalPlan::RecursiveCte`]).
#[derive(Clone, Debug, PartialEq)]
pub struct WorkTableScan {
    pub id: usize,
    /// Name shown in plans (alias if given).
    pub label: String,
    pub columns: Vec<ColumnRef>,
    /// The non-recursive term as bound, for cardinality estimates only.
    pub anchor: Arc<LogicalPlan>,
}

/// A reference to a materialized CTE (see [`LogicalPlan::Cte`]).
#[derive(Clone, Debug, PartialEq)]
pub struct CteScan {
    pub id: usize,
    /// Name shown in plans (alias if given).
    pub label: String,
    pub columns: Vec<(ColumnId, ColumnRef)>,
    /// The definition as bound, for cardinality estimates only (the optimized definition
    /// lives in the `Cte` node).
    pub definition: Arc<LogicalPlan>,
}

impl LogicalPlan {
    /// The columns this node produces, in order.
    pub fn output(&self) -> Vec<ColumnRef> {
        match self {
            LogicalPlan::Scan(scan) => scan.columns.iter().map(|(_, c)| c.clone()).collect(),
            LogicalPlan::Values { output, .. } | LogicalPlan::Union { output, .. } => output.clone(),
            LogicalPlan::Filter { input, .. } | LogicalPlan::Sort { input, .. } | LogicalPlan::Limit { input, .. } => input.output(),
            LogicalPlan::Project { exprs, .. } => exprs.iter().map(|(_, c)| c.clone()).collect(),
            LogicalPlan::Window { windows, input } => input.output().into_iter().chain(windows.iter().map(|(_, c)| c.clone())).collect(),
            LogicalPlan::Cte { body, .. } => body.output(),
            LogicalPlan::CteScan(scan) => scan.columns.iter().map(|(_, c)| c.clone()).collect(),
            LogicalPlan::RecursiveCte { output, .. } => output.clone(),
            LogicalPlan::WorkTableScan(scan) => scan.columns.clone(),
            LogicalPlan::Aggregate { groups, aggregates, grouping_sets, .. } => groups
                .iter()
                .map(|(_, c)| c.clone())
                .chain(grouping_sets.iter().map(|g| g.id.clone()))
                .chain(aggregates.iter().map(|(_, c)| c.clone()))
                .collect(),
            LogicalPlan::Join { kind, left, right, mark, .. } => {
                let mut columns = left.output();
                // Computed once: calling `left.output()` again would make a chain of joins
                // cost exponential time.
                let left_len = columns.len();
                match kind {
                    JoinKind::Inner | JoinKind::Single => columns.extend(right.output()),
                    JoinKind::Left => columns.extend(right.output().into_iter().map(nullable)),
                    JoinKind::Right => {
                        columns = columns.into_iter().map(nullable).collect();
                        columns.extend(right.output());
                    }
                    JoinKind::Full => {
                        columns = columns.into_iter().map(nullable).collect();
                        columns.extend(right.output().into_iter().map(nullable));
                    }
                    JoinKind::Semi | JoinKind::Anti { .. } => {}
                    JoinKind::Mark { .. } => columns.extend(mark.clone()),
                }
                if *kind == JoinKind::Single {
                    for column in &mut columns[left_len..] {
                        column.nullable = true;
                    }
                }
                columns
            }
        }
    }

    pub fn output_ids(&self) -> BTreeSet<ColumnId> {
        self.output().into_iter().map(|c| c.id).collect()
    }

    pub fn children(&self) -> Vec<&LogicalPlan> {
        match self {
            LogicalPlan::Scan(_) | LogicalPlan::Values { .. } | LogicalPlan::CteScan(_) | LogicalPlan::WorkTableScan(_) => vec![],
            LogicalPlan::Cte { definition, body, .. } => vec![definition, body],
            LogicalPlan::RecursiveCte { anchor, recursive, .. } => vec![anchor, recursive],
            LogicalPlan::Filter { input, .. }
            | LogicalPlan::Project { input, .. }
            | LogicalPlan::Aggregate { input, .. }
            | LogicalPlan::Window { input, .. }
            | LogicalPlan::Sort { input, .. }
            | LogicalPlan::Limit { input, .. } => vec![input],
            LogicalPlan::Join { left, right, .. } => vec![left, right],
            LogicalPlan::Union { inputs, .. } => inputs.iter().collect(),
        }
    }

    /// Expressions evaluated by this node itself (not its children).
    pub fn expressions(&self) -> Vec<&Expr> {
        match self {
            LogicalPlan::Scan(scan) => scan.filters.iter().collect(),
            LogicalPlan::Values { rows, .. } => rows.iter().flatten().collect(),
            LogicalPlan::Filter { predicate, .. } => vec![predicate],
            LogicalPlan::Project { exprs, .. } => exprs.iter().map(|(e, _)| e).collect(),
            LogicalPlan::Aggregate { groups, aggregates, .. } => {
                let mut exprs: Vec<&Expr> = groups.iter().map(|(e, _)| e).collect();
                for (call, _) in aggregates {
                    exprs.extend(call.args.iter());
                    exprs.extend(call.filter.as_deref());
                }
                exprs
            }
            LogicalPlan::Join { condition, .. } => condition.iter().collect(),
            LogicalPlan::Window { windows, .. } => windows.iter().flat_map(|(w, _)| w.expressions()).collect(),
            LogicalPlan::Sort { keys, .. } => keys.iter().map(|k| &k.expr).collect(),
            LogicalPlan::Limit { .. }
            | LogicalPlan::Union { .. }
            | LogicalPlan::Cte { .. }
            | LogicalPlan::CteScan(_)
            | LogicalPlan::RecursiveCte { .. }
            | LogicalPlan::WorkTableScan(_) => vec![],
        }
    }

    /// Columns read by this subtree that no node inside it produces: the outer
    /// references of a correlated subquery.
    pub fn free_columns(&self) -> BTreeSet<ColumnId> {
        let mut used = BTreeSet::new();
        let mut produced = BTreeSet::new();
        self.collect_used_and_produced(&mut used, &mut produced);
        used.difference(&produced).copied().collect()
    }

    fn collect_used_and_produced(&self, used: &mut BTreeSet<ColumnId>, produced: &mut BTreeSet<ColumnId>) {
        produced.extend(self.output().iter().map(|c| c.id));
        if let LogicalPlan::Aggregate { groups, aggregates, grouping_sets, .. } = self {
            produced.extend(groups.iter().map(|(_, c)| c.id));
            produced.extend(aggregates.iter().map(|(_, c)| c.id));
            produced.extend(grouping_sets.iter().map(|g| g.id.id));
        }
        for expr in self.expressions() {
            expr.collect_columns(used);
        }
        for child in self.children() {
            child.collect_used_and_produced(used, produced);
        }
    }

    /// Whether any expression in this subtree is a subquery.
    pub fn contains_subquery(&self) -> bool {
        self.expressions().iter().any(|e| e.contains_subquery()) || self.children().iter().any(|c| c.contains_subquery())
    }

    /// An indented tree for EXPLAIN (logical form).
    pub fn display_indent(&self) -> String {
        let mut out = String::new();
        self.fmt_indent(&mut out, 0);
        out
    }

    fn fmt_indent(&self, out: &mut String, depth: usize) {
        let pad = "  ".repeat(depth);
        let list = |exprs: Vec<String>| exprs.join(", ");
        let line = match self {
            LogicalPlan::Scan(scan) => {
                let cols = list(scan.columns.iter().map(|(_, c)| c.name.to_string()).collect());
                let filters = if scan.filters.is_empty() {
                    String::new()
                } else {
                    format!(" filters=[{}]", list(scan.filters.iter().map(|f| f.to_string()).collect()))
                };
                format!("Scan {} [{cols}]{filters}", scan.label)
            }
            LogicalPlan::Values { rows, .. } => format!("Values ({} rows)", rows.len()),
            LogicalPlan::Filter { predicate, .. } => format!("Filter {predicate}"),
            LogicalPlan::Project { exprs, .. } => {
                format!("Project {}", list(exprs.iter().map(|(e, c)| format!("{e} AS {}", c.name)).collect()))
            }
            LogicalPlan::Aggregate { groups, aggregates, grouping_sets, .. } => format!(
                "Aggregate groups=[{}]{} aggregates=[{}]",
                list(groups.iter().map(|(e, _)| e.to_string()).collect()),
                grouping_sets.as_ref().map_or(String::new(), |g| format!(" sets=[{}]", g.display_sets())),
                list(aggregates.iter().map(|(a, _)| a.to_string()).collect())
            ),
            LogicalPlan::Join { kind, condition, .. } => match condition {
                Some(c) => format!("Join {} ON {c}", kind.name()),
                None => format!("Join {}", kind.name()),
            },
            LogicalPlan::Sort { keys, .. } => format!("Sort {}", list(keys.iter().map(|k| k.to_string()).collect())),
            LogicalPlan::Limit { limit, offset, .. } => format!(
                "Limit {}{}",
                limit.map_or("ALL".to_string(), |l| l.to_string()),
                if *offset > 0 { format!(" OFFSET {offset}") } else { String::new() }
            ),
            LogicalPlan::Union { inputs, .. } => format!("Union ALL ({} inputs)", inputs.len()),
            LogicalPlan::Window { windows, .. } => {
                format!("Window {}", list(windows.iter().map(|(w, c)| format!("{w} AS {}", c.name)).collect()))
            }
            LogicalPlan::Cte { id, name, .. } => format!("Cte {name} (#{id}): definition, then body"),
            LogicalPlan::CteScan(scan) => {
                format!("CteScan {} (#{}) [{}]", scan.label, scan.id, list(scan.columns.iter().map(|(_, c)| c.name.to_string()).collect()))
            }
            LogicalPlan::RecursiveCte { id, name, distinct, output, .. } => format!(
                "RecursiveCte {name} (#{id}) UNION{} [{}]: non-recursive term, then recursive term",
                if *distinct { "" } else { " ALL" },
                list(output.iter().map(|c| c.name.to_string()).collect())
            ),
            LogicalPlan::WorkTableScan(scan) => {
                format!("WorkTableScan {} (#{}) [{}]", scan.label, scan.id, list(scan.columns.iter().map(|c| c.name.to_string()).collect()))
            }
        };
        out.push_str(&pad);
        out.push_str(&line);
        out.push('\n');
        for expr in self.expressions() {
            expr.visit(&mut |e| {
                if let Expr::Subquery(s) = e {
                    let label = match &s.kind {
                        SubqueryKind::Scalar => "scalar subquery",
                        SubqueryKind::Exists { .. } => "exists subquery",
                        SubqueryKind::In { .. } => "in subquery",
                    };
                    out.push_str(&format!("{pad}  <{label}>\n"));
                    s.plan.fmt_indent(out, depth + 2);
                }
            });
        }
        for child in self.children() {
            child.fmt_indent(out, depth + 1);
        }
    }
}

/// Replaces references to columns in `map` inside the subquery plans nested in `expr`
/// (outer references), leaving the expression's own column references alone.
pub fn rewrite_subquery_columns(expr: Expr, map: &HashMap<ColumnId, Expr>) -> Expr {
    expr.transform_up(&mut |e| match e {
        Expr::Subquery(mut s) => {
            s.plan = Box::new(std::mem::replace(&mut *s.plan, LogicalPlan::Values { rows: vec![], output: vec![] }).rewrite_columns(map));
            Expr::Subquery(s)
        }
        other => other,
    })
}

impl LogicalPlan {
    /// Applies `f` to every expression of every node in this tree.
    pub fn map_expressions(self, f: &mut dyn FnMut(Expr) -> Expr) -> LogicalPlan {
        let map_box = |plan: Box<LogicalPlan>, f: &mut dyn FnMut(Expr) -> Expr| -> Box<LogicalPlan> { Box::new(plan.map_expressions(f)) };
        match self {
            LogicalPlan::Scan(mut scan) => {
                scan.filters = scan.filters.into_iter().map(&mut *f).collect();
                LogicalPlan::Scan(scan)
            }
            LogicalPlan::Values { rows, output } => {
                LogicalPlan::Values { rows: rows.into_iter().map(|r| r.into_iter().map(&mut *f).collect()).collect(), output }
            }
            LogicalPlan::Filter { predicate, input } => {
                let input = map_box(input, f);
                LogicalPlan::Filter { predicate: f(predicate), input }
            }
            LogicalPlan::Project { exprs, input } => {
                let input = map_box(input, f);
                LogicalPlan::Project { exprs: exprs.into_iter().map(|(e, c)| (f(e), c)).collect(), input }
            }
            LogicalPlan::Aggregate { groups, aggregates, grouping_sets, input } => {
                let input = map_box(input, f);
                let groups = groups.into_iter().map(|(e, c)| (f(e), c)).collect();
                let aggregates = aggregates
                    .into_iter()
                    .map(|(mut call, c)| {
                        call.args = call.args.into_iter().map(&mut *f).collect();
                        call.filter = call.filter.map(|e| Box::new(f(*e)));
                        (call, c)
                    })
                    .collect();
                LogicalPlan::Aggregate { groups, aggregates, grouping_sets, input }
            }
            LogicalPlan::Join { kind, left, right, condition, mark } => {
                let left = map_box(left, f);
                let right = map_box(right, f);
                LogicalPlan::Join { kind, left, right, condition: condition.map(&mut *f), mark }
            }
            LogicalPlan::Sort { keys, input } => {
                let input = map_box(input, f);
                let keys = keys
                    .into_iter()
                    .map(|mut k| {
                        k.expr = f(k.expr);
                        k
                    })
                    .collect();
                LogicalPlan::Sort { keys, input }
            }
            LogicalPlan::Limit { limit, offset, input } => LogicalPlan::Limit { limit, offset, input: map_box(input, f) },
            LogicalPlan::Window { windows, input } => {
                let input = map_box(input, f);
                LogicalPlan::Window { windows: windows.into_iter().map(|(w, c)| (w.map_expressions(&mut *f), c)).collect(), input }
            }
            LogicalPlan::Union { inputs, output } => {
                LogicalPlan::Union { inputs: inputs.into_iter().map(|p| p.map_expressions(&mut *f)).collect(), output }
            }
            LogicalPlan::Cte { id, name, definition, body } => {
                let definition = map_box(definition, f);
                LogicalPlan::Cte { id, name, definition, body: map_box(body, f) }
            }
            LogicalPlan::RecursiveCte { id, name, distinct, anchor, recursive, output } => {
                let anchor = map_box(anchor, f);
                LogicalPlan::RecursiveCte { id, name, distinct, anchor, recursive: map_box(recursive, f), output }
            }
            scan @ (LogicalPlan::CteScan(_) | LogicalPlan::WorkTableScan(_)) => scan,
        }
    }

    /// Replaces references to columns in `map` everywhere in this tree, including
    /// subquery plans.
    pub fn rewrite_columns(self, map: &HashMap<ColumnId, Expr>) -> LogicalPlan {
        if map.is_empty() {
            return self;
        }
        self.map_expressions(&mut |e| e.replace_columns_deep(map))
    }
}

fn nullable(mut column: ColumnRef) -> ColumnRef {
    column.nullable = true;
    column
}

impl fmt::Display for LogicalPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.display_indent())
    }
}
