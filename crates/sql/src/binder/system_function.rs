//! PostgreSQL's session and catalog functions, and the `pg_catalog` / `information_schema`
//! tables, as clients written for PostgreSQL use them: `version()`,
//! `current_database()`, `current_user`, `pg_table_is_visible(oid)`,
//! `format_type(oid, typmod)`, ... Values about the session come from the
//! [`TableFunctionProvider`](super::TableFunctionProvider) (the engine knows who is
//! connected); functions about objects Apiary does not have (comments, defaults,
//! privileges) answer what is true for Apiary: no comment, no default, allowed.
//!
//! The regular-expression operators (`~`, `!~`, `~*`, `!~*`, also spelled
//! `OPERATOR(pg_catalog.~)`): the patterns psql builds for `\d NAME` (`^(lineitem)$`,
//! `^(line.*)$`, `^pg_toast`: anchors, a group of alternatives, `.`, `.*` and literal
//! characters) are rewritten to LIKE, which has faster kernels; other patterns run as
//! regular expressions (`regexp_matches`).

use std::sync::Arc;

use apiary_common::{bind_err, not_impl_err, ApiaryError, Result};
use apiary_storage::Table;
use apiary_types::pg::ALL_TYPES;
use apiary_types::{DataType, ScalarValue};
use sqlparser::ast;
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;

use super::{normalize_ident, Binder, Scope};
use crate::expr::Expr;

/// Schemas whose tables the engine provides.
const SYSTEM_SCHEMAS: [&str; 2] = ["pg_catalog", "information_schema"];

/// The functions [`Binder::bind_system_function`] knows.
const SYSTEM_FUNCTIONS: [&str; 26] = [
    "version",
    "pg_typeof",
    "current_database",
    "current_catalog",
    "current_schema",
    "current_user",
    "session_user",
    "user",
    "current_role",
    "pg_backend_pid",
    "pg_table_is_visible",
    "pg_type_is_visible",
    "has_table_privilege",
    "has_schema_privilege",
    "has_database_privilege",
    "has_column_privilege",
    "pg_get_userbyid",
    "obj_description",
    "col_description",
    "shobj_description",
    "pg_get_expr",
    "pg_get_constraintdef",
    "pg_get_indexdef",
    "pg_get_viewdef",
    "pg_encoding_to_char",
    "format_type",
];

/// A function's name: `name` or `pg_catalog.name` (PostgreSQL clients qualify built-in
/// functions to be safe from a user's search_path).
pub(crate) fn function_name(name: &ast::ObjectName) -> Result<String> {
    let parts: Vec<String> = name.0.iter().filter_map(|p| p.as_ident()).map(normalize_ident).collect();
    if parts.len() != name.0.len() {
        return Err(not_impl_err!("function name {name}"));
    }
    match parts.as_slice() {
        [function] => Ok(function.clone()),
        [schema, function] if schema == "pg_catalog" || schema == "main" || schema == "public" => Ok(function.clone()),
        _ => Err(bind_err!("function {name} does not exist")),
    }
}

