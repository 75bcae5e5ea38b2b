#!/usr/bin/env bash
# `make run`: booking-controller and booking-webhook on this machine, in the foreground, against
# the cluster of the current kubeconfig context (CONTEXT picks another); Ctrl-C stops both.
#
# The CRDs must be installed (`make install`). AWS comes from the environment as for the
# deployed controller: AWS_REGION, AWS_ENDPOINT_URL, AWS_PROFILE, AWS_ACCESS_KEY_ID, … all pass
# through. The webhook serves on WEBHOOK_ADDR with a development certificate
# (certs/make-dev-certs.sh, for the host of WEBHOOK_URL); a remote API server cannot reach it,
# so it is registered with the cluster only when asked (WEBHOOK=register), as webhook
# configurations named WEBHOOK_NAME that call WEBHOOK_URL and are deleted again on exit.
#
# Settings (environment; the Makefile passes its variables):
#   BIN_DIR                folder of booking-controller and booking-webhook (required)
#   KUBECTL                kubectl to use (default: kubectl)
#   KUBECONFIG, CONTEXT    the cluster (default: kubectl's current context)
#   STATE_DIR              kubeconfig, certificates and logs of the run (default: target/run)
#   NAMESPACE              the only namespace the controller reconciles, and that a registered
#                          webhook admits (default: all namespaces)
#   WEBHOOK_ADDR           the webhook's HTTPS address (default: 127.0.0.1:9443)
#   WEBHOOK_ADMIN_ADDR     the webhook's /healthz, /readyz, /metrics (default: 127.0.0.1:9444)
#   CONTROLLER_ADMIN_ADDR  the controller's /healthz, /readyz, /metrics (default: 127.0.0.1:8080)
#   WEBHOOK                local (default: serve only) or register
#   WEBHOOK_URL            what the API server calls (default: https://<WEBHOOK_ADDR>)
#   WEBHOOK_NAME           name of the registered configurations (default: booking-webhook-local)
#   LEADER_ELECT           the controller's leader election (default: false, one local replica)
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
die() { echo "make run: $*" >&2; exit 2; }

: "${BIN_DIR:?BIN_DIR must name the folder of booking-controller and booking-webhook}"
KUBECTL=${KUBECTL:-kubectl}
STATE_DIR=${STATE_DIR:-$repo_root/target/run}
WEBHOOK_ADDR=${WEBHOOK_ADDR:-127.0.0.1:9443}
WEBHOOK_ADMIN_ADDR=${WEBHOOK_ADMIN_ADDR:-127.0.0.1:9444}
CONTROLLER_ADMIN_ADDR=${CONTROLLER_ADMIN_ADDR:-127.0.0.1:8080}
WEBHOOK=${WEBHOOK:-local}
WEBHOOK_URL=${WEBHOOK_URL:-https://$WEBHOOK_ADDR}
WEBHOOK_NAME=${WEBHOOK_NAME:-booking-webhook-local}
NAMESPACE=${NAMESPACE:-}

case "$WEBHOOK" in
  local|register) ;;
  *) die "WEBHOOK=$WEBHOOK: use WEBHOOK=local (serve only) or WEBHOOK=register (also register it with the cluster)" ;;
esac
url_form='^https://([^/:]+|\[[0-9a-fA-F:]+\])(:[0-9]+)?/?$'
[[ "$WEBHOOK_URL" =~ $url_form ]] \
  || die "WEBHOOK_URL=$WEBHOOK_URL: expected https://HOST[:PORT] (no path), e.g. https://127.0.0.1:9443"
