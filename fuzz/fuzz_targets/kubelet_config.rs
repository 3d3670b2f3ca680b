#![no_main]
//! See rkubelet::fuzzing::kubelet_config.
libfuzzer_sys::fuzz_target!(|data: &[u8]| rkubelet::fuzzing::kubelet_config(data));
