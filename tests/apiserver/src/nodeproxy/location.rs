//! Where a pod subresource goes: the kubelet URL for `log`, `exec`,
//! `attach` and `portforward`, after the *Location functions of
//! pkg/registry/core/pod/strategy.go, with their option checks.

use super::DEFAULT_KUBELET_PORT;
use crate::handlers::{Api, Route};
use crate::http::Request;
use crate::status::ApiError;
use crate::util::get_str;
use serde_json::Value;

/// Where on which kubelet a request goes.
#[derive(Debug, Clone, PartialEq)]
pub struct Location {
    pub host: String,
    pub port: u16,
    /// Path and query, as on the request line.
    pub target: String,
}

impl Location {
    pub fn url(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        format!("https://{}:{}{}", host, self.port, self.target)
    }
}

/// What the handler decided: a log stream or an upgrade to proxy.
#[derive(Debug, Clone, PartialEq)]
pub enum KubeletCall {
    /// `None` for a pod not bound to a node: an empty 200 (upstream).
    Log {
        loc: Option<Location>,
        follow: bool,
        pod: String,
    },
    Upgrade {
        loc: Location,
    },
}

/// Go's url.QueryEscape.
pub(super) fn qenc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{:02X}", b)),
        }
    }
    out
}

pub(super) fn path_enc(s: &str) -> String {
    qenc(s).replace('+', "%20")
}

/// strconv.ParseBool.
fn parse_bool(name: &str, v: &str) -> Result<bool, ApiError> {
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" | "" => Ok(false),
        _ => Err(ApiError::bad_request(format!(
            "invalid value {:?} for query parameter {:?}: not a boolean",
            v, name
        ))),
    }
}

fn q_bool(req: &Request, name: &str) -> Result<bool, ApiError> {
    req.q(name).map_or(Ok(false), |v| parse_bool(name, v))
}

fn q_int(req: &Request, name: &str) -> Result<Option<i64>, ApiError> {
    req.q(name)
        .map(|v| {
            v.parse::<i64>().map_err(|_| {
                ApiError::bad_request(format!(
                    "invalid value {:?} for query parameter {:?}: not an integer",
                    v, name
                ))
            })
        })
        .transpose()
}

fn container_names(pod: &Value) -> Vec<String> {
    let mut names = Vec::new();
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        if let Some(a) = pod["spec"][list].as_array() {
            names.extend(
                a.iter()
                    .filter_map(|c| c["name"].as_str().map(String::from)),
            );
        }
    }
    names
}

/// Upstream validateContainer: the only container when none is named.
pub(super) fn validate_container(
    container: &str,
    pod: &Value,
    name: &str,
) -> Result<String, ApiError> {
    if container.is_empty() {
        let main: Vec<&str> = pod["spec"]["containers"]
            .as_array()
            .map(|a| a.iter().filter_map(|c| c["name"].as_str()).collect())
            .unwrap_or_default();
        return match main.len() {
            1 => Ok(main[0].to_string()),
            0 => Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {}",
                name
            ))),
            _ => Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {}, choose one of: [{}]",
                name,
                container_names(pod).join(" ")
            ))),
        };
    }
    if !container_names(pod).iter().any(|c| c == container) {
        return Err(ApiError::bad_request(format!(
            "container {} is not valid for pod {}",
            container, name
        )));
    }
    Ok(container.to_string())
}

/// Upstream NodeConnectionInfoGetter with kubeadm's preferred address types.
fn node_endpoint(api: &Api, node_name: &str) -> Result<(String, u16), ApiError> {
    let node = api
        .store
        .lock()
        .get("nodes", "", node_name)
        .ok_or_else(|| ApiError::not_found("nodes", node_name))?;
    let port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
        .as_u64()
        .filter(|p| *p > 0 && *p <= u64::from(u16::MAX))
        .map(|p| p as u16)
        .unwrap_or(DEFAULT_KUBELET_PORT);
    let addrs = node["status"]["addresses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for ty in ["InternalIP", "ExternalIP", "Hostname"] {
        if let Some(a) = addrs
            .iter()
            .find(|a| a["type"] == ty)
            .and_then(|a| a["address"].as_str())
            .filter(|a| !a.is_empty())
        {
            return Ok((a.to_string(), port));
        }
    }
    Err(ApiError::internal(&format!(
        "no preferred addresses found; known addresses: {}",
        Value::Array(addrs)
    )))
}

