//! Test-only fault injection, compiled in only with the `fault-injection`
//! feature that `make test` enables; a release build has none of it.
//!
//! A pod annotated `rkubelet.test/panic-syncs: "<n>"` makes its first `n`
//! sync steps panic inside the pod worker, so the e2e suite can check that
//! a panic costs only that pod a back-off.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use k8s_openapi::api::core::v1::Pod;
use rkubelet_util::lock;

use crate::podutil::PodExt;

pub const PANIC_SYNCS: &str = "rkubelet.test/panic-syncs";

/// Panics while the pod has injected panics left.
pub fn panic_sync_if_asked(pod: Option<&Pod>) {
    let Some(pod) = pod else { return };
    let Some(wanted) = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PANIC_SYNCS))
        .and_then(|v| v.parse::<u32>().ok())
    else {
        return;
    };
    static DONE: OnceLock<Mutex<HashMap<String, u32>>> = OnceLock::new();
    let mut done = lock(DONE.get_or_init(Mutex::default));
    let n = done.entry(pod.uid().to_string()).or_insert(0);
    if *n < wanted {
        *n += 1;
        let nth = *n;
        drop(done);
        panic!("injected panic {nth} of {wanted} ({PANIC_SYNCS})");
    }
}
