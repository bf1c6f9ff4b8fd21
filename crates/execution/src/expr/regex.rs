//! Regular expressions: `regexp_matches` (DuckDB's boolean form, also `regexp_like` and
//! the `~` operators), `regexp_replace` and `regexp_extract`, with the `regex` crate's
//! syntax (close to RE2, which DuckDB uses).
//!
//! A constant pattern is compiled once, when the expression is compiled for the query,
//! so an invalid pattern fails the query before it reads a row. A pattern computed per
//! row is compiled when it differs from the previous row's.
//!
//! Flags (a constant string): `i` case-insensitive, `c` case-sensitive, `g` every match
//! (`regexp_replace` only), `s` `.` also matches a newline, `m`/`n`/`p` newline-sensitive
//! (`^`/`$` at line ends), `x` ignore whitespace in the pattern, `l` the pattern is a
//! literal string.

use std::sync::Arc;

use apiary_common::{exec_err, internal_err, Result};
use apiary_sql::expr::ScalarFunction;
use apiary_types::{DataChunk, DataType, ScalarValue, StrColumnBuilder, Vector, VectorData};
use regex::{Regex, RegexBuilder};

use super::{combined_validity, map_rows, rows_of, wrap, ExprRef, PhysicalExpr};

/// Compiled programs above this size are refused (a pattern like `(a{1000}){1000}`).
const REGEX_SIZE_LIMIT: usize = 16 << 20;

/// How a pattern is compiled and applied.
#[derive(Debug, Clone, Copy, Default)]
struct Flags {
    case_insensitive: bool,
    dot_matches_newline: bool,
    multi_line: bool,
    ignore_whitespace: bool,
    literal: bool,
    global: bool,
}

impl Flags {
    fn parse(text: &str, function: ScalarFunction) -> Result<Flags> {
        let mut flags = Flags::default();
        for c in text.chars() {
            match c {
                'i' => flags.case_insensitive = true,
                'c' => flags.case_insensitive = false,
                's' => flags.dot_matches_newline = true,
                'm' | 'n' | 'p' => flags.multi_line = true,
                'x' => flags.ignore_whitespace = true,
                'l' => flags.literal = true,
                'g' if function == ScalarFunction::RegexpReplace => flags.global = true,
                other => return Err(exec_err!("invalid regular expression option '{other}' for {}", function.name())),
            }
        }
        Ok(flags)
    }

    fn compile(&self, pattern: &str) -> Result<Regex> {
        let escaped;
        let pattern = if self.literal {
            escaped = regex::escape(pattern);
            escaped.as_str()
        } else {
            pattern
        };
        RegexBuilder::new(pattern)
            .case_insensitive(self.case_insensitive)
            .dot_matches_new_line(self.dot_matches_newline)
            .multi_line(self.multi_line)
            .ignore_whitespace(self.ignore_whitespace)
            .size_limit(REGEX_SIZE_LIMIT)
            .build()
            .map_err(|err| exec_err!("invalid regular expression '{pattern}': {}", first_line(&err.to_string())))
    }
}

fn first_line(message: &str) -> String {
    // The crate's messages draw the pattern with a caret over several lines; the last
    // line says what is wrong.
    message.lines().rev().find(|l| l.trim_start().starts_with("error:")).unwrap_or(message).trim().to_string()
}

/// A replacement string in PostgreSQL/DuckDB form (`\1`..`\9` groups, `\&` or `\0` the
/// whole match, `\\` a backslash) in the `regex` crate's form (`${1}`, `$$`).
fn translate_replacement(replacement: &str) -> String {
    let mut out = String::with_capacity(replacement.len() + 4);
    let mut chars = replacement.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '$' => out.push_str("$$"),
            '\\' => match chars.peek().copied() {
                Some(d) if d.is_ascii_digit() => {
                    chars.next();
                    out.push_str(&format!("${{{d}}}"));
                }
                Some('&') => {
                    chars.next();
                    out.push_str("${0}");
                }
                Some('\\') => {
                    chars.next();
                    out.push('\\');
                }
                _ => out.push('\\'),
            },
            other => out.push(other),
        }
    }
    out
}

/// The last pattern compiled for a pattern computed per row: reused while it repeats.
#[derive(Default)]
struct PatternCache {
    last: Option<(String, Regex)>,
}

impl PatternCache {
    fn get(&mut self, flags: Flags, pattern: &str) -> Result<&Regex> {
        if self.last.as_ref().is_none_or(|(previous, _)| previous != pattern) {
            self.last = Some((pattern.to_string(), flags.compile(pattern)?));
        }
        Ok(&self.last.as_ref().expect("compiled above").1)
    }
}

#[derive(Debug)]
struct RegexFunction {
    func: ScalarFunction,
    value: ExprRef,
    pattern: ExprRef,
    /// The pattern compiled once when it is a constant.
    compiled: Option<Regex>,
    /// `regexp_replace`'s replacement when constant (translated), else computed per row.
    replacement: Option<String>,
    replacement_expr: Option<ExprRef>,
    /// `regexp_extract`'s group.
    group: usize,
    flags: Flags,
}

