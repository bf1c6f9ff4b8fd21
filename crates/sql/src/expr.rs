//! Bound (typed, name-resolved) expressions.
//!
//! Column references point at a [`ColumnId`], unique within one query. Operators see
//! operands already coerced by the binder: comparison operands share one type; arithmetic
//! operands share one physical type except where the operator defines otherwise (decimal
//! multiply/divide, date +/- integer or interval), and the result type is stored in the node.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use apiary_common::{bind_err, Result};
use apiary_types::datetime::DateField;
use apiary_types::{DataType, ScalarValue};

use crate::plan::LogicalPlan;

/// Identifies a column produced somewhere in a query plan.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct ColumnId(pub u32);

impl fmt::Display for ColumnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// A reference to a column: its id plus what expressions need to know about it.
#[derive(Clone, Debug)]
pub struct ColumnRef {
    pub id: ColumnId,
    pub name: Arc<str>,
    pub data_type: DataType,
    pub nullable: bool,
}

impl PartialEq for ColumnRef {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl ColumnRef {
    pub fn expr(&self) -> Expr {
        Expr::Column(self.clone())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Eq,
    NotEq,
    Lt,
    LtEq,
    Gt,
    GtEq,
    /// `IS NOT DISTINCT FROM`: equality where NULL equals NULL.
    IsNotDistinctFrom,
    /// `IS DISTINCT FROM`.
    IsDistinctFrom,
    And,
    Or,
    Concat,
}

impl BinaryOp {
    pub fn is_comparison(&self) -> bool {
        use BinaryOp::*;
        matches!(self, Eq | NotEq | Lt | LtEq | Gt | GtEq | IsNotDistinctFrom | IsDistinctFrom)
    }

    pub fn is_arithmetic(&self) -> bool {
        use BinaryOp::*;
        matches!(self, Add | Sub | Mul | Div | Mod)
    }

    /// `a op b` == `b flipped(op) a`.
    pub fn flipped(&self) -> BinaryOp {
        use BinaryOp::*;
        match self {
            Lt => Gt,
            LtEq => GtEq,
            Gt => Lt,
            GtEq => LtEq,
            other => *other,
        }
    }

    /// `NOT (a op b)` == `a negated(op) b` (for comparisons on non-NULL values).
    pub fn negated(&self) -> Option<BinaryOp> {
        use BinaryOp::*;
        Some(match self {
            Eq => NotEq,
            NotEq => Eq,
            Lt => GtEq,
            LtEq => Gt,
            Gt => LtEq,
            GtEq => Lt,
            IsDistinctFrom => IsNotDistinctFrom,
            IsNotDistinctFrom => IsDistinctFrom,
            _ => return None,
        })
    }

