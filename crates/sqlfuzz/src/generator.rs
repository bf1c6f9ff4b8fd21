//! Random typed queries over a [`Schema`].
//!
//! Every expression is generated for a wanted [`Kind`], so operands always have types the
//! operator accepts and the query binds. Values are kept from overflowing where engines
//! differ (integer operands of `+ - *` are taken `% 100`, products only by small constants,
//! divisions only of doubles by `NULLIF(divisor, 0)`); scalar subqueries aggregate or use
//! `ORDER BY 1 LIMIT 1`, so they never return two rows; ORDER BY names NULLS FIRST/LAST.
//! Row counts are bounded: the product of the relations' sizes in one FROM stays under a
//! budget, so cross and non-equality joins stay small.
//!
//! ```text
//! query ─▶ [WITH ctes] body [ORDER BY ... LIMIT ... OFFSET ...]
//! body  ─▶ select | body UNION|INTERSECT|EXCEPT [ALL] body     (same kinds per column)
//! select ─▶ SELECT [DISTINCT] items FROM from [WHERE bool] [GROUP BY keys [HAVING bool]]
//! from  ─▶ source {, source | JOIN kind source ON bool}          (ON: equi, non-equi, constant)
//! source ─▶ table | (query) | cte
//! expr(kind) ─▶ column | literal | operator(kind-typed operands) | CASE | COALESCE | NULLIF
//!             | (scalar subquery, maybe correlated) | EXISTS | IN (subquery) | aggregate
//! ```

use crate::ast::{Cte, Expr, JoinKind, Node, OrderItem, Query, Select, SetExpr, SetOp, TableRef};
use crate::rng::Rng;
use crate::schema::Schema;
use crate::types::{small_literal, string_literal, typed_null, Class, Kind, SqlType, ALL_KINDS, PATTERNS};

/// Largest product of relation sizes in one FROM clause of a top-level query.
const TOP_ROW_BUDGET: u64 = 20_000;
/// ... in a subquery, which may run once per outer row when it is not decorrelated.
const SUBQUERY_ROW_BUDGET: u64 = 2_000;
/// Deepest nesting of subqueries and derived tables.
const MAX_QUERY_DEPTH: u32 = 2;
/// Deepest nesting of operators in one expression.
const MAX_EXPR_DEPTH: u32 = 3;

/// Classes of SQL features the generator may use. Switch one off when Apiary does not
/// support it (yet) or a known bug would flood the results.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Features {
    pub inner_join: bool,
    pub left_join: bool,
    pub right_join: bool,
    pub full_join: bool,
    pub cross_join: bool,
    pub comma_join: bool,
    /// Join conditions other than column equalities (`<`, `<>`, arbitrary predicates).
    pub non_equi_join: bool,
    /// Constant join conditions (`ON TRUE`, `ON FALSE`, `ON 1 = 0`).
    pub constant_join: bool,
    pub scalar_subquery: bool,
    pub exists_subquery: bool,
    pub in_subquery: bool,
    /// `<constant> [NOT] IN (subquery)`.
    pub constant_in_subquery: bool,
    /// A scalar subquery as the first item of an IN list: `x IN ((SELECT ...), 1)`.
    pub in_list_subquery_first: bool,
    /// Subqueries that refer to the enclosing query.
    pub correlated_subquery: bool,
    /// Outer columns in a subquery's select list (`EXISTS (SELECT outer.x FROM ...)`).
    pub outer_reference_items: bool,
    /// Correlated references to columns of derived tables and CTEs.
    pub correlated_derived_columns: bool,
    pub aggregates: bool,
    pub distinct_aggregates: bool,
    pub group_by: bool,
    pub having: bool,
    pub distinct: bool,
    pub set_operations: bool,
    pub order_limit: bool,
    pub derived_tables: bool,
    pub ctes: bool,
    pub casts: bool,
    pub string_functions: bool,
    /// Date, timestamp and interval arithmetic and functions.
    pub temporal_functions: bool,
    /// `date_trunc(unit, TIMESTAMP)` (a TIMESTAMP in PostgreSQL and DuckDB).
    pub date_trunc: bool,
    pub nullif: bool,
    /// `CASE WHEN FALSE THEN 1 / 0 ...`, `COALESCE(<constant>, 1 / 0)`: branches SQL never
    /// evaluates that would raise an error.
    pub untaken_errors: bool,
    /// Bare `NULL` literals (type unknown) as comparison operands, IN items and aggregate
    /// arguments.
    pub untyped_null: bool,
    /// ... also compared with INTERVALs (`NULL <= INTERVAL '1 day'`).
    pub interval_untyped_null: bool,
    /// NaN, infinities and -0 in float data.
    pub special_floats: bool,
    /// Constant select items (`SELECT a, 7 AS k FROM ...`).
    pub constant_items: bool,
    /// `greatest(...)`, `least(...)`.
    pub greatest_least: bool,
    /// DECIMAL(38,s) data beyond 64 bits (scaled), up to 20 whole digits.
    pub huge_decimals: bool,
    /// NOT NULL columns and integer PRIMARY KEYs.
    pub constraints: bool,
}

/// Names accepted by [`Features::set`], in declaration order.
pub const FEATURE_NAMES: &[&str] = &[
    "inner_join",
    "left_join",
    "right_join",
    "full_join",
    "cross_join",
    "comma_join",
    "non_equi_join",
    "constant_join",
    "scalar_subquery",
    "exists_subquery",
    "in_subquery",
    "constant_in_subquery",
    "in_list_subquery_first",
    "correlated_subquery",
    "outer_reference_items",
    "correlated_derived_columns",
    "aggregates",
    "distinct_aggregates",
    "group_by",
    "having",
    "distinct",
    "set_operations",
    "order_limit",
    "derived_tables",
    "ctes",
    "casts",
    "string_functions",
    "temporal_functions",
    "date_trunc",
    "nullif",
    "untaken_errors",
    "untyped_null",
    "interval_untyped_null",
    "special_floats",
    "constant_items",
    "greatest_least",
    "huge_decimals",
    "constraints",
];

impl Default for Features {
    /// Everything but special floats.
    fn default() -> Self {
        let mut features = Features::all();
        features.special_floats = false;
        features
    }
}

impl Features {
    pub fn all() -> Features {
        Features {
            inner_join: true,
            left_join: true,
            right_join: true,
            full_join: true,
            cross_join: true,
            comma_join: true,
            non_equi_join: true,
            constant_join: true,
            scalar_subquery: true,
            exists_subquery: true,
            in_subquery: true,
            constant_in_subquery: true,
            in_list_subquery_first: true,
            correlated_subquery: true,
            outer_reference_items: true,
            correlated_derived_columns: true,
            aggregates: true,
            distinct_aggregates: true,
            group_by: true,
            having: true,
            distinct: true,
            set_operations: true,
            order_limit: true,
            derived_tables: true,
            ctes: true,
            casts: true,
            string_functions: true,
            temporal_functions: true,
            date_trunc: true,
            nullif: true,
            untaken_errors: true,
            untyped_null: true,
            interval_untyped_null: true,
            special_floats: true,
            constant_items: true,
            greatest_least: true,
            huge_decimals: true,
            constraints: true,
        }
    }

    fn flag_mut(&mut self, name: &str) -> Option<&mut bool> {
        Some(match name {
            "inner_join" => &mut self.inner_join,
            "left_join" => &mut self.left_join,
            "right_join" => &mut self.right_join,
            "full_join" => &mut self.full_join,
            "cross_join" => &mut self.cross_join,
            "comma_join" => &mut self.comma_join,
            "non_equi_join" => &mut self.non_equi_join,
            "constant_join" => &mut self.constant_join,
            "scalar_subquery" => &mut self.scalar_subquery,
            "exists_subquery" => &mut self.exists_subquery,
            "in_subquery" => &mut self.in_subquery,
            "constant_in_subquery" => &mut self.constant_in_subquery,
            "in_list_subquery_first" => &mut self.in_list_subquery_first,
            "correlated_subquery" => &mut self.correlated_subquery,
            "outer_reference_items" => &mut self.outer_reference_items,
            "correlated_derived_columns" => &mut self.correlated_derived_columns,
            "aggregates" => &mut self.aggregates,
            "distinct_aggregates" => &mut self.distinct_aggregates,
            "group_by" => &mut self.group_by,
            "having" => &mut self.having,
            "distinct" => &mut self.distinct,
            "set_operations" => &mut self.set_operations,
            "order_limit" => &mut self.order_limit,
            "derived_tables" => &mut self.derived_tables,
            "ctes" => &mut self.ctes,
            "casts" => &mut self.casts,
            "string_functions" => &mut self.string_functions,
            "temporal_functions" => &mut self.temporal_functions,
            "date_trunc" => &mut self.date_trunc,
            "nullif" => &mut self.nullif,
            "untaken_errors" => &mut self.untaken_errors,
            "untyped_null" => &mut self.untyped_null,
            "interval_untyped_null" => &mut self.interval_untyped_null,
            "special_floats" => &mut self.special_floats,
            "constant_items" => &mut self.constant_items,
            "greatest_least" => &mut self.greatest_least,
            "huge_decimals" => &mut self.huge_decimals,
            "constraints" => &mut self.constraints,
            _ => return None,
        })
    }

