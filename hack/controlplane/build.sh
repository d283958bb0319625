#!/usr/bin/env bash
# Builds the real control plane (kube-apiserver, kube-scheduler, kube-controller-manager, etcd)
# from the published Go modules pinned in kubernetes/go.mod and etcd/go.mod, into a cache outside
# the clone keyed by version, so only the first run on a machine pays for it.
#
# Output on stdout (for the test fixture), one per line:
#   k8s=<dir holding kube-apiserver, kube-scheduler, kube-controller-manager>
#   etcd=<dir holding etcd>
# Progress and timings go to stderr.
#
# Env: XDG_CACHE_HOME (cache root), TOPODRA_BUILD_JOBS (go build -p, default 2).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/topodra"
jobs="${TOPODRA_BUILD_JOBS:-2}"

# Only the toolchain on the machine: a go.mod 'toolchain' line must never trigger a download.
export GOTOOLCHAIN=local
# A user's GOFLAGS (e.g. -mod=vendor) would break a module build; keep only what we mean.
export GOFLAGS="-buildvcs=false -mod=readonly"
export CGO_ENABLED=0

log() { printf 'controlplane-build: %s\n' "$*" >&2; }

command -v go >/dev/null 2>&1 || {
    log "go is not installed: install Go >= 1.26 to build the control plane"
    exit 3
}

# The version a module pins, read from its go.mod so there is one place to bump it.
pinned() { (cd "$1" && go list -m -f '{{.Version}}' "$2"); }

k8s_version="$(pinned "$here/kubernetes" k8s.io/kubernetes)"
etcd_version="$(pinned "$here/etcd" go.etcd.io/etcd/server/v3)"
[[ -n "$k8s_version" && -n "$etcd_version" ]] || { log "cannot read pinned versions"; exit 2; }

k8s_dir="$cache_root/k8s-$k8s_version"
etcd_dir="$cache_root/etcd-$etcd_version"
mkdir -p "$cache_root"

# Parallel test sessions share the cache: one builds, the others wait for it.
exec 9>"$cache_root/.build.lock"
flock 9

# build <module dir> <out dir> <ldflags> <packages...>: builds into a scratch dir and renames it
# into place, so an interrupted build never leaves binaries that look complete.
build() {
    local mod="$1" out="$2" ldflags="$3"
    shift 3
    local start scratch
    start=$(date +%s)
    scratch="$(mktemp -d "$cache_root/.partial.XXXXXX")"
    chmod 755 "$scratch"
    log "building $(basename "$out") with $(go version | awk '{print $3}') -p $jobs (cold builds take a while)"
    (cd "$mod" && go build -p "$jobs" -trimpath -ldflags="$ldflags" -o "$scratch/" "$@")
    rm -rf "$out"
    mv "$scratch" "$out"
    log "built $(basename "$out") in $(($(date +%s) - start)) s"
}

have_all() {
    local dir="$1"
    shift
    for b in "$@"; do [[ -x "$dir/$b" ]] || return 1; done
}

if have_all "$etcd_dir" etcd; then
    log "reusing $etcd_dir"
else
    build "$here/etcd" "$etcd_dir" "-s -w" ./cmd/etcd
fi

if have_all "$k8s_dir" kube-apiserver kube-scheduler kube-controller-manager; then
    log "reusing $k8s_dir"
else
    minor="${k8s_version#v1.}"
    minor="${minor%%.*}"
    vpkg=k8s.io/component-base/version
    # What `kube-apiserver --version` and /version report; the release build stamps the same.
    ldflags="-s -w -X $vpkg.gitVersion=$k8s_version -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor"
    ldflags+=" -X $vpkg.gitTreeState=clean -X $vpkg.buildDate=1970-01-01T00:00:00Z"
    build "$here/kubernetes" "$k8s_dir" "$ldflags" \
        k8s.io/kubernetes/cmd/kube-apiserver \
        k8s.io/kubernetes/cmd/kube-scheduler \
        k8s.io/kubernetes/cmd/kube-controller-manager
fi

echo "k8s=$k8s_dir"
echo "etcd=$etcd_dir"
