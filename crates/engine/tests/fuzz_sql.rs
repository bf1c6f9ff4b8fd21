//! Fuzzing the SQL front end (parser, binder, optimizer, planner) through
//! `Connection::execute` on small databases.
//!
//! Each case runs one statement:
//!
//! * **Mutated SQL**: a valid statement (the TPC-H queries, and every statement of
//!   `tests/sql/**/*.slt`, run against the tables its file creates) with 1 to 5
//!   token-level mutations: tokens deleted, duplicated, swapped or replaced; keywords,
//!   operators, casts, calls and parentheses inserted; literals replaced by huge, tiny,
//!   unicode or NUL-holding ones; identifiers by very long or unicode ones; stretches
//!   repeated or reversed; the text cut short; moderately deep nesting (up to 40
//!   parentheses, 12 subqueries, NOT and minus chains). Most mutations change an operand,
//!   so about half the statements get past the parser.
//! * **Generated SQL**: random queries from a small grammar over NULL-heavy tables of
//!   every type: joins of every kind (and chains of up to 100 tables), correlated and
//!   uncorrelated subqueries (scalar, IN, EXISTS, ANY/ALL), aggregates with GROUP
//!   BY/HAVING, CTEs, set operations, CASE/COALESCE/NULLIF, casts, string and date
//!   functions, ORDER BY/LIMIT/OFFSET, CREATE TABLE AS and EXPLAIN; sometimes mutated.
//!
//! Sessions rotate through configurations (one thread and tiny vectors, small blocks
//! without staging or SIMD, optimizer rules disabled), so rarely taken paths are fuzzed.
//!
//! Pass: the statement succeeds or fails with a user error. A panic, or an error whose
//! message says "internal error", fails the test with the statement minimised, unless it
//! matches a known bug in [`KNOWN_BUGS`] (each named, with its minimised SQL in
//! FINDINGS.md, and skipped so the loop stays green until it is fixed). Statements that
//! run long are interrupted (counted, never a failure); a hang names its case.
//!
//! Deep input that overflowed the stack would abort the whole process, so it cannot be
//! caught here: `deep_inputs_do_not_crash` runs each deep case in a child process.
//!
//! ```text
//! cargo test -p apiary --test fuzz_sql                                   # the seeded run
//! APIARY_FUZZ_ITERATIONS=200000 cargo test -p apiary --test fuzz_sql    # longer
//! APIARY_FUZZ_SEED=7 APIARY_FUZZ_FIRST=123 APIARY_FUZZ_ITERATIONS=1 ... # replay a case
//! APIARY_FUZZ_SHOW_KNOWN=1 ...                # also print the statements of known bugs
//! ```

mod fuzz_support;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use apiary::{Connection, Database};
use fuzz_support::{catch, excerpt, is_bug, FuzzConfig, Rng, Watchdog};

/// Cases in the default `cargo test` run.
const DEFAULT_CASES: u64 = 5000;

/// Cases per session: each session is a fresh database with its seed statements' tables.
const CASES_PER_SESSION: u64 = 40;

/// Statements tried when minimising one bug.
const MINIMISE_ATTEMPTS: usize = 400;

/// A statement running this long is interrupted (and counted, not failed).
const SLOW_STATEMENT: Duration = Duration::from_secs(5);

/// Known front-end bugs, skipped by the substring of their message: (substring, name).
/// Each is written up with a minimised statement in FINDINGS.md (not committed) or is
/// already an item of issue 10. Remove an entry once its bug is fixed.
const KNOWN_BUGS: &[(&str, &str)] = &[];

// ---------------------------------------------------------------------------------------
// Tokens

#[derive(Clone, Debug, PartialEq)]
enum Kind {
    Word,
    Number,
    String,
    QuotedIdent,
    Symbol,
}

#[derive(Clone, Debug)]
struct Token {
    kind: Kind,
    text: String,
    /// Whitespace before it in the source (kept, so joined text reads like the original).
    space_before: bool,
}

/// Splits SQL into tokens; comments become whitespace.
fn tokenize(sql: &str) -> Vec<Token> {
    let chars: Vec<char> = sql.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    let mut space = false;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            space = true;
            i += 1;
            continue;
        }
        if c == '-' && chars.get(i + 1) == Some(&'-') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            space = true;
            continue;
        }
        let start = i;
        let kind = if c == '\'' || c == '"' {
            i += 1;
            loop {
                match chars.get(i) {
                    None => break,
                    Some(&q) if q == c => {
                        if chars.get(i + 1) == Some(&c) {
                            i += 2;
                        } else {
                            i += 1;
                            break;
                        }
                    }
                    Some(_) => i += 1,
                }
            }
            if c == '\'' {
                Kind::String
            } else {
                Kind::QuotedIdent
            }
        } else if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit())) {
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                i += 1;
            }
            if i < chars.len() && (chars[i] == 'e' || chars[i] == 'E') {
                let sign = usize::from(matches!(chars.get(i + 1), Some('+') | Some('-')));
                if chars.get(i + 1 + sign).is_some_and(|d| d.is_ascii_digit()) {
                    i += 1 + sign;
                    while i < chars.len() && chars[i].is_ascii_digit() {
                        i += 1;
                    }
                }
            }
            Kind::Number
        } else if c.is_alphabetic() || c == '_' {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '$') {
                i += 1;
            }
            Kind::Word
        } else {
            let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
            i += if ["::", "<=", ">=", "<>", "!=", "||", "=>", "->"].contains(&two.as_str()) { 2 } else { 1 };
            Kind::Symbol
        };
        tokens.push(Token { kind, text: chars[start..i].iter().collect(), space_before: space });
        space = false;
    }
    tokens
}

fn join(tokens: &[Token]) -> String {
    let mut sql = String::new();
    for (i, token) in tokens.iter().enumerate() {
        if i > 0 && token.space_before {
            sql.push(' ');
        }
        sql.push_str(&token.text);
    }
    sql
}

fn token(kind: Kind, text: impl Into<String>) -> Token {
    Token { kind, text: text.into(), space_before: true }
}

// ---------------------------------------------------------------------------------------
// Mutations

const KEYWORDS: &[&str] = &[
    "SELECT",
    "FROM",
    "WHERE",
    "GROUP",
    "BY",
    "HAVING",
    "ORDER",
    "LIMIT",
    "OFFSET",
    "UNION",
    "ALL",
    "INTERSECT",
    "EXCEPT",
    "DISTINCT",
    "JOIN",
    "LEFT",
    "RIGHT",
    "FULL",
    "OUTER",
    "INNER",
    "CROSS",
    "NATURAL",
    "ON",
    "USING",
    "AND",
    "OR",
    "NOT",
    "IN",
    "EXISTS",
    "BETWEEN",
    "LIKE",
    "ILIKE",
    "IS",
    "NULL",
    "TRUE",
    "FALSE",
    "CASE",
    "WHEN",
    "THEN",
    "ELSE",
    "END",
    "CAST",
    "AS",
    "WITH",
    "VALUES",
    "ASC",
    "DESC",
    "NULLS",
    "FIRST",
    "LAST",
    "INTERVAL",
    "DATE",
    "TIMESTAMP",
    "EXTRACT",
    "ANY",
    "SOME",
    "LATERAL",
    "RECURSIVE",
    "OVER",
    "PARTITION",
    "FILTER",
    "WITHIN",
    "ESCAPE",
    "COLLATE",
    "ROLLUP",
    "CUBE",
    "GROUPING",
    "SETS",
    "FETCH",
    "NEXT",
    "ROWS",
    "ONLY",
    "TOP",
    "QUALIFY",
    "WINDOW",
    "INSERT",
    "INTO",
    "CREATE",
    "TABLE",
    "DROP",
    "IF",
    "PRIMARY",
    "KEY",
    "UNIQUE",
    "DEFAULT",
    "EXPLAIN",
    "ANALYZE",
];

