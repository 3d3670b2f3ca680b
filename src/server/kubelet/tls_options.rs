//! `tlsMinVersion` and `tlsCipherSuites` (upstream's `--tls-min-version`,
//! `--tls-cipher-suites`, read by component-base's cliflag): Go's names,
//! mapped onto what rustls (ring) offers.
//!
//! - TLS 1.0 and 1.1 do not exist in rustls: asking for them as the minimum
//!   gives TLS 1.2 (stricter than asked, so a warning, not an error).
//! - TLS 1.3 suites are always on, as in Go, which ignores the list for 1.3.
//! - A name Go knows but rustls does not implement (CBC, RSA key exchange,
//!   3DES, RC4) is left out with a warning; if that leaves no TLS 1.2 suite
//!   while TLS 1.2 is allowed, it is an error. A name Go does not know is an
//!   error naming it.

use std::sync::Arc;

use rustls::crypto::{ring, CryptoProvider};
use rustls::{SupportedCipherSuite, SupportedProtocolVersion};

/// Go's names of the suites rustls with ring implements.
const SUPPORTED: &[(&str, SupportedCipherSuite)] = &[
    (
        "TLS_AES_128_GCM_SHA256",
        ring::cipher_suite::TLS13_AES_128_GCM_SHA256,
    ),
    (
        "TLS_AES_256_GCM_SHA384",
        ring::cipher_suite::TLS13_AES_256_GCM_SHA384,
    ),
    (
        "TLS_CHACHA20_POLY1305_SHA256",
        ring::cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
    ),
    (
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        ring::cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        ring::cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
        ring::cipher_suite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
    (
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
        ring::cipher_suite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
    (
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        ring::cipher_suite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        ring::cipher_suite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
        ring::cipher_suite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
    (
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
        ring::cipher_suite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
];

/// Go's other names (tls.CipherSuites and tls.InsecureCipherSuites), which
/// rustls does not implement.
const UNAVAILABLE: &[&str] = &[
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_RC4_128_SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
];

/// The versions allowed from `tlsMinVersion` ("" = rustls' default, 1.2 and
/// 1.3), and a warning when the minimum asked for is below what rustls has.
pub fn versions(
    min: &str,
) -> Result<(&'static [&'static SupportedProtocolVersion], Option<String>), TlsOptionsError> {
    static BOTH: &[&SupportedProtocolVersion] = &[&rustls::version::TLS13, &rustls::version::TLS12];
    static TLS13: &[&SupportedProtocolVersion] = &[&rustls::version::TLS13];
    match min {
        "" | "VersionTLS12" => Ok((BOTH, None)),
        "VersionTLS13" => Ok((TLS13, None)),
        "VersionTLS10" | "VersionTLS11" => Ok((
            BOTH,
            Some(format!(
                "tlsMinVersion {min}: TLS 1.0 and 1.1 are not implemented (rustls); the minimum is VersionTLS12"
            )),
        )),
        other => Err(TlsOptionsError::MinVersion(other.to_string())),
    }
}

/// The suites of `names` (empty = all rustls offers), with a warning per
/// known name rustls cannot provide. TLS 1.3 suites are always included.
pub fn cipher_suites(
    names: &[String],
    tls12_allowed: bool,
) -> Result<(Vec<SupportedCipherSuite>, Vec<String>), TlsOptionsError> {
    if names.is_empty() {
        return Ok((ring::DEFAULT_CIPHER_SUITES.to_vec(), Vec::new()));
    }
    let mut suites: Vec<SupportedCipherSuite> = ring::DEFAULT_CIPHER_SUITES
        .iter()
        .filter(|s| s.tls13().is_some())
        .copied()
        .collect();
    let mut warnings = Vec::new();
    let mut tls12 = 0;
    for name in names {
        if let Some((_, suite)) = SUPPORTED.iter().find(|(n, _)| n == name) {
            if suite.tls13().is_none() && !suites.contains(suite) {
                suites.push(*suite);
                tls12 += 1;
            }
        } else if UNAVAILABLE.contains(&name.as_str()) {
            warnings.push(format!(
                "tlsCipherSuites: {name} is not implemented by rustls (no CBC, RSA key exchange, 3DES or RC4 suites); it is not offered"
            ));
        } else {
            return Err(CipherSuiteError::Unknown(name.clone()).into());
        }
    }
    if tls12 == 0 && tls12_allowed {
        return Err(CipherSuiteError::NoTls12(names.to_vec()).into());
    }
    Ok((suites, warnings))
}

/// A tlsMinVersion or tlsCipherSuites that cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum TlsOptionsError {
    #[error("tlsMinVersion {0:?}: unknown; use VersionTLS12 or VersionTLS13")]
    MinVersion(String),
    #[error("tlsCipherSuites: {0}")]
    CipherSuites(#[from] CipherSuiteError),
}

#[derive(Debug, thiserror::Error)]
pub enum CipherSuiteError {
    #[error(
        "unknown cipher suite {0:?}; use Go's names, e.g. TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"
    )]
    Unknown(String),
    #[error(
        "none of {0:?} is a TLS 1.2 suite rustls implements; add one (e.g. \
         TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256) or set tlsMinVersion: VersionTLS13"
    )]
    NoTls12(Vec<String>),
}

/// What 10250's rustls config is built from.
pub struct Settings {
    pub provider: Arc<CryptoProvider>,
    pub versions: &'static [&'static SupportedProtocolVersion],
    /// To log at start.
    pub warnings: Vec<String>,
}

/// The crypto provider and versions for 10250 from the two settings.
pub fn settings(min: &str, names: &[String]) -> Result<Settings, TlsOptionsError> {
    let (versions, warning) = versions(min)?;
    let tls12_allowed = versions.contains(&&rustls::version::TLS12);
    let (suites, mut warnings) = cipher_suites(names, tls12_allowed)?;
    warnings.extend(warning);
    let provider = CryptoProvider {
        cipher_suites: suites,
        ..ring::default_provider()
    };
    Ok(Settings {
        provider: Arc::new(provider),
        versions,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn min_versions() {
        assert_eq!(versions("").unwrap().0.len(), 2);
        assert_eq!(versions("VersionTLS13").unwrap().0.len(), 1);
        let (v, warn) = versions("VersionTLS10").unwrap();
        assert_eq!(v.len(), 2);
        assert!(warn.unwrap().contains("VersionTLS12"));
        assert!(versions("TLS1.2")
            .unwrap_err()
            .to_string()
            .contains("\"TLS1.2\""));
    }

    #[test]
    fn suites_by_go_name() {
        let (s, w) =
            cipher_suites(&names(&["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"]), true).unwrap();
        assert!(w.is_empty());
        let tls12: Vec<_> = s.iter().filter(|s| s.tls13().is_none()).collect();
        assert_eq!(tls12.len(), 1);
        assert_eq!(s.len(), 4, "the three TLS 1.3 suites stay");

        let (_, w) = cipher_suites(
            &names(&[
                "TLS_RSA_WITH_AES_128_CBC_SHA",
                "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
            ]),
            true,
        )
        .unwrap();
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("TLS_RSA_WITH_AES_128_CBC_SHA"), "{w:?}");

        let err = cipher_suites(&names(&["TLS_FOO"]), true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"TLS_FOO\""), "{err}");
        let err = cipher_suites(&names(&["TLS_RSA_WITH_AES_128_CBC_SHA"]), true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("VersionTLS13"), "{err}");
        assert!(cipher_suites(&names(&["TLS_RSA_WITH_AES_128_CBC_SHA"]), false).is_ok());
    }
}