    pub fn symbol(&self) -> &'static str {
        use BinaryOp::*;
        match self {
            Add => "+",
            Sub => "-",
            Mul => "*",
            Div => "/",
            Mod => "%",
            Eq => "=",
            NotEq => "<>",
            Lt => "<",
            LtEq => "<=",
            Gt => ">",
            GtEq => ">=",
            IsNotDistinctFrom => "IS NOT DISTINCT FROM",
            IsDistinctFrom => "IS DISTINCT FROM",
            And => "AND",
            Or => "OR",
            Concat => "||",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnaryOp {
    Not,
    Negate,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrimKind {
    Both,
    Leading,
    Trailing,
}

/// Built-in scalar functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScalarFunction {
    /// `substring(s, start [, length])`, 1-based, in characters.
    Substring,
    Extract(DateField),
    Upper,
    Lower,
    /// Length in characters.
    Length,
    Trim(TrimKind),
    Abs,
    /// -1, 0 or 1 (of the argument's type).
    Sign,
    /// `round(x [, digits])`.
    Round,
    Ceil,
    Floor,
    Sqrt,
    Power,
    Ln,
    Exp,
    Coalesce,
    NullIf,
    Greatest,
    Least,
    Replace,
    /// `position(needle IN haystack)` / `strpos(haystack, needle)`; args are (haystack, needle).
    Position,
    StartsWith,
    /// `concat(a, b, ...)`: NULL arguments are skipped.
    Concat,
    /// `date_trunc(unit, date)` -> the unit is the first argument (a literal).
    DateTrunc,
    /// Internal (shared operators): BIGINT whose bit `i` is set where boolean argument `i`
    /// is TRUE: which of the queries sharing a scan each row qualifies for. Never NULL.
    QueryMask,
    /// Internal (shared operators): `avg` finished from a sum and a count computed apart,
    /// `(sum, count)`, exactly as the `avg` aggregate finishes its own; NULL when the
    /// count is NULL or 0. The result type is the average's.
    AverageOf,
    /// Internal (shared operators): the bitwise AND of two BIGINT query masks, the
    /// queries a joined row qualifies for (those both of its input rows qualify for).
    /// Never NULL.
    MaskAnd,
    /// `TRY_CAST(x AS t)`: the cast, or NULL where it fails. The target is the type.
    TryCast,
    // Strings (PostgreSQL's semantics; `contains` and `ends_with` are DuckDB's).
    /// `split_part(s, delimiter, n)`: field `n` (1-based; negative counts from the end).
    SplitPart,
    /// `left(s, n)`: the first `n` characters (negative: all but the last `-n`).
    Left,
    /// `right(s, n)`: the last `n` characters (negative: all but the first `-n`).
    Right,
    /// `lpad(s, length [, fill])`.
    Lpad,
    /// `rpad(s, length [, fill])`.
    Rpad,
    /// `concat_ws(separator, a, b, ...)`: NULL arguments are skipped.
    ConcatWs,
    Contains,
    EndsWith,
    Repeat,
    Reverse,
    /// Hexadecimal MD5 digest of the string's bytes.
    Md5,
    Initcap,
    /// Code point of the first character (0 for '').
    Ascii,
    /// The character with a code point.
    Chr,
    // Regular expressions (the `regex` crate's syntax; flags as DuckDB/PostgreSQL).
    /// `regexp_matches(s, pattern [, flags])`: whether the pattern matches somewhere.
    RegexpMatches,
    /// `regexp_replace(s, pattern, replacement [, flags])`; `g` replaces every match.
    RegexpReplace,
    /// `regexp_extract(s, pattern [, group [, flags]])`: the group of the first match, ''
    /// without a match.
    RegexpExtract,
    // Dates and times.
    /// `date_diff(part, start, end)`: part boundaries crossed from start to end (DuckDB).
    DateDiff(DateField),
    /// `make_date(year, month, day)`.
    MakeDate,
    /// `make_timestamp(year, month, day, hour, minute, seconds)`.
    MakeTimestamp,
    /// `strftime(value, format)` (DuckDB's format codes).
    Strftime,
    /// `strptime(text, format)` -> TIMESTAMP; an error where the text does not match.
    Strptime,
    /// `try_strptime(text, format)`: NULL where the text does not match.
    TryStrptime,
    /// `to_char(value, pattern)` (PostgreSQL's template patterns).
    ToChar,
    DayName,
    MonthName,
    /// `age(a, b)`: the symbolic INTERVAL from b to a (years, months, days, time).
    Age,
    /// `make_time(hour, minute, seconds)` -> TIME.
    MakeTime,
    /// `make_timestamptz(year, month, day, hour, minute, seconds [, zone])`: the local
    /// time in `zone` (default: the session's) as an instant.
    MakeTimestampTz,
    /// `value AT TIME ZONE zone` / `timezone(zone, value)`, args `(value, zone)`: a
    /// TIMESTAMP read as local time in `zone` becomes a TIMESTAMPTZ; a TIMESTAMPTZ
    /// becomes the TIMESTAMP of its local time in `zone`. `zone` is text or an INTERVAL.
    AtTimeZone,
    /// `nextval('s')`, args `(handle, session)`: the sequence's next value for each row
    /// (the handle is [`apiary_storage::Sequence::handle`], the session the id of
    /// [`apiary_storage::SessionValues`], BIGINT literals). Not constant.
    NextVal,
    /// `setval('s', value [, is_called])`, args `(handle, value, is_called, session)`:
    /// sets the sequence for each row; returns `value`. Not constant.
    SetVal,
    /// `currval('s')`, args `(handle, session)`: what `nextval` last gave in the
    /// session. Not constant (a prepared plan reads it at each execution).
    CurrVal,
    /// `lastval()`, args `(session)`: what the sequence `nextval` last used gave. Not
    /// constant.
    LastVal,
}

impl ScalarFunction {
    pub fn name(&self) -> String {
        use ScalarFunction::*;
        match self {
            NextVal => "nextval".into(),
            SetVal => "setval".into(),
            CurrVal => "currval".into(),
            LastVal => "lastval".into(),
            Substring => "substring".into(),
            Extract(field) => format!("extract_{field:?}").to_lowercase(),
            Upper => "upper".into(),
            Lower => "lower".into(),
            Length => "length".into(),
            Trim(TrimKind::Both) => "trim".into(),
            Trim(TrimKind::Leading) => "ltrim".into(),
            Trim(TrimKind::Trailing) => "rtrim".into(),
            Abs => "abs".into(),
            Sign => "sign".into(),
            Round => "round".into(),
            Ceil => "ceil".into(),
            Floor => "floor".into(),
            Sqrt => "sqrt".into(),
            Power => "power".into(),
            Ln => "ln".into(),
            Exp => "exp".into(),
            Coalesce => "coalesce".into(),
            NullIf => "nullif".into(),
            Greatest => "greatest".into(),
            Least => "least".into(),
            Replace => "replace".into(),
            Position => "strpos".into(),
            StartsWith => "starts_with".into(),
            Concat => "concat".into(),
            DateTrunc => "date_trunc".into(),
            QueryMask => "query_mask".into(),
            AverageOf => "average_of".into(),
            MaskAnd => "mask_and".into(),
            TryCast => "try_cast".into(),
            SplitPart => "split_part".into(),
            Left => "left".into(),
            Right => "right".into(),
            Lpad => "lpad".into(),
            Rpad => "rpad".into(),
            ConcatWs => "concat_ws".into(),
            Contains => "contains".into(),
            EndsWith => "ends_with".into(),
            Repeat => "repeat".into(),
            Reverse => "reverse".into(),
            Md5 => "md5".into(),
            Initcap => "initcap".into(),
            Ascii => "ascii".into(),
            Chr => "chr".into(),
            RegexpMatches => "regexp_matches".into(),
            RegexpReplace => "regexp_replace".into(),
            RegexpExtract => "regexp_extract".into(),
            DateDiff(field) => format!("date_diff_{field:?}").to_lowercase(),
            MakeDate => "make_date".into(),
            MakeTimestamp => "make_timestamp".into(),
            Strftime => "strftime".into(),
            Strptime => "strptime".into(),
            TryStrptime => "try_strptime".into(),
            ToChar => "to_char".into(),
            DayName => "dayname".into(),
            MonthName => "monthname".into(),
            Age => "age".into(),
            MakeTime => "make_time".into(),
            MakeTimestampTz => "make_timestamptz".into(),
            AtTimeZone => "timezone".into(),
        }
    }
}

/// Built-in aggregate functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AggregateFunction {
    CountStar,
    Count,
    Sum,
    Avg,
    Min,
    Max,
    /// Any value of the group (used for columns functionally dependent on group keys).
    AnyValue,
    BoolAnd,
    BoolOr,
    StddevSamp,
    StddevPop,
    VarSamp,
    VarPop,
    /// `string_agg(x, separator [ORDER BY ...])` / `listagg`: args (value, separator).
    StringAgg,
    /// `quantile_cont(x, fraction)`, `median(x)`, `percentile_cont(f) WITHIN GROUP
    /// (ORDER BY x)`: args (value as DOUBLE, fraction literal); interpolated.
    QuantileCont,
    /// `quantile_disc(x, fraction)`, `percentile_disc(f) WITHIN GROUP (ORDER BY x)`:
    /// args (value, fraction literal); the first value whose cumulative share reaches
    /// the fraction.
    QuantileDisc,
    /// `mode(x)` / `mode() WITHIN GROUP (ORDER BY x)`: the most frequent value (the
    /// smallest of equally frequent ones, as PostgreSQL).
    Mode,
    /// HyperLogLog estimate of the distinct non-NULL values (BIGINT).
    ApproxCountDistinct,
    /// `arg_min(arg, value)` / `min_by`: `arg` of the row with the smallest `value`
    /// (rows where either is NULL are skipped, as DuckDB).
    ArgMin,
    /// `arg_max(arg, value)` / `max_by`.
    ArgMax,
    // Two-variable statistics over (y, x) as DOUBLE, rows with a NULL in either skipped.
    Corr,
    CovarPop,
    CovarSamp,
    RegrSlope,
    RegrIntercept,
    RegrCount,
    RegrR2,
    RegrAvgX,
    RegrAvgY,
    RegrSxx,
    RegrSyy,
    RegrSxy,
}

impl AggregateFunction {
    pub fn name(&self) -> &'static str {
        use AggregateFunction::*;
        match self {
            CountStar | Count => "count",
            Sum => "sum",
            Avg => "avg",
            Min => "min",
            Max => "max",
            AnyValue => "any_value",
            BoolAnd => "bool_and",
            BoolOr => "bool_or",
            StddevSamp => "stddev_samp",
            StddevPop => "stddev_pop",
            VarSamp => "var_samp",
            VarPop => "var_pop",
            StringAgg => "string_agg",
            QuantileCont => "quantile_cont",
            QuantileDisc => "quantile_disc",
            Mode => "mode",
            ApproxCountDistinct => "approx_count_distinct",
            ArgMin => "arg_min",
            ArgMax => "arg_max",
            Corr => "corr",
            CovarPop => "covar_pop",
            CovarSamp => "covar_samp",
            RegrSlope => "regr_slope",
            RegrIntercept => "regr_intercept",
            RegrCount => "regr_count",
            RegrR2 => "regr_r2",
            RegrAvgX => "regr_avgx",
            RegrAvgY => "regr_avgy",
            RegrSxx => "regr_sxx",
            RegrSyy => "regr_syy",
            RegrSxy => "regr_sxy",
        }
    }
}

/// The direction of one ORDER BY key inside an aggregate call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AggregateOrder {
    pub ascending: bool,
    pub nulls_first: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct AggregateCall {
    pub func: AggregateFunction,
    /// The arguments, then the ORDER BY keys (the last `order_by.len()` expressions), so
    /// that every rewrite of the arguments also rewrites the keys.
    pub args: Vec<Expr>,
    pub distinct: bool,
    /// `FILTER (WHERE ...)`.
    pub filter: Option<Box<Expr>>,
    pub data_type: DataType,
    /// `string_agg(x, ',' ORDER BY k DESC)`: the directions of the ORDER BY keys at the
    /// end of `args` (empty for aggregates whose result does not depend on order).
    pub order_by: Vec<AggregateOrder>,
}

impl AggregateCall {
    /// A call without ORDER BY.
    pub fn new(func: AggregateFunction, args: Vec<Expr>, distinct: bool, filter: Option<Box<Expr>>, data_type: DataType) -> Self {
        AggregateCall { func, args, distinct, filter, data_type, order_by: Vec::new() }
    }

