//! `/metrics/cadvisor`: cadvisor's container metrics for what rkubelet
//! measures (cadvisor `metrics/prometheus.go`), with the labels the
//! kubelet gives them: `container`, `id` (the cgroup), `image`, `name`
//! (the runtime's container ID), `namespace`, `pod`. One series per
//! running container (from the runtime's stats) and one per pod cgroup
//! (`container=""`, from the cgroup's files).

use std::collections::HashMap;

use super::resource_metrics::{render, Family};
use super::types::Time;
use super::{api, u64v, SummaryProvider};

/// One cgroup's series.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Row {
    pub container: String,
    pub id: String,
    pub image: String,
    pub name: String,
    pub namespace: String,
    pub pod: String,
    pub time: Time,
    pub cpu_ns: Option<u64>,
    pub usage: Option<u64>,
    pub working_set: Option<u64>,
    pub rss: Option<u64>,
    pub start: Option<Time>,
    /// None for pod cgroups: cadvisor counts kills by the killed task's
    /// own cgroup, which is a container's.
    pub oom_events: Option<u64>,
}

impl Row {
    /// In Prometheus' (sorted) order; `cpu` only on the cpu counter.
    fn labels(&self) -> [(&str, &str); 6] {
        [
            ("container", &self.container),
            ("id", &self.id),
            ("image", &self.image),
            ("name", &self.name),
            ("namespace", &self.namespace),
            ("pod", &self.pod),
        ]
    }
}

pub(super) fn render_cadvisor_metrics(rows: &[Row]) -> String {
    let mut cpu = Family::new(
        "container_cpu_usage_seconds_total",
        "Cumulative cpu time consumed in seconds.",
        "counter",
    );
    let mut usage = Family::new(
        "container_memory_usage_bytes",
        "Current memory usage in bytes, including all memory regardless of when it was accessed",
        "gauge",
    );
    let mut ws = Family::new(
        "container_memory_working_set_bytes",
        "Current working set in bytes.",
        "gauge",
    );
    let mut rss = Family::new("container_memory_rss", "Size of RSS in bytes.", "gauge");
    let mut oom = Family::new(
        "container_oom_events_total",
        "Count of out of memory events observed for the container",
        "counter",
    );
    let mut start = Family::new(
        "container_start_time_seconds",
        "Start time of the container since unix epoch in seconds.",
        "gauge",
    );
    for r in rows {
        let l = r.labels();
        let t = Some(r.time);
        if let Some(v) = r.cpu_ns {
            let [c, rest @ ..] = l;
            let with_cpu: Vec<(&str, &str)> =
                [c, ("cpu", "total")].into_iter().chain(rest).collect();
            cpu.push(&with_cpu, v as f64 / 1e9, t);
        }
        for (f, v) in [
            (&mut usage, r.usage),
            (&mut ws, r.working_set),
            (&mut rss, r.rss),
        ] {
            if let Some(v) = v {
                f.push(&l, v as f64, t);
            }
        }
        if let Some(n) = r.oom_events {
            oom.push(&l, n as f64, t);
        }
        if let Some(s) = r.start {
            start.push(&l, s.unix_secs_f64(), None);
        }
    }
    render(vec![cpu, usage, ws, rss, oom, start])
}

impl SummaryProvider {
    /// `/metrics/cadvisor` in the Prometheus text format; only what could
    /// be read when the runtime fails.
    pub fn cadvisor_metrics(&self) -> String {
        render_cadvisor_metrics(&self.cadvisor_rows())
    }

    fn cadvisor_rows(&self) -> Vec<Row> {
        let sandboxes: HashMap<String, api::PodSandbox> = self
            .runtime
            .list_pod_sandboxes()
            .inspect_err(|e| log::debug!("metrics/cadvisor: ListPodSandbox: {e}"))
            .unwrap_or_default()
            .into_iter()
            .map(|s| (s.id.clone(), s))
            .collect();
        let pod_cgroups = self.read_pod_cgroups();
        let mut rows = self.container_rows(&sandboxes, &pod_cgroups);
        for sb in sandboxes.values() {
            let Some(md) = sb.metadata.as_ref() else {
                continue;
            };
            let Some((id, cg)) = pod_cgroups.get(&md.uid) else {
                continue;
            };
            // One series per pod, however many sandboxes it has had.
            if rows.iter().any(|r| r.container.is_empty() && &r.id == id) {
                continue;
            }
            rows.push(Row {
                id: id.clone(),
                namespace: md.namespace.clone(),
                pod: md.name.clone(),
                time: Time::now(),
                cpu_ns: cg.cpu_usage_ns,
                usage: cg.memory.as_ref().map(|m| m.usage),
                working_set: cg.memory.as_ref().map(|m| m.working_set),
                rss: cg.memory.as_ref().and_then(|m| m.rss),
                ..Default::default()
            });
        }
        rows.sort_by(|a, b| {
            (&a.namespace, &a.pod, &a.container).cmp(&(&b.namespace, &b.pod, &b.container))
        });
        rows
    }

