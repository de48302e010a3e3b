# Sourced by the bed scripts: where the pinned control plane and helm are cached, and how a bed
# process recorded by PID is stopped.
# shellcheck shell=bash
bed_here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$bed_here/versions.env"
cache="${DEEPINFER_CACHE:-$HOME/.cache/deepinfer-operator}"
# The cache key covers the pinned module graph, so a changed go.mod/go.sum rebuilds.
k8s_dir="$cache/k8s-$K8S_VERSION-$(cat "$bed_here/k8s/go.mod" "$bed_here/k8s/go.sum" | sha256sum | cut -c1-8)"
# helm, keyed the same way by its own module graph; cluster-up links $bed/bin/helm to it.
tools_dir="$cache/helm-$HELM_VERSION-$(cat "$bed_here/helm/go.mod" "$bed_here/helm/go.sum" | sha256sum | cut -c1-8)"

# Stops the process whose PID the file $1 records (TERM, up to 5 s, then KILL) and removes the file.
stop_recorded() {
  local pid
  [ -f "$1" ] || return 0
  pid=$(cat "$1")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$1"
}
