//! The oracles: pairs of queries that must return the same rows, built from generated
//! parts, and the verdict when they run.
//!
//! * **TLP** (ternary logic partitioning, Rigger & Su, OOPSLA 2020): every row satisfies
//!   exactly one of `p`, `NOT p`, `p IS NULL`, so
//!   `SELECT ... FROM f` = `SELECT ... FROM f WHERE p UNION ALL ... WHERE NOT p UNION ALL
//!   ... WHERE p IS NULL`. Variants: DISTINCT and GROUP BY (partitions combined with
//!   UNION), aggregates (`max` of the partitions' `max`, `sum` of their `count`, ...) and
//!   HAVING (partitioning the groups).
//! * **NoREC** (Rigger & Su, ESEC/FSE 2020): `SELECT count(*) FROM f WHERE p` (the
//!   optimizer sees the filter) equals `SELECT sum(CASE WHEN p THEN 1 ELSE 0 END) FROM f`
//!   (p evaluated on every row, nothing to optimize).
//! * **Optimizer**: a whole random query gives the same rows with the optimizer rules off.
//! * **Identity**: `GROUP BY k` / `SELECT DISTINCT k` give the same rows when every key is
//!   wrapped as `CASE WHEN k IS NULL THEN NULL ELSE k END` (a computed vector instead of the
//!   column as it comes, e.g. a constant or dictionary vector with NULLs from an outer join).
//! * **Distinct rows**: results of DISTINCT, GROUP BY of exactly the select items, UNION,
//!   INTERSECT and EXCEPT never hold a row twice (NULL equals NULL here).
//!
//! Verdicts: rows equal, pass. An internal error or panic on either side is always a
//! finding; "not implemented" is counted; the same user error on both sides is fine; a
//! runtime error on one side only is counted (the partitions evaluate `p` where the
//! original query does not); any other one-sided error is a finding.

use crate::ast::{Expr, Node, Query, Select, SetExpr, SetOp, TableRef};
use crate::compare::{compare, find_duplicate, show_row};
use crate::generator::{Generator, Scope};
use crate::target::{ErrorKind, Outcome, Target};
use crate::types::{Kind, SqlType};

/// Rules switched off for the optimizer oracle's reference run (`unnest_subqueries` is
/// required and cannot be switched off).
pub const OPTIMIZER_RULES_OFF: &str =
    "fold_constants,push_down_predicates,reorder_joins,push_down_semi_joins,reduce_aggregate_inputs,prune_columns";

/// Largest product of relation sizes in an oracle's FROM clause.
const ORACLE_ROW_BUDGET: u64 = 20_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Oracle {
    TlpWhere,
    TlpDistinct,
    TlpGroupBy,
    TlpAggregate,
    TlpHaving,
    NoRec,
    Identity,
    Optimizer,
    /// The same query under two configurations (recorded by the campaign).
    Configuration,
}

pub const ORACLES: [Oracle; 9] = [
    Oracle::TlpWhere,
    Oracle::TlpDistinct,
    Oracle::TlpGroupBy,
    Oracle::TlpAggregate,
    Oracle::TlpHaving,
    Oracle::NoRec,
    Oracle::Identity,
    Oracle::Optimizer,
    Oracle::Configuration,
];

impl Oracle {
    pub fn name(self) -> &'static str {
        match self {
            Oracle::TlpWhere => "tlp_where",
            Oracle::TlpDistinct => "tlp_distinct",
            Oracle::TlpGroupBy => "tlp_group_by",
            Oracle::TlpAggregate => "tlp_aggregate",
            Oracle::TlpHaving => "tlp_having",
            Oracle::NoRec => "norec",
            Oracle::Identity => "identity",
            Oracle::Optimizer => "optimizer",
            Oracle::Configuration => "configuration",
        }
    }
}

/// One oracle check: the generated parts the two queries are built from.
#[derive(Debug, Clone, PartialEq)]
pub enum Case {
    /// `base` has no WHERE partition yet (it may have its own filter); DISTINCT, GROUP BY
    /// keys = items, or neither, by `oracle`.
    Tlp {
        oracle: Oracle,
        base: Select,
        predicate: Expr,
    },
    /// `base.items` are combinable aggregates (no DISTINCT in sum/count).
    Aggregate {
        base: Select,
        predicate: Expr,
    },
    /// `base` groups; `predicate` is a group-level condition.
    Having {
        base: Select,
        predicate: Expr,
    },
    NoRec {
        from: Vec<TableRef>,
        predicate: Expr,
    },
    /// `base` is DISTINCT or groups by exactly its items.
    Identity {
        base: Select,
    },
    Optimizer {
        query: Query,
    },
}

