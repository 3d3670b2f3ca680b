#![no_main]
//! See rkubelet::fuzzing::flags.
libfuzzer_sys::fuzz_target!(|data: &[u8]| rkubelet::fuzzing::flags(data));
