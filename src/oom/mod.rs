//! The OOM watcher (upstream `pkg/kubelet/oom/oom_watcher_linux.go`, fed
//! by cadvisor's `utils/oomparser`): kernel OOM kills become node events.
//! A kill whose victim cgroup (the one whose limit was hit) is the root
//! `/` is a system OOM: a `SystemOOM` Warning on the node. Container OOMs
//! get no event here (upstream neither); their containers report
//! `OOMKilled` through the runtime, and each kill is counted per cgroup
//! for `container_oom_events_total`.
//!
//! Source: /dev/kmsg (v1 and v2), read from its end at start so old OOMs
//! are not replayed (cadvisor's SeekEnd). When kmsg cannot be read and the
//! host is v2, kubepods' `memory.events` stands in (system OOM kills of pod
//! processes, without the victim's name); otherwise the watcher is off,
//! said once in the log.

mod kmsg;
mod parser;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crossbeam_channel::RecvTimeoutError;
use rkubelet_util::lock;
use rkubelet_util::shutdown::Shutdown;

use crate::events::{EventRecorder, EventType};
use crate::util::worker::{self, ShutdownStage, Worker};
pub use parser::OomInstance;
use parser::{parse_memory_events, system_oom_kills, MemoryEvents, OomParser};

/// Upstream's event reason and the victim cgroup of a system OOM.
pub const SYSTEM_OOM_EVENT: &str = "SystemOOM";
const RECORD_EVENT_CONTAINER_NAME: &str = "/";
/// The longest one wait for /dev/kmsg lasts. A record or shutdown (its
/// descriptor is in the same poll) ends it at once, so the bound only
/// keeps the wait finite; at 1 s it cost about 3 ms a minute.
const IDLE_WAIT: Duration = Duration::from_secs(60);
/// How often memory.events is read when it is the source.
const MEMORY_EVENTS_PERIOD: Duration = Duration::from_secs(1);
/// At most this many events for one burst of memory.events kills.
const MAX_EVENTS_PER_READ: u64 = 10;
/// At most this many cgroups keep an OOM count (oldest kept; a bound,
/// not a policy: pods come and go far slower).
const MAX_COUNTED_CGROUPS: usize = 4096;

/// Where OOM kills are read from.
trait OomSource: Send {
    /// The kills since the last call, waiting at most about
    /// [`IDLE_WAIT`] (returns early on shutdown). Err: the source is
    /// broken for good.
    fn next(&mut self, stop: &Shutdown) -> Result<Vec<OomInstance>, String>;
}

/// /dev/kmsg through the cadvisor parser.
struct KmsgSource {
    kmsg: kmsg::Kmsg,
    parser: OomParser,
}

impl OomSource for KmsgSource {
    fn next(&mut self, stop: &Shutdown) -> Result<Vec<OomInstance>, String> {
        let records = self
            .kmsg
            .read(IDLE_WAIT, &stop.fd)
            .map_err(|e| format!("read /dev/kmsg: {e}"))?;
        Ok(records
            .iter()
            .filter_map(|r| parser::kmsg_message(r))
            .filter_map(|m| self.parser.feed(m))
            .collect())
    }
}

/// v2 without kmsg: kubepods' memory.events `oom_kill` counter.
struct MemoryEventsSource {
    path: PathBuf,
    period: Duration,
    last: Option<MemoryEvents>,
}

impl OomSource for MemoryEventsSource {
    fn next(&mut self, stop: &Shutdown) -> Result<Vec<OomInstance>, String> {
        if let Err(RecvTimeoutError::Disconnected) = stop.channel.recv_timeout(self.period) {
            return Ok(Vec::new());
        }
        let text = std::fs::read_to_string(&self.path)
            .map_err(|e| format!("read {}: {e}", self.path.display()))?;
        let now = parse_memory_events(&text)
            .ok_or_else(|| format!("{}: no oom/oom_kill counters", self.path.display()))?;
        let kills = self.last.map_or(0, |prev| system_oom_kills(prev, now));
        self.last = Some(now);
        Ok((0..kills.min(MAX_EVENTS_PER_READ))
            .map(|_| OomInstance {
                container_name: RECORD_EVENT_CONTAINER_NAME.into(),
                victim_container_name: RECORD_EVENT_CONTAINER_NAME.into(),
                ..Default::default()
            })
            .collect())
    }
}

