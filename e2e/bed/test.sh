#!/usr/bin/env bash
# `make test`: lint, build, start the test bed (or reuse a running one), run every test, stop
# the bed if this run started it. Fails loudly when the bed cannot start: nothing is skipped but
# the real-node tests on a host that cannot run a kubelet, with the reason printed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
bed="$root/.testbed"
t0=$(date +%s)

cargo fmt --all -- --check
cargo build --workspace --bins
cargo clippy --workspace --all-targets -- -D warnings

started=0
if [ ! -f "$bed/pids/kube-apiserver" ] || ! kill -0 "$(cat "$bed/pids/kube-apiserver")" 2>/dev/null; then
  started=1
fi
e2e/bed/cluster-up.sh
e2e/bed/stop-sample.sh
if [ "$started" = 1 ] && [ -z "${KEEP_TESTBED:-}" ]; then
  trap 'e2e/bed/cluster-down.sh >/dev/null' EXIT
fi
# The real node (kubelet, containerd, runc) for the tests of kubelet behaviour, taken down with the
# bed. Status 3: this host cannot run one (the line printed says why; tests/real_node.rs reports
# itself skipped); any other failure fails the run.
e2e/bed/real-node.sh up || { rc=$?; [ "$rc" = 3 ] || exit "$rc"; }

export DEEPINFER_TESTBED="$bed"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast --failure-output final
else
  cargo test --workspace --no-fail-fast -- --test-threads=1
fi
echo "make test: passed in $(( $(date +%s) - t0 ))s"
