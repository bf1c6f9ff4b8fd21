//! String functions: LIKE, SUBSTRING, UPPER/LOWER, LENGTH, TRIM, REPLACE, POSITION, ||.
//!
//! A constant LIKE pattern is compiled once: exact match, prefix, suffix, or a chain of
//! `%`-separated substrings searched with SIMD `memmem` finders; only patterns with `_`
//! fall back to a general matcher.

use std::sync::Arc;

use apiary_common::{exec_err, internal_err, Result};
use apiary_sql::expr::{ScalarFunction, TrimKind};
use apiary_types::string::{StrView, INLINE_LEN};
use apiary_types::{Buffer, DataChunk, DataType, ScalarValue, StrColumn, StrColumnBuilder, Vector, VectorData};
use memchr::memmem;

use super::compare::{evaluate_rows, filter_rows};
use super::{combined_validity, map_rows, rows_of, wrap, ExprRef, PhysicalExpr};

#[derive(Debug, Clone)]
pub enum Token {
    Literal(char),
    AnyOne,
    AnyMany,
}

/// A compiled LIKE pattern.
#[derive(Debug)]
pub enum LikePattern {
    Exact(Vec<u8>),
    /// `%`-separated literal pieces: the first must start the string unless the pattern
    /// starts with `%`, the last must end it unless the pattern ends with `%`.
    Segments {
        anchored_start: bool,
        anchored_end: bool,
        pieces: Vec<Vec<u8>>,
        finders: Vec<memmem::Finder<'static>>,
    },
    General(Vec<Token>),
}

impl LikePattern {
    /// Compiles a pattern; `escape` makes the next character literal.
    pub fn new(pattern: &str, escape: Option<char>) -> LikePattern {
        let mut tokens = Vec::new();
        let mut chars = pattern.chars();
        while let Some(c) = chars.next() {
            tokens.push(match c {
                c if Some(c) == escape => Token::Literal(chars.next().unwrap_or(c)),
                '%' => Token::AnyMany,
                '_' => Token::AnyOne,
                other => Token::Literal(other),
            });
        }
        if tokens.iter().any(|t| matches!(t, Token::AnyOne)) {
            return LikePattern::General(tokens);
        }
        if !tokens.iter().any(|t| matches!(t, Token::AnyMany)) {
            let text: String = tokens.iter().map(|t| if let Token::Literal(c) = t { *c } else { '%' }).collect();
            return LikePattern::Exact(text.into_bytes());
        }
        let anchored_start = !matches!(tokens.first(), Some(Token::AnyMany));
        let anchored_end = !matches!(tokens.last(), Some(Token::AnyMany));
        let mut pieces: Vec<Vec<u8>> = Vec::new();
        let mut current = String::new();
        for token in &tokens {
            match token {
                Token::Literal(c) => current.push(*c),
                _ => {
                    if !current.is_empty() {
                        pieces.push(std::mem::take(&mut current).into_bytes());
                    }
                }
            }
        }
        if !current.is_empty() {
            pieces.push(current.into_bytes());
        }
        let finders = pieces.iter().map(|p| memmem::Finder::new(p).into_owned()).collect();
        LikePattern::Segments { anchored_start, anchored_end, pieces, finders }
    }

    #[inline]
    pub fn matches(&self, s: &[u8]) -> bool {
        match self {
            LikePattern::Exact(p) => s == p.as_slice(),
            LikePattern::Segments { anchored_start, anchored_end, pieces, finders } => {
                let mut start = 0;
                let mut end = s.len();
                let mut first = 0;
                let mut last = pieces.len();
                if *anchored_start {
                    let Some(p) = pieces.first() else { return true };
                    if !s.starts_with(p) {
                        return false;
                    }
                    start = p.len();
                    first = 1;
                }
                if *anchored_end && last > first {
                    let p = &pieces[last - 1];
                    if s.len() < start + p.len() || !s.ends_with(p) {
                        return false;
                    }
                    end = s.len() - p.len();
                    last -= 1;
                }
                for finder in &finders[first..last] {
                    match finder.find(&s[start..end]) {
                        Some(pos) => start += pos + finder.needle().len(),
                        None => return false,
                    }
                }
                true
            }
            LikePattern::General(tokens) => match std::str::from_utf8(s) {
                Ok(text) => match_general(tokens, &text.chars().collect::<Vec<_>>()),
                Err(_) => false,
            },
        }
    }
}