const OPERATORS: &[&str] =
    &["+", "-", "*", "/", "%", "=", "<>", "!=", "<", ">", "<=", ">=", "||", "::", ",", ".", "(", ")", ";", "^", "&", "|", "~", "!"];

const FUNCTIONS: &[&str] = &[
    "abs",
    "avg",
    "ceil",
    "coalesce",
    "count",
    "date_part",
    "date_trunc",
    "extract",
    "floor",
    "greatest",
    "least",
    "length",
    "lower",
    "max",
    "min",
    "nullif",
    "round",
    "sqrt",
    "stddev",
    "substring",
    "sum",
    "trim",
    "upper",
    "replace",
    "strpos",
    "sign",
    "ln",
    "exp",
    "power",
    "concat",
    "bool_and",
    "bool_or",
    "variance",
    "any_value",
    "starts_with",
];

const TYPES: &[&str] = &[
    "INTEGER",
    "BIGINT",
    "SMALLINT",
    "DECIMAL(38,10)",
    "DECIMAL(3,2)",
    "DECIMAL(18,0)",
    "REAL",
    "DOUBLE",
    "VARCHAR",
    "VARCHAR(1)",
    "CHAR(3)",
    "DATE",
    "TIMESTAMP",
    "INTERVAL",
    "BOOLEAN",
    "TEXT",
    "NUMERIC",
    "FLOAT",
];

const NUMBERS: &[&str] = &[
    "0",
    "-0",
    "1",
    "-1",
    "2147483647",
    "2147483648",
    "-2147483649",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",
    "170141183460469231731687303715884105727",
    "99999999999999999999999999999999999999999999999999",
    "1e308",
    "1e309",
    "-1e-320",
    "0.0000000000000000000000000000000000000001",
    "1.5",
    "32767",
    "32768",
    "4294967296",
    "1e0",
    ".5",
    "5.",
    "00000000000000000001",
    "1e-400",
];

fn huge_number(rng: &mut Rng) -> String {
    let digits = *rng.pick(&[40usize, 400, 5000]);
    let mut number = "9".repeat(digits);
    if rng.chance(1, 2) {
        number.insert(digits / 2, '.');
    }
    number
}

const STRINGS: &[&str] = &[
    "''",
    "'a'",
    "'héllo wörld'",
    "'日本語'",
    "'🐝🍯'",
    "'\u{202e}rtl'",
    "'\u{0}'",
    "'a\u{0}b'",
    "'2024-02-29'",
    "'2024-13-45'",
    "'294277-01-01'",
    "'-infinity'",
    "'nan'",
    "'inf'",
    "'1e1000'",
    "' 42 '",
    "'1 day'",
    "'P1Y2M'",
    "'true'",
    "'%'",
    "'_'",
    "'\\'",
    "''''",
    "'\n'",
    "'00:00:00'",
    "'1999-12-31 23:59:59.9999999'",
];

fn long_identifier(rng: &mut Rng) -> String {
    match rng.below(4) {
        0 => "a".repeat(*rng.pick(&[64usize, 255, 10_000])),
        1 => "ñandú_ß_日本".to_string(),
        2 => format!("\"{}\"", rng.pick(&["", " ", "a b", "a\u{0}b", "\"\"", "SELECT", "🐝"])),
        _ => format!("x{}", "_".repeat(300)),
    }
}

/// Words that are SQL keywords rather than names (replacing or wrapping them breaks the
/// syntax, which only the parser would see).
fn is_keyword(word: &str) -> bool {
    const MORE: &[&str] = &["BY", "SET", "TO", "OF", "FOR", "DAY", "MONTH", "YEAR", "CHECKPOINT", "INTEGER", "VARCHAR", "DECIMAL"];
    let upper = word.to_ascii_uppercase();
    KEYWORDS.contains(&upper.as_str()) || MORE.contains(&upper.as_str()) || TYPES.iter().any(|t| t.starts_with(upper.as_str()))
}

/// Positions of operands: literals and names that stand alone (not a function name, not
/// part of `a.b`). Mutating these keeps the statement parseable more often.
fn operands(tokens: &[Token]) -> Vec<usize> {
    (0..tokens.len())
        .filter(|&i| {
            let token = &tokens[i];
            let next = tokens.get(i + 1).map(|t| t.text.as_str());
            let previous = i.checked_sub(1).map(|p| tokens[p].text.as_str());
            match token.kind {
                Kind::Number | Kind::String => true,
                Kind::Word | Kind::QuotedIdent => {
                    !is_keyword(&token.text) && next != Some("(") && next != Some(".") && previous != Some(".")
                }
                Kind::Symbol => false,
            }
        })
        .collect()
}

/// Applies one random mutation to `tokens`; `pool` holds tokens of the whole corpus.
fn mutate(rng: &mut Rng, tokens: &mut Vec<Token>, pool: &[Token]) {
    if tokens.is_empty() {
        tokens.push(token(Kind::Word, *rng.pick(KEYWORDS)));
        return;
    }
    let len = tokens.len();
    let at = rng.below(len);
    // Arms 0 to 9 mostly break the syntax; the rest change an operand and mostly keep it,
    // so the binder, optimizer and planner see many of the statements too.
    let operand_positions = operands(tokens);
    let operand = if operand_positions.is_empty() { at } else { *rng.pick(&operand_positions) };
    match rng.below(32) {
        0 => {
            tokens.remove(at);
        }
        1 => {
            let copy = tokens[at].clone();
            tokens.insert(at, copy);
        }
        2 => {
            let other = rng.below(len);
            tokens.swap(at, other);
        }
        3 => tokens.insert(at, token(Kind::Word, *rng.pick(KEYWORDS))),
        4 => tokens.insert(at, token(Kind::Symbol, *rng.pick(OPERATORS))),
        5 => {
            // Parentheses around a stretch, or a lone one.
            let end = (at + rng.below(6)).min(len);
            if rng.chance(3, 4) {
                tokens.insert(end, token(Kind::Symbol, ")"));
            }
            tokens.insert(at, token(Kind::Symbol, "("));
        }
        6 => {
            // Repeat a stretch somewhere.
            let end = (at + rng.range(1, 12)).min(len);
            let stretch: Vec<Token> = tokens[at..end].to_vec();
            let to = rng.below(len + 1);
            tokens.splice(to..to, stretch);
        }
        7 => tokens.truncate(at.max(1)),
        8 => {
            // A character the lexer may not expect.
            let odd = *rng.pick(&["\u{0}", "\u{feff}", "`", "$1", "?", "@", "#", "{", "}", "[", "]", "\\", "é", "🐝", "\u{2028}"]);
            tokens.insert(at, token(Kind::Symbol, odd));
        }
        9 => {
            let other = rng.below(len);
            let (a, b) = (at.min(other), at.max(other));
            tokens[a..=b].reverse();
        }
        10..=13 => {
            // Another operand of the same kind from the corpus (a column, a literal, ...).
            let kind = tokens[operand].kind.clone();
            for _ in 0..50 {
                let candidate = rng.pick(pool);
                if candidate.kind == kind && (kind != Kind::Word || !is_keyword(&candidate.text)) {
                    tokens[operand].text = candidate.text.clone();
                    break;
                }
            }
        }
        14..=19 => {
            // A literal replaced by an extreme one.
            let numbers: Vec<usize> = (0..len).filter(|&i| tokens[i].kind == Kind::Number).collect();
            let strings: Vec<usize> = (0..len).filter(|&i| tokens[i].kind == Kind::String).collect();
            if rng.chance(1, 2) && !numbers.is_empty() {
                let i = *rng.pick(&numbers);
                tokens[i].text = if rng.chance(1, 6) { huge_number(rng) } else { rng.pick(NUMBERS).to_string() };
            } else if !strings.is_empty() {
                let i = *rng.pick(&strings);
                tokens[i].text = match rng.below(8) {
                    0 => format!("'{}'", "x".repeat(rng.range(1000, 200_000))),
                    _ => rng.pick(STRINGS).to_string(),
                };
            } else {
                tokens.insert(at, token(Kind::Number, *rng.pick(NUMBERS)));
            }
        }
        20..=22 => {
            let names: Vec<usize> = operand_positions.iter().copied().filter(|&i| tokens[i].kind == Kind::Word).collect();
            if !names.is_empty() {
                let i = *rng.pick(&names);
                tokens[i].text = long_identifier(rng);
            }
        }
        23..=25 => {
            // A cast after an operand.
            let cast = format!("::{}", rng.pick(TYPES));
            tokens.insert(operand + 1, token(Kind::Symbol, cast));
        }
        26..=28 => {
            // Moderately deep nesting around an operand.
            let at = operand;
            let depth = rng.range(2, 40);
            let (open, close) = match rng.below(4) {
                0 => ("(".repeat(depth), ")".repeat(depth)),
                1 => ("(SELECT ".repeat(depth.min(12)), ")".repeat(depth.min(12))),
                2 => ("NOT ".repeat(depth), String::new()),
                _ => ("- ".repeat(depth), String::new()),
            };
            tokens.insert(at + 1, token(Kind::Symbol, close));
            tokens.insert(at, token(Kind::Symbol, open));
        }
        _ => {
            // A call around an operand, or with random arguments in its place.
            let inner = tokens[operand].text.clone();
            let arguments = [inner.as_str(), inner.as_str(), "", "*", "1", "NULL", "1, 2", "'a', 1, 2", "DISTINCT 1", "1.5, -3"];
            let arguments = rng.pick(&arguments).to_string();
            let call = format!("{}({arguments})", rng.pick(FUNCTIONS));
            tokens[operand] = token(Kind::Word, call);
        }
    }
}

