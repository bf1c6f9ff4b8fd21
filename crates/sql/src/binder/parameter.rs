//! `$n` parameters, for describing a prepared statement before its values are known.
//!
//! A statement is described by binding it with [`Binder::with_parameters`]: each `$n`
//! binds as a NULL of the parameter's type, so the plan's output types are those the
//! statement will have. A type the client declared is used as given; an undeclared one
//! is inferred from where the parameter stands, as PostgreSQL does for `unknown`:
//!
//! ```text
//!   a = $1, a + $1, $1 BETWEEN a AND b, a IN ($1, $2)   the other operand's type
//!   INSERT INTO t VALUES ($1)                          the column's type
//!   CAST($1 AS DATE), $1::date                         the target type
//!   $1 LIKE ..., $1 || ...                             text
//!   LIMIT $1, OFFSET $1                                BIGINT
//!   anything else (SELECT $1)                          text
//! ```
//!
//! Executing with values ([`Binder::with_parameter_values`]) binds each `$n` as a literal
//! of its value's type; a NULL value takes the type its context gives (as above).
//! A statement planned once for many executions ([`Binder::with_parameter_slots`], with
//! the types its description gave) binds each `$n` as an `Expr::Parameter` slot that
//! each execution fills in before the physical plan is made.

use apiary_common::{bind_err, Result};
use apiary_types::{DataType, ScalarValue};
use sqlparser::ast;

use super::{Binder, Scope};
use crate::expr::Expr;

/// Most parameters a statement may have (the wire protocol counts them in 16 bits).
pub const MAX_PARAMETERS: usize = 65_535;

