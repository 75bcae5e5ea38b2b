#!/usr/bin/env bash
# Provides krew, kubectl's plugin manager, for the test that installs kubectl-booking through it
# (tests/integration/tests/packaging_make.rs). Prints the path of the binary (and nothing else)
# on stdout; progress goes to stderr.
#
# KREW names a prebuilt krew to use instead. Otherwise krew is built from the Go module beside
# this script (sigs.k8s.io/krew, static and trimmed), once, into a cache of its own, keyed by
# go.mod, go.sum and this script (the control plane's cache and key are not touched):
# ${BOOKING_KREW_CACHE:-~/.cache/booking-operator/krew}/<version>-<key>/krew.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KREW_VERSION=v0.4.3

log() { printf 'krew: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

if [[ -n "${KREW:-}" ]]; then
    [[ -x "$KREW" ]] || die "KREW=$KREW is not an executable file"
    printf '%s\n' "$KREW"
    exit 0
fi

key="$(cat "$here/build.sh" "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-16)"
cache_root="${BOOKING_KREW_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/booking-operator/krew}"
built="$cache_root/$KREW_VERSION-$key"
if [[ ! -x "$built/krew" ]]; then
    command -v go >/dev/null || die "'go' is not on the PATH. Building krew needs Go 1.26 or newer; or set KREW to a prebuilt krew $KREW_VERSION."
    mkdir -p "$built"
    log "building krew $KREW_VERSION from sigs.k8s.io/krew/cmd/krew (once; cached in $built)"
    (cd "$here" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath \
        -ldflags "-s -w -X sigs.k8s.io/krew/internal/version.gitTag=$KREW_VERSION" \
        -o "$built/krew.tmp" sigs.k8s.io/krew/cmd/krew) \
        || die "building krew from sigs.k8s.io/krew/cmd/krew failed (module $here)"
    mv "$built/krew.tmp" "$built/krew"
fi
printf '%s\n' "$built/krew"
