//! Binding expressions: name resolution, literals, operators with type coercion,
//! CASE / IN / LIKE / BETWEEN, casts and subqueries.

use apiary_common::{bind_err, not_impl_err, type_err, ApiaryError, Result};
use apiary_types::datetime::{DateField, Interval};
use apiary_types::decimal::parse_decimal_literal;
use apiary_types::{DataType, ScalarValue};
use sqlparser::ast;

use super::{convert_data_type, AggregateCollector, Binder, Scope, MAX_EXPRESSION_DEPTH};
use crate::coercion::{arithmetic_types, can_assign, common_type};
use crate::expr::{AggregateCall, BinaryOp, ColumnRef, Expr, ScalarFunction, Subquery, SubqueryKind, TrimKind, UnaryOp};
use crate::plan::LogicalPlan;

impl Binder<'_> {
    /// Binds an expression. Deep nesting is refused with a clear error instead of
    /// overflowing the stack (every later walk over the expression recurses too); chains
    /// of AND / OR, which generated SQL makes long, are flattened without recursion and
    /// rebuilt as balanced trees, so they have no length limit.
    pub(crate) fn bind_expr(&mut self, expr: &ast::Expr, scope: &Scope) -> Result<Expr> {
        // A GROUP BY key with a subquery, written again in the select list: the key's
        // column (binding it again would give a different subquery that is not grouped).
        if let Some((_, column)) = self.grouped_subquery_keys.iter().find(|(key, _)| key == expr) {
            return Ok(column.expr());
        }
        match expr {
            ast::Expr::BinaryOp { op: op @ (ast::BinaryOperator::And | ast::BinaryOperator::Or), .. } => {
                return self.bind_boolean_chain(op, expr, scope);
            }
            ast::Expr::BinaryOp { .. } => return self.bind_operator_chain(expr, scope),
            _ => {}
        }
        if self.expression_depth >= MAX_EXPRESSION_DEPTH {
            return Err(ApiaryError::TooComplex(format!("expressions are nested more than {MAX_EXPRESSION_DEPTH} levels deep")));
        }
        self.expression_depth += 1;
        let bound = self.bind_expr_node(expr, scope);
        self.expression_depth -= 1;
        bound
    }

    /// `a AND b AND ...` (or OR) of any length: the operands are collected with an
    /// explicit stack, bound one by one, and combined into a balanced tree.
    fn bind_boolean_chain(&mut self, chain_op: &ast::BinaryOperator, expr: &ast::Expr, scope: &Scope) -> Result<Expr> {
        let mut operands = Vec::new();
        let mut pending = vec![expr];
        while let Some(next) = pending.pop() {
            match next {
                ast::Expr::BinaryOp { left, op, right } if op == chain_op => {
                    // Right first, so operands come out left to right.
                    pending.push(right);
                    pending.push(left);
                }
                ast::Expr::Nested(inner) if matches!(inner.as_ref(), ast::Expr::BinaryOp { op, .. } if op == chain_op) => {
                    pending.push(inner)
                }
                other => operands.push(other),
            }
        }
        let symbol = if *chain_op == ast::BinaryOperator::And { "AND" } else { "OR" };
        let mut bound = Vec::with_capacity(operands.len());
        for operand in operands {
            let value = self.bind_expr(operand, scope)?;
            bound.push(self.boolean_condition(value, symbol)?);
        }
        let combined = if *chain_op == ast::BinaryOperator::And { Expr::conjunction(bound) } else { Expr::disjunction(bound) };
        combined.ok_or_else(|| bind_err!("empty {symbol} chain"))
    }

    /// `a + b - c * d ...`: the parser builds left-deep trees, so the left spine is
    /// walked without recursion (its length still counts towards the nesting limit: the
    /// bound tree is as deep).
    fn bind_operator_chain(&mut self, expr: &ast::Expr, scope: &Scope) -> Result<Expr> {
        let mut spine = Vec::new();
        let mut leftmost = expr;
        while let ast::Expr::BinaryOp { left, op, right } = leftmost {
            if matches!(op, ast::BinaryOperator::And | ast::BinaryOperator::Or) {
                break;
            }
            spine.push((op, right.as_ref()));
            leftmost = left.as_ref();
        }
        let depth = self.expression_depth;
        if depth + spine.len() >= MAX_EXPRESSION_DEPTH {
            return Err(ApiaryError::TooComplex(format!("expressions are nested more than {MAX_EXPRESSION_DEPTH} levels deep")));
        }
        self.expression_depth += spine.len();
        let result = (|| {
            // The first operator binds both its operands together, so that a `$n` on
            // either side can take the other side's type.
            let mut bound = match spine.pop() {
                Some((op, right)) => {
                    let (left, right) = self.bind_operands(leftmost, right, Some(op), scope)?;
                    self.bind_binary(op, left, right)?
                }
                None => self.bind_expr(leftmost, scope)?,
            };
            while let Some((op, right)) = spine.pop() {
                let hint = if matches!(op, ast::BinaryOperator::StringConcat) { DataType::Varchar(None) } else { bound.data_type() };
                let right = self.bind_expr_hinted(right, scope, Some(hint))?;
                bound = self.bind_binary(op, bound, right)?;
            }
            Ok(bound)
        })();
        self.expression_depth = depth;
        result
    }

    fn bind_expr_node(&mut self, expr: &ast::Expr, scope: &Scope) -> Result<Expr> {
        use ast::Expr as E;
        let whole = expr;
        match expr {
            E::Identifier(ident) => Ok(self.resolve_column(std::slice::from_ref(ident), scope)?.expr()),
            E::CompoundIdentifier(parts) => Ok(self.resolve_column(parts, scope)?.expr()),
            E::Value(value) => match &value.value {
                ast::Value::Placeholder(name) => self.bind_placeholder(name, None),
                other => bind_value(other),
            },
            E::Nested(inner) => self.bind_expr(inner, scope),
            // Only the default collation exists (clients name it to be explicit).
            E::Collate { expr, collation } if super::system_function::is_default_collation(collation) => self.bind_expr(expr, scope),
            E::TypedString(typed) => {
                let text = match &typed.value.value {
                    ast::Value::SingleQuotedString(s) | ast::Value::DoubleQuotedString(s) => s.clone(),
                    other => return Err(bind_err!("expected a string after {}, found {other}", typed.data_type)),
                };
                let target = convert_data_type(&typed.data_type)?;
                if target == DataType::Interval {
                    let interval = Interval::parse(&text, None).ok_or_else(|| bind_err!("invalid INTERVAL literal '{text}'"))?;
                    return Ok(Expr::Literal(ScalarValue::Interval(interval), DataType::Interval));
                }
                self.cast(Expr::literal(ScalarValue::Utf8(text)), target)
            }
            E::Interval(interval) => bind_interval(interval),
            E::UnaryOp { op, expr } => {
                let operand = self.bind_expr(expr, scope)?;
                match op {
                    ast::UnaryOperator::Not => Ok(Expr::negation(self.boolean_condition(operand, "NOT")?)),
                    ast::UnaryOperator::Plus => {
                        if !operand.data_type().is_numeric() && operand.data_type() != DataType::Null {
                            return Err(type_err!("operator + is not defined for {}", operand.data_type()));
                        }
                        Ok(operand)
                    }
                    ast::UnaryOperator::Minus => negate(operand),
                    other => Err(not_impl_err!("unary operator {other}")),
                }
            }
            E::BinaryOp { left, op, right } => {
                let (l, r) = self.bind_operands(left, right, Some(op), scope)?;
                self.bind_binary(op, l, r)
            }
            E::IsNull(e) => Ok(Expr::IsNull { expr: Box::new(self.bind_expr(e, scope)?), negated: false }),
            E::IsNotNull(e) => Ok(Expr::IsNull { expr: Box::new(self.bind_expr(e, scope)?), negated: true }),
            E::IsTrue(e) | E::IsNotTrue(e) | E::IsFalse(e) | E::IsNotFalse(e) => {
                let operand = self.bind_expr(e, scope)?;
                let operand = self.boolean_condition(operand, "IS TRUE/FALSE")?;
                let want_true = matches!(expr, E::IsTrue(_) | E::IsNotTrue(_));
                let negated = matches!(expr, E::IsNotTrue(_) | E::IsNotFalse(_));
                // x IS TRUE == CASE WHEN x THEN TRUE ELSE FALSE END (never NULL).
                let condition = if want_true { operand } else { Expr::negation(operand) };
                let is = Expr::Case {
                    whens: vec![(condition, Expr::boolean(true))],
                    otherwise: Some(Box::new(Expr::boolean(false))),
                    data_type: DataType::Boolean,
                };
                Ok(if negated { Expr::negation(is) } else { is })
            }
            E::IsDistinctFrom(a, b) | E::IsNotDistinctFrom(a, b) => {
                let l = self.bind_expr(a, scope)?;
                let r = self.bind_expr(b, scope)?;
                let op = if matches!(expr, E::IsDistinctFrom(..)) { BinaryOp::IsDistinctFrom } else { BinaryOp::IsNotDistinctFrom };
                self.bind_comparison(op, l, r)
            }
            E::Between { expr, negated, low, high } => {
                let (value, low) = self.bind_operands(expr, low, None, scope)?;
                let high = self.bind_expr_hinted(high, scope, Some(value.data_type()))?;
                if *negated {
                    let below = self.bind_comparison(BinaryOp::Lt, value.clone(), low)?;
                    let above = self.bind_comparison(BinaryOp::Gt, value, high)?;
                    Ok(Expr::binary(BinaryOp::Or, below, above, DataType::Boolean))
                } else {
                    let lower = self.bind_comparison(BinaryOp::GtEq, value.clone(), low)?;
                    let upper = self.bind_comparison(BinaryOp::LtEq, value, high)?;
                    Ok(Expr::binary(BinaryOp::And, lower, upper, DataType::Boolean))
                }
            }
            E::InList { expr, list, negated } => {
                // A `$n` takes the type of the other side: the value's, or for `$1 IN
                // (...)` the first item's.
                let (value, items) = if self.is_untyped_parameter(expr) {
                    let items: Vec<Expr> = list.iter().map(|e| self.bind_expr(e, scope)).collect::<Result<_>>()?;
                    let hint = items.iter().map(Expr::data_type).find(|t| *t != DataType::Null);
                    (self.bind_expr_hinted(expr, scope, hint)?, items)
                } else {
                    let value = self.bind_expr(expr, scope)?;
                    let hint = Some(value.data_type());
                    let items = list.iter().map(|e| self.bind_expr_hinted(e, scope, hint)).collect::<Result<_>>()?;
                    (value, items)
                };
                self.bind_in_list(value, items, *negated)
            }
            E::Like { negated, any, expr, pattern, escape_char } | E::ILike { negated, any, expr, pattern, escape_char } => {
                if *any {
                    return Err(not_impl_err!("LIKE ANY"));
                }
                // PostgreSQL: backslash escapes by default; ESCAPE '' means no escape.
                let escape = match escape_char {
                    None => Some('\\'),
                    Some(e) => match self.bind_expr(e, scope)? {
                        Expr::Literal(ScalarValue::Utf8(s), _) if s.is_empty() => None,
                        Expr::Literal(ScalarValue::Utf8(s), _) if s.chars().count() == 1 => s.chars().next(),
                        _ => return Err(bind_err!("ESCAPE must be a single character")),
                    },
                };
                let mut value = self.bind_expr_hinted(expr, scope, Some(DataType::Varchar(None)))?;
                let mut pattern = self.bind_expr_hinted(pattern, scope, Some(DataType::Varchar(None)))?;
                for (what, e) in [("left operand", &mut value), ("pattern", &mut pattern)] {
                    let t = e.data_type();
                    if t == DataType::Null {
                        *e = Expr::Literal(ScalarValue::Null, DataType::Varchar(None));
                    } else if !t.is_string() {
                        return Err(type_err!("LIKE {what} must be a string, not {t}"));
                    }
                }
                Ok(Expr::Like {
                    expr: Box::new(value),
                    pattern: Box::new(pattern),
                    negated: *negated,
                    case_insensitive: matches!(whole, E::ILike { .. }),
                    escape,
                })
            }
            E::Case { operand, conditions, else_result, .. } => {
                self.bind_case(operand.as_deref(), conditions, else_result.as_deref(), scope)
            }
            E::Cast { kind, expr, data_type, format } => {
                if format.is_some() {
                    return Err(not_impl_err!("CAST ... FORMAT"));
                }
                if matches!(kind, ast::CastKind::TryCast | ast::CastKind::SafeCast) {
                    let target = convert_data_type(data_type)?;
                    let value = self.bind_expr_hinted(expr, scope, Some(target))?;
                    return self.try_cast(value, target);
                }
                // `'lineitem'::regclass`: the relation's OID (clients look tables up so).
                if is_regclass(data_type) {
                    if let ast::Expr::Value(v) = expr.as_ref() {
                        if let ast::Value::SingleQuotedString(name) = &v.value {
                            return Ok(Expr::literal(ScalarValue::Int32(apiary_types::pg::relation_oid(&name.to_lowercase()))));
                        }
                    }
                }
                let target = convert_data_type(data_type)?;
                let value = self.bind_expr_hinted(expr, scope, Some(target))?;
                self.cast(value, target)
            }
            E::AtTimeZone { timestamp, time_zone } => {
                let value = self.bind_expr(timestamp, scope)?;
                let zone = self.bind_expr(time_zone, scope)?;
                self.bind_at_time_zone(value, zone)
            }
            E::Extract { field, expr, .. } => {
                let field = convert_date_field(field)?;
                let value = self.bind_expr(expr, scope)?;
                self.bind_extract(field, value)
            }
            E::Substring { expr, substring_from, substring_for, .. } => {
                let mut args = vec![self.bind_expr(expr, scope)?];
                args.push(match substring_from {
                    Some(from) => self.bind_expr(from, scope)?,
                    None => Expr::literal(ScalarValue::Int64(1)),
                });
                if let Some(length) = substring_for {
                    args.push(self.bind_expr(length, scope)?);
                }
                self.bind_scalar_function("substring", args)
            }
            E::Trim { expr, trim_where, trim_what, trim_characters } => {
                if trim_characters.is_some() {
                    return Err(not_impl_err!("TRIM with a character list"));
                }
                let mut args = vec![self.bind_expr(expr, scope)?];
                if let Some(what) = trim_what {
                    args.push(self.bind_expr(what, scope)?);
                }
                let name = match trim_where {
                    None | Some(ast::TrimWhereField::Both) => "trim",
                    Some(ast::TrimWhereField::Leading) => "ltrim",
                    Some(ast::TrimWhereField::Trailing) => "rtrim",
                };
                self.bind_scalar_function(name, args)
            }
            E::Position { expr, r#in } => {
                let needle = self.bind_expr(expr, scope)?;
                let haystack = self.bind_expr(r#in, scope)?;
                self.bind_scalar_function("strpos", vec![haystack, needle])
            }
            E::Ceil { expr, field } | E::Floor { expr, field } => {
                if !matches!(field, ast::CeilFloorKind::DateTimeField(ast::DateTimeField::NoDateTime)) {
                    return Err(not_impl_err!("CEIL/FLOOR with a field or scale"));
                }
                let value = self.bind_expr(expr, scope)?;
                self.bind_scalar_function(if matches!(whole, E::Ceil { .. }) { "ceil" } else { "floor" }, vec![value])
            }
            E::Function(function) => self.bind_function(function, scope),
            E::Subquery(query) => {
                let (plan, columns) = self.bind_subquery(query, scope)?;
                if columns.len() != 1 {
                    return Err(bind_err!("subquery must return only one column, not {}", columns.len()));
                }
                let mut output = columns[0].clone();
                output.nullable = true;
                Ok(Expr::Subquery(Box::new(Subquery { kind: SubqueryKind::Scalar, plan: Box::new(plan), output: Some(output) })))
            }
            E::Exists { subquery, negated } => {
                let (plan, _) = self.bind_subquery(subquery, scope)?;
                Ok(Expr::Subquery(Box::new(Subquery {
                    kind: SubqueryKind::Exists { negated: *negated },
                    plan: Box::new(plan),
                    output: None,
                })))
            }
            E::InSubquery { expr, subquery, negated } => {
                if let E::Tuple(items) = expr.as_ref() {
                    // `(a, b) IN (SELECT x, y ...)`: = ANY over rows.
                    let values = items.iter().map(|item| self.bind_expr(item, scope)).collect::<Result<Vec<_>>>()?;
                    let found = self.bind_quantified(values, BinaryOp::Eq, true, subquery, scope)?;
                    return Ok(if *negated { Expr::Unary(UnaryOp::Not, Box::new(found)) } else { found });
                }
                let value = self.bind_expr(expr, scope)?;
                self.bind_in_subquery(value, subquery, *negated, scope)
            }
            E::AnyOp { left, compare_op, right, .. } | E::AllOp { left, compare_op, right } => {
                let is_any = matches!(expr, E::AnyOp { .. });
                let ast::Expr::Subquery(query) = right.as_ref() else {
                    return Err(not_impl_err!("ANY/ALL over a non-subquery"));
                };
                let values = match left.as_ref() {
                    E::Tuple(items) => items.iter().map(|item| self.bind_expr(item, scope)).collect::<Result<Vec<_>>>()?,
                    other => vec![self.bind_expr(other, scope)?],
                };
                match (compare_op, is_any, values.len()) {
                    // The joins IN and NOT IN become.
                    (ast::BinaryOperator::Eq, true, 1) | (ast::BinaryOperator::NotEq, false, 1) => {
                        let value = values.into_iter().next().expect("one value");
                        self.bind_in_subquery(value, query, !is_any, scope)
                    }
                    (ast::BinaryOperator::Eq, _, _) => self.bind_quantified(values, BinaryOp::Eq, is_any, query, scope),
                    (ast::BinaryOperator::NotEq, _, _) => self.bind_quantified(values, BinaryOp::NotEq, is_any, query, scope),
                    (op, _, 1) => {
                        let op = match op {
                            ast::BinaryOperator::Lt => BinaryOp::Lt,
                            ast::BinaryOperator::LtEq => BinaryOp::LtEq,
                            ast::BinaryOperator::Gt => BinaryOp::Gt,
                            ast::BinaryOperator::GtEq => BinaryOp::GtEq,
                            other => return Err(not_impl_err!("{other} {}", if is_any { "ANY" } else { "ALL" })),
                        };
                        self.bind_quantified(values, op, is_any, query, scope)
                    }
                    (op, _, _) => Err(not_impl_err!("row comparison with {op} {}", if is_any { "ANY" } else { "ALL" })),
                }
            }
            other => Err(not_impl_err!("expression {other}")),
        }
    }

    fn bind_subquery(&mut self, query: &ast::Query, scope: &Scope) -> Result<(LogicalPlan, Vec<ColumnRef>)> {
        self.outer_scopes.push(scope.clone());
        let collector = matches!(self.aggregate_stack.last(), Some(Some(_))).then(|| self.aggregate_stack.len() - 1);
        self.outer_aggregates.push(collector);
        self.aggregate_stack.push(None);
        let grouped_keys = std::mem::take(&mut self.grouped_subquery_keys);
        let bound = self.bind_query_body(query);
        self.grouped_subquery_keys = grouped_keys;
        self.aggregate_stack.pop();
        self.outer_aggregates.pop();
        self.outer_scopes.pop();
        let (plan, columns) = bound?;
        Ok((plan, columns.into_iter().map(|(_, c)| c).collect()))
    }

    /// `values op ANY (query)` (`any`) or `values op ALL (query)`, one value per column of
    /// the subquery (a row: `=` compares every column, `<>` is true when any differs), with
    /// PostgreSQL's three-valued logic: ANY is TRUE when some row compares TRUE, else NULL
    /// when some row compares NULL, else FALSE (also without rows); ALL is FALSE when some
    /// row compares FALSE, else NULL when some compares NULL, else TRUE. Computed as a
    /// scalar subquery over the rows (correlated with the values, which decorrelation
    /// turns into a join):
    ///
    /// ```text
    /// (SELECT CASE WHEN bool_or(hit) THEN any WHEN bool_or(c IS NULL) THEN NULL ELSE NOT any END
    ///  FROM query)        -- c: the comparison; hit: c for ANY, NOT c for ALL
    /// ```
    fn bind_quantified(&mut self, mut values: Vec<Expr>, op: BinaryOp, any: bool, query: &ast::Query, scope: &Scope) -> Result<Expr> {
        use crate::expr::{AggregateCall, AggregateFunction, UnaryOp};
        if values.len() == 1 && matches!(op, BinaryOp::Lt | BinaryOp::LtEq | BinaryOp::Gt | BinaryOp::GtEq) {
            let value = values.pop().expect("one value");
            return self.bind_ordered_quantified(value, op, any, query, scope);
        }
        let (plan, columns) = self.bind_subquery(query, scope)?;
        if columns.len() != values.len() {
            return Err(bind_err!(
                "subquery has too {} columns ({} against {} values)",
                if columns.len() > values.len() { "many" } else { "few" },
                columns.len(),
                values.len()
            ));
        }
        let mut comparisons = Vec::with_capacity(values.len());
        for (value, column) in values.into_iter().zip(&columns) {
            comparisons.push(self.bind_comparison(op, value, column.expr())?);
        }
        let compared = if op == BinaryOp::NotEq { Expr::disjunction(comparisons) } else { Expr::conjunction(comparisons) }
            .ok_or_else(|| bind_err!("a comparison with a subquery needs at least one column"))?;
        let hit = if any { compared.clone() } else { Expr::Unary(UnaryOp::Not, Box::new(compared.clone())) };
        let unknown = Expr::IsNull { expr: Box::new(compared), negated: false };
        let hit_column = self.new_column("hit", DataType::Boolean, true);
        let unknown_column = self.new_column("unknown", DataType::Boolean, true);
        let bool_or = |arg: Expr| AggregateCall::new(AggregateFunction::BoolOr, vec![arg], false, None, DataType::Boolean);
        let aggregated = LogicalPlan::Aggregate {
            groups: Vec::new(),
            aggregates: vec![(bool_or(hit), hit_column.clone()), (bool_or(unknown), unknown_column.clone())],
            grouping_sets: None,
            input: Box::new(plan),
        };
        let outcome = Expr::Case {
            whens: vec![
                (hit_column.expr(), Expr::boolean(any)),
                (unknown_column.expr(), Expr::Literal(ScalarValue::Null, DataType::Boolean)),
            ],
            otherwise: Some(Box::new(Expr::boolean(!any))),
            data_type: DataType::Boolean,
        };
        let output = self.new_column("quantified", DataType::Boolean, true);
        let projected = LogicalPlan::Project { exprs: vec![(outcome, output.clone())], input: Box::new(aggregated) };
        Ok(Expr::Subquery(Box::new(Subquery { kind: SubqueryKind::Scalar, plan: Box::new(projected), output: Some(output) })))
    }

    /// `value op ANY/ALL (query)` for `<`, `<=`, `>`, `>=`: only the subquery's smallest or
    /// largest value matters (`x > ANY` is `x > min`, `x > ALL` is `x > max`), with its row
    /// count and non-NULL count for the three-valued logic; each is a scalar aggregate
    /// subquery, so an uncorrelated subquery is computed once:
    ///
    /// ```text
    /// ANY: CASE WHEN count = 0 THEN FALSE WHEN x op e THEN TRUE
    ///           WHEN x IS NULL OR non_null < count THEN NULL ELSE FALSE END
    /// ALL: CASE WHEN count = 0 THEN TRUE WHEN NOT (x op e) THEN FALSE
    ///           WHEN x op e AND non_null = count THEN TRUE ELSE NULL END
    /// ```
    fn bind_ordered_quantified(&mut self, value: Expr, op: BinaryOp, any: bool, query: &ast::Query, scope: &Scope) -> Result<Expr> {
        use crate::expr::{AggregateCall, AggregateFunction, UnaryOp};
        // x > ANY and x < ALL compare with the smallest value, x < ANY and x > ALL with the largest.
        let smallest = matches!(op, BinaryOp::Gt | BinaryOp::GtEq) == any;
        let extreme_function = if smallest { AggregateFunction::Min } else { AggregateFunction::Max };
        let aggregate = |binder: &mut Self, function: Option<AggregateFunction>| -> Result<Expr> {
            let (plan, columns) = binder.bind_subquery(query, scope)?;
            if columns.len() != 1 {
                return Err(bind_err!("subquery has too many columns ({} against 1 value)", columns.len()));
            }
            let column = columns[0].clone();
            let (call, data_type) = match function {
                None => (AggregateCall::new(AggregateFunction::CountStar, Vec::new(), false, None, DataType::BigInt), DataType::BigInt),
                Some(AggregateFunction::Count) => {
                    (AggregateCall::new(AggregateFunction::Count, vec![column.expr()], false, None, DataType::BigInt), DataType::BigInt)
                }
                Some(f) => (AggregateCall::new(f, vec![column.expr()], false, None, column.data_type), column.data_type),
            };
            let output = binder.new_column(&column.name, data_type, true);
            let plan = LogicalPlan::Aggregate {
                groups: Vec::new(),
                aggregates: vec![(call, output.clone())],
                grouping_sets: None,
                input: Box::new(plan),
            };
            Ok(Expr::Subquery(Box::new(Subquery { kind: SubqueryKind::Scalar, plan: Box::new(plan), output: Some(output) })))
        };
        let extreme = aggregate(self, Some(extreme_function))?;
        let count = aggregate(self, None)?;
        let non_null = aggregate(self, Some(AggregateFunction::Count))?;
        let compared = self.bind_comparison(op, value.clone(), extreme)?;
        let zero = Expr::literal(ScalarValue::Int64(0));
        let null = Expr::Literal(ScalarValue::Null, DataType::Boolean);
        let empty = Expr::compare(BinaryOp::Eq, count.clone(), zero);
        let whens = if any {
            let unknown = Expr::binary(
                BinaryOp::Or,
                Expr::IsNull { expr: Box::new(value), negated: false },
                Expr::compare(BinaryOp::Lt, non_null, count),
                DataType::Boolean,
            );
            vec![(empty, Expr::boolean(false)), (compared, Expr::boolean(true)), (unknown, null)]
        } else {
            let complete = Expr::binary(BinaryOp::And, compared.clone(), Expr::compare(BinaryOp::Eq, non_null, count), DataType::Boolean);
            vec![
                (empty, Expr::boolean(true)),
                (Expr::Unary(UnaryOp::Not, Box::new(compared)), Expr::boolean(false)),
                (complete, Expr::boolean(true)),
            ]
        };
        let otherwise = if any { Expr::boolean(false) } else { Expr::Literal(ScalarValue::Null, DataType::Boolean) };
        Ok(Expr::Case { whens, otherwise: Some(Box::new(otherwise)), data_type: DataType::Boolean })
    }

    fn bind_in_subquery(&mut self, value: Expr, query: &ast::Query, negated: bool, scope: &Scope) -> Result<Expr> {
        let (plan, columns) = self.bind_subquery(query, scope)?;
        if columns.len() != 1 {
            return Err(bind_err!("subquery has too many columns for IN ({})", columns.len()));
        }
        let inner = columns[0].clone();
        let common = common_type(&value.data_type(), &inner.data_type)
            .ok_or_else(|| type_err!("cannot compare {} with subquery column of type {}", value.data_type(), inner.data_type))?;
        let value = self.coerce(value, &common)?;
        let (plan, output) = if inner.data_type.physical() != common.physical() {
            let cast = self.coerce(inner.expr(), &common)?;
            let output = self.new_column(&inner.name, common, inner.nullable);
            (LogicalPlan::Project { exprs: vec![(cast, output.clone())], input: Box::new(plan) }, output)
        } else {
            (plan, inner)
        };
        Ok(Expr::Subquery(Box::new(Subquery {
            kind: SubqueryKind::In { expr: Box::new(value), negated },
            plan: Box::new(plan),
            output: Some(output),
        })))
    }

    fn bind_binary(&mut self, op: &ast::BinaryOperator, left: Expr, right: Expr) -> Result<Expr> {
        use ast::BinaryOperator as B;
        if let Some((negated, case_insensitive)) = super::system_function::regex_operator(op) {
            return self.bind_regex_match(left, right, negated, case_insensitive);
        }
        let op = match op {
            B::Plus => BinaryOp::Add,
            B::Minus => BinaryOp::Sub,
            B::Multiply => BinaryOp::Mul,
            // DuckDB's `//`: integer division for integers, which is what `/` does (as
            // in PostgreSQL), and plain division otherwise (as DuckDB).
            B::Divide | B::DuckIntegerDivide => BinaryOp::Div,
            B::Modulo => BinaryOp::Mod,
            B::Eq => BinaryOp::Eq,
            B::NotEq => BinaryOp::NotEq,
            B::Lt => BinaryOp::Lt,
            B::LtEq => BinaryOp::LtEq,
            B::Gt => BinaryOp::Gt,
            B::GtEq => BinaryOp::GtEq,
            B::And => BinaryOp::And,
            B::Or => BinaryOp::Or,
            B::StringConcat => BinaryOp::Concat,
            other => return Err(not_impl_err!("operator {other}")),
        };
        match op {
            BinaryOp::And | BinaryOp::Or => {
                let l = self.boolean_condition(left, op.symbol())?;
                let r = self.boolean_condition(right, op.symbol())?;
                Ok(Expr::binary(op, l, r, DataType::Boolean))
            }
            BinaryOp::Concat => {
                let l = self.to_text(left)?;
                let r = self.to_text(right)?;
                Ok(Expr::binary(op, l, r, DataType::Varchar(None)))
            }
            op if op.is_comparison() => self.bind_comparison(op, left, right),
            op => self.bind_arithmetic(op, left, right),
        }
    }

    fn to_text(&self, expr: Expr) -> Result<Expr> {
        let t = expr.data_type();
        if t.is_string() {
            Ok(expr)
        } else if t == DataType::Null {
            Ok(Expr::Literal(ScalarValue::Null, DataType::Varchar(None)))
        } else {
            self.cast(expr, DataType::Varchar(None))
        }
    }

    pub(crate) fn bind_comparison(&self, op: BinaryOp, left: Expr, right: Expr) -> Result<Expr> {
        let (left, right) = self.unify_string_literal(left, right)?;
        // CHAR(n) ignores trailing blanks: values are stored without them, so a literal
        // compared with a CHAR loses its trailing blanks too.
        let trim_for_char = |e: Expr, other: &Expr| match (e, other.data_type()) {
            (Expr::Literal(ScalarValue::Utf8(s), t), DataType::Char(_)) => {
                Expr::Literal(ScalarValue::Utf8(s.trim_end_matches(' ').to_string()), t)
            }
            (e, _) => e,
        };
        let left = trim_for_char(left, &right);
        let right = trim_for_char(right, &left);
        let (lt, rt) = (left.data_type(), right.data_type());
        let common = common_type(&lt, &rt).ok_or_else(|| type_err!("operator {} cannot compare {lt} with {rt}", op.symbol()))?;
        if common == DataType::Interval
            && !matches!(op, BinaryOp::Eq | BinaryOp::NotEq)
            && lt != rt
            && lt != DataType::Null
            && rt != DataType::Null
        {
            return Err(type_err!("operator {} cannot compare {lt} with {rt}", op.symbol()));
        }
        Ok(Expr::compare(op, self.coerce(left, &common)?, self.coerce(right, &common)?))
    }

    /// A string literal compared with (or combined with) a non-string value takes the
    /// other side's type, as an untyped literal does in PostgreSQL (`d > '1995-01-01'`).
    fn unify_string_literal(&self, left: Expr, right: Expr) -> Result<(Expr, Expr)> {
        let is_text_literal = |e: &Expr| matches!(e, Expr::Literal(ScalarValue::Utf8(_), _));
        let (lt, rt) = (left.data_type(), right.data_type());
        if is_text_literal(&left) && !rt.is_string() && rt != DataType::Null {
            return Ok((self.cast(left, rt)?, right));
        }
        if is_text_literal(&right) && !lt.is_string() && lt != DataType::Null {
            return Ok((left, self.cast(right, lt)?));
        }
        Ok((left, right))
    }

    fn bind_arithmetic(&self, op: BinaryOp, left: Expr, right: Expr) -> Result<Expr> {
        let (left, right) = self.unify_string_literal(left, right)?;
        let types = arithmetic_types(op, &left.data_type(), &right.data_type())?;
        let left = self.coerce(left, &types.left)?;
        let right = self.coerce(right, &types.right)?;
        Ok(Expr::binary(op, left, right, types.result))
    }

    fn bind_in_list(&self, value: Expr, items: Vec<Expr>, negated: bool) -> Result<Expr> {
        let mut common = value.data_type();
        let mut unified = Vec::with_capacity(items.len());
        for item in items {
            let (v, item) = self.unify_string_literal(value.clone(), item)?;
            let _ = v;
            common = common_type(&common, &item.data_type())
                .ok_or_else(|| type_err!("IN list item of type {} cannot be compared with {}", item.data_type(), value.data_type()))?;
            unified.push(item);
        }
        let value = self.coerce(value, &common)?;
        let list = unified.into_iter().map(|e| self.coerce(e, &common)).collect::<Result<Vec<_>>>()?;
        Ok(Expr::InList { expr: Box::new(value), list, negated })
    }

    fn bind_case(
        &mut self,
        operand: Option<&ast::Expr>,
        conditions: &[ast::CaseWhen],
        else_result: Option<&ast::Expr>,
        scope: &Scope,
    ) -> Result<Expr> {
        let operand = operand.map(|o| self.bind_expr(o, scope)).transpose()?;
        let mut whens = Vec::new();
        for case_when in conditions {
            let hint = operand.as_ref().map(Expr::data_type);
            let when = self.bind_expr_hinted(&case_when.condition, scope, hint)?;
            let when = match &operand {
                Some(o) => self.bind_comparison(BinaryOp::Eq, o.clone(), when)?,
                None => self.boolean_condition(when, "CASE WHEN")?,
            };
            let then = self.bind_expr(&case_when.result, scope)?;
            whens.push((when, then));
        }
        let otherwise = else_result.map(|e| self.bind_expr(e, scope)).transpose()?;
        let mut result_type = DataType::Null;
        for t in whens.iter().map(|(_, t)| t.data_type()).chain(otherwise.iter().map(|e| e.data_type())) {
            result_type = common_type(&result_type, &t).ok_or_else(|| type_err!("CASE types {result_type} and {t} cannot be matched"))?;
        }
        let whens = whens.into_iter().map(|(w, t)| Ok((w, self.coerce(t, &result_type)?))).collect::<Result<Vec<_>>>()?;
        let otherwise = otherwise.map(|e| self.coerce(e, &result_type)).transpose()?.map(Box::new);
        Ok(Expr::Case { whens, otherwise, data_type: result_type })
    }

    fn bind_extract(&mut self, field: DateField, value: Expr) -> Result<Expr> {
        let value = match value.data_type() {
            DataType::Date | DataType::Timestamp | DataType::TimestampTz | DataType::Time => value,
            t if t.is_string() => self.cast(value, DataType::Timestamp)?,
            DataType::Null => Expr::Literal(ScalarValue::Null, DataType::Date),
            t => return Err(type_err!("EXTRACT needs a DATE, TIMESTAMP, TIMESTAMPTZ or TIME, not {t}")),
        };
        extract_call(field, value)
    }

    /// `value AT TIME ZONE zone` (and `timezone(zone, value)`): a TIMESTAMP (or DATE)
    /// read in `zone` becomes a TIMESTAMPTZ; a TIMESTAMPTZ (or text) becomes the
    /// TIMESTAMP of its wall-clock time in `zone`. The zone is text or an INTERVAL.
    pub(crate) fn bind_at_time_zone(&mut self, value: Expr, zone: Expr) -> Result<Expr> {
        let value = match value.data_type() {
            DataType::Timestamp | DataType::TimestampTz => value,
            // PostgreSQL resolves text and DATE to its preferred TIMESTAMPTZ here.
            DataType::Date | DataType::Null => self.cast(value, DataType::TimestampTz)?,
            t if t.is_string() => self.cast(value, DataType::TimestampTz)?,
            DataType::Time => return Err(not_impl_err!("TIME AT TIME ZONE (TIME WITH TIME ZONE is not supported)")),
            t => return Err(type_err!("AT TIME ZONE needs a TIMESTAMP or TIMESTAMPTZ, not {t}")),
        };
        let zone = match zone.data_type() {
            DataType::Interval => zone,
            DataType::Null => Expr::Literal(ScalarValue::Null, DataType::Varchar(None)),
            t if t.is_string() => zone,
            t => return Err(type_err!("the time zone of AT TIME ZONE must be text or an INTERVAL, not {t}")),
        };
        // A constant zone is checked here, so a misspelt one is an error even without rows.
        match &zone {
            Expr::Literal(ScalarValue::Utf8(name), _) if apiary_types::TimeZone::for_at_time_zone(name).is_none() => {
                return Err(ApiaryError::Execution(format!("time zone \"{name}\" not recognized")));
            }
            Expr::Literal(ScalarValue::Interval(i), _) if i.months != 0 || i.days != 0 => {
                return Err(ApiaryError::Execution(format!("interval time zone \"{i}\" must not include months or days")));
            }
            _ => {}
        }
        let data_type = if value.data_type() == DataType::Timestamp { DataType::TimestampTz } else { DataType::Timestamp };
        Ok(Expr::Function { func: ScalarFunction::AtTimeZone, args: vec![value, zone], data_type })
    }

    fn bind_function(&mut self, function: &ast::Function, scope: &Scope) -> Result<Expr> {
        let name = super::system_function::function_name(&function.name)?;
        if let Some(expr) = self.bind_system_function(&name, function, scope)? {
            return Ok(expr);
        }
        if function.over.is_some() {
            return self.bind_window_call(&name, function, scope);
        }
        if name == "grouping" || name == "grouping_id" {
            return self.bind_grouping(function, scope);
        }
        let (arg_list, distinct, order_by) = function_arguments_with_order(function, &name)?;
        if super::is_aggregate_function(&name) {
            let ordering = AggregateOrdering { order_by: &order_by, within_group: &function.within_group };
            return self.bind_aggregate(&name, &arg_list, distinct, function.filter.as_deref(), ordering, scope);
        }
        if !function.within_group.is_empty() {
            return Err(bind_err!("WITHIN GROUP specified, but {name} is not an aggregate function"));
        }
        if !order_by.is_empty() {
            return Err(bind_err!("ORDER BY specified, but {name} is not an aggregate function"));
        }
        if distinct {
            return Err(bind_err!("DISTINCT specified, but {name} is not an aggregate function"));
        }
        if function.filter.is_some() {
            return Err(bind_err!("FILTER specified, but {name} is not an aggregate function"));
        }
        let mut args = Vec::new();
        for (position, arg) in arg_list.iter().enumerate() {
            match arg {
                // PostgreSQL's `nextval('s'::regclass)` (as pg_dump and \d show defaults).
                ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(ast::Expr::Cast {
                    expr, data_type: ast::DataType::Regclass, ..
                })) if position == 0 && (name == "nextval" || name == "setval") => args.push(self.bind_expr(expr, scope)?),
                ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) => args.push(self.bind_expr(e, scope)?),
                other => return Err(bind_err!("unsupported argument {other} to function {name}")),
            }
        }
        self.bind_scalar_function(&name, args)
    }

    fn bind_aggregate(
        &mut self,
        name: &str,
        arg_list: &[ast::FunctionArg],
        distinct: bool,
        filter: Option<&ast::Expr>,
        ordering: AggregateOrdering,
        scope: &Scope,
    ) -> Result<Expr> {
        // Arguments are bound with aggregates disallowed (no nesting).
        self.aggregate_stack.push(None);
        let bind_keys = |binder: &mut Self, keys: &[ast::OrderByExpr]| -> Result<Vec<crate::expr::SortKey>> {
            keys.iter().map(|k| super::query::sort_key(binder.bind_expr(&k.expr, scope)?, &k.options)).collect()
        };
        let order_by = bind_keys(self, ordering.order_by);
        let within_group = bind_keys(self, ordering.within_group);
        let mut star = false;
        let mut args = Vec::new();
        let mut result = Ok(());
        for arg in arg_list {
            match arg {
                ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Wildcard) => star = true,
                ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) => match self.bind_expr(e, scope) {
                    Ok(bound) => args.push(bound),
                    Err(err) => {
                        result = Err(err);
                        break;
                    }
                },
                other => {
                    result = Err(bind_err!("unsupported argument {other} to aggregate {name}"));
                    break;
                }
            }
        }
        let filter = match (&result, filter) {
            (Ok(()), Some(f)) => Some(self.bind_expr(f, scope).and_then(|f| self.boolean_condition(f, "FILTER"))),
            _ => None,
        };
        self.aggregate_stack.pop();
        result?;
        let filter = filter.transpose()?;
        let call = self.aggregate_call_ordered(name, args, star, distinct, filter, order_by?, within_group?)?;
        let level = self.aggregate_level(&call, scope);
        let collector: &mut AggregateCollector = match level.and_then(|at| self.aggregate_stack.get_mut(at)) {
            Some(Some(c)) => c,
            _ => return Err(bind_err!("aggregate function {name} is not allowed here")),
        };
        if let Some((_, column)) = collector.calls.iter().find(|(c, _)| *c == call) {
            return Ok(column.expr());
        }
        let display = call.to_string();
        use crate::expr::AggregateFunction as F;
        let nullable = !matches!(call.func, F::Count | F::CountStar | F::ApproxCountDistinct | F::RegrCount);
        let column = self.new_column(&display, call.data_type, nullable);
        if let Some(Some(collector)) = level.and_then(|at| self.aggregate_stack.get_mut(at)) {
            collector.calls.push((call, column.clone()));
        }
        Ok(column.expr())
    }

    /// Where in `aggregate_stack` an aggregate call is collected: the current query's
    /// collector, unless its arguments read only columns of enclosing queries — then the
    /// nearest of those queries owns it (`SELECT (SELECT sum(o.x)) FROM o` sums over `o`).
    fn aggregate_level(&self, call: &AggregateCall, scope: &Scope) -> Option<usize> {
        let mut columns = std::collections::BTreeSet::new();
        for arg in call.args.iter().chain(call.filter.as_deref()) {
            arg.collect_columns(&mut columns);
        }
        let current = self.aggregate_stack.len().checked_sub(1);
        let in_scope = |s: &Scope| s.columns.iter().any(|c| columns.contains(&c.column.id));
        if columns.is_empty() || in_scope(scope) {
            return current;
        }
        match self.outer_scopes.iter().rposition(in_scope) {
            Some(level) => self.outer_aggregates[level],
            None => current,
        }
    }

    /// Requires a BOOLEAN (or NULL) expression.
    pub(crate) fn boolean_condition(&self, expr: Expr, clause: &str) -> Result<Expr> {
        match expr.data_type() {
            DataType::Boolean => Ok(expr),
            DataType::Null => Ok(Expr::Literal(ScalarValue::Null, DataType::Boolean)),
            other => Err(type_err!("argument of {clause} must be BOOLEAN, not {other}")),
        }
    }

    /// Implicit conversion of `expr` to `to` (operands of operators, CASE branches, UNION).
    pub(crate) fn coerce(&self, expr: Expr, to: &DataType) -> Result<Expr> {
        let from = expr.data_type();
        if from == *to || (from.is_string() && to.is_string()) {
            return Ok(expr);
        }
        self.cast(expr, *to)
    }

    /// An explicit cast; constants are converted right away (so `DATE 'x'` errors here).
    pub(crate) fn cast(&self, expr: Expr, to: DataType) -> Result<Expr> {
        let from = expr.data_type();
        if from == to {
            return Ok(expr);
        }
        check_castable(&from, &to)?;
        match expr {
            Expr::Literal(value, _) => Ok(Expr::Literal(value.cast_to_in(&to, &self.time_zone)?, to)),
            other => Ok(Expr::Cast { expr: Box::new(other), to }),
        }
    }

    /// Conversion for INSERT: like an implicit cast, but strings keep their full length
    /// (the engine rejects values that are too long instead of truncating them).
    pub(crate) fn assignment_cast(&self, expr: Expr, to: &DataType, column: &str) -> Result<Expr> {
        let from = expr.data_type();
        if !can_assign(&from, to) {
            return Err(type_err!("column \"{column}\" is of type {to} but the expression is of type {from}"));
        }
        if to.is_string() {
            return self.coerce(expr, &DataType::Varchar(None));
        }
        self.coerce(expr, to)
    }
}

