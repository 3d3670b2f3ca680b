#![no_main]
//! See rkubelet::fuzzing::manifest.
libfuzzer_sys::fuzz_target!(|data: &[u8]| rkubelet::fuzzing::manifest(data));
