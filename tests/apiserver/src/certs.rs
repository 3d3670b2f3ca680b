//! PKI for the double: a CA, the serving certificate, client certificates for
//! the kubelet(s) and an admin, bearer tokens, and kubeconfig files shaped like
//! kubeadm's. Everything is written to the state directory and reused when the
//! double restarts with the same directory (so a restart is an outage, not a
//! new cluster).

use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// An authenticated identity, as the authenticators produce it.
#[derive(Clone, Debug, PartialEq)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
}

impl User {
    pub fn is_admin(&self) -> bool {
        self.groups.iter().any(|g| g == "system:masters")
    }
    /// `Some(node)` for a `system:node:<node>` identity in group `system:nodes`.
    pub fn node_name(&self) -> Option<&str> {
        if self.groups.iter().any(|g| g == "system:nodes") {
            self.name.strip_prefix("system:node:")
        } else {
            None
        }
    }
}

pub struct Pki {
    pub dir: PathBuf,
    pub ca_pem: String,
    pub ca_der: CertificateDer<'static>,
    pub server_chain: Vec<CertificateDer<'static>>,
    pub server_key: PrivateKeyDer<'static>,
    /// bearer token -> user
    pub tokens: HashMap<String, User>,
    ca_cert: rcgen::Certificate,
    ca_key: KeyPair,
}

type Res<T> = Result<T, String>;

fn e<E: std::fmt::Display>(ctx: &str) -> impl Fn(E) -> String + '_ {
    move |err| format!("{}: {}", ctx, err)
}

fn validity(params: &mut CertificateParams, days: i64) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - Duration::from_secs(3600);
    params.not_after = now + Duration::from_secs((days * 86_400) as u64);
}

fn ca_params() -> CertificateParams {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "kubernetes");
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::CrlSign,
    ];
    validity(&mut p, 3650);
    p
}

fn write(path: &Path, data: &str, private: bool) -> Res<()> {
    fs::write(path, data).map_err(e(&path.display().to_string()))?;
    if private {
        use std::os::unix::fs::PermissionsExt;
        let _ = fs::set_permissions(path, fs::Permissions::from_mode(0o600));
    }
    Ok(())
}

fn pem_to_der(pem: &str) -> Res<Vec<u8>> {
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD
        .decode(body.trim())
        .map_err(e("pem"))
}

impl Pki {
    /// Loads the CA from `dir` (ca.crt + ca.key) or creates a new one; (re)issues
    /// the serving certificate; issues client certificates for every node name
    /// and the admin when they are missing.
    pub fn load_or_create(dir: &Path, node_names: &[String]) -> Res<Pki> {
        fs::create_dir_all(dir).map_err(e("create dir"))?;
        let (ca_crt, ca_keyf) = (dir.join("ca.crt"), dir.join("ca.key"));
        let (ca_cert, ca_key, ca_pem) = if ca_crt.exists() && ca_keyf.exists() {
            let key_pem = fs::read_to_string(&ca_keyf).map_err(e("read ca.key"))?;
            let key = KeyPair::from_pem(&key_pem).map_err(e("parse ca.key"))?;
            // Same subject and key as the stored ca.crt: certificates it signs
            // verify against the stored file, which clients already trust.
            let cert = ca_params().self_signed(&key).map_err(e("ca"))?;
            let pem = fs::read_to_string(&ca_crt).map_err(e("read ca.crt"))?;
            (cert, key, pem)
        } else {
            let key = KeyPair::generate().map_err(e("ca key"))?;
            let cert = ca_params().self_signed(&key).map_err(e("ca"))?;
            let pem = cert.pem();
            write(&ca_crt, &pem, false)?;
            write(&ca_keyf, &key.serialize_pem(), true)?;
            (cert, key, pem)
        };
        let ca_der = CertificateDer::from(pem_to_der(&ca_pem)?);

        let mut pki = Pki {
            dir: dir.to_path_buf(),
            ca_pem,
            ca_der,
            server_chain: vec![],
            server_key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(Vec::new())),
            tokens: HashMap::new(),
            ca_cert,
            ca_key,
        };