// ---------------------------------------------------------------------------------------
// The databases

/// TPC-H tables with four join-consistent rows each, and NULL-heavy tables of every type.
fn world_setup() -> Vec<String> {
    let mut statements: Vec<String> =
        apiary::tpch::SCHEMA.split(';').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect();
    statements.extend(
        [
            "CREATE TABLE t1 (i INTEGER, b BIGINT, s SMALLINT, d DECIMAL(12,2), w DECIMAL(30,5), f DOUBLE, v VARCHAR, c CHAR(3), dt DATE, ts TIMESTAMP, bo BOOLEAN, iv INTERVAL)",
            "INSERT INTO t1 VALUES (1, 10, 1, 1.50, 12345678901234567890.12345, 0.5, 'a', 'x', DATE '2024-01-01', TIMESTAMP '2024-01-01 10:00:00', true, INTERVAL '1 day'), \
             (2, -5, -2, -0.01, -1.00000, -2.5, 'bb', 'yy', DATE '1970-01-01', TIMESTAMP '1970-01-01 00:00:00', false, INTERVAL '2 months'), \
             (NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL), \
             (2, 2147483647, 32767, 9999999999.99, 0, 1e300, '', 'z', DATE '2000-02-29', TIMESTAMP '2000-02-29 23:59:59', NULL, INTERVAL '-3 hours'), \
             (-2147483648, -9223372036854775808, -32768, -9999999999.99, 99999999999999999999999.99999, -0.0, 'héllo', NULL, DATE '0001-01-01', NULL, true, NULL), \
             (0, 0, 0, 0, 0, NULL, 'a', 'x', NULL, TIMESTAMP '2024-06-01 12:00:00', false, INTERVAL '0 days')",
            "CREATE TABLE t2 (i INTEGER, v VARCHAR, d DECIMAL(12,2), dt DATE)",
            "INSERT INTO t2 VALUES (1, 'a', 1.50, DATE '2024-01-01'), (1, 'a', 1.50, DATE '2024-01-01'), (3, NULL, 2.00, NULL), (NULL, 'bb', NULL, DATE '1970-01-01'), (2, 'zz', -0.01, DATE '2000-02-29')",
            "CREATE TABLE t3 (i INTEGER, v VARCHAR)",
            "CREATE TABLE empty (i INTEGER, v VARCHAR)",
        ]
        .map(str::to_string),
    );
    statements
}

/// Rows for the TPC-H tables: keys 1 to 4, so every join finds partners.
fn tpch_rows(conn: &mut Connection) -> Vec<String> {
    let mut inserts = Vec::new();
    for table in apiary::tpch::TABLES {
        let Ok(described) = conn.query(&format!("DESCRIBE {table}")) else { continue };
        let types: Vec<String> = described.rows().map(|r| r[1].to_string()).collect();
        let rows: Vec<String> = (1..=4)
            .map(|k| {
                let values: Vec<String> = types
                    .iter()
                    .map(|t| {
                        let length = t.split(['(', ')']).nth(1).and_then(|n| n.parse::<usize>().ok()).unwrap_or(20);
                        if t.starts_with("DECIMAL") {
                            format!("{k}.25")
                        } else if t.starts_with("DATE") {
                            format!("DATE '199{k}-0{k}-1{k}'")
                        } else if t.starts_with("CHAR") || t.starts_with("VARCHAR") {
                            let text = format!("{}{k}", ["R", "N", "A", "F"][k % 4]);
                            format!("'{}'", &text[..text.len().min(length)])
                        } else {
                            k.to_string()
                        }
                    })
                    .collect();
                format!("({})", values.join(", "))
            })
            .collect();
        inserts.push(format!("INSERT INTO {table} VALUES {}", rows.join(", ")));
    }
    inserts
}

/// The statements of an `.slt` file (SQL of `statement` and `query` records).
fn slt_statements(path: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(path) else { return Vec::new() };
    let mut statements = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if !(line.starts_with("statement") || line.starts_with("query")) {
            continue;
        }
        let mut sql = Vec::new();
        while let Some(next) = lines.peek() {
            if next.trim().is_empty() || next.starts_with("----") {
                break;
            }
            sql.push(*next);
            lines.next();
        }
        if !sql.is_empty() {
            statements.push(sql.join("\n"));
        }
    }
    statements
}

/// Whether a statement may run in the fuzz loop: nothing that writes or reads files
/// outside the database (COPY TO could overwrite test data; paths in the corpus are
/// relative to the test's directory) and nothing unbounded (`read_csv('/dev/zero')`).
fn allowed(sql: &str) -> bool {
    let upper = sql.to_uppercase();
    !(upper.contains("COPY") || upper.contains("__TEST_DIR__") || upper.contains("/DEV/") || upper.contains("READ_PARQUET"))
}

/// The seed corpus: the setup and statements of each slt file, and the TPC-H queries.
struct Corpus {
    /// (name, statements): one entry per slt file.
    files: Vec<(String, Vec<String>)>,
    tpch: Vec<String>,
    /// Tokens of everything, for replacements.
    pool: Vec<Token>,
}

fn corpus() -> &'static Corpus {
    static CORPUS: OnceLock<Corpus> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/sql");
        let mut paths = Vec::new();
        collect_slt(&root, &mut paths);
        let files: Vec<(String, Vec<String>)> = paths
            .iter()
            .map(|p| {
                (p.strip_prefix(&root).unwrap_or(p).display().to_string(), slt_statements(p).into_iter().filter(|s| allowed(s)).collect())
            })
            .filter(|(_, statements): &(String, Vec<String>)| !statements.is_empty())
            .collect();
        let tpch: Vec<String> = (1..=22).filter_map(apiary::tpch::query).map(str::to_string).collect();
        let mut pool = Vec::new();
        for sql in files.iter().flat_map(|(_, s)| s).chain(&tpch) {
            pool.extend(tokenize(sql).into_iter().filter(|t| t.text.len() < 200));
        }
        assert!(files.len() > 20 && tpch.len() == 22 && !pool.is_empty(), "the seed corpus is missing");
        Corpus { files, tpch, pool }
    })
}

