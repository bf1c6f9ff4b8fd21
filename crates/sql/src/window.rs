//! Window function calls (`f(...) OVER (PARTITION BY ... ORDER BY ... frame)`), computed
//! by the [`LogicalPlan::Window`](crate::LogicalPlan::Window) node after aggregation and
//! HAVING, before the SELECT list's projection (PostgreSQL's order of evaluation).

use std::fmt;

use apiary_types::DataType;

use crate::expr::{AggregateFunction, AggregateOrder, Expr, SortKey};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowFunction {
    RowNumber,
    Rank,
    DenseRank,
    PercentRank,
    CumeDist,
    /// `ntile(buckets)`.
    Ntile,
    /// `lag(value [, offset [, default]])`.
    Lag,
    /// `lead(value [, offset [, default]])`.
    Lead,
    FirstValue,
    LastValue,
    /// `nth_value(value, n)`.
    NthValue,
    /// An aggregate over the frame (`sum(x) OVER (...)`).
    Aggregate(AggregateFunction),
}

impl WindowFunction {
    pub fn from_name(name: &str) -> Option<WindowFunction> {
        use WindowFunction::*;
        Some(match name {
            "row_number" => RowNumber,
            "rank" => Rank,
            "dense_rank" => DenseRank,
            "percent_rank" => PercentRank,
            "cume_dist" => CumeDist,
            "ntile" => Ntile,
            "lag" => Lag,
            "lead" => Lead,
            "first_value" => FirstValue,
            "last_value" => LastValue,
            "nth_value" => NthValue,
            _ => return None,
        })
    }

    pub fn name(&self) -> String {
        use WindowFunction::*;
        match self {
            RowNumber => "row_number".into(),
            Rank => "rank".into(),
            DenseRank => "dense_rank".into(),
            PercentRank => "percent_rank".into(),
            CumeDist => "cume_dist".into(),
            Ntile => "ntile".into(),
            Lag => "lag".into(),
            Lead => "lead".into(),
            FirstValue => "first_value".into(),
            LastValue => "last_value".into(),
            NthValue => "nth_value".into(),
            Aggregate(func) => func.name().to_string(),
        }
    }

