//! Images (upstream `pkg/kubelet/images`): the image manager, which decides
//! per pull policy whether to pull and backs off failures; the puller,
//! whose own threads run the pulls; and image garbage collection.

pub mod gc;
pub mod image_manager;
pub mod puller;

pub use image_manager::{ImageManager, PullError};
pub use puller::PullerConfig;
