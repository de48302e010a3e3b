# Sourced by the bed scripts: where the pinned control plane and helm are cached.
# shellcheck shell=bash
bed_here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$bed_here/versions.env"
cache="${DEEPINFER_CACHE:-$HOME/.cache/deepinfer-operator}"
# The cache key covers the pinned module graph, so a changed go.mod/go.sum rebuilds.
k8s_dir="$cache/k8s-$K8S_VERSION-$(cat "$bed_here/k8s/go.mod" "$bed_here/k8s/go.sum" | sha256sum | cut -c1-8)"
tools_dir="$cache/tools-$KUBECTL_LAYER_VERSION"
