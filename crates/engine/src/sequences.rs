//! CREATE SEQUENCE, and the sequences SERIAL and `GENERATED ... AS IDENTITY` columns own
//! (see `apiary_storage::sequence`; `nextval` / `setval` are bound by the binder and run
//! in `apiary_execution::expr::sequence`).

use std::sync::Arc;

use apiary_common::{bind_err, not_impl_err, ApiaryError, Result};
use apiary_sql::binder::{convert_data_type, object_name_to_table};
use apiary_storage::{Catalog, Sequence, SequenceOptions};
use apiary_types::DataType;
use sqlparser::ast;

use crate::connection::Connection;
use crate::database::Change;
use crate::result::QueryResult;

/// The largest value of an integer type a sequence may fill.
fn type_max(data_type: DataType) -> Result<i64> {
    match data_type {
        DataType::SmallInt => Ok(i16::MAX as i64),
        DataType::Integer => Ok(i32::MAX as i64),
        DataType::BigInt => Ok(i64::MAX),
        other => Err(ApiaryError::Type(format!("a sequence or identity column must be SMALLINT, INTEGER or BIGINT, not {other}"))),
    }
}

/// The integer a sequence option gives (`START 5`, `MINVALUE -10`).
fn option_value(expr: &ast::Expr) -> Result<i64> {
    let (negative, expr) = match expr {
        ast::Expr::UnaryOp { op: ast::UnaryOperator::Minus, expr } => (true, expr.as_ref()),
        ast::Expr::UnaryOp { op: ast::UnaryOperator::Plus, expr } => (false, expr.as_ref()),
        other => (false, other),
    };
    let text = match expr {
        ast::Expr::Value(value) => match &value.value {
            ast::Value::Number(text, _) => text.clone(),
            _ => String::new(),
        },
        _ => String::new(),
    };
    let value: i64 = text.parse().map_err(|_| bind_err!("a sequence option needs an integer, not {expr}"))?;
    Ok(if negative { -value } else { value })
}

/// The options of CREATE SEQUENCE or an identity column, over PostgreSQL's defaults for
/// a sequence of `data_type`.
pub(crate) fn sequence_options(name: &str, options: &[ast::SequenceOptions], data_type: DataType) -> Result<SequenceOptions> {
    let limit = type_max(data_type)?;
    let increment = options
        .iter()
        .find_map(|o| match o {
            ast::SequenceOptions::IncrementBy(e, _) => Some(option_value(e)),
            _ => None,
        })
        .transpose()?
        .unwrap_or(1);
    let mut result = SequenceOptions::defaults(increment, data_type)
        .ok_or_else(|| ApiaryError::Type(format!("a sequence must be SMALLINT, INTEGER or BIGINT, not {data_type}")))?;
    let mut start = None;
    for option in options {
        match option {
            ast::SequenceOptions::IncrementBy(..) => {}
            ast::SequenceOptions::MinValue(Some(e)) => result.min = option_value(e)?,
            ast::SequenceOptions::MaxValue(Some(e)) => result.max = option_value(e)?,
            ast::SequenceOptions::MinValue(None) | ast::SequenceOptions::MaxValue(None) => {}
            ast::SequenceOptions::StartWith(e, _) => start = Some(option_value(e)?),
            // Values are handed out one at a time (no per-session cache to lose).
            ast::SequenceOptions::Cache(e) => {
                if option_value(e)? < 1 {
                    return Err(ApiaryError::InvalidParameter(format!("CACHE must be at least 1 (sequence \"{name}\")")));
                }
            }
            // sqlparser's flag is "NO CYCLE".
            ast::SequenceOptions::Cycle(no_cycle) => result.cycle = !*no_cycle,
        }
    }
    if result.min < -limit - 1 || result.max > limit {
        return Err(ApiaryError::OutOfRange(format!(
            "MINVALUE ({}) and MAXVALUE ({}) must lie within the range of {data_type} (sequence \"{name}\")",
            result.min, result.max
        )));
    }
    result.start = start.unwrap_or(if increment > 0 { result.min } else { result.max });
    result.validate(name)?;
    Ok(result)
}

/// The integer type of a SERIAL column (`smallserial`, `serial`, `bigserial` and their
/// `serial2/4/8` names), or `None` for another type.
pub(crate) fn serial_type(data_type: &ast::DataType) -> Option<DataType> {
    let ast::DataType::Custom(name, modifiers) = data_type else { return None };
    if !modifiers.is_empty() {
        return None;
    }
    match name.to_string().to_ascii_lowercase().as_str() {
        "smallserial" | "serial2" => Some(DataType::SmallInt),
        "serial" | "serial4" => Some(DataType::Integer),
        "bigserial" | "serial8" => Some(DataType::BigInt),
        _ => None,
    }
}

