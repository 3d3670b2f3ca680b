#![no_main]
//! See rkubelet::fuzzing::watch_event.
libfuzzer_sys::fuzz_target!(|data: &[u8]| rkubelet::fuzzing::watch_event(data));
