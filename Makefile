# The operator's developer entry points. `make test` runs every test of the workspace and
# installs what the tests need; `make demo` runs the whole system locally.

SHELL := /bin/bash
CARGO ?= cargo
VENV := .venv
PYTHON ?= python3
# Where cargo puts what it builds: `target`, or CARGO_TARGET_DIR when set.
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: all build test lint fmt-check clippy venv tools nextest control-plane monitoring-tools krew-tool crds demo sandbox-up sandbox-down help bench
.PHONY: install uninstall run deploy undeploy docker-build docker-push list-instances mark-managed tag-instances plugin install-plugin krew-archive

all: build

help:
	@echo "make demo   - run the whole system locally (sandbox)"
	@echo "make sandbox-up / sandbox-down - the same stack in the background (target/sandbox/env)"
	@echo "make build  - build every binary and test of the workspace"
	@echo "make test   - formatting, lints and every test of the workspace"
	@echo "make crds   - regenerate manifests/crds from the Rust types"
	@echo ""
	@echo "Against the cluster of the current kubeconfig context (KUBECONFIG, CONTEXT=<name>, KUBECTL):"
	@echo "make install / uninstall - apply / delete the CRDs (manifests/crds)"
	@echo "make run    - controller and webhook on this machine, in the foreground (Ctrl-C stops both);"
	@echo "              NAMESPACE=<ns> to watch one, WEBHOOK=register WEBHOOK_URL=https://<host>:9443 to register the webhook"
	@echo "make deploy / undeploy - the kustomize install (DEPLOY_BASE=$(DEPLOY_BASE)) with CONTROLLER_IMG, WEBHOOK_IMG"
	@echo "make docker-build / docker-push - build / push CONTROLLER_IMG and WEBHOOK_IMG with CONTAINER_TOOL=$(CONTAINER_TOOL)"
	@echo "              (images: IMG_REGISTRY=$(IMG_REGISTRY) TAG=$(TAG), or CONTROLLER_IMG=… WEBHOOK_IMG=…)"
	@echo ""
	@echo "AWS machines, through the kubectl-booking plugin (REGION=\"eu-west-1 us-east-1\" to choose regions):"
	@echo "make list-instances - EC2 instances and RDS databases with their managed and group tags"
	@echo "make mark-managed instances=\"i-0abc i-0def\" enable=true|false - set or remove the managed tag"
	@echo "make tag-instances instances=\"i-0abc i-0def\" tag=web - put machines into the group web"
	@echo ""
	@echo "make plugin - release build of kubectl-booking; make install-plugin [PREFIX=dir] - cargo install it"
	@echo "make krew-archive - the plugin's release archive for this platform and its krew manifest (target/krew/)"

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

# What the monitoring tests check the Prometheus objects with: promtool, built from its Go module
# once, and prometheus-operator's CRDs; cached apart from the control plane (its own key), so
# changing one never rebuilds the other.
monitoring-tools:
	@bash tests/monitoring/build.sh >/dev/null

# krew, kubectl's plugin manager, for the test that installs kubectl-booking through it; built from
# its Go module once and cached apart from the other tools.
krew-tool:
	@bash tests/krew/build.sh >/dev/null

fmt-check:
	$(CARGO) fmt --all --check

clippy:
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

lint: fmt-check clippy

# Every test runs against one shared control plane that booking-control-plane starts before the
# suite and stops after it (tests that restart or reconfigure a cluster start their own).
test: venv tools nextest control-plane monitoring-tools krew-tool lint
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

# === The original operator's workflow: a cluster of the current kubeconfig context ===
#
# install/uninstall the CRDs, run the operator locally against the cluster, deploy/undeploy the
# kustomize install, build and push the images. Every cluster target names the context it acts
# on; KUBECONFIG is kubectl's, CONTEXT picks another context of it.

KUBECTL ?= kubectl
CONTEXT ?=
KUBECTL_CTX = $(KUBECTL)$(if $(CONTEXT), --context=$(CONTEXT))
# The workspace's version: the images' default tag and the plugin archive's version.
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
FIELD_MANAGER := booking-make

# Prints "make <target>: <what> context <name> (<server>)", or fails when there is no context.
define announce_context
ctx="$(or $(CONTEXT),$$($(KUBECTL) config current-context 2>/dev/null))"; \
[ -n "$$ctx" ] || { echo "make $@: no kubeconfig context: set KUBECONFIG=<file> or CONTEXT=<name> (see: $(KUBECTL) config get-contexts)" >&2; exit 2; }; \
server="$$($(KUBECTL_CTX) config view --minify -o jsonpath='{.clusters[0].cluster.server}')" \
  || { echo "make $@: context $$ctx is not in the kubeconfig (see: $(KUBECTL) config get-contexts)" >&2; exit 2; }; \
echo "make $@: $(1) context $$ctx ($$server)"
endef