/// The name PostgreSQL gives the sequence of `table`'s column `column` (`t_id_seq`, with
/// a number added when taken).
pub(crate) fn owned_sequence_name(catalog: &Catalog, table: &str, column: &str, chosen: &[String]) -> String {
    let base = format!("{table}_{column}_seq");
    let free = |name: &String| !catalog.relation_exists(name) && !chosen.contains(name) && name != table;
    std::iter::once(base.clone()).chain((1..).map(|n| format!("{base}{n}"))).find(free).expect("a free name")
}

/// The DEFAULT that fills a column from sequence `name`.
pub(crate) fn nextval_default(name: &str) -> String {
    let simple = name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    let identifier = if simple { name.to_string() } else { format!("\"{}\"", name.replace('"', "\"\"")) };
    format!("nextval('{}')", identifier.replace('\'', "''"))
}

impl Connection {
    /// `CREATE SEQUENCE [IF NOT EXISTS] name [AS type] [options]`.
    pub(crate) fn create_sequence(&mut self, statement: &ast::Statement) -> Result<QueryResult> {
        let ast::Statement::CreateSequence { temporary, if_not_exists, name, data_type, sequence_options: options, owned_by } = statement
        else {
            return Err(apiary_common::internal_err!("not a CREATE SEQUENCE"));
        };
        if *temporary {
            return Err(not_impl_err!("CREATE TEMPORARY SEQUENCE"));
        }
        if owned_by.is_some() {
            return Err(not_impl_err!("CREATE SEQUENCE ... OWNED BY (use a SERIAL or identity column)"));
        }
        let name = object_name_to_table(name)?;
        if self.catalog().relation_exists(&name) {
            if *if_not_exists {
                return Ok(QueryResult::statement(None));
            }
            return Err(ApiaryError::Duplicate(format!("relation \"{name}\" already exists")));
        }
        let data_type = data_type.as_ref().map(convert_data_type).transpose()?.unwrap_or(DataType::BigInt);
        let options = sequence_options(&name, options, data_type)?;
        self.commit_change(Change::CreateSequence(Sequence::new(name, options)))?;
        Ok(QueryResult::statement(None))
    }
}

/// The sequence an identity or SERIAL column of a new table gets.
pub(crate) fn column_sequence(name: String, options: &[ast::SequenceOptions], data_type: DataType) -> Result<Arc<Sequence>> {
    Ok(Sequence::new(name.clone(), sequence_options(&name, options, data_type)?))
}

impl Connection {
    /// `ALTER SEQUENCE [IF EXISTS] s RESTART [[WITH] n]` (parsed into a CALL, see
    /// `apiary_sql::parser::ALTER_SEQUENCE_CALL`): the next `nextval` returns `n`, or the
    /// sequence's START value. Not transactional, as `setval`. Other options are not
    /// supported yet.
    pub(crate) fn alter_sequence(&mut self, call: &ast::Function) -> Result<QueryResult> {
        let malformed = || apiary_common::internal_err!("ALTER SEQUENCE was not parsed into its call");
        let ast::FunctionArguments::List(list) = &call.args else { return Err(malformed()) };
        let value = |n: usize| match list.args.get(n) {
            Some(ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(ast::Expr::Value(value)))) => Ok(&value.value),
            _ => Err(malformed()),
        };
        let (ast::Value::SingleQuotedString(name), ast::Value::SingleQuotedString(options), ast::Value::Boolean(if_exists)) =
            (value(0)?, value(1)?, value(2)?)
        else {
            return Err(malformed());
        };
        let Some(sequence) = self.catalog().all_sequences().into_iter().find(|s| s.name == *name) else {
            if *if_exists {
                return Ok(QueryResult::statement(None));
            }
            return Err(ApiaryError::Catalog(format!("relation \"{name}\" does not exist (no sequence of that name)")));
        };
        let words: Vec<&str> = options.split_whitespace().collect();
        let value = match words.split_first() {
            Some((restart, rest)) if restart.eq_ignore_ascii_case("restart") => {
                let rest = match rest.split_first() {
                    Some((with, rest)) if with.eq_ignore_ascii_case("with") => rest,
                    _ => rest,
                };
                // (`- 5`: the tokens of a negative number.)
                let text = rest.concat();
                match text.is_empty() {
                    true => sequence.options.start,
                    false => text.parse::<i64>().map_err(|_| bind_err!("RESTART needs an integer, not {text}"))?,
                }
            }
            _ => {
                return Err(not_impl_err!(
                "ALTER SEQUENCE ... {options} (only RESTART [WITH n]; setval sets a sequence's value, DROP and CREATE change its options)"
            ))
            }
        };
        if value < sequence.options.min || value > sequence.options.max {
            return Err(ApiaryError::InvalidParameter(format!(
                "RESTART value ({value}) cannot be outside the bounds of sequence \"{name}\" ({}..{})",
                sequence.options.min, sequence.options.max
            )));
        }
        sequence.set(value, false)?;
        Ok(QueryResult::statement(None))
    }
}