impl Binder<'_> {
    /// A system table named in FROM: `pg_catalog.x` / `information_schema.x`, or an
    /// unqualified `pg_class` that is not a CTE or user table. With the name to label
    /// its scan with.
    pub(crate) fn system_table(&self, name: &ast::ObjectName) -> Result<Option<(Arc<Table>, String)>> {
        let parts: Vec<String> = name.0.iter().filter_map(|p| p.as_ident()).map(normalize_ident).collect();
        if parts.len() != name.0.len() {
            return Ok(None);
        }
        match parts.as_slice() {
            [schema, table] if SYSTEM_SCHEMAS.contains(&schema.as_str()) => match self.table_functions.system_table(Some(schema), table)? {
                Some(found) => Ok(Some((found, table.clone()))),
                None => Err(ApiaryError::Catalog(format!("relation \"{schema}.{table}\" does not exist"))),
            },
            [table]
                if self.lookup_cte(table).is_none()
                    && self.catalog.get_table(table).is_none()
                    && self.catalog.get_view(table).is_none() =>
            {
                Ok(self.table_functions.system_table(None, table)?.map(|found| (found, table.clone())))
            }
            _ => Ok(None),
        }
    }

    /// Binds a PostgreSQL session or catalog function; `None` if `name` is not one.
    pub(crate) fn bind_system_function(&mut self, name: &str, function: &ast::Function, scope: &Scope) -> Result<Option<Expr>> {
        if let Some(attnum) = attribute_row_number(name, function) {
            return self.bind_expr(attnum, scope).map(Some);
        }
        if !SYSTEM_FUNCTIONS.contains(&name) {
            return Ok(None);
        }
        let args: Vec<&ast::Expr> = match &function.args {
            ast::FunctionArguments::None => Vec::new(),
            ast::FunctionArguments::List(list) => list
                .args
                .iter()
                .map(|arg| match arg {
                    ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) => Ok(e),
                    other => Err(bind_err!("unsupported argument {other} to function {name}")),
                })
                .collect::<Result<_>>()?,
            ast::FunctionArguments::Subquery(_) => return Ok(None),
        };
        let text = DataType::Varchar(None);
        let expr = match name {
            // The name of the argument's type, as PostgreSQL's `regtype` prints it.
            "pg_typeof" => {
                self.check_arity(name, &args, 1)?;
                let arg = self.bind_expr(args[0], scope)?;
                let type_name = match arg.data_type() {
                    DataType::Null => "unknown".to_string(),
                    t => apiary_types::pg::pg_type(t).sql_name.to_string(),
                };
                Expr::literal(ScalarValue::Utf8(type_name))
            }
            "version" | "current_database" | "current_catalog" | "current_schema" | "current_user" | "session_user" | "user"
            | "current_role" | "pg_backend_pid" => {
                self.check_arity(name, &args, 0)?;
                let value = self
                    .table_functions
                    .session_value(name)
                    .ok_or_else(|| bind_err!("function {name}() is not available in this context"))?;
                Expr::literal(value)
            }
            // Every Apiary table is in schema public, which is always visible, and every
            // user may read everything.
            "pg_table_is_visible"
            | "pg_type_is_visible"
            | "has_table_privilege"
            | "has_schema_privilege"
            | "has_database_privilege"
            | "has_column_privilege" => {
                self.bind_arguments(&args, scope)?;
                Expr::boolean(true)
            }
            // Apiary tables have no owner but the one user a session has.
            "pg_get_userbyid" => {
                self.check_arity(name, &args, 1)?;
                self.bind_arguments(&args, scope)?;
                Expr::literal(self.table_functions.session_value("current_user").unwrap_or(ScalarValue::Utf8("apiary".to_string())))
            }
            // No comments, defaults or constraints definitions to show.
            "obj_description" | "col_description" | "shobj_description" | "pg_get_expr" | "pg_get_constraintdef" | "pg_get_indexdef" => {
                self.bind_arguments(&args, scope)?;
                Expr::Literal(ScalarValue::Null, text)
            }
            // A view's query (`\d+ view`): its stored SQL text, looked up by OID.
            "pg_get_viewdef" => {
                if args.is_empty() || args.len() > 2 {
                    return Err(bind_err!("function pg_get_viewdef takes 1 or 2 arguments, got {}", args.len()));
                }
                let oid = self.bind_expr(args[0], scope)?;
                let oid = self.coerce(oid, &DataType::Integer)?;
                self.bind_arguments(&args[1..], scope)?;
                let whens: Vec<(Expr, Expr)> = self
                    .catalog
                    .views()
                    .iter()
                    .map(|view| {
                        let this_view = ScalarValue::Int32(apiary_types::pg::table_oid(&view.name));
                        (
                            Expr::compare(crate::expr::BinaryOp::Eq, oid.clone(), Expr::literal(this_view)),
                            Expr::literal(ScalarValue::Utf8(view.sql.clone())),
                        )
                    })
                    .collect();
                match whens.is_empty() {
                    true => Expr::Literal(ScalarValue::Null, text),
                    false => Expr::Case { whens, otherwise: None, data_type: text },
                }
            }
            "pg_encoding_to_char" => {
                self.check_arity(name, &args, 1)?;
                self.bind_arguments(&args, scope)?;
                Expr::literal(ScalarValue::Utf8("UTF8".to_string()))
            }
            "format_type" => {
                self.check_arity(name, &args, 2)?;
                let template = format_type_sql(&args[0].to_string(), &args[1].to_string());
                let expr = Parser::new(&PostgreSqlDialect {})
                    .try_with_sql(&template)
                    .and_then(|mut p| p.parse_expr())
                    .map_err(|e| ApiaryError::Internal(format!("format_type template does not parse: {e}")))?;
                self.bind_expr(&expr, scope)?
            }
            _ => return Ok(None),
        };
        Ok(Some(expr))
    }

    fn check_arity(&self, name: &str, args: &[&ast::Expr], expected: usize) -> Result<()> {
        if args.len() != expected {
            return Err(bind_err!("function {name} takes {expected} arguments, got {}", args.len()));
        }
        Ok(())
    }

    /// Binds arguments whose values do not matter, so that errors in them still show.
    fn bind_arguments(&mut self, args: &[&ast::Expr], scope: &Scope) -> Result<()> {
        for arg in args {
            self.bind_expr(arg, scope)?;
        }
        Ok(())
    }
}

