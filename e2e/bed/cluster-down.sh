#!/usr/bin/env bash
# Stops exactly the processes cluster-up.sh started (by PID) and removes the bed's state.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bed="${TESTBED_DIR:-$root/.testbed}"
# shellcheck source=paths.sh
source "$root/e2e/bed/paths.sh"
[ -d "$bed/pids" ] || { echo "cluster-down: nothing running"; rm -rf "$bed"; exit 0; }
# Reverse start order: the agent first (it kills the processes it runs), etcd last.
for name in node-agent operator kube-scheduler kube-controller-manager kube-apiserver etcd; do
  stop_recorded "$bed/pids/$name"
done
rm -rf "$bed"
echo "cluster-down: stopped and removed $bed"
