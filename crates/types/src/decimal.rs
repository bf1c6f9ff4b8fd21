//! Exact fixed-point decimals.
//!
//! A `DECIMAL(p, s)` value `v` is stored as the integer `v * 10^s`: in an `i64` when
//! `p <= 18`, else in an `i128`. Arithmetic never goes through floating point; rounding
//! (when a scale shrinks) is half away from zero, as in PostgreSQL.

use apiary_common::{exec_err, Result};

/// `POW10[i] = 10^i` for `i` in `0..=38`.
pub const POW10: [i128; 39] = {
    let mut table = [1i128; 39];
    let mut i = 1;
    while i < 39 {
        table[i] = table[i - 1] * 10;
        i += 1;
    }
    table
};

/// The number of decimal digits of `|value|` (0 has one digit).
pub fn digit_count(value: i128) -> u8 {
    let magnitude = value.unsigned_abs();
    let mut digits = 1u8;
    while digits < 39 && magnitude >= POW10[digits as usize] as u128 {
        digits += 1;
    }
    digits
}

/// Changes the scale of `value` from `from_scale` to `to_scale`, rounding half away from
/// zero when digits are dropped. `None` on overflow.
pub fn rescale(value: i128, from_scale: u8, to_scale: u8) -> Option<i128> {
    if to_scale >= from_scale {
        value.checked_mul(*POW10.get((to_scale - from_scale) as usize)?)
    } else {
        let divisor = *POW10.get((from_scale - to_scale) as usize)?;
        Some(div_round(value, divisor))
    }
}

/// Integer division rounding half away from zero.
#[inline]
pub fn div_round(value: i128, divisor: i128) -> i128 {
    // 64-bit division when both fit (the common case: i128 division is a library call
    // several times slower); `i64::MIN / -1` would overflow, so -1 takes the wide path.
    if let (Ok(v), Ok(d)) = (i64::try_from(value), i64::try_from(divisor)) {
        if d != -1 {
            return i128::from(div_round_i64(v, d));
        }
    }
    let (quotient, remainder) = (value / divisor, value % divisor);
    if remainder.unsigned_abs() * 2 >= divisor.unsigned_abs() {
        quotient + if (value < 0) != (divisor < 0) { -1 } else { 1 }
    } else {
        quotient
    }
}

/// [`div_round`] in 64 bits; `divisor` must be neither 0 nor -1.
#[inline]
fn div_round_i64(value: i64, divisor: i64) -> i64 {
    let (quotient, remainder) = (value / divisor, value % divisor);
    if remainder.unsigned_abs() * 2 >= divisor.unsigned_abs() {
        quotient + if (value < 0) != (divisor < 0) { -1 } else { 1 }
    } else {
        quotient
    }
}

/// `value * factor / divisor` rounded half away from zero (a decimal division, `factor`
/// being 10^(result scale - dividend scale + divisor scale)); `None` when the result
/// does not fit `i128`. Computed as `q * factor + round(r * factor / divisor)` with `q`
/// and `r` the quotient and remainder of `value / divisor`: both parts have the sign of
/// the result, so rounding the second rounds the sum, and `value * factor` itself may
/// exceed `i128` when the result does not. The divisions are 64-bit when the operands
/// fit (TPC-DS Q04's `x / 2` at PostgreSQL's scale 16 multiplies by 10^14, out of `i64`
/// range, but `r * 10^14 < 2 * 10^14` is not). `divisor` must not be zero.
#[inline]
pub fn scaled_div_round(value: i128, factor: i128, divisor: i128) -> Option<i128> {
    if let (Ok(v), Ok(d), Ok(f)) = (i64::try_from(value), i64::try_from(divisor), i64::try_from(factor)) {
        if d != -1 {
            let (quotient, remainder) = (v / d, v % d);
            if let Some(scaled) = remainder.checked_mul(f) {
                return i128::from(quotient).checked_mul(factor)?.checked_add(i128::from(div_round_i64(scaled, d)));
            }
        }
    }
    let (quotient, remainder) = (value / divisor, value % divisor);
    quotient.checked_mul(factor)?.checked_add(div_round(remainder.checked_mul(factor)?, divisor))
}

/// The average `sum / count` of decimals, scaled up by `factor` (10^(output scale - input
/// scale)) and rounded half away from zero; `None` when it overflows: the decimal
/// division `sum * factor / count` ([`scaled_div_round`]), so a large sum times the
/// factor cannot overflow when the average itself fits. `count` must be positive.
#[inline]
pub fn decimal_average(sum: i128, count: i64, factor: i128) -> Option<i128> {
    scaled_div_round(sum, factor, i128::from(count))
}

/// Whether `value` fits in `precision` digits.
#[inline]
pub fn fits_precision(value: i128, precision: u8) -> bool {
    value.unsigned_abs() < POW10[precision as usize] as u128
}

