//! The serving certificate and rustls configuration: tlsCertFile and
//! tlsPrivateKeyFile, or a self-signed pair kept in the cert dir (upstream
//! writes `<cert-dir>/kubelet.crt` and `kubelet.key` once and reuses them);
//! client certificates optional, verified against clientCAFile when set.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::ServerConfig;

use super::auth::UserInfo;
use crate::client::tls::{parse_certs, parse_key, parse_roots, CertSlot, ClientIdentity};

const SELF_SIGNED_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);

/// Where the serving certificate comes from.
pub(crate) struct CertSource<'a> {
    pub cert_file: Option<&'a Path>,
    pub key_file: Option<&'a Path>,
    pub cert_dir: &'a Path,
    /// Names the self-signed certificate (the node's hostname).
    pub host: &'a str,
    /// Where the certificate is presented from: the serving certificate
    /// manager's slot (`serverTLSBootstrap`), filled here with the
    /// self-signed pair while it is empty; else a slot of our own.
    pub slot: Option<Arc<CertSlot>>,
    /// tlsMinVersion and tlsCipherSuites.
    pub min_version: &'a str,
    pub cipher_suites: &'a [String],
}

/// The rustls server configuration for port 10250.
pub(crate) fn server_config(
    src: &CertSource<'_>,
    client_ca_file: Option<&Path>,
) -> anyhow::Result<Arc<ServerConfig>> {
    let slot = match &src.slot {
        Some(slot) if slot.leaf().is_some() => slot.clone(),
        Some(slot) => {
            let (certs, key) = load_serving_cert(src)?;
            slot.set(ClientIdentity { certs, key })
                .context("serving certificate and key")?;
            slot.clone()
        }
        None => {
            let (certs, key) = load_serving_cert(src)?;
            CertSlot::new(ClientIdentity { certs, key }).context("serving certificate and key")?
        }
    };
    let super::tls_options::Settings {
        provider,
        versions,
        warnings,
    } = super::tls_options::settings(src.min_version, src.cipher_suites)
        .map_err(anyhow::Error::msg)?;
    for w in warnings {
        log::warn!("{w}");
    }
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .context("TLS versions")?;
    let builder = match client_ca_file {
        Some(path) => {
            let pem =
                fs::read(path).with_context(|| format!("read clientCAFile {}", path.display()))?;
            let roots = parse_roots(&pem)
                .map_err(|e| anyhow::anyhow!("clientCAFile {}: {e}", path.display()))?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .context("client certificate verifier")?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(builder.with_cert_resolver(slot)))
}

fn load_serving_cert(
    src: &CertSource<'_>,
) -> anyhow::Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let (cert, key) = match (src.cert_file, src.key_file) {
        (Some(c), Some(k)) => (c.to_path_buf(), k.to_path_buf()),
        (None, None) => ensure_self_signed(src.cert_dir, src.host)?,
        _ => anyhow::bail!("tlsCertFile and tlsPrivateKeyFile must be set together"),
    };
    read_pair(&cert, &key)
}

fn read_pair(
    cert: &Path,
    key: &Path,
) -> anyhow::Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let cert_pem = fs::read(cert).with_context(|| format!("read {}", cert.display()))?;
    let key_pem = fs::read(key).with_context(|| format!("read {}", key.display()))?;
    let chain = parse_certs(&cert_pem).map_err(|e| anyhow::anyhow!("{}: {e}", cert.display()))?;
    let key = parse_key(&key_pem).map_err(|e| anyhow::anyhow!("{}: {e}", key.display()))?;
    Ok((chain, key))
}

/// `<dir>/kubelet.crt` and `kubelet.key`, generated unless both already load.
fn ensure_self_signed(dir: &Path, host: &str) -> anyhow::Result<(PathBuf, PathBuf)> {
    let cert = dir.join("kubelet.crt");
    let key = dir.join("kubelet.key");
    if read_pair(&cert, &key).is_ok() {
        return Ok((cert, key));
    }
    let (cert_pem, key_pem) = generate_self_signed(host)?;
    fs::create_dir_all(dir).with_context(|| format!("create cert dir {}", dir.display()))?;
    write_file(&cert, cert_pem.as_bytes(), 0o644)?;
    write_file(&key, key_pem.as_bytes(), 0o600)?;
    log::info!(
        "wrote a self-signed serving certificate to {}",
        cert.display()
    );
    Ok((cert, key))
}

fn write_file(path: &Path, data: &[u8], mode: u32) -> anyhow::Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .with_context(|| format!("create {}", path.display()))?;
    f.write_all(data)
        .with_context(|| format!("write {}", path.display()))
}

