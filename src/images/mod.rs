//! Images (upstream `pkg/kubelet/images`): the image manager, which decides
//! per pull policy whether to pull and backs off failures; the puller,
//! whose own threads run the pulls; image garbage collection; and the
//! image list node status reports, listed every 30 s.

pub mod gc;
pub mod image_manager;
pub mod list_cache;
pub mod puller;

pub use image_manager::{ImageManager, PullError};
pub use puller::PullerConfig;
