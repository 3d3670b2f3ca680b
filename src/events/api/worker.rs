//! The "events" thread: takes queued events through the correlator and
//! writes them, retrying transport failures (client-go's broadcaster).

use super::*;

/// The sender thread's state.
pub(super) struct Worker {
    pub(super) sink: Arc<dyn EventSink>,
    pub(super) correlator: Correlator,
    pub(super) rx: Receiver<Queued>,
    pub(super) retry_sleep: Duration,
}

impl Worker {
    pub(super) fn run(mut self, shutdown: &Receiver<()>) {
        loop {
            select! {
                recv(shutdown) -> _ => break,
                recv(self.rx) -> queued => match queued {
                    Ok(Queued::Event(event)) => {
                        if !self.record_to_sink(*event, shutdown) {
                            break;
                        }
                    }
                    Ok(Queued::Forget(uid)) => self.correlator.forget_object(&uid),
                    Err(_) => break,
                },
            }
        }
        let left = self.rx.len();
        if left > 0 {
            log::info!("Event recorder stopping; {left} queued event(s) not sent");
        }
    }

    /// Correlates and writes one event, retrying as client-go does.
    /// Returns false when shutdown interrupted it.
    pub(super) fn record_to_sink(&mut self, event: Event, shutdown: &Receiver<()>) -> bool {
        let Some(Correlated { mut event, patch }) =
            self.correlator
                .correlate(event, Instant::now(), Timestamp::now())
        else {
            return true;
        };
        let mut tries = 0;
        loop {
            if self.record_event(&mut event, patch.as_ref()) {
                return true;
            }
            tries += 1;
            if tries >= MAX_TRIES_PER_EVENT {
                log::error!(
                    "Unable to write event {} (retry limit exceeded!)",
                    describe_event(&event)
                );
                return true;
            }
            // A random first sleep, so kubelets do not all retry in step
            // after an apiserver outage.
            let delay = if tries == 1 {
                self.retry_sleep.mul_f64(random_unit())
            } else {
                self.retry_sleep
            };
            match shutdown.recv_timeout(delay) {
                Err(RecvTimeoutError::Timeout) => {}
                Ok(()) | Err(RecvTimeoutError::Disconnected) => {
                    log::warn!(
                        "Unable to write event {} (recorder is shutting down)",
                        describe_event(&event)
                    );
                    return false;
                }
            }
        }
    }

    /// One try (client-go's recordEvent): true when written or given up on,
    /// false to retry.
    pub(super) fn record_event(
        &mut self,
        event: &mut Event,
        patch: Option<&serde_json::Value>,
    ) -> bool {
        let mut result = None;
        if event.count.unwrap_or(1) > 1 {
            if let Some(patch) = patch {
                result = Some(self.sink.patch(event, patch));
            }
        }
        // The event may have expired on the server: create it afresh.
        let create = match &result {
            None => true,
            Some(Err(e)) => e.is_not_found(),
            Some(Ok(_)) => false,
        };
        if create {
            event.metadata.resource_version = None;
            result = Some(self.sink.create(event));
        }
        let err = match result {
            Some(Ok(stored)) => {
                self.correlator.update_state(&stored);
                return true;
            }
            Some(Err(e)) => e,
            None => return true,
        };
        match &err {
            ApiError::Status { message, .. } => {
                if err.is_already_exists() || message.contains("because it is being terminated") {
                    log::debug!(
                        "Server rejected event {} (will not retry!): {err}",
                        describe_event(event)
                    );
                } else {
                    log::warn!(
                        "Server rejected event {} (will not retry!): {err}",
                        describe_event(event)
                    );
                }
                true
            }
            // The same request would fail the same way (or its answer would).
            ApiError::Decode(_) => {
                log::warn!(
                    "Unable to write event {} (will not retry!): {err}",
                    describe_event(event)
                );
                true
            }
            ApiError::Transport(_) => {
                log::warn!(
                    "Unable to write event {} (may retry after sleeping): {err}",
                    describe_event(event)
                );
                false
            }
        }
    }
}

pub(super) fn describe_event(e: &Event) -> String {
    format!(
        "{}/{} ({}: {})",
        event_namespace(e),
        e.metadata.name.as_deref().unwrap_or(""),
        describe_object(&e.involved_object),
        e.reason.as_deref().unwrap_or(""),
    )
}
