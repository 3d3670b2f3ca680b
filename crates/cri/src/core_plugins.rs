//! The plugins gRPC's C core registers at `grpc_init`: only what our two
//! clients use.
//!
//! The C core builds its channel stacks, resolvers and load-balancing
//! policies from one registry, filled by `grpc_core::BuildCoreConfiguration`
//! (grpcio-sys's `src/core/plugin_registry/grpc_plugin_registry.cc`). That
//! registry names every plugin of the library, so the linker keeps them all:
//! grpclb with its protobufs, priority, weighted_target, outlier detection,
//! round_robin and weighted_round_robin (xDS's and look-aside balancers), the
//! fault-injection and backend-metric (ORCA) filters, a test resolver and the
//! HTTP CONNECT proxy. rkubelet dials two kinds of target: the CRI runtime on
//! a unix socket (`unix:/path`, the sockaddr resolver) and a pod's gRPC
//! health endpoint (`host:port`, the native DNS resolver), always with
//! pick_first and no service config. Defining the registry function here
//! replaces the library's: the archive member that holds gRPC's definition
//! (it defines nothing else) is then never linked, and the plugins only it
//! names go with it (177 KB of the static binary, README "Static binary").
//!
//! Kept, in gRPC's order: event-engine channel args, the TCP connect
//! handshaker, pick_first, the client channel, the security handshakers
//! (insecure credentials go through them), the authority, idle, HTTP,
//! deadline, message-size and service-config filters, the resource quota,
//! the DNS and sockaddr resolvers, the security filters, the (empty) extra
//! filters and the built-ins (the connected channel).
//!
//! Dropped, beyond the balancers: the HTTP CONNECT proxy mapper and its
//! handshaker. Upstream dials the runtime and probes with a context dialer,
//! which grpc-go never sends through a proxy; gRPC's C core would otherwise
//! send a gRPC probe of a pod through `$grpc_proxy`/`$http_proxy`.
//!
//! Each function below is a C++ function `void f(grpc_core::
//! CoreConfiguration::Builder*)`; on the SysV and AAPCS64 ABIs a free C++
//! function of one pointer is called as a C one, so they are declared with
//! their mangled names. A registration function renamed by a grpcio-sys
//! upgrade fails the link; a renamed `BuildCoreConfiguration` would leave
//! gRPC's full registry in place, which the proxy test below and the size
//! budget (`make bench`) catch.

use std::ffi::c_void;

/// `grpc_core::CoreConfiguration::Builder`, only ever passed through.
type Builder = *mut c_void;

extern "C" {
    #[link_name = "_ZN17grpc_event_engine12experimental44RegisterEventEngineChannelArgPreconditioningEPN9grpc_core17CoreConfiguration7BuilderE"]
    fn register_event_engine_channel_arg_preconditioning(builder: Builder);
    #[link_name = "_ZN9grpc_core28RegisterTCPConnectHandshakerEPNS_17CoreConfiguration7BuilderE"]
    fn register_tcp_connect_handshaker(builder: Builder);
    #[link_name = "_ZN9grpc_core25RegisterPickFirstLbPolicyEPNS_17CoreConfiguration7BuilderE"]
    fn register_pick_first_lb_policy(builder: Builder);
    #[link_name = "_ZN9grpc_core31BuildClientChannelConfigurationEPNS_17CoreConfiguration7BuilderE"]
    fn build_client_channel_configuration(builder: Builder);
    #[link_name = "_ZN9grpc_core35SecurityRegisterHandshakerFactoriesEPNS_17CoreConfiguration7BuilderE"]
    fn security_register_handshaker_factories(builder: Builder);
    #[link_name = "_ZN9grpc_core29RegisterClientAuthorityFilterEPNS_17CoreConfiguration7BuilderE"]
    fn register_client_authority_filter(builder: Builder);
    #[link_name = "_ZN9grpc_core26RegisterChannelIdleFiltersEPNS_17CoreConfiguration7BuilderE"]
    fn register_channel_idle_filters(builder: Builder);
    #[link_name = "_ZN9grpc_core19RegisterHttpFiltersEPNS_17CoreConfiguration7BuilderE"]
    fn register_http_filters(builder: Builder);
    #[link_name = "_ZN9grpc_core22RegisterDeadlineFilterEPNS_17CoreConfiguration7BuilderE"]
    fn register_deadline_filter(builder: Builder);
    #[link_name = "_ZN9grpc_core25RegisterMessageSizeFilterEPNS_17CoreConfiguration7BuilderE"]
    fn register_message_size_filter(builder: Builder);
    #[link_name = "_ZN9grpc_core37RegisterServiceConfigChannelArgFilterEPNS_17CoreConfiguration7BuilderE"]
    fn register_service_config_channel_arg_filter(builder: Builder);
    #[link_name = "_ZN9grpc_core21RegisterResourceQuotaEPNS_17CoreConfiguration7BuilderE"]
    fn register_resource_quota(builder: Builder);
    #[link_name = "_ZN9grpc_core19RegisterDnsResolverEPNS_17CoreConfiguration7BuilderE"]
    fn register_dns_resolver(builder: Builder);
    #[link_name = "_ZN9grpc_core24RegisterSockaddrResolverEPNS_17CoreConfiguration7BuilderE"]
    fn register_sockaddr_resolver(builder: Builder);
    #[link_name = "_ZN9grpc_core23RegisterSecurityFiltersEPNS_17CoreConfiguration7BuilderE"]
    fn register_security_filters(builder: Builder);
    #[link_name = "_ZN9grpc_core20RegisterExtraFiltersEPNS_17CoreConfiguration7BuilderE"]
    fn register_extra_filters(builder: Builder);
    #[link_name = "_ZN9grpc_core16RegisterBuiltinsEPNS_17CoreConfiguration7BuilderE"]
    fn register_builtins(builder: Builder);
}

