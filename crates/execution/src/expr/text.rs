//! String functions beyond the core set of `string.rs`: `split_part`, `left`/`right`,
//! `lpad`/`rpad`, `concat_ws`, `contains`, `ends_with`, `repeat`, `reverse`, `md5`,
//! `initcap`, `ascii`, `chr` (PostgreSQL's semantics; `contains` and `ends_with` are
//! DuckDB's).
//!
//! One kernel per function: the function is matched once per vector, then a loop over
//! the selected rows calls the function's own row closure. A constant needle of
//! `contains` is searched with a prebuilt `memmem` finder.

use std::sync::Arc;

use apiary_common::{exec_err, internal_err, Result};
use apiary_sql::expr::ScalarFunction;
use apiary_types::{DataChunk, DataType, ScalarValue, StrColumnBuilder, Vector, VectorData};
use md5::{Digest, Md5};
use memchr::memmem;

use super::{combined_validity, map_rows, rows_of, wrap, ExprRef, PhysicalExpr};

/// The longest string `lpad`, `rpad` and `repeat` build (PostgreSQL refuses values over
/// 1 GB; a query asking for more is almost certainly a mistake).
const MAX_BUILT_BYTES: usize = 256 << 20;

#[derive(Debug)]
struct TextFunction {
    func: ScalarFunction,
    args: Vec<ExprRef>,
    /// `contains(s, 'constant')`: the needle's finder.
    finder: Option<memmem::Finder<'static>>,
    data_type: DataType,
}

pub fn text_function(func: ScalarFunction, args: Vec<ExprRef>, literals: &[Option<&ScalarValue>], data_type: DataType) -> Result<ExprRef> {
    if args.is_empty() {
        return Err(internal_err!("{} without arguments", func.name()));
    }
    let finder = match (func, literals.get(1)) {
        (ScalarFunction::Contains, Some(Some(ScalarValue::Utf8(needle)))) => Some(memmem::Finder::new(needle.as_bytes()).into_owned()),
        _ => None,
    };
    Ok(Arc::new(TextFunction { func, args, finder, data_type }))
}

/// Builds a string column from `f(row, out)` at the valid selected rows.
fn build_strings(
    len: usize,
    rows: Option<&[u32]>,
    valid: impl Fn(usize) -> bool,
    mut f: impl FnMut(usize, &mut String) -> Result<()>,
) -> Result<VectorData> {
    let mut mask = vec![rows.is_none(); len];
    if let Some(rows) = rows {
        rows.iter().for_each(|&r| mask[r as usize] = true);
    }
    let mut builder = StrColumnBuilder::with_capacity(len);
    let mut out = String::new();
    for (i, selected) in mask.into_iter().enumerate() {
        if !selected || !valid(i) {
            builder.push_empty();
            continue;
        }
        out.clear();
        f(i, &mut out)?;
        builder.push(&out);
    }
    Ok(VectorData::Str(builder.finish()))
}

/// The byte offset of character `n` of `s` (the length when `s` is shorter).
fn char_offset(s: &str, n: usize) -> usize {
    if s.is_ascii() {
        return n.min(s.len());
    }
    s.char_indices().nth(n).map_or(s.len(), |(i, _)| i)
}

fn char_count(s: &str) -> usize {
    if s.is_ascii() {
        s.len()
    } else {
        s.chars().count()
    }
}

/// `lpad`/`rpad`: `s` cut or filled with `fill` to `length` characters.
fn pad(s: &str, length: i64, fill: &str, left: bool, out: &mut String) -> Result<()> {
    let length = length.max(0) as usize;
    if length > MAX_BUILT_BYTES {
        return Err(exec_err!("requested length too large: {length}"));
    }
    let have = char_count(s);
    if length <= have || fill.is_empty() {
        out.push_str(&s[..char_offset(s, length)]);
        return Ok(());
    }
    let padding: String = fill.chars().cycle().take(length - have).collect();
    if left {
        out.push_str(&padding);
        out.push_str(s);
    } else {
        out.push_str(s);
        out.push_str(&padding);
    }
    Ok(())
}