/// `format_type(oid, typmod)` as a CASE over the types Apiary has (`character
/// varying(44)`, `numeric(15,2)`); the modifier encodings are PostgreSQL's.
fn format_type_sql(oid: &str, typmod: &str) -> String {
    let oid = format!("({oid})");
    let typmod = format!("({typmod})");
    let mut sql = format!("CASE {oid}");
    for ty in ALL_TYPES {
        let name = ty.sql_name;
        let arm = match ty.name {
            "varchar" | "bpchar" => {
                format!("CASE WHEN {typmod} >= 4 THEN '{name}(' || CAST({typmod} - 4 AS VARCHAR) || ')' ELSE '{name}' END")
            }
            "numeric" => format!(
                "CASE WHEN {typmod} >= 4 THEN 'numeric(' || CAST(({typmod} - 4) / 65536 AS VARCHAR) || ',' || \
                 CAST(({typmod} - 4) % 65536 AS VARCHAR) || ')' ELSE 'numeric' END"
            ),
            _ => format!("'{name}'"),
        };
        sql.push_str(&format!(" WHEN {} THEN {arm}", ty.oid));
    }
    sql.push_str(" ELSE '???' END");
    sql
}

/// `(negated, case_insensitive)` of a regular-expression match operator.
pub(crate) fn regex_operator(op: &ast::BinaryOperator) -> Option<(bool, bool)> {
    use ast::BinaryOperator as B;
    let symbol = match op {
        B::PGRegexMatch => "~",
        B::PGRegexIMatch => "~*",
        B::PGRegexNotMatch => "!~",
        B::PGRegexNotIMatch => "!~*",
        B::PGCustomBinaryOperator(parts) => match parts.as_slice() {
            [symbol] => symbol.as_str(),
            [schema, symbol] if schema == "pg_catalog" => symbol.as_str(),
            _ => return None,
        },
        _ => return None,
    };
    match symbol {
        "~" => Some((false, false)),
        "~*" => Some((false, true)),
        "!~" => Some((true, false)),
        "!~*" => Some((true, true)),
        _ => None,
    }
}

/// Whether `COLLATE name` names the one collation Apiary has.
pub(crate) fn is_default_collation(name: &ast::ObjectName) -> bool {
    let parts: Vec<String> = name.0.iter().filter_map(|p| p.as_ident()).map(|i| i.value.to_ascii_lowercase()).collect();
    matches!(
        parts.iter().map(String::as_str).collect::<Vec<_>>().as_slice(),
        ["default"] | ["c"] | ["posix"] | ["pg_catalog", "default" | "c" | "posix"]
    )
}

/// LIKE patterns (alternatives) matching what a simple regular expression matches;
/// `None` when the expression uses more than anchors, one group of alternatives, `.`,
/// `.*` and literal characters.
pub(crate) fn regex_to_like(regex: &str) -> Option<Vec<String>> {
    let (start_anchored, rest) = match regex.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, regex),
    };
    let (end_anchored, body) = match rest.strip_suffix('$') {
        Some(body) if !body.ends_with('\\') => (true, body),
        _ => (false, rest),
    };
    let alternatives: Vec<&str> = match body.strip_prefix('(').and_then(|b| b.strip_suffix(')')) {
        Some(inner) if !inner.contains(['(', ')']) => inner.split('|').collect(),
        _ => vec![body],
    };
    let mut patterns = Vec::with_capacity(alternatives.len());
    for alternative in alternatives {
        let mut like = String::new();
        if !start_anchored {
            like.push('%');
        }
        let mut chars = alternative.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '.' if chars.peek() == Some(&'*') => {
                    chars.next();
                    like.push('%');
                }
                '.' => like.push('_'),
                '\\' => {
                    let escaped = chars.next()?;
                    if escaped.is_ascii_alphanumeric() {
                        return None; // \d, \w, ...: character classes
                    }
                    push_like_literal(&mut like, escaped);
                }
                '[' | ']' | '(' | ')' | '{' | '}' | '|' | '?' | '+' | '*' | '^' | '$' => return None,
                c => push_like_literal(&mut like, c),
            }
        }
        if !end_anchored {
            like.push('%');
        }
        patterns.push(like);
    }
    Some(patterns)
}

