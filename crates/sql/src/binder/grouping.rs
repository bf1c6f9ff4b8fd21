//! `GROUPING SETS`, `ROLLUP`, `CUBE` and `GROUPING(...)`.
//!
//! A GROUP BY clause is expanded into its list of grouping sets (lists of key expressions)
//! before binding: `GROUP BY a, ROLLUP(b, c)` is the cross product of `(a)` with
//! `(b, c), (b), ()`. The aggregate then groups by the union of all keys once per set
//! ([`crate::plan::GroupingSets`]); a plain `GROUP BY a, b` is a single set.

use apiary_common::{bind_err, ApiaryError, Result};
use apiary_types::{DataType, ScalarValue};
use sqlparser::ast;

use super::{Binder, Scope};
use crate::expr::{ColumnRef, Expr};

/// PostgreSQL's limit on the number of grouping sets a GROUP BY may produce.
pub(crate) const MAX_GROUPING_SETS: usize = 4096;

/// What `GROUPING(...)` needs to know about the query being bound.
#[derive(Clone, Debug)]
pub(crate) struct GroupingContext {
    /// The bound GROUP BY keys, in the order of the aggregate's groups.
    pub keys: Vec<Expr>,
    /// The grouping sets as indices into `keys`, and the column holding a row's set
    /// index; `None` for a plain GROUP BY (one set of all keys).
    pub sets: Option<(Vec<Vec<usize>>, ColumnRef)>,
}

/// The grouping sets of a GROUP BY list (with MySQL's `WITH ROLLUP` / `WITH CUBE`
/// modifiers applied), each a list of key expressions.
pub(crate) fn expand_grouping_sets(items: &[ast::Expr], modifiers: &[ast::GroupByWithModifier]) -> Result<Vec<Vec<ast::Expr>>> {
    let mut items = items.to_vec();
    for modifier in modifiers {
        let elements: Vec<Vec<ast::Expr>> = items.iter().map(|e| vec![e.clone()]).collect();
        items = match modifier {
            ast::GroupByWithModifier::Rollup => vec![ast::Expr::Rollup(elements)],
            ast::GroupByWithModifier::Cube => vec![ast::Expr::Cube(elements)],
            ast::GroupByWithModifier::Totals => return Err(apiary_common::not_impl_err!("GROUP BY ... WITH TOTALS")),
            ast::GroupByWithModifier::GroupingSets(sets) => {
                let mut all = items.clone();
                all.push(sets.clone());
                all
            }
        };
    }
    let mut sets = vec![Vec::new()];
    for item in &items {
        sets = cross_product(&sets, &sets_of(item)?)?;
    }
    Ok(sets)
}

/// The grouping sets one GROUP BY item stands for.
fn sets_of(item: &ast::Expr) -> Result<Vec<Vec<ast::Expr>>> {
    match item {
        ast::Expr::Rollup(elements) => Ok((0..=elements.len()).rev().map(|n| elements[..n].concat()).collect()),
        ast::Expr::Cube(elements) => {
            if elements.len() > 12 {
                return Err(too_many_sets());
            }
            // Every subset, the full one first and the empty one last.
            let n = elements.len();
            Ok((0..1usize << n)
                .rev()
                .map(|mask| (0..n).filter(|i| mask & (1 << (n - 1 - i)) != 0).flat_map(|i| elements[i].iter().cloned()).collect())
                .collect())
        }
        ast::Expr::GroupingSets(sets) => {
            let mut all = Vec::new();
            for set in sets {
                // An element of a set may itself be a ROLLUP, CUBE or GROUPING SETS.
                let mut expanded = vec![Vec::new()];
                for element in set {
                    expanded = cross_product(&expanded, &sets_of(element)?)?;
                }
                all.extend(expanded);
                if all.len() > MAX_GROUPING_SETS {
                    return Err(too_many_sets());
                }
            }
            Ok(all)
        }
        // `GROUP BY ()`: the empty set (a global aggregate).
        ast::Expr::Tuple(elements) if elements.is_empty() => Ok(vec![Vec::new()]),
        ast::Expr::Nested(inner) if matches!(inner.as_ref(), ast::Expr::Rollup(_) | ast::Expr::Cube(_) | ast::Expr::GroupingSets(_)) => {
            sets_of(inner)
        }
        // Inside GROUPING SETS the parser reads `ROLLUP(a, b)` and `CUBE(a, b)` as calls.
        ast::Expr::Function(function) if rollup_or_cube_call(function).is_some() => {
            sets_of(&rollup_or_cube_call(function).expect("checked by the guard"))
        }
        other => Ok(vec![vec![other.clone()]]),
    }
}

