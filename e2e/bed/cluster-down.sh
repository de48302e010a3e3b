#!/usr/bin/env bash
# Stops exactly the processes cluster-up.sh started (by PID) and removes the bed's state.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bed="${TESTBED_DIR:-$root/.testbed}"
[ -d "$bed/pids" ] || { echo "cluster-down: nothing running"; rm -rf "$bed"; exit 0; }
# Reverse start order: the agent first (it kills the processes it runs), etcd last.
for name in node-agent operator kube-scheduler kube-controller-manager kube-apiserver etcd; do
  f="$bed/pids/$name"; [ -f "$f" ] || continue
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
done
rm -rf "$bed"
echo "cluster-down: stopped and removed $bed"
