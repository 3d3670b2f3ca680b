//! Just enough DER to read a certificate's notAfter (x509.Certificate's
//! NotAfter, which upstream's isClientConfigStillValid compares with now).

/// (tag, content start, content end) of the DER element at `pos`.
fn tlv(buf: &[u8], pos: usize) -> Option<(u8, usize, usize)> {
    let tag = *buf.get(pos)?;
    let l0 = usize::from(*buf.get(pos + 1)?);
    let (len, hdr) = if l0 < 0x80 {
        (l0, 2)
    } else {
        let n = l0 & 0x7f;
        if n == 0 || n > 4 {
            return None;
        }
        let mut len = 0usize;
        for i in 0..n {
            len = (len << 8) | usize::from(*buf.get(pos + 2 + i)?);
        }
        (len, 2 + n)
    };
    let start = pos + hdr;
    let end = start.checked_add(len)?;
    (end <= buf.len()).then_some((tag, start, end))
}

const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// notAfter of a DER certificate, in seconds since the Unix epoch.
pub fn not_after(der: &[u8]) -> Option<i64> {
    validity(der).map(|(_, after)| after)
}

/// (notBefore, notAfter) of a DER certificate, in seconds since the Unix epoch.
pub fn validity(der: &[u8]) -> Option<(i64, i64)> {
    let (_, c0, _) = tlv(der, 0)?; // Certificate
    let (_, t0, _) = tlv(der, c0)?; // TBSCertificate
    let mut pos = t0;
    if tlv(der, pos)?.0 == 0xa0 {
        pos = tlv(der, pos)?.2; // [0] version
    }
    for _ in 0..3 {
        pos = tlv(der, pos)?.2; // serialNumber, signature, issuer
    }
    let (_, v0, _) = tlv(der, pos)?; // Validity
    let time = |pos: usize| -> Option<(i64, usize)> {
        let (tag, a0, a1) = tlv(der, pos)?;
        Some((
            parse_time(tag, std::str::from_utf8(&der[a0..a1]).ok()?)?,
            a1,
        ))
    };
    let (before, end) = time(v0)?;
    let (after, _) = time(end)?;
    Some((before, after))
}

/// The DNS names and IP addresses (as text) of the subjectAltName
/// extension, in order; empty without one. None when the DER is malformed.
pub fn subject_alt_names(der: &[u8]) -> Option<Vec<String>> {
    let (_, c0, _) = tlv(der, 0)?;
    let (_, t0, t1) = tlv(der, c0)?;
    let mut pos = t0;
    let mut exts = None;
    while pos < t1 {
        let (tag, s, e) = tlv(der, pos)?;
        if tag == 0xa3 {
            exts = Some(tlv(der, s)?); // [3] EXPLICIT Extensions
        }
        pos = e;
    }
    let Some((_, mut p, end)) = exts else {
        return Some(Vec::new());
    };
    while p < end {
        let (_, x0, x1) = tlv(der, p)?; // Extension
        let (_, o0, o1) = tlv(der, x0)?;
        if der[o0..o1] == [0x55, 0x1d, 0x11] {
            let mut q = o1;
            if tlv(der, q)?.0 == 0x01 {
                q = tlv(der, q)?.2; // critical
            }
            let (_, v0, _) = tlv(der, q)?; // OCTET STRING
            return general_names(der, v0);
        }
        p = x1;
    }
    Some(Vec::new())
}

fn general_names(der: &[u8], pos: usize) -> Option<Vec<String>> {
    let (_, mut p, end) = tlv(der, pos)?;
    let mut out = Vec::new();
    while p < end {
        let (tag, v0, v1) = tlv(der, p)?;
        let v = &der[v0..v1];
        match (tag, v.len()) {
            (0x82, _) => out.push(String::from_utf8_lossy(v).into_owned()),
            (0x87, 4) => out.push(std::net::IpAddr::from(<[u8; 4]>::try_from(v).ok()?).to_string()),
            (0x87, 16) => {
                out.push(std::net::IpAddr::from(<[u8; 16]>::try_from(v).ok()?).to_string())
            }
            _ => {}
        }
        p = v1;
    }
    Some(out)
}

/// UTCTime `YYMMDDHHMMSSZ` (years 1950–2049, RFC 5280) or GeneralizedTime
/// `YYYYMMDDHHMMSSZ`.
fn parse_time(tag: u8, s: &str) -> Option<i64> {
    let digits = s.strip_suffix('Z')?;
    let (year, rest) = match tag {
        UTC_TIME if digits.len() == 12 => {
            let yy: i64 = digits.get(..2)?.parse().ok()?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, &digits[2..])
        }
        GENERALIZED_TIME if digits.len() == 14 => (digits.get(..4)?.parse().ok()?, &digits[4..]),
        _ => return None,
    };
    let field = |i: usize| -> Option<i64> { rest.get(i..i + 2)?.parse().ok() };
    let (mo, d, h, mi, sec) = (field(0)?, field(2)?, field(4)?, field(6)?, field(8)?);
    Some(days_from_civil(year, mo, d) * 86_400 + h * 3600 + mi * 60 + sec)
}

/// (year, month, day) → days since 1970-01-01 (H. Hinnant's days_from_civil).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_time_forms() {
        assert_eq!(parse_time(UTC_TIME, "700101000000Z"), Some(0));
        assert_eq!(parse_time(UTC_TIME, "491231235959Z"), Some(2_524_607_999));
        assert_eq!(
            parse_time(GENERALIZED_TIME, "20500101000000Z"),
            Some(2_524_608_000)
        );
        assert_eq!(parse_time(UTC_TIME, "7001010000Z"), None);
    }

    #[test]
    fn reads_dns_and_ip_sans() {
        let key = rcgen::KeyPair::generate().expect("key");
        let p = rcgen::CertificateParams::new(vec!["node1".to_string(), "10.0.0.7".to_string()])
            .expect("params");
        let cert = p.self_signed(&key).expect("cert");
        assert_eq!(
            subject_alt_names(cert.der()),
            Some(vec!["node1".to_string(), "10.0.0.7".to_string()])
        );
        let none = rcgen::CertificateParams::default()
            .self_signed(&key)
            .expect("cert");
        assert_eq!(subject_alt_names(none.der()), Some(Vec::new()));
    }

    #[test]
    fn reads_not_after_of_an_rcgen_certificate() {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut p = rcgen::CertificateParams::default();
        p.not_after = rcgen::date_time_ymd(2031, 3, 4);
        let cert = p.self_signed(&key).expect("cert");
        assert_eq!(
            not_after(cert.der()),
            Some(days_from_civil(2031, 3, 4) * 86_400)
        );
    }
}
