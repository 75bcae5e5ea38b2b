#!/usr/bin/env bash
# Provides the real control plane's binaries for the tests, the sandbox and the benchmarks:
# kube-apiserver, kube-controller-manager, kubectl, etcd and helm. Prints the folder that holds
# them (and nothing else) on stdout; progress goes to stderr.
#
# The envtest conventions come first, so a machine with setup-envtest's binaries needs no Go:
#   KUBEBUILDER_ASSETS        a folder with kube-apiserver, etcd and kubectl
#   TEST_ASSET_KUBE_APISERVER, TEST_ASSET_ETCD, TEST_ASSET_KUBECTL,
#   TEST_ASSET_KUBE_CONTROLLER_MANAGER, TEST_ASSET_HELM   one binary each
# Whatever these do not name is built from the Go modules beside this script (kubernetes/, etcd/,
# helm/), static and trimmed, once, into a cache keyed by the modules' go.mod and go.sum and by
# this script: ${BOOKING_CONTROL_PLANE_CACHE:-~/.cache/booking-operator/control-plane}/<key>/.
# When some binaries come from the environment, the output folder links them beside the built
# ones, so callers always get one folder.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# The release the tests run, and its versions as the binaries report them.
K8S_VERSION=v1.37.2
K8S_MAJOR=1
K8S_MINOR=37

log() { printf 'control-plane: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Where a binary named by the environment is, or empty.
from_env() {
    local name="$1" var="$2"
    if [[ -n "${!var:-}" ]]; then
        [[ -x "${!var}" ]] || die "$var=${!var} is not an executable file"
        printf '%s\n' "${!var}"
    elif [[ -n "${KUBEBUILDER_ASSETS:-}" && -x "${KUBEBUILDER_ASSETS}/$name" ]]; then
        printf '%s\n' "${KUBEBUILDER_ASSETS}/$name"
    fi
}

declare -A env_bin=(
    [kube-apiserver]="$(from_env kube-apiserver TEST_ASSET_KUBE_APISERVER)"
    [kube-controller-manager]="$(from_env kube-controller-manager TEST_ASSET_KUBE_CONTROLLER_MANAGER)"
    [kubectl]="$(from_env kubectl TEST_ASSET_KUBECTL)"
    [etcd]="$(from_env etcd TEST_ASSET_ETCD)"
    [helm]="$(from_env helm TEST_ASSET_HELM)"
)
if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
    for name in kube-apiserver etcd kubectl; do
        [[ -n "${env_bin[$name]}" ]] || die "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS has no executable $name"
    done
fi

key="$(cat "$here/build.sh" "$here"/*/go.mod "$here"/*/go.sum | sha256sum | cut -c1-16)"
cache_root="${BOOKING_CONTROL_PLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/booking-operator/control-plane}"
built="$cache_root/$K8S_VERSION-$key"
mkdir -p "$built"

need_go() {
    command -v go >/dev/null || die "'go' is not on the PATH. Building $1 needs Go 1.26 or newer; \
or point KUBEBUILDER_ASSETS (kube-apiserver, etcd, kubectl) and TEST_ASSET_KUBE_CONTROLLER_MANAGER, \
TEST_ASSET_HELM at prebuilt binaries."
}

# build <module folder> <package> <output name> [ldflags]
build() {
    local module="$1" pkg="$2" out="$3" ldflags="${4:-}"
    [[ -n "${env_bin[$out]}" ]] && return 0
    [[ -x "$built/$out" ]] && return 0
    # With setup-envtest's binaries and no Go, the two it does not ship are left out: the
    # harness then says which tests need them and which variable points at a prebuilt one.
    if [[ -n "${env_bin[kube-apiserver]}" ]] && ! command -v go >/dev/null; then
        case "$out" in
            kube-controller-manager) log "no go: kube-controller-manager not built; set TEST_ASSET_KUBE_CONTROLLER_MANAGER for namespace deletion, garbage collection and Pods"; return 0 ;;
            helm) log "no go: helm not built; set TEST_ASSET_HELM for the Helm tests"; return 0 ;;
        esac
    fi
    need_go "$out"
    log "building $out from $pkg (once; cached in $built)"
    local start=$SECONDS
    (cd "$here/$module" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath \
        -ldflags "-s -w $ldflags" -o "$built/$out.tmp" "$pkg") \
        || die "building $out from $pkg failed (module $here/$module)"
    mv "$built/$out.tmp" "$built/$out"
    log "built $out in $((SECONDS - start)) s"
}

version_ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    version_ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$K8S_MAJOR"
    version_ldflags+=" -X $pkg.gitMinor=$K8S_MINOR -X $pkg.gitTreeState=clean"
    version_ldflags+=" -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

build etcd go.etcd.io/etcd/server/v3 etcd
build kubernetes k8s.io/kubernetes/cmd/kube-apiserver kube-apiserver "$version_ldflags"
build kubernetes k8s.io/kubernetes/cmd/kube-controller-manager kube-controller-manager "$version_ldflags"
build kubernetes k8s.io/kubernetes/cmd/kubectl kubectl "$version_ldflags"
# Helm reads the Kubernetes version it was built against for its own default kubeVersion.
# Helm renders without a cluster for the Kubernetes version set at build time (its own Makefile
# sets it from its client-go, v0.37 here): the same release as the API server.
helm_ldflags="-X helm.sh/helm/v3/internal/version.version=v3.22.0 -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    helm_ldflags+=" -X $pkg.k8sVersionMajor=$K8S_MAJOR -X $pkg.k8sVersionMinor=$K8S_MINOR"
done
build helm helm.sh/helm/v3/cmd/helm helm "$helm_ldflags"

# One folder with all five: the built ones, and links to those the environment names.
out="$built"
any_from_env=""
for name in "${!env_bin[@]}"; do [[ -n "${env_bin[$name]}" ]] && any_from_env=1; done
if [[ -n "$any_from_env" ]]; then
    out="$cache_root/from-env-$(printf '%s\n' "${env_bin[@]}" "$key" | sha256sum | cut -c1-16)"
    mkdir -p "$out"
    for name in kube-apiserver kube-controller-manager kubectl etcd helm; do
        if [[ -n "${env_bin[$name]}" || -x "$built/$name" ]]; then
            ln -sfn "${env_bin[$name]:-$built/$name}" "$out/$name"
        fi
    done
fi
printf '%s\n' "$out"