/// Compiles a regular-expression function; `literals` are the arguments' constant
/// values (the flags and `regexp_extract`'s group must be constants: the binder checks).
pub fn regex_function(func: ScalarFunction, args: Vec<ExprRef>, literals: &[Option<&ScalarValue>]) -> Result<ExprRef> {
    let constant_text = |i: usize| -> Result<Option<String>> {
        match literals.get(i) {
            None => Ok(None),
            Some(Some(ScalarValue::Utf8(s))) => Ok(Some(s.clone())),
            Some(Some(ScalarValue::Null)) => Ok(None),
            Some(Some(other)) => Err(internal_err!("{} argument {i} is {other}", func.name())),
            Some(None) => Ok(None),
        }
    };
    let flags_at = match func {
        ScalarFunction::RegexpMatches => 2,
        ScalarFunction::RegexpReplace => 3,
        _ => 3,
    };
    let flags = match constant_text(flags_at)? {
        Some(text) => Flags::parse(&text, func)?,
        None => Flags::default(),
    };
    let group = match (func, literals.get(2)) {
        (ScalarFunction::RegexpExtract, Some(Some(v))) if !v.is_null() => {
            let group = v.as_i128().ok_or_else(|| internal_err!("regexp_extract group {v}"))?;
            usize::try_from(group).map_err(|_| exec_err!("regexp_extract group must not be negative, got {group}"))?
        }
        _ => 0,
    };
    let compiled = match constant_text(1)? {
        Some(pattern) => Some(flags.compile(&pattern)?),
        None => None,
    };
    let mut args = args.into_iter();
    let value = args.next().ok_or_else(|| internal_err!("{} without arguments", func.name()))?;
    let pattern = args.next().ok_or_else(|| internal_err!("{} without a pattern", func.name()))?;
    let (replacement, replacement_expr) = if func == ScalarFunction::RegexpReplace {
        match constant_text(2)? {
            Some(text) => (Some(translate_replacement(&text)), None),
            None => (None, args.next()),
        }
    } else {
        (None, None)
    };
    Ok(Arc::new(RegexFunction { func, value, pattern, compiled, replacement, replacement_expr, group, flags }))
}

impl PhysicalExpr for RegexFunction {
    fn data_type(&self) -> DataType {
        match self.func {
            ScalarFunction::RegexpMatches => DataType::Boolean,
            _ => DataType::Varchar(None),
        }
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let value = self.value.evaluate(chunk)?;
        let pattern = self.pattern.evaluate(chunk)?;
        let replacement = self.replacement_expr.as_ref().map(|r| r.evaluate(chunk)).transpose()?;
        let mut inputs = vec![&value, &pattern];
        inputs.extend(replacement.as_ref());
        let validity = combined_validity(&inputs);
        let valid = |i: usize| validity.as_ref().is_none_or(|v| v.get(i));
        let len = chunk.physical_len();
        let rows = rows_of(chunk);
        let mut cache = PatternCache::default();
        let data = match self.func {
            ScalarFunction::RegexpMatches => {
                let strings = value.strings();
                let mut failure = None;
                let out = match &self.compiled {
                    Some(regex) => map_rows(len, rows, |i| valid(i) && regex.is_match(strings.get(i))),
                    None => map_rows(len, rows, |i| {
                        valid(i)
                            && match cache.get(self.flags, pattern.strings().get(i)) {
                                Ok(regex) => regex.is_match(strings.get(i)),
                                Err(err) => {
                                    failure.get_or_insert(err);
                                    false
                                }
                            }
                    }),
                };
                if let Some(err) = failure {
                    return Err(err);
                }
                wrap(out)
            }
            ScalarFunction::RegexpReplace | ScalarFunction::RegexpExtract => {
                let mut builder = StrColumnBuilder::with_capacity(len);
                let mut mask = vec![rows.is_none(); len];
                if let Some(rows) = rows {
                    rows.iter().for_each(|&r| mask[r as usize] = true);
                }
                for (i, selected) in mask.into_iter().enumerate() {
                    if !selected || !valid(i) {
                        builder.push_empty();
                        continue;
                    }
                    let regex = match &self.compiled {
                        Some(regex) => regex,
                        None => cache.get(self.flags, pattern.strings().get(i))?,
                    };
                    let text = value.strings().get(i);
                    if self.func == ScalarFunction::RegexpExtract {
                        let found = regex.captures(text).and_then(|c| c.get(self.group)).map_or("", |m| m.as_str());
                        builder.push(found);
                        continue;
                    }
                    let translated;
                    let with = match (&self.replacement, &replacement) {
                        (Some(constant), _) => constant.as_str(),
                        (None, Some(column)) => {
                            translated = translate_replacement(column.strings().get(i));
                            translated.as_str()
                        }
                        (None, None) => "",
                    };
                    let replaced = if self.flags.global { regex.replace_all(text, with) } else { regex.replace(text, with) };
                    builder.push(&replaced);
                }
                VectorData::Str(builder.finish())
            }
            other => return Err(internal_err!("{} is not a regular-expression function", other.name())),
        };
        Ok(Vector::new(self.data_type(), data, validity))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replacements_translate() {
        assert_eq!(translate_replacement(r"[\1]"), "[${1}]");
        assert_eq!(translate_replacement(r"\&-\0"), "${0}-${0}");
        assert_eq!(translate_replacement("$5 \\\\"), "$$5 \\");
    }

    #[test]
    fn invalid_patterns_are_errors() {
        let err = Flags::default().compile("(").unwrap_err().to_string();
        assert!(err.contains("invalid regular expression"), "{err}");
        assert!(Flags::parse("q", ScalarFunction::RegexpMatches).is_err());
        assert!(Flags::parse("g", ScalarFunction::RegexpMatches).is_err());
        assert!(Flags::parse("gi", ScalarFunction::RegexpReplace).unwrap().global);
    }
}