/// As upstream certutil.GenerateSelfSignedCertKey: a CA `<host>-ca@<unix>`
/// signing a serving certificate `<host>@<unix>` for `host` (as an IP or DNS
/// name), valid a year; the cert file holds both. ECDSA P-256 (ring cannot
/// generate RSA keys).
pub(crate) fn generate_self_signed(host: &str) -> anyhow::Result<(String, String)> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
        KeyUsagePurpose,
    };
    let since_epoch = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let now = rcgen::date_time_ymd(1970, 1, 1) + since_epoch;
    let stamp = since_epoch.as_secs();

    let ca_key = KeyPair::generate().context("generate CA key")?;
    let mut ca = CertificateParams::new(Vec::<String>::new()).context("CA params")?;
    ca.distinguished_name
        .push(DnType::CommonName, format!("{host}-ca@{stamp}"));
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    ca.not_before = now;
    ca.not_after = now + SELF_SIGNED_VALIDITY;
    let ca_cert = ca.self_signed(&ca_key).context("self-sign CA")?;

    let key = KeyPair::generate().context("generate serving key")?;
    let mut leaf = CertificateParams::new(vec![host.to_string()]).context("serving cert params")?;
    leaf.distinguished_name
        .push(DnType::CommonName, format!("{host}@{stamp}"));
    leaf.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.not_before = now;
    leaf.not_after = now + SELF_SIGNED_VALIDITY;
    let leaf_cert = leaf
        .signed_by(&key, &ca_cert, &ca_key)
        .context("sign serving cert")?;
    Ok((
        format!("{}{}", leaf_cert.pem(), ca_cert.pem()),
        key.serialize_pem(),
    ))
}

/// The x509 authenticator's user: CN as the name, O values as groups.
pub(crate) fn subject_user(cert_der: &[u8]) -> Option<UserInfo> {
    let (cn, orgs) = subject_cn_and_orgs(cert_der)?;
    Some(UserInfo {
        name: cn?,
        groups: orgs,
        ..Default::default()
    })
}

/// One DER element: (tag, contents, rest).
fn der(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

const OID_CN: &[u8] = &[0x55, 0x04, 0x03];
const OID_O: &[u8] = &[0x55, 0x04, 0x0a];

/// The subject's last CommonName and its Organizations, in order.
fn subject_cn_and_orgs(cert_der: &[u8]) -> Option<(Option<String>, Vec<String>)> {
    let (_, cert, _) = der(cert_der)?;
    let (_, tbs, _) = der(cert)?;
    let mut rest = tbs;
    let (tag, _, r) = der(rest)?;
    if tag == 0xa0 {
        rest = r; // explicit version
    }
    // serialNumber, signature, issuer, validity, then subject.
    for _ in 0..4 {
        rest = der(rest)?.2;
    }
    let (_, mut name, _) = der(rest)?;
    let (mut cn, mut orgs) = (None, Vec::new());
    while !name.is_empty() {
        let (_, mut rdn, r) = der(name)?;
        name = r;
        while !rdn.is_empty() {
            let (_, atv, r) = der(rdn)?;
            rdn = r;
            let (_, oid, value) = der(atv)?;
            let (vtag, vbytes, _) = der(value)?;
            let text = der_string(vtag, vbytes);
            match (oid, text) {
                (OID_CN, Some(t)) => cn = Some(t),
                (OID_O, Some(t)) => orgs.push(t),
                _ => {}
            }
        }
    }
    Some((cn, orgs))
}

/// The directory string types a subject uses.
fn der_string(tag: u8, bytes: &[u8]) -> Option<String> {
    match tag {
        0x0c | 0x13 | 0x16 => String::from_utf8(bytes.to_vec()).ok(),
        0x14 => Some(bytes.iter().map(|b| char::from(*b)).collect()),
        0x1e => {
            let units: Vec<u16> = bytes
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            String::from_utf16(&units).ok()
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cn_and_orgs() {
        use rcgen::{CertificateParams, DnType, KeyPair};
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name
            .push(DnType::OrganizationName, "system:masters");
        p.distinguished_name
            .push(DnType::CommonName, "kube-apiserver-kubelet-client");
        let cert = p.self_signed(&key).unwrap();
        let user = subject_user(cert.der()).unwrap();
        assert_eq!(user.name, "kube-apiserver-kubelet-client");
        assert_eq!(user.groups, vec!["system:masters".to_string()]);
        assert!(subject_user(b"\x30\x03\x02\x01").is_none());
        assert!(subject_user(&[]).is_none());
    }

    #[test]
    fn self_signed_is_reused() {
        let dir = std::env::temp_dir().join(format!("rkubelet-srv-tls-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let (c1, k1) = ensure_self_signed(&dir, "node-a").unwrap();
        let first = fs::read(&c1).unwrap();
        let (chain, _) = read_pair(&c1, &k1).unwrap();
        assert_eq!(chain.len(), 2);
        let (c2, _) = ensure_self_signed(&dir, "node-a").unwrap();
        assert_eq!(fs::read(c2).unwrap(), first);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            fs::metadata(&k1).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let _ = fs::remove_dir_all(&dir);
    }
}
