#![no_main]
//! See rkubelet::fuzzing::quantity.
libfuzzer_sys::fuzz_target!(|data: &[u8]| rkubelet::fuzzing::quantity(data));