fn collect_slt(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect_slt(&path, out);
        } else if path.extension().is_some_and(|e| e == "slt") {
            out.push(path);
        }
    }
}

/// What a session runs against: the world tables, plus one slt file's statements.
#[derive(Clone)]
struct Session {
    /// Index into `corpus().files`, or `None` for a TPC-H and generated-SQL session.
    file: Option<usize>,
    /// Settings applied after the world tables are loaded (before the seed file runs).
    settings: &'static [&'static str],
}

/// Configurations sessions run under, so rarely taken paths are fuzzed too.
const SETTINGS: &[&[&str]] = &[
    &[],
    &["SET threads = 1", "SET vector_size = 64"],
    &["SET block_size = 64", "SET staging = false", "SET simd = false"],
    &["SET disabled_optimizers = 'reorder_joins,push_down_predicates'"],
    &["SET disabled_optimizers = 'fold_constants,prune_columns,push_down_semi_joins,reduce_aggregate_inputs'"],
];

impl Session {
    fn seeds(&self) -> &'static [String] {
        match self.file {
            Some(index) => &corpus().files[index].1,
            None => &corpus().tpch,
        }
    }

    /// A fresh database set up for the session: the world tables, then the seed file's
    /// statements in order (their tables and rows; errors are expected and ignored).
    /// The seed statements run under `watchdog` like cases: under a session's settings
    /// (one thread, tiny vectors) a large join of a seed file can run for many minutes.
    fn open(&self, watchdog: Option<&Watchdog>) -> (Database, Connection) {
        let db = Database::open_in_memory().expect("in-memory database");
        let mut conn = db.connect();
        conn.execute("SET threads = 2").expect("SET threads");
        for statement in world_setup() {
            conn.execute(&statement).unwrap_or_else(|e| panic!("world setup: {statement}: {e}"));
        }
        for statement in tpch_rows(&mut conn) {
            conn.execute(&statement).unwrap_or_else(|e| panic!("world rows: {statement}: {e}"));
        }
        for setting in self.settings {
            conn.execute(setting).unwrap_or_else(|e| panic!("{setting}: {e}"));
        }
        if self.file.is_some() {
            for statement in self.seeds() {
                if let Some(watchdog) = watchdog {
                    watchdog.begin(format!("setup of {}: {}", self.describe(), excerpt(statement, 500)), Some(conn.interrupt_flag()));
                }
                let _ = catch(|| conn.execute(statement));
                if let Some(watchdog) = watchdog {
                    watchdog.end();
                }
            }
        }
        (db, conn)
    }

    fn describe(&self) -> String {
        let seeds = match self.file {
            Some(index) => corpus().files[index].0.clone(),
            None => "TPC-H and generated queries".to_string(),
        };
        if self.settings.is_empty() {
            seeds
        } else {
            format!("{seeds}, after {}", self.settings.join("; "))
        }
    }
}

// ---------------------------------------------------------------------------------------
// Generated SQL: a small typed grammar over t1, t2, t3 and empty.

#[derive(Clone, Copy, PartialEq, Debug)]
enum Ty {
    Int,
    Dec,
    Float,
    Str,
    Date,
    Bool,
}

const GENERATED_TABLES: &[(&str, &[(&str, Ty)])] = &[
    (
        "t1",
        &[
            ("i", Ty::Int),
            ("b", Ty::Int),
            ("s", Ty::Int),
            ("d", Ty::Dec),
            ("w", Ty::Dec),
            ("f", Ty::Float),
            ("v", Ty::Str),
            ("c", Ty::Str),
            ("dt", Ty::Date),
            ("bo", Ty::Bool),
        ],
    ),
    ("t2", &[("i", Ty::Int), ("v", Ty::Str), ("d", Ty::Dec), ("dt", Ty::Date)]),
    ("t3", &[("i", Ty::Int), ("v", Ty::Str)]),
    ("empty", &[("i", Ty::Int), ("v", Ty::Str)]),
];

/// Columns visible to an expression: (qualifier, column, type).
type Scope = Vec<(String, String, Ty)>;

struct Generator<'a> {
    rng: &'a mut Rng,
    next_alias: usize,
}

