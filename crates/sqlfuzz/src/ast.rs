//! The generated queries as trees, and their SQL text.
//!
//! The generator builds these trees (not strings) so the oracles can take a query apart
//! (`SELECT ... WHERE p` becomes three partitions) and the reducer can shrink a failing
//! query node by node. Rendering is fully parenthesised, so precedence never differs
//! between engines.
//!
//! ```text
//! Query ── ctes: [Cte(name, Query)]
//!       ── body: SetExpr ── Select(items, from: [TableRef], where, group by, having)
//!                        └─ SetOp(UNION|INTERSECT|EXCEPT [ALL], SetExpr, SetExpr)
//!       ── order by (output positions), limit, offset
//! TableRef ── Table(name AS alias) | Derived((Query) AS alias) | Join(kind, left, right, on)
//! ```

use crate::types::{Kind, SqlType};

/// An expression and its result type.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    pub ty: SqlType,
    pub node: Node,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// `table.column`
    Column {
        table: String,
        column: String,
    },
    /// Literal SQL text (`42`, `'x'`, `CAST(NULL AS DATE)`).
    Literal(String),
    /// `(op arg)`: `NOT`, `-`.
    Prefix(&'static str, Box<Expr>),
    /// `(arg suffix)`: `IS NULL`, `IS NOT TRUE`, ...
    Suffix(Box<Expr>, &'static str),
    /// `(left op right)`: comparisons, `AND`, `OR`, `IS DISTINCT FROM`, arithmetic, `||`.
    Binary(Box<Expr>, &'static str, Box<Expr>),
    Function(&'static str, Vec<Expr>),
    /// `name([DISTINCT] arg)`, `count(*)` without an argument.
    Aggregate {
        name: &'static str,
        distinct: bool,
        arg: Option<Box<Expr>>,
    },
    Case {
        operand: Option<Box<Expr>>,
        whens: Vec<(Expr, Expr)>,
        otherwise: Option<Box<Expr>>,
    },
    Cast(Box<Expr>, SqlType),
    Between {
        arg: Box<Expr>,
        low: Box<Expr>,
        high: Box<Expr>,
        negated: bool,
    },
    InList {
        arg: Box<Expr>,
        list: Vec<Expr>,
        negated: bool,
    },
    Like {
        arg: Box<Expr>,
        pattern: Box<Expr>,
        negated: bool,
    },
    ScalarSubquery(Box<Query>),
    Exists {
        query: Box<Query>,
        negated: bool,
    },
    InSubquery {
        arg: Box<Expr>,
        query: Box<Query>,
        negated: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinKind {
    Inner,
    Left,
    Right,
    Full,
    Cross,
}

#[derive(Debug, Clone, PartialEq)]
pub enum TableRef {
    Table { name: String, alias: String },
    Derived { query: Box<Query>, alias: String },
    Join { kind: JoinKind, left: Box<TableRef>, right: Box<TableRef>, on: Option<Expr> },
}

/// One `SELECT`. Output columns are named `c0`, `c1`, ... in order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Select {
    pub distinct: bool,
    pub items: Vec<Expr>,
    /// Comma-separated FROM items (each may be a join tree); empty: no FROM.
    pub from: Vec<TableRef>,
    pub filter: Option<Expr>,
    pub group_by: Vec<Expr>,
    pub having: Option<Expr>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetOp {
    Union,
    Intersect,
    Except,
}

#[derive(Debug, Clone, PartialEq)]
pub enum SetExpr {
    Select(Box<Select>),
    SetOp { op: SetOp, all: bool, left: Box<SetExpr>, right: Box<SetExpr> },
}

/// `ORDER BY <output position>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderItem {
    /// 0-based output column.
    pub column: usize,
    pub desc: bool,
    pub nulls_first: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Cte {
    pub name: String,
    pub query: Query,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    pub ctes: Vec<Cte>,
    pub body: SetExpr,
    pub order_by: Vec<OrderItem>,
    pub limit: Option<u64>,
    pub offset: Option<u64>,
}

impl Expr {
    pub fn new(ty: SqlType, node: Node) -> Expr {
        Expr { ty, node }
    }

    pub fn kind(&self) -> Kind {
        self.ty.kind()
    }

    pub fn literal(ty: SqlType, text: impl Into<String>) -> Expr {
        Expr::new(ty, Node::Literal(text.into()))
    }

    pub fn column(table: &str, column: &str, ty: SqlType) -> Expr {
        Expr::new(ty, Node::Column { table: table.to_string(), column: column.to_string() })
    }

    pub fn prefix(op: &'static str, arg: Expr, ty: SqlType) -> Expr {
        Expr::new(ty, Node::Prefix(op, Box::new(arg)))
    }

    pub fn suffix(arg: Expr, op: &'static str) -> Expr {
        Expr::new(SqlType::Boolean, Node::Suffix(Box::new(arg), op))
    }

    pub fn binary(left: Expr, op: &'static str, right: Expr, ty: SqlType) -> Expr {
        Expr::new(ty, Node::Binary(Box::new(left), op, Box::new(right)))
    }

    pub fn function(name: &'static str, args: Vec<Expr>, ty: SqlType) -> Expr {
        Expr::new(ty, Node::Function(name, args))
    }

    pub fn aggregate(name: &'static str, distinct: bool, arg: Option<Expr>, ty: SqlType) -> Expr {
        Expr::new(ty, Node::Aggregate { name, distinct, arg: arg.map(Box::new) })
    }

    /// `NOT (self)`.
    pub fn negate(self) -> Expr {
        Expr::prefix("NOT", self, SqlType::Boolean)
    }

    /// `self AND other`.
    pub fn and(self, other: Expr) -> Expr {
        Expr::binary(self, "AND", other, SqlType::Boolean)
    }

    /// Whether this expression contains an aggregate outside subqueries.
    pub fn has_aggregate(&self) -> bool {
        if matches!(self.node, Node::Aggregate { .. }) {
            return true;
        }
        self.children().iter().any(|c| c.has_aggregate())
    }

    /// Whether this expression reads a column (outside subqueries).
    pub fn has_column(&self) -> bool {
        matches!(self.node, Node::Column { .. }) || self.children().iter().any(|c| c.has_column())
    }

    /// The direct sub-expressions (not those inside subqueries).
    pub fn children(&self) -> Vec<&Expr> {
        let mut out: Vec<&Expr> = Vec::new();
        match &self.node {
            Node::Column { .. } | Node::Literal(_) | Node::ScalarSubquery(_) | Node::Exists { .. } => {}
            Node::Prefix(_, arg) | Node::Suffix(arg, _) | Node::Cast(arg, _) => out.push(arg),
            Node::Binary(left, _, right) => {
                out.push(left);
                out.push(right);
            }
            Node::Function(_, args) => out.extend(args.iter()),
            Node::Aggregate { arg, .. } => out.extend(arg.as_deref()),
            Node::Case { operand, whens, otherwise } => {
                out.extend(operand.as_deref());
                for (when, then) in whens {
                    out.push(when);
                    out.push(then);
                }
                out.extend(otherwise.as_deref());
            }
            Node::Between { arg, low, high, .. } => out.extend([&**arg, &**low, &**high]),
            Node::InList { arg, list, .. } => {
                out.push(arg);
                out.extend(list.iter());
            }
            Node::Like { arg, pattern, .. } => out.extend([&**arg, &**pattern]),
            Node::InSubquery { arg, .. } => out.push(arg),
        }
        out
    }

    /// Mutable access to the direct sub-expressions, in the order of [`Expr::children`].
    pub fn children_mut(&mut self) -> Vec<&mut Expr> {
        let mut out: Vec<&mut Expr> = Vec::new();
        match &mut self.node {
            Node::Column { .. } | Node::Literal(_) | Node::ScalarSubquery(_) | Node::Exists { .. } => {}
            Node::Prefix(_, arg) | Node::Suffix(arg, _) | Node::Cast(arg, _) => out.push(arg),
            Node::Binary(left, _, right) => {
                out.push(left);
                out.push(right);
            }
            Node::Function(_, args) => out.extend(args.iter_mut()),
            Node::Aggregate { arg, .. } => out.extend(arg.as_deref_mut()),
            Node::Case { operand, whens, otherwise } => {
                out.extend(operand.as_deref_mut());
                for (when, then) in whens {
                    out.push(when);
                    out.push(then);
                }
                out.extend(otherwise.as_deref_mut());
            }
            Node::Between { arg, low, high, .. } => out.extend([&mut **arg, &mut **low, &mut **high]),
            Node::InList { arg, list, .. } => {
                out.push(arg);
                out.extend(list.iter_mut());
            }
            Node::Like { arg, pattern, .. } => out.extend([&mut **arg, &mut **pattern]),
            Node::InSubquery { arg, .. } => out.push(arg),
        }
        out
    }

    /// The subquery this node holds, if any.
    pub fn subquery_mut(&mut self) -> Option<&mut Query> {
        match &mut self.node {
            Node::ScalarSubquery(query) | Node::Exists { query, .. } | Node::InSubquery { query, .. } => Some(query),
            _ => None,
        }
    }

    pub fn sql(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut String) {
        match &self.node {
            Node::Column { table, column } => {
                out.push_str(table);
                out.push('.');
                out.push_str(column);
            }
            Node::Literal(text) => out.push_str(text),
            Node::Prefix(op, arg) => {
                out.push('(');
                out.push_str(op);
                out.push(' ');
                arg.write(out);
                out.push(')');
            }
            Node::Suffix(arg, op) => {
                out.push('(');
                arg.write(out);
                out.push(' ');
                out.push_str(op);
                out.push(')');
            }
            Node::Binary(left, op, right) => {
                out.push('(');
                left.write(out);
                out.push(' ');
                out.push_str(op);
                out.push(' ');
                right.write(out);
                out.push(')');
            }
            Node::Function(name, args) => {
                out.push_str(name);
                out.push('(');
                write_list(out, args);
                out.push(')');
            }
            Node::Aggregate { name, distinct, arg } => {
                out.push_str(name);
                out.push('(');
                match arg {
                    None => out.push('*'),
                    Some(arg) => {
                        if *distinct {
                            out.push_str("DISTINCT ");
                        }
                        arg.write(out);
                    }
                }
                out.push(')');
            }
            Node::Case { operand, whens, otherwise } => {
                out.push_str("CASE");
                if let Some(operand) = operand {
                    out.push(' ');
                    operand.write(out);
                }
                for (when, then) in whens {
                    out.push_str(" WHEN ");
                    when.write(out);
                    out.push_str(" THEN ");
                    then.write(out);
                }
                if let Some(otherwise) = otherwise {
                    out.push_str(" ELSE ");
                    otherwise.write(out);
                }
                out.push_str(" END");
            }
            Node::Cast(arg, ty) => {
                out.push_str("CAST(");
                arg.write(out);
                out.push_str(" AS ");
                out.push_str(&ty.sql());
                out.push(')');
            }
            Node::Between { arg, low, high, negated } => {
                out.push('(');
                arg.write(out);
                out.push_str(if *negated { " NOT BETWEEN " } else { " BETWEEN " });
                low.write(out);
                out.push_str(" AND ");
                high.write(out);
                out.push(')');
            }
            Node::InList { arg, list, negated } => {
                out.push('(');
                arg.write(out);
                out.push_str(if *negated { " NOT IN (" } else { " IN (" });
                write_list(out, list);
                out.push_str("))");
            }
            Node::Like { arg, pattern, negated } => {
                out.push('(');
                arg.write(out);
                out.push_str(if *negated { " NOT LIKE " } else { " LIKE " });
                pattern.write(out);
                out.push(')');
            }
            Node::ScalarSubquery(query) => {
                out.push('(');
                out.push_str(&query.sql());
                out.push(')');
            }
            Node::Exists { query, negated } => {
                out.push_str(if *negated { "(NOT EXISTS (" } else { "(EXISTS (" });
                out.push_str(&query.sql());
                out.push_str("))");
            }
            Node::InSubquery { arg, query, negated } => {
                out.push('(');
                arg.write(out);
                out.push_str(if *negated { " NOT IN (" } else { " IN (" });
                out.push_str(&query.sql());
                out.push_str("))");
            }
        }
    }
}

fn write_list(out: &mut String, exprs: &[Expr]) {
    for (index, expr) in exprs.iter().enumerate() {
        if index > 0 {
            out.push_str(", ");
        }
        expr.write(out);
    }
}

impl JoinKind {
    fn sql(self) -> &'static str {
        match self {
            JoinKind::Inner => "JOIN",
            JoinKind::Left => "LEFT JOIN",
            JoinKind::Right => "RIGHT JOIN",
            JoinKind::Full => "FULL JOIN",
            JoinKind::Cross => "CROSS JOIN",
        }
    }
}

impl TableRef {
    pub fn sql(&self) -> String {
        match self {
            TableRef::Table { name, alias } => format!("{name} AS {alias}"),
            TableRef::Derived { query, alias } => format!("({}) AS {alias}", query.sql()),
            TableRef::Join { kind, left, right, on } => {
                let right_sql = match **right {
                    TableRef::Join { .. } => format!("({})", right.sql()),
                    _ => right.sql(),
                };
                match (kind, on) {
                    (JoinKind::Cross, _) | (_, None) => format!("{} CROSS JOIN {right_sql}", left.sql()),
                    (kind, Some(on)) => format!("{} {} {right_sql} ON {}", left.sql(), kind.sql(), on.sql()),
                }
            }
        }
    }

    /// Aliases of the relations this FROM item brings into scope.
    pub fn aliases(&self) -> Vec<&str> {
        match self {
            TableRef::Table { alias, .. } | TableRef::Derived { alias, .. } => vec![alias],
            TableRef::Join { left, right, .. } => {
                let mut out = left.aliases();
                out.extend(right.aliases());
                out
            }
        }
    }
}

impl Select {
    pub fn sql(&self) -> String {
        let mut out = String::from("SELECT ");
        if self.distinct {
            out.push_str("DISTINCT ");
        }
        let items: Vec<String> = self.items.iter().enumerate().map(|(i, e)| format!("{} AS c{i}", e.sql())).collect();
        out.push_str(&items.join(", "));
        if !self.from.is_empty() {
            out.push_str(" FROM ");
            out.push_str(&self.from.iter().map(|f| f.sql()).collect::<Vec<_>>().join(", "));
        }
        if let Some(filter) = &self.filter {
            out.push_str(" WHERE ");
            out.push_str(&filter.sql());
        }
        if !self.group_by.is_empty() {
            out.push_str(" GROUP BY ");
            out.push_str(&self.group_by.iter().map(|e| e.sql()).collect::<Vec<_>>().join(", "));
        }
        if let Some(having) = &self.having {
            out.push_str(" HAVING ");
            out.push_str(&having.sql());
        }
        out
    }

    pub fn is_aggregate(&self) -> bool {
        !self.group_by.is_empty() || self.having.is_some() || self.items.iter().any(|e| e.has_aggregate())
    }
}

impl SetOp {
    fn sql(self) -> &'static str {
        match self {
            SetOp::Union => "UNION",
            SetOp::Intersect => "INTERSECT",
            SetOp::Except => "EXCEPT",
        }
    }
}

impl SetExpr {
    pub fn sql(&self) -> String {
        match self {
            SetExpr::Select(select) => select.sql(),
            SetExpr::SetOp { op, all, left, right } => {
                let side = |s: &SetExpr| match s {
                    SetExpr::Select(select) => select.sql(),
                    nested => format!("({})", nested.sql()),
                };
                format!("{} {}{} {}", side(left), op.sql(), if *all { " ALL" } else { "" }, side(right))
            }
        }
    }

    /// The output types (of the leftmost SELECT).
    pub fn output_types(&self) -> Vec<SqlType> {
        match self {
            SetExpr::Select(select) => select.items.iter().map(|e| e.ty).collect(),
            SetExpr::SetOp { left, .. } => left.output_types(),
        }
    }
}

impl Query {
    pub fn select(select: Select) -> Query {
        Query { ctes: Vec::new(), body: SetExpr::Select(Box::new(select)), order_by: Vec::new(), limit: None, offset: None }
    }

    pub fn sql(&self) -> String {
        let mut out = String::new();
        if !self.ctes.is_empty() {
            out.push_str("WITH ");
            let ctes: Vec<String> = self.ctes.iter().map(|c| format!("{} AS ({})", c.name, c.query.sql())).collect();
            out.push_str(&ctes.join(", "));
            out.push(' ');
        }
        out.push_str(&self.body.sql());
        if !self.order_by.is_empty() {
            let items: Vec<String> = self
                .order_by
                .iter()
                .map(|o| {
                    format!(
                        "{}{}{}",
                        o.column + 1,
                        if o.desc { " DESC" } else { " ASC" },
                        if o.nulls_first { " NULLS FIRST" } else { " NULLS LAST" }
                    )
                })
                .collect();
            out.push_str(" ORDER BY ");
            out.push_str(&items.join(", "));
        }
        if let Some(limit) = self.limit {
            out.push_str(&format!(" LIMIT {limit}"));
        }
        if let Some(offset) = self.offset {
            out.push_str(&format!(" OFFSET {offset}"));
        }
        out
    }

    pub fn output_types(&self) -> Vec<SqlType> {
        self.body.output_types()
    }

    /// Whether the row order of the result is fully determined: ORDER BY names every output
    /// column (rows equal in all of them are equal rows).
    pub fn is_totally_ordered(&self) -> bool {
        let columns = self.output_types().len();
        (0..columns).all(|c| self.order_by.iter().any(|o| o.column == c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_parenthesised() {
        let a = Expr::column("a1", "c0", SqlType::Integer);
        let p = Expr::binary(a.clone(), "<", Expr::literal(SqlType::Integer, "3"), SqlType::Boolean).negate();
        let select = Select {
            items: vec![a],
            from: vec![TableRef::Table { name: "t0".into(), alias: "a1".into() }],
            filter: Some(p),
            ..Select::default()
        };
        let mut query = Query::select(select);
        query.order_by.push(OrderItem { column: 0, desc: true, nulls_first: false });
        query.limit = Some(2);
        assert_eq!(query.sql(), "SELECT a1.c0 AS c0 FROM t0 AS a1 WHERE (NOT (a1.c0 < 3)) ORDER BY 1 DESC NULLS LAST LIMIT 2");
        assert!(query.is_totally_ordered());
    }
}