fn push_like_literal(like: &mut String, c: char) {
    if matches!(c, '%' | '_' | '\\') {
        like.push('\\');
    }
    like.push(c);
}

impl Binder<'_> {
    /// `value ~ 'regex'` as LIKE alternatives (see [`regex_to_like`]).
    pub(crate) fn bind_regex_match(&mut self, value: Expr, pattern: Expr, negated: bool, case_insensitive: bool) -> Result<Expr> {
        let regex = match &pattern {
            Expr::Literal(ScalarValue::Utf8(text), _) => text.clone(),
            Expr::Literal(ScalarValue::Null, _) => return Ok(Expr::Literal(ScalarValue::Null, DataType::Boolean)),
            _ => return Err(not_impl_err!("regular-expression match with a pattern that is not a constant")),
        };
        let value = if value.data_type().is_string() { value } else { self.cast(value, DataType::Varchar(None))? };
        let Some(patterns) = regex_to_like(&regex) else {
            // Other patterns run as regular expressions (`regexp_matches`).
            let mut args = vec![value, pattern];
            if case_insensitive {
                args.push(Expr::literal(ScalarValue::Utf8("i".to_string())));
            }
            let matches = Expr::Function { func: crate::expr::ScalarFunction::RegexpMatches, args, data_type: DataType::Boolean };
            return Ok(if negated { Expr::Unary(crate::expr::UnaryOp::Not, Box::new(matches)) } else { matches });
        };
        let matches = patterns.into_iter().map(|like| Expr::Like {
            expr: Box::new(value.clone()),
            pattern: Box::new(Expr::literal(ScalarValue::Utf8(like))),
            negated: false,
            case_insensitive,
            escape: Some('\\'),
        });
        let any =
            Expr::disjunction(matches).ok_or_else(|| ApiaryError::Internal("a regular expression without alternatives".to_string()))?;
        Ok(if negated { Expr::Unary(crate::expr::UnaryOp::Not, Box::new(any)) } else { any })
    }
}

/// `row_number() OVER (PARTITION BY a.attrelid ORDER BY a.attnum)`, which JDBC's
/// `getColumns` uses to number a table's columns: Apiary's `pg_attribute` numbers the
/// columns of each table 1..n without gaps (no dropped columns), so the row number is
/// `a.attnum` itself. Apiary has no window functions; this one form is answered so.
fn attribute_row_number<'f>(name: &str, function: &'f ast::Function) -> Option<&'f ast::Expr> {
    let ends_with = |expr: &ast::Expr, column: &str| match expr {
        ast::Expr::Identifier(ident) => ident.value.eq_ignore_ascii_case(column),
        ast::Expr::CompoundIdentifier(parts) => parts.last().is_some_and(|p| p.value.eq_ignore_ascii_case(column)),
        _ => false,
    };
    let Some(ast::WindowType::WindowSpec(spec)) = &function.over else { return None };
    match (name, spec.partition_by.as_slice(), spec.order_by.as_slice(), spec.window_frame.is_none()) {
        ("row_number", [partition], [order], true)
            if ends_with(partition, "attrelid")
                && ends_with(&order.expr, "attnum")
                && !matches!(order.options.sort, Some(ast::OrderBySort::Desc)) =>
        {
            Some(&order.expr)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::regex_to_like;

    #[test]
    fn psql_patterns_become_like() {
        assert_eq!(regex_to_like("^(lineitem)$"), Some(vec!["lineitem".to_string()]));
        assert_eq!(regex_to_like("^(line.*|ord_rs)$"), Some(vec!["line%".to_string(), "ord\\_rs".to_string()]));
        assert_eq!(regex_to_like("^pg_toast"), Some(vec!["pg\\_toast%".to_string()]));
        assert_eq!(regex_to_like("a.c"), Some(vec!["%a_c%".to_string()]));
        assert_eq!(regex_to_like("^[a-z]+$"), None);
        assert_eq!(regex_to_like("\\d"), None);
    }
}
