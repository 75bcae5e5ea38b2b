# The operator's developer entry points. `make test` runs every test of the workspace and
# installs what the tests need; `make demo` runs the whole system locally.

SHELL := /bin/bash
CARGO ?= cargo
VENV := .venv
PYTHON ?= python3
# Where cargo puts what it builds: `target`, or CARGO_TARGET_DIR when set.
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: all build test lint fmt-check clippy venv tools nextest control-plane crds demo sandbox-up sandbox-down help bench

all: build

help:
	@echo "make demo   - run the whole system locally (sandbox)"
	@echo "make sandbox-up / sandbox-down - the same stack in the background (target/sandbox/env)"
	@echo "make build  - build every binary and test of the workspace"
	@echo "make test   - formatting, lints and every test of the workspace"
	@echo "make crds   - regenerate manifests/crds from the Rust types"

build:
	$(CARGO) build --workspace --all-targets --locked

# Project-local virtualenv with the pinned Python tools the tests start (moto, aiosmtpd).
$(VENV)/.installed: tests/requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r tests/requirements.txt
	touch $@

venv: $(VENV)/.installed

# Debian packages the tests use: Lua runs Argo CD's health-check scripts of docs/argocd.md.
PACKAGING_APT := lua5.1
tools:
	@command -v lua5.1 >/dev/null \
	  || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(PACKAGING_APT); }

# The test runner, installed from crates.io when missing.
NEXTEST_VERSION := 0.9.151
nextest:
	@$(CARGO) nextest --version >/dev/null 2>&1 \
	  || { echo "installing cargo-nextest $(NEXTEST_VERSION) from crates.io (once, a few minutes)"; \
	       $(CARGO) install cargo-nextest --version $(NEXTEST_VERSION) --locked; }

# The real Kubernetes control plane of the tests (kube-apiserver, kube-controller-manager,
# kubectl, etcd, helm), built from their Go modules once and cached by version; setup-envtest's
# binaries are used instead when KUBEBUILDER_ASSETS or TEST_ASSET_* point at them.
control-plane:
	@bash tests/control-plane/build.sh >/dev/null

fmt-check:
	$(CARGO) fmt --all --check

clippy:
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

lint: fmt-check clippy

# Every test runs against one shared control plane that booking-control-plane starts before the
# suite and stops after it (tests that restart or reconfigure a cluster start their own).
test: venv tools nextest control-plane lint
	$(CARGO) build --workspace --bins --locked
	$(TARGET_DIR)/debug/booking-control-plane run -- $(CARGO) nextest run --workspace --locked --no-fail-fast
	$(CARGO) test --workspace --doc --locked

crds:
	$(CARGO) run --quiet --locked -p booking-shared --bin crdgen -- --out-dir manifests/crds
	cp manifests/crds/*.yaml manifests/helm/crds/

# The whole system on one machine (tests/sandbox): a real control plane (etcd, kube-apiserver,
# kube-controller-manager; built from Go modules once, see tests/control-plane/build.sh), moto,
# SMTP server, webhook and controller. `demo` runs in the foreground with a live view until
# Ctrl-C; `sandbox-up` starts the same in the background and writes target/sandbox/env;
# `sandbox-down` stops it. SANDBOX_BUILD is exactly the first build of `make test` (same
# packages, same features), so one never rebuilds what the other built.
SANDBOX_BUILD := $(CARGO) build --workspace --bins --locked

demo: venv
	$(SANDBOX_BUILD)
	$(TARGET_DIR)/debug/booking-sandbox demo

sandbox-up: venv
	$(SANDBOX_BUILD)
	$(TARGET_DIR)/debug/booking-sandbox up

# The same build as sandbox-up and `make test`: instant once built.
sandbox-down:
	$(SANDBOX_BUILD)
	$(TARGET_DIR)/debug/booking-sandbox down

# Benchmarks (BENCHMARKS.md): release builds of the webhook, the controller and the benchmark
# harness, then the suite, which writes target/bench/results.json. The servers under test run
# on CPU 0 and the load client on CPU 1 (see BENCHMARKS.md for how the cores are shared).
bench: venv
	$(CARGO) build --release --locked -p booking-webhook -p booking-controller -p booking-bench
	@mkdir -p target/bench
	set -o pipefail; $(TARGET_DIR)/release/booking-bench --bin-dir $(TARGET_DIR)/release --out target/bench/results.json \
	  2>&1 | tee target/bench/run.log