fn check_castable(from: &DataType, to: &DataType) -> Result<()> {
    use DataType::*;
    let ok = from == to
        || *from == Null
        || from.is_string()
        || to.is_string()
        || (from.is_numeric() && to.is_numeric())
        || (from.is_numeric() && *to == Boolean)
        || (*from == Boolean && to.is_numeric())
        || (from.is_datetime() && to.is_datetime())
        || matches!((from, to), (Timestamp | TimestampTz, Time) | (Time, Interval) | (Interval, Time));
    if ok {
        Ok(())
    } else {
        Err(type_err!("cannot cast {from} to {to}"))
    }
}

fn negate(operand: Expr) -> Result<Expr> {
    let t = operand.data_type();
    if !t.is_numeric() && t != DataType::Interval && t != DataType::Null {
        return Err(type_err!("operator - is not defined for {t}"));
    }
    if let Expr::Literal(value, t) = &operand {
        let negated = match value {
            ScalarValue::Int16(v) => v.checked_neg().map(ScalarValue::Int16),
            ScalarValue::Int32(v) => v.checked_neg().map(ScalarValue::Int32),
            ScalarValue::Int64(v) => v.checked_neg().map(ScalarValue::Int64),
            ScalarValue::Float32(v) => Some(ScalarValue::Float32(-v)),
            ScalarValue::Float64(v) => Some(ScalarValue::Float64(-v)),
            ScalarValue::Decimal(v, p, s) => Some(ScalarValue::Decimal(-v, *p, *s)),
            ScalarValue::Interval(i) => i.checked_neg().map(ScalarValue::Interval),
            ScalarValue::Null => Some(ScalarValue::Null),
            _ => None,
        };
        if let Some(v) = negated {
            return Ok(Expr::Literal(v, *t));
        }
    }
    if t == DataType::Null {
        // A column of untyped NULLs (`SELECT NULL AS x`): the negation is an INTEGER NULL.
        return Ok(Expr::Literal(ScalarValue::Null, DataType::Integer));
    }
    Ok(Expr::Unary(UnaryOp::Negate, Box::new(operand)))
}

