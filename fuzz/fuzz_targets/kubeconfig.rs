#![no_main]
//! See rkubelet::fuzzing::kubeconfig.
libfuzzer_sys::fuzz_target!(|data: &[u8]| rkubelet::fuzzing::kubeconfig(data));
