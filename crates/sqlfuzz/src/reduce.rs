//! Shrinking a failing case to a small reproduction.
//!
//! Greedy: list simpler variants of the case (a sub-expression replaced by one of its
//! operands or a constant, a join replaced by one side, a select item, filter, CTE, set
//! operation side or ORDER BY/LIMIT removed) and of the data (tables, columns, runs of rows
//! removed); take the first variant that still fails with the same signature; repeat until
//! no variant fails or the attempt budget is spent. Variants that no longer bind simply
//! fail differently and are discarded. Each oracle keeps its invariants: a TLP GROUP BY
//! case keeps its items equal to its keys, an aggregate case keeps top-level aggregates,
//! and a LIMIT never loses the ORDER BY that makes it deterministic.

use crate::ast::{Expr, JoinKind, Node, Query, Select, SetExpr, TableRef};
use crate::oracle::{Case, Finding, Oracle};
use crate::schema::Schema;
use crate::types::{typed_null, Kind, SqlType};

/// Decides whether a variant still fails: returns the finding it produces, if any.
pub trait Checker {
    fn check(&mut self, case: &Case, schema: &Schema) -> Option<Finding>;
}

/// Shrinks `case` and `schema` while `checker` reports a finding with the same signature.
/// Returns the smallest failing case, its schema and its finding.
pub fn reduce(case: Case, schema: Schema, finding: Finding, checker: &mut dyn Checker, max_attempts: usize) -> (Case, Schema, Finding) {
    let mut state = Reduction { signature: finding.signature(), case, schema, finding, attempts: 0, max_attempts };
    loop {
        let query_changed = state.reduce_query(checker);
        let data_changed = state.reduce_data(checker);
        if !(query_changed || data_changed) || state.attempts >= state.max_attempts {
            break;
        }
    }
    (state.case, state.schema, state.finding)
}

struct Reduction {
    signature: String,
    case: Case,
    schema: Schema,
    finding: Finding,
    attempts: usize,
    max_attempts: usize,
}

impl Reduction {
    /// Whether the variant still fails the same way (it becomes the current state if so).
    fn try_variant(&mut self, checker: &mut dyn Checker, case: Option<Case>, schema: Option<Schema>) -> bool {
        if self.attempts >= self.max_attempts {
            return false;
        }
        self.attempts += 1;
        let finding = checker.check(case.as_ref().unwrap_or(&self.case), schema.as_ref().unwrap_or(&self.schema));
        match finding.filter(|f| f.signature() == self.signature) {
            Some(finding) => {
                if let Some(case) = case {
                    self.case = case;
                }
                if let Some(schema) = schema {
                    self.schema = schema;
                }
                self.finding = finding;
                true
            }
            None => false,
        }
    }

    /// Takes the first (shortest) failing variant of the queries until none fails.
    fn reduce_query(&mut self, checker: &mut dyn Checker) -> bool {
        let mut changed = false;
        'restart: while self.attempts < self.max_attempts {
            for candidate in case_candidates(&self.case) {
                if self.attempts >= self.max_attempts {
                    break 'restart;
                }
                if self.try_variant(checker, Some(candidate), None) {
                    changed = true;
                    continue 'restart;
                }
            }
            break;
        }
        changed
    }

    /// Drops unused tables, then columns, then runs of rows (halving the run length, as
    /// delta debugging does), keeping each cut that still fails.
    fn reduce_data(&mut self, checker: &mut dyn Checker) -> bool {
        let mut changed = false;
        let sql = self.case.queries().join("\n");
        let mut index = 0;
        while index < self.schema.tables.len() {
            if !sql.contains(&format!("{} AS ", self.schema.tables[index].name)) {
                let mut s = self.schema.clone();
                s.tables.remove(index);
                if self.try_variant(checker, None, Some(s)) {
                    changed = true;
                    continue;
                }
            }
            index += 1;
        }
        for table in 0..self.schema.tables.len() {
            let mut column = 0;
            while column < self.schema.tables[table].columns.len() && self.schema.tables[table].columns.len() > 1 {
                let mut s = self.schema.clone();
                let t = &mut s.tables[table];
                t.columns.remove(column);
                for row in &mut t.rows {
                    row.remove(column);
                }
                t.primary_key = match t.primary_key {
                    Some(key) if key == column => None,
                    Some(key) if key > column => Some(key - 1),
                    other => other,
                };
                if self.try_variant(checker, None, Some(s)) {
                    changed = true;
                } else {
                    column += 1;
                }
            }
        }
        for table in 0..self.schema.tables.len() {
            let mut chunk = self.schema.tables[table].rows.len().div_ceil(2);
            while chunk >= 1 {
                let mut start = 0;
                while start < self.schema.tables[table].rows.len() {
                    let mut s = self.schema.clone();
                    let rows = &mut s.tables[table].rows;
                    let end = (start + chunk).min(rows.len());
                    rows.drain(start..end);
                    if self.try_variant(checker, None, Some(s)) {
                        changed = true;
                    } else {
                        start += chunk;
                    }
                }
                if chunk == 1 {
                    break;
                }
                chunk = chunk.div_ceil(2);
            }
        }
        changed
    }
}

