//! The cgroup v1 files and task cgroups end-to-end tests read (the test
//! machine is cgroup v1, hybrid).

use std::fs;
use std::path::PathBuf;

use super::Env;

const V1: &str = "/sys/fs/cgroup";

/// One file of a v1 cgroup, trimmed: `rel` under `controller`'s mount.
pub fn read_v1(controller: &str, rel: &str, file: &str) -> String {
    let p = PathBuf::from(V1)
        .join(controller)
        .join(rel.trim_start_matches('/'))
        .join(file);
    fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
        .trim()
        .to_string()
}

/// The PID of a container's task, from `ctr tasks ls` (TASK PID STATUS).
pub fn task_pid(env: &Env, id: &str) -> u32 {
    let out = env.ctr(&["tasks", "ls"]).expect("ctr tasks ls");
    out.lines()
        .skip(1)
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.first() == Some(&id))
                .then(|| f.get(1)?.parse().ok())
                .flatten()
        })
        .unwrap_or_else(|| panic!("no task {id} in:\n{out}"))
}

/// The container's cgroup path in one v1 hierarchy, from /proc/PID/cgroup.
pub fn proc_cgroup(pid: u32, controller: &str) -> String {
    let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    text.lines()
        .find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, ctrls, path) = (f.next()?, f.next()?, f.next()?);
            ctrls
                .split(',')
                .any(|c| c == controller)
                .then(|| path.to_string())
        })
        .unwrap_or_else(|| panic!("no {controller} line in /proc/{pid}/cgroup:\n{text}"))
}