/// PostgreSQL's `split_part`: field `n` (1-based, negative from the end) of `s` split at
/// `delimiter`; '' when there is no such field.
fn split_part<'a>(s: &'a str, delimiter: &str, n: i64) -> Result<&'a str> {
    if n == 0 {
        return Err(exec_err!("field position must not be zero"));
    }
    if delimiter.is_empty() {
        return Ok(if n == 1 || n == -1 { s } else { "" });
    }
    let field = if n > 0 { s.split(delimiter).nth(n as usize - 1) } else { s.rsplit(delimiter).nth(n.unsigned_abs() as usize - 1) };
    Ok(field.unwrap_or(""))
}

/// PostgreSQL's `initcap`: the first letter of each run of letters and digits in upper
/// case, the others in lower case.
fn initcap(s: &str, out: &mut String) {
    let mut in_word = false;
    for c in s.chars() {
        if c.is_alphanumeric() {
            if in_word {
                out.extend(c.to_lowercase());
            } else {
                out.extend(c.to_uppercase());
            }
            in_word = true;
        } else {
            out.push(c);
            in_word = false;
        }
    }
}

fn chr(code: i64) -> Result<char> {
    if code == 0 {
        return Err(exec_err!("null character not permitted"));
    }
    if code < 0 {
        return Err(exec_err!("character number must be positive"));
    }
    let code = u32::try_from(code).map_err(|_| exec_err!("requested character too large for encoding: {code}"))?;
    char::from_u32(code).ok_or_else(|| {
        if code > char::MAX as u32 {
            exec_err!("requested character too large for encoding: {code}")
        } else {
            exec_err!("requested character not valid for encoding: {code}")
        }
    })
}

impl TextFunction {
    fn concat_ws(&self, chunk: &DataChunk) -> Result<Vector> {
        use std::fmt::Write;
        let values = self.args.iter().map(|a| a.evaluate(chunk)).collect::<Result<Vec<_>>>()?;
        let separator = &values[0];
        let data = build_strings(
            chunk.physical_len(),
            rows_of(chunk),
            |i| separator.is_valid(i),
            |i, out| {
                let mut first = true;
                for v in &values[1..] {
                    if v.is_valid(i) {
                        if !first {
                            out.push_str(separator.strings().get(i));
                        }
                        let _ = out.write_str(v.strings().get(i));
                        first = false;
                    }
                }
                Ok(())
            },
        )?;
        Ok(Vector::new(self.data_type, data, separator.validity.clone()))
    }
}