/// Simpler variants of a case, shortest SQL first (big cuts before small ones).
pub fn case_candidates(case: &Case) -> Vec<Case> {
    let mut out: Vec<(usize, Case)> = variants(case).into_iter().map(|c| (c.queries().iter().map(|q| q.len()).sum(), c)).collect();
    out.sort_by_key(|(length, _)| *length);
    out.into_iter().map(|(_, c)| c).collect()
}

fn variants(case: &Case) -> Vec<Case> {
    let mut out = Vec::new();
    match case {
        Case::Tlp { oracle, base, predicate } => {
            for p in expr_candidates(predicate) {
                out.push(Case::Tlp { oracle: *oracle, base: base.clone(), predicate: p });
            }
            let variants = if *oracle == Oracle::TlpGroupBy { grouped_key_candidates(base) } else { select_candidates(base, false) };
            for b in variants {
                out.push(Case::Tlp { oracle: *oracle, base: b, predicate: predicate.clone() });
            }
        }
        Case::Aggregate { base, predicate } => {
            for p in expr_candidates(predicate) {
                out.push(Case::Aggregate { base: base.clone(), predicate: p });
            }
            for b in aggregate_item_candidates(base, 0).into_iter().chain(from_filter_candidates(base)) {
                out.push(Case::Aggregate { base: b, predicate: predicate.clone() });
            }
        }
        Case::Having { base, predicate } => {
            for p in expr_candidates(predicate) {
                out.push(Case::Having { base: base.clone(), predicate: p });
            }
            for b in aggregate_item_candidates(base, base.group_by.len()).into_iter().chain(from_filter_candidates(base)) {
                out.push(Case::Having { base: b, predicate: predicate.clone() });
            }
        }
        Case::NoRec { from, predicate } => {
            for p in expr_candidates(predicate) {
                out.push(Case::NoRec { from: from.clone(), predicate: p });
            }
            for f in from_candidates(from) {
                out.push(Case::NoRec { from: f, predicate: predicate.clone() });
            }
        }
        Case::Identity { base } => {
            let variants = if base.group_by.is_empty() { select_candidates(base, false) } else { grouped_key_candidates(base) };
            for b in variants {
                out.push(Case::Identity { base: b });
            }
        }
        Case::Optimizer { query } => {
            for q in query_candidates(query) {
                out.push(Case::Optimizer { query: q });
            }
        }
    }
    out
}

/// A constant of `kind`, and a typed NULL.
fn simple_constants(kind: Kind) -> Vec<Expr> {
    let ty = kind.default_type();
    let value = match kind {
        Kind::Bool => vec!["TRUE", "FALSE"],
        Kind::Int => vec!["0", "1"],
        Kind::Float => vec!["CAST(0 AS DOUBLE)"],
        Kind::Decimal => vec!["CAST(0 AS DECIMAL(18,4))"],
        Kind::Str => vec!["'a'"],
        Kind::Date => vec!["DATE '2020-01-01'"],
        Kind::Timestamp => vec!["TIMESTAMP '2020-01-01 00:00:00'"],
        Kind::Interval => vec!["INTERVAL '1 day'"],
    };
    let mut out: Vec<Expr> = value.into_iter().map(|v| Expr::literal(ty, v)).collect();
    out.push(Expr::literal(ty, typed_null(ty)));
    out
}

