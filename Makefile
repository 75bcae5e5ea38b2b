# The operator's developer entry points. `make test` runs every test of the workspace and
# installs what the tests need; `make demo` runs the whole system locally.

SHELL := /bin/bash
CARGO ?= cargo
VENV := .venv
PYTHON ?= python3
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: all build test lint fmt-check clippy unit venv crds demo help

all: build

help:
	@echo "make demo   - run the whole system locally (sandbox)"
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

fmt-check:
	$(CARGO) fmt --all --check

clippy:
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

lint: fmt-check clippy

test: venv lint
	$(CARGO) nextest run --workspace --locked --no-fail-fast
	$(CARGO) test --workspace --doc --locked

crds:
	$(CARGO) run --quiet --locked -p booking-shared --bin crdgen -- --out-dir manifests/crds

# Until the sandbox lands, the demo shows what the two binaries accept.
demo: build
	./target/debug/booking-controller --help
	./target/debug/booking-webhook --help