        // Serving certificate: always re-issued (cheap), like kube-apiserver's
        // apiserver.crt with the usual in-cluster names.
        let mut sp = CertificateParams::new(vec![
            "localhost".to_string(),
            "kubernetes".to_string(),
            "kubernetes.default".to_string(),
            "kubernetes.default.svc".to_string(),
            "kubernetes.default.svc.cluster.local".to_string(),
            "127.0.0.1".to_string(),
            "::1".to_string(),
            "10.96.0.1".to_string(),
        ])
        .map_err(e("server params"))?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "kube-apiserver");
        sp.distinguished_name = dn;
        sp.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        sp.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        sp.use_authority_key_identifier_extension = true;
        validity(&mut sp, 365);
        let skey = KeyPair::generate().map_err(e("server key"))?;
        let scert = sp
            .signed_by(&skey, &pki.ca_cert, &pki.ca_key)
            .map_err(e("server cert"))?;
        write(&dir.join("apiserver.crt"), &scert.pem(), false)?;
        write(&dir.join("apiserver.key"), &skey.serialize_pem(), true)?;
        pki.server_chain = vec![scert.der().clone()];
        pki.server_key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(skey.serialize_der()));

        pki.issue_client_if_missing("admin", "admin", &["system:masters"])?;
        // kubeadm's client certificate of the apiserver toward kubelets
        // (the default --kubelet-client-certificate/--kubelet-client-key).
        pki.issue_client_if_missing(
            "apiserver-kubelet-client",
            "kube-apiserver-kubelet-client",
            &["kubeadm:cluster-admins"],
        )?;
        for n in node_names {
            pki.issue_client_if_missing(
                &format!("kubelet-{}", n),
                &format!("system:node:{}", n),
                &["system:nodes"],
            )?;
        }
        pki.load_or_create_tokens(node_names)?;
        Ok(pki)
    }

    /// Issues `<file>.crt`/`<file>.key` for CN=`cn`, O=`orgs` unless present.
    pub fn issue_client_if_missing(&self, file: &str, cn: &str, orgs: &[&str]) -> Res<()> {
        let (crt, key) = (
            self.dir.join(format!("{}.crt", file)),
            self.dir.join(format!("{}.key", file)),
        );
        if crt.exists() && key.exists() {
            return Ok(());
        }
        let (c, k) = self.issue_client(cn, orgs, 365)?;
        write(&crt, &c, false)?;
        write(&key, &k, true)?;
        Ok(())
    }

    /// A client certificate (PEM cert, PEM PKCS#8 key) signed by the CA.
    pub fn issue_client(&self, cn: &str, orgs: &[&str], days: i64) -> Res<(String, String)> {
        let mut p = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        for o in orgs {
            dn.push(DnType::OrganizationName, *o);
        }
        dn.push(DnType::CommonName, cn);
        p.distinguished_name = dn;
        p.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        p.use_authority_key_identifier_extension = true;
        validity(&mut p, days);
        let key = KeyPair::generate().map_err(e("client key"))?;
        let cert = p
            .signed_by(&key, &self.ca_cert, &self.ca_key)
            .map_err(e("client cert"))?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// tokens.csv in kube-apiserver's --token-auth-file format:
    /// `token,user,uid,"group1,group2"`.
    fn load_or_create_tokens(&mut self, node_names: &[String]) -> Res<()> {
        let path = self.dir.join("tokens.csv");
        let mut lines: Vec<String> = fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(String::from)
            .collect();
        let parse = |lines: &Vec<String>| -> HashMap<String, User> {
            let mut m = HashMap::new();
            for l in lines {
                let mut it = l.splitn(4, ',');
                let (tok, user, _uid, groups) =
                    (it.next(), it.next(), it.next(), it.next().unwrap_or(""));
                if let (Some(tok), Some(user)) = (tok, user) {
                    let groups = groups
                        .trim_matches('"')
                        .split(',')
                        .filter(|g| !g.is_empty())
                        .map(String::from)
                        .collect();
                    m.insert(
                        tok.to_string(),
                        User {
                            name: user.to_string(),
                            groups,
                        },
                    );
                }
            }
            m
        };
        let existing = parse(&lines);
        let has_user = |u: &str| existing.values().any(|x| x.name == u);
        if !has_user("admin") {
            lines.push(format!(
                "{},admin,admin,\"system:masters\"",
                crate::util::random_token()
            ));
        }
        for n in node_names {
            let u = format!("system:node:{}", n);
            if !has_user(&u) {
                lines.push(format!(
                    "{},{},{},\"system:nodes\"",
                    crate::util::random_token(),
                    u,
                    u
                ));
            }
        }
        write(&path, &(lines.join("\n") + "\n"), true)?;
        self.tokens = parse(&lines);
        Ok(())
    }

    /// Issues a new bearer token for `user` in `groups` (appended to
    /// tokens.csv, so it survives a restart with the same directory).
    pub fn add_token(&mut self, user: &str, groups: &[String]) -> Res<String> {
        if user.contains(',')
            || user.contains('\n')
            || groups
                .iter()
                .any(|g| g.contains(',') || g.contains('"') || g.contains('\n'))
        {
            return Err("user and group names must not contain commas, quotes or newlines".into());
        }
        let token = crate::util::random_token();
        let path = self.dir.join("tokens.csv");
        let mut csv = fs::read_to_string(&path).unwrap_or_default();
        if !csv.is_empty() && !csv.ends_with('\n') {
            csv.push('\n');
        }
        csv.push_str(&format!(
            "{},{},{},\"{}\"\n",
            token,
            user,
            user,
            groups.join(",")
        ));
        write(&path, &csv, true)?;
        self.tokens.insert(
            token.clone(),
            User {
                name: user.to_string(),
                groups: groups.to_vec(),
            },
        );
        Ok(token)
    }

    pub fn token_for(&self, user: &str) -> Option<String> {
        self.tokens
            .iter()
            .find(|(_, u)| u.name == user)
            .map(|(t, _)| t.clone())
    }

    /// Writes the kubeconfigs (needs the port, so called after binding).
    pub fn write_kubeconfigs(&self, server: &str, node_names: &[String]) -> Res<()> {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
        let read = |f: &str| fs::read_to_string(self.dir.join(f)).map_err(e(f));
        let ca_path = self.dir.join("ca.crt");
        let emit = |file: &str, user: &str, creds: String| -> Res<()> {
            let ca = format!("    certificate-authority-data: {}\n", b64(&self.ca_pem));
            let ca_file = format!("    certificate-authority: {}\n", ca_path.display());
            let cluster = if file.ends_with("-files.kubeconfig") {
                ca_file
            } else {
                ca
            };
            let text = format!(
                "apiVersion: v1\nclusters:\n- cluster:\n{cluster}    server: {server}\n  name: kubernetes\ncontexts:\n- context:\n    cluster: kubernetes\n    user: {user}\n  name: {user}@kubernetes\ncurrent-context: {user}@kubernetes\nkind: Config\npreferences: {{}}\nusers:\n- name: {user}\n  user:\n{creds}"
            );
            write(&self.dir.join(file), &text, true)
        };
        let inline = |base: &str| -> Res<String> {
            Ok(format!(
                "    client-certificate-data: {}\n    client-key-data: {}\n",
                b64(&read(&format!("{}.crt", base))?),
                b64(&read(&format!("{}.key", base))?)
            ))
        };
        let files = |base: &str| {
            format!(
                "    client-certificate: {}\n    client-key: {}\n",
                self.dir.join(format!("{}.crt", base)).display(),
                self.dir.join(format!("{}.key", base)).display()
            )
        };
        emit("admin.kubeconfig", "kubernetes-admin", inline("admin")?)?;
        if let Some(t) = self.token_for("admin") {
            write(&self.dir.join("admin-token"), &t, true)?;
            emit(
                "admin-token.kubeconfig",
                "kubernetes-admin",
                format!("    token: {}\n", t),
            )?;
        }
        for n in node_names {
            let base = format!("kubelet-{}", n);
            let user = format!("system:node:{}", n);
            emit(&format!("{}.kubeconfig", base), &user, inline(&base)?)?;
            emit(&format!("{}-files.kubeconfig", base), &user, files(&base))?;
            if let Some(t) = self.token_for(&user) {
                write(&self.dir.join(format!("{}-token", base)), &t, true)?;
                emit(
                    &format!("{}-token.kubeconfig", base),
                    &user,
                    format!("    token: {}\n", t),
                )?;
            }
        }
        Ok(())
    }
}

