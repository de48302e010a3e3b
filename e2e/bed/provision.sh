#!/usr/bin/env bash
# Idempotent provisioning of the local test bed's tools:
#   - Debian packages (build helpers, jq, openssl, lua, promtool…);
#   - kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and etcd built with
#     `go build` from the Go modules pinned in e2e/bed/k8s/go.mod (cached under
#     ~/.cache/deepinfer-operator/k8s-<version>);
#   - helm built the same way from the helm.sh/helm/v4 module pinned in e2e/bed/helm/go.mod
#     (cached under ~/.cache/deepinfer-operator/helm-<version>-<hash of its go.mod and go.sum>);
#   - the llama.cpp example's engine (node-llama-cpp from the npm registry) and its tiny GGUF
#     model (generated with gguf from PyPI), by llama-cpp.sh;
#   - what the bed's real node needs, by `real-node.sh provision`: Debian's containerd, runc, CNI
#     plugins and static busybox, and the kubelet built like the control plane (cached under
#     ~/.cache/deepinfer-operator/kubelet-<version>-<hash of its go.mod and go.sum>), when the
#     host can run a kubelet at all (root, a writable cgroup filesystem).
# A warm run finds everything cached and returns in well under a second.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=paths.sh
source "$here/paths.sh"
start=$(date +%s)

sudo_if_needed() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

need_pkgs=()
# prometheus: promtool runs the shipped alert rules in the test suite, and Prometheus itself scrapes
# the operator as the chart's ServiceMonitor does (e2e/tests/metrics.rs). iproute2: the bed's pod
# network (cluster-up.sh makes the pod range local to the host).
for p in iproute2 rsync jq openssl unzip lua5.4 prometheus curl ca-certificates build-essential python3 python3-venv; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
  echo "provision: installing Debian packages: ${need_pkgs[*]}"
  sudo_if_needed apt-get update -qq
  sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

build_k8s() {
  local go; go="$(go_bin)"
  echo "provision: building kube-apiserver, kube-controller-manager, kube-scheduler, kubectl v$K8S_VERSION and etcd v$ETCD_VERSION from Go modules with $("$go" version | cut -d' ' -f3) (cold: ~15-20 min on 2 cores)"
  local t0; t0=$(date +%s)
  local ld; ld="$(k8s_ldflags)"
  rm -rf "$k8s_dir.tmp"; mkdir -p "$k8s_dir.tmp"
  local log="$cache/build-k8s.log"
  # GOTOOLCHAIN=local: the pinned go.mod needs no newer toolchain than the machine's; never fetch one.
  # GOFLAGS=-mod=readonly: go.mod and go.sum are complete and must not change.
  (cd "$here/k8s" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly \
     "$go" build -trimpath -ldflags "$ld" -o "$k8s_dir.tmp/" \
       k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
       k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl \
     && GOTOOLCHAIN=local GOFLAGS=-mod=readonly \
     "$go" build -trimpath -ldflags "-s -w" -o "$k8s_dir.tmp/etcd" go.etcd.io/etcd/server/v3) >"$log" 2>&1 \
     || { echo "provision: the control-plane build failed; log: $log" >&2; tail -30 "$log" >&2; exit 1; }
  rm -rf "$k8s_dir"; mv "$k8s_dir.tmp" "$k8s_dir"
  echo "provision: control plane built in $(( $(date +%s) - t0 ))s"
}

build_helm() {
  local go; go="$(go_bin)"
  grep -qx "require helm.sh/helm/v4 v$HELM_VERSION" "$here/helm/go.mod" \
    || { echo "provision: e2e/bed/helm/go.mod does not pin helm.sh/helm/v4 v$HELM_VERSION (versions.env)" >&2; exit 1; }
  echo "provision: building helm v$HELM_VERSION from its Go module with $("$go" version | cut -d' ' -f3) (cold: ~5 min on 2 cores)"
  # One build at a time: a second provision waits for it and finds helm built.
  exec 9>"$cache/build-helm.lock"; flock 9
  if [ -x "$tools_dir/helm" ]; then echo "provision: helm v$HELM_VERSION built meanwhile"; return; fi
  local t0; t0=$(date +%s)
  rm -rf "$tools_dir.tmp"; mkdir -p "$tools_dir.tmp"
  local log="$cache/build-helm.log"
  # As helm's own release build: static (no cgo), its version stamped into internal/version.
  (cd "$here/helm" && CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=readonly \
     "$go" build -trimpath -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=v$HELM_VERSION \
       -X helm.sh/helm/v4/internal/version.gitTreeState=clean" \
       -o "$tools_dir.tmp/helm" helm.sh/helm/v4/cmd/helm) >"$log" 2>&1 \
     || { echo "provision: the helm build failed; log: $log" >&2; tail -30 "$log" >&2; exit 1; }
  rm -rf "$tools_dir"; mv "$tools_dir.tmp" "$tools_dir"
  echo "provision: helm built in $(( $(date +%s) - t0 ))s"
}

# The health reader: kstatus (sigs.k8s.io/cli-utils) and gopher-lua, the libraries Flux, Helm and
# Argo CD read a resource's health with, pinned in e2e/bed/health/go.mod (cold: ~30 s).
build_health() {
  local go; go="$(go_bin)"
  echo "provision: building the health reader (kstatus, gopher-lua) from its Go modules"
  local log="$cache/build-health.log"
  mkdir -p "$health_dir.tmp"
  (cd "$here/health" && CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=readonly \
     "$go" build -trimpath -o "$health_dir.tmp/deepinfer-health" .) >"$log" 2>&1 \
    || { echo "provision: the health reader build failed; log: $log" >&2; tail -30 "$log" >&2; exit 1; }
  rm -rf "$health_dir" && mv "$health_dir.tmp" "$health_dir"
}

mkdir -p "$cache"
ok=1
for b in kube-apiserver kube-controller-manager kube-scheduler kubectl etcd; do [ -x "$k8s_dir/$b" ] || ok=0; done
[ "$ok" = 1 ] || build_k8s
[ -x "$tools_dir/helm" ] || build_helm
[ -x "$health_dir/deepinfer-health" ] || build_health
"$here/llama-cpp.sh"
"$here/real-node.sh" provision
echo "provision: ready in $(( $(date +%s) - start ))s (control plane v$K8S_VERSION and etcd v$ETCD_VERSION in $k8s_dir, helm v$HELM_VERSION in $tools_dir, node-llama-cpp $LLAMA_CPP_NODE_VERSION in $llama_dir)"
