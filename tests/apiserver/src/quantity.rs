//! resource.Quantity as the real server stores it: a request says `0.25`,
//! `1e3` or `1024Ki`, the server answers `250m`, `1k` and `1Mi`
//! (k8s.io/apimachinery/pkg/api/resource: ParseQuantity, then
//! CanonicalizeBytes when the object is encoded). ResourceLists are
//! also rounded up to milli units first (SetDefaults_ResourceList).
//!
//! Values are held as nano-units in an i128, which covers every quantity
//! the server accepts (it caps at 2^63-1 units); anything this parser does
//! not understand is left as it was sent.

use serde_json::Value;

const NANO_PER_UNIT: i128 = 1_000_000_000;
/// resource.maxAllowed: larger values are capped.
const MAX_UNITS: i128 = (1 << 63) - 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    DecimalSI,
    BinarySI,
    DecimalExponent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Quantity {
    nanos: i128,
    format: Format,
}

/// The suffix's base-10 or base-2 exponent and format.
fn suffix(s: &str) -> Option<(u32, i32, Format)> {
    let dec = |e| Some((10, e, Format::DecimalSI));
    let bin = |e| Some((2, e, Format::BinarySI));
    match s {
        "" => dec(0),
        "n" => dec(-9),
        "u" => dec(-6),
        "m" => dec(-3),
        "k" => dec(3),
        "M" => dec(6),
        "G" => dec(9),
        "T" => dec(12),
        "P" => dec(15),
        "E" => dec(18),
        "Ki" => bin(10),
        "Mi" => bin(20),
        "Gi" => bin(30),
        "Ti" => bin(40),
        "Pi" => bin(50),
        "Ei" => bin(60),
        _ => {
            let e = s.strip_prefix(['e', 'E'])?;
            Some((10, e.parse().ok()?, Format::DecimalExponent))
        }
    }
}

/// Splits `[+-]digits[.digits]suffix`; None when it is not a quantity.
fn split(s: &str) -> Option<(bool, &str, &str, &str)> {
    let (negative, rest) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let int_end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let (int, rest) = rest.split_at(int_end);
    let (frac, rest) = match rest.strip_prefix('.') {
        Some(r) => {
            let end = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
            r.split_at(end)
        }
        None => ("", rest),
    };
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    Some((negative, int, frac, rest))
}

/// `a / b`, rounded away from zero (inf.RoundUp), for a positive b.
fn div_up(a: i128, b: i128) -> i128 {
    let q = a / b;
    if a % b == 0 {
        q
    } else {
        q + a.signum()
    }
}

fn pow(base: i128, exp: u32) -> Option<i128> {
    base.checked_pow(exp)
}

/// ParseQuantity, to nano-units (rounded up, as upstream does).
fn parse(s: &str) -> Option<Quantity> {
    let (negative, int, frac, suf) = split(s.trim())?;
    let (base, exp, format) = suffix(suf)?;
    let digits: i128 = format!("{}{}", int, frac).parse().ok()?;
    let frac_len = frac.len() as i32;
    let magnitude = if base == 10 {
        let shift = exp + 9 - frac_len;
        if shift >= 0 {
            digits.checked_mul(pow(10, shift as u32)?)?
        } else {
            div_up(digits, pow(10, (-shift) as u32)?)
        }
    } else {
        let scaled = digits
            .checked_mul(pow(2, exp as u32)?)?
            .checked_mul(NANO_PER_UNIT)?;
        div_up(scaled, pow(10, frac_len as u32)?)
    };
    let capped = magnitude.min(MAX_UNITS * NANO_PER_UNIT);
    Some(Quantity {
        nanos: if negative { -capped } else { capped },
        format,
    })
}

/// Quantity.RoundUp(-3): whole milli-units, away from zero.
fn round_up_milli(q: Quantity) -> Quantity {
    Quantity {
        nanos: div_up(q.nanos, 1_000_000) * 1_000_000,
        ..q
    }
}

/// CanonicalizeBytes.
fn canonical(q: Quantity) -> String {
    if q.nanos == 0 {
        return "0".into();
    }
    let small = q.nanos.abs() < 1024 * NANO_PER_UNIT;
    if q.format == Format::BinarySI && !small && q.nanos % NANO_PER_UNIT == 0 {
        let (mut units, mut exp) = (q.nanos / NANO_PER_UNIT, 0);
        while units % 1024 == 0 && exp < 6 {
            units /= 1024;
            exp += 1;
        }
        let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][exp];
        return format!("{}{}", units, suffix);
    }
    let (mut mantissa, mut exp) = (q.nanos, -9i32);
    while mantissa % 10 == 0 {
        mantissa /= 10;
        exp += 1;
    }
    // AsCanonicalBytes: the exponent becomes a multiple of 3.
    let down = exp.rem_euclid(3);
    mantissa *= pow(10, down as u32).unwrap_or(1);
    exp -= down;
    let suffix = match (q.format, exp) {
        (Format::DecimalExponent, 0) => String::new(),
        (Format::DecimalExponent, e) => format!("e{}", e),
        (_, e) => decimal_suffix(e),
    };
    format!("{}{}", mantissa, suffix)
}

