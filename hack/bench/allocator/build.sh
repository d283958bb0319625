#!/usr/bin/env bash
# Builds hack/bench/allocator (the upstream DRA allocator driven from our slices and claims,
# counting its search steps) into a cache outside the clone, keyed by the hash of its sources,
# and prints its path. Its modules are those of the control plane (same pinned versions), so on
# a machine that built the control plane this needs no download. Exit 3 without Go.
# Env: XDG_CACHE_HOME (cache root).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/topodra"
export GOTOOLCHAIN=local GOFLAGS="-buildvcs=false -mod=readonly" CGO_ENABLED=0

command -v go >/dev/null 2>&1 || { echo "allocator-build: go is not installed" >&2; exit 3; }
key="$(cat "$here/go.mod" "$here/go.sum" "$here/main.go" | sha256sum | cut -c1-16)"
out="$cache_root/bench-allocator-$key"
if [[ ! -x "$out/allocator-steps" ]]; then
    mkdir -p "$cache_root"
    scratch="$(mktemp -d "$cache_root/.partial.XXXXXX")"
    echo "allocator-build: building $out" >&2
    (cd "$here" && nice -n 10 go build -trimpath -o "$scratch/allocator-steps" .)
    rm -rf "$out"
    mv "$scratch" "$out"
fi
echo "$out/allocator-steps"
