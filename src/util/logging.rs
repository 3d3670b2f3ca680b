//! Logging set-up and the run-time verbosity knob (upstream klog's `-v` and
//! the kubelet's `PUT /debug/flags/v`).
//!
//! `--v` maps onto log levels as klog's conventions do: 0-2 (steady-state
//! information) info, 3-5 (debugging) debug, 6+ trace. The filter admits
//! everything of rkubelet's up to trace and the global maximum level does
//! the cutting, so the verbosity can change while running (and a disabled
//! `debug!` stays one atomic load). RUST_LOG, when set, replaces the
//! filter, so one module can be turned up alone.

use log::LevelFilter;

/// The log level a klog verbosity stands for.
pub fn level_for(verbosity: u8) -> LevelFilter {
    match verbosity {
        0..=2 => LevelFilter::Info,
        3..=5 => LevelFilter::Debug,
        _ => LevelFilter::Trace,
    }
}

/// Installs the logger at `verbosity`; call once, first thing.
pub fn init(verbosity: u8) {
    let from_env = std::env::var_os("RUST_LOG").is_some();
    env_logger::Builder::from_env(
        env_logger::Env::default().default_filter_or("rkubelet=trace,warn"),
    )
    .format_timestamp_millis()
    .init();
    if !from_env {
        set_verbosity(verbosity);
    }
}

/// Changes the verbosity of a running kubelet.
pub fn set_verbosity(verbosity: u8) {
    log::set_max_level(level_for(verbosity));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn klog_verbosity_to_levels() {
        assert_eq!(level_for(0), LevelFilter::Info);
        assert_eq!(level_for(2), LevelFilter::Info);
        assert_eq!(level_for(3), LevelFilter::Debug);
        assert_eq!(level_for(5), LevelFilter::Debug);
        assert_eq!(level_for(6), LevelFilter::Trace);
        assert_eq!(level_for(u8::MAX), LevelFilter::Trace);
    }
}