fn bind_value(value: &ast::Value) -> Result<Expr> {
    use ast::Value as V;
    Ok(match value {
        V::Number(text, _) => Expr::literal(parse_number(text)?),
        V::SingleQuotedString(s) | V::EscapedStringLiteral(s) | V::NationalStringLiteral(s) | V::TripleSingleQuotedString(s) => {
            Expr::literal(ScalarValue::Utf8(s.clone()))
        }
        V::DollarQuotedString(s) => Expr::literal(ScalarValue::Utf8(s.value.clone())),
        V::Boolean(b) => Expr::boolean(*b),
        V::Null => Expr::Literal(ScalarValue::Null, DataType::Null),
        V::Placeholder(p) => return Err(not_impl_err!("parameter placeholder {p}")),
        other => return Err(not_impl_err!("literal {other}")),
    })
}

/// Integer literals become INTEGER or BIGINT, literals with a point DECIMAL, literals
/// with an exponent DOUBLE.
fn parse_number(text: &str) -> Result<ScalarValue> {
    if let Ok(v) = text.parse::<i32>() {
        return Ok(ScalarValue::Int32(v));
    }
    if let Ok(v) = text.parse::<i64>() {
        return Ok(ScalarValue::Int64(v));
    }
    if text.contains(['e', 'E']) {
        return text.parse::<f64>().map(ScalarValue::Float64).map_err(|_| bind_err!("invalid number {text}"));
    }
    match parse_decimal_literal(text) {
        Some((value, precision, scale)) => Ok(ScalarValue::Decimal(value, precision, scale)),
        None => text.parse::<f64>().map(ScalarValue::Float64).map_err(|_| bind_err!("invalid number {text}")),
    }
}

