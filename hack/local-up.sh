#!/usr/bin/env bash
# A single-node Kubernetes cluster on this machine with topodra's three drivers, no Docker and no
# registry: the real kube-apiserver, scheduler and controller-manager, containerd + runc, a CNI
# bridge that ends at the node, a kubelet, and deploy/overlays/all running an image of this
# checkout. It is the test suite's real-node tier (tests/node), kept up until you take it down.
#
#   hack/local-up.sh                  # up (first run builds the Go binaries and the image)
#   hack/local-up.sh --real-devices   # accelerator and NIC drivers read this machine's /sys
#   hack/local-up.sh --down           # everything it started, gone (also the bridge, mounts)
#
# Needs: Linux, root, Python >= 3.11 with this checkout installed (pip install -e .), Go >= 1.26,
# and Debian's runc, containernetworking-plugins, busybox-static, mmdebstrap, iproute2, openssl.
# Without --real-devices the accelerator and NIC drivers see a small synthetic machine
# (tests/node/machine.json: 2 GPUs, 4 NICs that are veths on this host), so claims work anywhere.
# One real node per machine: a second one (or a test run of tests/node) waits for this one.
# Env: TOPODRA_LOCAL_UP_DIR (pid, log and cluster details; default /run/topodra-local-up).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

state_dir="${TOPODRA_LOCAL_UP_DIR:-/run/topodra-local-up}"
state="$state_dir/cluster.json"
pidfile="$state_dir/supervisor.pid"
log="$state_dir/local-up.log"

say() { printf 'local-up: %s\n' "$*" >&2; }

down() {
    if [[ ! -f "$pidfile" ]]; then
        say "nothing to take down (no $pidfile)"
        return 0
    fi
    local pid
    pid="$(cat "$pidfile")"
    if kill -TERM "$pid" 2>/dev/null; then
        say "stopping (pid $pid): pods deleted through the API, then drivers, kubelet, containerd"
        for _ in $(seq 1 300); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 1
        done
    fi
    if kill -0 "$pid" 2>/dev/null; then
        say "still running after 300 s; see $log"
        return 1
    fi
    tail -n 1 "$log" >&2 || true
    rm -f "$pidfile"
}

preflight() {
    local missing=()
    [[ "$(id -u)" == 0 ]] || { say "run as root (mounts, cgroups, a bridge, containers)"; exit 2; }
    command -v go >/dev/null || missing+=("Go >= 1.26 (https://go.dev/dl)")
    for tool in runc mmdebstrap ip openssl busybox; do
        command -v "$tool" >/dev/null || missing+=("$tool")
    done
    [[ -x /usr/lib/cni/bridge || -x /opt/cni/bin/bridge ]] || missing+=("CNI plugins")
    python3 -c 'import sys; assert sys.version_info >= (3, 11); import topodra, kubernetes, yaml' 2>/dev/null \
        || missing+=("python3 >= 3.11 with this checkout installed (pip install -e .)")
    if ((${#missing[@]})); then
        say "missing: ${missing[*]}"
        say "Debian: apt-get install runc containernetworking-plugins busybox-static mmdebstrap iproute2 openssl"
        exit 2
    fi
}

up() {
    preflight
    mkdir -p "$state_dir"
    if [[ -f "$pidfile" ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        say "already up (pid $(cat "$pidfile")); $0 --down first"
        exit 1
    fi
    rm -f "$state"
    say "starting; progress in $log (the first run builds Go binaries and an image: 10-40 min)"
    setsid python3 -m tests.node.localup --state "$state" "$@" >"$log" 2>&1 </dev/null &
    echo $! >"$pidfile"
    local pid
    pid="$(cat "$pidfile")"
    until [[ -f "$state" ]]; do
        if ! kill -0 "$pid" 2>/dev/null; then
            say "the supervisor exited before the cluster was ready:"
            tail -n 30 "$log" >&2
            rm -f "$pidfile"
            exit 1
        fi
        sleep 2
    done
    local kubeconfig
    kubeconfig="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["kubeconfig"])' "$state")"
    cat <<EOF
The cluster is up ($(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["server"], "in", d["seconds"], "s")' "$state")).

  export KUBECONFIG=$kubeconfig
  kubectl get nodes
  kubectl get resourceslices
  kubectl create namespace demo && kubectl apply -n demo -f deploy/examples/pcieswitch-aligned.yaml

Images come from no registry: the examples' busybox:1.36 and the drivers' topodra:0.1.0 are
already on the node (imagePullPolicy IfNotPresent). Container logs: kubectl logs works, or read
them under $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_dir"])' "$state")/podlogs.
Details: $state. Take it down with: $0 --down
EOF
}

case "${1:-}" in
--down) down ;;
--real-devices | "") up "$@" ;;
-h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' ;;
*)
    say "unknown argument $1 (--down, --real-devices, --help)"
    exit 2
    ;;
esac
