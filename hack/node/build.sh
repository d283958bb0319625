#!/usr/bin/env bash
# Builds what a real node needs besides the control plane, into the same cache outside the clone
# keyed by version, so only the first run on a machine pays for it:
#   - the kubelet, from the same k8s.io/kubernetes module and version as the control plane
#     (../controlplane/kubernetes/go.mod lists cmd/kubelet among its tools);
#   - containerd, ctr and containerd-shim-runc-v2 from the containerd v2 module pinned in
#     containerd/go.mod (CGO off: the btrfs, devmapper and zfs snapshotters need cgo, so their
#     build tags leave them out);
#   - the pause program of the tier's registry-free sandbox image (pause/main.go), keyed by the
#     hash of its source.
# runc and the CNI plugins come from Debian (`runc`, `containernetworking-plugins`).
#
# Output on stdout (for the test fixture and hack/local-up.sh), one per line:
#   kubelet=<path to the kubelet binary>
#   containerd=<dir holding containerd, ctr, containerd-shim-runc-v2>
#   pause=<path to the pause binary>
# Progress and timings go to stderr.
#
# Env: XDG_CACHE_HOME (cache root), TOPODRA_BUILD_JOBS (go build -p, default 2).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
k8s_mod="$here/../controlplane/kubernetes"
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/topodra"
jobs="${TOPODRA_BUILD_JOBS:-2}"

# Only the toolchain on the machine: a go.mod 'toolchain' line must never trigger a download.
export GOTOOLCHAIN=local
# A user's GOFLAGS (e.g. -mod=vendor) would break a module build; keep only what we mean.
export GOFLAGS="-buildvcs=false -mod=readonly"
export CGO_ENABLED=0

log() { printf 'node-build: %s\n' "$*" >&2; }

command -v go >/dev/null 2>&1 || {
    log "go is not installed: install Go >= 1.26 to build the kubelet and containerd"
    exit 3
}

pinned() { (cd "$1" && go list -m -f '{{.Version}}' "$2"); }

k8s_version="$(pinned "$k8s_mod" k8s.io/kubernetes)"
containerd_version="$(pinned "$here/containerd" github.com/containerd/containerd/v2)"
[[ -n "$k8s_version" && -n "$containerd_version" ]] || { log "cannot read pinned versions"; exit 2; }
pause_key="$(cat "$here/pause/go.mod" "$here/pause/main.go" | sha256sum | cut -c1-16)"

kubelet_dir="$cache_root/kubelet-$k8s_version"
containerd_dir="$cache_root/containerd-$containerd_version"
pause_dir="$cache_root/pause-$pause_key"
mkdir -p "$cache_root"

# The same lock as the control plane's build: parallel builders (and a control-plane build still
# running) share the Go build cache and two cores, so one builds and the others wait.
exec 9>"$cache_root/.build.lock"
flock 9

# build <module dir> <out dir> <go build args...>: builds into a scratch dir and renames it into
# place, so an interrupted build never leaves binaries that look complete.
build() {
    local mod="$1" out="$2"
    shift 2
    local start scratch
    start=$(date +%s)
    scratch="$(mktemp -d "$cache_root/.partial.XXXXXX")"
    chmod 755 "$scratch"
    log "building $(basename "$out") with $(go version | awk '{print $3}') -p $jobs"
    (cd "$mod" && go build -p "$jobs" -trimpath -o "$scratch/" "$@")
    rm -rf "$out"
    mv "$scratch" "$out"
    log "built $(basename "$out") in $(($(date +%s) - start)) s"
}

if [[ -x "$kubelet_dir/kubelet" ]]; then
    log "reusing $kubelet_dir"
else
    minor="${k8s_version#v1.}"
    minor="${minor%%.*}"
    vpkg=k8s.io/component-base/version
    # The same version stamp as the control plane's binaries (../controlplane/build.sh).
    ldflags="-s -w -X $vpkg.gitVersion=$k8s_version -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor"
    ldflags+=" -X $vpkg.gitTreeState=clean -X $vpkg.buildDate=1970-01-01T00:00:00Z"
    build "$k8s_mod" "$kubelet_dir" -ldflags="$ldflags" k8s.io/kubernetes/cmd/kubelet
fi

if [[ -x "$containerd_dir/containerd" && -x "$containerd_dir/ctr" \
    && -x "$containerd_dir/containerd-shim-runc-v2" ]]; then
    log "reusing $containerd_dir"
else
    vpkg=github.com/containerd/containerd/v2/version
    build "$here/containerd" "$containerd_dir" -tags "no_btrfs no_devmapper no_zfs" \
        -ldflags="-s -w -X $vpkg.Version=$containerd_version" \
        github.com/containerd/containerd/v2/cmd/containerd \
        github.com/containerd/containerd/v2/cmd/ctr \
        github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
fi

if [[ -x "$pause_dir/pause" ]]; then
    log "reusing $pause_dir"
else
    build "$here/pause" "$pause_dir" -ldflags="-s -w" .
fi

echo "kubelet=$kubelet_dir/kubelet"
echo "containerd=$containerd_dir"
echo "pause=$pause_dir/pause"
