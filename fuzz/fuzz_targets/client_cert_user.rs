#![no_main]
//! See rkubelet::fuzzing::client_cert_user.
libfuzzer_sys::fuzz_target!(|data: &[u8]| rkubelet::fuzzing::client_cert_user(data));