fn bind_interval(interval: &ast::Interval) -> Result<Expr> {
    if interval.last_field.is_some() {
        return Err(not_impl_err!("INTERVAL ranges (... TO ...)"));
    }
    let text = match interval.value.as_ref() {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::SingleQuotedString(s) => s.clone(),
            ast::Value::Number(n, _) => n.clone(),
            other => return Err(bind_err!("invalid INTERVAL value {other}")),
        },
        other => return Err(not_impl_err!("INTERVAL of a non-literal expression {other}")),
    };
    let unit = interval.leading_field.as_ref().map(|f| f.to_string().to_lowercase());
    let parsed = Interval::parse(&text, unit.as_deref()).ok_or_else(|| bind_err!("invalid INTERVAL literal '{text}'"))?;
    Ok(Expr::Literal(ScalarValue::Interval(parsed), DataType::Interval))
}

fn convert_date_field(field: &ast::DateTimeField) -> Result<DateField> {
    use ast::DateTimeField as F;
    Ok(match field {
        F::Year | F::Years => DateField::Year,
        F::Quarter => DateField::Quarter,
        F::Month | F::Months => DateField::Month,
        F::Week(_) | F::Weeks => DateField::Week,
        F::Day | F::Days => DateField::Day,
        F::DayOfWeek | F::Dow => DateField::DayOfWeek,
        F::DayOfYear | F::Doy => DateField::DayOfYear,
        F::Hour | F::Hours => DateField::Hour,
        F::Minute | F::Minutes => DateField::Minute,
        F::Second | F::Seconds => DateField::Second,
        F::Epoch => DateField::Epoch,
        F::Isodow => DateField::IsoDayOfWeek,
        F::Isoyear => DateField::IsoYear,
        F::IsoWeek => DateField::Week,
        F::Millisecond | F::Milliseconds => DateField::Millisecond,
        F::Microsecond | F::Microseconds => DateField::Microsecond,
        F::Decade => DateField::Decade,
        F::Century => DateField::Century,
        F::Millennium | F::Millenium => DateField::Millennium,
        F::Timezone => DateField::Timezone,
        F::TimezoneHour => DateField::TimezoneHour,
        F::TimezoneMinute => DateField::TimezoneMinute,
        F::Custom(ident) => DateField::parse(&ident.value).ok_or_else(|| bind_err!("unknown date field {}", ident.value))?,
        other => return Err(not_impl_err!("date field {other}")),
    })
}