/// The result of one check.
#[derive(Debug, Clone)]
pub enum Verdict {
    Pass,
    /// The same kind of user error on both sides.
    BothFailed(String),
    /// A runtime error on one side only.
    OneSidedRuntimeError(String),
    NotImplemented(String),
    Finding(Finding),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FindingKind {
    /// Both queries ran and returned different rows.
    Mismatch,
    /// An internal error or a panic.
    Internal,
    /// The watchdog cancelled a query.
    Timeout,
    /// One query was rejected (or failed) where its partner ran.
    ErrorMismatch,
    /// A result that must be duplicate-free (DISTINCT, GROUP BY of its items, UNION,
    /// INTERSECT, EXCEPT) has a row twice.
    Duplicates,
    /// An error the generator never provokes (division by zero: divisions are guarded, and
    /// `1 / 0` is only put where SQL never evaluates it).
    UnexpectedError,
}

impl FindingKind {
    pub fn name(self) -> &'static str {
        match self {
            FindingKind::Mismatch => "mismatch",
            FindingKind::Internal => "internal error",
            FindingKind::Timeout => "timeout",
            FindingKind::ErrorMismatch => "error on one side",
            FindingKind::UnexpectedError => "unexpected error",
            FindingKind::Duplicates => "duplicate rows",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Finding {
    pub oracle: Oracle,
    pub kind: FindingKind,
    /// The SQL of the two sides (for the optimizer oracle: the query twice, the second
    /// with the rules off).
    pub queries: [String; 2],
    pub detail: String,
}

impl Finding {
    /// What must stay the same while a reproduction shrinks: the kind, and for errors the
    /// message with numbers removed.
    pub fn signature(&self) -> String {
        let detail: String = match self.kind {
            FindingKind::Mismatch => String::new(),
            _ => self.detail.chars().filter(|c| !c.is_ascii_digit()).take(120).collect(),
        };
        format!("{}|{}|{detail}", self.oracle.name(), self.kind.name())
    }
}

impl Case {
    pub fn oracle(&self) -> Oracle {
        match self {
            Case::Tlp { oracle, .. } => *oracle,
            Case::Aggregate { .. } => Oracle::TlpAggregate,
            Case::Having { .. } => Oracle::TlpHaving,
            Case::NoRec { .. } => Oracle::NoRec,
            Case::Identity { .. } => Oracle::Identity,
            Case::Optimizer { .. } => Oracle::Optimizer,
        }
    }

    /// A random case.
    pub fn generate(g: &mut Generator) -> Case {
        let f = g.features;
        let weights = [
            25,
            if f.distinct { 8 } else { 0 },
            if f.group_by { 10 } else { 0 },
            if f.aggregates { 12 } else { 0 },
            if f.having && f.group_by && f.aggregates { 8 } else { 0 },
            17,
            20,
            if f.distinct || f.group_by { 8 } else { 0 },
        ];
        match g.rng.weighted(&weights) {
            0 => tlp_case(g, Oracle::TlpWhere),
            1 => tlp_case(g, Oracle::TlpDistinct),
            2 => tlp_case(g, Oracle::TlpGroupBy),
            3 => aggregate_case(g),
            4 => having_case(g),
            5 => {
                let (from, sources) = g.from_clause(ORACLE_ROW_BUDGET, 0);
                let predicate = g.predicate(&Scope::rows(sources), 0);
                Case::NoRec { from, predicate }
            }
            6 => Case::Optimizer { query: g.query() },
            _ => {
                let oracle = if f.group_by && (!f.distinct || g.rng.chance(50)) { Oracle::TlpGroupBy } else { Oracle::TlpDistinct };
                match tlp_case(g, oracle) {
                    Case::Tlp { base, .. } => Case::Identity { base },
                    other => other,
                }
            }
        }
    }

    /// The two queries; for the optimizer oracle the same text twice.
    pub fn queries(&self) -> [String; 2] {
        match self {
            Case::Tlp { oracle, base, predicate } => {
                let all = *oracle == Oracle::TlpWhere;
                [base.sql(), partitioned(base, predicate, all, |s, p| s.filter = Some(and(s.filter.take(), p))).sql()]
            }
            Case::Aggregate { base, predicate } => {
                let parts = partitioned(base, predicate, true, |s, p| s.filter = Some(and(s.filter.take(), p)));
                let combined: Vec<String> =
                    base.items.iter().enumerate().map(|(i, item)| format!("{}(s.c{i}) AS c{i}", combining_aggregate(item))).collect();
                [base.sql(), format!("SELECT {} FROM ({}) AS s", combined.join(", "), parts.sql())]
            }
            Case::Having { base, predicate } => {
                [base.sql(), partitioned(base, predicate, true, |s, p| s.having = Some(and(s.having.take(), p))).sql()]
            }
            Case::NoRec { from, predicate } => {
                let from_sql = from.iter().map(|t| t.sql()).collect::<Vec<_>>().join(", ");
                [
                    format!("SELECT count(*) AS c0 FROM {from_sql} WHERE {}", predicate.sql()),
                    format!("SELECT COALESCE(sum(CASE WHEN {} THEN 1 ELSE 0 END), 0) AS c0 FROM {from_sql}", predicate.sql()),
                ]
            }
            Case::Identity { base } => {
                let mut wrapped = base.clone();
                wrapped.items = wrapped.items.into_iter().map(identity).collect();
                wrapped.group_by = wrapped.group_by.into_iter().map(identity).collect();
                [base.sql(), wrapped.sql()]
            }
            Case::Optimizer { query } => {
                let sql = query.sql();
                [sql.clone(), sql]
            }
        }
    }

    /// Whether the rows must come in the same order.
    fn ordered(&self) -> bool {
        match self {
            Case::Optimizer { query } => query.limit.is_none() && query.is_totally_ordered(),
            _ => false,
        }
    }

    /// Runs both sides on `target`.
    pub fn check(&self, target: &mut Target) -> Verdict {
        self.run(target).0
    }

    /// [`Case::check`], also returning the first query's outcome (the configuration oracle
    /// compares it across configurations).
    pub fn run(&self, target: &mut Target) -> (Verdict, Outcome) {
        let queries = self.queries();
        let first = target.run(&queries[0]);
        let second = if let Case::Optimizer { .. } = self {
            if let Err(e) = target.execute(&format!("SET disabled_optimizers = '{OPTIMIZER_RULES_OFF}'")) {
                return (Verdict::BothFailed(e), first);
            }
            let outcome = target.run(&queries[1]);
            if let Err(e) = target.execute("RESET disabled_optimizers") {
                return (Verdict::BothFailed(e), first);
            }
            outcome
        } else {
            target.run(&queries[1])
        };
        let mut verdict = judge(self.oracle(), queries.clone(), &first, &second, self.ordered());
        if matches!(verdict, Verdict::Pass) && self.distinct_rows() {
            for (side, outcome) in [("first", &first), ("second", &second)] {
                if let Outcome::Rows(rows) = outcome {
                    if let Some(row) = find_duplicate(rows) {
                        verdict = Verdict::Finding(Finding {
                            oracle: self.oracle(),
                            kind: FindingKind::Duplicates,
                            queries,
                            detail: format!("the {side} query returns {} twice", show_row(row)),
                        });
                        break;
                    }
                }
            }
        }
        (verdict, first)
    }

    /// Whether both queries must return distinct rows.
    fn distinct_rows(&self) -> bool {
        match self {
            Case::Tlp { oracle, .. } => matches!(oracle, Oracle::TlpDistinct | Oracle::TlpGroupBy),
            Case::Identity { .. } => true,
            Case::Optimizer { query } => returns_distinct_rows(&query.body),
            _ => false,
        }
    }
}

/// The verdict on two outcomes of queries that must agree.
pub fn judge(oracle: Oracle, queries: [String; 2], first: &Outcome, second: &Outcome, ordered: bool) -> Verdict {
    let finding = |kind: FindingKind, detail: String| Verdict::Finding(Finding { oracle, kind, queries: queries.clone(), detail });
    for (side, outcome) in [("first", first), ("second", second)] {
        if let Outcome::Error(kind @ (ErrorKind::Internal | ErrorKind::Timeout), message) = outcome {
            let kind = if *kind == ErrorKind::Internal { FindingKind::Internal } else { FindingKind::Timeout };
            return finding(kind, format!("{side} query: {message}"));
        }
        if let Outcome::Error(_, message) = outcome {
            if message.contains("division by zero") {
                return finding(FindingKind::UnexpectedError, format!("{side} query: {message}"));
            }
        }
    }
    for outcome in [first, second] {
        if let Outcome::Error(ErrorKind::NotImplemented, message) = outcome {
            return Verdict::NotImplemented(message.clone());
        }
    }
    match (first, second) {
        (Outcome::Rows(a), Outcome::Rows(b)) => match compare(a, b, ordered) {
            Ok(()) => Verdict::Pass,
            Err(difference) => finding(FindingKind::Mismatch, difference),
        },
        (Outcome::Error(x, a), Outcome::Error(y, _)) if x == y => Verdict::BothFailed(a.clone()),
        (Outcome::Error(ErrorKind::Runtime, message), Outcome::Rows(_))
        | (Outcome::Rows(_), Outcome::Error(ErrorKind::Runtime, message)) => Verdict::OneSidedRuntimeError(message.clone()),
        (Outcome::Error(_, message), Outcome::Rows(rows)) => {
            finding(FindingKind::ErrorMismatch, format!("first query failed: {message}; second returned {} rows", rows.len()))
        }
        (Outcome::Rows(rows), Outcome::Error(_, message)) => {
            finding(FindingKind::ErrorMismatch, format!("second query failed: {message}; first returned {} rows", rows.len()))
        }
        (Outcome::Error(_, a), Outcome::Error(_, b)) => finding(FindingKind::ErrorMismatch, format!("different errors: {a} / {b}")),
    }
}

/// Whether a query body's rows are distinct by construction.
pub fn returns_distinct_rows(body: &SetExpr) -> bool {
    match body {
        SetExpr::Select(select) => {
            select.distinct
                || (!select.group_by.is_empty()
                    && select.group_by.iter().all(|key| select.items.contains(key))
                    && select.group_by.len() == select.items.len())
        }
        SetExpr::SetOp { all, .. } => !all,
    }
}

/// `CASE WHEN e IS NULL THEN NULL ELSE e END`: the same values, computed.
fn identity(e: Expr) -> Expr {
    let ty = e.ty;
    let is_null = Expr::suffix(e.clone(), "IS NULL");
    Expr::new(ty, Node::Case { operand: None, whens: vec![(is_null, Expr::literal(ty, "NULL"))], otherwise: Some(Box::new(e)) })
}

/// `a AND b`, or `b` alone.
fn and(a: Option<Expr>, b: Expr) -> Expr {
    match a {
        Some(a) => a.and(b),
        None => b,
    }
}

/// `base` three times, `apply` adding `p`, `NOT p` and `p IS NULL`, combined with UNION
/// [ALL].
fn partitioned(base: &Select, predicate: &Expr, all: bool, apply: impl Fn(&mut Select, Expr)) -> Query {
    let parts = [predicate.clone(), predicate.clone().negate(), Expr::suffix(predicate.clone(), "IS NULL")];
    let mut body: Option<SetExpr> = None;
    for part in parts {
        let mut select = base.clone();
        apply(&mut select, part);
        let next = SetExpr::Select(Box::new(select));
        body = Some(match body {
            None => next,
            Some(left) => SetExpr::SetOp { op: SetOp::Union, all, left: Box::new(left), right: Box::new(next) },
        });
    }
    let body = body.unwrap_or_else(|| SetExpr::Select(Box::new(base.clone())));
    Query { ctes: Vec::new(), body, order_by: Vec::new(), limit: None, offset: None }
}

/// The aggregate that combines the partitions' results of `item`.
fn combining_aggregate(item: &Expr) -> &'static str {
    match &item.node {
        Node::Aggregate { name: "count" | "sum", .. } => "sum",
        Node::Aggregate { name, .. } => name,
        _ => "min",
    }
}

/// A SELECT over a random FROM for the TLP variants.
fn tlp_case(g: &mut Generator, oracle: Oracle) -> Case {
    let (from, sources) = g.from_clause(ORACLE_ROW_BUDGET, 0);
    let scope = Scope::rows(sources);
    let filter = if g.rng.chance(25) { Some(g.predicate(&scope, 0)) } else { None };
    let mut base = Select { from, filter, ..Select::default() };
    if oracle == Oracle::TlpGroupBy {
        base.group_by = g.group_keys(&scope);
        base.items = base.group_by.clone();
    } else {
        let count = g.rng.range(1, 4) as usize;
        base.items = (0..count)
            .map(|_| {
                let kind = item_kind(g, &scope);
                match g.rng.weighted(&[50, 15, 35]) {
                    0 => g.leaf(&scope, kind),
                    1 => g.nulled_column(&scope, kind),
                    _ => g.expr(&scope, kind, 0),
                }
            })
            .collect();
        base.distinct = oracle == Oracle::TlpDistinct;
    }
    let predicate = g.predicate(&scope, 0);
    Case::Tlp { oracle, base, predicate }
}

fn item_kind(g: &mut Generator, scope: &Scope) -> Kind {
    let kinds: Vec<Kind> = scope.local.iter().flat_map(|s| s.columns.iter().map(|(_, t)| t.kind())).collect();
    if kinds.is_empty() {
        Kind::Int
    } else {
        *g.rng.pick(&kinds)
    }
}

/// Aggregates whose value over all rows follows from their values over the partitions.
fn combinable_aggregate(g: &mut Generator, scope: &Scope) -> Expr {
    let kind = item_kind(g, scope);
    let arg = |g: &mut Generator, k: Kind| if g.rng.chance(60) { g.leaf(scope, k) } else { g.expr(scope, k, 1) };
    match g.rng.below(6) {
        0 => Expr::aggregate("count", false, None, SqlType::BigInt),
        1 => {
            let a = arg(g, kind);
            Expr::aggregate("count", false, Some(a), SqlType::BigInt)
        }
        2 if kind.is_numeric() => {
            let a = arg(g, kind);
            let ty = a.ty;
            Expr::aggregate("sum", false, Some(a), ty)
        }
        3 if kind == Kind::Bool => {
            let a = arg(g, kind);
            Expr::aggregate(if g.rng.chance(50) { "bool_and" } else { "bool_or" }, false, Some(a), SqlType::Boolean)
        }
        _ if kind.has_min_max() => {
            let a = arg(g, kind);
            let ty = a.ty;
            let distinct = g.features.distinct_aggregates && g.rng.chance(20);
            Expr::aggregate(if g.rng.chance(50) { "min" } else { "max" }, distinct, Some(a), ty)
        }
        _ => {
            let a = arg(g, kind);
            Expr::aggregate("count", false, Some(a), SqlType::BigInt)
        }
    }
}

fn aggregate_case(g: &mut Generator) -> Case {
    let (from, sources) = g.from_clause(ORACLE_ROW_BUDGET, 0);
    let scope = Scope::rows(sources);
    let filter = if g.rng.chance(20) { Some(g.predicate(&scope, 0)) } else { None };
    let count = g.rng.range(1, 3) as usize;
    let items = (0..count).map(|_| combinable_aggregate(g, &scope)).collect();
    let predicate = g.predicate(&scope, 0);
    Case::Aggregate { base: Select { items, from, filter, ..Select::default() }, predicate }
}

fn having_case(g: &mut Generator) -> Case {
    let (from, sources) = g.from_clause(ORACLE_ROW_BUDGET, 0);
    let scope = Scope::rows(sources);
    let keys = g.group_keys(&scope);
    let group_scope = Scope { group: Some(keys.clone()), ..scope.clone() };
    let mut items = keys.clone();
    for _ in 0..g.rng.range(1, 2) {
        let kind = item_kind(g, &scope);
        items.push(g.aggregate(&scope, kind));
    }
    let predicate = g.predicate(&group_scope, 0);
    Case::Having { base: Select { items, from, group_by: keys, ..Select::default() }, predicate }
}

/// A one-line description of a difference between two outcomes (for reports).
pub fn describe(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Rows(rows) => {
            let shown: Vec<String> = rows.iter().take(5).map(show_row).collect();
            format!("{} rows: {}{}", rows.len(), shown.join(" "), if rows.len() > 5 { " ..." } else { "" })
        }
        Outcome::Error(_, message) => format!("error: {message}"),
    }
}