impl Generator<'_> {
    fn alias(&mut self) -> String {
        self.next_alias += 1;
        format!("a{}", self.next_alias)
    }

    fn literal(&mut self, ty: Ty) -> String {
        let rng = &mut *self.rng;
        if rng.chance(1, 10) {
            return "NULL".to_string();
        }
        match ty {
            Ty::Int => rng.pick(&["0", "1", "2", "-1", "3", "2147483647", "-2147483648", "100"]).to_string(),
            Ty::Dec => rng.pick(&["1.50", "0.01", "-0.01", "2.00", "99999999999.99", "0.5"]).to_string(),
            Ty::Float => rng.pick(&["0.5", "-2.5", "1e300", "CAST('nan' AS DOUBLE)", "0.0"]).to_string(),
            Ty::Str => rng.pick(&["'a'", "'bb'", "''", "'zz'", "'héllo'", "'%a%'"]).to_string(),
            Ty::Date => rng.pick(&["DATE '2024-01-01'", "DATE '1970-01-01'", "DATE '2000-02-29'"]).to_string(),
            Ty::Bool => rng.pick(&["TRUE", "FALSE"]).to_string(),
        }
    }

    fn column(&mut self, ty: Ty, scope: &Scope) -> Option<String> {
        let matching: Vec<&(String, String, Ty)> = scope.iter().filter(|(_, _, t)| *t == ty).collect();
        if matching.is_empty() {
            return None;
        }
        let (qualifier, name, _) = *self.rng.pick(&matching);
        Some(format!("{qualifier}.{name}"))
    }

    fn leaf(&mut self, ty: Ty, scope: &Scope) -> String {
        if self.rng.chance(3, 4) {
            if let Some(column) = self.column(ty, scope) {
                return column;
            }
        }
        self.literal(ty)
    }

    fn any_ty(&mut self) -> Ty {
        *self.rng.pick(&[Ty::Int, Ty::Int, Ty::Dec, Ty::Float, Ty::Str, Ty::Str, Ty::Date, Ty::Bool])
    }

    /// An expression of type `ty`; `aggregate` allows aggregate functions.
    fn expr(&mut self, ty: Ty, depth: usize, scope: &Scope, aggregate: bool) -> String {
        if depth == 0 || self.rng.chance(1, 3) {
            return self.leaf(ty, scope);
        }
        let d = depth - 1;
        // Forms every type has.
        match self.rng.below(14) {
            0 => {
                let condition = self.expr(Ty::Bool, d, scope, aggregate);
                let then = self.expr(ty, d, scope, aggregate);
                let otherwise = self.expr(ty, d, scope, aggregate);
                return format!("CASE WHEN {condition} THEN {then} ELSE {otherwise} END");
            }
            1 => {
                let (a, b) = (self.expr(ty, d, scope, aggregate), self.expr(ty, d, scope, aggregate));
                return format!("COALESCE({a}, {b})");
            }
            2 => {
                let (a, b) = (self.expr(ty, d, scope, aggregate), self.expr(ty, d, scope, aggregate));
                return format!("NULLIF({a}, {b})");
            }
            3 if depth > 1 => return format!("({})", self.scalar_subquery(ty, d, scope)),
            4 if aggregate && ty != Ty::Bool => {
                let function = match ty {
                    Ty::Int => *self.rng.pick(&["count", "min", "max", "sum", "any_value"]),
                    Ty::Dec => *self.rng.pick(&["min", "max", "sum", "avg"]),
                    Ty::Float => *self.rng.pick(&["min", "max", "sum", "avg", "stddev", "variance", "var_pop"]),
                    _ => *self.rng.pick(&["min", "max", "any_value"]),
                };
                let argument_ty = if function == "count" { self.any_ty() } else { ty };
                let argument = self.expr(argument_ty, d, scope, false);
                let distinct = if self.rng.chance(1, 5) { "DISTINCT " } else { "" };
                return match (function, ty) {
                    ("count", _) if self.rng.chance(1, 3) => "count(*)".to_string(),
                    ("sum", Ty::Int) | ("count", _) => format!("CAST({function}({distinct}{argument}) AS INTEGER)"),
                    ("avg", Ty::Dec) | ("sum", Ty::Float) | ("avg", Ty::Float) | ("stddev" | "variance" | "var_pop", _) => {
                        format!("CAST({function}({distinct}{argument}) AS {})", if ty == Ty::Dec { "DECIMAL(12,2)" } else { "DOUBLE" })
                    }
                    _ => format!("{function}({distinct}{argument})"),
                };
            }
            5 => {
                let from = self.any_ty();
                let inner = self.expr(from, d, scope, aggregate);
                let target = match ty {
                    Ty::Int => "INTEGER",
                    Ty::Dec => "DECIMAL(12,2)",
                    Ty::Float => "DOUBLE",
                    Ty::Str => "VARCHAR",
                    Ty::Date => "DATE",
                    Ty::Bool => "BOOLEAN",
                };
                return format!("CAST({inner} AS {target})");
            }
            _ => {}
        }
        match ty {
            Ty::Int => match self.rng.below(9) {
                0 => format!("abs({})", self.expr(Ty::Int, d, scope, aggregate)),
                1 => format!("length({})", self.expr(Ty::Str, d, scope, aggregate)),
                2 => format!("-({})", self.expr(Ty::Int, d, scope, aggregate)),
                3 => {
                    let part = *self.rng.pick(&["year", "month", "day", "quarter", "dow", "doy", "week"]);
                    format!("EXTRACT({part} FROM {})", self.expr(Ty::Date, d, scope, aggregate))
                }
                4 => {
                    let function = *self.rng.pick(&["greatest", "least"]);
                    format!("{function}({}, {})", self.expr(Ty::Int, d, scope, aggregate), self.expr(Ty::Int, d, scope, aggregate))
                }
                5 => format!("strpos({}, {})", self.expr(Ty::Str, d, scope, aggregate), self.literal(Ty::Str)),
                6 => {
                    // The simple CASE form.
                    let subject = self.expr(Ty::Int, d, scope, aggregate);
                    let (a, b) = (self.literal(Ty::Int), self.expr(Ty::Int, d, scope, aggregate));
                    format!("CASE {subject} WHEN {a} THEN {b} WHEN 2 THEN 3 ELSE {} END", self.leaf(Ty::Int, scope))
                }
                _ => {
                    let op = *self.rng.pick(&["+", "-", "*", "/", "%"]);
                    format!("({} {op} {})", self.expr(Ty::Int, d, scope, aggregate), self.expr(Ty::Int, d, scope, aggregate))
                }
            },
            Ty::Dec => match self.rng.below(5) {
                0 => format!("round({}, {})", self.expr(Ty::Dec, d, scope, aggregate), self.rng.pick(&["0", "1", "-1", "2"])),
                1 => format!("{}({})", self.rng.pick(&["floor", "ceil", "abs", "sign"]), self.expr(Ty::Dec, d, scope, aggregate)),
                2 => format!("({} / {})", self.expr(Ty::Dec, d, scope, aggregate), self.expr(Ty::Int, d, scope, aggregate)),
                _ => {
                    let op = *self.rng.pick(&["+", "-", "*"]);
                    format!("({} {op} {})", self.expr(Ty::Dec, d, scope, aggregate), self.expr(Ty::Dec, d, scope, aggregate))
                }
            },
            Ty::Float => match self.rng.below(4) {
                0 => format!("sqrt(abs({}))", self.expr(Ty::Float, d, scope, aggregate)),
                1 => format!("{}({})", self.rng.pick(&["ln", "exp", "floor", "round"]), self.expr(Ty::Float, d, scope, aggregate)),
                _ => {
                    let op = *self.rng.pick(&["+", "-", "*", "/"]);
                    format!("({} {op} {})", self.expr(Ty::Float, d, scope, aggregate), self.expr(Ty::Float, d, scope, aggregate))
                }
            },
            Ty::Str => match self.rng.below(7) {
                0 => format!("({} || {})", self.expr(Ty::Str, d, scope, aggregate), self.expr(Ty::Str, d, scope, aggregate)),
                1 => format!("{}({})", self.rng.pick(&["upper", "lower", "ltrim", "rtrim"]), self.expr(Ty::Str, d, scope, aggregate)),
                2 => {
                    let (from, length) = (self.expr(Ty::Int, d, scope, aggregate), self.rng.pick(&["0", "1", "2", "-1", "100"]));
                    format!("substring({} FROM {from} FOR {length})", self.expr(Ty::Str, d, scope, aggregate))
                }
                3 => format!("replace({}, 'a', {})", self.expr(Ty::Str, d, scope, aggregate), self.literal(Ty::Str)),
                4 => format!(
                    "concat({}, {}, {})",
                    self.expr(Ty::Str, d, scope, aggregate),
                    self.leaf(Ty::Int, scope),
                    self.leaf(Ty::Date, scope)
                ),
                _ => format!("trim({})", self.expr(Ty::Str, d, scope, aggregate)),
            },
            Ty::Date => match self.rng.below(3) {
                0 => {
                    let part = *self.rng.pick(&["year", "month", "day", "quarter", "week"]);
                    format!("CAST(date_trunc('{part}', {}) AS DATE)", self.expr(Ty::Date, d, scope, aggregate))
                }
                1 => format!(
                    "({} + INTERVAL '{}')",
                    self.expr(Ty::Date, d, scope, aggregate),
                    self.rng.pick(&["1 day", "-1 month", "3 years"])
                ),
                _ => format!("({} + {})", self.expr(Ty::Date, d, scope, aggregate), self.rng.pick(&["1", "-1", "30"])),
            },
            Ty::Bool => self.condition(d, scope, aggregate),
        }
    }

    fn condition(&mut self, d: usize, scope: &Scope, aggregate: bool) -> String {
        match self.rng.below(13) {
            0 | 1 => {
                let ty = self.any_ty();
                let op = *self.rng.pick(&["=", "<>", "<", "<=", ">", ">="]);
                format!("{} {op} {}", self.expr(ty, d, scope, aggregate), self.expr(ty, d, scope, aggregate))
            }
            2 => {
                let op = *self.rng.pick(&["AND", "OR"]);
                format!("({} {op} {})", self.expr(Ty::Bool, d, scope, aggregate), self.expr(Ty::Bool, d, scope, aggregate))
            }
            3 => format!("NOT ({})", self.expr(Ty::Bool, d, scope, aggregate)),
            4 => {
                let ty = self.any_ty();
                format!("{} IS {}NULL", self.expr(ty, d, scope, aggregate), if self.rng.chance(1, 2) { "NOT " } else { "" })
            }
            5 => {
                let ty = self.any_ty();
                let list: Vec<String> = (0..self.rng.range(1, 4)).map(|_| self.literal(ty)).collect();
                let not = if self.rng.chance(1, 2) { "NOT " } else { "" };
                format!("{} {not}IN ({})", self.expr(ty, d, scope, aggregate), list.join(", "))
            }
            6 => {
                let ty = self.any_ty();
                let value = self.expr(ty, d, scope, aggregate);
                let not = if self.rng.chance(1, 2) { "NOT " } else { "" };
                let subquery = self.subquery(&[ty], d, scope);
                format!("{value} {not}IN ({subquery})")
            }
            7 => {
                let not = if self.rng.chance(1, 2) { "NOT " } else { "" };
                let ty = self.any_ty();
                format!("{not}EXISTS ({})", self.subquery(&[ty], d, scope))
            }
            8 => {
                let ty = self.any_ty();
                let (a, b, c) =
                    (self.expr(ty, d, scope, aggregate), self.expr(ty, d, scope, aggregate), self.expr(ty, d, scope, aggregate));
                format!("{a} BETWEEN {b} AND {c}")
            }
            9 => {
                let ty = self.any_ty();
                let op = *self.rng.pick(&["=", "<", ">=", "<>"]);
                let quantifier = *self.rng.pick(&["", "ANY ", "ALL ", "SOME "]);
                let value = self.expr(ty, d, scope, aggregate);
                if quantifier.is_empty() {
                    format!("{value} {op} ({})", self.scalar_subquery(ty, d, scope))
                } else {
                    format!("{value} {op} {quantifier}({})", self.subquery(&[ty], d, scope))
                }
            }
            10 => {
                let ty = self.any_ty();
                let not = if self.rng.chance(1, 2) { "NOT " } else { "" };
                format!("{} IS {not}DISTINCT FROM {}", self.expr(ty, d, scope, aggregate), self.expr(ty, d, scope, aggregate))
            }
            11 if aggregate => format!("{}({})", self.rng.pick(&["bool_and", "bool_or"]), self.condition(d, scope, false)),
            _ => {
                let like = *self.rng.pick(&["LIKE", "NOT LIKE", "ILIKE"]);
                format!(
                    "{} {like} {}",
                    self.expr(Ty::Str, d, scope, aggregate),
                    self.rng.pick(&["'a%'", "'%b_'", "'_'", "'%'", "''", "'a\\%'"])
                )
            }
        }
    }

    /// `SELECT <agg or value> FROM ... WHERE <correlated>`: one row (or an error).
    fn scalar_subquery(&mut self, ty: Ty, d: usize, outer: &Scope) -> String {
        let (from, scope) = self.join_tree(1, d);
        let mut visible = scope.clone();
        visible.extend(outer.iter().cloned());
        let value = self.expr(ty, d, &visible, true);
        let condition = self.expr(Ty::Bool, d, &visible, false);
        let value = if value.contains('(') || self.rng.chance(1, 2) { value } else { format!("max({value})") };
        format!("SELECT {value} FROM {from} WHERE {condition}")
    }

    /// A query returning columns of `types`, seeing `outer` (correlation).
    fn subquery(&mut self, types: &[Ty], d: usize, outer: &Scope) -> String {
        let items = 1 + self.rng.below(2);
        let (from, scope) = self.join_tree(items, d);
        let mut visible = scope.clone();
        visible.extend(outer.iter().cloned());
        let values: Vec<String> = types.iter().map(|&ty| self.expr(ty, d, &visible, false)).collect();
        let condition = self.expr(Ty::Bool, d, &visible, false);
        format!("SELECT {} FROM {from} WHERE {condition}", values.join(", "))
    }

    /// A FROM clause of up to `items` joined items; returns it and its columns.
    fn join_tree(&mut self, items: usize, d: usize) -> (String, Scope) {
        let (mut sql, mut scope) = self.table_ref(d);
        for _ in 1..items {
            let (item, item_scope) = self.table_ref(d);
            let kind = *self.rng.pick(&["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN", "CROSS JOIN", ",", "INNER JOIN", "LEFT JOIN"]);
            let mut combined = scope.clone();
            combined.extend(item_scope.iter().cloned());
            if kind == "," || kind == "CROSS JOIN" {
                sql = format!("{sql} {kind} {item}");
            } else {
                let condition = match self.column(Ty::Int, &scope).zip(self.column(Ty::Int, &item_scope)) {
                    Some((left, right)) if self.rng.chance(3, 4) => format!("{left} = {right}"),
                    _ => self.expr(Ty::Bool, d.min(2), &combined, false),
                };
                sql = format!("{sql} {kind} {item} ON {condition}");
            }
            scope = combined;
        }
        (sql, scope)
    }

    fn table_ref(&mut self, d: usize) -> (String, Scope) {
        let alias = self.alias();
        if d > 0 && self.rng.chance(1, 5) {
            // A derived table.
            let types: Vec<Ty> = (0..self.rng.range(1, 4)).map(|_| self.any_ty()).collect();
            let (query, _) = self.query(&types, d - 1);
            let names: Vec<String> = (0..types.len()).map(|i| format!("c{i}")).collect();
            let scope = names.iter().zip(&types).map(|(n, &t)| (alias.clone(), n.clone(), t)).collect();
            return (format!("({query}) AS {alias}({})", names.join(", ")), scope);
        }
        if self.rng.chance(1, 10) {
            let rows: Vec<String> =
                (0..self.rng.range(1, 4)).map(|_| format!("({}, {})", self.literal(Ty::Int), self.literal(Ty::Str))).collect();
            let scope = vec![(alias.clone(), "c0".to_string(), Ty::Int), (alias.clone(), "c1".to_string(), Ty::Str)];
            return (format!("(VALUES {}) AS {alias}(c0, c1)", rows.join(", ")), scope);
        }
        let (table, columns) = *self.rng.pick(GENERATED_TABLES);
        let scope = columns.iter().map(|&(name, ty)| (alias.clone(), name.to_string(), ty)).collect();
        (format!("{table} AS {alias}"), scope)
    }

    /// A query whose columns have `types`: SELECT [DISTINCT] ... FROM ... [WHERE] [GROUP
    /// BY ... HAVING] [ORDER BY] [LIMIT], or a set operation of two such queries.
    fn query(&mut self, types: &[Ty], d: usize) -> (String, usize) {
        if d > 0 && self.rng.chance(1, 12) {
            // A common table expression used by the query.
            let cte_types: Vec<Ty> = (0..self.rng.range(1, 3)).map(|_| self.any_ty()).collect();
            let (cte, _) = self.query(&cte_types, d - 1);
            let names: Vec<String> = (0..cte_types.len()).map(|i| format!("c{i}")).collect();
            let alias = self.alias();
            let scope: Scope = names.iter().zip(&cte_types).map(|(n, &t)| (alias.clone(), n.clone(), t)).collect();
            let values: Vec<String> = types.iter().map(|&ty| self.expr(ty, d - 1, &scope, false)).collect();
            let condition = self.expr(Ty::Bool, d - 1, &scope, false);
            return (
                format!(
                    "WITH w{alias}({}) AS ({cte}) SELECT {} FROM w{alias} AS {alias} WHERE {condition}",
                    names.join(", "),
                    values.join(", ")
                ),
                types.len(),
            );
        }
        if d > 0 && self.rng.chance(1, 6) {
            let (left, _) = self.query(types, d - 1);
            let (right, _) = self.query(types, d - 1);
            let op = *self.rng.pick(&["UNION", "UNION ALL", "INTERSECT", "EXCEPT"]);
            return (format!("({left}) {op} ({right})"), types.len());
        }
        let items = 1 + self.rng.below(3);
        let (from, scope) = self.join_tree(items, d);
        let grouped = self.rng.chance(1, 3);
        let mut sql = String::from("SELECT ");
        if self.rng.chance(1, 6) {
            sql.push_str("DISTINCT ");
        }
        let mut keys = Vec::new();
        let values: Vec<String> = types
            .iter()
            .map(|&ty| {
                if grouped && self.rng.chance(1, 2) {
                    let key = if self.rng.chance(1, 4) { self.expr(ty, 1, &scope, false) } else { self.leaf(ty, &scope) };
                    keys.push(key.clone());
                    key
                } else {
                    self.expr(ty, d, &scope, grouped)
                }
            })
            .collect();
        sql.push_str(&values.join(", "));
        sql.push_str(&format!(" FROM {from}"));
        if self.rng.chance(2, 3) {
            sql.push_str(&format!(" WHERE {}", self.expr(Ty::Bool, d, &scope, false)));
        }
        if grouped {
            if keys.is_empty() && self.rng.chance(1, 2) {
                let ty = self.any_ty();
                keys.push(self.leaf(ty, &scope));
            }
            if !keys.is_empty() {
                sql.push_str(&format!(" GROUP BY {}", keys.join(", ")));
            }
            if self.rng.chance(1, 3) {
                sql.push_str(&format!(" HAVING {}", self.expr(Ty::Bool, d, &scope, true)));
            }
        }
        if self.rng.chance(1, 3) {
            let mut positions = Vec::new();
            for position in 1..=types.len() {
                if self.rng.chance(1, 2) {
                    positions.push(format!("{position}{}", self.rng.pick(&["", " DESC", " ASC NULLS FIRST", " DESC NULLS LAST"])));
                }
            }
            if !positions.is_empty() {
                sql.push_str(&format!(" ORDER BY {}", positions.join(", ")));
            }
        }
        if self.rng.chance(1, 4) {
            sql.push_str(&format!(" LIMIT {}", self.rng.pick(&["0", "1", "2", "10", "1.25", "-1", "NULL"])));
            if self.rng.chance(1, 3) {
                sql.push_str(&format!(" OFFSET {}", self.rng.pick(&["0", "1", "5"])));
            }
        }
        (sql, types.len())
    }
}

