//! Parsing SQL text with the `sqlparser` crate.
//!
//! We parse with PostgreSQL's dialect (the closest to what Apiary accepts), plus the
//! DuckDB syntax PostgreSQL has no meaning for (`SELECT * EXCLUDE (a)`, `* REPLACE (e AS
//! a)`, `ORDER BY ALL`, `FROM t` without SELECT), and rewrite its error messages into
//! "syntax error at line L, column C: expected X, found Y".

use std::any::TypeId;

use apiary_common::{ApiaryError, Result};
use sqlparser::ast::{Expr, Statement};
use sqlparser::dialect::{Dialect, PostgreSqlDialect, Precedence};
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::{Span, Token, TokenWithSpan, Tokenizer};

/// Parses one or more `;`-separated statements.
///
/// `CHECKPOINT` (which sqlparser does not know) is accepted as a statement of its own and
/// represented as `CALL checkpoint()`, which is also accepted. `ALTER SEQUENCE [IF
/// EXISTS] s options` (which it does not know either) becomes
/// `CALL apiary_alter_sequence('s', 'options', if_exists)` (see [`ALTER_SEQUENCE_CALL`]).
pub fn parse_sql(sql: &str) -> Result<Vec<Statement>> {
    let dialect = ApiaryDialect(PostgreSqlDialect {});
    let parse = || -> std::result::Result<Vec<Statement>, ParserError> {
        let tokens = Tokenizer::new(&dialect, sql).with_unescape(true).tokenize_with_location()?;
        let mut parser = Parser::new(&dialect)
            .with_recursion_limit(256)
            .with_tokens_with_locations(frame_exclusions_as_markers(select_star_before_from_first(numbered_question_marks(tokens)?)));
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
                Token::Word(word)
                    if word.keyword == Keyword::ALTER
                        && matches!(&parser.peek_nth_token(1).token, Token::Word(w) if w.keyword == Keyword::SEQUENCE) =>
                {
                    parser.next_token();
                    parser.next_token();
                    let if_exists = parser.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
                    let name = parser.parse_object_name(false)?;
                    let name = crate::binder::object_name_to_table(&name).map_err(|e| ParserError::ParserError(e.to_string()))?;
                    let mut options = Vec::new();
                    while !matches!(parser.peek_token().token, Token::SemiColon | Token::EOF) {
                        options.push(parser.next_token().token.to_string());
                    }
                    let quote = |text: &str| text.replace('\'', "''");
                    let call = format!("CALL {ALTER_SEQUENCE_CALL}('{}', '{}', {if_exists})", quote(&name), quote(&options.join(" ")));
                    statements.extend(Parser::parse_sql(&dialect, &call)?);
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

/// `?` parameters (DB-API's qmark style, as the Python package and JDBC write them)
/// become `$1`, `$2`, ... in the order they appear. A statement must not mix both styles.
fn numbered_question_marks(mut tokens: Vec<TokenWithSpan>) -> std::result::Result<Vec<TokenWithSpan>, ParserError> {
    if !tokens.iter().any(|t| t.token == Token::Question) {
        return Ok(tokens);
    }
    if tokens.iter().any(|t| matches!(&t.token, Token::Placeholder(p) if p.starts_with('$'))) {
        return Err(ParserError::ParserError("a statement cannot mix ? and $n parameters".into()));
    }
    let mut number = 0;
    for token in &mut tokens {
        if token.token == Token::Question {
            number += 1;
            token.token = Token::Placeholder(format!("${number}"));
        }
    }
    Ok(tokens)
}

/// DuckDB's `FROM t [WHERE ...] [ORDER BY ...]` without SELECT means `SELECT * FROM t ...`.
/// sqlparser reads a FROM-first query without SELECT only up to the end of its FROM
/// clause, so each query body that starts with FROM and has no SELECT of its own (at its
/// parenthesis depth) gets `SELECT *` put in front. A query body starts a statement,
/// follows a set operator (`UNION [ALL]`, ...), a `(` (not `trim(FROM ...)`), or the
/// WITH list. (`FROM t SELECT a` is sqlparser's own FROM-first form.)
fn select_star_before_from_first(mut tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    /// A query body that starts with FROM: where, at which depth, whether it has a SELECT.
    struct Body {
        from_at: usize,
        depth: usize,
        own_select: bool,
    }
    let keyword = |token: &Token| match token {
        Token::Word(w) if w.quote_style.is_none() => w.keyword,
        _ => Keyword::NoKeyword,
    };
    let mut open: Vec<Body> = Vec::new();
    let mut inserts = Vec::new();
    let close = |open: &mut Vec<Body>, depth: usize, inserts: &mut Vec<usize>| {
        while open.last().is_some_and(|body| body.depth >= depth) {
            let body = open.pop().expect("checked above");
            if !body.own_select {
                inserts.push(body.from_at);
            }
        }
    };
    let mut depth = 0usize;
    let mut body_start = true;
    // The depths of the WITH lists being read (a WITH can start any query body).
    let mut with_lists: Vec<usize> = Vec::new();
    let mut after_cte = false;
    let mut previous = Token::EOF;
    for index in 0..tokens.len() {
        let token = tokens[index].token.clone();
        if matches!(token, Token::Whitespace(_)) {
            continue;
        }
        let word = keyword(&token);
        if after_cte {
            // After `name AS (...)` of a WITH list: another definition, or the body.
            after_cte = false;
            if token == Token::Comma || word == Keyword::AS {
                previous = token;
                continue;
            }
            with_lists.pop();
            body_start = true;
        }
        if body_start && word == Keyword::FROM {
            open.push(Body { from_at: index, depth, own_select: false });
        }
        let was_body_start = std::mem::replace(&mut body_start, false);
        match &token {
            Token::LParen => {
                depth += 1;
                body_start = !matches!(&previous, Token::Word(w) if w.value.eq_ignore_ascii_case("trim"));
            }
            Token::RParen => {
                close(&mut open, depth, &mut inserts);
                with_lists.retain(|&at| at < depth);
                depth = depth.saturating_sub(1);
                after_cte = with_lists.last() == Some(&depth);
            }
            Token::SemiColon if depth == 0 => {
                close(&mut open, 0, &mut inserts);
                body_start = true;
                with_lists.clear();
            }
            _ if matches!(word, Keyword::UNION | Keyword::INTERSECT | Keyword::EXCEPT) => {
                close(&mut open, depth, &mut inserts);
                body_start = true;
            }
            // `AS FROM ...` (CREATE VIEW / TABLE ... AS), `EXPLAIN [ANALYZE] FROM ...`.
            _ if matches!(word, Keyword::AS | Keyword::EXPLAIN) => body_start = true,
            _ if matches!(word, Keyword::ALL | Keyword::DISTINCT | Keyword::ANALYZE | Keyword::VERBOSE) && was_body_start => {
                body_start = true
            }
            _ if word == Keyword::WITH && was_body_start => with_lists.push(depth),
            _ if word == Keyword::RECURSIVE && with_lists.last() == Some(&depth) => {}
            _ if word == Keyword::SELECT => {
                if let Some(body) = open.last_mut().filter(|body| body.depth == depth) {
                    body.own_select = true;
                }
            }
            _ => {}
        }
        previous = token;
    }
    close(&mut open, 0, &mut inserts);
    inserts.sort_unstable();
    for &at in inserts.iter().rev() {
        let span: Span = tokens[at].span;
        let space = Token::Whitespace(sqlparser::tokenizer::Whitespace::Space);
        let inserted = [Token::make_keyword("SELECT"), space.clone(), Token::Mul, space];
        tokens.splice(at..at, inserted.into_iter().map(|token| TokenWithSpan { token, span }));
    }
    tokens
}

/// The name of the marker that carries a window frame's `EXCLUDE` clause through
/// sqlparser, which does not parse it: `OVER (PARTITION BY p ORDER BY o ROWS ... EXCLUDE
/// TIES)` is read as `OVER (PARTITION BY __apiary_frame_exclude(3), p ORDER BY o ROWS
/// ...)`, and the binder takes the marker out of the PARTITION BY list again
/// ([`frame_exclude_marker`]).
pub const FRAME_EXCLUDE_MARKER: &str = "__apiary_frame_exclude";

/// Rewrites each `EXCLUDE CURRENT ROW | GROUP | TIES | NO OTHERS` that ends a window
/// specification (after a frame bound, before the `)` of an `OVER (...)` or a WINDOW
/// clause's `AS (...)`) into a [`FRAME_EXCLUDE_MARKER`] call at the start of that
/// specification's PARTITION BY list (after a base window's name). Any other EXCLUDE is
/// left for sqlparser (`SELECT * EXCLUDE (...)`, constraints).
fn frame_exclusions_as_markers(mut tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let word_is =
        |token: &Token, text: &str| matches!(token, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(text));
    let mut index = 0;
    while index < tokens.len() {
        if !word_is(&tokens[index].token, "exclude") {
            index += 1;
            continue;
        }
        // The meaningful tokens after and before EXCLUDE.
        let significant: Vec<usize> =
            (index + 1..tokens.len()).filter(|&i| !matches!(tokens[i].token, Token::Whitespace(_))).take(3).collect();
        let before = (0..index).rev().find(|&i| !matches!(tokens[i].token, Token::Whitespace(_)));
        let after_bound = before.is_some_and(|b| ["row", "preceding", "following"].iter().any(|w| word_is(&tokens[b].token, w)));
        let at = |k: usize| significant.get(k).map(|&i| &tokens[i].token);
        let (code, words) = match (at(0), at(1), at(2)) {
            (Some(a), Some(b), Some(Token::RParen)) if word_is(a, "current") && word_is(b, "row") => (1, 2),
            (Some(a), Some(b), Some(Token::RParen)) if word_is(a, "no") && word_is(b, "others") => (0, 2),
            (Some(a), Some(Token::RParen), _) if word_is(a, "group") => (2, 1),
            (Some(a), Some(Token::RParen), _) if word_is(a, "ties") => (3, 1),
            _ => {
                index += 1;
                continue;
            }
        };
        let close = significant[words];
        // The `(` that opens this specification.
        let mut depth = 0usize;
        let mut open = None;
        for i in (0..index).rev() {
            match tokens[i].token {
                Token::RParen => depth += 1,
                Token::LParen if depth == 0 => {
                    open = Some(i);
                    break;
                }
                Token::LParen => depth -= 1,
                _ => {}
            }
        }
        let Some(open) = open else {
            index += 1;
            continue;
        };
        let opener = (0..open).rev().find(|&i| !matches!(tokens[i].token, Token::Whitespace(_)));
        if !after_bound || !opener.is_some_and(|o| word_is(&tokens[o].token, "over") || word_is(&tokens[o].token, "as")) {
            index += 1;
            continue;
        }
        let span = tokens[index].span;
        // Drop `EXCLUDE ...` (up to the closing parenthesis).
        tokens.drain(index..close);
        // Where the marker goes: after `PARTITION BY`, else in front of the first clause
        // (after a base window's name).
        let mut next = (open + 1..tokens.len()).filter(|&i| !matches!(tokens[i].token, Token::Whitespace(_)));
        let first = next.next();
        let second = next.next();
        let is_clause = |i: usize| {
            ["order", "rows", "range", "groups"].iter().any(|w| word_is(&tokens[i].token, w)) || tokens[i].token == Token::RParen
        };
        let after_by = |partition: usize| {
            let by = (partition + 1..tokens.len()).find(|&i| !matches!(tokens[i].token, Token::Whitespace(_)));
            by.map_or(partition + 1, |by| by + 1)
        };
        let (insert_at, partition_by) = match (first, second) {
            (Some(f), _) if word_is(&tokens[f].token, "partition") => (after_by(f), true),
            (Some(f), _) if is_clause(f) => (open + 1, false),
            // `OVER (base_window ...)`.
            (Some(_), Some(s)) if word_is(&tokens[s].token, "partition") => (after_by(s), true),
            (Some(f), _) => (f + 1, false),
            (None, _) => (open + 1, false),
        };
        let space = Token::Whitespace(sqlparser::tokenizer::Whitespace::Space);
        let mut inserted = Vec::new();
        if !partition_by {
            inserted.extend([space.clone(), Token::make_keyword("PARTITION"), space.clone(), Token::make_keyword("BY")]);
        }
        inserted.extend([
            space.clone(),
            Token::make_word(FRAME_EXCLUDE_MARKER, None),
            Token::LParen,
            Token::Number(code.to_string(), false),
            Token::RParen,
        ]);
        if partition_by {
            inserted.push(Token::Comma);
        }
        inserted.push(space);
        let added = inserted.len();
        tokens.splice(insert_at..insert_at, inserted.into_iter().map(|token| TokenWithSpan { token, span }));
        index += added + 1;
    }
    tokens
}

/// An expression kept as SQL text (a DEFAULT or CHECK of a table): the text that parses
/// back as `expr` ([`parse_expression`]).
pub fn expression_text(expr: &Expr) -> Result<String> {
    let mut query = match parse_sql("SELECT 1")?.pop() {
        Some(Statement::Query(query)) => *query,
        _ => return Err(apiary_common::internal_err!("SELECT 1 does not parse as a query")),
    };
    if let sqlparser::ast::SetExpr::Select(select) = query.body.as_mut() {
        select.projection = vec![sqlparser::ast::SelectItem::UnnamedExpr(expr.clone())];
    }
    let query = printable_query(&query);
    let text = match query.body.as_ref() {
        sqlparser::ast::SetExpr::Select(select) => match select.projection.as_slice() {
            [sqlparser::ast::SelectItem::UnnamedExpr(printable)] => printable.to_string(),
            _ => return Err(apiary_common::internal_err!("the expression was lost")),
        },
        _ => return Err(apiary_common::internal_err!("the expression was lost")),
    };
    match parse_expression(&text) {
        Ok(back) if back == *expr || back.to_string() == text => Ok(text),
        _ => Err(apiary_common::internal_err!("the expression {expr} does not print as SQL that reads back as it: {text}")),
    }
}

/// Parses an expression kept as SQL text (see [`expression_text`]).
pub fn parse_expression(sql: &str) -> Result<Expr> {
    let statement = parse_sql(&format!("SELECT {sql}"))?.pop();
    if let Some(Statement::Query(query)) = statement {
        if let sqlparser::ast::SetExpr::Select(select) = *query.body {
            if let [sqlparser::ast::SelectItem::UnnamedExpr(expr)] = select.projection.as_slice() {
                return Ok(expr.clone());
            }
        }
    }
    Err(apiary_common::internal_err!("{sql} does not parse as one expression"))
}

/// Whether a `CALL` statement is `CHECKPOINT`.
/// `query` with the operand of every unary minus that prints starting with a minus put in
/// parentheses: sqlparser prints `- (- x)` as `--x`, which reads back as a comment (a
/// view's query is kept as text and parsed again at every use).
pub fn printable_query(query: &sqlparser::ast::Query) -> sqlparser::ast::Query {
    use sqlparser::ast::{Expr, UnaryOperator};
    let mut query = query.clone();
    let _ = sqlparser::ast::visit_expressions_mut(&mut query, |expr| {
        if let Expr::UnaryOp { op: UnaryOperator::Minus, expr: operand } = expr {
            if operand.to_string().starts_with('-') {
                let inner = std::mem::replace(operand.as_mut(), Expr::Value(sqlparser::ast::Value::Null.into()));
                **operand = Expr::Nested(Box::new(inner));
            }
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    query
}

/// The procedure `ALTER SEQUENCE` is parsed into (see [`parse_sql`]).
pub const ALTER_SEQUENCE_CALL: &str = "apiary_alter_sequence";

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

/// PostgreSQL's dialect, with one repair: sqlparser reads `x IN ((SELECT ...), y)` as
/// `x IN (<parenthesised subquery>` and then fails at the comma, where PostgreSQL reads a
/// list whose first element is a scalar subquery. Everything else is PostgreSqlDialect's:
/// each method it overrides is forwarded, and `dialect()` reports its type, so that
/// sqlparser's checks for PostgreSQL (`dialect_of!`) hold as before.
#[derive(Debug)]
struct ApiaryDialect(PostgreSqlDialect);

impl ApiaryDialect {
    /// `[NOT] IN (` followed by `(`: a subquery only if its closing parenthesis closes the
    /// IN; otherwise a list (whose first element starts with a parenthesis).
    fn parse_in_starting_with_parenthesis(parser: &mut Parser, expr: &Expr) -> Option<std::result::Result<Expr, ParserError>> {
        let is = |token: &Token, keyword: Keyword| matches!(token, Token::Word(w) if w.keyword == keyword);
        let [first, second, third, fourth] = parser.peek_tokens::<4>();
        let negated = is(&first, Keyword::NOT);
        let (in_keyword, open, inner) = if negated { (&second, &third, &fourth) } else { (&first, &second, &third) };
        if !is(in_keyword, Keyword::IN) || *open != Token::LParen || *inner != Token::LParen {
            return None;
        }
        Some((|| {
            if negated {
                parser.expect_keyword_is(Keyword::NOT)?;
            }
            parser.expect_keyword_is(Keyword::IN)?;
            parser.expect_token(&Token::LParen)?;
            let subquery = parser.maybe_parse(|p| {
                let query = p.parse_query()?;
                match p.peek_token_ref().token {
                    Token::RParen => Ok(query),
                    _ => p.expected("the end of the IN subquery", p.peek_token()),
                }
            })?;
            let in_expr = match subquery {
                Some(subquery) => Expr::InSubquery { expr: Box::new(expr.clone()), subquery, negated },
                None => Expr::InList { expr: Box::new(expr.clone()), list: parser.parse_comma_separated(Parser::parse_expr)?, negated },
            };
            parser.expect_token(&Token::RParen)?;
            Ok(in_expr)
        })())
    }
}

impl ApiaryDialect {
    /// DuckDB's FROM-first query as a scalar subquery, `(FROM t SELECT max(a))`: sqlparser
    /// reads a parenthesized query in an expression only when it starts with SELECT or WITH.
    fn parse_from_first_subquery(parser: &mut Parser) -> Option<std::result::Result<Expr, ParserError>> {
        let [open, from] = parser.peek_tokens::<2>();
        if open != Token::LParen || !matches!(&from, Token::Word(w) if w.keyword == Keyword::FROM && w.quote_style.is_none()) {
            return None;
        }
        Some((|| {
            parser.expect_token(&Token::LParen)?;
            let query = parser.parse_query()?;
            parser.expect_token(&Token::RParen)?;
            Ok(Expr::Subquery(query))
        })())
    }

    /// DuckDB's `a // b` (integer division): PostgreSQL's tokenizer reads `//` as two
    /// `/`, so two adjacent `/` after an operand are taken as the one operator.
    fn parse_integer_division(&self, parser: &mut Parser, expr: &Expr) -> Option<std::result::Result<Expr, ParserError>> {
        let [first, second] = parser.peek_tokens_with_location::<2>();
        if first.token != Token::Div || second.token != Token::Div || first.span.end != second.span.start {
            return None;
        }
        parser.next_token();
        parser.next_token();
        let precedence = self.prec_value(Precedence::MulDivModOp);
        Some(parser.parse_subexpr(precedence).map(|right| Expr::BinaryOp {
            left: Box::new(expr.clone()),
            op: sqlparser::ast::BinaryOperator::DuckIntegerDivide,
            right: Box::new(right),
        }))
    }
}

impl Dialect for ApiaryDialect {
    fn dialect(&self) -> TypeId {
        self.0.dialect()
    }

    fn parse_prefix(&self, parser: &mut Parser) -> Option<std::result::Result<Expr, ParserError>> {
        Self::parse_from_first_subquery(parser).or_else(|| self.0.parse_prefix(parser))
    }

    fn parse_infix(&self, parser: &mut Parser, expr: &Expr, precedence: u8) -> Option<std::result::Result<Expr, ParserError>> {
        Self::parse_in_starting_with_parenthesis(parser, expr)
            .or_else(|| self.parse_integer_division(parser, expr))
            .or_else(|| self.0.parse_infix(parser, expr, precedence))
    }

    fn identifier_quote_style(&self, identifier: &str) -> Option<char> {
        self.0.identifier_quote_style(identifier)
    }

    fn is_delimited_identifier_start(&self, ch: char) -> bool {
        self.0.is_delimited_identifier_start(ch)
    }

    fn is_identifier_start(&self, ch: char) -> bool {
        self.0.is_identifier_start(ch)
    }

    fn is_identifier_part(&self, ch: char) -> bool {
        self.0.is_identifier_part(ch)
    }

    fn supports_unicode_string_literal(&self) -> bool {
        self.0.supports_unicode_string_literal()
    }

    fn is_reserved_for_identifier(&self, kw: Keyword) -> bool {
        self.0.is_reserved_for_identifier(kw)
    }

    /// DuckDB's struct literal `{'id': 'INTEGER'}`, for table function options such as
    /// `read_csv(..., columns = {...})`.
    fn supports_dictionary_syntax(&self) -> bool {
        true
    }

    fn is_table_alias(&self, kw: &Keyword, parser: &mut Parser) -> bool {
        self.0.is_table_alias(kw, parser)
    }

    fn is_custom_operator_part(&self, ch: char) -> bool {
        self.0.is_custom_operator_part(ch)
    }

    fn get_next_precedence(&self, parser: &Parser) -> Option<Result<u8, ParserError>> {
        self.0.get_next_precedence(parser)
    }

    fn supports_filter_during_aggregation(&self) -> bool {
        self.0.supports_filter_during_aggregation()
    }

    fn supports_group_by_expr(&self) -> bool {
        self.0.supports_group_by_expr()
    }

    fn supports_alter_user_as_alter_role(&self) -> bool {
        self.0.supports_alter_user_as_alter_role()
    }

    fn prec_value(&self, prec: Precedence) -> u8 {
        self.0.prec_value(prec)
    }

    fn allow_extract_custom(&self) -> bool {
        self.0.allow_extract_custom()
    }

    fn allow_extract_single_quotes(&self) -> bool {
        self.0.allow_extract_single_quotes()
    }

    fn supports_create_index_with_clause(&self) -> bool {
        self.0.supports_create_index_with_clause()
    }

    fn supports_explain_with_utility_options(&self) -> bool {
        self.0.supports_explain_with_utility_options()
    }

    fn supports_listen_notify(&self) -> bool {
        self.0.supports_listen_notify()
    }

    fn supports_exclude_constraint(&self) -> bool {
        self.0.supports_exclude_constraint()
    }

    fn supports_factorial_operator(&self) -> bool {
        self.0.supports_factorial_operator()
    }

    fn supports_bitwise_shift_operators(&self) -> bool {
        self.0.supports_bitwise_shift_operators()
    }

    fn supports_comment_on(&self) -> bool {
        self.0.supports_comment_on()
    }

    fn supports_load_extension(&self) -> bool {
        self.0.supports_load_extension()
    }

    fn supports_named_fn_args_with_colon_operator(&self) -> bool {
        self.0.supports_named_fn_args_with_colon_operator()
    }

    fn supports_named_fn_args_with_expr_name(&self) -> bool {
        self.0.supports_named_fn_args_with_expr_name()
    }

    fn supports_empty_projections(&self) -> bool {
        self.0.supports_empty_projections()
    }

    fn supports_nested_comments(&self) -> bool {
        self.0.supports_nested_comments()
    }

    fn supports_string_escape_constant(&self) -> bool {
        self.0.supports_string_escape_constant()
    }

    fn supports_numeric_literal_underscores(&self) -> bool {
        self.0.supports_numeric_literal_underscores()
    }

    fn supports_array_typedef_with_brackets(&self) -> bool {
        self.0.supports_array_typedef_with_brackets()
    }

    fn supports_geometric_types(&self) -> bool {
        self.0.supports_geometric_types()
    }

    fn supports_order_by_using_operator(&self) -> bool {
        self.0.supports_order_by_using_operator()
    }

    fn supports_set_names(&self) -> bool {
        self.0.supports_set_names()
    }

    fn supports_alter_column_type_using(&self) -> bool {
        self.0.supports_alter_column_type_using()
    }

    fn supports_left_associative_joins_without_parens(&self) -> bool {
        self.0.supports_left_associative_joins_without_parens()
    }

    fn supports_notnull_operator(&self) -> bool {
        self.0.supports_notnull_operator()
    }

    fn supports_interval_options(&self) -> bool {
        self.0.supports_interval_options()
    }

    fn supports_insert_table_alias(&self) -> bool {
        self.0.supports_insert_table_alias()
    }

    fn supports_create_table_like_parenthesized(&self) -> bool {
        self.0.supports_create_table_like_parenthesized()
    }

    fn supports_select_wildcard_with_alias(&self) -> bool {
        self.0.supports_select_wildcard_with_alias()
    }

    fn supports_comma_separated_trim(&self) -> bool {
        self.0.supports_comma_separated_trim()
    }

    fn supports_xml_expressions(&self) -> bool {
        self.0.supports_xml_expressions()
    }

    fn supports_aliased_function_args(&self) -> bool {
        self.0.supports_aliased_function_args()
    }

    fn supports_comment_optimizer_hint(&self) -> bool {
        self.0.supports_comment_optimizer_hint()
    }

    // DuckDB's syntax, which means nothing in PostgreSQL (so nothing PostgreSQL accepts
    // reads differently): `SELECT * EXCLUDE (a)`, `SELECT * REPLACE (a + 1 AS a)`,
    // `ORDER BY ALL`, and `FROM t [SELECT ...]`.

    fn supports_select_wildcard_exclude(&self) -> bool {
        true
    }

    fn supports_select_wildcard_replace(&self) -> bool {
        true
    }

    fn supports_order_by_all(&self) -> bool {
        true
    }

    fn supports_from_first_select(&self) -> bool {
        true
    }
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

    /// The wrapper must parse as PostgreSqlDialect does (every method PostgreSqlDialect
    /// overrides is forwarded; after a sqlparser upgrade, a new override that is not
    /// forwarded shows up here or in the sqllogictest suite).
    #[test]
    fn the_dialect_parses_as_postgresql_does() {
        let statements = [
            "SELECT a::INTEGER, E'x\\ny', $1, 5 !, 1 << 2, x ->> 'k' FROM t WHERE s LIKE 'a%' ESCAPE '!'",
            "SELECT count(*) FILTER (WHERE a > 1), \"Quoted Name\" FROM t GROUP BY ALL ORDER BY 1 NULLS LAST",
            "SELECT x FROM t WHERE x IN (SELECT y FROM u) AND x NOT IN (1, 2) AND x IN ((1), 2)",
            "SELECT 1_000, INTERVAL '1 day', DATE '2020-01-01' + 1, ARRAY[1, 2], x IS NOT DISTINCT FROM y FROM t",
            "SELECT * FROM a LEFT JOIN b ON a.k = b.k JOIN c USING (k) LIMIT 5 OFFSET 2",
            "CREATE TABLE t (a INTEGER PRIMARY KEY, b VARCHAR(10) NOT NULL, UNIQUE (b))",
            "COPY t FROM STDIN WITH (FORMAT csv, HEADER true)",
            "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT * FROM r",
        ];
        for sql in statements {
            let postgres = Parser::parse_sql(&PostgreSqlDialect {}, sql).map(|s| format!("{s:?}")).map_err(|e| e.to_string());
            let ours = Parser::parse_sql(&ApiaryDialect(PostgreSqlDialect {}), sql).map(|s| format!("{s:?}")).map_err(|e| e.to_string());
            assert_eq!(ours, postgres, "{sql}");
        }
    }

    /// DuckDB's FROM-first queries without SELECT read as `SELECT * FROM ...`, wherever a
    /// query body starts; `trim(FROM x)` and FROM after a select list are left alone.
    #[test]
    fn from_first_queries_select_every_column() {
        let cases = [
            ("FROM t WHERE a > 1 ORDER BY a", "SELECT * FROM t WHERE a > 1 ORDER BY a"),
            ("FROM t", "SELECT * FROM t"),
            ("FROM t SELECT a WHERE a > 1", "FROM t SELECT a WHERE a > 1"),
            ("SELECT * FROM (FROM t WHERE a < 3) s", "SELECT * FROM (SELECT * FROM t WHERE a < 3) s"),
            ("FROM t WHERE a = 1 UNION ALL FROM u WHERE b = 2", "SELECT * FROM t WHERE a = 1 UNION ALL SELECT * FROM u WHERE b = 2"),
            ("FROM t UNION SELECT a FROM u", "SELECT * FROM t UNION SELECT a FROM u"),
            (
                "WITH w AS (FROM t WHERE a = 1), v (x) AS (SELECT 1) FROM w WHERE a IN (FROM v)",
                "WITH w AS (SELECT * FROM t WHERE a = 1), v (x) AS (SELECT 1) SELECT * FROM w WHERE a IN (SELECT * FROM v)",
            ),
            (
                "SELECT * FROM (WITH w AS (FROM t), v AS (FROM w WHERE a < 3) FROM v WHERE a > 1) s",
                "SELECT * FROM (WITH w AS (SELECT * FROM t), v AS (SELECT * FROM w WHERE a < 3) SELECT * FROM v WHERE a > 1) s",
            ),
            ("SELECT (FROM t SELECT max(a)) + 1", "SELECT (FROM t SELECT max(a)) + 1"),
            ("SELECT (FROM t WHERE a = 1)", "SELECT (SELECT * FROM t WHERE a = 1)"),
            ("SELECT substring('abc' FROM 2), count(*) FROM t", "SELECT SUBSTRING('abc' FROM 2), count(*) FROM t"),
            ("SELECT (a) FROM t WHERE (b) IN (SELECT (c) FROM u)", "SELECT (a) FROM t WHERE (b) IN (SELECT (c) FROM u)"),
        ];
        for (sql, expected) in cases {
            let statements = parse_sql(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
            assert_eq!(statements.iter().map(|s| s.to_string()).collect::<Vec<_>>(), vec![expected.to_string()], "{sql}");
        }
        assert_eq!(parse_sql("FROM t; FROM u WHERE x = 1; SELECT 1").unwrap().len(), 3);
        let view = parse_sql("CREATE VIEW v AS FROM t WHERE a = 1").unwrap()[0].to_string();
        assert_eq!(view, "CREATE VIEW v AS SELECT * FROM t WHERE a = 1");
        let explain = parse_sql("EXPLAIN ANALYZE FROM t WHERE a = 1").unwrap()[0].to_string();
        assert_eq!(explain, "EXPLAIN ANALYZE SELECT * FROM t WHERE a = 1");
        // `trim(FROM x)` is PostgreSQL's (sqlparser does not read it): not a query.
        let err = parse_sql("SELECT trim(FROM ' x ')").unwrap_err().to_string();
        assert!(err.contains("column 18") && !err.contains("SELECT"), "{err}");
        let err = parse_sql("FROM t WHERE").unwrap_err().to_string();
        assert!(err.contains("line 1, column 13"), "positions are the original text's: {err}");
    }

    /// Regression (found by `apiary bench fuzz --seed 2311`): PostgreSQL reads these as
    /// lists whose first element is a scalar subquery; sqlparser failed at the comma.
    #[test]
    fn an_in_list_may_start_with_a_scalar_subquery() {
        for sql in ["SELECT 1 IN ((SELECT 1), 2)", "SELECT 1 NOT IN ((SELECT 1), (SELECT 2))"] {
            let statement = parse_sql(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
            assert!(format!("{statement:?}").contains("InList"), "{sql}");
        }
        let statement = parse_sql("SELECT 1 IN ((SELECT 1))").unwrap();
        assert!(format!("{statement:?}").contains("InSubquery"), "a subquery whose parenthesis closes the IN");
    }
}
