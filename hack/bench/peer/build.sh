#!/usr/bin/env bash
# Builds the Go peers of hack/bench/peer (peer-plugin, ghw-inspect) from the Go module proxy into
# a cache outside the clone, keyed by the hash of their sources, and prints the folder holding
# both. Progress goes to stderr; exit 3 without Go.
# Env: XDG_CACHE_HOME (cache root).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/topodra"
export GOTOOLCHAIN=local GOFLAGS="-buildvcs=false -mod=readonly" CGO_ENABLED=0

command -v go >/dev/null 2>&1 || { echo "peer-bench-build: go is not installed" >&2; exit 3; }
key="$(cat "$here/go.mod" "$here/go.sum" "$here/plugin/main.go" "$here/ghwinspect/main.go" | sha256sum | cut -c1-16)"
out="$cache_root/bench-peer-$key"
if [[ ! -x "$out/peer-plugin" || ! -x "$out/ghw-inspect" ]]; then
    mkdir -p "$cache_root"
    scratch="$(mktemp -d "$cache_root/.partial.XXXXXX")"
    echo "peer-bench-build: building $out" >&2
    (cd "$here" && nice -n 10 go build -trimpath -o "$scratch/peer-plugin" ./plugin)
    (cd "$here" && nice -n 10 go build -trimpath -o "$scratch/ghw-inspect" ./ghwinspect)
    chmod 755 "$scratch"
    rm -rf "$out"
    mv "$scratch" "$out"
fi
echo "$out"