/// Parses a decimal literal (`-12.50`, `.5`, `3.`, `1e3`) into (scaled value, precision, scale).
pub fn parse_decimal_literal(text: &str) -> Option<(i128, u8, u8)> {
    let text = text.trim();
    let (mantissa, exponent) = match text.find(['e', 'E']) {
        Some(pos) => (&text[..pos], text[pos + 1..].parse::<i32>().ok()?),
        None => (text, 0),
    };
    let (negative, digits) = match mantissa.as_bytes().first()? {
        b'-' => (true, &mantissa[1..]),
        b'+' => (false, &mantissa[1..]),
        _ => (false, mantissa),
    };
    let (int_part, frac_part) = match digits.find('.') {
        Some(pos) => (&digits[..pos], &digits[pos + 1..]),
        None => (digits, ""),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return None;
    }
    if !int_part.bytes().all(|b| b.is_ascii_digit()) || !frac_part.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut value: i128 = 0;
    for b in int_part.bytes().chain(frac_part.bytes()) {
        value = value.checked_mul(10)?.checked_add((b - b'0') as i128)?;
    }
    let mut scale = frac_part.len() as i32 - exponent;
    if scale < 0 {
        value = value.checked_mul(*POW10.get((-scale) as usize)?)?;
        scale = 0;
    }
    if scale > 38 {
        return None;
    }
    if negative {
        value = -value;
    }
    let precision = digit_count(value).max(scale as u8);
    if precision > 38 {
        return None;
    }
    Some((value, precision.max(1), scale as u8))
}

/// Parses text as a `DECIMAL(precision, scale)` value, rounding extra fractional digits.
pub fn parse_decimal(text: &str, precision: u8, scale: u8) -> Result<i128> {
    let (value, _, literal_scale) =
        parse_decimal_literal(text).ok_or_else(|| exec_err!("invalid input for DECIMAL({precision},{scale}): '{text}'"))?;
    let scaled = rescale(value, literal_scale, scale)
        .filter(|v| fits_precision(*v, precision))
        .ok_or_else(|| exec_err!("value '{text}' is out of range for DECIMAL({precision},{scale})"))?;
    Ok(scaled)
}

/// Fast path for bulk loading: parses ASCII bytes like `-1234.5` straight into an `i64`
/// scaled by `10^scale`. Returns `None` for anything unusual (exponents, too many digits),
/// in which case the caller falls back to [`parse_decimal`].
#[inline]
pub fn parse_decimal_bytes_i64(bytes: &[u8], scale: u8) -> Option<i64> {
    let (negative, digits) = match bytes.first()? {
        b'-' => (true, &bytes[1..]),
        b'+' => (false, &bytes[1..]),
        _ => (false, bytes),
    };
    if digits.is_empty() || digits.len() > 18 {
        return None;
    }
    let mut value: i64 = 0;
    let mut frac_digits: i32 = -1;
    for &b in digits {
        if b == b'.' {
            if frac_digits >= 0 {
                return None;
            }
            frac_digits = 0;
            continue;
        }
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        value = value * 10 + d as i64;
        if frac_digits >= 0 {
            frac_digits += 1;
        }
    }
    let frac_digits = frac_digits.max(0) as u8;
    if frac_digits > scale {
        return None;
    }
    let value = value.checked_mul(POW10[(scale - frac_digits) as usize] as i64)?;
    Some(if negative { -value } else { value })
}

/// Formats a scaled integer with `scale` digits after the point.
pub fn format_decimal(value: i128, scale: u8) -> String {
    if scale == 0 {
        return value.to_string();
    }
    let negative = value < 0;
    let digits = value.unsigned_abs().to_string();
    let scale = scale as usize;
    let padded = if digits.len() <= scale { format!("{}{}", "0".repeat(scale + 1 - digits.len()), digits) } else { digits };
    let split = padded.len() - scale;
    format!("{}{}.{}", if negative { "-" } else { "" }, &padded[..split], &padded[split..])
}

/// The value as a float (for casts to DOUBLE and for statistics).
pub fn decimal_to_f64(value: i128, scale: u8) -> f64 {
    value as f64 / POW10[scale as usize] as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_literals() {
        assert_eq!(parse_decimal_literal("12.50"), Some((1250, 4, 2)));
        assert_eq!(parse_decimal_literal("-0.05"), Some((-5, 2, 2)));
        assert_eq!(parse_decimal_literal(".5"), Some((5, 1, 1)));
        assert_eq!(parse_decimal_literal("100"), Some((100, 3, 0)));
        assert_eq!(parse_decimal_literal("1e3"), Some((1000, 4, 0)));
        assert_eq!(parse_decimal_literal("abc"), None);
        assert_eq!(parse_decimal_literal("1.2.3"), None);
    }

    #[test]
    fn parse_with_target_type() {
        assert_eq!(parse_decimal("12.345", 10, 2).unwrap(), 1235);
        assert_eq!(parse_decimal("-12.345", 10, 2).unwrap(), -1235);
        assert_eq!(parse_decimal("7", 10, 2).unwrap(), 700);
        assert!(parse_decimal("123456", 5, 2).is_err());
        assert_eq!(parse_decimal_bytes_i64(b"901.00", 2), Some(90100));
        assert_eq!(parse_decimal_bytes_i64(b"-3.5", 2), Some(-350));
        assert_eq!(parse_decimal_bytes_i64(b"3.555", 2), None);
    }

    #[test]
    fn rescale_rounds_half_away_from_zero() {
        assert_eq!(rescale(125, 2, 1), Some(13));
        assert_eq!(rescale(-125, 2, 1), Some(-13));
        assert_eq!(rescale(124, 2, 1), Some(12));
        assert_eq!(rescale(12, 1, 3), Some(1200));
    }

    #[test]
    fn format() {
        assert_eq!(format_decimal(1250, 2), "12.50");
        assert_eq!(format_decimal(-5, 2), "-0.05");
        assert_eq!(format_decimal(5, 3), "0.005");
        assert_eq!(format_decimal(42, 0), "42");
        assert_eq!(digit_count(0), 1);
        assert_eq!(digit_count(999), 3);
        assert_eq!(digit_count(-1000), 4);
    }
}