/// A join of `tables` copies of t2 and t3, chained on equal keys (the join orderer's
/// exhaustive and greedy ranges).
fn many_table_join(rng: &mut Rng) -> String {
    let tables = *rng.pick(&[2usize, 5, 12, 13, 20, 63, 64, 65, 100]);
    let names: Vec<String> = (0..tables).map(|i| format!("{} AS j{i}", if i % 2 == 0 { "t2" } else { "t3" })).collect();
    let conditions: Vec<String> = (1..tables).map(|i| format!("j{}.i = j{i}.i", rng.below(i))).collect();
    let style = rng.below(2);
    if style == 0 {
        format!("SELECT count(*), max(j0.v) FROM {} WHERE {}", names.join(", "), conditions.join(" AND "))
    } else {
        let mut sql = format!("SELECT count(*) FROM {}", names[0]);
        for i in 1..tables {
            sql.push_str(&format!(" {} {} ON {}", rng.pick(&["JOIN", "LEFT JOIN"]), names[i], conditions[i - 1]));
        }
        sql
    }
}

fn generated_query(rng: &mut Rng) -> String {
    if rng.chance(1, 40) {
        return many_table_join(rng);
    }
    let mut generator = Generator { rng, next_alias: 0 };
    let types: Vec<Ty> = (0..generator.rng.range(1, 4)).map(|_| generator.any_ty()).collect();
    let depth = generator.rng.range(1, 4);
    let query = generator.query(&types, depth).0;
    match generator.rng.below(20) {
        0 => format!("CREATE TABLE IF NOT EXISTS g AS {query}"),
        1 => format!("EXPLAIN {query}"),
        _ => query,
    }
}

