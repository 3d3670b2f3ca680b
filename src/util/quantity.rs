//! A small parser for Kubernetes resource quantities (`"10Mi"`, `"100m"`,
//! `"1G"`, `"1.5e3"`), enough to validate and evaluate the quantity-valued
//! kubelet settings. The k8s-openapi `Quantity` type is only a string
//! wrapper, so it cannot do this for us.
//!
//! Grammar (apimachinery `resource.ParseQuantity`):
//! `[+-]? (digits | digits. | digits.digits | .digits) suffix` where suffix is
//! a binary SI suffix (`Ki Mi Gi Ti Pi Ei`), a decimal SI suffix
//! (`n u m "" k M G T P E`) or a decimal exponent (`e3`, `E-2`).

use std::fmt;

/// Why a quantity was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuantityError {
    input: String,
    reason: &'static str,
}

impl fmt::Display for QuantityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid quantity {:?}: {}", self.input, self.reason)
    }
}

impl std::error::Error for QuantityError {}

/// A scale factor `2^pow2 * 10^pow10` named by a suffix.
#[derive(Clone, Copy)]
struct Scale {
    pow2: u32,
    pow10: i32,
}

fn suffix_scale(suffix: &str) -> Option<Scale> {
    let (pow2, pow10) = match suffix {
        "" => (0, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        _ => return exponent_scale(suffix),
    };
    Some(Scale { pow2, pow10 })
}

/// `e<int>` / `E<int>`; a lone `E` is the exa suffix and handled above.
fn exponent_scale(suffix: &str) -> Option<Scale> {
    let rest = suffix
        .strip_prefix('e')
        .or_else(|| suffix.strip_prefix('E'))?;
    let digits = rest.strip_prefix(['+', '-']).unwrap_or(rest);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 4 {
        return None;
    }
    let pow10 = rest.parse::<i32>().ok()?;
    Some(Scale { pow2: 0, pow10 })
}

/// Parses a quantity and returns its value in milli-units, rounded up
/// (towards positive infinity) as apimachinery's `MilliValue` does.
///
/// `"1"` → 1000, `"100m"` → 100, `"10Mi"` → 10485760000, `"1n"` → 1.
pub fn parse_quantity(s: &str) -> Result<i128, QuantityError> {
    let err = |reason| QuantityError {
        input: s.to_string(),
        reason,
    };
    if s.is_empty() {
        return Err(err("empty string"));
    }
    let (negative, body) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let int_end = body
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(body.len());
    let (int_digits, rest) = body.split_at(int_end);
    let (frac_digits, suffix) = match rest.strip_prefix('.') {
        Some(after) => {
            let end = after
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(after.len());
            after.split_at(end)
        }
        None => ("", rest),
    };
    if int_digits.is_empty() && frac_digits.is_empty() {
        return Err(err("expected a number"));
    }
    let scale = suffix_scale(suffix).ok_or_else(|| err("unknown suffix"))?;
    let magnitude = scaled_milli(int_digits, frac_digits, scale, negative)
        .ok_or_else(|| err("value out of range"))?;
    Ok(if negative { -magnitude } else { magnitude })
}

/// Parses a quantity and returns its value in whole units, rounded up.
pub fn parse_quantity_value(s: &str) -> Result<i128, QuantityError> {
    let milli = parse_quantity(s)?;
    Ok(ceil_div(milli, 1000))
}

fn ceil_div(n: i128, d: i128) -> i128 {
    let q = n / d;
    if n % d > 0 {
        q + 1
    } else {
        q
    }
}

/// `digits × 2^pow2 × 10^(pow10 + 3 - frac_len)`, rounded away from zero for
/// positive values (ceil) and towards zero for negative ones (also ceil).
fn scaled_milli(int: &str, frac: &str, scale: Scale, negative: bool) -> Option<i128> {
    // Leading zeros carry no value and would only make the overflow check stricter.
    let digits = format!("{int}{frac}");
    let digits = digits.trim_start_matches('0');
    let mut mantissa: i128 = 0;
    for b in digits.bytes() {
        mantissa = mantissa
            .checked_mul(10)?
            .checked_add(i128::from(b - b'0'))?;
    }
    mantissa = mantissa.checked_mul(2i128.checked_pow(scale.pow2)?)?;
    let exp10 = i64::from(scale.pow10) + 3 - frac.len() as i64;
    if mantissa == 0 {
        return Some(0);
    }
    if exp10 >= 0 {
        let factor = 10i128.checked_pow(u32::try_from(exp10).ok()?)?;
        return mantissa.checked_mul(factor);
    }
    // A divisor beyond i128 range makes any mantissa round to the smallest unit.
    let divisor = match u32::try_from(-exp10)
        .ok()
        .and_then(|e| 10i128.checked_pow(e))
    {
        Some(d) => d,
        None => return Some(if negative { 0 } else { 1 }),
    };
    let (q, r) = (mantissa / divisor, mantissa % divisor);
    // Ceil of a negative value truncates towards zero, so only positives bump.
    Some(if r != 0 && !negative { q + 1 } else { q })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn milli(s: &str) -> i128 {
        match parse_quantity(s) {
            Ok(v) => v,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn parses_suffixes() {
        assert_eq!(milli("0"), 0);
        assert_eq!(milli("1"), 1000);
        assert_eq!(milli("100m"), 100);
        assert_eq!(milli("1.5"), 1500);
        assert_eq!(milli("0.5"), 500);
        assert_eq!(milli(".5"), 500);
        assert_eq!(milli("5."), 5000);
        assert_eq!(milli("1k"), 1_000_000);
        assert_eq!(milli("1G"), 1_000_000_000_000);
        assert_eq!(milli("10Mi"), 10 * 1024 * 1024 * 1000);
        assert_eq!(milli("1Ki"), 1_024_000);
        assert_eq!(milli("1.5Gi"), 1_610_612_736_000);
        assert_eq!(milli("1Ei"), (1i128 << 60) * 1000);
        assert_eq!(milli("1E"), 10i128.pow(21));
        assert_eq!(milli("1e3"), 1_000_000);
        assert_eq!(milli("1E3"), 1_000_000);
        assert_eq!(milli("12e-3"), 12);
        assert_eq!(milli("-100m"), -100);
        assert_eq!(milli("+2"), 2000);
        assert_eq!(milli("007"), 7000);
    }

    #[test]
    fn rounds_sub_milli_up() {
        assert_eq!(milli("1n"), 1);
        assert_eq!(milli("1u"), 1);
        assert_eq!(milli("1001u"), 2);
        assert_eq!(milli("0.0001"), 1);
        assert_eq!(milli("1e-40"), 1);
        assert_eq!(milli("-1n"), 0);
    }

    #[test]
    fn whole_units_round_up() {
        assert_eq!(parse_quantity_value("100m").ok(), Some(1));
        assert_eq!(parse_quantity_value("2").ok(), Some(2));
        assert_eq!(parse_quantity_value("10Mi").ok(), Some(10_485_760));
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "",
            "-",
            ".",
            "Mi",
            "1K",
            "1mi",
            "1 Mi",
            "1Mi ",
            "1.2.3",
            "10%",
            "1e",
            "1e+",
            "1ee3",
            "abc",
            "1E99999",
            "99999999999999999999999999999999999999999Ei",
        ] {
            assert!(parse_quantity(bad).is_err(), "{bad:?} should be rejected");
        }
        let e = parse_quantity("1K").unwrap_err().to_string();
        assert!(e.contains("\"1K\"") && e.contains("suffix"), "{e}");
    }
}
