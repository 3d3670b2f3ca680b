//! Static pods from staticPodURL (upstream pkg/kubelet/config/http.go).

use crate::util::worker::{self, ShutdownStage, Worker};
use std::io::{self, Read};
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use k8s_openapi::api::core::v1::Pod;
use log::{debug, info, warn};

use super::common::{decode_pods, ManifestOrigin, MAX_CONFIG_LENGTH};
use super::send_update;
use super::ManifestError;
use crate::types::{PodUpdate, HTTP_SOURCE};

/// Per-request timeout, as upstream's http.Client; a hung server must not
/// stall the source forever.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// After this many failures in a row, further ones are logged at debug level.
const LOUD_FAILURES: u32 = 3;

/// Starts the "http-source" thread: GET `url` with `headers` every `period`,
/// sending a `PodOperation::Set` after each successful read whose body
/// changed. Repeated header names are sent as one comma-joined header. Exits
/// when `shutdown` receives a message or all its senders are dropped (at most
/// one request timeout later).
pub fn start_http_source(
    url: &str,
    headers: Vec<(String, String)>,
    node_name: &str,
    period: Duration,
    updates: Sender<PodUpdate>,
    shutdown: Receiver<()>,
) -> io::Result<Worker> {
    let source = HttpSource::new(url, headers, node_name, updates);
    worker::spawn("http-source", ShutdownStage::Sources, move || {
        source.run(period, &shutdown)
    })
}

struct HttpSource {
    url: String,
    headers: Vec<(String, String)>,
    node_name: String,
    agent: ureq::Agent,
    updates: Sender<PodUpdate>,
    /// Body of the last successful read; an identical body is not re-sent.
    last_data: Option<Vec<u8>>,
    failures: u32,
}

impl HttpSource {
    fn new(
        url: &str,
        headers: Vec<(String, String)>,
        node_name: &str,
        updates: Sender<PodUpdate>,
    ) -> Self {
        HttpSource {
            url: url.to_string(),
            headers: merge_headers(headers),
            node_name: node_name.to_string(),
            agent: ureq::AgentBuilder::new().timeout(REQUEST_TIMEOUT).build(),
            updates,
            last_data: None,
            failures: 0,
        }
    }

    fn run(mut self, period: Duration, shutdown: &Receiver<()>) {
        info!("Watching URL {}", self.url);
        loop {
            if let Some(pods) = self.poll_once() {
                let update = PodUpdate::set(HTTP_SOURCE, pods);
                if !send_update(&self.updates, update, shutdown) {
                    break;
                }
            }
            match shutdown.recv_timeout(period) {
                Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
        debug!("http source for {} stopped", self.url);
    }

    /// One read. Some(pods) when there is a new state to send; None when the
    /// body is unchanged or the read failed (the last good state stands).
    fn poll_once(&mut self) -> Option<Vec<Pod>> {
        match self.extract() {
            Ok(pods) => {
                if self.failures > 0 {
                    info!("Successfully read pods from URL {}", self.url);
                    self.failures = 0;
                }
                pods
            }
            Err(e) => {
                self.log_failure(&e);
                None
            }
        }
    }

    /// Don't log a failing URL at warn level every period; the first few say it.
    fn log_failure(&mut self, e: &ManifestError) {
        self.failures = self.failures.saturating_add(1);
        if self.failures < LOUD_FAILURES {
            warn!("Failed to read pods from URL {}: {e:#}", self.url);
        } else if self.failures == LOUD_FAILURES {
            warn!(
                "Failed to read pods from URL {}: {e:#} (further failures logged at debug level)",
                self.url
            );
        } else {
            debug!("Failed to read pods from URL {}: {e:#}", self.url);
        }
    }

    fn extract(&mut self) -> Result<Option<Vec<Pod>>, ManifestError> {
        let data = self.fetch()?;
        if self.last_data.as_deref() == Some(data.as_slice()) {
            return Ok(None);
        }
        // An empty body is a valid "no pods"; it also marks the source as seen.
        let pods = if data.iter().all(u8::is_ascii_whitespace) {
            Vec::new()
        } else {
            decode_pods(&data, ManifestOrigin::Url(&self.url), &self.node_name)
                .map_err(|e| e.at(self.url.as_str()))?
        };
        self.last_data = Some(data);
        Ok(Some(pods))
    }

    fn fetch(&self) -> Result<Vec<u8>, ManifestError> {
        let fail = |detail: String| ManifestError::Fetch {
            url: self.url.clone(),
            detail,
        };
        let mut request = self.agent.get(&self.url);
        for (name, value) in &self.headers {
            request = request.set(name, value);
        }
        let response = match request.call() {
            Ok(response) => response,
            Err(ureq::Error::Status(code, response)) => {
                return Err(fail(format!("{code} {}", response.status_text())))
            }
            Err(e) => return Err(fail(e.to_string())),
        };
        // Upstream accepts only 200, not any 2xx.
        if response.status() != 200 {
            return Err(fail(format!(
                "{} {}",
                response.status(),
                response.status_text()
            )));
        }
        let mut data = Vec::new();
        response
            .into_reader()
            .take(MAX_CONFIG_LENGTH as u64 + 1)
            .read_to_end(&mut data)
            .map_err(|e| fail(format!("reading body: {e}")))?;
        if data.len() > MAX_CONFIG_LENGTH {
            return Err(fail(format!(
                "body is larger than {MAX_CONFIG_LENGTH} bytes"
            )));
        }
        Ok(data)
    }
}

/// ureq replaces a header set twice, so repeated names (http.Header's
/// multi-values) are joined with ", " as HTTP allows.
fn merge_headers(headers: Vec<(String, String)>) -> Vec<(String, String)> {
    let mut merged: Vec<(String, String)> = Vec::new();
    for (name, value) in headers {
        match merged
            .iter_mut()
            .find(|(n, _)| n.eq_ignore_ascii_case(&name))
        {
            Some((_, existing)) => {
                existing.push_str(", ");
                existing.push_str(&value);
            }
            None => merged.push((name, value)),
        }
    }
    merged
}
