#!/usr/bin/env bash
# Provides what the monitoring tests check the operator's Prometheus objects with, in one folder
# whose path it prints (and nothing else) on stdout; progress goes to stderr:
#   promtool   Prometheus's rule checker (`promtool check rules`, `promtool test rules`), built
#              from the Go module promtool/ beside this script, static and trimmed;
#   crds/      prometheus-operator's ServiceMonitor and PrometheusRule CustomResourceDefinitions,
#              from the module zip of the release that prometheus-operator/go.mod pins.
# Both come from the Go module proxy once, into a cache keyed by those modules' go.mod and go.sum:
# ${BOOKING_MONITORING_CACHE:-~/.cache/booking-operator/monitoring}/.
# This cache is the monitoring tests' own: changing it never rebuilds the control plane
# (tests/control-plane/build.sh). TEST_ASSET_PROMTOOL names a prebuilt promtool instead.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

log() { printf 'monitoring: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Each is cached by its own module's go.mod and go.sum: a new CRD release never rebuilds promtool
# (several minutes on two cores), and the folder printed links both.
sum() { cat "$@" | sha256sum | cut -c1-16; }
cache_root="${BOOKING_MONITORING_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/booking-operator/monitoring}"
promtool_dir="$cache_root/promtool-$(sum "$here/promtool/go.mod" "$here/promtool/go.sum")"
crds_dir="$cache_root/crds-$(sum "$here/prometheus-operator/go.mod" "$here/prometheus-operator/go.sum")"
built="$cache_root/$(printf '%s\n' "$promtool_dir" "$crds_dir" "${TEST_ASSET_PROMTOOL:-}" | sha256sum | cut -c1-16)"
mkdir -p "$promtool_dir" "$built"

command -v go >/dev/null || die "'go' is not on the PATH: the monitoring tests need Go 1.26 or newer \
to fetch prometheus-operator's CRDs and build promtool (TEST_ASSET_PROMTOOL may name a prebuilt promtool)."

if [[ -n "${TEST_ASSET_PROMTOOL:-}" ]]; then
    [[ -x "$TEST_ASSET_PROMTOOL" ]] || die "TEST_ASSET_PROMTOOL=$TEST_ASSET_PROMTOOL is not an executable file"
    ln -sfn "$TEST_ASSET_PROMTOOL" "$built/promtool"
else
    if [[ ! -x "$promtool_dir/promtool" ]]; then
        log "building promtool from github.com/prometheus/prometheus/cmd/promtool (once; cached in $promtool_dir)"
        start=$SECONDS
        (cd "$here/promtool" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath \
            -ldflags "-s -w" -o "$promtool_dir/promtool.tmp" github.com/prometheus/prometheus/cmd/promtool) \
            || die "building promtool failed (module $here/promtool)"
        mv "$promtool_dir/promtool.tmp" "$promtool_dir/promtool"
        log "built promtool in $((SECONDS - start)) s"
    fi
    ln -sfn "$promtool_dir/promtool" "$built/promtool"
fi

if [[ ! -f "$crds_dir/.done" ]]; then
    log "fetching prometheus-operator's CRDs (once; cached in $crds_dir)"
    dir="$(cd "$here/prometheus-operator" && GOFLAGS=-mod=readonly \
        go mod download -json github.com/prometheus-operator/prometheus-operator \
        | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    [[ -n "$dir" && -d "$dir/example/prometheus-operator-crd" ]] \
        || die "the prometheus-operator module has no example/prometheus-operator-crd (module $here/prometheus-operator)"
    mkdir -p "$crds_dir"
    for crd in servicemonitors prometheusrules; do
        cp "$dir/example/prometheus-operator-crd/monitoring.coreos.com_$crd.yaml" "$crds_dir/"
    done
    touch "$crds_dir/.done"
fi
ln -sfn "$crds_dir" "$built/crds"
printf '%s\n' "$built"