// ---- a very small DER reader, enough to pull CN and O out of a certificate subject ----

pub(crate) fn tlv(buf: &[u8], pos: usize) -> Option<(u8, usize, usize)> {
    let tag = *buf.get(pos)?;
    let l0 = *buf.get(pos + 1)? as usize;
    let (len, hdr) = if l0 < 0x80 {
        (l0, 2)
    } else {
        let n = l0 & 0x7f;
        if n == 0 || n > 4 {
            return None;
        }
        let mut len = 0usize;
        for i in 0..n {
            len = (len << 8) | *buf.get(pos + 2 + i)? as usize;
        }
        (len, 2 + n)
    };
    let start = pos + hdr;
    let end = start.checked_add(len)?;
    if end > buf.len() {
        return None;
    }
    Some((tag, start, end))
}

/// (CN, [O...]) of the subject of a DER certificate.
pub fn subject_identity(der: &[u8]) -> Option<(String, Vec<String>)> {
    let (_, c0, _) = tlv(der, 0)?; // Certificate
    let (_, t0, _) = tlv(der, c0)?; // TBSCertificate
    let mut pos = t0;
    let (tag, _, end) = tlv(der, pos)?;
    if tag == 0xa0 {
        pos = end; // [0] version
    }
    // serialNumber, signature, issuer, validity, subject
    for _ in 0..4 {
        pos = tlv(der, pos)?.2;
    }
    let (_, s0, s1) = tlv(der, pos)?;
    name_identity(der, s0, s1)
}

