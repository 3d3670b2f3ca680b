//! The kubelet API server (the 10250 HTTPS port and the read-only port),
//! end to end: the real rkubelet binary in cluster mode against the
//! kube-apiserver double (tests/apiserver, for the node, the pods and the
//! TokenReview/SubjectAccessReview webhooks) and a private, real containerd
//! per test (tests/harness/containerd.sh).
//!
//! Each test has its own containerd, bridge rke<N>, subnet 10.88.<100+N>.0/24,
//! healthz port 20000+N, API server port 21000+N, kubelet port 22000+N and
//! read-only port 23000+N, with N in 41..=50 (e2e.rs uses 1..=12, cluster.rs
//! 20..=40):
//!
//!     cargo build --release
//!     cargo test --release --test kubelet_api -- --test-threads=2
//!
//! The kubelet runs with anonymous auth off, webhook authn (TokenReview) on,
//! x509 client certs verified against the double's CA and Webhook authz
//! (SubjectAccessReview); the double allows every user but those on its deny
//! list and records each SubjectAccessReview it answers.
//!
//! The tests sit in tests/kubelet_api/ by concern: `auth`, `logs`,
//! `metrics` (with /stats/summary), `streaming` (exec, port-forward),
//! `read_only` and `bad_input`; `node`, `clients` and `ws` are their
//! fixtures. One test binary: cargo does not build files in a
//! subdirectory of tests/ as targets of their own.

mod common;

/// Named as their directory, so that `mod` finds the files in it.
mod kubelet_api {
    use super::*;

    mod auth;
    mod bad_input;
    pub(crate) mod clients;
    mod logs;
    mod metrics;
    pub(crate) mod node;
    mod read_only;
    mod streaming;
    pub(crate) mod ws;
}

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConnection, DigitallySignedStruct, SignatureScheme, StreamOwned};
use serde_json::{json, Value};

use common::cluster::*;
use common::*;
use kubelet_api::clients::*;
// Explicit: common::cluster has an api_pod too, which this one shadows.
use kubelet_api::node::{api_pod, Node};
use kubelet_api::ws::*;
