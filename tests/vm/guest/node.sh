# The node inside the VM: containerd as Debian's service with the driver's
# SystemdCgroup, the API server double as a transient service, and
# rkubelet as etc/rkubelet.service with its kubeadm drop-in. Sourced by
# run.sh.

DOUBLE_PORT=6443
# kubeReserved memory, so that kubepods' limit is not just the RAM.
KUBE_RESERVED=268435456
# The hard eviction threshold of memory.available; the only one set, so no
# disk threshold can evict a test's pods.
EVICTION_HARD_MIB=300
WATCHDOG_SEC=20

# What every driver shares: binaries, unit files, images, the CNI config.
install_once() {
    install -m 0755 "$BIN/rkubelet" /usr/local/bin/rkubelet
    install -m 0644 "$P/etc/rkubelet.service" /etc/systemd/system/rkubelet.service
    install -D -m 0644 "$P/etc/rkubelet.service.d/10-kubeadm.conf" \
        /etc/systemd/system/rkubelet.service.d/10-kubeadm.conf
    # The double answers for the whole cluster: it must outlive rkubelet
    # when the node shuts down, as a real control plane would.
    # The watchdog, as an operator would configure it (upstream's docs).
    cat >/etc/systemd/system/rkubelet.service.d/20-vm-test.conf <<EOF
[Unit]
After=double.service
[Service]
WatchdogSec=$WATCHDOG_SEC
RestartSec=2
EOF
    mkdir -p /etc/cni/net.d
    cat >/etc/cni/net.d/10-rkvm.conflist <<EOF
{"cniVersion": "1.0.0", "name": "rkvm", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.85.0.0/24"}]],
            "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
EOF
    systemctl daemon-reload
}

containerd_config() {
    local systemd_cgroup=false
    [[ $DRIVER == systemd ]] && systemd_cgroup=true
    mkdir -p /etc/containerd
    cat >/etc/containerd/config.toml <<EOF
version = 2
[plugins."io.containerd.grpc.v1.cri"]
  restrict_oom_score_adj = true
  sandbox_image = "registry.k8s.io/pause:3.9"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = $systemd_cgroup
EOF
    # containerd 1.7 applies the CDI devices of CRI's cdi_devices (1.6
    # has neither the field nor the option).
    if [[ $RKVM_RELEASE == trixie ]]; then
        sed -i 's|^  restrict_oom_score_adj = true$|&\n  enable_cdi = true\n  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]|' \
            /etc/containerd/config.toml
    fi
}

kubelet_config() {
    mkdir -p /var/lib/kubelet /etc/kubernetes
    cat >/var/lib/kubelet/config.yaml <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: $DRIVER
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
failSwapOn: false
kubeReserved:
  memory: "$KUBE_RESERVED"
evictionHard:
  memory.available: "${EVICTION_HARD_MIB}Mi"
podPidsLimit: 512
featureGates:
  ImageVolume: true
readOnlyPort: 10255
syncFrequency: 10s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 80
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
EOF
    if [[ ${RKVM_SHUTDOWN:-0} == 1 && $DRIVER == "$last" ]]; then
        cat >>/var/lib/kubelet/config.yaml <<EOF
shutdownGracePeriodByPodPriority:
- priority: 0
  shutdownGracePeriodSeconds: 8
- priority: 2000000000
  shutdownGracePeriodSeconds: 8
EOF
    fi
    cp "$DOUBLE_DIR/kubelet-$NODE.kubeconfig" /etc/kubernetes/kubelet.conf
}

start_double() {
    DOUBLE_DIR=$R/double-$DRIVER
    rm -rf "$DOUBLE_DIR"
    mkdir -p "$DOUBLE_DIR"
    # Its state log is on the payload disk, kept until the double stops.
    systemd-run --unit=double --quiet --collect --property=RequiresMountsFor="$P" \
        "$BIN/apiserver-double" --dir "$DOUBLE_DIR" --port "$DOUBLE_PORT" --node-name "$NODE" \
        --feature-gates ImageVolume=true || return 1
    wait_for 60 "the double's kubeconfig" test -s "$DOUBLE_DIR/kubelet-$NODE.kubeconfig" || return 1
    wait_for 60 "the double's admin token" test -s "$DOUBLE_DIR/admin-token" || return 1
    cat >/root/admin.kubeconfig <<EOF
apiVersion: v1
kind: Config
clusters:
- name: double
  cluster: {server: "https://127.0.0.1:$DOUBLE_PORT", certificate-authority: "$DOUBLE_DIR/ca.crt"}
users:
- name: admin
  user: {token: "$(cat "$DOUBLE_DIR/admin-token")"}
contexts:
- name: double
  context: {cluster: double, user: admin}
current-context: double
EOF
    wait_for 60 "the double to answer" k get --raw /version
}

import_images() {
    local img
    for img in busybox pause; do
        timeout 120 ctr -n k8s.io images import "$P/images/$img.tar" >/dev/null || return 1
    done
}

setup_node() {
    containerd_config
    systemctl restart containerd || return 1
    wait_for 60 "containerd" ctr version || return 1
    import_images || { log "image import failed"; return 1; }
    start_double || { log "the double did not start"; return 1; }
    kubelet_config
    # Type=notify: start returns once rkubelet said READY=1.
    local t0=$SECONDS
    if timeout 120 systemctl start rkubelet; then
        if curl -fsS --max-time 2 http://127.0.0.1:10248/healthz >/dev/null; then
            ok "service-ready-means-healthy"
        else
            not_ok "service-ready-means-healthy" "systemctl start returned but healthz did not answer"
        fi
    else
        not_ok "service-ready-means-healthy" "systemctl start rkubelet failed: $(systemctl is-active rkubelet)"
        return 1
    fi
    log "rkubelet.service started in $((SECONDS - t0)) s"
    if wait_for 120 "node Ready" node_ready; then ok node-ready; else not_ok node-ready "not Ready in 120 s"; return 1; fi
}

collect_logs() {
    journalctl -u rkubelet --no-pager -o short-monotonic >"$R/rkubelet-$DRIVER.log" 2>&1
    journalctl -u containerd --no-pager -o short-monotonic >"$R/containerd-$DRIVER.log" 2>&1
}

teardown_node() {
    k delete pods --all --grace-period=1 --wait=false >/dev/null 2>&1
    systemctl stop rkubelet
    # What the pods left behind, so the next driver starts clean.
    remove_cri_containers
    systemctl stop double 2>/dev/null
    systemctl reset-failed 2>/dev/null
    systemctl stop containerd
}

# Removes every CRI pod of this driver's run with ctr (no crictl in
# Debian 12): tasks killed, containers deleted.
remove_cri_containers() {
    local c
    for c in $(ctr -n k8s.io containers list -q 2>/dev/null); do
        ctr -n k8s.io tasks kill -s KILL "$c" >/dev/null 2>&1
        ctr -n k8s.io tasks delete -f "$c" >/dev/null 2>&1
        ctr -n k8s.io containers delete "$c" >/dev/null 2>&1
    done
    rm -rf /var/lib/kubelet/pods /var/lib/kubelet/cpu_manager_state /var/lib/kubelet/memory_manager_state
}
