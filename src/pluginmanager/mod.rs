//! The plugin manager (upstream pkg/kubelet/pluginmanager): one thread
//! that watches `<root-dir>/plugins_registry` for plugin sockets and
//! hands each plugin to the handler of its type (CSI drivers, device
//! plugins), taking it back when its socket goes.

mod cache;
