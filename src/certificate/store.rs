//! The certificate file store (client-go `util/certificate`'s
//! `NewFileStore("kubelet-client", certDir, certDir, "", "")`): each
//! certificate with its key in `<dir>/kubelet-client-<YYYY-MM-DD-HH-MM-SS>.pem`
//! (mode 0600, certificate first), and `kubelet-client-current.pem` a symlink
//! to the newest, swapped atomically through `kubelet-client-updated.pem`.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::{CertError, StoredPairError, StoredPairProblem};

use super::x509::Certificate;
use crate::client::tls::{parse_certs, parse_key, CertSlot, ClientIdentity};

pub const PAIR_NAME: &str = "kubelet-client";
/// The serving pair's name (upstream's serving certificate store).
pub const SERVER_PAIR_NAME: &str = "kubelet-server";

pub struct FileStore {
    dir: PathBuf,
    pair: &'static str,
}

impl FileStore {
    /// The client certificate's store.
    pub fn new(dir: &Path) -> FileStore {
        FileStore::with_pair(dir, PAIR_NAME)
    }

    pub fn with_pair(dir: &Path, pair: &'static str) -> FileStore {
        FileStore {
            dir: dir.to_path_buf(),
            pair,
        }
    }

    /// Puts the current pair in `slot` when it parses, has not expired at
    /// `now` and its key matches (upstream's certificate manager starts
    /// from store.Current()); else says why not.
    pub fn load_current_into(&self, slot: &CertSlot, now: i64) -> Result<(), StoredPairError> {
        let path = self.current_path();
        let fail = |problem| StoredPairError {
            path: path.clone(),
            problem,
        };
        let pem = fs::read(&path).map_err(|e| fail(StoredPairProblem::Read(e)))?;
        let certs = parse_certs(&pem).map_err(|e| fail(StoredPairProblem::Pem(e)))?;
        let leaf = certs
            .first()
            .ok_or_else(|| fail(StoredPairProblem::NoCertificate))?;
        let not_after = Certificate::from_der(leaf)
            .map_err(|e| fail(StoredPairProblem::X509(e)))?
            .not_after();
        if not_after <= now {
            return Err(fail(StoredPairProblem::Expired));
        }
        let key = parse_key(&pem).map_err(|e| fail(StoredPairProblem::Pem(e)))?;
        slot.set(ClientIdentity { certs, key })
            .map_err(|e| fail(StoredPairProblem::KeyMismatch(e)))
    }

    /// `<dir>/kubelet-client-current.pem`, what the kubeconfig points at.
    pub fn current_path(&self) -> PathBuf {
        self.dir.join(format!("{}-current.pem", self.pair))
    }

    /// The key PEM of the current pair while its certificate is valid at
    /// `now`. An expired pair's key is not reused: its CSR name would find
    /// the old, already issued CSR if that one is still there.
    pub fn current_key_pem(&self, now: i64) -> Option<String> {
        let text = fs::read_to_string(self.current_path()).ok()?;
        let certs = crate::client::tls::parse_certs(text.as_bytes()).ok()?;
        let valid = Certificate::from_der(certs.first()?).ok()?.not_after() >= now;
        let start = text.find("-----BEGIN PRIVATE KEY-----")?;
        valid.then(|| text[start..].to_string())
    }

    /// Writes a new pair stamped with `now` (Unix seconds, UTC) and points
    /// the current symlink at it. Returns the new file.
    pub fn update(&self, cert_pem: &str, key_pem: &str, now: i64) -> Result<PathBuf, CertError> {
        fs::create_dir_all(&self.dir).map_err(CertError::io(format!(
            "create cert directory {}",
            self.dir.display()
        )))?;
        let file = self
            .dir
            .join(format!("{}-{}.pem", self.pair, timestamp(now)));
        write_private(&file, &format!("{}\n{}", cert_pem.trim_end(), key_pem))?;
        let updated = self.dir.join(format!("{}-updated.pem", self.pair));
        let _ = fs::remove_file(&updated);
        std::os::unix::fs::symlink(&file, &updated)
            .map_err(CertError::io(format!("symlink {}", updated.display())))?;
        let current = self.current_path();
        fs::rename(&updated, &current).map_err(CertError::io(format!(
            "rename {} to {}",
            updated.display(),
            current.display()
        )))?;
        Ok(file)
    }
}

/// Creates or truncates `path` with mode 0600 and writes `text`.
pub fn write_private(path: &Path, text: &str) -> Result<(), CertError> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(CertError::io(format!("open {}", path.display())))?;
    f.write_all(text.as_bytes())
        .map_err(CertError::io(format!("write {}", path.display())))
}

/// Go's `2006-01-02-15-04-05` in UTC, as the file store names pairs.
fn timestamp(secs: i64) -> String {
    let (y, mo, d) = crate::volume::util::atomic_writer::civil_from_days(secs.div_euclid(86_400));
    let rem = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{mo:02}-{d:02}-{:02}-{:02}-{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn writes_stamped_pair_and_current_symlink() {
        let tmp = tempfile::TempDir::with_prefix("rkubelet-store-update-").unwrap();
        let dir = tmp.path();
        let store = FileStore::new(&dir.join("pki"));
        let kp = rcgen::KeyPair::generate().expect("key");
        let mut p = rcgen::CertificateParams::default();
        p.not_after = rcgen::date_time_ymd(2040, 1, 1);
        let cert = &p.self_signed(&kp).expect("cert").pem();
        let key = &kp.serialize_pem();
        // 2026-11-24 03:04:05 UTC
        let file = store.update(cert, key, 1_795_489_445).expect("update");
        assert_eq!(file, dir.join("pki/kubelet-client-2026-11-24-03-04-05.pem"));
        let mode = fs::metadata(&file).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(fs::read_link(store.current_path()).expect("link"), file);
        let text = fs::read_to_string(store.current_path()).expect("read");
        assert!(text.starts_with("-----BEGIN CERTIFICATE-----"));
        // 2030: the key is reused; 2041: the certificate expired, it is not.
        assert_eq!(
            store.current_key_pem(1_893_456_000).as_deref(),
            Some(key.as_str())
        );
        assert_eq!(store.current_key_pem(2_240_611_200), None);
        // A second pair moves the link; the first file stays.
        let second = store.update(cert, key, 1_795_489_446).expect("update");
        assert_eq!(fs::read_link(store.current_path()).expect("link"), second);
        assert!(file.exists());
    }
}