/// Trim kind for `trim`/`ltrim`/`rtrim`.
pub(crate) fn trim_kind(name: &str) -> TrimKind {
    match name {
        "ltrim" => TrimKind::Leading,
        "rtrim" => TrimKind::Trailing,
        _ => TrimKind::Both,
    }
}

fn is_regclass(data_type: &ast::DataType) -> bool {
    match data_type {
        ast::DataType::Regclass => true,
        ast::DataType::Custom(name, _) => {
            name.0.last().and_then(|p| p.as_ident()).is_some_and(|i| i.value.eq_ignore_ascii_case("regclass"))
        }
        _ => false,
    }
}

/// The ORDER BY keys written inside an aggregate call and after it (`WITHIN GROUP`).
pub(crate) struct AggregateOrdering<'a> {
    order_by: &'a [ast::OrderByExpr],
    within_group: &'a [ast::OrderByExpr],
}

/// [`function_arguments`] that also accepts `ORDER BY` inside the parentheses (aggregate
/// calls: `string_agg(x, ',' ORDER BY y)`), returning its keys.
pub(crate) fn function_arguments_with_order(
    function: &ast::Function,
    name: &str,
) -> Result<(Vec<ast::FunctionArg>, bool, Vec<ast::OrderByExpr>)> {
    let ast::FunctionArguments::List(list) = &function.args else {
        let (args, distinct) = function_arguments(function, name)?;
        return Ok((args, distinct, Vec::new()));
    };
    let mut order_by = Vec::new();
    for clause in &list.clauses {
        match clause {
            ast::FunctionArgumentClause::OrderBy(keys) => order_by.extend(keys.iter().cloned()),
            other => return Err(not_impl_err!("{other} inside the arguments of {name}")),
        }
    }
    Ok((list.args.clone(), matches!(list.duplicate_treatment, Some(ast::DuplicateTreatment::Distinct)), order_by))
}

