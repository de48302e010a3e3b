#!/usr/bin/env bash
# `make test`: lint, build, start the test bed (or reuse a running one), run every test, stop
# the bed if this run started it. Fails loudly when the bed cannot start: nothing is skipped.
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
# What `make run` leaves on a bed it shares with the tests: its operator, which watches every
# namespace and would reconcile the tests' resources beside the operators the tests start, and its
# sample deployment, whose workers hold devices the tests' acceptance runs need.
if [ -f "$bed/pids/operator" ]; then
  # shellcheck source=paths.sh
  source "$root/e2e/bed/paths.sh"
  stop_recorded "$bed/pids/operator"
  # Foreground: the command returns once the sample's pods are gone and their devices free.
  "$bed/bin/kubectl" --kubeconfig "$bed/kubeconfig" delete deepinferdeployment flash -n default \
    --ignore-not-found --cascade=foreground --timeout=120s >/dev/null
  echo "make test: stopped the operator 'make run' started and deleted its sample deployment (default/flash)"
fi
if [ "$started" = 1 ] && [ -z "${KEEP_TESTBED:-}" ]; then
  trap 'e2e/bed/cluster-down.sh >/dev/null' EXIT
fi

export DEEPINFER_TESTBED="$bed"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast --failure-output final
else
  cargo test --workspace --no-fail-fast -- --test-threads=1
fi
echo "make test: passed in $(( $(date +%s) - t0 ))s"
