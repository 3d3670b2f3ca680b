use super::*;

/// Certificates made with openssl (the commands are in testdata/README.md).
const ADMIN: &[u8] = include_bytes!("../testdata/admin.der");
const APISERVER_CLIENT: &[u8] = include_bytes!("../testdata/apiserver-kubelet-client.der");
const NODE_CLIENT: &[u8] = include_bytes!("../testdata/node-client.der");
const T61_SUBJECT: &[u8] = include_bytes!("../testdata/t61-subject.der");
const BMP_SUBJECT: &[u8] = include_bytes!("../testdata/bmp-subject.der");
const TWO_CNS: &[u8] = include_bytes!("../testdata/two-cns.der");

fn parse(der: &[u8]) -> Certificate<'_> {
    Certificate::from_der(der).expect("certificate")
}

fn strings(s: &[&str]) -> Vec<String> {
    s.iter().map(|s| s.to_string()).collect()
}

fn rcgen_cert(p: rcgen::CertificateParams) -> rcgen::Certificate {
    let key = rcgen::KeyPair::generate().expect("key");
    p.self_signed(&key).expect("cert")
}

#[test]
fn reads_both_time_forms() {
    // rcgen writes UTCTime through 2049 and GeneralizedTime from 2050.
    let mut p = rcgen::CertificateParams::default();
    p.not_before = rcgen::date_time_ymd(1970, 1, 1);
    p.not_after = rcgen::date_time_ymd(2050, 1, 1) - std::time::Duration::from_secs(1);
    assert_eq!(parse(rcgen_cert(p).der()).validity(), (0, 2_524_607_999));
    let mut p = rcgen::CertificateParams::default();
    p.not_before = rcgen::date_time_ymd(1950, 1, 1);
    p.not_after = rcgen::date_time_ymd(2050, 1, 1);
    assert_eq!(
        parse(rcgen_cert(p).der()).validity(),
        (-631_152_000, 2_524_608_000)
    );
    // openssl: notAfter in 2054, as GeneralizedTime.
    assert!(parse(NODE_CLIENT).not_after() > 2_524_608_000);
}

#[test]
fn reads_not_after_of_an_rcgen_certificate() {
    let mut p = rcgen::CertificateParams::default();
    p.not_after = rcgen::date_time_ymd(2031, 3, 4);
    let cert = rcgen_cert(p);
    assert_eq!(parse(cert.der()).not_after(), 1_930_348_800);
}

#[test]
fn reads_dns_and_ip_sans() {
    let p = rcgen::CertificateParams::new(strings(&["node1", "10.0.0.7"])).expect("params");
    assert_eq!(
        parse(rcgen_cert(p).der())
            .subject_alt_names()
            .expect("sans"),
        strings(&["node1", "10.0.0.7"])
    );
    let none = rcgen_cert(rcgen::CertificateParams::default());
    assert_eq!(
        parse(none.der()).subject_alt_names().expect("sans"),
        Vec::<String>::new()
    );
    assert_eq!(
        parse(NODE_CLIENT).subject_alt_names().expect("sans"),
        strings(&["node-1", "10.0.0.7", "fd00::7"])
    );
}

#[test]
fn reads_the_subject_in_every_directory_string_type() {
    let subject = |der| parse(der).subject();
    assert_eq!(
        subject(ADMIN),
        Subject {
            common_name: Some("kubernetes-admin".into()),
            organizations: strings(&["system:masters"]),
        }
    );
    // UTF8String, two Organizations, in order.
    assert_eq!(
        subject(APISERVER_CLIENT).organizations,
        strings(&["system:masters", "kubeadm:cluster-admins"])
    );
    // TeletexString as Latin-1, BMPString as UTF-16.
    assert_eq!(
        subject(T61_SUBJECT),
        Subject {
            common_name: Some("nöde".into()),
            organizations: strings(&["grüppe"]),
        }
    );
    assert_eq!(
        subject(BMP_SUBJECT),
        Subject {
            common_name: Some("nŏde".into()),
            organizations: strings(&["grŭppe"]),
        }
    );
    // CN=first, O=o1, CN=second, O=o2: the last CommonName.
    assert_eq!(
        subject(TWO_CNS),
        Subject {
            common_name: Some("second".into()),
            organizations: strings(&["o1", "o2"]),
        }
    );
}

#[test]
fn malformed_input_is_an_error_never_a_panic() {
    for bad in [&b""[..], b"junk", b"\x30\x03\x02\x01", b"\x30\x80\x00\x00"] {
        let err = Certificate::from_der(bad).err().expect("an error");
        assert!(err.to_string().starts_with("not a readable X.509"), "{err}");
    }
    // Every truncation, and every byte flipped: an answer, no panic.
    for end in 0..ADMIN.len() {
        assert!(Certificate::from_der(&ADMIN[..end]).is_err(), "{end}");
    }
    let mut der = NODE_CLIENT.to_vec();
    for i in 0..der.len() {
        der[i] ^= 0xff;
        if let Ok(c) = Certificate::from_der(&der) {
            let _ = (
                c.validity(),
                c.subject_alt_names(),
                c.subject(),
            );
        }
        der[i] ^= 0xff;
    }
    // Bytes after the certificate are not its business.
    let trailing = [ADMIN, b"trailing"].concat();
    assert_eq!(parse(&trailing).not_after(), parse(ADMIN).not_after());
}