    /// Switches a feature class on or off by name.
    pub fn set(&mut self, name: &str, on: bool) -> Result<(), String> {
        match self.flag_mut(name) {
            Some(flag) => {
                *flag = on;
                Ok(())
            }
            None => Err(format!("unknown feature '{name}' (known: {})", FEATURE_NAMES.join(", "))),
        }
    }

    /// Names of the features switched off.
    pub fn disabled(&self) -> Vec<&'static str> {
        let mut copy = self.clone();
        FEATURE_NAMES.iter().copied().filter(|name| copy.flag_mut(name).is_some_and(|flag| !*flag)).collect()
    }

    fn join_kinds(&self) -> Vec<JoinKind> {
        let mut kinds = Vec::new();
        for (on, kind) in [
            (self.inner_join, JoinKind::Inner),
            (self.left_join, JoinKind::Left),
            (self.right_join, JoinKind::Right),
            (self.full_join, JoinKind::Full),
            (self.cross_join, JoinKind::Cross),
        ] {
            if on {
                kinds.push(kind);
            }
        }
        kinds
    }
}

/// A relation in scope: an alias and its columns.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    pub alias: String,
    pub columns: Vec<(String, SqlType)>,
    /// Estimated (upper bound of the) row count.
    pub rows: u64,
    /// A derived table or CTE (its columns may be expressions).
    pub derived: bool,
}

/// Where an expression is generated.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    /// Relations of this query level.
    pub local: Vec<Source>,
    /// Relations of the enclosing queries (correlated references).
    pub outer: Vec<Source>,
    /// In a grouped query: the group keys. Leaves are then keys, aggregates of row-level
    /// expressions, or literals.
    pub group: Option<Vec<Expr>>,
}

impl Scope {
    pub fn rows(local: Vec<Source>) -> Scope {
        Scope { local, outer: Vec::new(), group: None }
    }

    fn columns_of(&self, kind: Kind, outer: bool) -> Vec<Expr> {
        let sources = if outer { &self.outer } else { &self.local };
        sources
            .iter()
            .flat_map(|s| s.columns.iter().filter(|(_, ty)| ty.kind() == kind).map(move |(name, ty)| Expr::column(&s.alias, name, *ty)))
            .collect()
    }

    /// Kinds that have a column in scope (local relations).
    fn column_kinds(&self) -> Vec<Kind> {
        let mut kinds: Vec<Kind> = Vec::new();
        for source in &self.local {
            for (_, ty) in &source.columns {
                if !kinds.contains(&ty.kind()) {
                    kinds.push(ty.kind());
                }
            }
        }
        kinds
    }

    /// The scope of row-level expressions (aggregate arguments) in a grouped query.
    fn row_level(&self) -> Scope {
        Scope { local: self.local.clone(), outer: self.outer.clone(), group: None }
    }
}

/// Generates queries and their parts. One generator per query stream; aliases are unique
/// within a generator's lifetime.
pub struct Generator<'a> {
    pub rng: Rng,
    schema: &'a Schema,
    pub features: &'a Features,
    next_alias: usize,
    /// CTEs visible to the query being generated.
    ctes: Vec<Source>,
    /// Values that occur in the data, per kind: literals that select something, and
    /// `NULLIF(column, value)` that really makes NULLs.
    data_values: Vec<(Kind, String, SqlType)>,
}

/// Distinct data values kept per kind for literals.
const DATA_VALUES_PER_KIND: usize = 40;