webhook_host=${BASH_REMATCH[1]}
webhook_host=${webhook_host#[}; webhook_host=${webhook_host%]}
WEBHOOK_URL=${WEBHOOK_URL%/}
command -v "$KUBECTL" >/dev/null || die "KUBECTL=$KUBECTL is not on the PATH; install kubectl or set KUBECTL=/path/to/kubectl"
command -v python3 >/dev/null || die "python3 is needed to register the webhook configurations"
for bin in booking-controller booking-webhook; do
  [[ -x "$BIN_DIR/$bin" ]] || die "BIN_DIR=$BIN_DIR holds no $bin: leave BIN_DIR unset (make builds both), or name the folder of booking-controller and booking-webhook"
done

mkdir -p "$STATE_DIR"
# One kubeconfig with the chosen context only, credentials inlined: both binaries and every
# kubectl below use exactly that cluster.
context_args=()
[[ -n "${CONTEXT:-}" ]] && context_args=(--context "$CONTEXT")
kubeconfig="$STATE_DIR/kubeconfig"
(umask 077; "$KUBECTL" config view --minify --flatten --raw "${context_args[@]}" >"$kubeconfig.tmp") \
  || die "cannot read the kubeconfig context ${CONTEXT:-(current)}; set KUBECONFIG or CONTEXT"
mv "$kubeconfig.tmp" "$kubeconfig"
export KUBECONFIG="$kubeconfig"
context=$("$KUBECTL" config current-context)
server=$("$KUBECTL" config view -o jsonpath='{.clusters[0].cluster.server}')
k() { "$KUBECTL" --request-timeout=30s "$@"; }
crds=(bookings resources resourcemonitors bookingschedulers bookingcalendars)
k get crd "${crds[@]/%/.manager.kotaico.de}" >/dev/null 2>&1 \
  || die "the CRDs are not installed in context $context ($server): run make install first"

# The webhook's serving certificate, for the host the API server calls.
if [[ "$webhook_host" =~ ^[0-9.]+$|: ]]; then san="IP:$webhook_host"; else san="DNS:$webhook_host"; fi
bash "$repo_root/certs/make-dev-certs.sh" --out-dir "$STATE_DIR/certs" --san "$san,IP:127.0.0.1,DNS:localhost" 2>/dev/null

pids=()
registered=false
stop() {
  trap '' INT TERM HUP
  trap - EXIT
  echo "make run: stopping the controller and the webhook" >&2
  ((${#pids[@]})) && kill -TERM "${pids[@]}" 2>/dev/null || true
  ((${#pids[@]})) && wait "${pids[@]}" 2>/dev/null || true
  if [[ "$registered" == true ]]; then
    k delete mutatingwebhookconfiguration,validatingwebhookconfiguration "$WEBHOOK_NAME" \
      --ignore-not-found >/dev/null && echo "make run: unregistered the webhook configurations $WEBHOOK_NAME" >&2
  fi
  exit "${1:-0}"
}
trap 'stop 130' INT
trap 'stop 143' TERM
trap 'stop 129' HUP
trap 'stop $?' EXIT

TLS_CERT_FILE="$STATE_DIR/certs/tls.crt" TLS_KEY_FILE="$STATE_DIR/certs/tls.key" \
  WEBHOOK_LISTEN_ADDR="$WEBHOOK_ADDR" WEBHOOK_ADMIN_ADDR="$WEBHOOK_ADMIN_ADDR" \
  WEBHOOK_DRAIN_SECONDS=0 WEBHOOK_SHUTDOWN_GRACE_SECONDS=5 \
  "$BIN_DIR/booking-webhook" &
pids+=($!)
echo "make run: webhook pid $! on https://$WEBHOOK_ADDR (admin http://$WEBHOOK_ADMIN_ADDR)" >&2

NAMESPACE="$NAMESPACE" ADMIN_ADDRESS="$CONTROLLER_ADMIN_ADDR" LEADER_ELECT="${LEADER_ELECT:-false}" \
  "$BIN_DIR/booking-controller" &
pids+=($!)
echo "make run: controller pid $! (admin http://$CONTROLLER_ADMIN_ADDR), context $context ($server), namespace ${NAMESPACE:-(all)}" >&2

ready=false
for _ in $(seq 1 100); do
  if python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)' \
      "http://$WEBHOOK_ADMIN_ADDR/readyz" 2>/dev/null; then
    ready=true; break
  fi
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null || stop 1; done
  sleep 0.1
done
[[ "$ready" == true ]] || { echo "make run: the webhook did not become ready in 10 s" >&2; stop 1; }

# The shipped configurations, calling WEBHOOK_URL instead of the in-cluster Service.
webhook_configs() {
  k create --dry-run=client -o json -f "$repo_root/manifests/webhook/webhook-configurations.yaml" \
    | python3 -c '
import base64, json, sys
name, url, ca_file, namespace = sys.argv[1:5]
ca = base64.b64encode(open(ca_file, "rb").read()).decode()
# kubectl prints one JSON document per object.
text, docs, at = sys.stdin.read(), [], 0
decoder = json.JSONDecoder()
while text[at:].strip():
    doc, end = decoder.raw_decode(text[at:].lstrip())
    at = len(text) - len(text[at:].lstrip()) + end
    docs.append(doc)
for item in docs:
    item["metadata"]["name"] = name
    item["metadata"].get("annotations", {}).pop("cert-manager.io/inject-ca-from", None)
    for webhook in item["webhooks"]:
        webhook["clientConfig"] = {"url": url + webhook["clientConfig"]["service"]["path"], "caBundle": ca}
        if namespace:
            webhook.setdefault("namespaceSelector", {}).setdefault("matchExpressions", []).append(
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [namespace]})
json.dump({"apiVersion": "v1", "kind": "List", "items": docs}, sys.stdout)
' "$WEBHOOK_NAME" "$WEBHOOK_URL" "$STATE_DIR/certs/ca.crt" "$NAMESPACE"
}

if [[ "$WEBHOOK" == register ]]; then
  registered=true
  webhook_configs | k apply --server-side --force-conflicts --field-manager=booking-make-run -f - >/dev/null
  echo "make run: registered the webhook configurations $WEBHOOK_NAME calling $WEBHOOK_URL (deleted on exit)" >&2
else
  cat >&2 <<HINT
make run: the webhook serves on https://$WEBHOOK_ADDR but is not registered with the cluster.
  When the API server can reach this machine, register it with
    make run WEBHOOK=register WEBHOOK_URL=https://<address the API server reaches>:${WEBHOOK_ADDR##*:}
HINT
fi
echo "make run: running; Ctrl-C stops both" >&2

# Until Ctrl-C, or until one of them exits on its own.
set +e
wait -n "${pids[@]}"
status=$?
for pid in "${pids[@]}"; do
  # One still runs: the other stopped by itself (on Ctrl-C both stop together).
  kill -0 "$pid" 2>/dev/null && { echo "make run: the controller or the webhook exited ($status), see its log above" >&2; break; }
done
stop "$status"