/// Simpler variants of an expression of the same kind.
pub fn expr_candidates(expr: &Expr) -> Vec<Expr> {
    let mut out = Vec::new();
    if matches!(expr.node, Node::Literal(_) | Node::Column { .. }) {
        if let Node::Column { .. } = expr.node {
            out.extend(simple_constants(expr.kind()));
        }
        return out;
    }
    for child in expr.children() {
        if child.kind() == expr.kind() && !matches!(expr.node, Node::Aggregate { .. }) {
            out.push(child.clone());
        }
    }
    out.extend(simple_constants(expr.kind()));
    let child_count = expr.children().len();
    for index in 0..child_count {
        let Some(child) = expr.children().get(index).map(|c| (*c).clone()) else { continue };
        for variant in expr_candidates(&child) {
            let mut copy = expr.clone();
            if let Some(slot) = copy.children_mut().into_iter().nth(index) {
                *slot = variant;
            }
            out.push(copy);
        }
    }
    // Fewer arms of a CASE, fewer items in an IN list or function argument list.
    match &expr.node {
        Node::Case { operand, whens, otherwise } => {
            if whens.len() > 1 {
                for index in 0..whens.len() {
                    let mut whens = whens.clone();
                    whens.remove(index);
                    out.push(Expr::new(expr.ty, Node::Case { operand: operand.clone(), whens, otherwise: otherwise.clone() }));
                }
            }
            if otherwise.is_some() {
                out.push(Expr::new(expr.ty, Node::Case { operand: operand.clone(), whens: whens.clone(), otherwise: None }));
            }
        }
        Node::InList { arg, list, negated } if list.len() > 1 => {
            for index in 0..list.len() {
                let mut list = list.clone();
                list.remove(index);
                out.push(Expr::new(expr.ty, Node::InList { arg: arg.clone(), list, negated: *negated }));
            }
        }
        Node::Function(name @ ("COALESCE" | "concat"), args) if args.len() > 2 => {
            for index in 0..args.len() {
                let mut args = args.clone();
                args.remove(index);
                out.push(Expr::new(expr.ty, Node::Function(name, args)));
            }
        }
        Node::Aggregate { name, distinct: true, arg } => {
            out.push(Expr::new(expr.ty, Node::Aggregate { name, distinct: false, arg: arg.clone() }));
        }
        _ => {}
    }
    let mut owned = expr.clone();
    if let Some(query) = owned.subquery_mut() {
        for variant in query_candidates(query) {
            let mut copy = expr.clone();
            if let Some(slot) = copy.subquery_mut() {
                *slot = variant;
            }
            out.push(copy);
        }
    }
    out
}

fn query_candidates(query: &Query) -> Vec<Query> {
    let mut out = Vec::new();
    for index in 0..query.ctes.len() {
        let mut q = query.clone();
        q.ctes.remove(index);
        out.push(q);
    }
    if query.limit.is_some() || query.offset.is_some() {
        let mut q = query.clone();
        q.limit = None;
        q.offset = None;
        q.order_by.clear();
        out.push(q);
        if query.offset.is_some() {
            let mut q = query.clone();
            q.offset = None;
            out.push(q);
        }
    } else if !query.order_by.is_empty() {
        let mut q = query.clone();
        q.order_by.clear();
        out.push(q);
    }
    if let SetExpr::SetOp { left, right, .. } = &query.body {
        for side in [left, right] {
            let mut q = query.clone();
            q.body = (**side).clone();
            q.order_by.retain(|o| o.column < q.body.output_types().len());
            out.push(q);
        }
    }
    for body in body_candidates(&query.body) {
        let mut q = query.clone();
        q.body = body;
        out.push(q);
    }
    for index in 0..query.ctes.len() {
        for variant in query_candidates(&query.ctes[index].query) {
            let mut q = query.clone();
            q.ctes[index].query = variant;
            out.push(q);
        }
    }
    out
}

fn body_candidates(body: &SetExpr) -> Vec<SetExpr> {
    match body {
        SetExpr::Select(select) => select_candidates(select, true).into_iter().map(|s| SetExpr::Select(Box::new(s))).collect(),
        SetExpr::SetOp { op, all, left, right } => {
            let mut out = Vec::new();
            for l in body_candidates(left) {
                out.push(SetExpr::SetOp { op: *op, all: *all, left: Box::new(l), right: right.clone() });
            }
            for r in body_candidates(right) {
                out.push(SetExpr::SetOp { op: *op, all: *all, left: left.clone(), right: Box::new(r) });
            }
            out
        }
    }
}

/// Variants of a SELECT; `free`: grouping may change too (any valid query will do).
fn select_candidates(select: &Select, free: bool) -> Vec<Select> {
    let mut out = Vec::new();
    if select.items.len() > 1 {
        for index in 0..select.items.len() {
            let mut s = select.clone();
            s.items.remove(index);
            out.push(s);
        }
    }
    if free {
        if !select.group_by.is_empty() || select.having.is_some() {
            let mut s = select.clone();
            s.group_by.clear();
            s.having = None;
            out.push(s);
        }
        if select.having.is_some() {
            let mut s = select.clone();
            s.having = None;
            out.push(s);
        }
        if select.distinct {
            let mut s = select.clone();
            s.distinct = false;
            out.push(s);
        }
    }
    out.extend(from_filter_candidates(select));
    for index in 0..select.items.len() {
        for variant in expr_candidates(&select.items[index]) {
            let mut s = select.clone();
            s.items[index] = variant;
            out.push(s);
        }
    }
    if free {
        if let Some(having) = &select.having {
            for variant in expr_candidates(having) {
                let mut s = select.clone();
                s.having = Some(variant);
                out.push(s);
            }
        }
    }
    out
}