CRD_FILES := $(sort $(wildcard manifests/crds/*.yaml))
CRD_NAMES := $(patsubst manifests/crds/%.yaml,crd/%,$(CRD_FILES))

install:
	@$(call announce_context,installing the CRDs into)
	$(KUBECTL_CTX) apply --server-side --force-conflicts --field-manager=$(FIELD_MANAGER) $(addprefix -f ,$(CRD_FILES))
	$(KUBECTL_CTX) wait --for=condition=Established --timeout=60s $(CRD_NAMES)

uninstall:
	@$(call announce_context,deleting the CRDs (and every booking object with them) from)
	$(KUBECTL_CTX) delete --ignore-not-found $(addprefix -f ,$(CRD_FILES))

# The controller and the webhook of this checkout, in the foreground (tests/sandbox/run-local.sh says
# what each setting does). AWS settings come from the environment (AWS_REGION or REGION,
# AWS_ENDPOINT_URL, AWS_PROFILE, …) as for the deployed controller.
NAMESPACE ?=
WEBHOOK ?= local
WEBHOOK_ADDR ?= 127.0.0.1:9443
WEBHOOK_URL ?= https://$(WEBHOOK_ADDR)
WEBHOOK_NAME ?= booking-webhook-local
WEBHOOK_ADMIN_ADDR ?= 127.0.0.1:9444
CONTROLLER_ADMIN_ADDR ?= 127.0.0.1:8080
REGION ?=
RUN_DIR ?= $(CURDIR)/target/run
# The workspace's build (the same as make test and make demo) unless set to a folder holding
# booking-controller and booking-webhook.
BIN_DIR ?= $(TARGET_DIR)/debug
run:
	$(if $(filter file,$(origin BIN_DIR)),$(SANDBOX_BUILD))
	@$(call announce_context,running the controller and the webhook against)
	@BIN_DIR='$(BIN_DIR)' KUBECTL='$(KUBECTL)' CONTEXT='$(CONTEXT)' STATE_DIR='$(RUN_DIR)' \
	  NAMESPACE='$(NAMESPACE)' WEBHOOK='$(WEBHOOK)' WEBHOOK_ADDR='$(WEBHOOK_ADDR)' WEBHOOK_URL='$(WEBHOOK_URL)' \
	  WEBHOOK_NAME='$(WEBHOOK_NAME)' WEBHOOK_ADMIN_ADDR='$(WEBHOOK_ADMIN_ADDR)' \
	  CONTROLLER_ADMIN_ADDR='$(CONTROLLER_ADMIN_ADDR)' $(if $(firstword $(REGION)),AWS_REGION='$(firstword $(REGION))') \
	  exec bash tests/sandbox/run-local.sh

# The images: IMG_REGISTRY/booking-{controller,webhook}:TAG unless named whole.
IMG_REGISTRY ?= ghcr.io/kotaicode
TAG ?= $(VERSION)
CONTROLLER_IMG ?= $(IMG_REGISTRY)/booking-controller:$(TAG)
WEBHOOK_IMG ?= $(IMG_REGISTRY)/booking-webhook:$(TAG)
CONTAINER_TOOL ?= docker
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)

define need_container_tool
command -v $(CONTAINER_TOOL) >/dev/null || { echo "make $@: CONTAINER_TOOL=$(CONTAINER_TOOL) is not on the PATH: install Docker, or set CONTAINER_TOOL=podman (or another tool with docker's build and push commands)" >&2; exit 2; }
endef

docker-build:
	@$(need_container_tool)
	$(CONTAINER_TOOL) build -f Dockerfile.controller -t $(CONTROLLER_IMG) --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) .
	$(CONTAINER_TOOL) build -f Dockerfile.webhook -t $(WEBHOOK_IMG) --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) .

docker-push:
	@$(need_container_tool)
	$(CONTAINER_TOOL) push $(CONTROLLER_IMG)
	$(CONTAINER_TOOL) push $(WEBHOOK_IMG)

# The kustomize install of DEPLOY_BASE (manifests/: certificates from cert-manager; certs/out
# after certs/make-dev-certs.sh: a development certificate) with the images above, through an
# overlay written to target/deploy and kubectl's built-in kustomize.
DEPLOY_BASE ?= manifests
DEPLOY_DIR ?= target/deploy

define deploy_overlay
[ -f "$(DEPLOY_BASE)/kustomization.yaml" ] || { echo "make $@: DEPLOY_BASE=$(DEPLOY_BASE) has no kustomization.yaml (manifests, or certs/out after certs/make-dev-certs.sh)" >&2; exit 2; }; \
mkdir -p $(DEPLOY_DIR) && base="$$(realpath --relative-to=$(DEPLOY_DIR) $(DEPLOY_BASE))" && \
printf '%s\n' \
  '# Written by make $@: $(DEPLOY_BASE) with the images CONTROLLER_IMG and WEBHOOK_IMG.' \
  'apiVersion: kustomize.config.k8s.io/v1beta1' 'kind: Kustomization' \
  "resources: [$$base]" 'patches:' \
  '  - target: {group: apps, kind: Deployment, name: booking-controller}' '    patch: |-' \
  '      {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "booking-controller"},' \
  '       "spec": {"template": {"spec": {"containers": [{"name": "controller", "image": "$(CONTROLLER_IMG)"}]}}}}' \
  '  - target: {group: apps, kind: Deployment, name: booking-webhook}' '    patch: |-' \
  '      {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "booking-webhook"},' \
  '       "spec": {"template": {"spec": {"containers": [{"name": "webhook", "image": "$(WEBHOOK_IMG)"}]}}}}' \
  > $(DEPLOY_DIR)/kustomization.yaml
endef

deploy:
	@$(call announce_context,deploying $(CONTROLLER_IMG) and $(WEBHOOK_IMG) to)
	@$(deploy_overlay)
	$(KUBECTL_CTX) apply --server-side --force-conflicts --field-manager=$(FIELD_MANAGER) -k $(DEPLOY_DIR)

undeploy:
	@$(call announce_context,deleting the install (CRDs and every booking object included) from)
	@$(deploy_overlay)
	$(KUBECTL_CTX) delete --ignore-not-found -k $(DEPLOY_DIR)

# === AWS machines, through the kubectl-booking plugin (the original's make targets) ===
#
# KUBECTL_BOOKING is the workspace's build (the same build as make test and make demo) unless
# set to another kubectl-booking. REGION: one region or several, space-separated.
KUBECTL_BOOKING ?= $(TARGET_DIR)/debug/kubectl-booking
PLUGIN_BUILD = $(if $(filter file,$(origin KUBECTL_BOOKING)),$(SANDBOX_BUILD))
PLUGIN_REGIONS = $(foreach r,$(REGION),--region $(r))

# $(call need,VAR,example): stops make with the missing parameter and an example.
need = $(if $(strip $($(1))),,$(error make $@: the parameter $(1) is missing, e.g. $(2)))

list-instances:
	$(PLUGIN_BUILD)
	$(KUBECTL_BOOKING) instances $(PLUGIN_REGIONS)

mark-managed:
	$(call need,instances,make mark-managed instances="i-0abc i-0def" enable=true)
	$(call need,enable,make mark-managed instances="$(instances)" enable=true)
	$(if $(filter-out true false,$(enable)),$(error make mark-managed: enable=$(enable) is neither true nor false, e.g. make mark-managed instances="$(instances)" enable=false))
	$(PLUGIN_BUILD)
	$(KUBECTL_BOOKING) manage $(instances)$(if $(filter false,$(enable)), --disable) $(PLUGIN_REGIONS)

tag-instances:
	$(call need,instances,make tag-instances instances="i-0abc i-0def" tag=web)
	$(call need,tag,make tag-instances instances="$(instances)" tag=web)
	$(PLUGIN_BUILD)
	$(KUBECTL_BOOKING) tag $(instances) --group $(tag) $(PLUGIN_REGIONS)

# === Installing the plugin ===
#
# `make install-plugin` puts kubectl-booking into $(PREFIX)/bin (cargo's default, ~/.cargo/bin,
# when PREFIX is empty); kubectl runs it as `kubectl booking` when that folder is on the PATH.
PREFIX ?=
plugin:
	$(CARGO) build --release --locked -p kubectl-booking
	@echo "built $(TARGET_DIR)/release/kubectl-booking"

install-plugin:
	$(CARGO) install --path controller/plugin --locked$(if $(PREFIX), --root $(PREFIX))
	@echo "installed $(or $(PREFIX),$${CARGO_HOME:-$$HOME/.cargo})/bin/kubectl-booking: kubectl runs it as 'kubectl booking' when that folder is on the PATH"

# The release archive of this platform for krew: target/krew/kubectl-booking_v<version>_<os>_<arch>.tar.gz
# (the binary, LICENSE, README.md) and target/krew/booking.yaml, controller/plugin/krew/booking.yaml with the
# sha256 and uri (KREW_URI_BASE/<archive>) of every archive in target/krew, for
#   kubectl krew install --manifest=target/krew/booking.yaml --archive=target/krew/<archive>
# ARCHIVE_BIN is a release build of kubectl-booking unless set to another binary.
ARCHIVE_BIN ?= $(TARGET_DIR)/release/kubectl-booking
KREW_OUT ?= target/krew
KREW_URI_BASE ?= https://github.com/kotaicode/resource-booking-operator/releases/download/v$(VERSION)
KREW_OS := $(shell uname -s | tr A-Z a-z)
KREW_ARCH := $(patsubst x86_64,amd64,$(patsubst aarch64,arm64,$(shell uname -m)))
krew-archive:
	$(if $(filter file,$(origin ARCHIVE_BIN)),$(CARGO) build --release --locked -p kubectl-booking)
	bash controller/plugin/krew/archive.sh --bin $(ARCHIVE_BIN) --version v$(VERSION) --os $(KREW_OS) --arch $(KREW_ARCH) \
	  --manifest controller/plugin/krew/booking.yaml --uri-base $(KREW_URI_BASE) --out-dir $(KREW_OUT)
