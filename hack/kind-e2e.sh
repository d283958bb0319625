#!/usr/bin/env bash
# Runs the examples on the kind cluster from hack/kind-up.sh (creating it first if missing) and
# checks that every claim was allocated and keeps its constraints (hack/kind/check_alignment.py:
# matchAttribute = one value, distinctAttribute = different values, read back from the
# ResourceSlices). Pods whose claims include a synthetic NIC cannot start (there is no real
# interface to move into them); the check is about allocation, and the pods' phases are shown.
#
# Needs: what hack/kind-up.sh needs, plus python3. Not run in this repository's CI (no Docker
# engine there); tests/deploy checks it statically and runs check_alignment.py against real
# allocations made by the real scheduler of the control-plane test tier.
#
# Env: KIND_CLUSTER_NAME (default topodra), EXAMPLES_NAMESPACE (default topodra-examples),
#      TIMEOUT seconds to wait for allocation (default 120), KEEP=1 leaves the examples running.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
name="${KIND_CLUSTER_NAME:-topodra}"
ns="${EXAMPLES_NAMESPACE:-topodra-examples}"
timeout="${TIMEOUT:-120}"
expected=5 # one claim per example in deploy/examples

log() { printf 'kind-e2e: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

command -v python3 >/dev/null 2>&1 || die "python3 is needed for the alignment check"
if ! kind get clusters 2>/dev/null | grep -x "$name" >/dev/null; then
    "$repo/hack/kind-up.sh"
fi
kubectl config use-context "kind-$name" >/dev/null

work="$(mktemp -d)"
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
    rm -rf "$work"
    if [[ "${KEEP:-0}" != 1 ]]; then
        kubectl delete namespace "$ns" --ignore-not-found --wait=false >/dev/null
    fi
}
trap cleanup EXIT

kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
log "applying deploy/examples in namespace $ns"
kubectl apply -n "$ns" -k "$repo/deploy/examples"

log "waiting up to ${timeout}s for $expected allocated claims"
deadline=$(($(date +%s) + timeout))
while :; do
    allocated="$(kubectl get resourceclaims -n "$ns" \
        -o jsonpath='{range .items[?(@.status.allocation)]}{.metadata.name}{"\n"}{end}' | grep -c . || true)"
    [[ "$allocated" -ge "$expected" ]] && break
    if [[ $(date +%s) -ge $deadline ]]; then
        log "only $allocated of $expected claims allocated; scheduler events:"
        kubectl get events -n "$ns" --field-selector reason=FailedScheduling || true
        break
    fi
    sleep 2
done

kubectl get resourceclaims -n "$ns" -o json >"$work/claims.json"
kubectl get resourceslices -o json >"$work/slices.json"
status=0
python3 "$repo/hack/kind/check_alignment.py" --expect "$expected" "$work/claims.json" "$work/slices.json" || status=$?

log "pods (those with a synthetic NIC stay ContainerCreating: no real interface to move):"
kubectl get pods -n "$ns" -o wide || true
if [[ $status -eq 0 ]]; then
    log "every claim allocated and aligned as asked"
else
    log "alignment check failed"
fi
exit "$status"
