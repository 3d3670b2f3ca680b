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

#[path = "kubelet_api/auth.rs"]
mod auth;
#[path = "kubelet_api/bad_input.rs"]
mod bad_input;
#[path = "kubelet_api/clients.rs"]
mod clients;
mod common;
#[path = "kubelet_api/logs.rs"]
mod logs;
#[path = "kubelet_api/metrics.rs"]
mod metrics;
#[path = "kubelet_api/node.rs"]
mod node;
#[path = "kubelet_api/read_only.rs"]
mod read_only;
#[path = "kubelet_api/streaming.rs"]
mod streaming;
#[path = "kubelet_api/ws.rs"]
mod ws;

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

use clients::*;
use common::cluster::*;
use common::*;
// Explicit: common::cluster has an api_pod too, which this one shadows.
use node::{api_pod, Node};
use ws::*;
