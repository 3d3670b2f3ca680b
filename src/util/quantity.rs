//! Kubernetes resource quantities ("100m", "128Mi", "1.5", "2e3", "1G").
//! k8s-openapi keeps `Quantity` as a string; this turns one into numbers.

/// A parsed quantity in thousandths of a unit, rounded up as upstream's
/// `MilliValue` does.
pub fn parse_milli(s: &str) -> Result<i128, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    if num.is_empty() || num == "+" || num == "-" {
        return Err(format!("quantity {s:?}: no number"));
    }
    let (mantissa, scale) = parse_decimal(num).ok_or_else(|| format!("quantity {s:?}: bad number {num:?}"))?;
    let (multiplier, exp10) = suffix_factor(suffix).ok_or_else(|| format!("quantity {s:?}: unknown suffix {suffix:?}"))?;
    // value = mantissa * 10^-scale * multiplier * 10^exp10, in milli units.
    let mut v = mantissa.checked_mul(multiplier).ok_or_else(|| format!("quantity {s:?}: too large"))?;
    let mut e = exp10 + 3 - scale;
    while e > 0 {
        v = v.checked_mul(10).ok_or_else(|| format!("quantity {s:?}: too large"))?;
        e -= 1;
    }
    while e < 0 {
        // Round up, as MilliValue does.
        let rem = v % 10;
        v /= 10;
        if rem > 0 {
            v += 1;
        }
        e += 1;
    }
    Ok(v)
}

/// The quantity in whole units, rounded up (upstream's `Value`).
pub fn parse_value(s: &str) -> Result<i128, String> {
    let m = parse_milli(s)?;
    Ok(if m >= 0 { (m + 999) / 1000 } else { m / 1000 })
}

fn parse_decimal(num: &str) -> Option<(i128, i32)> {
    let (sign, digits) = match num.as_bytes().first()? {
        b'-' => (-1, &num[1..]),
        b'+' => (1, &num[1..]),
        _ => (1, num),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    if !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let joined = format!("{int}{frac}");
    let mantissa: i128 = if joined.is_empty() { 0 } else { joined.parse().ok()? };
    Some((sign * mantissa, frac.len() as i32))
}

/// (binary multiplier, decimal exponent) of a suffix.
fn suffix_factor(suffix: &str) -> Option<(i128, i32)> {
    let bin = |p: u32| Some((1i128 << (10 * p), 0));
    match suffix {
        "" => Some((1, 0)),
        "Ki" => bin(1),
        "Mi" => bin(2),
        "Gi" => bin(3),
        "Ti" => bin(4),
        "Pi" => bin(5),
        "Ei" => bin(6),
        "n" => Some((1, -9)),
        "u" => Some((1, -6)),
        "m" => Some((1, -3)),
        "k" => Some((1, 3)),
        "M" => Some((1, 6)),
        "G" => Some((1, 9)),
        "T" => Some((1, 12)),
        "P" => Some((1, 15)),
        "E" => Some((1, 18)),
        s if s.starts_with(['e', 'E']) => s[1..].parse::<i32>().ok().map(|e| (1, e)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_and_memory_forms() {
        assert_eq!(parse_milli("100m").unwrap(), 100);
        assert_eq!(parse_milli("0.5").unwrap(), 500);
        assert_eq!(parse_milli("2").unwrap(), 2000);
        assert_eq!(parse_value("128Mi").unwrap(), 128 * 1024 * 1024);
        assert_eq!(parse_value("1G").unwrap(), 1_000_000_000);
        assert_eq!(parse_value("1.5Gi").unwrap(), 3 * 512 * 1024 * 1024);
        assert_eq!(parse_value("2e3").unwrap(), 2000);
        assert_eq!(parse_value("10Mi").unwrap(), 10 * 1024 * 1024);
        // Sub-milli amounts round up.
        assert_eq!(parse_milli("1u").unwrap(), 1);
        assert_eq!(parse_value("100m").unwrap(), 1);
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "abc", "1Qi", "--1", "1..2", "m"] {
            assert!(parse_milli(bad).is_err(), "{bad:?} should be rejected");
        }
    }
}
