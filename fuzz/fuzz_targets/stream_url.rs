#![no_main]
//! See rkubelet::fuzzing::stream_url.
libfuzzer_sys::fuzz_target!(|data: &[u8]| rkubelet::fuzzing::stream_url(data));
