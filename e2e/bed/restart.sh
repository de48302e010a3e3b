#!/usr/bin/env bash
# Restarts one component of the running bed (kube-apiserver, etcd, kube-controller-manager,
# kube-scheduler) with the command line cluster-up.sh started it with: SIGTERM, then a fresh
# process on the same ports and data, then waits until the API server answers /readyz again.
# Used by the chaos scenarios; clients see the outage a real control-plane restart causes.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bed="${TESTBED_DIR:-$root/.testbed}"
name="${1:?usage: restart.sh <kube-apiserver|etcd|kube-controller-manager|kube-scheduler>}"
[ -f "$bed/cmd/$name" ] || { echo "restart: no command line recorded for $name in $bed/cmd" >&2; exit 1; }
pid=$(cat "$bed/pids/$name")
kill "$pid" 2>/dev/null || true
for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -9 "$pid" 2>/dev/null || true
mapfile -d '' argv < "$bed/cmd/$name"
# A session of its own, as cluster-up.sh starts it: the caller's process group ending (a chaos
# run, a test) does not take it along.
nohup setsid "${argv[@]}" >>"$bed/logs/$name.log" 2>&1 &
echo $! > "$bed/pids/$name"
start=$(date +%s%N)
for _ in $(seq 600); do
  if "$bed/bin/kubectl" --kubeconfig "$bed/kubeconfig" get --raw /readyz >/dev/null 2>&1; then
    echo "restart: $name back, API server ready after $(( ($(date +%s%N) - start) / 1000000 )) ms"
    exit 0
  fi
  sleep 0.1
done
echo "restart: the API server is not ready 60 s after restarting $name; see $bed/logs/" >&2
exit 1
