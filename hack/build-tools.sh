#!/usr/bin/env bash
# Builds the deployment tools the deploy tests need, helm and kustomize, from their published Go
# modules into a cache outside the clone keyed by version, so only the first run on a machine
# pays for it (about 3-6 min on 2 cores; helm is the bigger one).
#
# Output on stdout (for the tests), one per line:
#   helm=<path to the helm binary>
#   kustomize=<path to the kustomize binary>
# Progress and timings go to stderr.
#
# Env: XDG_CACHE_HOME (cache root), TOPODRA_BUILD_JOBS (go build -p, default 2).
set -euo pipefail

# The one place to bump them. helm: newest v3 (the chart is apiVersion v2, which v3 renders).
# kustomize: newest that builds with Go 1.26 (v5.8.3 needs Go >= 1.27).
HELM_VERSION=v3.22.0
KUSTOMIZE_VERSION=v5.8.2

cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/topodra"
jobs="${TOPODRA_BUILD_JOBS:-2}"

# Only the toolchain on the machine: a module's 'toolchain' line must never trigger a download.
export GOTOOLCHAIN=local
# A user's GOFLAGS (e.g. -mod=vendor) would break `go install pkg@version`; keep only what we mean.
export GOFLAGS="-buildvcs=false"
export CGO_ENABLED=0

log() { printf 'tools-build: %s\n' "$*" >&2; }

command -v go >/dev/null 2>&1 || {
    log "go is not installed: install Go >= 1.26 to build helm and kustomize"
    exit 3
}

mkdir -p "$cache_root"
# Parallel test sessions share the cache: one builds, the others wait for it.
exec 9>"$cache_root/.tools.lock"
flock 9

# install <name> <package@version> <dir> [ldflags]: `go install` into a scratch GOBIN renamed
# into place, so an interrupted build never leaves a binary that looks complete.
install_tool() {
    local name="$1" pkg="$2" out="$3" ldflags="-s -w ${4:-}"
    if [[ -x "$out/$name" ]]; then
        log "reusing $out"
        return
    fi
    local start scratch
    start=$(date +%s)
    scratch="$(mktemp -d "$cache_root/.partial.XXXXXX")"
    chmod 755 "$scratch"
    log "building $pkg with $(go version | awk '{print $3}') -p $jobs"
    GOBIN="$scratch" go install -p "$jobs" -trimpath -ldflags="$ldflags" "$pkg"
    rm -rf "$out"
    mv "$scratch" "$out"
    log "built $name in $(($(date +%s) - start)) s"
}

# What helm's own release build stamps: its version, and the Kubernetes version `helm template`
# assumes without a cluster (.Capabilities.KubeVersion; unstamped it is v1.20, which the chart's
# kubeVersion >=1.34 refuses) = the minor of the client-go it is built with.
helm_ldflags() {
    local gomod client_go minor
    gomod="$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')"
    client_go="$(awk '$1 == "k8s.io/client-go" { print $2 }' "$gomod")"
    [[ "$client_go" == v0.* ]] || { log "cannot read helm's client-go version from $gomod"; exit 2; }
    minor="${client_go#v0.}"
    minor="${minor%%.*}"
    local v=helm.sh/helm/v3
    printf '%s' "-X $v/internal/version.version=$HELM_VERSION -X $v/internal/version.gitTreeState=clean"
    printf ' %s' "-X $v/pkg/chartutil.k8sVersionMajor=1 -X $v/pkg/chartutil.k8sVersionMinor=$minor"
    printf ' %s' "-X $v/pkg/lint/rules.k8sVersionMajor=1 -X $v/pkg/lint/rules.k8sVersionMinor=$minor"
}

# The cache key includes a stamp revision, so a binary built before stamping is not reused.
helm_dir="$cache_root/tools-helm-$HELM_VERSION-s1"
kustomize_dir="$cache_root/tools-kustomize-$KUSTOMIZE_VERSION"
if [[ ! -x "$helm_dir/helm" ]]; then
    install_tool helm "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" "$helm_dir" "$(helm_ldflags)"
else
    log "reusing $helm_dir"
fi
install_tool kustomize "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION" "$kustomize_dir"

echo "helm=$helm_dir/helm"
echo "kustomize=$kustomize_dir/kustomize"