impl PhysicalExpr for TextFunction {
    fn data_type(&self) -> DataType {
        self.data_type
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        use ScalarFunction as F;
        if self.func == F::ConcatWs {
            return self.concat_ws(chunk);
        }
        let values = self.args.iter().map(|a| a.evaluate(chunk)).collect::<Result<Vec<_>>>()?;
        let len = chunk.physical_len();
        let rows = rows_of(chunk);
        let validity = combined_validity(&values.iter().collect::<Vec<_>>());
        let valid = |i: usize| validity.as_ref().is_none_or(|v| v.get(i));
        let text = |arg: usize, i: usize| values[arg].strings().get(i);
        let integer = |arg: usize, i: usize| values[arg].values::<i64>()[i];
        let data = match self.func {
            F::Contains => match &self.finder {
                Some(finder) => wrap(map_rows(len, rows, |i| valid(i) && finder.find(values[0].strings().get_bytes(i)).is_some())),
                None => wrap(map_rows(len, rows, |i| valid(i) && text(0, i).contains(text(1, i)))),
            },
            F::EndsWith => wrap(map_rows(len, rows, |i| valid(i) && text(0, i).ends_with(text(1, i)))),
            F::Ascii => wrap(map_rows(len, rows, |i| if valid(i) { text(0, i).chars().next().map_or(0, |c| c as i32) } else { 0 })),
            F::SplitPart => build_strings(len, rows, valid, |i, out| {
                out.push_str(split_part(text(0, i), text(1, i), integer(2, i))?);
                Ok(())
            })?,
            F::Left => build_strings(len, rows, valid, |i, out| {
                let (s, n) = (text(0, i), integer(1, i));
                let keep = if n >= 0 { n as usize } else { char_count(s).saturating_sub(n.unsigned_abs() as usize) };
                out.push_str(&s[..char_offset(s, keep)]);
                Ok(())
            })?,
            F::Right => build_strings(len, rows, valid, |i, out| {
                let (s, n) = (text(0, i), integer(1, i));
                let skip = if n >= 0 { char_count(s).saturating_sub(n as usize) } else { n.unsigned_abs() as usize };
                out.push_str(&s[char_offset(s, skip)..]);
                Ok(())
            })?,
            F::Lpad | F::Rpad => build_strings(len, rows, valid, |i, out| {
                let fill = if values.len() > 2 { text(2, i) } else { " " };
                pad(text(0, i), integer(1, i), fill, self.func == F::Lpad, out)
            })?,
            F::Repeat => build_strings(len, rows, valid, |i, out| {
                let (s, n) = (text(0, i), integer(1, i));
                let times = n.max(0) as usize;
                if s.len().saturating_mul(times) > MAX_BUILT_BYTES {
                    return Err(exec_err!("requested length too large: repeat of {} bytes {n} times", s.len()));
                }
                out.push_str(&s.repeat(times));
                Ok(())
            })?,
            F::Reverse => build_strings(len, rows, valid, |i, out| {
                out.extend(text(0, i).chars().rev());
                Ok(())
            })?,
            F::Md5 => build_strings(len, rows, valid, |i, out| {
                use std::fmt::Write;
                for byte in Md5::digest(values[0].strings().get_bytes(i)) {
                    let _ = write!(out, "{byte:02x}");
                }
                Ok(())
            })?,
            F::Initcap => build_strings(len, rows, valid, |i, out| {
                initcap(text(0, i), out);
                Ok(())
            })?,
            F::Chr => build_strings(len, rows, valid, |i, out| {
                out.push(chr(integer(0, i))?);
                Ok(())
            })?,
            other => return Err(internal_err!("{} is not a text function", other.name())),
        };
        Ok(Vector::new(self.data_type, data, validity))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_part_fields() {
        assert_eq!(split_part("a,b,c", ",", 2).unwrap(), "b");
        assert_eq!(split_part("a,b,c", ",", -1).unwrap(), "c");
        assert_eq!(split_part("a,b,c", ",", 4).unwrap(), "");
        assert_eq!(split_part("abc", "", 1).unwrap(), "abc");
        assert!(split_part("abc", ",", 0).is_err());
    }

    #[test]
    fn padding() {
        let mut out = String::new();
        pad("hi", 5, "xy", true, &mut out).unwrap();
        assert_eq!(out, "xyxhi");
        out.clear();
        pad("héllo", 2, " ", false, &mut out).unwrap();
        assert_eq!(out, "hé");
        out.clear();
        pad("hi", 5, "", true, &mut out).unwrap();
        assert_eq!(out, "hi");
    }

    /// Constant folding evaluates calls through `evaluate_constant`: the new functions
    /// fold (and a failing call reports its error, which keeps it unfolded).
    #[test]
    fn constant_calls_fold() {
        use apiary_sql::expr::Expr;
        use apiary_types::datetime::DateField;
        let text = |s: &str| Expr::literal(ScalarValue::Utf8(s.into()));
        let call = |func, args, data_type| Expr::Function { func, args, data_type };
        let fold = |e: &Expr| crate::expr::evaluate_constant(e).map(|v| v.to_string());
        let varchar = DataType::Varchar(None);
        assert_eq!(fold(&call(ScalarFunction::Md5, vec![text("abc")], varchar)).unwrap(), "900150983cd24fb0d6963f7d28e17f72");
        let replace = call(ScalarFunction::RegexpReplace, vec![text("aXbX"), text("x"), text("-"), text("gi")], varchar);
        assert_eq!(fold(&replace).unwrap(), "a-b-");
        let date = |s: &str| Expr::literal(ScalarValue::Date(apiary_types::datetime::parse_date(s).unwrap()));
        let diff = call(ScalarFunction::DateDiff(DateField::Month), vec![date("2024-01-31"), date("2024-03-01")], DataType::BigInt);
        assert_eq!(fold(&diff).unwrap(), "2");
        let chr_zero = call(ScalarFunction::Chr, vec![Expr::literal(ScalarValue::Int64(0))], varchar);
        assert!(fold(&chr_zero).is_err());
    }

    #[test]
    fn initcap_words() {
        let mut out = String::new();
        initcap("hello wORLD-foo bar2baz", &mut out);
        assert_eq!(out, "Hello World-Foo Bar2baz");
    }
}