    /// The value the aggregate has over no rows (0 for counts, NULL otherwise).
    pub fn empty_value(&self) -> ScalarValue {
        match self.func {
            AggregateFunction::CountStar
            | AggregateFunction::Count
            | AggregateFunction::ApproxCountDistinct
            | AggregateFunction::RegrCount => ScalarValue::Int64(0),
            _ => ScalarValue::Null,
        }
    }

    /// The arguments without the ORDER BY keys.
    pub fn value_args(&self) -> &[Expr] {
        &self.args[..self.args.len() - self.order_by.len()]
    }
}

impl fmt::Display for AggregateCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}(", self.func.name())?;
        if self.distinct {
            write!(f, "DISTINCT ")?;
        }
        if self.func == AggregateFunction::CountStar {
            write!(f, "*")?;
        }
        write!(f, "{}", self.value_args().iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", "))?;
        if !self.order_by.is_empty() {
            let keys = &self.args[self.args.len() - self.order_by.len()..];
            let keys: Vec<String> =
                keys.iter().zip(&self.order_by).map(|(k, o)| format!("{k}{}", if o.ascending { "" } else { " DESC" })).collect();
            write!(f, " ORDER BY {}", keys.join(", "))?;
        }
        write!(f, ")")?;
        if let Some(filter) = &self.filter {
            write!(f, " FILTER (WHERE {filter})")?;
        }
        Ok(())
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum SubqueryKind {
    /// `(SELECT x ...)` used as a value: at most one row.
    Scalar,
    /// `[NOT] EXISTS (SELECT ...)`.
    Exists { negated: bool },
    /// `expr [NOT] IN (SELECT x ...)`.
    In { expr: Box<Expr>, negated: bool },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Subquery {
    pub kind: SubqueryKind,
    pub plan: Box<LogicalPlan>,
    /// The subquery's single output column (Scalar and In).
    pub output: Option<ColumnRef>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    Column(ColumnRef),
    Literal(ScalarValue, DataType),
    Unary(UnaryOp, Box<Expr>),
    Binary {
        op: BinaryOp,
        left: Box<Expr>,
        right: Box<Expr>,
        data_type: DataType,
    },
    IsNull {
        expr: Box<Expr>,
        negated: bool,
    },
    Cast {
        expr: Box<Expr>,
        to: DataType,
    },
    /// Searched CASE (simple CASE is rewritten to this form by the binder).
    Case {
        whens: Vec<(Expr, Expr)>,
        otherwise: Option<Box<Expr>>,
        data_type: DataType,
    },
    /// `expr [NOT] IN (v1, v2, ...)`; list items have the type of `expr`.
    InList {
        expr: Box<Expr>,
        list: Vec<Expr>,
        negated: bool,
    },
    /// `expr [NOT] [I]LIKE pattern [ESCAPE c]` (`escape` `None`: no escape character).
    Like {
        expr: Box<Expr>,
        pattern: Box<Expr>,
        negated: bool,
        case_insensitive: bool,
        escape: Option<char>,
    },
    Function {
        func: ScalarFunction,
        args: Vec<Expr>,
        data_type: DataType,
    },
    /// A subquery; removed by the optimizer's unnesting rule before execution.
    Subquery(Box<Subquery>),
    /// `$n` of a statement planned once for many executions (index `n - 1`): not a
    /// constant while the plan is optimized; each execution replaces it by the literal
    /// of its value before the physical plan is made (see [`Expr::bind_parameters`]).
    Parameter {
        index: usize,
        data_type: DataType,
    },
}

/// The literal for parameter `index` (0-based) of type `data_type`.
fn parameter_literal(index: usize, data_type: DataType, values: &[ScalarValue], zone: &apiary_types::TimeZone) -> Result<Expr> {
    let Some(value) = values.get(index) else {
        return Err(bind_err!("there is no parameter ${}: the statement was given {} values", index + 1, values.len()));
    };
    if value.is_null() || value.data_type() == data_type {
        return Ok(Expr::Literal(value.clone(), data_type));
    }
    let cast =
        value.cast_to_in(&data_type, zone).map_err(|err| bind_err!("parameter ${} ({value}) is not a {data_type}: {err}", index + 1))?;
    Ok(Expr::Literal(cast, data_type))
}

impl Expr {
    pub fn literal(value: ScalarValue) -> Expr {
        let data_type = value.data_type();
        Expr::Literal(value, data_type)
    }

    pub fn boolean(value: bool) -> Expr {
        Expr::Literal(ScalarValue::Boolean(value), DataType::Boolean)
    }

    pub fn binary(op: BinaryOp, left: Expr, right: Expr, data_type: DataType) -> Expr {
        Expr::Binary { op, left: Box::new(left), right: Box::new(right), data_type }
    }

    /// A comparison (result BOOLEAN).
    pub fn compare(op: BinaryOp, left: Expr, right: Expr) -> Expr {
        Expr::binary(op, left, right, DataType::Boolean)
    }

    pub fn negation(expr: Expr) -> Expr {
        Expr::Unary(UnaryOp::Not, Box::new(expr))
    }

    pub fn is_null(expr: Expr) -> Expr {
        Expr::IsNull { expr: Box::new(expr), negated: false }
    }

    pub fn data_type(&self) -> DataType {
        match self {
            Expr::Column(c) => c.data_type,
            Expr::Literal(_, t) | Expr::Parameter { data_type: t, .. } => *t,
            Expr::Unary(UnaryOp::Not, _) => DataType::Boolean,
            Expr::Unary(UnaryOp::Negate, e) => e.data_type(),
            Expr::Binary { data_type, .. } => *data_type,
            Expr::IsNull { .. } | Expr::InList { .. } | Expr::Like { .. } => DataType::Boolean,
            Expr::Cast { to, .. } => *to,
            Expr::Case { data_type, .. } | Expr::Function { data_type, .. } => *data_type,
            Expr::Subquery(s) => match s.kind {
                SubqueryKind::Scalar => s.output.as_ref().map_or(DataType::Null, |c| c.data_type),
                _ => DataType::Boolean,
            },
        }
    }

    /// Whether the expression may evaluate to NULL (conservative: `true` when unsure).
    pub fn nullable(&self) -> bool {
        match self {
            Expr::Column(c) => c.nullable,
            Expr::Literal(v, _) => v.is_null(),
            Expr::IsNull { .. } => false,
            Expr::Binary { op: BinaryOp::IsDistinctFrom | BinaryOp::IsNotDistinctFrom, .. } => false,
            // Division can produce NULL only through errors, which abort instead.
            Expr::Binary { left, right, .. } => left.nullable() || right.nullable(),
            Expr::Unary(_, e) | Expr::Cast { expr: e, .. } => e.nullable(),
            Expr::Like { expr, pattern, .. } => expr.nullable() || pattern.nullable(),
            Expr::InList { expr, list, .. } => expr.nullable() || list.iter().any(|e| e.nullable()),
            Expr::Case { whens, otherwise, .. } => {
                whens.iter().any(|(_, then)| then.nullable()) || otherwise.as_ref().is_none_or(|e| e.nullable())
            }
            Expr::Function { func: ScalarFunction::Coalesce, args, .. } => args.iter().all(|a| a.nullable()),
            Expr::Function { func: ScalarFunction::NullIf, .. } => true,
            Expr::Function { func: ScalarFunction::Concat | ScalarFunction::QueryMask | ScalarFunction::MaskAnd, .. } => false,
            Expr::Function { func: ScalarFunction::AverageOf | ScalarFunction::TryCast | ScalarFunction::TryStrptime, .. } => true,
            Expr::Function { func: ScalarFunction::ConcatWs, args, .. } => args.first().is_none_or(|a| a.nullable()),
            Expr::Function { args, .. } => args.iter().any(|a| a.nullable()),
            Expr::Subquery(_) | Expr::Parameter { .. } => true,
        }
    }

    /// Direct children.
    pub fn children(&self) -> Vec<&Expr> {
        match self {
            Expr::Column(_) | Expr::Literal(..) | Expr::Parameter { .. } => vec![],
            Expr::Subquery(s) => match &s.kind {
                SubqueryKind::In { expr, .. } => vec![expr],
                _ => vec![],
            },
            Expr::Unary(_, e) | Expr::IsNull { expr: e, .. } | Expr::Cast { expr: e, .. } => vec![e],
            Expr::Binary { left, right, .. } => vec![left, right],
            Expr::Case { whens, otherwise, .. } => {
                let mut children: Vec<&Expr> = whens.iter().flat_map(|(w, t)| [w, t]).collect();
                if let Some(e) = otherwise {
                    children.push(e);
                }
                children
            }
            Expr::InList { expr, list, .. } => std::iter::once(expr.as_ref()).chain(list.iter()).collect(),
            Expr::Like { expr, pattern, .. } => vec![expr, pattern],
            Expr::Function { args, .. } => args.iter().collect(),
        }
    }

    /// Rebuilds the expression bottom-up, applying `f` to every node after its children.
    pub fn transform_up(self, f: &mut impl FnMut(Expr) -> Expr) -> Expr {
        let rebuilt = self.map_children(|child| child.transform_up(f));
        f(rebuilt)
    }

    /// Rebuilds the expression top-down: `f` may replace a node (returning `Ok`), in which
    /// case its children are not visited; `Err(expr)` means "keep and descend".
    pub fn transform_down(self, f: &mut impl FnMut(Expr) -> Result<Expr, Expr>) -> Expr {
        match f(self) {
            Ok(replaced) => replaced,
            Err(kept) => kept.map_children(|child| child.transform_down(f)),
        }
    }

    /// Applies `f` to every direct child.
    pub fn map_children(self, mut f: impl FnMut(Expr) -> Expr) -> Expr {
        let mut boxed = |e: Box<Expr>| Box::new(f(*e));
        match self {
            Expr::Column(_) | Expr::Literal(..) | Expr::Parameter { .. } => self,
            Expr::Subquery(mut s) => {
                if let SubqueryKind::In { expr, negated } = s.kind {
                    s.kind = SubqueryKind::In { expr: boxed(expr), negated };
                }
                Expr::Subquery(s)
            }
            Expr::Unary(op, e) => Expr::Unary(op, boxed(e)),
            Expr::IsNull { expr, negated } => Expr::IsNull { expr: boxed(expr), negated },
            Expr::Cast { expr, to } => Expr::Cast { expr: boxed(expr), to },
            Expr::Binary { op, left, right, data_type } => Expr::Binary { op, left: boxed(left), right: boxed(right), data_type },
            Expr::Like { expr, pattern, negated, case_insensitive, escape } => {
                Expr::Like { expr: boxed(expr), pattern: boxed(pattern), negated, case_insensitive, escape }
            }
            Expr::InList { expr, list, negated } => {
                let expr = boxed(expr);
                Expr::InList { expr, list: list.into_iter().map(&mut f).collect(), negated }
            }
            Expr::Case { whens, otherwise, data_type } => Expr::Case {
                whens: whens.into_iter().map(|(w, t)| (f(w), f(t))).collect(),
                otherwise: otherwise.map(|e| Box::new(f(*e))),
                data_type,
            },
            Expr::Function { func, args, data_type } => Expr::Function { func, args: args.into_iter().map(f).collect(), data_type },
        }
    }

    /// Visits every node (pre-order), including nodes inside subquery expressions' own
    /// expression trees only when `into_subqueries` is handled by the caller.
    pub fn visit(&self, f: &mut impl FnMut(&Expr)) {
        f(self);
        for child in self.children() {
            child.visit(f);
        }
    }

    /// Column ids this expression reads (not looking into subquery plans).
    pub fn columns(&self) -> BTreeSet<ColumnId> {
        let mut columns = BTreeSet::new();
        self.collect_columns(&mut columns);
        columns
    }

    pub fn collect_columns(&self, out: &mut BTreeSet<ColumnId>) {
        self.visit(&mut |e| {
            if let Expr::Column(c) = e {
                out.insert(c.id);
            }
            if let Expr::Subquery(s) = e {
                // Outer references inside the subquery plan count as reads too.
                out.extend(s.plan.free_columns());
            }
        });
    }

    pub fn contains_subquery(&self) -> bool {
        let mut found = false;
        self.visit(&mut |e| found |= matches!(e, Expr::Subquery(_)));
        found
    }

    /// Whether evaluating this predicate raises no error for any row: comparisons of
    /// columns (or their widening casts) with columns or literals, `IS [NOT] NULL` and
    /// `IN` lists of literals, combined with AND, OR and NOT. Such a predicate may be
    /// evaluated on rows an earlier test would have removed (copied below a join, hoisted
    /// out of a disjunct) without making a query fail that did not.
    pub fn cannot_fail(&self) -> bool {
        let widening = |from: &DataType, to: &DataType| {
            use DataType::*;
            matches!((from, to), (SmallInt, Integer | BigInt | Double) | (Integer, BigInt | Double) | (Real, Double) | (Date, Timestamp))
        };
        let plain = |e: &Expr| match e {
            Expr::Column(_) | Expr::Literal(..) => true,
            Expr::Cast { expr, to } => matches!(expr.as_ref(), Expr::Column(_)) && widening(&expr.data_type(), to),
            _ => false,
        };
        match self {
            Expr::Binary { op: BinaryOp::And | BinaryOp::Or, left, right, .. } => left.cannot_fail() && right.cannot_fail(),
            Expr::Binary { op, left, right, .. } => op.is_comparison() && plain(left) && plain(right),
            Expr::Unary(UnaryOp::Not, inner) => inner.cannot_fail(),
            Expr::IsNull { expr, .. } => plain(expr),
            Expr::InList { expr, list, .. } => plain(expr) && list.iter().all(Expr::is_literal),
            Expr::Column(_) | Expr::Literal(..) => true,
            _ => false,
        }
    }

    pub fn is_literal(&self) -> bool {
        matches!(self, Expr::Literal(..))
    }

    /// Whether the expression has no column references, subqueries or parameters
    /// (foldable).
    pub fn is_constant(&self) -> bool {
        let mut constant = true;
        self.visit(&mut |e| {
            constant &= !matches!(
                e,
                Expr::Column(_)
                    | Expr::Subquery(_)
                    | Expr::Parameter { .. }
                    | Expr::Function {
                        func: ScalarFunction::NextVal | ScalarFunction::SetVal | ScalarFunction::CurrVal | ScalarFunction::LastVal,
                        ..
                    }
            )
        });
        constant
    }

    /// Whether the expression reads nothing of a row (no column, subquery or parameter):
    /// a constant, or one with an effect such as `nextval(...)`.
    pub fn reads_no_row(&self) -> bool {
        let mut free = true;
        self.visit(&mut |e| free &= !matches!(e, Expr::Column(_) | Expr::Subquery(_) | Expr::Parameter { .. }));
        free
    }

    /// Whether a `$n` parameter appears in the expression.
    pub fn contains_parameter(&self) -> bool {
        let mut found = false;
        self.visit(&mut |e| found |= matches!(e, Expr::Parameter { .. }));
        found
    }

    /// Replaces each `$n` parameter by the literal `values[n - 1]`, cast to the
    /// parameter's type (a NULL takes it as is; text read as a TIMESTAMPTZ in `zone`).
    /// Errors when a value is missing or does not convert.
    pub fn bind_parameters(self, values: &[ScalarValue], zone: &apiary_types::TimeZone) -> Result<Expr> {
        let mut failure = None;
        let bound = self.transform_up(&mut |e| match e {
            Expr::Parameter { index, data_type } => match parameter_literal(index, data_type, values, zone) {
                Ok(literal) => literal,
                Err(err) => {
                    failure.get_or_insert(err);
                    Expr::Parameter { index, data_type }
                }
            },
            other => other,
        });
        match failure {
            Some(err) => Err(err),
            None => Ok(bound),
        }
    }

    /// Replaces column references by `map(id)` where it returns `Some`.
    pub fn replace_columns(self, map: &impl Fn(&ColumnRef) -> Option<Expr>) -> Expr {
        self.transform_up(&mut |e| match &e {
            Expr::Column(c) => map(c).unwrap_or(e),
            _ => e,
        })
    }

    /// Replaces column references found in `map`, also inside subquery plans.
    pub fn replace_columns_deep(self, map: &std::collections::HashMap<ColumnId, Expr>) -> Expr {
        self.transform_up(&mut |e| match e {
            Expr::Column(c) => map.get(&c.id).cloned().unwrap_or(Expr::Column(c)),
            Expr::Subquery(mut s) => {
                s.plan =
                    Box::new(std::mem::replace(&mut *s.plan, LogicalPlan::Values { rows: vec![], output: vec![] }).rewrite_columns(map));
                Expr::Subquery(s)
            }
            other => other,
        })
    }

    /// Splits a conjunction `a AND b AND c` into its parts.
    pub fn split_conjunction(self) -> Vec<Expr> {
        let mut out = Vec::new();
        fn walk(e: Expr, out: &mut Vec<Expr>) {
            match e {
                Expr::Binary { op: BinaryOp::And, left, right, .. } => {
                    walk(*left, out);
                    walk(*right, out);
                }
                other => out.push(other),
            }
        }
        walk(self, &mut out);
        out
    }

    /// `a AND b AND ...`; `None` for an empty list. The tree is balanced, so thousands
    /// of conjuncts nest only logarithmically deep (every walk over it recurses).
    pub fn conjunction(parts: impl IntoIterator<Item = Expr>) -> Option<Expr> {
        balanced(BinaryOp::And, parts.into_iter().collect())
    }

    /// `a OR b OR ...`; `None` for an empty list (balanced like [`Expr::conjunction`]).
    pub fn disjunction(parts: impl IntoIterator<Item = Expr>) -> Option<Expr> {
        balanced(BinaryOp::Or, parts.into_iter().collect())
    }

    /// Splits a disjunction into its parts.
    pub fn split_disjunction(&self) -> Vec<&Expr> {
        match self {
            Expr::Binary { op: BinaryOp::Or, left, right, .. } => {
                let mut parts = left.split_disjunction();
                parts.extend(right.split_disjunction());
                parts
            }
            other => vec![other],
        }
    }
}

/// A balanced tree of one associative boolean operator over `parts` (in order).
fn balanced(op: BinaryOp, mut parts: Vec<Expr>) -> Option<Expr> {
    match parts.len() {
        0 => None,
        1 => parts.pop(),
        n => {
            let right = parts.split_off(n / 2);
            let left = balanced(op, parts)?;
            let right = balanced(op, right)?;
            Some(Expr::binary(op, left, right, DataType::Boolean))
        }
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Column(c) => write!(f, "{}", c.name),
            Expr::Parameter { index, .. } => write!(f, "${}", index + 1),
            Expr::Literal(v, t) => match (v, t) {
                (ScalarValue::Null, _) => write!(f, "NULL"),
                (ScalarValue::Utf8(s), _) => write!(f, "'{}'", s.replace('\'', "''")),
                (ScalarValue::Date(_), _) => write!(f, "DATE '{v}'"),
                (ScalarValue::Timestamp(_), _) => write!(f, "TIMESTAMP '{v}'"),
                (ScalarValue::TimestampTz(_), _) => write!(f, "TIMESTAMPTZ '{v}'"),
                (ScalarValue::Time(_), _) => write!(f, "TIME '{v}'"),
                (ScalarValue::Interval(_), _) => write!(f, "INTERVAL '{v}'"),
                _ => write!(f, "{v}"),
            },
            Expr::Unary(UnaryOp::Not, e) => write!(f, "NOT ({e})"),
            Expr::Unary(UnaryOp::Negate, e) => write!(f, "-({e})"),
            Expr::Binary { op, left, right, .. } => {
                let wrap = |e: &Expr| match e {
                    Expr::Binary { op: inner, .. } if !(inner.is_comparison() && op == &BinaryOp::And) => format!("({e})"),
                    _ => e.to_string(),
                };
                write!(f, "{} {} {}", wrap(left), op.symbol(), wrap(right))
            }
            Expr::IsNull { expr, negated } => write!(f, "{expr} IS {}NULL", if *negated { "NOT " } else { "" }),
            Expr::Cast { expr, to } => write!(f, "CAST({expr} AS {to})"),
            Expr::Case { whens, otherwise, .. } => {
                write!(f, "CASE")?;
                for (when, then) in whens {
                    write!(f, " WHEN {when} THEN {then}")?;
                }
                if let Some(e) = otherwise {
                    write!(f, " ELSE {e}")?;
                }
                write!(f, " END")
            }
            Expr::InList { expr, list, negated } => {
                let items: Vec<String> = list.iter().map(|e| e.to_string()).collect();
                write!(f, "{expr} {}IN ({})", if *negated { "NOT " } else { "" }, items.join(", "))
            }
            Expr::Like { expr, pattern, negated, case_insensitive, .. } => {
                let op = if *case_insensitive { "ILIKE" } else { "LIKE" };
                write!(f, "{expr} {}{op} {pattern}", if *negated { "NOT " } else { "" })
            }
            Expr::Function { func, args, .. } => {
                let items: Vec<String> = args.iter().map(|e| e.to_string()).collect();
                write!(f, "{}({})", func.name(), items.join(", "))
            }
            Expr::Subquery(s) => match &s.kind {
                SubqueryKind::Scalar => write!(f, "(subquery)"),
                SubqueryKind::Exists { negated } => write!(f, "{}EXISTS (subquery)", if *negated { "NOT " } else { "" }),
                SubqueryKind::In { expr, negated } => write!(f, "{expr} {}IN (subquery)", if *negated { "NOT " } else { "" }),
            },
        }
    }
}

/// One ORDER BY key.
#[derive(Clone, Debug, PartialEq)]
pub struct SortKey {
    pub expr: Expr,
    pub ascending: bool,
    pub nulls_first: bool,
}

impl fmt::Display for SortKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.expr, if self.ascending { "ASC" } else { "DESC" })?;
        if self.nulls_first == self.ascending {
            write!(f, " NULLS {}", if self.nulls_first { "FIRST" } else { "LAST" })?;
        }
        Ok(())
    }
}
