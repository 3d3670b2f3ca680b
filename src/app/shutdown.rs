//! Shutdown: every module thread joined within a deadline, stage by stage.

use super::*;

/// How long shutdown waits for the module threads, all stages together.
const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(5);

/// Joins `owned` in [`ShutdownStage::ORDER`], each thread in the stage it
/// was spawned with, and names any that does not stop in time.
pub(super) fn stop_modules(owned: Vec<Worker>) {
    let deadline = std::time::Instant::now() + SHUTDOWN_DEADLINE;
    let mut rest = owned;
    let mut late = Vec::new();
    for stage in ShutdownStage::ORDER {
        let (now, later): (Vec<Worker>, Vec<Worker>) =
            rest.into_iter().partition(|w| w.stage() == stage);
        rest = later;
        late.extend(worker::join_all(stage, now, deadline));
    }
    if !late.is_empty() {
        log::warn!(
            "shutdown: {} did not stop within {SHUTDOWN_DEADLINE:?}",
            late.join(", ")
        );
    }
}
