//! Helpers the volume plugins share (upstream `pkg/volume/util`).

pub mod atomic_writer;
pub mod fs;
pub mod mount;
pub mod ownership;
pub mod payload;
pub mod subpath;
