//! Image management beside the pull path (upstream `pkg/kubelet/images`);
//! pulls live in `kuberuntime::image`.

pub mod gc;