// ---------------------------------------------------------------------------------------
// Running and minimising

#[derive(Debug)]
enum Verdict {
    /// Succeeded, or failed with a user error of this kind.
    Fine(&'static str),
    /// Interrupted for running long.
    Slow,
    /// A bug: the message (panic or internal error).
    Bug(String),
}

fn run_statement(conn: &mut Connection, sql: &str) -> Verdict {
    use apiary::ApiaryError as E;
    match catch(|| conn.execute(sql)) {
        Ok(Ok(_)) => Verdict::Fine("ran"),
        Ok(Err(E::Interrupted)) => Verdict::Slow,
        Ok(Err(error)) if is_bug(&error) => Verdict::Bug(error.to_string()),
        Ok(Err(error)) => Verdict::Fine(match error {
            E::Parse(_) => "syntax error",
            E::Bind(_) | E::Catalog(_) => "bind error",
            E::Type(_) => "type error",
            E::NotImplemented(_) => "not implemented",
            E::Execution(_)
            | E::Constraint(_)
            | E::UniqueViolation(_)
            | E::NotNullViolation(_)
            | E::CheckViolation(_)
            | E::StringTooLong(_)
            | E::CardinalityViolation(_)
            | E::Resource(_) => "execution error",
            _ => "other error",
        }),
        Err(panic) => Verdict::Bug(format!("panic: {panic}")),
    }
}

/// A bug's message without the numbers that vary between occurrences (column ids).
fn bug_class(message: &str) -> String {
    message.chars().filter(|c| !c.is_ascii_digit()).collect()
}

fn known_bug(message: &str) -> Option<&'static str> {
    KNOWN_BUGS.iter().find(|(pattern, _)| message.contains(pattern)).map(|&(_, name)| name)
}

/// Removes tokens while the statement still shows the same bug (on fresh databases of
/// the session), so the report is short.
fn minimise(session: &Session, sql: &str, class: &str) -> String {
    let mut tokens = tokenize(sql);
    let (_db, mut conn) = session.open(None);
    let mut attempts = 0;
    let mut chunk = tokens.len().div_ceil(2).max(1);
    while attempts < MINIMISE_ATTEMPTS {
        let mut start = 0;
        let mut removed_any = false;
        while start < tokens.len() && attempts < MINIMISE_ATTEMPTS {
            let end = (start + chunk).min(tokens.len());
            let mut candidate = tokens.clone();
            candidate.drain(start..end);
            attempts += 1;
            let fails = !candidate.is_empty()
                && matches!(run_statement(&mut conn, &join(&candidate)), Verdict::Bug(message) if bug_class(&message) == class);
            if fails {
                tokens = candidate;
                removed_any = true;
            } else {
                start = end;
            }
        }
        if !removed_any {
            if chunk == 1 {
                break;
            }
            chunk /= 2;
        }
    }
    join(&tokens)
}

/// The statement of one case.
fn case_statement(rng: &mut Rng, session: &Session) -> String {
    let seed = if session.file.is_none() && rng.chance(1, 2) {
        let generated = generated_query(rng);
        if rng.chance(2, 3) {
            return generated; // as generated, or mutated below
        }
        generated
    } else {
        let seeds = session.seeds();
        seeds[rng.below(seeds.len())].clone()
    };
    let mut tokens = tokenize(&seed);
    // Mostly one mutation: the statement stays close enough to valid to get past the parser.
    let mutations = match rng.below(8) {
        0..=3 => 1,
        4 | 5 => 2,
        _ => rng.range(3, 6),
    };
    for _ in 0..mutations {
        mutate(rng, &mut tokens, &corpus().pool);
    }
    join(&tokens)
}