/// (CN, [O...]) of the DER Name whose contents are `der[s0..s1]`.
pub(crate) fn name_identity(der: &[u8], s0: usize, s1: usize) -> Option<(String, Vec<String>)> {
    let (mut cn, mut orgs) = (String::new(), vec![]);
    let mut p = s0;
    while p < s1 {
        let (_, r0, r1) = tlv(der, p)?; // RDN SET
        let mut q = r0;
        while q < r1 {
            let (_, a0, a1) = tlv(der, q)?; // AttributeTypeAndValue
            let (_, o0, o1) = tlv(der, a0)?;
            let (_, v0, v1) = tlv(der, o1)?;
            let val = String::from_utf8_lossy(&der[v0..v1]).into_owned();
            match &der[o0..o1] {
                [0x55, 0x04, 0x03] => cn = val,
                [0x55, 0x04, 0x0a] => orgs.push(val),
                _ => {}
            }
            q = a1;
        }
        p = r1;
    }
    Some((cn, orgs))
}

impl Pki {
    /// Signs `params` for `key` with the cluster CA (the csrsigning
    /// controller's signer, which uses the cluster CA too); PEM out.
    pub fn sign_with_ca(
        &self,
        params: CertificateParams,
        key: &impl rcgen::PublicKeyData,
    ) -> Res<String> {
        let cert = params
            .signed_by(key, &self.ca_cert, &self.ca_key)
            .map_err(e("sign"))?;
        Ok(cert.pem())
    }

    /// Issues credentials and kubeconfigs for a node added at run time.
    pub fn add_node(&mut self, name: &str, server: &str) -> Res<()> {
        if !crate::kinds::is_dns_subdomain(name) {
            return Err(format!("invalid node name {:?}", name));
        }
        let names = vec![name.to_string()];
        self.issue_client_if_missing(
            &format!("kubelet-{}", name),
            &format!("system:node:{}", name),
            &["system:nodes"],
        )?;
        self.load_or_create_tokens(&names)?;
        self.write_kubeconfigs(server, &names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issues_and_parses_identity() {
        let dir = std::env::temp_dir().join(format!("apid-pki-{}", crate::util::random_token()));
        let pki = Pki::load_or_create(&dir, &["n1".to_string()]).unwrap();
        let (c, _k) = pki
            .issue_client("system:node:n1", &["system:nodes"], 1)
            .unwrap();
        let der = pem_to_der(&c).unwrap();
        let (cn, orgs) = subject_identity(&der).unwrap();
        assert_eq!(cn, "system:node:n1");
        assert_eq!(orgs, vec!["system:nodes".to_string()]);
        // Reload keeps the CA and the tokens.
        let again = Pki::load_or_create(&dir, &["n1".to_string()]).unwrap();
        assert_eq!(again.ca_pem, pki.ca_pem);
        assert_eq!(again.token_for("admin"), pki.token_for("admin"));
        assert!(subject_identity(b"\x30\x82\xff").is_none());
        let _ = fs::remove_dir_all(&dir);
    }
}
