//! Parsing SQL text with the `sqlparser` crate.
//!
//! We parse with PostgreSQL's dialect (the closest to what Apiary accepts) and rewrite
//! its error messages into "syntax error at line L, column C: expected X, found Y".

use apiary_common::{ApiaryError, Result};
use sqlparser::ast::Statement;
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::Token;

/// Parses one or more `;`-separated statements.
///
/// `CHECKPOINT` (which sqlparser does not know) is accepted as a statement of its own and
/// represented as `CALL checkpoint()`, which is also accepted.
pub fn parse_sql(sql: &str) -> Result<Vec<Statement>> {
    let dialect = PostgreSqlDialect {};
    let parse = || -> std::result::Result<Vec<Statement>, ParserError> {
        let mut parser = Parser::new(&dialect).with_recursion_limit(256).try_with_sql(sql)?;
        let mut statements = Vec::new();
        loop {
            while parser.consume_token(&Token::SemiColon) {}
            let next = parser.peek_token();
            if next.token == Token::EOF {
                return Ok(statements);
            }
            match &next.token {
                Token::Word(word) if word.quote_style.is_none() && word.value.eq_ignore_ascii_case("checkpoint") => {
                    parser.next_token();
                    statements.extend(Parser::parse_sql(&dialect, "CALL checkpoint()")?);
                }
                _ => statements.push(parser.parse_statement()?),
            }
            let after = parser.peek_token();
            if after.token != Token::SemiColon && after.token != Token::EOF {
                return parser.expected("end of statement", after);
            }
        }
    };
    parse().map_err(|err| match err {
        ParserError::RecursionLimitExceeded => ApiaryError::TooComplex("the statement is nested too deeply".to_string()),
        err => ApiaryError::Parse(describe_parser_error(err, sql)),
    })
}

/// Whether a `CALL` statement is `CHECKPOINT`.
pub fn is_checkpoint(function: &sqlparser::ast::Function) -> bool {
    function.name.to_string().eq_ignore_ascii_case("checkpoint")
}

/// Splits text into statements without binding them, keeping each statement's text
/// (used by the shell and `-f` to run statements one at a time).
pub fn split_statements(sql: &str) -> Result<Vec<(Statement, String)>> {
    let statements = parse_sql(sql)?;
    Ok(statements
        .into_iter()
        .map(|s| {
            let text = s.to_string();
            (s, text)
        })
        .collect())
}

/// Line and column just after the last non-blank character (where "end of input" is).
fn end_position(sql: &str) -> (u64, u64) {
    let text = sql.trim_end();
    let line = text.lines().count().max(1) as u64;
    let column = text.lines().last().map_or(0, |l| l.chars().count()) as u64 + 1;
    (line, column)
}

fn describe_parser_error(err: ParserError, sql: &str) -> String {
    let message = match err {
        ParserError::ParserError(m) | ParserError::TokenizerError(m) => m,
        ParserError::RecursionLimitExceeded => return "statement is nested too deeply".to_string(),
    };
    // sqlparser: "Expected: an expression, found: FROM at Line: 1, Column: 8"
    let (body, position) = match message.rfind(" at Line: ") {
        Some(pos) => (&message[..pos], Some(&message[pos + " at Line: ".len()..])),
        None => (message.as_str(), None),
    };
    let body = body.replace("Expected: ", "expected ").replace("Expected ", "expected ").replace(", found: ", ", found ");
    let body = body.replace("found EOF", "found end of input");
    match position.and_then(parse_line_column).filter(|(line, _)| *line > 0) {
        Some((line, column)) => format!("at line {line}, column {column}: {body}"),
        None => {
            let (line, column) = end_position(sql);
            format!("at line {line}, column {column}: {body}")
        }
    }
}

fn parse_line_column(text: &str) -> Option<(u64, u64)> {
    let (line, column) = text.split_once(", Column: ")?;
    let column: String = column.chars().take_while(|c| c.is_ascii_digit()).collect();
    Some((line.trim().parse().ok()?, column.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_line_and_column() {
        let err = parse_sql("SELECT a FROM t WHER x").unwrap_err().to_string();
        assert!(err.contains("line 1, column 22"), "{err}");
        let err = parse_sql("SELECT a,\n  FROM t").unwrap_err().to_string();
        assert!(err.contains("line 2, column"), "{err}");
        assert!(err.contains("expected"), "{err}");
        let err = parse_sql("SELECT *\nFROM").unwrap_err().to_string();
        assert!(err.contains("line 2, column 5") && err.contains("end of input"), "{err}");
    }

    #[test]
    fn parses_several_statements() {
        assert_eq!(parse_sql("select 1; select 2;").unwrap().len(), 2);
    }
}
