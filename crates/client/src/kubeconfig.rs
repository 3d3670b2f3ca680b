//! Kubeconfig loading (client-go's tools/clientcmd): the current context's
//! cluster and user, turned into a [`RestConfig`]. Relative file paths are
//! resolved against the kubeconfig's directory, as clientcmd does. Errors
//! name the file and the field, e.g.
//! `kubeconfig /etc/kubernetes/kubelet.conf: users[0].user.client-key-data: invalid base64: ...`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine;
use serde::Deserialize;

use super::tls::{self, ClientIdentity, ServerTrust};
use super::{Auth, RestConfig};

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct KubeConfig {
    clusters: Vec<NamedCluster>,
    users: Vec<NamedUser>,
    contexts: Vec<NamedContext>,
    #[serde(rename = "current-context")]
    current_context: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct NamedCluster {
    name: String,
    cluster: Cluster,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
struct Cluster {
    server: String,
    certificate_authority: Option<String>,
    certificate_authority_data: Option<String>,
    insecure_skip_tls_verify: bool,
    tls_server_name: Option<String>,
    proxy_url: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct NamedUser {
    name: String,
    user: User,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
struct User {
    client_certificate: Option<String>,
    client_certificate_data: Option<String>,
    client_key: Option<String>,
    client_key_data: Option<String>,
    token: Option<String>,
    #[serde(rename = "tokenFile")]
    token_file: Option<String>,
    username: Option<String>,
    exec: Option<serde_norway::Value>,
    auth_provider: Option<serde_norway::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct NamedContext {
    name: String,
    context: Context,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Context {
    cluster: String,
    user: String,
}

/// Why a kubeconfig gave no config. The text names the file and the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeconfigError {
    /// From a file: its path, then what is wrong (a read error, or the
    /// text of one of the others).
    #[error("kubeconfig {}: {msg}", path.display())]
    File { path: PathBuf, msg: String },
    #[error("parsing YAML: {0}")]
    Yaml(String),
    /// A field's path and what is wrong with it.
    #[error("{field}: {msg}")]
    Field { field: String, msg: String },
}

impl KubeconfigError {
    fn in_file(path: &Path, msg: impl std::fmt::Display) -> KubeconfigError {
        KubeconfigError::File {
            path: path.to_path_buf(),
            msg: msg.to_string(),
        }
    }
}

/// A field-level error: the field path and what is wrong with it.
struct FieldError {
    field: String,
    msg: String,
}

impl From<FieldError> for KubeconfigError {
    fn from(e: FieldError) -> KubeconfigError {
        KubeconfigError::Field {
            field: e.field,
            msg: e.msg,
        }
    }
}

fn field_err(field: impl Into<String>, msg: impl Into<String>) -> FieldError {
    FieldError {
        field: field.into(),
        msg: msg.into(),
    }
}

/// Reads a kubeconfig file into a RestConfig with client-go's default
/// QPS/burst and a 30 s timeout (callers set the kubelet's kubeAPIQPS etc.).
pub fn load(path: impl AsRef<Path>) -> Result<RestConfig, KubeconfigError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|e| KubeconfigError::in_file(path, e))?;
    let base = path.parent().unwrap_or_else(|| Path::new("."));
    from_yaml(&text, base).map_err(|e| KubeconfigError::in_file(path, e))
}

/// Parses kubeconfig YAML; relative paths resolve against `base_dir`.
pub fn from_yaml(text: &str, base_dir: &Path) -> Result<RestConfig, KubeconfigError> {
    let kc: KubeConfig =
        serde_norway::from_str(text).map_err(|e| KubeconfigError::Yaml(e.to_string()))?;
    Ok(build(&kc, base_dir)?)
}

fn build(kc: &KubeConfig, base: &Path) -> Result<RestConfig, FieldError> {
    let (ctx_idx, ctx, ci, cluster) = current_cluster(kc)?;
    let user = if ctx.user.is_empty() {
        None
    } else {
        let found = find(&kc.users, |u| u.name == ctx.user).ok_or_else(|| {
            field_err(
                format!("contexts[{ctx_idx}].context.user"),
                format!("user {:?} not found in users", ctx.user),
            )
        })?;
        Some(found)
    };

    let server = server_url(ci, &cluster.cluster)?;
    let trust = server_trust(ci, &cluster.cluster, base)?;
    let (identity, auth) = match user {
        Some((ui, u)) => (
            client_identity(ui, &u.user, base)?,
            auth(ui, &u.user, base)?,
        ),
        None => (None, Auth::None),
    };
    let (tls, client_cert) = tls::client_config(trust, identity).map_err(|e| {
        let field = user.map_or("users".to_string(), |(ui, _)| format!("users[{ui}].user"));
        field_err(field, format!("building TLS config: {e}"))
    })?;
    let mut cfg = RestConfig::new(server);
    cfg.tls = tls;
    cfg.client_cert = client_cert;
    cfg.auth = auth;
    Ok(cfg)
}

/// client-go's `AnonymousClientConfig` of the kubeconfig at `path` (its
/// server and CA, no credentials) presenting the client certificate of
/// `slot`, which may still be empty: the kubelet's client while the TLS
/// bootstrap runs in the background (upstream's rotating transport).
pub fn anonymous_with_cert_slot(
    path: impl AsRef<Path>,
    slot: Arc<tls::CertSlot>,
) -> Result<RestConfig, KubeconfigError> {
    let path = path.as_ref();
    let fail = |e: String| KubeconfigError::in_file(path, e);
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    let base = path.parent().unwrap_or_else(|| Path::new("."));
    let kc: KubeConfig =
        serde_norway::from_str(&text).map_err(|e| fail(format!("parsing YAML: {e}")))?;
    let cluster = current_cluster(&kc).and_then(|(_, _, ci, c)| {
        Ok((
            server_url(ci, &c.cluster)?,
            server_trust(ci, &c.cluster, base)?,
        ))
    });
    let (server, trust) = cluster.map_err(|e| fail(format!("{}: {}", e.field, e.msg)))?;
    let mut cfg = RestConfig::new(server);
    cfg.tls = tls::client_config_with_slot(trust, slot.clone())
        .map_err(|e| fail(format!("building TLS config: {e}")))?;
    cfg.client_cert = Some(slot);
    Ok(cfg)
}

fn find<T>(items: &[T], pred: impl Fn(&T) -> bool) -> Option<(usize, &T)> {
    items.iter().enumerate().find(|(_, t)| pred(t))
}

fn current_context(kc: &KubeConfig) -> Result<(usize, &Context), FieldError> {
    if kc.current_context.is_empty() {
        return Err(field_err("current-context", "not set"));
    }
    find(&kc.contexts, |c| c.name == kc.current_context)
        .map(|(i, c)| (i, &c.context))
        .ok_or_else(|| {
            field_err(
                "current-context",
                format!("context {:?} not found in contexts", kc.current_context),
            )
        })
}

/// The current context and the cluster it names, with their indices for
/// error fields.
fn current_cluster(kc: &KubeConfig) -> Result<(usize, &Context, usize, &NamedCluster), FieldError> {
    let (ctx_idx, ctx) = current_context(kc)?;
    let (ci, cluster) = find(&kc.clusters, |c| c.name == ctx.cluster).ok_or_else(|| {
        field_err(
            format!("contexts[{ctx_idx}].context.cluster"),
            format!("cluster {:?} not found in clusters", ctx.cluster),
        )
    })?;
    Ok((ctx_idx, ctx, ci, cluster))
}

fn server_url(ci: usize, c: &Cluster) -> Result<String, FieldError> {
    let field = format!("clusters[{ci}].cluster.server");
    if c.server.is_empty() {
        return Err(field_err(field, "not set"));
    }
    if !(c.server.starts_with("https://") || c.server.starts_with("http://")) {
        return Err(field_err(
            field,
            format!("{:?} is not an http(s) URL", c.server),
        ));
    }
    if let Some(host) = non_ascii_host(&c.server) {
        return Err(field_err(
            field,
            format!("host name {host:?} is not ASCII: internationalised names are not mapped; write its punycode (xn--) form"),
        ));
    }
    if c.tls_server_name.is_some() {
        log::warn!("clusters[{ci}].cluster.tls-server-name is not supported; the server URL's host is verified");
    }
    if c.proxy_url.is_some() {
        log::warn!("clusters[{ci}].cluster.proxy-url is not supported; connecting directly");
    }
    Ok(c.server.trim_end_matches('/').to_string())
}

/// The URL's host when it is not ASCII. The HTTP client is built without
/// IDNA mapping (Cargo.toml, idna_adapter), so such a name would fail at
/// the first request with a vaguer error.
fn non_ascii_host(url: &str) -> Option<&str> {
    let authority = crate::rest::url_authority(url);
    let authority = authority.split(['?', '#']).next().unwrap_or(authority);
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    (!host.is_ascii()).then_some(host)
}

fn server_trust(ci: usize, c: &Cluster, base: &Path) -> Result<ServerTrust, FieldError> {
    let prefix = format!("clusters[{ci}].cluster");
    let ca = pem_source(
        &prefix,
        "certificate-authority",
        &c.certificate_authority,
        &c.certificate_authority_data,
        base,
    )?;
    if c.insecure_skip_tls_verify {
        if ca.is_some() {
            // client-go refuses this combination too.
            return Err(field_err(
                format!("{prefix}.insecure-skip-tls-verify"),
                "cannot be used together with a certificate authority",
            ));
        }
        log::warn!(
            "{prefix}.insecure-skip-tls-verify is set: the apiserver's certificate is NOT verified"
        );
        return Ok(ServerTrust::Insecure);
    }
    match ca {
        Some((field, pem)) => tls::parse_roots(&pem)
            .map(ServerTrust::Roots)
            .map_err(|e| field_err(field, e)),
        None => Ok(ServerTrust::WebPki),
    }
}

fn client_identity(ui: usize, u: &User, base: &Path) -> Result<Option<ClientIdentity>, FieldError> {
    let prefix = format!("users[{ui}].user");
    let cert = pem_source(
        &prefix,
        "client-certificate",
        &u.client_certificate,
        &u.client_certificate_data,
        base,
    )?;
    let key = pem_source(
        &prefix,
        "client-key",
        &u.client_key,
        &u.client_key_data,
        base,
    )?;
    match (cert, key) {
        (None, None) => Ok(None),
        (Some((field, _)), None) => Err(field_err(
            field,
            "set without client-key or client-key-data",
        )),
        (None, Some((field, _))) => Err(field_err(
            field,
            "set without client-certificate or client-certificate-data",
        )),
        (Some((cert_field, cert)), Some((key_field, key))) => {
            let origin = match non_empty(&u.client_certificate_data) {
                Some(_) => "the inline certificate".to_string(),
                None => resolve(base, u.client_certificate.as_deref().unwrap_or(""))
                    .display()
                    .to_string(),
            };
            let certs = tls::parse_certs(&cert).map_err(|e| {
                field_err(
                    &cert_field,
                    format!("{origin}: {e}: it must hold a PEM CERTIFICATE block"),
                )
            })?;
            check_client_cert(&certs, unix_now())
                .map_err(|e| field_err(&cert_field, format!("{origin}: {e}")))?;
            Ok(Some(ClientIdentity {
                certs,
                key: tls::parse_key(&key).map_err(|e| field_err(key_field, e))?,
            }))
        }
    }
}

/// What rustls or the API server would refuse later with a vaguer error:
/// an X.509 v1 leaf (rustls takes v3 only), a leaf that is not DER, or one
/// that has expired (every request would be 401). Each with its fix.
pub(crate) fn check_client_cert(
    certs: &[rustls::pki_types::CertificateDer<'_>],
    now: i64,
) -> Result<(), String> {
    use x509_parser::certificate::X509CertificateParser;
    use x509_parser::nom::Parser;
    let Some(leaf) = certs.first() else {
        return Err("no certificate".into());
    };
    // Extensions stay unparsed: only the version and validity are read,
    // and the linker can then leave out the extension parsers.
    let mut parser = X509CertificateParser::new().with_deep_parse_extensions(false);
    let Ok((_, cert)) = parser.parse(leaf.as_ref()) else {
        return Err("not a readable X.509 certificate (DER)".into());
    };
    // The version field holds the version less one (RFC 5280 4.1.2.1).
    match cert.version().0.saturating_add(1) {
        3 => {}
        v => {
            return Err(format!(
                "the certificate is X.509 v{v}, and only v3 is accepted (rustls): reissue it as v3, with extensions (kubeadm, or openssl x509 -req with -extfile)"
            ))
        }
    }
    match cert.validity().not_after.timestamp() {
        t if t < now => Err(format!(
            "the certificate expired at {} (notAfter): renew it (kubeadm certs renew), or start with --bootstrap-kubeconfig to request a new one",
            rfc3339(t)
        )),
        _ => Ok(()),
    }
}

/// Seconds since the Unix epoch; 0 for a clock before it.
fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn rfc3339(secs: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(secs)
        .map_or_else(|_| format!("{secs} (Unix seconds)"), |t| t.to_string())
}

fn auth(ui: usize, u: &User, base: &Path) -> Result<Auth, FieldError> {
    let prefix = format!("users[{ui}].user");
    if u.exec.is_some() {
        return Err(field_err(
            format!("{prefix}.exec"),
            "exec credential plugins are not supported",
        ));
    }
    if u.auth_provider.is_some() {
        return Err(field_err(
            format!("{prefix}.auth-provider"),
            "auth providers are not supported",
        ));
    }
    if u.username.is_some() {
        return Err(field_err(
            format!("{prefix}.username"),
            "basic authentication is not supported",
        ));
    }
    // client-go: the token file, when set, wins over an inline token.
    if let Some(file) = non_empty(&u.token_file) {
        return Ok(Auth::TokenFile(resolve(base, file)));
    }
    Ok(non_empty(&u.token).map_or(Auth::None, |t| Auth::Bearer(t.to_string())))
}

/// The PEM bytes of `NAME` (a file) or `NAME-data` (inline base64), with the
/// field they came from. Inline data wins when both are set, as in client-go.
fn pem_source(
    prefix: &str,
    name: &str,
    file: &Option<String>,
    data: &Option<String>,
    base: &Path,
) -> Result<Option<(String, Vec<u8>)>, FieldError> {
    if let Some(data) = non_empty(data) {
        let field = format!("{prefix}.{name}-data");
        if non_empty(file).is_some() {
            log::warn!("{prefix}: both {name} and {name}-data are set; using {name}-data");
        }
        let bytes = decode_base64(data).map_err(|e| field_err(&field, e))?;
        return Ok(Some((field, bytes)));
    }
    let Some(file) = non_empty(file) else {
        return Ok(None);
    };
    let field = format!("{prefix}.{name}");
    let path = resolve(base, file);
    let bytes = std::fs::read(&path)
        .map_err(|e| field_err(&field, format!("reading {}: {e}", path.display())))?;
    Ok(Some((field, bytes)))
}

fn decode_base64(data: &str) -> Result<Vec<u8>, String> {
    let compact: String = data.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    base64::engine::general_purpose::STANDARD
        .decode(compact)
        .map_err(|e| format!("invalid base64: {e}"))
}

fn non_empty(s: &Option<String>) -> Option<&str> {
    s.as_deref().filter(|s| !s.is_empty())
}

/// clientcmd's ResolvePaths: relative to the kubeconfig's directory.
fn resolve(base: &Path, file: &str) -> PathBuf {
    let p = Path::new(file);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

/// The current context's cluster as written (a CA file resolved against the
/// kubeconfig's directory) and its user's client certificate PEM: what the
/// TLS bootstrap (`certificate::bootstrap`) copies into the kubeconfig it
/// writes, and checks for expiry.
#[derive(Debug, Default, PartialEq)]
pub struct CurrentEntries {
    pub server: String,
    pub ca_file: Option<PathBuf>,
    pub ca_data: Option<Vec<u8>>,
    pub insecure: bool,
    pub client_cert: Option<Vec<u8>>,
}

/// Reads [`CurrentEntries`] from a kubeconfig; errors name the file and field.
pub fn load_current(path: &Path) -> Result<CurrentEntries, KubeconfigError> {
    let fail = |e: String| KubeconfigError::in_file(path, e);
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    let kc: KubeConfig =
        serde_norway::from_str(&text).map_err(|e| fail(format!("parsing YAML: {e}")))?;
    let base = path.parent().unwrap_or_else(|| Path::new("."));
    current_entries(&kc, base).map_err(|e| fail(format!("{}: {}", e.field, e.msg)))
}

fn current_entries(kc: &KubeConfig, base: &Path) -> Result<CurrentEntries, FieldError> {
    let (_, ctx, ci, cluster) = current_cluster(kc)?;
    let c = &cluster.cluster;
    let ca_data = non_empty(&c.certificate_authority_data)
        .map(|d| {
            decode_base64(d).map_err(|e| {
                field_err(
                    format!("clusters[{ci}].cluster.certificate-authority-data"),
                    e,
                )
            })
        })
        .transpose()?;
    let client_cert = match find(&kc.users, |u| u.name == ctx.user) {
        Some((ui, u)) => pem_source(
            &format!("users[{ui}].user"),
            "client-certificate",
            &u.user.client_certificate,
            &u.user.client_certificate_data,
            base,
        )?
        .map(|(_, pem)| pem),
        None => None,
    };
    Ok(CurrentEntries {
        server: server_url(ci, c)?,
        ca_file: non_empty(&c.certificate_authority).map(|f| resolve(base, f)),
        ca_data,
        insecure: c.insecure_skip_tls_verify,
        client_cert,
    })
}