    /// Whether the result depends on the frame (the others look at the whole partition).
    pub fn uses_frame(&self) -> bool {
        matches!(self, WindowFunction::FirstValue | WindowFunction::LastValue | WindowFunction::NthValue | WindowFunction::Aggregate(_))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameUnits {
    Rows,
    Range,
    Groups,
}

/// A frame edge. Offsets are constants (rows, peer groups, or for RANGE a distance in the
/// ORDER BY key's units, given as an expression of the key's type).
#[derive(Clone, Debug, PartialEq)]
pub enum FrameBound {
    UnboundedPreceding,
    Preceding(Expr),
    CurrentRow,
    Following(Expr),
    UnboundedFollowing,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameExclude {
    NoOthers,
    CurrentRow,
    Group,
    Ties,
}

#[derive(Clone, Debug, PartialEq)]
pub struct WindowFrame {
    pub units: FrameUnits,
    pub start: FrameBound,
    pub end: FrameBound,
    pub exclude: FrameExclude,
}

impl WindowFrame {
    /// The frame when none is written: with ORDER BY, the partition's start through the
    /// current row's last peer; without, the whole partition (every row is a peer).
    pub fn default_frame() -> WindowFrame {
        WindowFrame {
            units: FrameUnits::Range,
            start: FrameBound::UnboundedPreceding,
            end: FrameBound::CurrentRow,
            exclude: FrameExclude::NoOthers,
        }
    }
}

/// One window function call.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowCall {
    pub func: WindowFunction,
    /// The arguments, then (for an aggregate with ORDER BY inside its parentheses) its
    /// ORDER BY keys, as in [`crate::expr::AggregateCall`].
    pub args: Vec<Expr>,
    /// `count(DISTINCT x) OVER (...)`.
    pub distinct: bool,
    /// The directions of an aggregate's ORDER BY keys at the end of `args`.
    pub aggregate_order: Vec<AggregateOrder>,
    /// `FILTER (WHERE ...)` of an aggregate.
    pub filter: Option<Box<Expr>>,
    /// `IGNORE NULLS` (lag, lead, first_value, last_value, nth_value).
    pub ignore_nulls: bool,
    pub partition_by: Vec<Expr>,
    pub order_by: Vec<SortKey>,
    pub frame: WindowFrame,
    pub data_type: DataType,
}

impl WindowCall {
    /// `row_number() OVER (PARTITION BY partition_by ORDER BY order_by)`, which rewrites
    /// (DISTINCT ON, INTERSECT/EXCEPT ALL, LIMIT under decorrelation) number rows with.
    pub fn row_number(partition_by: Vec<Expr>, order_by: Vec<SortKey>) -> WindowCall {
        WindowCall {
            func: WindowFunction::RowNumber,
            args: Vec::new(),
            distinct: false,
            aggregate_order: Vec::new(),
            filter: None,
            ignore_nulls: false,
            partition_by,
            order_by,
            frame: WindowFrame::default_frame(),
            data_type: DataType::BigInt,
        }
    }

    /// Every expression the call evaluates.
    pub fn expressions(&self) -> Vec<&Expr> {
        let mut exprs: Vec<&Expr> = self.args.iter().collect();
        exprs.extend(self.filter.as_deref());
        exprs.extend(self.partition_by.iter());
        exprs.extend(self.order_by.iter().map(|k| &k.expr));
        for bound in [&self.frame.start, &self.frame.end] {
            if let FrameBound::Preceding(e) | FrameBound::Following(e) = bound {
                exprs.push(e);
            }
        }
        exprs
    }

    /// The call with `f` applied to each of its expressions.
    pub fn map_expressions(&self, f: &mut dyn FnMut(Expr) -> Expr) -> WindowCall {
        let bound = |b: &FrameBound, f: &mut dyn FnMut(Expr) -> Expr| match b {
            FrameBound::Preceding(e) => FrameBound::Preceding(f(e.clone())),
            FrameBound::Following(e) => FrameBound::Following(f(e.clone())),
            other => other.clone(),
        };
        let start = bound(&self.frame.start, f);
        let end = bound(&self.frame.end, f);
        WindowCall {
            func: self.func,
            args: self.args.iter().map(|a| f(a.clone())).collect(),
            distinct: self.distinct,
            aggregate_order: self.aggregate_order.clone(),
            filter: self.filter.as_ref().map(|e| Box::new(f((**e).clone()))),
            ignore_nulls: self.ignore_nulls,
            partition_by: self.partition_by.iter().map(|e| f(e.clone())).collect(),
            order_by: self.order_by.iter().map(|k| SortKey { expr: f(k.expr.clone()), ..k.clone() }).collect(),
            frame: WindowFrame { start, end, ..self.frame.clone() },
            data_type: self.data_type,
        }
    }
}

impl fmt::Display for FrameBound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameBound::UnboundedPreceding => write!(f, "UNBOUNDED PRECEDING"),
            FrameBound::Preceding(e) => write!(f, "{e} PRECEDING"),
            FrameBound::CurrentRow => write!(f, "CURRENT ROW"),
            FrameBound::Following(e) => write!(f, "{e} FOLLOWING"),
            FrameBound::UnboundedFollowing => write!(f, "UNBOUNDED FOLLOWING"),
        }
    }
}

impl fmt::Display for WindowCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |exprs: Vec<String>| exprs.join(", ");
        let values = self.args.len() - self.aggregate_order.len();
        let distinct = if self.distinct { "DISTINCT " } else { "" };
        write!(f, "{}({distinct}{}", self.func.name(), list(self.args[..values].iter().map(|a| a.to_string()).collect()))?;
        if !self.aggregate_order.is_empty() {
            let keys = self.args[values..]
                .iter()
                .zip(&self.aggregate_order)
                .map(|(key, order)| format!("{key}{}", if order.ascending { "" } else { " DESC" }));
            write!(f, " ORDER BY {}", list(keys.collect()))?;
        }
        write!(f, ")")?;
        if self.ignore_nulls {
            write!(f, " IGNORE NULLS")?;
        }
        if let Some(filter) = &self.filter {
            write!(f, " FILTER (WHERE {filter})")?;
        }
        write!(f, " OVER (")?;
        let mut parts = Vec::new();
        if !self.partition_by.is_empty() {
            parts.push(format!("PARTITION BY {}", list(self.partition_by.iter().map(|e| e.to_string()).collect())));
        }
        if !self.order_by.is_empty() {
            parts.push(format!("ORDER BY {}", list(self.order_by.iter().map(|k| k.to_string()).collect())));
        }
        if self.func.uses_frame() && self.frame != WindowFrame::default_frame() {
            let units = match self.frame.units {
                FrameUnits::Rows => "ROWS",
                FrameUnits::Range => "RANGE",
                FrameUnits::Groups => "GROUPS",
            };
            let exclude = match self.frame.exclude {
                FrameExclude::NoOthers => "",
                FrameExclude::CurrentRow => " EXCLUDE CURRENT ROW",
                FrameExclude::Group => " EXCLUDE GROUP",
                FrameExclude::Ties => " EXCLUDE TIES",
            };
            parts.push(format!("{units} BETWEEN {} AND {}{exclude}", self.frame.start, self.frame.end));
        }
        write!(f, "{})", parts.join(" "))
    }
}
