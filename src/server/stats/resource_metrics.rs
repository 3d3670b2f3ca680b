//! `/metrics/resource` (upstream
//! `pkg/kubelet/metrics/collectors/resource_metrics.go`): the node's, pods'
//! and containers' CPU, memory and swap from a CPU-and-memory summary, in
//! the Prometheus text format.

use super::types::*;

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The CPU, memory and swap figures of one container or pod, as
/// /metrics/resource reports them.
struct Usage<'a> {
    cpu: Option<&'a CpuStats>,
    memory: Option<&'a MemoryStats>,
    swap: Option<&'a SwapStats>,
}

impl Usage<'_> {
    /// Adds a sample to the cpu, memory and swap families for each figure
    /// present.
    fn push(&self, [cpu, mem, swap]: [&mut Family; 3], labels: &[(&str, &str)]) {
        if let Some((v, t)) = self
            .cpu
            .and_then(|x| Some((x.usage_core_nano_seconds?, x.time)))
        {
            cpu.push(labels, v as f64 / 1e9, Some(t));
        }
        if let Some((v, t)) = self
            .memory
            .and_then(|x| Some((x.working_set_bytes?, x.time)))
        {
            mem.push(labels, v as f64, Some(t));
        }
        if let Some((v, t)) = self.swap.and_then(|x| Some((x.swap_usage_bytes?, x.time))) {
            swap.push(labels, v as f64, Some(t));
        }
    }
}

pub(super) struct Family {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
    samples: Vec<String>,
}

impl Family {
    pub(super) fn new(name: &'static str, help: &'static str, kind: &'static str) -> Self {
        Family {
            name,
            help,
            kind,
            samples: Vec::new(),
        }
    }

    pub(super) fn push(&mut self, labels: &[(&str, &str)], value: f64, ts: Option<Time>) {
        let mut line = self.name.to_string();
        if !labels.is_empty() {
            let l: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
                .collect();
            line.push('{');
            line.push_str(&l.join(","));
            line.push('}');
        }
        line.push_str(&format!(" {value}"));
        if let Some(t) = ts {
            line.push_str(&format!(" {}", t.unix_millis()));
        }
        self.samples.push(line);
    }
}

/// Upstream's resource metrics collector over a CPU-and-memory summary
/// (None = the summary failed: only the scrape-error gauges, set to 1).
pub fn render_resource_metrics(summary: Option<&Summary>) -> String {
    let mut container_cpu = Family::new(
        "container_cpu_usage_seconds_total",
        "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
        "counter",
    );
    let mut container_mem = Family::new(
        "container_memory_working_set_bytes",
        "[STABLE] Current working set of the container in bytes",
        "gauge",
    );
    let mut container_start = Family::new(
        "container_start_time_seconds",
        "[STABLE] Start time of the container since unix epoch in seconds",
        "gauge",
    );
    let mut container_swap = Family::new(
        "container_swap_usage_bytes",
        "[ALPHA] Current amount of the container swap usage in bytes. Reported only on non-windows systems",
        "gauge",
    );
    let mut node_cpu = Family::new(
        "node_cpu_usage_seconds_total",
        "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
        "counter",
    );
    let mut node_mem = Family::new(
        "node_memory_working_set_bytes",
        "[STABLE] Current working set of the node in bytes",
        "gauge",
    );
    let mut node_swap = Family::new(
        "node_swap_usage_bytes",
        "[ALPHA] Current swap usage of the node in bytes. Reported only on non-windows systems",
        "gauge",
    );
    let mut pod_cpu = Family::new(
        "pod_cpu_usage_seconds_total",
        "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
        "counter",
    );
    let mut pod_mem = Family::new(
        "pod_memory_working_set_bytes",
        "[STABLE] Current working set of the pod in bytes",
        "gauge",
    );
    let mut pod_swap = Family::new(
        "pod_swap_usage_bytes",
        "[ALPHA] Current amount of the pod swap usage in bytes. Reported only on non-windows systems",
        "gauge",
    );
    let mut resource_scrape_error = Family::new(
        "resource_scrape_error",
        "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise",
        "gauge",
    );
    let mut scrape_error = Family::new(
        "scrape_error",
        "[ALPHA] (Deprecated since 1.29.0) 1 if there was an error while getting container metrics, 0 otherwise",
        "gauge",
    );
    let err = if summary.is_some() { 0.0 } else { 1.0 };
    resource_scrape_error.push(&[], err, None);
    scrape_error.push(&[], err, None);

    if let Some(s) = summary {
        let n = &s.node;
        if let Some(v) = n
            .cpu
            .as_ref()
            .and_then(|c| Some((c.usage_core_nano_seconds?, c.time)))
        {
            node_cpu.push(&[], v.0 as f64 / 1e9, Some(v.1));
        }
        if let Some(v) = n
            .memory
            .as_ref()
            .and_then(|m| Some((m.working_set_bytes?, m.time)))
        {
            node_mem.push(&[], v.0 as f64, Some(v.1));
        }
        if let (Some(sw), Some(m)) = (n.swap.as_ref(), n.memory.as_ref()) {
            if let Some(u) = sw.swap_usage_bytes {
                node_swap.push(&[], u as f64, Some(m.time));
            }
        }
        for pod in &s.pods {
            let (pn, ns) = (pod.pod_ref.name.as_str(), pod.pod_ref.namespace.as_str());
            for c in &pod.containers {
                let l = [
                    ("container", c.name.as_str()),
                    ("pod", pn),
                    ("namespace", ns),
                ];
                if c.start_time.0 > 0 {
                    container_start.push(&l, c.start_time.unix_secs_f64(), None);
                }
                let usage = Usage {
                    cpu: c.cpu.as_ref(),
                    memory: c.memory.as_ref(),
                    swap: c.swap.as_ref(),
                };
                usage.push(
                    [&mut container_cpu, &mut container_mem, &mut container_swap],
                    &l,
                );
            }
            let usage = Usage {
                cpu: pod.cpu.as_ref(),
                memory: pod.memory.as_ref(),
                swap: pod.swap.as_ref(),
            };
            usage.push(
                [&mut pod_cpu, &mut pod_mem, &mut pod_swap],
                &[("pod", pn), ("namespace", ns)],
            );
        }
    }

    render(vec![
        container_cpu,
        container_mem,
        container_start,
        container_swap,
        node_cpu,
        node_mem,
        node_swap,
        pod_cpu,
        pod_mem,
        pod_swap,
        resource_scrape_error,
        scrape_error,
    ])
}

/// The families with samples, each under its HELP and TYPE lines.
pub(super) fn render(families: Vec<Family>) -> String {
    let mut out = String::new();
    for f in families {
        if f.samples.is_empty() {
            continue;
        }
        out.push_str(&format!(
            "# HELP {} {}\n# TYPE {} {}\n",
            f.name, f.help, f.name, f.kind
        ));
        for s in f.samples {
            out.push_str(&s);
            out.push('\n');
        }
    }
    out
}
