use super::*;
use crate::cm::cpumanager::policy_static::tests::pod;
use crate::cm::cpumanager::state::STATE_FILE;
use crate::cm::cpumanager::topology::fake;

/// CPU sets the reconcile loop asked the runtime for, by container ID.
#[derive(Default)]
struct Runtime(Mutex<Vec<(String, String)>>);

impl UpdateCpuset for Runtime {
    fn update_cpuset(&self, id: &str, cpus: &CpuSet) -> Result<(), String> {
        self.0
            .lock()
            .unwrap()
            .push((id.to_string(), cpus.to_string()));
        Ok(())
    }
}

impl Runtime {
    fn take(&self) -> Vec<(String, String)> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

struct Node {
    sysfs: tempfile::TempDir,
    root: tempfile::TempDir,
}

/// This machine's shape: one socket, two CPUs, no SMT.
fn node() -> Node {
    let sysfs = tempfile::TempDir::with_prefix("rkubelet-sysfs-").unwrap();
    fake::machine(sysfs.path(), 1, 2, 1, 0);
    let root = tempfile::TempDir::with_prefix("rkubelet-root-").unwrap();
    Node { sysfs, root }
}

fn config(policy: &str) -> KubeletConfiguration {
    let mut c = KubeletConfiguration {
        cpu_manager_policy: policy.into(),
        reserved_system_cpus: "0".into(),
        ..Default::default()
    };
    // what reserve_system_cpus makes of reservedSystemCPUs "0"
    c.system_reserved.insert("cpu".into(), "1".into());
    c
}

fn start(n: &Node, c: &KubeletConfiguration) -> Result<CpuManager, CpuManagerError> {
    CpuManager::start(c, n.root.path(), n.sysfs.path())
}

fn state_file(n: &Node) -> String {
    std::fs::read_to_string(n.root.path().join(STATE_FILE)).unwrap()
}

fn running(list: &[(&str, &str)]) -> Vec<RunningContainer> {
    list.iter()
        .map(|(uid, name)| RunningContainer {
            pod_uid: uid.to_string(),
            name: name.to_string(),
            id: format!("{uid}-{name}"),
        })
        .collect()
}

/// Admission as the kubelet runs it with the topology manager's none
/// policy: each container in turn, everything released on a refusal.
fn admit(m: &CpuManager, pod: &Pod) -> Result<(), Rejection> {
    let c = KubeletConfiguration::default();
    let tm =
        crate::cm::topologymanager::TopologyManager::new(&c, vec![0], vec![Box::new(m.clone())]);
    tm.unwrap().admit(pod)
}

/// A housekeeping round as the kubelet runs it.
fn housekeeping(
    m: &CpuManager,
    active: &HashSet<String>,
    ready: bool,
    running: Vec<RunningContainer>,
) {
    m.set_running(active, running);
    m.remove_stale_state(active, ready);
}

fn uids(list: &[&str]) -> HashSet<String> {
    list.iter().map(|u| u.to_string()).collect()
}

#[test]
fn the_none_policy_pins_nothing_and_writes_its_state() {
    let n = node();
    let m = start(&n, &config("none")).unwrap();
    assert!(!m.is_static());
    admit(&m, &pod("g", &[], &[("1", "1Gi")])).unwrap();
    assert_eq!(m.container_cpuset("g", "app0"), None);
    assert!(state_file(&n).starts_with(r#"{"policyName":"none","defaultCpuSet":"""#));
}

#[test]
fn exclusive_cpus_at_admission_then_back_to_the_pool_when_the_pod_goes() {
    let n = node();
    let m = start(&n, &config("static")).unwrap();
    let rt = Runtime::default();
    assert!(state_file(&n).contains(r#""defaultCpuSet":"0-1""#));

    admit(&m, &pod("g", &[], &[("1", "1Gi")])).unwrap();
    admit(&m, &pod("e", &[], &[("", "")])).unwrap();
    assert_eq!(m.container_cpuset("g", "app0").unwrap().to_string(), "1");
    assert_eq!(m.container_cpuset("e", "app0").unwrap().to_string(), "0");
    assert_eq!(m.exclusive_cpus("g", "app0"), vec![1]);
    assert_eq!(m.allocatable_cpus(), vec![1]);
    assert!(state_file(&n).contains(r#""entries":{"g":{"app0":"1"}}"#));

    // created on their CPUs: the loop has nothing to move
    let both = running(&[("g", "app0"), ("e", "app0")]);
    housekeeping(&m, &uids(&["g", "e"]), true, both);
    m.inner.as_ref().unwrap().reconcile(&rt);
    assert_eq!(rt.take(), vec![]);

    // the Guaranteed pod is gone: its CPU is shared again, at once
    housekeeping(&m, &uids(&["e"]), true, running(&[("e", "app0")]));
    assert!(m.inner.as_ref().unwrap().kick.1.try_recv().is_ok(), "woken");
    m.inner.as_ref().unwrap().reconcile(&rt);
    assert_eq!(rt.take(), vec![("e-app0".to_string(), "0-1".to_string())]);
    m.inner.as_ref().unwrap().reconcile(&rt);
    assert_eq!(rt.take(), vec![], "moved once");
    assert!(state_file(&n).contains(r#""defaultCpuSet":"0-1","checksum""#));
}

#[test]
fn nothing_is_released_before_the_sources_are_ready() {
    let n = node();
    let m = start(&n, &config("static")).unwrap();
    admit(&m, &pod("g", &[], &[("1", "1Gi")])).unwrap();
    housekeeping(&m, &uids(&[]), false, Vec::new());
    assert_eq!(m.exclusive_cpus("g", "app0"), vec![1]);
}

#[test]
fn assignments_survive_a_restart() {
    let n = node();
    let m = start(&n, &config("static")).unwrap();
    admit(&m, &pod("g", &[], &[("1", "1Gi")])).unwrap();
    drop(m);
    let m = start(&n, &config("static")).unwrap();
    assert_eq!(m.exclusive_cpus("g", "app0"), vec![1]);
    // admitted again after the restart: the same CPU
    admit(&m, &pod("g", &[], &[("1", "1Gi")])).unwrap();
    assert_eq!(m.container_cpuset("g", "app0").unwrap().to_string(), "1");
    // a container running before the restart is moved once, to the same set
    let rt = Runtime::default();
    housekeeping(&m, &uids(&["g", "e"]), true, running(&[("e", "app0")]));
    m.inner.as_ref().unwrap().reconcile(&rt);
    assert_eq!(rt.take(), vec![("e-app0".to_string(), "0".to_string())]);
}

#[test]
fn a_pod_that_does_not_fit_is_refused_and_keeps_nothing() {
    let n = node();
    let m = start(&n, &config("static")).unwrap();
    admit(&m, &pod("g", &[], &[("1", "1Gi")])).unwrap();
    let r = admit(&m, &pod("h", &[], &[("1", "1Gi")])).unwrap_err();
    assert_eq!(r.reason, "UnexpectedAdmissionError");
    assert_eq!(
        r.message,
        "Allocate failed due to not enough cpus available to satisfy request, which is unexpected"
    );
    m.release("g");
    // two containers: the first fits, the second does not; neither stays
    let r = admit(&m, &pod("h", &[], &[("1", "1Gi"), ("1", "1Gi")])).unwrap_err();
    assert_eq!(r.reason, "UnexpectedAdmissionError");
    assert!(m.exclusive_cpus("h", "app0").is_empty());
    assert!(state_file(&n).contains(r#""defaultCpuSet":"0-1","checksum""#));
}

#[test]
fn a_state_file_of_another_policy_stops_the_start() {
    let n = node();
    drop(start(&n, &config("static")).unwrap());
    let e = start(&n, &config("none")).err().unwrap().to_string();
    assert!(
        e.starts_with("could not restore state from checkpoint: configured policy \"none\" differs from state checkpoint policy \"static\", please drain this node and delete the CPU manager checkpoint file"),
        "{e}"
    );
}

#[test]
fn options_are_upstreams_or_the_start_stops() {
    let n = node();
    let mut c = config("static");
    c.cpu_manager_policy_options
        .insert("full-pcpus-only".into(), "true".into());
    assert!(start(&n, &c).is_ok());
    c.cpu_manager_policy_options
        .insert("full-pcpus-only".into(), "maybe".into());
    let e = start(&n, &c).err().unwrap().to_string();
    assert_eq!(
        e,
        "cpuManagerPolicyOptions: bad value for option \"full-pcpus-only\": \"maybe\" is not a boolean"
    );
    let mut c = config("static");
    for option in ["distribute-cpus-across-numa", "align-by-socket"] {
        c.cpu_manager_policy_options
            .insert(option.into(), "1".into());
    }
    assert!(start(&n, &c).is_ok());
    c.topology_manager_policy = "single-numa-node".into();
    let e = start(&n, &c).err().unwrap().to_string();
    assert_eq!(
        e,
        "cpuManagerPolicyOptions: Topology manager single-numa-node policy is incompatible with CPUManager align-by-socket policy option"
    );
    let mut c = config("static");
    c.cpu_manager_policy_options
        .insert("align-by-sockets".into(), "true".into());
    let e = start(&n, &c).err().unwrap().to_string();
    assert_eq!(
        e,
        "cpuManagerPolicyOptions: unknown CPU Manager Policy option: \"align-by-sockets\""
    );
    let mut c = config("static");
    c.system_reserved.clear();
    let e = start(&n, &c).err().unwrap().to_string();
    assert!(
        e.starts_with("new static policy error: [cpumanager] the static policy requires"),
        "{e}"
    );
}