impl<'a> Generator<'a> {
    pub fn new(rng: Rng, schema: &'a Schema, features: &'a Features) -> Generator<'a> {
        let mut data_values: Vec<(Kind, String, SqlType)> = Vec::new();
        for table in &schema.tables {
            for (index, column) in table.columns.iter().enumerate() {
                for row in &table.rows {
                    let Some(value) = row.get(index) else { continue };
                    let kind = column.ty.kind();
                    let known = data_values.iter().filter(|(k, _, _)| *k == kind).count();
                    // Not strings with a trailing blank (see `small_literal`).
                    let usable = value != "NULL" && !value.ends_with(" '");
                    if usable && known < DATA_VALUES_PER_KIND && !data_values.iter().any(|(k, v, _)| *k == kind && v == value) {
                        data_values.push((kind, value.clone(), column.ty));
                    }
                }
            }
        }
        Generator { rng, schema, features, next_alias: 0, ctes: Vec::new(), data_values }
    }

    fn alias(&mut self, prefix: &str) -> String {
        self.next_alias += 1;
        format!("{prefix}{}", self.next_alias)
    }

    // ── queries ───────────────────────────────────────────────────────────────────────

    /// A complete random query (what the differential tests run).
    pub fn query(&mut self) -> Query {
        self.ctes.clear();
        let query = self.gen_query(&[], None, TOP_ROW_BUDGET, 0, true);
        self.ctes.clear();
        query
    }

    fn gen_query(&mut self, outer: &[Source], want: Option<&[Kind]>, budget: u64, depth: u32, top: bool) -> Query {
        let mut ctes = Vec::new();
        if top && self.features.ctes && self.rng.chance(15) {
            for _ in 0..self.rng.range(1, 2) {
                let query = self.gen_query(&[], None, budget, depth + 1, false);
                let name = self.alias("w");
                let rows = estimate_rows(&query, self.schema, &self.ctes);
                let columns = query.output_types().iter().enumerate().map(|(i, ty)| (format!("c{i}"), *ty)).collect();
                self.ctes.push(Source { alias: name.clone(), columns, rows, derived: true });
                ctes.push(Cte { name, query });
            }
        }
        let (body, _) = self.gen_body(outer, want, budget, depth);
        let mut query = Query { ctes, body, order_by: Vec::new(), limit: None, offset: None };
        if self.features.order_limit && self.rng.chance(if top { 35 } else { 15 }) {
            let columns = query.output_types().len();
            let mut order: Vec<usize> = (0..columns).collect();
            for i in (1..order.len()).rev() {
                order.swap(i, self.rng.below(i + 1));
            }
            // Mostly a total order (LIMIT is then deterministic); sometimes a partial one.
            let total = !top || self.rng.chance(85);
            if !total {
                order.truncate(self.rng.range(1, columns as i64) as usize);
            }
            query.order_by =
                order.into_iter().map(|column| OrderItem { column, desc: self.rng.chance(40), nulls_first: self.rng.chance(50) }).collect();
            if total && self.rng.chance(if top { 60 } else { 100 }) {
                query.limit = Some(self.rng.range(0, 12) as u64);
                if self.rng.chance(30) {
                    query.offset = Some(self.rng.range(0, 5) as u64);
                }
            }
        }
        query
    }

    fn gen_body(&mut self, outer: &[Source], want: Option<&[Kind]>, budget: u64, depth: u32) -> (SetExpr, Vec<Kind>) {
        let select = self.gen_select(outer, want, budget, depth);
        let kinds: Vec<Kind> = select.items.iter().map(|e| e.kind()).collect();
        let mut body = SetExpr::Select(Box::new(select));
        if self.features.set_operations && self.rng.chance(20) {
            for _ in 0..self.rng.range(1, 2) {
                let right = self.gen_select(outer, Some(&kinds), budget, depth);
                let op = *self.rng.pick(&[SetOp::Union, SetOp::Union, SetOp::Intersect, SetOp::Except]);
                let all = self.rng.chance(if op == SetOp::Union { 50 } else { 30 });
                let (left, right) =
                    if self.rng.chance(80) { (body, SetExpr::Select(Box::new(right))) } else { (SetExpr::Select(Box::new(right)), body) };
                body = SetExpr::SetOp { op, all, left: Box::new(left), right: Box::new(right) };
            }
        }
        (body, kinds)
    }

    /// A SELECT; `want` fixes the kinds of its output columns (set operations).
    pub fn gen_select(&mut self, outer: &[Source], want: Option<&[Kind]>, budget: u64, depth: u32) -> Select {
        let (from, sources) = self.from_clause(budget, depth);
        let outer = if self.features.correlated_subquery { outer.to_vec() } else { Vec::new() };
        let scope = Scope { local: sources, outer, group: None };
        let filter = if self.rng.chance(50) { Some(self.predicate(&scope, depth)) } else { None };
        let shape = self.rng.weighted(&[60, if self.features.group_by { 25 } else { 0 }, if self.features.aggregates { 15 } else { 0 }]);
        let kinds: Vec<Kind> = match want {
            Some(kinds) => kinds.to_vec(),
            None => {
                let count = self.rng.range(1, 4) as usize;
                (0..count).map(|_| self.item_kind(&scope)).collect()
            }
        };
        let mut select = Select { from, filter, ..Select::default() };
        match shape {
            1 => {
                let keys = self.group_keys(&scope);
                let group_scope = Scope { group: Some(keys.clone()), ..scope.clone() };
                select.items = kinds.iter().map(|k| self.expr(&group_scope, *k, depth)).collect();
                select.group_by = keys;
                if self.features.having && self.rng.chance(30) {
                    select.having = Some(self.predicate(&group_scope, depth));
                }
            }
            2 => {
                let group_scope = Scope { group: Some(Vec::new()), ..scope.clone() };
                select.items = kinds.iter().map(|k| self.expr(&group_scope, *k, depth)).collect();
            }
            _ => select.items = kinds.iter().map(|k| self.expr(&scope, *k, depth)).collect(),
        }
        if !self.features.constant_items {
            let item_scope = match shape {
                1 => Scope { group: Some(select.group_by.clone()), ..scope.clone() },
                2 => Scope { group: Some(Vec::new()), ..scope.clone() },
                _ => scope.clone(),
            };
            select.items = std::mem::take(&mut select.items).into_iter().map(|e| self.non_constant(&item_scope, e)).collect();
        }
        select.distinct = self.features.distinct && self.rng.chance(15);
        select
    }

    /// `expr`, or a column (key, aggregate) of its kind in place of a literal.
    pub fn non_constant(&mut self, scope: &Scope, expr: Expr) -> Expr {
        if !matches!(expr.node, Node::Literal(_)) {
            return expr;
        }
        let candidates: Vec<Expr> = match &scope.group {
            Some(keys) => keys.iter().filter(|k| k.kind() == expr.kind()).cloned().collect(),
            None => scope.columns_of(expr.kind(), false),
        };
        if !candidates.is_empty() {
            return self.rng.pick(&candidates).clone();
        }
        if scope.group.is_some() && self.features.aggregates && aggregate_exists(expr.kind()) {
            return self.aggregate(&scope.row_level(), expr.kind());
        }
        expr
    }

    /// A kind for an output column: mostly one that has columns in scope.
    /// Without `constant_items`, always a kind with columns (so an item need not be a
    /// literal).
    fn item_kind(&mut self, scope: &Scope) -> Kind {
        let kinds = scope.column_kinds();
        if !kinds.is_empty() && (!self.features.constant_items || self.rng.chance(80)) {
            *self.rng.pick(&kinds)
        } else {
            *self.rng.pick(&ALL_KINDS)
        }
    }

    /// Group keys: mostly plain columns.
    pub fn group_keys(&mut self, scope: &Scope) -> Vec<Expr> {
        let count = self.rng.range(1, 3) as usize;
        let row_scope = scope.row_level();
        let mut keys: Vec<Expr> = Vec::new();
        for _ in 0..count {
            let kind = self.item_kind(&row_scope);
            // Keys with subqueries are not matched with equal select items in Apiary.
            let key = match self.rng.weighted(&[65, 15, 20]) {
                0 => self.leaf(&row_scope, kind),
                1 => self.nulled_column(&row_scope, kind),
                _ => self.expr_at(&row_scope, kind, MAX_QUERY_DEPTH, 1),
            };
            // A key without a column is a constant: `GROUP BY (- 5)` is a position in
            // PostgreSQL and DuckDB.
            if !keys.contains(&key) && key.has_column() {
                keys.push(key);
            }
        }
        if keys.is_empty() {
            if let Some(column) =
                row_scope.local.iter().flat_map(|s| s.columns.iter().map(move |(n, t)| Expr::column(&s.alias, n, *t))).next()
            {
                keys.push(column);
            }
        }
        keys
    }

    // ── FROM ──────────────────────────────────────────────────────────────────────────

    /// A FROM clause of one to four relations whose size product stays under `budget`.
    pub fn from_clause(&mut self, budget: u64, depth: u32) -> (Vec<TableRef>, Vec<Source>) {
        let relation_count = 1 + self.rng.weighted(&[35, 40, 20, 5]);
        let mut items: Vec<TableRef> = Vec::new();
        let mut all_sources: Vec<Source> = Vec::new();
        let (first, first_source) = self.source(budget, depth);
        let mut product = first_source.rows.max(1);
        let mut tree = first;
        let mut tree_sources = vec![first_source];
        let join_kinds = self.features.join_kinds();
        for _ in 1..relation_count {
            let remaining = budget / product;
            if remaining < 1 {
                break;
            }
            let (right, right_source) = self.source(remaining, depth);
            if right_source.rows.max(1) > remaining {
                break;
            }
            product *= right_source.rows.max(1);
            let comma = self.features.comma_join && (join_kinds.is_empty() || self.rng.chance(25));
            if comma || join_kinds.is_empty() {
                items.push(tree);
                all_sources.append(&mut tree_sources);
                tree = right;
                tree_sources = vec![right_source];
                continue;
            }
            let kind = *self.rng.pick(&join_kinds);
            let on = if kind == JoinKind::Cross { None } else { Some(self.join_condition(&tree_sources, &right_source, depth)) };
            tree_sources.push(right_source);
            tree = TableRef::Join { kind, left: Box::new(tree), right: Box::new(right), on };
        }
        items.push(tree);
        all_sources.append(&mut tree_sources);
        (items, all_sources)
    }

    /// One relation: a table, a CTE or a derived table.
    fn source(&mut self, budget: u64, depth: u32) -> (TableRef, Source) {
        let choice = self.rng.weighted(&[
            75,
            if self.ctes.is_empty() { 0 } else { 12 },
            if self.features.derived_tables && depth < MAX_QUERY_DEPTH { 13 } else { 0 },
        ]);
        match choice {
            1 => {
                let fitting: Vec<Source> = self.ctes.iter().filter(|c| c.rows <= budget).cloned().collect();
                if let Some(cte) = fitting.get(self.rng.below(fitting.len().max(1))).cloned() {
                    let alias = self.alias("a");
                    return (
                        TableRef::Table { name: cte.alias.clone(), alias: alias.clone() },
                        Source { alias, columns: cte.columns, rows: cte.rows, derived: true },
                    );
                }
            }
            2 => {
                let mut query = self.gen_query(&[], None, budget.min(SUBQUERY_ROW_BUDGET * 5), depth + 1, false);
                // A constant column: outer joins extend it with NULLs (vectors that are
                // constant but for their NULLs).
                if self.features.constant_items && self.rng.chance(30) {
                    let kind = *self.rng.pick(&ALL_KINDS);
                    let constant = self.literal(kind);
                    if let SetExpr::Select(select) = &mut query.body {
                        select.items.push(constant);
                    }
                }
                let rows = estimate_rows(&query, self.schema, &self.ctes).min(budget);
                let alias = self.alias("d");
                let columns = query.output_types().iter().enumerate().map(|(i, ty)| (format!("c{i}"), *ty)).collect();
                return (
                    TableRef::Derived { query: Box::new(query), alias: alias.clone() },
                    Source { alias, columns, rows, derived: true },
                );
            }
            _ => {}
        }
        let fitting: Vec<usize> = (0..self.schema.tables.len()).filter(|i| self.schema.tables[*i].rows.len() as u64 <= budget).collect();
        let index = if fitting.is_empty() {
            (0..self.schema.tables.len()).min_by_key(|i| self.schema.tables[*i].rows.len()).unwrap_or(0)
        } else {
            *self.rng.pick(&fitting)
        };
        let alias = self.alias("a");
        match self.schema.tables.get(index) {
            Some(table) => (
                TableRef::Table { name: table.name.clone(), alias: alias.clone() },
                Source {
                    alias,
                    columns: table.columns.iter().map(|c| (c.name.clone(), c.ty)).collect(),
                    rows: table.rows.len() as u64,
                    derived: false,
                },
            ),
            // An empty schema: a one-row derived table.
            None => {
                let select = Select { items: vec![Expr::literal(SqlType::Integer, "1")], ..Select::default() };
                let columns = vec![("c0".to_string(), SqlType::Integer)];
                (
                    TableRef::Derived { query: Box::new(Query::select(select)), alias: alias.clone() },
                    Source { alias, columns, rows: 1, derived: true },
                )
            }
        }
    }

    /// An ON condition between the relations joined so far and `right`.
    fn join_condition(&mut self, left: &[Source], right: &Source, depth: u32) -> Expr {
        let scope = Scope { local: left.iter().cloned().chain([right.clone()]).collect(), outer: Vec::new(), group: None };
        let choice = self.rng.weighted(&[
            60,
            if self.features.non_equi_join { 12 } else { 0 },
            if self.features.constant_join { 6 } else { 0 },
            if self.features.non_equi_join { 12 } else { 0 },
        ]);
        match choice {
            2 => {
                let text = *self.rng.pick(&["TRUE", "FALSE", "(1 = 0)", "(1 = 1)", "(NULL IS NULL)"]);
                Expr::literal(SqlType::Boolean, text)
            }
            // Subqueries in ON are not implemented in Apiary: rarely.
            3 => {
                let depth = if self.rng.chance(20) { depth } else { MAX_QUERY_DEPTH };
                self.predicate(&scope, depth)
            }
            _ => {
                let op = if choice == 1 { *self.rng.pick(&["<", "<=", "<>", ">"]) } else { "=" };
                let right_scope = Scope::rows(vec![right.clone()]);
                let left_scope = Scope::rows(left.to_vec());
                let condition = match self.shared_kind(&left_scope, &right_scope) {
                    Some((l, r)) => {
                        let l = self.leaf(&left_scope, l);
                        let r = self.leaf(&right_scope, r);
                        Expr::binary(l, op, r, SqlType::Boolean)
                    }
                    None => self.predicate(&scope, MAX_QUERY_DEPTH),
                };
                if self.rng.chance(20) {
                    let extra = self.predicate(&scope, MAX_QUERY_DEPTH);
                    condition.and(extra)
                } else {
                    condition
                }
            }
        }
    }

    /// Kinds of one column on each side that compare with each other.
    fn shared_kind(&mut self, left: &Scope, right: &Scope) -> Option<(Kind, Kind)> {
        let left_kinds = left.column_kinds();
        let right_kinds = right.column_kinds();
        let mut pairs = Vec::new();
        for l in &left_kinds {
            for r in &right_kinds {
                if l.class() == r.class() && *l != Kind::Bool {
                    // Same kinds twice as likely: those make equi-joins on like columns.
                    pairs.push((*l, *r));
                    if l == r {
                        pairs.push((*l, *r));
                    }
                }
            }
        }
        if pairs.is_empty() {
            None
        } else {
            Some(*self.rng.pick(&pairs))
        }
    }

    // ── expressions ───────────────────────────────────────────────────────────────────

    /// A boolean expression (WHERE, HAVING, ON, oracle predicates).
    pub fn predicate(&mut self, scope: &Scope, depth: u32) -> Expr {
        self.expr_at(scope, Kind::Bool, depth, 0)
    }

    /// An expression of `kind`.
    pub fn expr(&mut self, scope: &Scope, kind: Kind, depth: u32) -> Expr {
        self.expr_at(scope, kind, depth, 1)
    }

    /// `query_depth`: nesting of subqueries; `level`: nesting of operators.
    fn expr_at(&mut self, scope: &Scope, kind: Kind, query_depth: u32, level: u32) -> Expr {
        if level >= MAX_EXPR_DEPTH || (level > 0 && self.rng.chance(35 + 10 * level)) {
            return self.leaf(scope, kind);
        }
        let next = level + 1;
        let subqueries = query_depth < MAX_QUERY_DEPTH && (scope.group.is_none() || self.rng.chance(30));
        let common = self.rng.weighted(&[
            70,
            8,                                                                       // CASE
            4,                                                                       // COALESCE
            if self.features.nullif { 3 } else { 0 },                                // NULLIF
            if kind.has_min_max() && self.features.greatest_least { 2 } else { 0 },  // greatest/least
            if self.features.scalar_subquery && subqueries { 5 } else { 0 },         // scalar subquery
            if self.features.untaken_errors && kind == Kind::Float { 4 } else { 0 }, // untaken 1/0
        ]);
        match common {
            1 => return self.case_expr(scope, kind, query_depth, next),
            2 => {
                let count = self.rng.range(2, 3) as usize;
                let args: Vec<Expr> = (0..count).map(|_| self.expr_at(scope, kind, query_depth, next)).collect();
                let ty = args[0].ty;
                return Expr::function("COALESCE", args, ty);
            }
            3 => {
                let a = self.expr_at(scope, kind, query_depth, next);
                let b = if self.rng.chance(60) { self.literal(kind) } else { self.expr_at(scope, kind, query_depth, next) };
                let ty = a.ty;
                return Expr::function("NULLIF", vec![a, b], ty);
            }
            4 => {
                let name = if self.rng.chance(50) { "greatest" } else { "least" };
                let a = self.expr_at(scope, kind, query_depth, next);
                let b = self.expr_at(scope, kind, query_depth, next);
                let ty = a.ty;
                return Expr::function(name, vec![a, b], ty);
            }
            5 => return self.scalar_subquery(scope, kind, query_depth),
            6 => return self.untaken_error(scope, kind, query_depth, next),
            _ => {}
        }
        match kind {
            Kind::Bool => self.bool_expr(scope, query_depth, next, subqueries),
            Kind::Int => self.int_expr(scope, query_depth, next),
            Kind::Float => self.float_expr(scope, query_depth, next),
            Kind::Decimal => self.decimal_expr(scope, query_depth, next),
            Kind::Str => self.string_expr(scope, query_depth, next),
            Kind::Date | Kind::Timestamp => self.temporal_expr(scope, kind, query_depth, next),
            Kind::Interval => self.interval_expr(scope, query_depth, next),
        }
    }

    /// A column, a key or aggregate (grouped), or a literal.
    pub fn leaf(&mut self, scope: &Scope, kind: Kind) -> Expr {
        if let Some(keys) = &scope.group {
            let matching: Vec<Expr> = keys.iter().filter(|k| k.kind() == kind).cloned().collect();
            let choice = self.rng.weighted(&[
                if matching.is_empty() { 0 } else { 45 },
                if self.features.aggregates && aggregate_exists(kind) { 45 } else { 0 },
                10,
            ]);
            return match choice {
                0 => self.rng.pick(&matching).clone(),
                1 => self.aggregate(&scope.row_level(), kind),
                _ => self.literal(kind),
            };
        }
        let local = scope.columns_of(kind, false);
        let outer = scope.columns_of(kind, true);
        let choice = self.rng.weighted(&[if local.is_empty() { 0 } else { 70 }, if outer.is_empty() { 0 } else { 25 }, 25]);
        match choice {
            0 => self.rng.pick(&local).clone(),
            1 => self.rng.pick(&outer).clone(),
            _ => self.literal(kind),
        }
    }

    /// `NULLIF(column, value)` with a value of the data: NULLs that come from values (their
    /// slots hold the value), next to the column's own NULLs.
    pub fn nulled_column(&mut self, scope: &Scope, kind: Kind) -> Expr {
        let column = self.leaf(scope, kind);
        if !self.features.nullif {
            return column;
        }
        let value = self.literal(kind);
        let ty = column.ty;
        Expr::function("NULLIF", vec![column, value], ty)
    }

    /// A literal, sometimes a typed NULL.
    pub fn literal(&mut self, kind: Kind) -> Expr {
        if self.rng.chance(10) {
            let ty = kind.default_type();
            return Expr::literal(ty, typed_null(ty));
        }
        if self.rng.chance(40) {
            let values: Vec<&(Kind, String, SqlType)> = self.data_values.iter().filter(|(k, _, _)| *k == kind).collect();
            if !values.is_empty() {
                let (_, text, ty) = values[self.rng.below(values.len())];
                return Expr::literal(*ty, text.clone());
            }
        }
        let (text, ty) = small_literal(&mut self.rng, kind);
        Expr::literal(ty, text)
    }

    /// A comparison operand: an expression, sometimes a bare NULL.
    fn operand(&mut self, scope: &Scope, kind: Kind, query_depth: u32, level: u32) -> Expr {
        let allowed = kind != Kind::Interval || self.features.interval_untyped_null;
        if self.features.untyped_null && allowed && self.rng.chance(4) {
            return Expr::literal(kind.default_type(), "NULL");
        }
        self.expr_at(scope, kind, query_depth, level)
    }

    /// A class to compare in, preferring classes with columns in scope.
    fn compare_class(&mut self, scope: &Scope) -> Class {
        let kinds = scope.column_kinds();
        if !kinds.is_empty() && self.rng.chance(85) {
            self.rng.pick(&kinds).class()
        } else {
            *self.rng.pick(&[Class::Numeric, Class::Numeric, Class::Str, Class::Temporal, Class::Interval, Class::Bool])
        }
    }

    /// A kind of `class`, preferring kinds with columns in scope.
    fn kind_in(&mut self, scope: &Scope, class: Class) -> Kind {
        let present: Vec<Kind> = scope.column_kinds().into_iter().filter(|k| k.class() == class).collect();
        if !present.is_empty() && self.rng.chance(80) {
            *self.rng.pick(&present)
        } else {
            *self.rng.pick(class.kinds())
        }
    }

    fn bool_expr(&mut self, scope: &Scope, qd: u32, level: u32, subqueries: bool) -> Expr {
        let f = self.features;
        let choice = self.rng.weighted(&[
            25,                                                  // comparison
            15,                                                  // AND / OR
            5,                                                   // NOT
            8,                                                   // IS [NOT] NULL
            6,                                                   // IS [NOT] DISTINCT FROM
            5,                                                   // BETWEEN
            6,                                                   // IN list
            4,                                                   // LIKE
            3,                                                   // IS TRUE / FALSE
            if f.exists_subquery && subqueries { 5 } else { 0 }, // EXISTS
            if f.in_subquery && subqueries { 5 } else { 0 },     // IN (subquery)
            6,                                                   // leaf
        ]);
        match choice {
            0 => {
                let class = self.compare_class(scope);
                let (l, r) = (self.kind_in(scope, class), self.kind_in(scope, class));
                let left = self.operand(scope, l, qd, level);
                let right = self.operand(scope, r, qd, level);
                let op = *self.rng.pick(&["=", "<>", "<", "<=", ">", ">="]);
                Expr::binary(left, op, right, SqlType::Boolean)
            }
            1 => {
                let a = self.expr_at(scope, Kind::Bool, qd, level);
                let b = self.expr_at(scope, Kind::Bool, qd, level);
                Expr::binary(a, if self.rng.chance(50) { "AND" } else { "OR" }, b, SqlType::Boolean)
            }
            2 => self.expr_at(scope, Kind::Bool, qd, level).negate(),
            3 => {
                let kind = self.any_kind(scope);
                let arg = self.expr_at(scope, kind, qd, level);
                Expr::suffix(arg, if self.rng.chance(50) { "IS NULL" } else { "IS NOT NULL" })
            }
            4 => {
                let class = self.compare_class(scope);
                let (l, r) = (self.kind_in(scope, class), self.kind_in(scope, class));
                let left = self.operand(scope, l, qd, level);
                let right = self.operand(scope, r, qd, level);
                let op = if self.rng.chance(50) { "IS DISTINCT FROM" } else { "IS NOT DISTINCT FROM" };
                Expr::binary(left, op, right, SqlType::Boolean)
            }
            5 => {
                let class = self.compare_class(scope);
                let kinds = [self.kind_in(scope, class), self.kind_in(scope, class), self.kind_in(scope, class)];
                let arg = self.expr_at(scope, kinds[0], qd, level);
                let low = self.operand(scope, kinds[1], qd, level);
                let high = self.operand(scope, kinds[2], qd, level);
                Expr::new(
                    SqlType::Boolean,
                    Node::Between { arg: Box::new(arg), low: Box::new(low), high: Box::new(high), negated: self.rng.chance(30) },
                )
            }
            6 => {
                let class = self.compare_class(scope);
                let kind = self.kind_in(scope, class);
                let arg = self.expr_at(scope, kind, qd, level);
                let count = self.rng.range(1, 4) as usize;
                let list = (0..count)
                    .map(|index| {
                        let k = self.kind_in(scope, class);
                        let item = if self.rng.chance(60) { self.literal(k) } else { self.operand(scope, k, qd, level + 1) };
                        if index == 0 && !self.features.in_list_subquery_first && matches!(item.node, Node::ScalarSubquery(_)) {
                            self.literal(k)
                        } else {
                            item
                        }
                    })
                    .collect();
                Expr::new(SqlType::Boolean, Node::InList { arg: Box::new(arg), list, negated: self.rng.chance(35) })
            }
            7 => {
                let arg = self.expr_at(scope, Kind::Str, qd, level);
                let pattern = if self.rng.chance(85) {
                    Expr::literal(SqlType::Varchar, string_literal(self.rng.pick(PATTERNS)))
                } else {
                    self.expr_at(scope, Kind::Str, qd, level + 1)
                };
                Expr::new(SqlType::Boolean, Node::Like { arg: Box::new(arg), pattern: Box::new(pattern), negated: self.rng.chance(30) })
            }
            8 => {
                let arg = self.expr_at(scope, Kind::Bool, qd, level);
                const TRUTH_TESTS: [&str; 4] = ["IS TRUE", "IS FALSE", "IS NOT TRUE", "IS NOT FALSE"];
                Expr::suffix(arg, TRUTH_TESTS[self.rng.below(TRUTH_TESTS.len())])
            }
            9 => {
                let query = self.subquery(scope, None, qd);
                Expr::new(SqlType::Boolean, Node::Exists { query: Box::new(query), negated: self.rng.chance(40) })
            }
            10 => {
                let class = self.compare_class(scope);
                let kind = self.kind_in(scope, class);
                let arg = if self.features.constant_in_subquery && self.rng.chance(20) {
                    self.literal(kind)
                } else {
                    self.expr_at(scope, kind, qd, level)
                };
                let inner_kind = self.kind_in(scope, class);
                let query = self.subquery(scope, Some(inner_kind), qd);
                Expr::new(SqlType::Boolean, Node::InSubquery { arg: Box::new(arg), query: Box::new(query), negated: self.rng.chance(40) })
            }
            _ => self.leaf(scope, Kind::Bool),
        }
    }

    fn any_kind(&mut self, scope: &Scope) -> Kind {
        let class = self.compare_class(scope);
        self.kind_in(scope, class)
    }

    /// An integer operand that cannot make `+ - *` overflow: `(e % 100)` unless `e` is a
    /// small literal.
    fn bounded_int(&mut self, scope: &Scope, qd: u32, level: u32) -> Expr {
        let e = self.expr_at(scope, Kind::Int, qd, level);
        if let Node::Literal(text) = &e.node {
            if text.trim_matches(|c| c == '(' || c == ')').parse::<i64>().is_ok_and(|v| v.unsigned_abs() <= 100) {
                return e;
            }
        }
        let ty = e.ty;
        Expr::binary(e, "%", Expr::literal(SqlType::Integer, "100"), ty)
    }

    fn int_expr(&mut self, scope: &Scope, qd: u32, level: u32) -> Expr {
        let f = self.features;
        let choice = self.rng.weighted(&[
            10,                                       // + -
            5,                                        // * constant
            4,                                        // % constant
            2,                                        // unary minus
            2,                                        // abs
            if f.string_functions { 3 } else { 0 },   // length
            if f.temporal_functions { 3 } else { 0 }, // date - date, date_part
            if f.casts { 3 } else { 0 },              // CAST
            2,                                        // sign
            8,                                        // leaf
        ]);
        match choice {
            0 => {
                let a = self.bounded_int(scope, qd, level);
                let b = self.bounded_int(scope, qd, level);
                let ty = wider_int(a.ty, b.ty);
                Expr::binary(a, if self.rng.chance(50) { "+" } else { "-" }, b, ty)
            }
            1 => {
                let a = self.bounded_int(scope, qd, level);
                let k = self.rng.range(-9, 9);
                let ty = wider_int(a.ty, SqlType::Integer);
                Expr::binary(a, "*", Expr::literal(SqlType::Integer, paren(k)), ty)
            }
            2 => {
                let a = self.expr_at(scope, Kind::Int, qd, level);
                let k = *self.rng.pick(&[1, 2, 3, 7, 10, -3]);
                let ty = a.ty;
                Expr::binary(a, "%", Expr::literal(SqlType::Integer, paren(k)), ty)
            }
            3 => {
                let a = self.bounded_int(scope, qd, level);
                let ty = a.ty;
                Expr::prefix("-", a, ty)
            }
            4 => {
                let a = self.bounded_int(scope, qd, level);
                let ty = a.ty;
                Expr::function("abs", vec![a], ty)
            }
            5 => {
                let s = self.expr_at(scope, Kind::Str, qd, level);
                Expr::function("length", vec![s], SqlType::Integer)
            }
            6 => {
                if self.rng.chance(50) {
                    let a = self.expr_at(scope, Kind::Date, qd, level);
                    let b = self.expr_at(scope, Kind::Date, qd, level);
                    Expr::binary(a, "-", b, SqlType::Integer)
                } else {
                    let part = *self.rng.pick(&["'year'", "'month'", "'day'"]);
                    let kind = if self.rng.chance(50) { Kind::Date } else { Kind::Timestamp };
                    let d = self.expr_at(scope, kind, qd, level);
                    Expr::function("date_part", vec![Expr::literal(SqlType::Varchar, part), d], SqlType::Integer)
                }
            }
            7 => {
                let target = *self.rng.pick(&[SqlType::SmallInt, SqlType::Integer, SqlType::BigInt]);
                let source = *self.rng.pick(&[Kind::Int, Kind::Decimal, Kind::Float]);
                let arg = if source == Kind::Int {
                    self.bounded_int(scope, qd, level)
                } else {
                    // Non-integers are cast only from small values (no overflow): `% 100`
                    // does not apply to doubles in PostgreSQL, so go through a CASE.
                    let e = self.expr_at(scope, source, qd, level);
                    let ty = e.ty;
                    let small = Expr::new(
                        SqlType::Boolean,
                        Node::Between {
                            arg: Box::new(e.clone()),
                            low: Box::new(Expr::literal(SqlType::Integer, "(-1000)")),
                            high: Box::new(Expr::literal(SqlType::Integer, "1000")),
                            negated: false,
                        },
                    );
                    Expr::new(ty, Node::Case { operand: None, whens: vec![(small, e)], otherwise: None })
                };
                Expr::new(target, Node::Cast(Box::new(arg), target))
            }
            8 => {
                let a = self.expr_at(scope, Kind::Int, qd, level);
                Expr::function("sign", vec![a], SqlType::Integer)
            }
            _ => self.leaf(scope, Kind::Int),
        }
    }

    fn float_expr(&mut self, scope: &Scope, qd: u32, level: u32) -> Expr {
        let choice = self.rng.weighted(&[10, 4, 4, 3, 2, 8]);
        match choice {
            0 => {
                let a = self.expr_at(scope, Kind::Float, qd, level);
                let other = *self.rng.pick(&[Kind::Float, Kind::Float, Kind::Int, Kind::Decimal]);
                let b = self.expr_at(scope, other, qd, level);
                let op = *self.rng.pick(&["+", "-", "*"]);
                let ty = if a.ty == SqlType::Real && b.ty == SqlType::Real { SqlType::Real } else { SqlType::Double };
                if self.rng.chance(50) {
                    Expr::binary(a, op, b, ty)
                } else {
                    Expr::binary(b, op, a, ty)
                }
            }
            1 => {
                // Division only of doubles (integer division differs between engines), never
                // by zero (an error in PostgreSQL, NULL or infinity elsewhere).
                let a = self.as_double(scope, qd, level);
                let b = self.as_double(scope, qd, level);
                let divisor = Expr::function("NULLIF", vec![b, Expr::literal(SqlType::Double, "CAST(0 AS DOUBLE)")], SqlType::Double);
                Expr::binary(a, "/", divisor, SqlType::Double)
            }
            2 if self.features.casts => self.as_double(scope, qd, level),
            3 => {
                let a = self.expr_at(scope, Kind::Float, qd, level);
                let ty = a.ty;
                let name = *self.rng.pick(&["abs", "ceil", "floor", "sign"]);
                Expr::function(name, vec![a], ty)
            }
            4 => {
                let a = self.expr_at(scope, Kind::Float, qd, level);
                let ty = a.ty;
                Expr::prefix("-", a, ty)
            }
            _ => self.leaf(scope, Kind::Float),
        }
    }

    /// `CAST(<numeric> AS DOUBLE)`.
    fn as_double(&mut self, scope: &Scope, qd: u32, level: u32) -> Expr {
        let kind = *self.rng.pick(&[Kind::Int, Kind::Float, Kind::Decimal]);
        let e = self.expr_at(scope, kind, qd, level);
        if e.ty == SqlType::Double {
            return e;
        }
        Expr::new(SqlType::Double, Node::Cast(Box::new(e), SqlType::Double))
    }

    fn decimal_expr(&mut self, scope: &Scope, qd: u32, level: u32) -> Expr {
        let choice = self.rng.weighted(&[10, 4, 4, 3, 3, if self.features.casts { 3 } else { 0 }, 8]);
        match choice {
            0 => {
                let a = self.expr_at(scope, Kind::Decimal, qd, level);
                let b =
                    if self.rng.chance(70) { self.expr_at(scope, Kind::Decimal, qd, level) } else { self.bounded_int(scope, qd, level) };
                let ty = wider_decimal(a.ty, b.ty);
                let op = if self.rng.chance(50) { "+" } else { "-" };
                Expr::binary(a, op, b, ty)
            }
            1 => {
                // A BIGINT factor: DuckDB multiplies DECIMAL(18,s) by an INTEGER in 64 bits
                // and overflows where PostgreSQL does not.
                let a = self.expr_at(scope, Kind::Decimal, qd, level);
                let k = self.rng.range(-9, 9);
                let ty = wider_decimal(a.ty, a.ty);
                Expr::binary(a, "*", Expr::literal(SqlType::BigInt, format!("CAST({} AS BIGINT)", paren(k))), ty)
            }
            2 => {
                let a = self.expr_at(scope, Kind::Decimal, qd, level);
                let ty = a.ty;
                Expr::function("abs", vec![a], ty)
            }
            3 => {
                let a = self.expr_at(scope, Kind::Decimal, qd, level);
                let name = if self.rng.chance(50) { "ceil" } else { "floor" };
                Expr::function(name, vec![a], SqlType::Decimal(38, 0))
            }
            4 => {
                let a = self.expr_at(scope, Kind::Decimal, qd, level);
                let places = self.rng.range(0, 2);
                let ty = a.ty;
                Expr::function("round", vec![a, Expr::literal(SqlType::Integer, places.to_string())], ty)
            }
            5 => {
                let a = self.bounded_int(scope, qd, level);
                let target = *self.rng.pick(&[SqlType::Decimal(9, 2), SqlType::Decimal(18, 4), SqlType::Decimal(5, 1)]);
                Expr::new(target, Node::Cast(Box::new(a), target))
            }
            _ => self.leaf(scope, Kind::Decimal),
        }
    }

    fn string_expr(&mut self, scope: &Scope, qd: u32, level: u32) -> Expr {
        let f = self.features;
        let choice = self.rng.weighted(&[
            if f.string_functions { 12 } else { 0 },
            5, // ||
            if f.casts { 4 } else { 0 },
            10,
        ]);
        match choice {
            0 => {
                let s = self.expr_at(scope, Kind::Str, qd, level);
                match self.rng.below(6) {
                    0 => Expr::function(if self.rng.chance(50) { "upper" } else { "lower" }, vec![s], SqlType::Varchar),
                    1 => Expr::function("trim", vec![s], SqlType::Varchar),
                    2 => {
                        let from = Expr::literal(SqlType::Varchar, string_literal(self.rng.pick(&["a", "b", " ", "é", "ab"])));
                        let to = Expr::literal(SqlType::Varchar, string_literal(self.rng.pick(&["", "x", "AB", "%"])));
                        Expr::function("replace", vec![s, from, to], SqlType::Varchar)
                    }
                    3 => {
                        let start = Expr::literal(SqlType::Integer, self.rng.range(1, 3).to_string());
                        let length = Expr::literal(SqlType::Integer, self.rng.range(0, 3).to_string());
                        Expr::function("substring", vec![s, start, length], SqlType::Varchar)
                    }
                    _ => {
                        let t = self.expr_at(scope, Kind::Str, qd, level);
                        Expr::function("concat", vec![s, t], SqlType::Varchar)
                    }
                }
            }
            1 => {
                let a = self.expr_at(scope, Kind::Str, qd, level);
                let b = self.expr_at(scope, Kind::Str, qd, level);
                Expr::binary(a, "||", b, SqlType::Varchar)
            }
            2 => {
                // Casts whose text is the same in every engine (not DECIMAL: its digits after
                // the point follow the type's scale, which engines infer differently).
                let kind = *self.rng.pick(&[Kind::Int, Kind::Date, Kind::Timestamp, Kind::Bool]);
                let a = if kind == Kind::Int { self.bounded_int(scope, qd, level) } else { self.expr_at(scope, kind, qd, level) };
                Expr::new(SqlType::Varchar, Node::Cast(Box::new(a), SqlType::Varchar))
            }
            _ => self.leaf(scope, Kind::Str),
        }
    }

    fn temporal_expr(&mut self, scope: &Scope, kind: Kind, qd: u32, level: u32) -> Expr {
        if !self.features.temporal_functions || self.rng.chance(45) {
            return self.leaf(scope, kind);
        }
        if kind == Kind::Date {
            return match self.rng.below(3) {
                0 if self.features.casts => {
                    let ts = self.expr_at(scope, Kind::Timestamp, qd, level);
                    Expr::new(SqlType::Date, Node::Cast(Box::new(ts), SqlType::Date))
                }
                _ => {
                    // DATE ± INTEGER (PostgreSQL and DuckDB have no DATE + BIGINT).
                    let d = self.expr_at(scope, Kind::Date, qd, level);
                    let n = self.bounded_int(scope, qd, level);
                    let n = Expr::new(SqlType::Integer, Node::Cast(Box::new(n), SqlType::Integer));
                    Expr::binary(d, if self.rng.chance(50) { "+" } else { "-" }, n, SqlType::Date)
                }
            };
        }
        match self.rng.below(4) {
            0 => {
                let base = if self.rng.chance(50) { Kind::Date } else { Kind::Timestamp };
                let t = self.expr_at(scope, base, qd, level);
                let i = self.expr_at(scope, Kind::Interval, qd, level);
                Expr::binary(t, if self.rng.chance(60) { "+" } else { "-" }, i, SqlType::Timestamp)
            }
            2 if self.features.date_trunc => {
                let part = *self.rng.pick(&["'year'", "'month'", "'day'"]);
                let t = self.expr_at(scope, Kind::Timestamp, qd, level);
                Expr::function("date_trunc", vec![Expr::literal(SqlType::Varchar, part), t], SqlType::Timestamp)
            }
            _ if self.features.casts => {
                let d = self.expr_at(scope, Kind::Date, qd, level);
                Expr::new(SqlType::Timestamp, Node::Cast(Box::new(d), SqlType::Timestamp))
            }
            _ => {
                let t = self.expr_at(scope, Kind::Timestamp, qd, level);
                let i = self.expr_at(scope, Kind::Interval, qd, level);
                Expr::binary(t, "+", i, SqlType::Timestamp)
            }
        }
    }

    fn interval_expr(&mut self, scope: &Scope, qd: u32, level: u32) -> Expr {
        if !self.features.temporal_functions || self.rng.chance(45) {
            return self.leaf(scope, Kind::Interval);
        }
        match self.rng.below(3) {
            0 => {
                let a = self.expr_at(scope, Kind::Timestamp, qd, level);
                let b = self.expr_at(scope, Kind::Timestamp, qd, level);
                Expr::binary(a, "-", b, SqlType::Interval)
            }
            1 => {
                let a = self.expr_at(scope, Kind::Interval, qd, level);
                let b = self.expr_at(scope, Kind::Interval, qd, level);
                Expr::binary(a, if self.rng.chance(50) { "+" } else { "-" }, b, SqlType::Interval)
            }
            _ => {
                let a = self.expr_at(scope, Kind::Interval, qd, level);
                let k = self.rng.range(-3, 5);
                Expr::binary(a, "*", Expr::literal(SqlType::Integer, paren(k)), SqlType::Interval)
            }
        }
    }

    fn case_expr(&mut self, scope: &Scope, kind: Kind, qd: u32, level: u32) -> Expr {
        let simple = self.rng.chance(25);
        let operand_kind = self.any_kind(scope);
        let operand = if simple { Some(Box::new(self.expr_at(scope, operand_kind, qd, level))) } else { None };
        let count = self.rng.range(1, 3) as usize;
        let mut whens = Vec::with_capacity(count);
        for _ in 0..count {
            let when = if simple { self.literal(operand_kind) } else { self.expr_at(scope, Kind::Bool, qd, level) };
            let then = self.expr_at(scope, kind, qd, level);
            whens.push((when, then));
        }
        let otherwise = if self.rng.chance(70) { Some(Box::new(self.expr_at(scope, kind, qd, level))) } else { None };
        let ty = whens[0].1.ty;
        Expr::new(ty, Node::Case { operand, whens, otherwise })
    }

    /// A numeric expression with a branch that would divide by zero but is never taken.
    fn untaken_error(&mut self, scope: &Scope, kind: Kind, qd: u32, level: u32) -> Expr {
        let e = self.expr_at(scope, kind, qd, level);
        let ty = e.ty;
        // Only where a DOUBLE is wanted: DuckDB's `/` on integers is a DOUBLE (infinity for
        // `1 / 0`), which would change an INTEGER or DECIMAL CASE's type, and a cast of it
        // back to INTEGER fails in DuckDB's constant folding.
        let boom = Expr::binary(Expr::literal(SqlType::Integer, "1"), "/", Expr::literal(SqlType::Integer, "0"), SqlType::Integer);
        if self.rng.chance(50) {
            let never = Expr::literal(SqlType::Boolean, *self.rng.pick(&["FALSE", "(1 = 0)", "(NULL IS NOT NULL)"]));
            Expr::new(ty, Node::Case { operand: None, whens: vec![(never, boom)], otherwise: Some(Box::new(e)) })
        } else {
            let (text, literal_ty) = small_literal(&mut self.rng, kind);
            Expr::function("COALESCE", vec![Expr::literal(literal_ty, text), boom, e], ty)
        }
    }

    /// An aggregate of a row-level expression that returns `kind`. Arguments use only the
    /// query's own relations: an aggregate of outer columns belongs to the outer query.
    pub fn aggregate(&mut self, row_scope: &Scope, kind: Kind) -> Expr {
        let distinct = self.features.distinct_aggregates && self.rng.chance(15);
        // A bare NULL argument: the aggregate's type is then a guess (PostgreSQL refuses
        // it, DuckDB and Apiary take an INTEGER NULL): only where a number is wanted.
        let bare_null = self.features.untyped_null && kind.is_numeric() && self.rng.chance(3);
        let own = Scope::rows(row_scope.local.clone());
        let arg_of = |g: &mut Self, k: Kind| {
            if bare_null {
                Expr::literal(k.default_type(), "NULL")
            } else {
                g.expr_at(&own, k, MAX_QUERY_DEPTH, 1)
            }
        };
        match kind {
            Kind::Int => {
                if self.rng.chance(60) {
                    if self.rng.chance(50) {
                        return Expr::aggregate("count", false, None, SqlType::BigInt);
                    }
                    let k = *self.rng.pick(&ALL_KINDS);
                    let arg = arg_of(self, k);
                    return Expr::aggregate("count", distinct, Some(arg), SqlType::BigInt);
                }
                let name = if self.rng.chance(50) { "min" } else { "max" };
                let arg = arg_of(self, Kind::Int);
                let ty = arg.ty;
                Expr::aggregate(name, distinct, Some(arg), ty)
            }
            Kind::Float => {
                let name = *self.rng.pick(&["sum", "avg", "min", "max", "avg"]);
                let source = if name == "avg" { *self.rng.pick(&[Kind::Int, Kind::Float]) } else { Kind::Float };
                let arg = arg_of(self, source);
                Expr::aggregate(name, distinct, Some(arg), SqlType::Double)
            }
            Kind::Decimal => {
                // sum of integers is NUMERIC in PostgreSQL (DECIMAL(38,0) in Apiary).
                let name = *self.rng.pick(&["sum", "sum", "min", "max"]);
                let source = if name == "sum" && self.rng.chance(50) { Kind::Int } else { Kind::Decimal };
                let arg = arg_of(self, source);
                let ty = if source == Kind::Int { SqlType::Decimal(38, 0) } else { arg.ty };
                Expr::aggregate(name, distinct, Some(arg), ty)
            }
            Kind::Bool => {
                let name = if self.rng.chance(50) { "bool_and" } else { "bool_or" };
                let arg = arg_of(self, Kind::Bool);
                Expr::aggregate(name, false, Some(arg), SqlType::Boolean)
            }
            Kind::Str | Kind::Date | Kind::Timestamp => {
                let name = if self.rng.chance(50) { "min" } else { "max" };
                let arg = arg_of(self, kind);
                let ty = arg.ty;
                Expr::aggregate(name, distinct, Some(arg), ty)
            }
            Kind::Interval => self.literal(Kind::Interval),
        }
    }

    // ── subqueries ────────────────────────────────────────────────────────────────────

    /// A subquery for EXISTS (`item` None: any columns) or IN (one column of `item`).
    fn subquery(&mut self, scope: &Scope, item: Option<Kind>, qd: u32) -> Query {
        let (from, sources) = self.from_clause(SUBQUERY_ROW_BUDGET, qd + 1);
        let inner = self.inner_scope(scope, sources);
        let filter = self.correlated_filter(&inner, qd + 1);
        // Outer references in a subquery's select list are not implemented in Apiary: rare.
        let item_scope = self.item_scope(&inner);
        let items = match item {
            Some(kind) => vec![self.expr(&item_scope, kind, qd + 1)],
            None => {
                let kind = self.item_kind(&item_scope);
                vec![self.leaf(&item_scope, kind)]
            }
        };
        let select = Select { items, from, filter, distinct: self.features.distinct && self.rng.chance(10), ..Select::default() };
        Query::select(select)
    }

    /// The scope of a subquery's select list: outer columns rarely (not implemented in
    /// Apiary).
    fn item_scope(&mut self, inner: &Scope) -> Scope {
        if self.features.outer_reference_items && self.rng.chance(10) {
            inner.clone()
        } else {
            Scope::rows(inner.local.clone())
        }
    }

    /// The scope inside a subquery: its relations, and the enclosing ones when correlation
    /// is on.
    fn inner_scope(&self, scope: &Scope, sources: Vec<Source>) -> Scope {
        let outer = if self.features.correlated_subquery && scope.group.is_none() {
            scope
                .local
                .iter()
                .chain(scope.outer.iter())
                .filter(|s| self.features.correlated_derived_columns || !s.derived)
                .cloned()
                .collect()
        } else {
            Vec::new()
        };
        Scope { local: sources, outer, group: None }
    }

    /// A subquery's WHERE: often a correlation `inner = outer` and more.
    fn correlated_filter(&mut self, inner: &Scope, qd: u32) -> Option<Expr> {
        let correlation = if !inner.outer.is_empty() && self.rng.chance(60) {
            let local = Scope::rows(inner.local.clone());
            let outer = Scope::rows(inner.outer.clone());
            self.shared_kind(&local, &outer).map(|(l, o)| {
                let l = self.leaf(&local, l);
                let o = self.leaf(&outer, o);
                let op = if self.rng.chance(75) { "=" } else { *self.rng.pick(&["<", ">=", "<>"]) };
                Expr::binary(l, op, o, SqlType::Boolean)
            })
        } else {
            None
        };
        let extra = if self.rng.chance(50) { Some(self.predicate(inner, qd)) } else { None };
        match (correlation, extra) {
            (Some(c), Some(e)) => Some(c.and(e)),
            (c, e) => c.or(e),
        }
    }

    fn scalar_subquery(&mut self, scope: &Scope, kind: Kind, qd: u32) -> Expr {
        let (from, sources) = self.from_clause(SUBQUERY_ROW_BUDGET, qd + 1);
        let inner = self.inner_scope(scope, sources);
        let filter = self.correlated_filter(&inner, qd + 1);
        // Correlated subqueries with LIMIT are not implemented in Apiary: rare.
        let limit_percent = if inner.outer.is_empty() { 20 } else { 5 };
        let limit_form = self.features.order_limit && (kind == Kind::Interval || self.rng.chance(limit_percent));
        let mut query = if limit_form {
            let item_scope = self.item_scope(&inner);
            let item = self.expr(&item_scope, kind, qd + 1);
            let mut q = Query::select(Select { items: vec![item], from, filter, ..Select::default() });
            q.order_by = vec![OrderItem { column: 0, desc: self.rng.chance(50), nulls_first: self.rng.chance(50) }];
            q.limit = Some(1);
            q
        } else {
            let group = Scope { group: Some(Vec::new()), ..inner.clone() };
            let item = if kind == Kind::Interval { self.literal(kind) } else { self.aggregate(&group.row_level(), kind) };
            Query::select(Select { items: vec![item], from, filter, ..Select::default() })
        };
        if let SetExpr::Select(select) = &mut query.body {
            if select.items.is_empty() {
                select.items.push(self.literal(kind));
            }
        }
        let ty = query.output_types().first().copied().unwrap_or(kind.default_type());
        Expr::new(ty, Node::ScalarSubquery(Box::new(query)))
    }
}

