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
# The health reader (e2e/bed/health: kstatus from sigs.k8s.io/cli-utils and Argo CD's health
# checks under gopher-lua), keyed by its source and module graph; cluster-up links it too.
health_dir="$cache/health-$(cat "$bed_here/health/go.mod" "$bed_here/health/go.sum" "$bed_here/health/main.go" | sha256sum | cut -c1-8)"

# The llama.cpp example's engine (e2e/bed/llama-cpp.sh): node-llama-cpp at the version of the
# example's package.json, keyed by its package.json and package-lock.json; Node.js, when the
# machine's is too old; the tiny GGUF model, keyed by its generator and pinned requirements.
llama_sample="$bed_here/../../config/samples/llama-cpp"
LLAMA_CPP_NODE_VERSION="$(sed -n 's/^ *"node-llama-cpp": "\(.*\)".*/\1/p' "$llama_sample/package.json")"
llama_dir="$cache/llama-cpp-$LLAMA_CPP_NODE_VERSION-$(cat "$llama_sample/package.json" "$llama_sample/package-lock.json" | sha256sum | cut -c1-8)"
llama_node_dir="$cache/node-$LLAMA_NODE_VERSION"
gguf_dir="$cache/tiny-llama-gguf-$(cat "$bed_here/../fixtures/tiny-llama-gguf/"{make_tiny_gguf.py,requirements.txt} | sha256sum | cut -c1-8)"

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

# The Go toolchain: $GO, else `go` on PATH, else the usual install location.
go_bin() {
  if [ -n "${GO:-}" ]; then echo "$GO"; elif command -v go >/dev/null; then command -v go;
  elif [ -x /usr/local/go/bin/go ]; then echo /usr/local/go/bin/go;
  else echo "no Go toolchain found (Go >= 1.26 is needed to build the bed's Kubernetes components); install it or set GO=" >&2; exit 1; fi
}

# Linker flags of a Kubernetes component build: stripped, with the release's version stamped in
# (what `kubectl version` and a node's kubeletVersion report).
k8s_ldflags() {
  local v="v$K8S_VERSION" minor; minor="$(echo "$K8S_VERSION" | cut -d. -f2)"
  echo "-s -w -X k8s.io/component-base/version.gitVersion=$v -X k8s.io/component-base/version.gitMajor=1 \
    -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean \
    -X k8s.io/client-go/pkg/version.gitVersion=$v -X k8s.io/client-go/pkg/version.gitMajor=1 \
    -X k8s.io/client-go/pkg/version.gitMinor=$minor"
}

# The kubelet of the optional real node (real-node.sh), built from the same k8s.io/kubernetes
# release pinned in a module of its own (bed/kubelet/go.mod), so that it never changes the control
# plane's cache key; keyed by its own module graph.
kubelet_dir="$cache/kubelet-$K8S_VERSION-$(cat "$bed_here/kubelet/go.mod" "$bed_here/kubelet/go.sum" | sha256sum | cut -c1-8)"