/// Variants of the FROM clause and the WHERE filter.
fn from_filter_candidates(select: &Select) -> Vec<Select> {
    let mut out = Vec::new();
    if let Some(filter) = &select.filter {
        let mut s = select.clone();
        s.filter = None;
        out.push(s);
        for variant in expr_candidates(filter) {
            let mut s = select.clone();
            s.filter = Some(variant);
            out.push(s);
        }
    }
    for from in from_candidates(&select.from) {
        let mut s = select.clone();
        s.from = from;
        out.push(s);
    }
    out
}

/// TLP GROUP BY: items and keys shrink together.
fn grouped_key_candidates(select: &Select) -> Vec<Select> {
    let mut out = Vec::new();
    if select.group_by.len() > 1 {
        for index in 0..select.group_by.len() {
            let mut s = select.clone();
            s.group_by.remove(index);
            s.items = s.group_by.clone();
            out.push(s);
        }
    }
    for index in 0..select.group_by.len() {
        for variant in expr_candidates(&select.group_by[index]) {
            if matches!(variant.node, Node::Literal(_)) {
                continue;
            }
            let mut s = select.clone();
            s.group_by[index] = variant;
            s.items = s.group_by.clone();
            out.push(s);
        }
    }
    out.extend(from_filter_candidates(select));
    out
}

/// Items from `first` on are aggregates: remove them or shrink their arguments only.
fn aggregate_item_candidates(select: &Select, first: usize) -> Vec<Select> {
    let mut out = Vec::new();
    if select.items.len() > first + 1 {
        for index in first..select.items.len() {
            let mut s = select.clone();
            s.items.remove(index);
            out.push(s);
        }
    }
    for index in first..select.items.len() {
        let item = &select.items[index];
        let Node::Aggregate { name, distinct, arg: Some(arg) } = &item.node else { continue };
        if *name == "count" {
            let mut s = select.clone();
            s.items[index] = Expr::aggregate("count", false, None, SqlType::BigInt);
            out.push(s);
        }
        for variant in expr_candidates(arg) {
            let mut s = select.clone();
            s.items[index] = Expr::new(item.ty, Node::Aggregate { name, distinct: *distinct, arg: Some(Box::new(variant)) });
            out.push(s);
        }
    }
    out
}

fn from_candidates(from: &[TableRef]) -> Vec<Vec<TableRef>> {
    let mut out = Vec::new();
    if from.len() > 1 {
        for index in 0..from.len() {
            let mut f = from.to_vec();
            f.remove(index);
            out.push(f);
        }
    }
    for index in 0..from.len() {
        for variant in table_ref_candidates(&from[index]) {
            let mut f = from.to_vec();
            f[index] = variant;
            out.push(f);
        }
    }
    out
}

fn table_ref_candidates(table: &TableRef) -> Vec<TableRef> {
    let mut out = Vec::new();
    match table {
        TableRef::Table { .. } => {}
        TableRef::Derived { query, alias } => {
            for variant in query_candidates(query) {
                out.push(TableRef::Derived { query: Box::new(variant), alias: alias.clone() });
            }
        }
        TableRef::Join { kind, left, right, on } => {
            out.push((**left).clone());
            out.push((**right).clone());
            if *kind != JoinKind::Inner && *kind != JoinKind::Cross {
                out.push(TableRef::Join { kind: JoinKind::Inner, left: left.clone(), right: right.clone(), on: on.clone() });
            }
            if let Some(on) = on {
                out.push(TableRef::Join {
                    kind: *kind,
                    left: left.clone(),
                    right: right.clone(),
                    on: Some(Expr::literal(SqlType::Boolean, "TRUE")),
                });
                for variant in expr_candidates(on) {
                    out.push(TableRef::Join { kind: *kind, left: left.clone(), right: right.clone(), on: Some(variant) });
                }
            }
            for variant in table_ref_candidates(left) {
                out.push(TableRef::Join { kind: *kind, left: Box::new(variant), right: right.clone(), on: on.clone() });
            }
            for variant in table_ref_candidates(right) {
                out.push(TableRef::Join { kind: *kind, left: left.clone(), right: Box::new(variant), on: on.clone() });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expression_variants_keep_kind() {
        let a = Expr::column("a1", "c0", SqlType::Integer);
        let p = Expr::binary(a.clone(), "<", Expr::literal(SqlType::Integer, "3"), SqlType::Boolean).negate();
        let variants = expr_candidates(&p);
        assert!(variants.iter().all(|v| v.kind() == Kind::Bool));
        assert!(variants.iter().any(|v| v.sql() == "(a1.c0 < 3)"));
        assert!(variants.iter().any(|v| v.sql() == "(NOT (0 < 3))"));
    }
}