/// Wildcard matching with backtracking to the last `%` (linear in practice).
fn match_general(tokens: &[Token], text: &[char]) -> bool {
    let (mut t, mut s) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while s < text.len() {
        match tokens.get(t) {
            Some(Token::AnyMany) => {
                star = Some((t, s));
                t += 1;
            }
            Some(Token::AnyOne) => {
                t += 1;
                s += 1;
            }
            Some(Token::Literal(c)) if *c == text[s] => {
                t += 1;
                s += 1;
            }
            _ => match star {
                Some((star_t, star_s)) => {
                    t = star_t + 1;
                    s = star_s + 1;
                    star = Some((star_t, star_s + 1));
                }
                None => return false,
            },
        }
    }
    tokens[t..].iter().all(|t| matches!(t, Token::AnyMany))
}

#[derive(Debug)]
struct LikeConstant {
    child: ExprRef,
    pattern: LikePattern,
    negated: bool,
    case_insensitive: bool,
}

impl LikeConstant {
    #[inline]
    fn test(&self, s: &[u8]) -> bool {
        let hit = if self.case_insensitive {
            self.pattern.matches(String::from_utf8_lossy(s).to_lowercase().as_bytes())
        } else {
            self.pattern.matches(s)
        };
        hit != self.negated
    }
}

impl PhysicalExpr for LikeConstant {
    fn data_type(&self) -> DataType {
        DataType::Boolean
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let v = self.child.evaluate(chunk)?;
        let strings = v.strings();
        let out = map_rows(chunk.physical_len(), rows_of(chunk), |i| self.test(strings.get_bytes(i)));
        Ok(Vector::new(DataType::Boolean, wrap(out), v.validity.clone()))
    }

    fn select(&self, chunk: &DataChunk, rows: &[u32]) -> Result<Vec<u32>> {
        let v = evaluate_rows(&self.child, chunk, rows)?;
        let strings = v.strings();
        Ok(filter_rows(rows, chunk.physical_len(), v.validity.as_ref(), |i| self.test(strings.get_bytes(i))))
    }
}

pub fn like_constant(child: ExprRef, pattern: &str, negated: bool, case_insensitive: bool, escape: Option<char>) -> ExprRef {
    let pattern = if case_insensitive { LikePattern::new(&pattern.to_lowercase(), escape) } else { LikePattern::new(pattern, escape) };
    Arc::new(LikeConstant { child, pattern, negated, case_insensitive })
}

/// LIKE with a pattern computed per row.
#[derive(Debug)]
struct LikeDynamic {
    child: ExprRef,
    pattern: ExprRef,
    negated: bool,
    case_insensitive: bool,
    escape: Option<char>,
}

impl PhysicalExpr for LikeDynamic {
    fn data_type(&self) -> DataType {
        DataType::Boolean
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let v = self.child.evaluate(chunk)?;
        let p = self.pattern.evaluate(chunk)?;
        let (vs, ps) = (v.strings(), p.strings());
        let out = map_rows(chunk.physical_len(), rows_of(chunk), |i| {
            let (value, pattern) = if self.case_insensitive {
                (vs.get(i).to_lowercase(), ps.get(i).to_lowercase())
            } else {
                (vs.get(i).to_string(), ps.get(i).to_string())
            };
            LikePattern::new(&pattern, self.escape).matches(value.as_bytes()) != self.negated
        });
        Ok(Vector::new(DataType::Boolean, wrap(out), combined_validity(&[&v, &p])))
    }
}