/// A call's argument list and whether it says DISTINCT (clauses inside the parentheses,
/// such as ORDER BY or LIMIT, and subquery arguments are refused).
pub(crate) fn function_arguments(function: &ast::Function, name: &str) -> Result<(Vec<ast::FunctionArg>, bool)> {
    Ok(match &function.args {
        ast::FunctionArguments::None => (Vec::new(), false),
        ast::FunctionArguments::List(list) => {
            if !list.clauses.is_empty() {
                return Err(not_impl_err!("clauses inside the arguments of {name}"));
            }
            (list.args.clone(), matches!(list.duplicate_treatment, Some(ast::DuplicateTreatment::Distinct)))
        }
        ast::FunctionArguments::Subquery(_) => return Err(not_impl_err!("subquery as function argument")),
    })
}

/// `EXTRACT(field FROM value)` of a DATE, TIMESTAMP, TIMESTAMPTZ or TIME: fields the
/// type does not have are refused as PostgreSQL does (`timezone` of a TIMESTAMP, `day`
/// of a TIME).
pub(crate) fn extract_call(field: DateField, value: Expr) -> Result<Expr> {
    let t = value.data_type();
    let refused = match t {
        DataType::Time => !field.is_time_of_day(),
        DataType::TimestampTz => false,
        _ => field.is_zone(),
    };
    if refused {
        let type_name = apiary_types::pg::pg_type(t).sql_name;
        return Err(not_impl_err!("unit \"{}\" not supported for type {type_name}", field.name()));
    }
    let data_type = if field == DateField::Epoch { DataType::BigInt } else { DataType::Integer };
    Ok(Expr::Function { func: ScalarFunction::Extract(field), args: vec![value], data_type })
}
