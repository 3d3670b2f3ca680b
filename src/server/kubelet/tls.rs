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

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::ServerConfig;

use super::auth::UserInfo;
use crate::certificate::x509::{self, Certificate};
use crate::client::tls::{parse_certs, parse_key, parse_roots, CertSlot, ClientIdentity};
use crate::server::ServerError;

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
) -> Result<Arc<ServerConfig>, ServerError> {
    let slot = match &src.slot {
        Some(slot) if slot.leaf().is_some() => slot.clone(),
        Some(slot) => {
            let (certs, key) = load_serving_cert(src)?;
            slot.set(ClientIdentity { certs, key })
                .map_err(|error| ServerError::Tls {
                    what: "serving certificate and key",
                    error,
                })?;
            slot.clone()
        }
        None => {
            let (certs, key) = load_serving_cert(src)?;
            CertSlot::new(ClientIdentity { certs, key }).map_err(|error| ServerError::Tls {
                what: "serving certificate and key",
                error,
            })?
        }
    };
    let super::tls_options::Settings {
        provider,
        versions,
        warnings,
    } = super::tls_options::settings(src.min_version, src.cipher_suites)
        .map_err(ServerError::TlsOptions)?;
    for w in warnings {
        log::warn!("{w}");
    }
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .map_err(|error| ServerError::Tls {
            what: "TLS versions",
            error,
        })?;
    let builder = match client_ca_file {
        Some(path) => {
            let pem = fs::read(path).map_err(ServerError::io(format!(
                "read clientCAFile {}",
                path.display()
            )))?;
            let roots = parse_roots(&pem).map_err(|error| ServerError::Pem {
                what: format!("clientCAFile {}", path.display()),
                error,
            })?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(ServerError::Verifier)?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(builder.with_cert_resolver(slot)))
}

fn load_serving_cert(
    src: &CertSource<'_>,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), ServerError> {
    let (cert, key) = match (src.cert_file, src.key_file) {
        (Some(c), Some(k)) => (c.to_path_buf(), k.to_path_buf()),
        (None, None) => ensure_self_signed(src.cert_dir, src.host)?,
        _ => return Err(ServerError::CertWithoutKey),
    };
    read_pair(&cert, &key)
}

fn read_pair(
    cert: &Path,
    key: &Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), ServerError> {
    let cert_pem = fs::read(cert).map_err(ServerError::io(format!("read {}", cert.display())))?;
    let key_pem = fs::read(key).map_err(ServerError::io(format!("read {}", key.display())))?;
    let pem_error = |path: &Path| {
        let what = path.display().to_string();
        move |error| ServerError::Pem { what, error }
    };
    let chain = parse_certs(&cert_pem).map_err(pem_error(cert))?;
    let key = parse_key(&key_pem).map_err(pem_error(key))?;
    Ok((chain, key))
}

/// `<dir>/kubelet.crt` and `kubelet.key`, generated unless both already load.
fn ensure_self_signed(dir: &Path, host: &str) -> Result<(PathBuf, PathBuf), ServerError> {
    let cert = dir.join("kubelet.crt");
    let key = dir.join("kubelet.key");
    if read_pair(&cert, &key).is_ok() {
        return Ok((cert, key));
    }
    let (cert_pem, key_pem) = generate_self_signed(host)?;
    fs::create_dir_all(dir).map_err(ServerError::io(format!(
        "create cert dir {}",
        dir.display()
    )))?;
    write_file(&cert, cert_pem.as_bytes(), 0o644)?;
    write_file(&key, key_pem.as_bytes(), 0o600)?;
    log::info!(
        "wrote a self-signed serving certificate to {}",
        cert.display()
    );
    Ok((cert, key))
}

fn write_file(path: &Path, data: &[u8], mode: u32) -> Result<(), ServerError> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .map_err(ServerError::io(format!("create {}", path.display())))?;
    f.write_all(data)
        .map_err(ServerError::io(format!("write {}", path.display())))
}

/// As upstream certutil.GenerateSelfSignedCertKey: a CA `<host>-ca@<unix>`
/// signing a serving certificate `<host>@<unix>` for `host` (as an IP or DNS
/// name), valid a year; the cert file holds both. ECDSA P-256 (ring cannot
/// generate RSA keys).
pub(crate) fn generate_self_signed(host: &str) -> Result<(String, String), ServerError> {
    let gen = |what| move |error| ServerError::Generate { what, error };
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
        KeyUsagePurpose,
    };
    let since_epoch = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let now = rcgen::date_time_ymd(1970, 1, 1) + since_epoch;
    let stamp = since_epoch.as_secs();

    let ca_key = KeyPair::generate().map_err(gen("generate CA key"))?;
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(gen("CA params"))?;
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
    let ca_cert = ca.self_signed(&ca_key).map_err(gen("self-sign CA"))?;

    let key = KeyPair::generate().map_err(gen("generate serving key"))?;
    let mut leaf =
        CertificateParams::new(vec![host.to_string()]).map_err(gen("serving cert params"))?;
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
        .map_err(gen("sign serving cert"))?;
    Ok((
        format!("{}{}", leaf_cert.pem(), ca_cert.pem()),
        key.serialize_pem(),
    ))
}

/// The x509 authenticator's user (upstream CommonNameUserConversion): the
/// subject's CommonName as the name, its Organizations as groups; None
/// without a CommonName or with an empty one (upstream refuses both).
pub(crate) fn subject_user(cert_der: &[u8]) -> Result<Option<UserInfo>, x509::Error> {
    let subject = Certificate::from_der(cert_der)?.subject();
    let name = subject.common_name.filter(|cn| !cn.is_empty());
    Ok(name.map(|name| UserInfo {
        name,
        groups: subject.organizations,
        ..Default::default()
    }))
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
        let user = subject_user(cert.der()).unwrap().unwrap();
        assert_eq!(user.name, "kube-apiserver-kubelet-client");
        assert_eq!(user.groups, vec!["system:masters".to_string()]);
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name
            .push(DnType::OrganizationName, "system:masters");
        let no_cn = p.self_signed(&key).unwrap();
        assert_eq!(subject_user(no_cn.der()).unwrap(), None);
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name.push(DnType::CommonName, "");
        p.distinguished_name
            .push(DnType::OrganizationName, "system:masters");
        let empty_cn = p.self_signed(&key).unwrap();
        assert_eq!(subject_user(empty_cn.der()).unwrap(), None);
        assert!(subject_user(b"\x30\x03\x02\x01").is_err());
        assert!(subject_user(&[]).is_err());
    }

    #[test]
    fn reads_users_of_openssl_certificates() {
        let user = |der: &[u8]| {
            let u = subject_user(der).unwrap().unwrap();
            (u.name, u.groups)
        };
        let groups = |g: &[&str]| g.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            user(include_bytes!(
                "../../certificate/testdata/apiserver-kubelet-client.der"
            )),
            (
                "kube-apiserver-kubelet-client".into(),
                groups(&["system:masters", "kubeadm:cluster-admins"])
            )
        );
        assert_eq!(
            user(include_bytes!("../../certificate/testdata/node-client.der")),
            ("system:node:node-1".into(), groups(&["system:nodes"]))
        );
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