#[test]
fn sql_front_end_survives_mutated_and_generated_statements() {
    let config = FuzzConfig::from_env(DEFAULT_CASES);
    let corpus = corpus();
    let watchdog = Watchdog::start("fuzz_sql", SLOW_STATEMENT);
    let show_known = std::env::var("APIARY_FUZZ_SHOW_KNOWN").is_ok();
    let mut failures: BTreeMap<String, String> = BTreeMap::new();
    let mut known: BTreeMap<&str, u32> = BTreeMap::new();
    let (mut slow, mut skipped) = (0, 0);
    let mut outcomes: BTreeMap<&str, u32> = BTreeMap::new();
    let mut current: Option<(u64, Session, Database, Connection)> = None;
    for case_number in config.cases() {
        // Sessions are numbered from the case, so a replayed case sets up the same tables.
        let session_number = case_number / CASES_PER_SESSION;
        if current.as_ref().is_none_or(|(number, ..)| *number != session_number) {
            let mut rng = Rng::for_case(config.seed ^ 0x5E55, session_number);
            let file = rng.chance(1, 2).then(|| rng.below(corpus.files.len()));
            let session = Session { file, settings: SETTINGS[rng.below(SETTINGS.len())] };
            let (db, conn) = session.open(Some(&watchdog));
            current = Some((session_number, session, db, conn));
        }
        let Some((_, session, _, conn)) = current.as_mut() else { unreachable!() };
        let mut rng = Rng::for_case(config.seed, case_number);
        let sql = case_statement(&mut rng, session);
        if !allowed(&sql) {
            skipped += 1;
            continue;
        }
        watchdog.begin(
            format!("case {case_number}: {}: {}", config.replay("fuzz_sql", case_number), excerpt(&sql, 500)),
            Some(conn.interrupt_flag()),
        );
        let verdict = run_statement(conn, &sql);
        watchdog.end();
        match verdict {
            Verdict::Fine(outcome) => *outcomes.entry(outcome).or_default() += 1,
            Verdict::Slow => slow += 1,
            Verdict::Bug(message) => {
                if let Some(name) = known_bug(&message) {
                    *known.entry(name).or_default() += 1;
                    if show_known {
                        eprintln!("known bug \"{name}\" (case {case_number}): {}", excerpt(&sql, 300));
                    }
                    continue;
                }
                let class = bug_class(&message);
                if failures.contains_key(&class) {
                    continue;
                }
                let session = session.clone();
                let minimal = minimise(&session, &sql, &class);
                failures.insert(
                    class,
                    format!(
                        "{}\n  minimised: {}\n  statement: {}\n  session: {}\n  replay: {}",
                        excerpt(&message, 400),
                        excerpt(&minimal, 400),
                        excerpt(&sql, 600),
                        session.describe(),
                        config.replay("fuzz_sql", case_number)
                    ),
                );
                // The database may be in a strange state after a bug: start afresh.
                current = None;
                if failures.len() >= 20 {
                    break;
                }
            }
        }
    }
    drop(watchdog);
    let known_summary: Vec<String> = known.iter().map(|(name, count)| format!("{name}: {count}")).collect();
    let outcome_summary: Vec<String> = outcomes.iter().map(|(outcome, count)| format!("{outcome} {count}")).collect();
    eprintln!(
        "fuzz_sql: {} cases from seed {}: {}; {slow} interrupted as slow, {skipped} skipped (files); known bugs skipped: {}",
        config.iterations,
        config.seed,
        outcome_summary.join(", "),
        if known_summary.is_empty() { "none".to_string() } else { known_summary.join(", ") }
    );
    assert!(failures.is_empty(), "{} new bug(s):\n\n{}", failures.len(), failures.values().cloned().collect::<Vec<_>>().join("\n\n"));
}

// ---------------------------------------------------------------------------------------
// Deep input, each case in a child process (a stack overflow aborts the process).

/// The deep statements: (name, SQL).
fn deep_cases() -> Vec<(&'static str, String)> {
    let chain = |n: usize, term: &str, op: &str| vec![term; n].join(op);
    vec![
        ("5,000 chained AND terms", format!("SELECT count(*) FROM t1 WHERE {}", chain(5000, "i = 1", " AND "))),
        ("5,000 chained OR terms", format!("SELECT count(*) FROM t1 WHERE {}", chain(5000, "i = 1", " OR "))),
        ("100,000-term 1+1+...", format!("SELECT {}", chain(100_000, "1", "+"))),
        ("2,000 UNION ALL branches", chain(2000, "SELECT 1 AS x", " UNION ALL ")),
        ("1,000 nested parentheses", format!("SELECT {}1{}", "(".repeat(1000), ")".repeat(1000))),
        ("1,000 nested scalar subqueries", format!("SELECT {}1{}", "(SELECT ".repeat(1000), ")".repeat(1000))),
        ("1,000 nested derived tables", format!("SELECT * FROM {}(SELECT 1 AS x{}", "(SELECT * FROM ".repeat(999), ") AS d".repeat(1000))),
        ("1,000 nested NOTs", format!("SELECT {}TRUE", "NOT ".repeat(1000))),
        ("1,000 nested CASEs", format!("SELECT {}1{}", "CASE WHEN TRUE THEN ".repeat(1000), " END".repeat(1000))),
        // As deep as the parser allows (its limit is near 50).
        ("40 nested scalar subqueries", format!("SELECT {}max(i) FROM t1{} FROM t1", "(SELECT ".repeat(40), ")".repeat(40))),
        ("40 nested derived tables", format!("SELECT * FROM {}(SELECT i FROM t1{}", "(SELECT * FROM ".repeat(39), ") AS d".repeat(40))),
        // Wide, or deep as a chain.
        ("10,000 || concatenations", format!("SELECT {}", chain(10_000, "v", " || "))),
        (
            "20,000-item IN list",
            format!("SELECT count(*) FROM t1 WHERE i IN ({})", (0..20_000).map(|i| i.to_string()).collect::<Vec<_>>().join(", ")),
        ),
        (
            "2,000 CASE branches",
            format!("SELECT CASE {} ELSE 0 END FROM t1", (0..2000).map(|i| format!("WHEN i = {i} THEN {i}")).collect::<Vec<_>>().join(" ")),
        ),
        ("1,000 output columns", format!("SELECT {} FROM t1", (0..1000).map(|i| format!("i + {i}")).collect::<Vec<_>>().join(", "))),
        ("1,000 COALESCE arguments", format!("SELECT COALESCE({}) FROM t1", chain(1000, "i", ", "))),
    ]
}

/// Runs one deep case when `APIARY_FUZZ_DEEP_CASE` names it (in the child process that
/// `deep_inputs_do_not_crash` starts); does nothing otherwise.
#[test]
fn deep_input_child() {
    let Ok(wanted) = std::env::var("APIARY_FUZZ_DEEP_CASE") else { return };
    let (name, sql) = deep_cases().into_iter().find(|(name, _)| *name == wanted).expect("a deep case of that name");
    // A thread with the default stack of spawned threads (2 MiB), as a library user's.
    let outcome = std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            let db = Database::open_in_memory().unwrap();
            let mut conn = db.connect();
            for statement in world_setup() {
                conn.execute(&statement).unwrap();
            }
            run_statement(&mut conn, &sql)
        })
        .unwrap()
        .join()
        .unwrap();
    match outcome {
        Verdict::Bug(message) => panic!("{name}: {}", excerpt(&message, 500)),
        verdict => eprintln!("{name}: {verdict:?}"),
    }
}

#[test]
fn deep_inputs_do_not_crash() {
    let executable = std::env::current_exe().expect("the test executable");
    let mut failures = Vec::new();
    for (name, _) in deep_cases() {
        let output = std::process::Command::new(&executable)
            .args(["deep_input_child", "--exact", "--nocapture", "--test-threads=1"])
            .env("APIARY_FUZZ_DEEP_CASE", name)
            .output()
            .expect("running the child");
        let stderr = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() {
            use std::os::unix::process::ExitStatusExt;
            let how = match output.status.signal() {
                Some(signal) => format!("the process was killed by signal {signal} (a stack overflow aborts it)"),
                None => format!("failed: {}", excerpt(stderr.lines().find(|l| l.contains(name)).unwrap_or(&stderr), 300)),
            };
            failures.push(format!("{name}: {how}"));
        }
    }
    assert!(failures.is_empty(), "{} deep input(s) failed:\n{}", failures.len(), failures.join("\n"));
}
