//! Probe results (upstream `pkg/kubelet/prober/results`). The sync loop
//! consumes liveness results from a channel of these; the prober manager
//! that produces them schedules probes on a fixed pool (see README).

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeResult {
    Success,
    Failure,
    Unknown,
}

/// A probe's verdict changed for one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultUpdate {
    pub pod_uid: String,
    pub container_id: String,
    pub result: ProbeResult,
}