/// Watches one source and records what it finds.
pub struct Watcher {
    source: Box<dyn OomSource>,
    recorder: Arc<dyn EventRecorder>,
}

impl Watcher {
    /// The host's watcher: kmsg, or (v2) `kubepods_v2`'s memory.events;
    /// None, logged once, when neither can be read.
    pub fn new(recorder: Arc<dyn EventRecorder>, kubepods_v2: Option<PathBuf>) -> Option<Watcher> {
        let source: Box<dyn OomSource> = match kmsg::Kmsg::open_at_end() {
            Ok(kmsg) => {
                log::info!("OOM watcher: reading /dev/kmsg from its end");
                Box::new(KmsgSource {
                    kmsg,
                    parser: OomParser::default(),
                })
            }
            Err(e) => {
                let Some(dir) = kubepods_v2 else {
                    log::warn!("OOM watcher disabled: open /dev/kmsg: {e}");
                    return None;
                };
                let path = dir.join("memory.events");
                log::warn!(
                    "open /dev/kmsg: {e}; system OOMs are taken from {} (no victim names)",
                    path.display()
                );
                Box::new(MemoryEventsSource {
                    path,
                    period: MEMORY_EVENTS_PERIOD,
                    last: None,
                })
            }
        };
        Some(Watcher { source, recorder })
    }

    /// Until `stop` closes. A broken source is reported once; the thread
    /// then only waits for shutdown.
    pub fn run(&mut self, stop: &Shutdown) {
        loop {
            if stop.came() {
                return;
            }
            match self.source.next(stop) {
                Ok(ooms) => ooms.iter().for_each(|o| self.handle(o)),
                Err(e) => {
                    log::warn!("OOM watcher disabled: {e}");
                    let _ = stop.channel.recv();
                    return;
                }
            }
        }
    }

    /// Counts the kill, and records a system OOM on the node (upstream
    /// realWatcher.Start).
    fn handle(&self, oom: &OomInstance) {
        count(&oom.container_name);
        if oom.victim_container_name != RECORD_EVENT_CONTAINER_NAME {
            log::info!(
                "OOM kill in {}: {} (pid {}), limit of {}",
                oom.container_name,
                oom.process_name,
                oom.pid,
                oom.victim_container_name
            );
            return;
        }
        log::info!("got system OOM event: {oom:?}");
        self.recorder.node_event(
            EventType::Warning,
            SYSTEM_OOM_EVENT,
            &system_oom_message(oom),
        );
    }
}

/// Upstream's wording: the victim named only when both name and pid are known.
pub fn system_oom_message(oom: &OomInstance) -> String {
    let msg = "System OOM encountered";
    if oom.process_name.is_empty() || oom.pid == 0 {
        return msg.to_string();
    }
    format!(
        "{msg}, victim process: {}, pid: {}",
        oom.process_name, oom.pid
    )
}

/// Starts the `oom` thread when there is a source to watch.
pub fn start(
    recorder: Arc<dyn EventRecorder>,
    kubepods_v2: Option<PathBuf>,
    shutdown: &Shutdown,
) -> std::io::Result<Option<Worker>> {
    let Some(mut watcher) = Watcher::new(recorder, kubepods_v2) else {
        return Ok(None);
    };
    let stop = shutdown.clone();
    worker::spawn_supervised(
        "oom",
        ShutdownStage::Workers,
        shutdown.channel.clone(),
        move |_| watcher.run(&stop),
    )
    .map(Some)
}

fn counts() -> &'static Mutex<HashMap<String, u64>> {
    static COUNTS: OnceLock<Mutex<HashMap<String, u64>>> = OnceLock::new();
    COUNTS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// One more OOM kill in `cgroup` (cadvisor's per-container oomEvents).
fn count(cgroup: &str) {
    let mut m = lock(counts());
    if m.len() >= MAX_COUNTED_CGROUPS && !m.contains_key(cgroup) {
        return;
    }
    *m.entry(cgroup.to_string()).or_insert(0) += 1;
}

/// OOM kills seen in the cgroup of container `id` (its cgroup's last
/// element names it: `<id>` with cgroupfs, `cri-containerd-<id>.scope`
/// with systemd). 0 when none.
pub fn container_oom_events(id: &str) -> u64 {
    if id.is_empty() {
        return 0;
    }
    let m = lock(counts());
    m.iter()
        .filter(|(cg, _)| cg.rsplit('/').next().is_some_and(|last| last.contains(id)))
        .map(|(_, n)| n)
        .sum()
}
