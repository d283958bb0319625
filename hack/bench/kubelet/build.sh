#!/usr/bin/env bash
# Builds the Go kubelet-side client of hack/bench-prepare into a cache outside the clone, keyed by
# the hash of its sources, and prints its path. Progress goes to stderr; exit 3 without Go.
# Env: XDG_CACHE_HOME (cache root).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/topodra"
export GOTOOLCHAIN=local GOFLAGS="-buildvcs=false -mod=readonly" CGO_ENABLED=0

command -v go >/dev/null 2>&1 || { echo "kubelet-bench-build: go is not installed" >&2; exit 3; }
key="$(cat "$here/go.mod" "$here/go.sum" "$here/main.go" | sha256sum | cut -c1-16)"
out="$cache_root/bench-kubelet-$key"
if [[ ! -x "$out/kubelet-bench" ]]; then
    mkdir -p "$cache_root"
    scratch="$(mktemp -d "$cache_root/.partial.XXXXXX")"
    echo "kubelet-bench-build: building $out" >&2
    (cd "$here" && go build -trimpath -o "$scratch/kubelet-bench" .)
    rm -rf "$out"
    mv "$scratch" "$out"
fi
echo "$out/kubelet-bench"