fn decimal_suffix(exp: i32) -> String {
    match exp {
        -9 => "n".into(),
        -6 => "u".into(),
        -3 => "m".into(),
        0 => String::new(),
        3 => "k".into(),
        6 => "M".into(),
        9 => "G".into(),
        12 => "T".into(),
        15 => "P".into(),
        18 => "E".into(),
        e => format!("e{}", e),
    }
}

/// The text of a quantity sent as a JSON string or number
/// (Quantity.UnmarshalJSON accepts both).
fn text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A Quantity field as the server answers it; unparseable values stay.
pub fn canonicalize(v: &mut Value) {
    if let Some(q) = text(v).as_deref().and_then(parse) {
        *v = Value::String(canonical(q));
    }
}

/// A ResourceList (SetDefaults_ResourceList: rounded up to milli-units).
pub fn canonicalize_list(list: &mut Value) {
    let Some(m) = list.as_object_mut() else {
        return;
    };
    for v in m.values_mut() {
        if let Some(q) = text(v).as_deref().and_then(parse) {
            *v = Value::String(canonical(round_up_milli(q)));
        }
    }
}

/// Quantity.Cmp of two quantities sent as JSON strings or numbers; None
/// when either is not a quantity.
pub fn compare(a: &Value, b: &Value) -> Option<std::cmp::Ordering> {
    let parsed = |v: &Value| text(v).as_deref().and_then(parse);
    Some(parsed(a)?.nanos.cmp(&parsed(b)?.nanos))
}

/// Whether two quantities are equal by value (`1` and `1000m` are), as
/// apiequality.Semantic compares them; text equality for non-quantities.
pub fn same(a: &Value, b: &Value) -> bool {
    compare(a, b).map_or(a == b, |o| o.is_eq())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn c(s: &str) -> String {
        let mut v = json!(s);
        canonicalize(&mut v);
        v.as_str().unwrap_or_default().to_string()
    }

    #[test]
    fn canonical_forms_as_the_real_server_stores_them() {
        // From the fidelity fixtures (requests as sent → as stored).
        assert_eq!(c("0.25"), "250m");
        assert_eq!(c("33554432"), "33554432");
        assert_eq!(c("1000"), "1k");
        assert_eq!(c("1000.0"), "1k");
        assert_eq!(c("64Mi"), "64Mi");
        assert_eq!(c("1Gi"), "1Gi");
        assert_eq!(c("1m"), "1m");
        assert_eq!(c("0"), "0");
        assert_eq!(c("264212084Ki"), "264212084Ki");
        // resource's own test table (quantity_test.go).
        assert_eq!(c("1024Ki"), "1Mi");
        assert_eq!(c("1536Ki"), "1536Ki");
        assert_eq!(c("0.5Ki"), "512");
        assert_eq!(c("1000Ki"), "1000Ki");
        assert_eq!(c("1023"), "1023");
        assert_eq!(c("1e3"), "1e3");
        assert_eq!(c("1E6"), "1e6");
        assert_eq!(c("100m"), "100m");
        assert_eq!(c("0.1"), "100m");
        assert_eq!(c("1.5"), "1500m");
        assert_eq!(c("12e-3"), "12e-3");
        assert_eq!(c("0.0000000001"), "1n");
        assert_eq!(c("-0.25"), "-250m");
        assert_eq!(c("+5"), "5");
        assert_eq!(c("2000000k"), "2G");
        // Not quantities: left alone (validation's business).
        assert_eq!(c("abc"), "abc");
        assert_eq!(c("1Xi"), "1Xi");
        let mut n = json!(1000);
        canonicalize(&mut n);
        assert_eq!(n, "1k");
    }

    #[test]
    fn compares_by_value() {
        use std::cmp::Ordering::*;
        assert_eq!(compare(&json!("64Mi"), &json!("96Mi")), Some(Less));
        assert_eq!(compare(&json!("1"), &json!("1000m")), Some(Equal));
        assert!(same(&json!(1), &json!("1")));
        assert_eq!(compare(&json!("x"), &json!("1")), None);
    }

    #[test]
    fn resource_lists_round_up_to_milli() {
        let mut l = json!({"cpu": "0.0001", "memory": "1e3", "x": 5, "bad": "??"});
        canonicalize_list(&mut l);
        assert_eq!(
            l,
            json!({"cpu": "1m", "memory": "1e3", "x": "5", "bad": "??"})
        );
    }
}