    /// Running containers, their figures from ListContainerStats.
    fn container_rows(
        &self,
        sandboxes: &HashMap<String, api::PodSandbox>,
        pod_cgroups: &HashMap<String, (String, crate::cm::CgroupStats)>,
    ) -> Vec<Row> {
        let stats: HashMap<String, api::ContainerStats> = self
            .runtime
            .list_container_stats()
            .inspect_err(|e| log::debug!("metrics/cadvisor: ListContainerStats: {e}"))
            .unwrap_or_default()
            .into_iter()
            .filter_map(|s| Some((s.attributes.as_ref()?.id.clone(), s)))
            .collect();
        let containers = self
            .runtime
            .list_containers()
            .inspect_err(|e| log::debug!("metrics/cadvisor: ListContainers: {e}"))
            .unwrap_or_default();
        let running = containers
            .iter()
            .filter(|c| c.state.enum_value_or_default() == api::ContainerState::CONTAINER_RUNNING);
        let images = self.runtime.image_names();
        let mut rows = Vec::new();
        for c in running {
            let Some(md) = sandboxes
                .get(&c.pod_sandbox_id)
                .and_then(|s| s.metadata.as_ref())
            else {
                continue;
            };
            let s = stats.get(&c.id);
            let cpu = s.and_then(|s| s.cpu.as_ref());
            let mem = s.and_then(|s| s.memory.as_ref());
            let id = match (pod_cgroups.get(&md.uid), &self.pod_cgroups) {
                (Some((pod, _)), Some(p)) => p.container_cgroup(pod, &c.id),
                _ => String::new(),
            };
            rows.push(Row {
                container: c
                    .metadata
                    .as_ref()
                    .map(|m| m.name.clone())
                    .unwrap_or_default(),
                id,
                image: container_image(c, &images),
                name: c.id.clone(),
                namespace: md.namespace.clone(),
                pod: md.name.clone(),
                time: mem.map(|m| Time(m.timestamp)).unwrap_or_else(Time::now),
                cpu_ns: cpu.and_then(|c| u64v(&c.usage_core_nano_seconds)),
                usage: mem.and_then(|m| u64v(&m.usage_bytes)),
                working_set: mem.and_then(|m| u64v(&m.working_set_bytes)),
                rss: mem.and_then(|m| u64v(&m.rss_bytes)),
                start: Some(Time(c.created_at)),
                oom_events: Some(crate::oom::container_oom_events(&c.id)),
            });
        }
        rows
    }
}

/// The image as the pod names it, else the runtime's name for it (an
/// image ID is shown by its first tag, as cadvisor shows containerd's).
fn container_image(c: &api::Container, tags: &HashMap<String, String>) -> String {
    let spec = c.image.as_ref();
    let named = spec.map_or("", |i| i.user_specified_image.as_str());
    if !named.is_empty() {
        return named.to_string();
    }
    let image = spec
        .map(|i| i.image.as_str())
        .filter(|i| !i.is_empty())
        .unwrap_or(c.image_ref.as_str());
    tags.get(image)
        .cloned()
        .unwrap_or_else(|| image.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_render_with_cadvisor_names_and_labels() {
        let c = Row {
            container: "c".into(),
            id: "/kubepods/burstable/podu1/abc".into(),
            image: "busybox:1.36".into(),
            name: "abc".into(),
            namespace: "ns".into(),
            pod: "p".into(),
            time: Time(5_000_000_000),
            cpu_ns: Some(1_500_000_000),
            usage: Some(4096),
            working_set: Some(2048),
            rss: Some(1024),
            start: Some(Time(3_000_000_000)),
            oom_events: Some(2),
        };
        let pod = Row {
            id: "/kubepods/burstable/podu1".into(),
            namespace: "ns".into(),
            pod: "p".into(),
            time: Time(5_000_000_000),
            working_set: Some(8192),
            ..Default::default()
        };
        let text = render_cadvisor_metrics(&[c, pod]);
        let l = r#"container="c",id="/kubepods/burstable/podu1/abc",image="busybox:1.36",name="abc",namespace="ns",pod="p""#;
        for want in [
            "# TYPE container_cpu_usage_seconds_total counter".to_string(),
            r#"container_cpu_usage_seconds_total{container="c",cpu="total",id="/kubepods/burstable/podu1/abc",image="busybox:1.36",name="abc",namespace="ns",pod="p"} 1.5 5000"#.to_string(),
            format!("container_memory_usage_bytes{{{l}}} 4096 5000"),
            format!("container_memory_working_set_bytes{{{l}}} 2048 5000"),
            format!("container_memory_rss{{{l}}} 1024 5000"),
            format!("container_oom_events_total{{{l}}} 2 5000"),
            format!("container_start_time_seconds{{{l}}} 3"),
            r#"container_memory_working_set_bytes{container="",id="/kubepods/burstable/podu1",image="",name="",namespace="ns",pod="p"} 8192 5000"#.to_string(),
        ] {
            assert!(text.contains(&want), "missing {want} in:\n{text}");
        }
        assert_eq!(
            text.matches("container_oom_events_total{").count(),
            1,
            "none for pods"
        );
    }
}
