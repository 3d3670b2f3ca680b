//! Probe ports: a number, or the name of one of the container's ports
//! (upstream `probe.ResolveContainerPort`).

use k8s_openapi::api::core::v1::Container;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

pub fn resolve_port(port: &IntOrString, container: &Container) -> Result<u16, String> {
    let number = match port {
        IntOrString::Int(n) => i64::from(*n),
        IntOrString::String(name) => named_port(container, name)?,
    };
    u16::try_from(number)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("invalid port number: {number}"))
}

fn named_port(container: &Container, name: &str) -> Result<i64, String> {
    container
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some(name))
        .map(|p| i64::from(p.container_port))
        .ok_or_else(|| format!("port {name:?} not found"))
}