pub fn like_dynamic(child: ExprRef, pattern: ExprRef, negated: bool, case_insensitive: bool, escape: Option<char>) -> ExprRef {
    Arc::new(LikeDynamic { child, pattern, negated, case_insensitive, escape })
}

/// `a || b` (NULL if any argument is NULL) or `concat(a, b, ...)` (NULLs skipped).
#[derive(Debug)]
struct Concat {
    args: Vec<ExprRef>,
    strict: bool,
}

pub fn concat(args: Vec<ExprRef>, strict: bool) -> ExprRef {
    Arc::new(Concat { args, strict })
}

impl PhysicalExpr for Concat {
    fn data_type(&self) -> DataType {
        DataType::Varchar(None)
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let values = self.args.iter().map(|a| a.evaluate(chunk)).collect::<Result<Vec<_>>>()?;
        let len = chunk.physical_len();
        let validity = if self.strict { combined_validity(&values.iter().collect::<Vec<_>>()) } else { None };
        let mut builder = StrColumnBuilder::with_capacity(len);
        let mask = selection_mask(len, rows_of(chunk));
        let mut text = String::new();
        for i in 0..len {
            if !mask[i] || validity.as_ref().is_some_and(|v| !v.get(i)) {
                builder.push_empty();
                continue;
            }
            text.clear();
            for v in &values {
                if v.is_valid(i) {
                    text.push_str(v.strings().get(i));
                }
            }
            builder.push(&text);
        }
        Ok(Vector::new(DataType::Varchar(None), VectorData::Str(builder.finish()), validity))
    }
}

fn selection_mask(len: usize, rows: Option<&[u32]>) -> Vec<bool> {
    match rows {
        None => vec![true; len],
        Some(rows) => {
            let mut mask = vec![false; len];
            rows.iter().for_each(|&r| mask[r as usize] = true);
            mask
        }
    }
}

/// A string function computed value by value.
#[derive(Debug)]
struct StringFunction {
    func: ScalarFunction,
    args: Vec<ExprRef>,
    data_type: DataType,
    /// For SUBSTRING with constant bounds: the characters `[begin, end)` it keeps
    /// (0-based), computed once instead of per row.
    constant_range: Option<(usize, usize)>,
}

/// A string function; `literals` holds the constant arguments (`None` where not constant).
pub fn string_function(
    func: ScalarFunction,
    args: Vec<ExprRef>,
    literals: &[Option<&ScalarValue>],
    data_type: DataType,
) -> Result<ExprRef> {
    if args.is_empty() {
        return Err(internal_err!("{} without arguments", func.name()));
    }
    let constant = |k: usize| match literals.get(k).copied().flatten() {
        Some(ScalarValue::Int64(v)) => Some(*v),
        Some(ScalarValue::Int32(v)) => Some(i64::from(*v)),
        Some(ScalarValue::Int16(v)) => Some(i64::from(*v)),
        _ => None,
    };
    let constant_range = match (func, args.len()) {
        (ScalarFunction::Substring, 2) => constant(1).map(|start| substring_range(start, None)),
        // A negative length is an error, reported per row by the general path.
        (ScalarFunction::Substring, 3) => match (constant(1), constant(2)) {
            (Some(start), Some(length)) if length >= 0 => Some(substring_range(start, Some(length))),
            _ => None,
        },
        _ => None,
    };
    Ok(Arc::new(StringFunction { func, args, data_type, constant_range }))
}

/// The characters `[begin, end)` (0-based) that SUBSTRING(s FROM start FOR length) keeps
/// (`length` non-negative; without it, to the end).
fn substring_range(start: i64, length: Option<i64>) -> (usize, usize) {
    let end = length.map_or(i64::MAX, |l| start.saturating_add(l));
    let begin = (start.max(1) - 1) as usize;
    let end = if end <= 1 { 0 } else { (end - 1).min(i64::MAX - 1) as usize };
    (begin, end.max(begin))
}