#[cfg(test)]
mod average_tests {
    use super::*;

    /// The 64-bit fast path of `decimal_average` answers exactly as 128-bit arithmetic.
    #[test]
    fn decimal_average_fast_path_matches_wide_arithmetic() {
        let wide = |sum: i128, count: i64, factor: i128| {
            let count = count as i128;
            let (q, r) = (sum / count, sum % count);
            q.checked_mul(factor).and_then(|whole| whole.checked_add(div_round(r * factor, count)))
        };
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let sum = (x as i64 >> (x % 60)) as i128;
            let count = 1 + (x >> 40) as i64 % 1000;
            let factor = POW10[(x % 19) as usize];
            assert_eq!(decimal_average(sum, count, factor), wide(sum, count, factor), "{sum} / {count} * {factor}");
        }
        assert_eq!(decimal_average(-5, 2, 1), Some(-3));
        assert_eq!(decimal_average(5, 2, 1), Some(3));
        assert_eq!(decimal_average(i64::MAX as i128, 1, 10), Some(i64::MAX as i128 * 10));
    }
}

#[cfg(test)]
mod division_tests {
    use super::*;

    /// Rounding half away from zero in plain 128-bit arithmetic, the reference for
    /// `div_round`'s 64-bit path.
    fn wide_div_round(value: i128, divisor: i128) -> i128 {
        let (quotient, remainder) = (value / divisor, value % divisor);
        if remainder.unsigned_abs() * 2 >= divisor.unsigned_abs() {
            quotient + if (value < 0) != (divisor < 0) { -1 } else { 1 }
        } else {
            quotient
        }
    }

    #[test]
    fn div_round_matches_wide_arithmetic() {
        let edges =
            [0, 1, -1, 2, -2, 3, 5, -5, 7, i64::MAX as i128, i64::MIN as i128, i64::MAX as i128 + 1, i64::MIN as i128 - 1, i128::MAX / 3];
        for &value in &edges {
            for &divisor in edges.iter().filter(|d| **d != 0) {
                assert_eq!(div_round(value, divisor), wide_div_round(value, divisor), "{value} / {divisor}");
            }
        }
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let value = (x as i64 >> (x % 64)) as i128;
            let divisor = ((x.rotate_left(29) as i64) >> (x % 61)) as i128;
            if divisor != 0 {
                assert_eq!(div_round(value, divisor), wide_div_round(value, divisor), "{value} / {divisor}");
            }
        }
        assert_eq!(div_round(5, 2), 3);
        assert_eq!(div_round(-5, 2), -3);
        assert_eq!(div_round(i64::MIN as i128, -1), -(i64::MIN as i128));
    }

    #[test]
    fn scaled_div_round_matches_wide_arithmetic() {
        let wide = |value: i128, factor: i128, divisor: i128| value.checked_mul(factor).map(|scaled| wide_div_round(scaled, divisor));
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let value = (x as i64 >> (x % 64)) as i128;
            let divisor = ((x.rotate_left(29) as i64) >> (x % 61)) as i128;
            let factor = POW10[(x >> 50) as usize % 24];
            if divisor == 0 {
                continue;
            }
            // Where the wide product fits, the answers agree; where it does not, the split
            // computation may still fit (the quotient is smaller than the product).
            if let Some(expected) = wide(value, factor, divisor) {
                assert_eq!(scaled_div_round(value, factor, divisor), Some(expected), "{value} * {factor} / {divisor}");
            }
        }
        assert_eq!(scaled_div_round(123_456, POW10[14], 2), Some(61_728 * POW10[14]));
        assert_eq!(scaled_div_round(-5, 1, 2), Some(-3));
        assert_eq!(scaled_div_round(1, POW10[16], 3), Some(3_333_333_333_333_333));
        assert_eq!(scaled_div_round(-2, POW10[16], 3), Some(-6_666_666_666_666_667));
        // The product overflows i128, the result does not.
        assert_eq!(scaled_div_round(i128::MAX / 10, 100, 1000), Some(i128::MAX / 10 / 10));
        assert_eq!(scaled_div_round(i128::MAX / 10, 100, 1), None);
    }
}