impl Binder<'_> {
    /// Allows `$n` placeholders; `declared[i]` is the type the client gave `$i+1`
    /// (`None`: infer it).
    pub fn with_parameters(mut self, declared: Vec<Option<DataType>>) -> Self {
        self.parameters = Some(declared);
        self
    }

    /// Binds each `$n` as an [`Expr::Parameter`] of type `types[n-1]`: the statement is
    /// planned once and each execution supplies values ([`Expr::bind_parameters`]).
    /// Where a statement needs a parameter's value to be bound (`LIMIT $1`, a function
    /// argument that must be constant), binding fails and the caller binds the statement
    /// with each execution's values instead.
    pub fn with_parameter_slots(mut self, types: Vec<DataType>) -> Self {
        self.parameters = Some(types.into_iter().map(Some).collect());
        self.parameter_slots = true;
        self
    }

    /// Binds `$n` as the literal `values[n-1]` (a statement executed with parameters).
    pub fn with_parameter_values(mut self, values: Vec<ScalarValue>) -> Self {
        self.parameter_values = Some(values);
        self
    }

    /// The parameter types after binding: declared, inferred, or TEXT when nothing
    /// fixed them. Parameters the statement does not mention are TEXT too.
    pub fn parameter_types(&self) -> Vec<DataType> {
        self.parameters.iter().flatten().map(|t| t.unwrap_or(DataType::Varchar(None))).collect()
    }

    /// The index (0-based) of a `$n` placeholder.
    fn parameter_index(&self, name: &str) -> Result<usize> {
        if self.parameters.is_none() && self.parameter_values.is_none() {
            return Err(bind_err!("there is no parameter {name}"));
        }
        let idx = match name.strip_prefix('$').and_then(|n| n.parse::<usize>().ok()) {
            Some(n) if (1..=MAX_PARAMETERS).contains(&n) => n - 1,
            _ => return Err(bind_err!("invalid parameter {name} (parameters are $1 to ${MAX_PARAMETERS})")),
        };
        if let Some(values) = &self.parameter_values {
            if idx >= values.len() {
                return Err(bind_err!("there is no parameter {name}: the statement was given {} values", values.len()));
            }
        }
        Ok(idx)
    }

    /// Whether `expr` is a `$n` whose type is not known yet (so its context decides).
    pub(crate) fn is_untyped_parameter(&self, expr: &ast::Expr) -> bool {
        let name = match expr {
            ast::Expr::Value(v) => match &v.value {
                ast::Value::Placeholder(name) => name,
                _ => return false,
            },
            ast::Expr::Nested(inner) => return self.is_untyped_parameter(inner),
            _ => return false,
        };
        let Ok(idx) = self.parameter_index(name) else { return false };
        if let Some(values) = &self.parameter_values {
            // A value has its own type; only a NULL takes its context's.
            return values[idx].is_null();
        }
        match &self.parameters {
            Some(parameters) => parameters.get(idx).is_none_or(|t| t.is_none()),
            None => false,
        }
    }

    /// Binds `$n`: a NULL of its type. An untyped parameter takes `hint` if there is
    /// one; without a hint it stays open (TEXT if nothing else fixes it).
    pub(crate) fn bind_placeholder(&mut self, name: &str, hint: Option<DataType>) -> Result<Expr> {
        let idx = self.parameter_index(name)?;
        if let Some(values) = &self.parameter_values {
            let value = values[idx].clone();
            let data_type = match value.data_type() {
                DataType::Null => hint.filter(|t| *t != DataType::Null).unwrap_or(DataType::Varchar(None)),
                known => known,
            };
            return Ok(Expr::Literal(value, data_type));
        }
        let Some(parameters) = self.parameters.as_mut() else {
            return Err(bind_err!("there is no parameter {name}"));
        };
        if parameters.len() <= idx {
            parameters.resize(idx + 1, None);
        }
        let hint = hint.filter(|t| *t != DataType::Null);
        let data_type = match (parameters[idx], hint) {
            (Some(known), _) => known,
            (None, Some(hint)) => {
                parameters[idx] = Some(hint);
                hint
            }
            (None, None) => DataType::Varchar(None),
        };
        if self.parameter_slots {
            return Ok(Expr::Parameter { index: idx, data_type });
        }
        Ok(Expr::Literal(ScalarValue::Null, data_type))
    }

    /// Binds `expr`; an untyped parameter there takes `hint`.
    pub(crate) fn bind_expr_hinted(&mut self, expr: &ast::Expr, scope: &Scope, hint: Option<DataType>) -> Result<Expr> {
        if self.is_untyped_parameter(expr) {
            return self.bind_placeholder(&placeholder_name(expr), hint);
        }
        self.bind_expr(expr, scope)
    }

    /// Binds two operands of one operator; an untyped parameter on one side takes the
    /// other side's type (`||` makes it text).
    pub(crate) fn bind_operands(
        &mut self,
        left: &ast::Expr,
        right: &ast::Expr,
        op: Option<&ast::BinaryOperator>,
        scope: &Scope,
    ) -> Result<(Expr, Expr)> {
        let text_operator = matches!(op, Some(ast::BinaryOperator::StringConcat));
        if text_operator {
            let text = Some(DataType::Varchar(None));
            return Ok((self.bind_expr_hinted(left, scope, text)?, self.bind_expr_hinted(right, scope, text)?));
        }
        if self.is_untyped_parameter(left) && !self.is_untyped_parameter(right) {
            let r = self.bind_expr(right, scope)?;
            let l = self.bind_expr_hinted(left, scope, Some(r.data_type()))?;
            return Ok((l, r));
        }
        let l = self.bind_expr(left, scope)?;
        let r = self.bind_expr_hinted(right, scope, Some(l.data_type()))?;
        Ok((l, r))
    }
}

/// The `$n` text of an expression [`Binder::is_untyped_parameter`] accepted.
fn placeholder_name(expr: &ast::Expr) -> String {
    match expr {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::Placeholder(name) => name.clone(),
            _ => String::new(),
        },
        ast::Expr::Nested(inner) => placeholder_name(inner),
        _ => String::new(),
    }
}
