//! The object managers against a fake apiserver on 127.0.0.1.

mod strategies;
mod watch;

use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::api::core::v1::Pod;
use rkubelet_util::lock;
use serde_json::json;

pub use crate::client::testing::client;

/// Tests that start `object-watches` threads run one at a time, so thread
/// counts are exact.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    lock(&LOCK)
}

/// A pod in `ns` whose secret volumes name `secrets`.
pub fn pod(ns: &str, name: &str, uid: &str, secrets: &[&str]) -> Pod {
    let volumes: Vec<_> = secrets
        .iter()
        .map(|s| json!({"name": format!("v-{s}"), "secret": {"secretName": s}}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns, "uid": uid},
        "spec": {"containers": [{"name": "c", "image": "i"}], "volumes": volumes},
    }))
    .expect("pod")
}

/// Threads of this process named `name`.
pub fn threads_named(name: &str) -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|t| t.ok())
        .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == name))
        .count()
}

pub use crate::util::testing::eventually;

pub type Shared<T> = Arc<Mutex<T>>;