/// The location for `pods/{name}/{sub}` (log, exec, attach, portforward).
pub fn pod_call(
    api: &Api,
    route: &Route,
    req: &Request,
    sub: &str,
) -> Result<KubeletCall, ApiError> {
    let ns = route.ns.as_deref().unwrap_or("");
    let name = route.name.as_deref().unwrap_or("");
    let method_ok = match sub {
        "log" => req.method == "GET",
        _ => req.method == "GET" || req.method == "POST",
    };
    if !method_ok {
        return Err(ApiError::method_not_allowed());
    }
    let pod = api
        .store
        .lock()
        .get("pods", ns, name)
        .ok_or_else(|| ApiError::not_found("pods", name))?;
    let node_name = get_str(&pod, &["spec", "nodeName"])
        .unwrap_or("")
        .to_string();
    let mut params: Vec<(String, String)> = Vec::new();
    let mut add = |k: &str, v: String| params.push((k.to_string(), v));
    let path = match sub {
        "log" => {
            let follow = q_bool(req, "follow")?;
            let since_seconds = q_int(req, "sinceSeconds")?;
            let since_time = req.q("sinceTime").filter(|s| !s.is_empty());
            let tail = q_int(req, "tailLines")?;
            let limit = q_int(req, "limitBytes")?;
            let mut errs = Vec::new();
            if since_seconds.is_some() && since_time.is_some() {
                errs.push((
                    String::new(),
                    "FieldValueForbidden",
                    "at most one of `sinceTime` or `sinceSeconds` may be specified".to_string(),
                ));
            }
            if since_seconds.is_some_and(|s| s < 1) {
                errs.push((
                    "sinceSeconds".to_string(),
                    "FieldValueInvalid",
                    "must be greater than 0".to_string(),
                ));
            }
            if tail.is_some_and(|t| t < 0) {
                errs.push((
                    "tailLines".to_string(),
                    "FieldValueInvalid",
                    "must be greater than or equal to 0".to_string(),
                ));
            }
            if limit.is_some_and(|l| l < 1) {
                errs.push((
                    "limitBytes".to_string(),
                    "FieldValueInvalid",
                    "must be greater than 0".to_string(),
                ));
            }
            if let Some(t) = since_time {
                if crate::util::parse_rfc3339(t).is_none() {
                    return Err(ApiError::bad_request(format!(
                        "invalid value {:?} for query parameter \"sinceTime\": not an RFC 3339 time",
                        t
                    )));
                }
            }
            if !errs.is_empty() {
                return Err(ApiError::invalid("PodLogOptions", "", "", &errs));
            }
            let container = validate_container(req.q("container").unwrap_or(""), &pod, name)?;
            if node_name.is_empty() {
                // Not scheduled yet: no location, an empty log.
                return Ok(KubeletCall::Log {
                    loc: None,
                    follow,
                    pod: name.to_string(),
                });
            }
            if follow {
                add("follow", "true".into());
            }
            if q_bool(req, "previous")? {
                add("previous", "true".into());
            }
            if q_bool(req, "timestamps")? {
                add("timestamps", "true".into());
            }
            if let Some(s) = since_seconds {
                add("sinceSeconds", s.to_string());
            }
            if let Some(t) = since_time {
                add("sinceTime", t.to_string());
            }
            if let Some(t) = tail {
                add("tailLines", t.to_string());
            }
            if let Some(l) = limit {
                add("limitBytes", l.to_string());
            }
            format!(
                "/containerLogs/{}/{}/{}",
                path_enc(ns),
                path_enc(name),
                path_enc(&container)
            )
        }
        "exec" | "attach" => {
            let container = validate_container(req.q("container").unwrap_or(""), &pod, name)?;
            if node_name.is_empty() {
                return Err(ApiError::bad_request(format!(
                    "pod {} does not have a host assigned",
                    name
                )));
            }
            // PodExecOptions / PodAttachOptions -> core/v1 Exec*Param names.
            let (stdin, stdout, stderr, tty) = (
                q_bool(req, "stdin")?,
                q_bool(req, "stdout")?,
                q_bool(req, "stderr")?,
                q_bool(req, "tty")?,
            );
            if stdin {
                add("input", "1".into());
            }
            if stdout {
                add("output", "1".into());
            }
            if stderr {
                add("error", "1".into());
            }
            if tty {
                add("tty", "1".into());
            }
            if sub == "exec" {
                let cmd: Vec<&str> = req
                    .query
                    .iter()
                    .filter(|(k, _)| k == "command")
                    .map(|(_, v)| v.as_str())
                    .collect();
                if cmd.is_empty() {
                    return Err(ApiError::invalid(
                        "PodExecOptions",
                        "",
                        "",
                        &[(
                            "command".to_string(),
                            "FieldValueRequired",
                            "Required value".to_string(),
                        )],
                    ));
                }
                for c in cmd {
                    add("command", c.to_string());
                }
            }
            format!(
                "/{}/{}/{}/{}",
                sub,
                path_enc(ns),
                path_enc(name),
                path_enc(&container)
            )
        }
        "portforward" => {
            if node_name.is_empty() {
                return Err(ApiError::bad_request(format!(
                    "pod {} does not have a host assigned",
                    name
                )));
            }
            for (k, v) in &req.query {
                if k == "ports" || k == "port" {
                    for p in v.split(',').filter(|p| !p.is_empty()) {
                        add("port", p.to_string());
                    }
                }
            }
            format!("/portForward/{}/{}", path_enc(ns), path_enc(name))
        }
        _ => return Err(ApiError::path_not_found()),
    };
    let (host, port) = node_endpoint(api, &node_name)?;
    let query: Vec<String> = params
        .iter()
        .map(|(k, v)| format!("{}={}", qenc(k), qenc(v)))
        .collect();
    let target = if query.is_empty() {
        path
    } else {
        format!("{}?{}", path, query.join("&"))
    };
    let loc = Location { host, port, target };
    Ok(if sub == "log" {
        KubeletCall::Log {
            loc: Some(loc),
            follow: q_bool(req, "follow")?,
            pod: name.to_string(),
        }
    } else {
        KubeletCall::Upgrade { loc }
    })
}
