//! Tests for the pod sources and the PodConfig merger.
//!
//! This file holds the shared helpers (manifests, a temp dir, receiving
//! from a running source); the tests sit by concern in `defaults` (static
//! pod naming, UIDs, defaulting), `validation` (rejected manifests and
//! directories), `file_source` and `http_source` (the source threads) and
//! `merger` (PodConfig merging the sources).

use crate::podutil::PodExt;
use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, Sender};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use tempfile::TempDir;

use super::common::*;
use super::file::{extract_from_dir, extract_from_file};
use super::*;
use crate::types::*;
use crate::util::testing::eventually_within;

mod defaults;
mod file_source;
mod http_source;
mod merger;
mod validation;

const NODE: &str = "Node-1";

const GOOD: &str = "apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: nginx
    image: nginx:1.25
    ports:
    - containerPort: 80
";

fn manifest(name: &str, image: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: c\n    image: {image}\n"
    )
}

/// Writes `content` to `name` under `dir`; the file's path.
fn write_file(dir: &TempDir, name: &str, content: &str) -> PathBuf {
    let path = dir.path().join(name);
    fs::write(&path, content).unwrap();
    path
}

fn decode_file(path: &str, data: &str, node: &str) -> Result<Pod, crate::config::ManifestError> {
    decode_single_pod(data.as_bytes(), ManifestOrigin::File(path), node)
}

fn spec(pod: &Pod) -> &PodSpec {
    pod.spec.as_ref().unwrap()
}

// Shared by the file and http source tests and the merger's end-to-end test.

fn recv_within(rx: &Receiver<PodUpdate>, within: Duration) -> PodUpdate {
    rx.recv_timeout(within).expect("expected an update in time")
}

/// Receives until a snapshot satisfying `want`, or fails after `within`.
fn recv_until(
    rx: &Receiver<PodUpdate>,
    within: Duration,
    want: impl Fn(&PodUpdate) -> bool,
) -> PodUpdate {
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let update = rx
            .recv_timeout(left)
            .expect("expected a matching update in time");
        if want(&update) {
            return update;
        }
    }
}

fn names(update: &PodUpdate) -> Vec<String> {
    let mut n: Vec<String> = update.pods.iter().map(|p| p.name().to_string()).collect();
    n.sort();
    n
}

struct Running {
    handle: crate::util::worker::Worker,
    stop: Sender<()>,
}

impl Running {
    fn stop(self) {
        self.stop.send(()).unwrap();
        eventually_within("the source thread to stop", Duration::from_secs(2), || {
            self.handle.is_finished()
        });
        self.handle.join().unwrap();
    }
}

fn start_file(path: &Path, period: Duration) -> (Running, Receiver<PodUpdate>) {
    let (tx, rx) = bounded(16);
    let (stop, shutdown) = bounded(1);
    let handle = start_file_source(path, NODE, period, tx, shutdown).unwrap();
    (Running { handle, stop }, rx)
}