/// Byte range of characters `[begin, end)` (0-based char positions, clamped).
fn char_range(s: &str, begin: usize, end: usize) -> (usize, usize) {
    if s.is_ascii() {
        let b = begin.min(s.len());
        return (b, end.min(s.len()).max(b));
    }
    let mut indices = s.char_indices().map(|(i, _)| i).chain(std::iter::once(s.len()));
    let start = indices.by_ref().nth(begin).unwrap_or(s.len());
    let stop = if end <= begin { start } else { indices.nth(end - begin - 1).unwrap_or(s.len()) };
    (start, stop.max(start))
}

impl StringFunction {
    /// SUBSTRING with constant bounds `[begin, end)` (characters): the bounds are not
    /// evaluated per row, and where the bytes before `end` are ASCII (the usual case: codes,
    /// phone prefixes) characters are bytes, so the string is not decoded.
    fn substring_constant(&self, v: &Vector, begin: usize, end: usize, chunk: &DataChunk) -> Vector {
        let strings = v.strings();
        let len = chunk.physical_len();
        let mut views = vec![StrView::default(); len];
        let input_views = strings.views().as_slice();
        let heaps = &strings.heaps[..];
        super::for_each_row(len, rows_of(chunk), |i| {
            let view = input_views[i];
            let bytes = view.bytes(heaps);
            let stop = end.min(bytes.len());
            let (b, e) = if bytes[..stop].is_ascii() { (begin.min(stop), stop) } else { char_range(view.as_str(heaps), begin, end) };
            // Zero copy: the substring is a view into the same heap.
            views[i] = if e - b <= INLINE_LEN {
                StrView::inline(&bytes[b..e])
            } else {
                StrView::long(&bytes[b..e], view.heap_index(), view.heap_offset() + b as u32)
            };
        });
        let column = StrColumn::new(Buffer::from_vec(views), Arc::clone(&strings.heaps));
        Vector::new(self.data_type, VectorData::Str(column), v.validity.clone())
    }

    fn substring(&self, v: &Vector, args: &[Vector], chunk: &DataChunk) -> Result<Vector> {
        let strings = v.strings();
        let len = chunk.physical_len();
        let starts = args[0].values::<i64>();
        let lengths = args.get(1).map(|a| a.values::<i64>());
        let validity = combined_validity(&std::iter::once(v).chain(args.iter()).collect::<Vec<_>>());
        let mut views = vec![StrView::default(); len];
        let input_views = strings.views().as_slice();
        let mut error = None;
        super::for_each_row(len, rows_of(chunk), |i| {
            if validity.as_ref().is_some_and(|b| !b.get(i)) || error.is_some() {
                return;
            }
            let length = match lengths {
                Some(l) if l[i] < 0 => {
                    error = Some(exec_err!("negative substring length not allowed"));
                    return;
                }
                Some(l) => Some(l[i]),
                None => None,
            };
            let (begin, end) = substring_range(starts[i], length);
            let text = strings.get(i);
            let (b, e) = char_range(text, begin, end);
            // Zero copy: the substring is a view into the same heap.
            let view = input_views[i];
            views[i] = if e - b <= INLINE_LEN {
                StrView::inline(&text.as_bytes()[b..e])
            } else {
                StrView::long(&text.as_bytes()[b..e], view.heap_index(), view.heap_offset() + b as u32)
            };
        });
        if let Some(err) = error {
            return Err(err);
        }
        let column = StrColumn::new(Buffer::from_vec(views), Arc::clone(&strings.heaps));
        Ok(Vector::new(self.data_type, VectorData::Str(column), validity))
    }
}