/// Whether an aggregate returns values of `kind`.
fn aggregate_exists(kind: Kind) -> bool {
    kind != Kind::Interval
}

fn paren(value: i64) -> String {
    if value < 0 {
        format!("({value})")
    } else {
        value.to_string()
    }
}

fn int_rank(ty: SqlType) -> u8 {
    match ty {
        SqlType::SmallInt => 0,
        SqlType::Integer => 1,
        _ => 2,
    }
}

fn wider_int(a: SqlType, b: SqlType) -> SqlType {
    if int_rank(a) >= int_rank(b) {
        a
    } else {
        b
    }
}

fn wider_decimal(a: SqlType, b: SqlType) -> SqlType {
    let scale = |t: SqlType| if let SqlType::Decimal(_, s) = t { s } else { 0 };
    SqlType::Decimal(38, scale(a).max(scale(b)))
}

/// An upper bound of a query's row count (the product of its FROM relations).
pub fn estimate_rows(query: &Query, schema: &Schema, ctes: &[Source]) -> u64 {
    fn table_ref(t: &TableRef, schema: &Schema, ctes: &[Source]) -> u64 {
        match t {
            TableRef::Table { name, .. } => schema
                .table(name)
                .map(|t| t.rows.len() as u64)
                .or_else(|| ctes.iter().find(|c| &c.alias == name).map(|c| c.rows))
                .unwrap_or(1),
            TableRef::Derived { query, .. } => estimate_rows(query, schema, ctes),
            TableRef::Join { left, right, .. } => table_ref(left, schema, ctes).saturating_mul(table_ref(right, schema, ctes)),
        }
    }
    fn body(b: &SetExpr, schema: &Schema, ctes: &[Source]) -> u64 {
        match b {
            SetExpr::Select(select) => {
                if select.from.is_empty() {
                    return 1;
                }
                select.from.iter().map(|t| table_ref(t, schema, ctes)).fold(1u64, |a, b| a.saturating_mul(b.max(1)))
            }
            SetExpr::SetOp { left, right, .. } => body(left, schema, ctes).saturating_add(body(right, schema, ctes)),
        }
    }
    let rows = body(&query.body, schema, ctes);
    match query.limit {
        Some(limit) => rows.min(limit),
        None => rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_deterministic() {
        let schema = Schema::random(&mut Rng::new(5), &Features::default());
        let features = Features::default();
        let a: Vec<String> = {
            let mut g = Generator::new(Rng::new(9), &schema, &features);
            (0..50).map(|_| g.query().sql()).collect()
        };
        let b: Vec<String> = {
            let mut g = Generator::new(Rng::new(9), &schema, &features);
            (0..50).map(|_| g.query().sql()).collect()
        };
        assert_eq!(a, b);
    }

    #[test]
    fn switched_off_features_do_not_appear() {
        let schema = Schema::random(&mut Rng::new(5), &Features::default());
        let mut features = Features::default();
        for name in ["full_join", "set_operations", "ctes", "nullif", "exists_subquery"] {
            features.set(name, false).unwrap();
        }
        let mut g = Generator::new(Rng::new(1), &schema, &features);
        for _ in 0..300 {
            let sql = g.query().sql();
            for banned in ["FULL JOIN", "UNION", "INTERSECT", "EXCEPT", "WITH ", "NULLIF(", "EXISTS"] {
                // NULLIF also guards divisions; those divide by `NULLIF(x, CAST(0 AS DOUBLE))`.
                if banned == "NULLIF(" {
                    continue;
                }
                assert!(!sql.contains(banned), "{banned} in {sql}");
            }
        }
        assert_eq!(features.disabled(), vec!["full_join", "exists_subquery", "set_operations", "ctes", "nullif", "special_floats"]);
    }
}
