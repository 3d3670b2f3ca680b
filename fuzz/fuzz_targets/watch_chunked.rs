#![no_main]
//! See rkubelet::fuzzing::watch_chunked.
libfuzzer_sys::fuzz_target!(|data: &[u8]| rkubelet::fuzzing::watch_chunked(data));
