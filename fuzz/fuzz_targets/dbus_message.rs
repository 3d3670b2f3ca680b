#![no_main]
//! See rkubelet_dbus::fuzzing::read.
libfuzzer_sys::fuzz_target!(|data: &[u8]| rkubelet_dbus::fuzzing::read(data));
