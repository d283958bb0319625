#!/usr/bin/env bash
# Creates a kind cluster on which topodra's aligned allocation can be tried without the hardware:
# builds the image, gives each worker a synthetic machine (`topodra synth`, bind-mounted as the
# drivers' sysfs root), loads the image, deploys deploy/overlays/kind and waits for the drivers.
#
# Needs: docker (a running engine), kind with a node image >= 1.34 (KIND_NODE_IMAGE), kubectl.
# Not run in this repository's CI (no Docker engine there); tests/deploy checks it statically
# (bash -n, shellcheck, the kind config and the overlay it deploys) and runs it with stand-ins
# for docker, kind and kubectl.
#
# Env:
#   KIND_CLUSTER_NAME  cluster name (default topodra)
#   KIND_NODE_IMAGE    node image, e.g. kindest/node:v1.34.0 (default: kind's own; must be >= 1.34)
#   IMAGE              image to build and load (default topodra:0.1.0, what deploy/ names)
#   SYNTH_DIR          where the synthetic machines are written (default ~/.cache/topodra/kind)
#   WORKER1_SPEC, WORKER2_SPEC  `topodra synth --list` names (default 2s-8acc-8nic, 2s-8acc-8nic-snc2)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
name="${KIND_CLUSTER_NAME:-topodra}"
image="${IMAGE:-topodra:0.1.0}"
synth_dir="${SYNTH_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/topodra/kind}"
specs=("${WORKER1_SPEC:-2s-8acc-8nic}" "${WORKER2_SPEC:-2s-8acc-8nic-snc2}")
namespace=topodra-system
min_minor=34

log() { printf 'kind-up: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

for tool in docker kind kubectl; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed"
done
docker info >/dev/null 2>&1 || die "no Docker engine answers (docker info failed)"

log "building $image"
docker build -t "$image" "$repo"

# One synthetic machine per worker, written by the image itself (no Python needed here). The
# device-node stand-ins need mknod (root in the container); where the engine refuses (rootless
# Docker, some Docker Desktop mounts) the trees are written without them and accelerators can
# be allocated but not prepared.
mkdir -p "$synth_dir"
for i in 1 2; do
    out="worker$i"
    host="$name-worker$([[ $i -eq 1 ]] || echo "$i")"  # kind's node names: <name>-worker, <name>-worker2
    spec="${specs[$((i - 1))]}"
    log "synthetic machine $spec for $host in $synth_dir/$out"
    synth=(docker run --rm --user 0 -v "$synth_dir:/out" "$image"
        synth --spec "$spec" --dest "/out/$out" --hostname "$host" --force)
    if ! "${synth[@]}" --dev-nodes >/dev/null; then
        log "could not create device-node stand-ins; writing $out without them"
        "${synth[@]}" >/dev/null
    fi
done

config="$(mktemp)"
trap 'rm -f "$config"' EXIT
sed "s#@SYNTH_DIR@#$synth_dir#g" "$repo/hack/kind/cluster.yaml" >"$config"

if kind get clusters 2>/dev/null | grep -x "$name" >/dev/null; then
    log "cluster $name exists; reusing it (delete it with: kind delete cluster --name $name)"
else
    log "creating cluster $name"
    kind create cluster --name "$name" --config "$config" ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"}
fi
kubectl config use-context "kind-$name" >/dev/null

minor="$(kubectl version -o json | sed -n '/"serverVersion"/,/}/s/.*"minor": *"\([0-9]*\).*/\1/p')"
minor="${minor%%$'\n'*}" # the first match (no `head`: under pipefail its early exit would fail the pipe)
[[ -n "$minor" && "$minor" -ge "$min_minor" ]] ||
    die "the cluster runs Kubernetes 1.${minor:-?}; topodra needs 1.$min_minor or newer (set KIND_NODE_IMAGE)"

log "loading $image into the nodes"
kind load docker-image "$image" --name "$name"

log "deploying deploy/overlays/kind"
kubectl apply --server-side -k "$repo/deploy/overlays/kind"
for driver in cpu accelerator nic; do
    kubectl -n "$namespace" rollout status "daemonset/topodra-$driver-driver" --timeout=180s
done

log "published devices:"
kubectl get resourceslices -o wide
log "ready; run hack/kind-e2e.sh to allocate the examples"