/// `ROLLUP(...)` or `CUBE(...)` parsed as a function call, as the grouping item it is.
fn rollup_or_cube_call(function: &ast::Function) -> Option<ast::Expr> {
    let [ast::ObjectNamePart::Identifier(name)] = function.name.0.as_slice() else { return None };
    let ast::FunctionArguments::List(list) = &function.args else { return None };
    if function.over.is_some() || function.filter.is_some() || list.duplicate_treatment.is_some() || !list.clauses.is_empty() {
        return None;
    }
    let elements: Option<Vec<Vec<ast::Expr>>> = list
        .args
        .iter()
        .map(|arg| match arg {
            ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(ast::Expr::Tuple(items))) => Some(items.clone()),
            ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) => Some(vec![e.clone()]),
            _ => None,
        })
        .collect();
    match name.value.to_lowercase().as_str() {
        "rollup" => Some(ast::Expr::Rollup(elements?)),
        "cube" => Some(ast::Expr::Cube(elements?)),
        _ => None,
    }
}

fn cross_product(left: &[Vec<ast::Expr>], right: &[Vec<ast::Expr>]) -> Result<Vec<Vec<ast::Expr>>> {
    if left.len().saturating_mul(right.len()) > MAX_GROUPING_SETS {
        return Err(too_many_sets());
    }
    Ok(left.iter().flat_map(|l| right.iter().map(move |r| l.iter().chain(r).cloned().collect())).collect())
}

fn too_many_sets() -> ApiaryError {
    ApiaryError::TooComplex(format!("too many grouping sets present (at most {MAX_GROUPING_SETS})"))
}

impl Binder<'_> {
    /// `GROUPING(a, b, ...)`: an integer whose bit `n - 1 - i` is set when argument `i` is
    /// not grouped in the current row's grouping set (PostgreSQL).
    pub(crate) fn bind_grouping(&mut self, function: &ast::Function, scope: &Scope) -> Result<Expr> {
        let context = match self.aggregate_stack.last() {
            Some(Some(collector)) => collector.grouping.clone(),
            _ => None,
        };
        let Some(context) = context else {
            return Err(bind_err!("GROUPING is allowed only in the SELECT list, HAVING and ORDER BY of a query with GROUP BY"));
        };
        let ast::FunctionArguments::List(list) = &function.args else {
            return Err(bind_err!("GROUPING needs at least one argument"));
        };
        if list.args.is_empty() {
            return Err(bind_err!("GROUPING needs at least one argument"));
        }
        if list.args.len() > 31 {
            return Err(bind_err!("GROUPING must have fewer than 32 arguments"));
        }
        let mut positions = Vec::new();
        for arg in &list.args {
            let ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(arg)) = arg else {
                return Err(bind_err!("unsupported argument {arg} to GROUPING"));
            };
            // Bound like a group key: aggregates are not allowed in it.
            self.aggregate_stack.push(None);
            let bound = self.bind_expr(arg, scope);
            self.aggregate_stack.pop();
            let bound = bound?;
            let position = context.keys.iter().position(|k| *k == bound).ok_or_else(|| {
                bind_err!("arguments to GROUPING must be grouping expressions of the associated query level ({arg} is not)")
            })?;
            positions.push(position);
        }
        let value_in = |set: &[usize]| -> i32 { positions.iter().fold(0, |acc, p| (acc << 1) | i32::from(!set.contains(p))) };
        let integer = |v: i32| Expr::Literal(ScalarValue::Int32(v), DataType::Integer);
        let Some((sets, id)) = context.sets else {
            return Ok(integer(0));
        };
        let values: Vec<i32> = sets.iter().map(|set| value_in(set)).collect();
        if values.iter().all(|v| *v == values[0]) {
            return Ok(integer(values[0]));
        }
        // One branch per set whose value is not the most common one.
        let otherwise = most_common(&values);
        let whens = values
            .iter()
            .enumerate()
            .filter(|(_, v)| **v != otherwise)
            .map(|(set, v)| {
                let is_set = Expr::compare(crate::expr::BinaryOp::Eq, id.expr(), integer(set as i32));
                (is_set, integer(*v))
            })
            .collect();
        Ok(Expr::Case { whens, otherwise: Some(Box::new(integer(otherwise))), data_type: DataType::Integer })
    }
}

fn most_common(values: &[i32]) -> i32 {
    let mut counts: std::collections::HashMap<i32, usize> = std::collections::HashMap::new();
    values.iter().for_each(|v| *counts.entry(*v).or_default() += 1);
    counts.into_iter().max_by_key(|(v, c)| (*c, -(*v as i64))).map_or(0, |(v, _)| v)
}
