//! The certificate fields the kubelet reads (upstream's x509.Certificate:
//! Version, NotBefore/NotAfter, DNSNames/IPAddresses, Subject CommonName and
//! Organization), parsed by x509-parser. Chains are verified by rustls, not
//! here.

use std::net::IpAddr;

use x509_parser::asn1_rs::{Any, BmpString, Tag};
use x509_parser::certificate::X509Certificate;
use x509_parser::error::X509Error;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::FromDer;

/// Why a certificate's fields cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("not a readable X.509 certificate (DER): {0}")]
    Der(X509Error),
    #[error("unreadable subjectAltName extension: {0}")]
    SubjectAltName(X509Error),
}

/// A parsed DER certificate, borrowing its bytes.
pub struct Certificate<'a>(X509Certificate<'a>);

/// The subject fields the x509 authenticator maps to a user.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Subject {
    /// The last CommonName, as Go's pkix.Name keeps it.
    pub common_name: Option<String>,
    /// Every Organization, in order.
    pub organizations: Vec<String>,
}

impl<'a> Certificate<'a> {
    /// Parses one certificate; bytes after it are ignored.
    pub fn from_der(der: &'a [u8]) -> Result<Self, Error> {
        let (_, cert) = X509Certificate::from_der(der).map_err(|e| Error::Der(e.into()))?;
        Ok(Certificate(cert))
    }

    /// (notBefore, notAfter) in seconds since the Unix epoch.
    pub fn validity(&self) -> (i64, i64) {
        let v = self.0.validity();
        (v.not_before.timestamp(), v.not_after.timestamp())
    }

    /// notAfter in seconds since the Unix epoch.
    pub fn not_after(&self) -> i64 {
        self.validity().1
    }

    /// The DNS names and IP addresses (as text) of the subjectAltName
    /// extension, in order; empty without one.
    pub fn subject_alt_names(&self) -> Result<Vec<String>, Error> {
        let Some(san) = self
            .0
            .subject_alternative_name()
            .map_err(Error::SubjectAltName)?
        else {
            return Ok(Vec::new());
        };
        Ok(san
            .value
            .general_names
            .iter()
            .filter_map(|n| match n {
                GeneralName::DNSName(s) => Some(s.to_string()),
                GeneralName::IPAddress(b) => ip_text(b),
                _ => None,
            })
            .collect())
    }

    /// The subject's CommonName and Organizations. A value of a string type
    /// that does not decode is skipped, as if absent.
    pub fn subject(&self) -> Subject {
        let name = self.0.subject();
        Subject {
            common_name: name
                .iter_common_name()
                .filter_map(|a| directory_string(a.attr_value()))
                .last(),
            organizations: name
                .iter_organization()
                .filter_map(|a| directory_string(a.attr_value()))
                .collect(),
        }
    }
}

/// An IPv4 or IPv6 address SAN as text; None for other lengths.
fn ip_text(b: &[u8]) -> Option<String> {
    let ip = match b.len() {
        4 => IpAddr::from(<[u8; 4]>::try_from(b).ok()?),
        16 => IpAddr::from(<[u8; 16]>::try_from(b).ok()?),
        _ => return None,
    };
    Some(ip.to_string())
}

/// The directory string types a subject uses: UTF8String, PrintableString
/// and IA5String as UTF-8, TeletexString as Latin-1, BMPString as UTF-16.
fn directory_string(v: &Any<'_>) -> Option<String> {
    match v.tag() {
        Tag::Utf8String | Tag::PrintableString | Tag::Ia5String => {
            std::str::from_utf8(v.data).ok().map(str::to_string)
        }
        Tag::T61String => Some(v.data.iter().copied().map(char::from).collect()),
        Tag::BmpString => BmpString::try_from(v.clone()).ok().map(|s| s.string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