impl PhysicalExpr for StringFunction {
    fn data_type(&self) -> DataType {
        self.data_type
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let values = self.args.iter().map(|a| a.evaluate(chunk)).collect::<Result<Vec<_>>>()?;
        let len = chunk.physical_len();
        let first = &values[0];
        if self.func == ScalarFunction::Substring {
            if let Some((begin, end)) = self.constant_range {
                return Ok(self.substring_constant(first, begin, end, chunk));
            }
            return self.substring(first, &values[1..], chunk);
        }
        let validity = combined_validity(&values.iter().collect::<Vec<_>>());
        let valid = |i: usize| validity.as_ref().is_none_or(|v| v.get(i));
        let text = |arg: usize, i: usize| values[arg].strings().get(i);
        match self.func {
            ScalarFunction::Length => {
                let out = map_rows(len, rows_of(chunk), |i| if valid(i) { text(0, i).chars().count() as i32 } else { 0 });
                Ok(Vector::new(DataType::Integer, wrap(out), validity))
            }
            ScalarFunction::Position => {
                let out = map_rows(len, rows_of(chunk), |i| {
                    if !valid(i) {
                        return 0;
                    }
                    let (haystack, needle) = (text(0, i), text(1, i));
                    match haystack.find(needle) {
                        Some(byte) => haystack[..byte].chars().count() as i32 + 1,
                        None => 0,
                    }
                });
                Ok(Vector::new(DataType::Integer, wrap(out), validity))
            }
            ScalarFunction::StartsWith => {
                let out = map_rows(len, rows_of(chunk), |i| valid(i) && text(0, i).starts_with(text(1, i)));
                Ok(Vector::new(DataType::Boolean, wrap(out), validity))
            }
            _ => {
                let mask = selection_mask(len, rows_of(chunk));
                let mut builder = StrColumnBuilder::with_capacity(len);
                for i in 0..len {
                    if !mask[i] || !valid(i) {
                        builder.push_empty();
                        continue;
                    }
                    let s = text(0, i);
                    match self.func {
                        ScalarFunction::Upper => builder.push(&s.to_uppercase()),
                        ScalarFunction::Lower => builder.push(&s.to_lowercase()),
                        ScalarFunction::Trim(kind) => {
                            let chars: Vec<char> = if values.len() > 1 { text(1, i).chars().collect() } else { vec![' '] };
                            let trimmed = match kind {
                                TrimKind::Both => s.trim_matches(chars.as_slice()),
                                TrimKind::Leading => s.trim_start_matches(chars.as_slice()),
                                TrimKind::Trailing => s.trim_end_matches(chars.as_slice()),
                            };
                            builder.push(trimmed);
                        }
                        ScalarFunction::Replace => {
                            let from = text(1, i);
                            if from.is_empty() {
                                builder.push(s);
                            } else {
                                builder.push(&s.replace(from, text(2, i)));
                            }
                        }
                        other => return Err(internal_err!("{} is not a string function", other.name())),
                    }
                }
                Ok(Vector::new(self.data_type, VectorData::Str(builder.finish()), validity))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_patterns() {
        let cases = [
            ("abc", "abc", true),
            ("abc", "abd", false),
            ("ab%", "abcdef", true),
            ("%ef", "abcdef", true),
            ("%cd%", "abcdef", true),
            ("%special%requests%", "xx special yy requests zz", true),
            ("%special%requests%", "requests special", false),
            ("a%c%e", "abcde", true),
            ("a%c%e", "abcdf", false),
            ("a_c", "abc", true),
            ("a_c", "abbc", false),
            ("%", "", true),
            ("a\\%b", "a%b", true),
            ("a\\%b", "axb", false),
            ("%a%a%", "aa", true),
            ("%aa%aa", "aaa", false),
            ("_%_", "ab", true),
        ];
        for (pattern, text, expected) in cases {
            assert_eq!(LikePattern::new(pattern, Some('\\')).matches(text.as_bytes()), expected, "{pattern} vs {text}");
        }
    }

    #[test]
    fn char_ranges() {
        assert_eq!(char_range("hello", 1, 3), (1, 3));
        assert_eq!(char_range("héllo", 1, 3), (1, 4));
        assert_eq!(char_range("abc", 5, 9), (3, 3));
    }
}