/// `grpc_core::BuildCoreConfiguration`: called by the C core when it first
/// needs a configuration (two threads may both build one; the loser's is
/// dropped, so this keeps no state of its own).
#[export_name = "_ZN9grpc_core22BuildCoreConfigurationEPNS_17CoreConfiguration7BuilderE"]
extern "C" fn build_core_configuration(builder: Builder) {
    // SAFETY: each is a registration function of the linked C core, called
    // with the builder the C core handed us, in the order gRPC's own
    // registry calls them (a subset of it, order kept; handshakers are run
    // in the order of their own priorities, whatever the registration
    // order).
    unsafe {
        register_event_engine_channel_arg_preconditioning(builder);
        register_tcp_connect_handshaker(builder);
        register_pick_first_lb_policy(builder);
        build_client_channel_configuration(builder);
        security_register_handshaker_factories(builder);
        register_client_authority_filter(builder);
        register_channel_idle_filters(builder);
        register_http_filters(builder);
        register_deadline_filter(builder);
        register_message_size_filter(builder);
        register_service_config_channel_arg_filter(builder);
        register_resource_quota(builder);
        register_dns_resolver(builder);
        register_sockaddr_resolver(builder);
        register_security_filters(builder);
        register_extra_filters(builder);
        register_builtins(builder);
    }
}

/// Keeps the registry above in the link. Called before any gRPC channel is
/// built: a codegen unit of this library is linked only when
/// something in it is referenced, and the C core's reference alone comes
/// too late in the link order to pull it in.
pub fn link() {
    std::hint::black_box(build_core_configuration as extern "C" fn(Builder));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;
    use std::net::TcpListener;
    use std::sync::Arc;
    use std::time::Duration;

    use grpcio::{CallOption, ChannelBuilder, EnvBuilder};

    use crate::health::HealthCheckRequest;
    use crate::health_grpc::HealthClient;

    extern "C" {
        #[link_name = "_ZN9grpc_core22BuildCoreConfigurationEPNS_17CoreConfiguration7BuilderE"]
        fn linked_build_core_configuration(builder: Builder);
    }

    /// Our registry is what the C core's name for it resolves to: an export
    /// lost or renamed on our side links gRPC's own registry, and this
    /// fails. (A rename on gRPC's side leaves this passing; the proxy test
    /// below and the size budget catch that.)
    #[test]
    fn the_core_calls_this_registry() {
        let linked = linked_build_core_configuration as unsafe extern "C" fn(Builder) as usize;
        let ours = build_core_configuration as extern "C" fn(Builder) as usize;
        assert_eq!(linked, ours);
    }

    /// No HTTP CONNECT proxy is registered: a channel given a proxy (the
    /// channel-argument form of `$grpc_proxy`, which gRPC's own registry
    /// honours) still dials its target directly, as upstream's dialers do.
    #[test]
    fn calls_never_go_through_an_http_proxy() {
        // gRPC's own registry skips the proxy for a host in $no_proxy, and
        // this test would then prove nothing.
        for var in ["no_grpc_proxy", "no_proxy"] {
            let value = std::env::var(var).unwrap_or_default();
            assert!(
                !value.contains("127.0.0.2"),
                "unset {var} (it names 127.0.0.2) to run this test"
            );
        }
        let proxy = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let target = TcpListener::bind("127.0.0.2:0").expect("bind the target");
        let proxy_url = format!("http://{}", proxy.local_addr().expect("proxy address"));
        let target_addr = target.local_addr().expect("target address").to_string();
        link();
        let env = Arc::new(
            EnvBuilder::new()
                .cq_count(1)
                .name_prefix("test-grpc")
                .build(),
        );
        let channel = ChannelBuilder::new(env)
            .raw_cfg_string(
                CString::new("grpc.http_proxy").expect("no NUL"),
                CString::new(proxy_url).expect("no NUL"),
            )
            .connect(&target_addr);
        // The target accepts TCP but never speaks HTTP/2: the call fails by
        // its deadline, after the connection was made.
        let result = HealthClient::new(channel).check(
            &HealthCheckRequest::default(),
            CallOption::default().timeout(Duration::from_secs(1)),
        );
        assert!(result.is_err(), "nothing here answers a health check");
        proxy.set_nonblocking(true).expect("nonblocking");
        target.set_nonblocking(true).expect("nonblocking");
        assert!(proxy.accept().is_err(), "the call went to the proxy");
        assert!(target.accept().is_ok(), "the target was never dialed");
    }
}
