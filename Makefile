# rkubelet: a Kubernetes kubelet in Rust.
#
#   make demo   run rkubelet standalone with etc/manifests against a private
#               containerd (root; Ctrl-C stops it and cleans up)
#   make test   the whole test suite (what .ci/run runs): cargo test, then vm-test
#   make check  fmt, clippy and the unit tests: no root, no containerd
#
# Everything builds in the release profile, tests included, so that gRPC's C
# core (grpcio-sys) is compiled once rather than once per profile.

SHELL := /bin/bash
CARGO ?= cargo
# Extra arguments for `cargo test`, e.g. make test CARGO_TEST_ARGS='config -- --nocapture'
CARGO_TEST_ARGS ?=
# Tests run at once in each test binary (TEST_THREADS= keeps libtest's
# default, the core count). Most of a test waits on containerd or a timer,
# so four take about 160 s off the suite on two cores (docs/testing.md).
TEST_THREADS ?= 4
TEST_THREADS_ENV = $(if $(TEST_THREADS),RUST_TEST_THREADS=$(TEST_THREADS))
CLIPPY_FLAGS ?= -D warnings
# VM_TEST=0: make test without the VM rows (make vm-test).
VM_TEST ?= 1

.DEFAULT_GOAL := help
.PHONY: help build check test vm-test demo bench soak fuzz static test-static size fmt clippy clean deps

help: ## this list
	@echo "usage: make TARGET"
	@grep -E '^[a-z-]+:.*## ' $(firstword $(MAKEFILE_LIST)) | \
		awk -F':.*## ' '{ printf "  %-11s %s\n", $$1, $$2 }'

build: ## cargo build --release (target/release/rkubelet)
	$(CARGO) build --release

check: ## fmt, clippy and the unit tests of every crate: needs neither root nor containerd
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --release --workspace --all-targets --features rkubelet/fault-injection -- $(CLIPPY_FLAGS)
	$(CARGO) clippy --release --workspace --lib --features rkubelet/fuzzing,rkubelet-dbus/fuzzing -- $(CLIPPY_FLAGS)
	$(CARGO) test --release --workspace --lib --bins --features rkubelet/fault-injection $(CARGO_TEST_ARGS)

test: deps ## THE test command: install missing system packages, cargo test --release with vm-test beside it (VM_TEST=0 skips it)
	$(TEST_THREADS_ENV) VM_TEST=$(VM_TEST) bash scripts/test.sh $(CARGO_TEST_ARGS)

vm-test: deps ## rkubelet on systemd + cgroup v2 (and v1) hosts: Debian bookworm and trixie booted in QEMU (tests/vm/README.md; root)
	bash scripts/vm-deps.sh
	bash tests/vm/vm-test.sh

demo: ## run rkubelet with etc/manifests against a private containerd (root; Ctrl-C cleans up)
	bash scripts/demo.sh

bench: build static ## the benchmarks: standalone, cluster mode (free, then as a real server charges), the runtime's own floor under it, probes; the 9 MB budget of the static binary; then 110 and 250 pods against their bars and the runtime's floor (each fails when a figure misses)
	bash tests/bench/run.sh
	bash tests/bench/cluster.sh
	bash tests/bench/realistic.sh
	bash tests/bench/runtime_floor.sh
	bash tests/bench/probes.sh
	bash tests/bench/budget.sh
	bash tests/bench/scale.sh

soak: build ## soak benchmark, not in CI: pod churn with probes and logs, standalone and cluster side by side, SOAK_SECS (3600); CSVs + PNG in tests/bench/results
	$(CARGO) build --release -p rkubelet-apiserver-double
	bash tests/bench/soak.sh

fuzz: ## every fuzz target (fuzz/) for FUZZ_SECS (60) each with cargo-fuzz, installed if missing; not in CI
	bash scripts/fuzz.sh

static: ## fully static x86_64 musl binary (cargo-zigbuild; installs its tools if missing)
	bash scripts/static.sh

test-static: deps static ## the end-to-end suites (real containerd, the API server double) against the static binary
	$(TEST_THREADS_ENV) RKUBELET_TEST_BIN=$(CURDIR)/target/static/x86_64-unknown-linux-musl/dist/rkubelet \
		$(CARGO) test --release --features rkubelet/fault-injection --no-fail-fast \
		--test e2e --test probes --test cluster --test kubelet_api --test volumes --test deviceplugin --test csi --test csi_block --test cm $(CARGO_TEST_ARGS)

size: ## where the static binary's bytes go: cargo bloat by crate, ELF sections, the 9 MB budget, idle RSS by mapping (root)
	bash scripts/size.sh

fmt: ## cargo fmt
	$(CARGO) fmt --all

clippy: ## cargo clippy (release profile, to reuse the built C core)
	$(CARGO) clippy --release --workspace --all-targets --features rkubelet/fault-injection -- $(CLIPPY_FLAGS)

clean: ## cargo clean
	$(CARGO) clean

deps: ## install missing Debian packages (containerd, runc, CNI plugins, busybox-static, cmake, g++, ...; root)
	bash scripts/deps.sh
