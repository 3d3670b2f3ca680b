#![no_main]
//! See rkubelet::fuzzing::cri_log_line.
libfuzzer_sys::fuzz_target!(|data: &[u8]| rkubelet::fuzzing::cri_log_line(data));
