#![no_main]
//! See rkubelet::fuzzing::http_request.
libfuzzer_sys::fuzz_target!(|data: &[u8]| rkubelet::fuzzing::http_request(data));
