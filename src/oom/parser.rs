//! Kernel OOM reports to [`OomInstance`]s (cadvisor `utils/oomparser`):
//! an `invoked oom-killer:` line opens a report; the `oom-kill:` summary
//! line (kernels ≥ 5.0) or the `Killed process` line closes it. The
//! `Task in ... killed as a result of limit of ...` line of older kernels
//! names the cgroups on the way.

/// One OOM kill (cadvisor OomInstance).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OomInstance {
    /// The killed process; 0 when the report did not name it.
    pub pid: u32,
    pub process_name: String,
    /// The cgroup the killed task was in (`task_memcg`).
    pub container_name: String,
    /// The cgroup whose limit was hit (`oom_memcg`); `/` for a system OOM.
    pub victim_container_name: String,
    /// CONSTRAINT_NONE, CONSTRAINT_MEMCG, ... when the kernel said.
    pub constraint: String,
}

const FIRST_LINE: &str = "invoked oom-killer:";
const SUMMARY: &str = "oom-kill:constraint=";
const LEGACY_TASK: &str = "Task in ";
const LEGACY_LIMIT: &str = " killed as a result of limit of ";
const KILLED: &str = "Killed process ";

/// Feeds kernel messages one at a time; yields an instance when a report
/// is complete (cadvisor StreamOoms).
#[derive(Debug, Default)]
pub struct OomParser {
    current: Option<OomInstance>,
}

impl OomParser {
    pub fn feed(&mut self, message: &str) -> Option<OomInstance> {
        let Some(cur) = self.current.as_mut() else {
            if message.contains(FIRST_LINE) {
                self.current = Some(OomInstance {
                    container_name: "/".into(),
                    victim_container_name: "/".into(),
                    ..Default::default()
                });
            }
            return None;
        };
        let finished = summary_line(message, cur) || killed_line(message, cur);
        if !finished {
            legacy_line(message, cur);
            return None;
        }
        self.current.take()
    }
}

/// `oom-kill:constraint=C,nodemask=N,cpuset=S,mems_allowed=M,oom_memcg=V,task_memcg=T,task=NAME,pid=P,uid=U`.
/// A global OOM prints `global_oom` instead of `oom_memcg=`, so this does
/// not match and the `Killed process` line closes the report, as with
/// cadvisor's regexp. Later keys are found from the right, as its greedy
/// groups do.
fn summary_line(message: &str, cur: &mut OomInstance) -> bool {
    let Some(start) = message.find(SUMMARY) else {
        return false;
    };
    let rest = &message[start + SUMMARY.len()..];
    let parsed = (|| {
        let uid_at = rest.rfind(",uid=")?;
        let pid_at = rest[..uid_at].rfind(",pid=")?;
        let task_at = rest[..pid_at].rfind(",task=")?;
        let memcg_at = rest[..task_at].rfind(",task_memcg=")?;
        let victim_at = rest[..memcg_at].rfind(",oom_memcg=")?;
        let constraint_end = rest[..victim_at].find(",nodemask=")?;
        let pid = rest[pid_at + 5..uid_at].parse::<u32>().ok()?;
        Some(OomInstance {
            pid,
            process_name: rest[task_at + 6..pid_at].to_string(),
            container_name: rest[memcg_at + 12..task_at].to_string(),
            victim_container_name: rest[victim_at + 11..memcg_at].to_string(),
            constraint: rest[..constraint_end].to_string(),
        })
    })();
    match parsed {
        Some(p) => {
            *cur = p;
            true
        }
        None => false,
    }
}

/// `Killed process 1234 (name) total-vm:...`.
fn killed_line(message: &str, cur: &mut OomInstance) -> bool {
    let Some(start) = message.find(KILLED) else {
        return false;
    };
    let rest = &message[start + KILLED.len()..];
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let Ok(pid) = rest[..digits].parse::<u32>() else {
        return false;
    };
    let Some(named) = rest[digits..].strip_prefix(" (") else {
        return false;
    };
    // Greedy, as `\((.+)\)`: up to the last `)`.
    let Some(end) = named.rfind(')').filter(|e| *e > 0) else {
        return false;
    };
    cur.pid = pid;
    cur.process_name = named[..end].to_string();
    true
}

/// `Task in /a killed as a result of limit of /b` (kernels < 5.0).
fn legacy_line(message: &str, cur: &mut OomInstance) {
    let Some(start) = message.find(LEGACY_TASK) else {
        return;
    };
    let rest = &message[start + LEGACY_TASK.len()..];
    if let Some((task, limit)) = rest.rsplit_once(LEGACY_LIMIT) {
        cur.container_name = join_root(task);
        cur.victim_container_name = join_root(limit);
    }
}

/// path.Join("/", p).
fn join_root(p: &str) -> String {
    let parts: Vec<&str> = p
        .split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect();
    format!("/{}", parts.join("/"))
}

/// The message of one /dev/kmsg record (`prio,seq,usec,flags;text` then
/// ` KEY=value` continuation lines, which are dropped). None when the
/// record is malformed.
pub fn kmsg_message(record: &str) -> Option<&str> {
    let (meta, text) = record.split_once(';')?;
    if meta.split(',').count() < 3 {
        return None;
    }
    Some(text.split('\n').next().unwrap_or(""))
}

/// `memory.events` of a v2 cgroup: the `oom` and `oom_kill` counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryEvents {
    pub oom: u64,
    pub oom_kill: u64,
}

pub fn parse_memory_events(text: &str) -> Option<MemoryEvents> {
    let mut ev = MemoryEvents::default();
    let (mut oom, mut kill) = (false, false);
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let (Some(k), Some(v)) = (f.next(), f.next()) else {
            continue;
        };
        match k {
            "oom" => (ev.oom, oom) = (v.parse().ok()?, true),
            "oom_kill" => (ev.oom_kill, kill) = (v.parse().ok()?, true),
            _ => {}
        }
    }
    (oom && kill).then_some(ev)
}

/// System OOM kills between two readings of kubepods' memory.events: kills
/// while no cgroup at or below kubepods hit its limit (`oom` counts limit
/// hits, hierarchically; a global OOM only counts `oom_kill`). When both
/// moved the kills are taken for limit kills: a lower bound, never a false
/// SystemOOM.
pub fn system_oom_kills(prev: MemoryEvents, now: MemoryEvents) -> u64 {
    if now.oom != prev.oom || now.oom_kill < prev.oom_kill {
        return 0;
    }
    now.oom_kill - prev.oom_kill
}
