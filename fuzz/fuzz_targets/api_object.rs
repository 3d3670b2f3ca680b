#![no_main]
//! See rkubelet::fuzzing::api_object.
libfuzzer_sys::fuzz_target!(|data: &[u8]| rkubelet::fuzzing::api_object(data));
