#!/usr/bin/env bash
# Stops exactly the processes cluster-up.sh started (by PID) and removes the bed's state.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bed="${TESTBED_DIR:-$root/.testbed}"
case "$bed" in /*) ;; *) bed="$PWD/$bed" ;; esac
# shellcheck source=paths.sh
source "$root/e2e/bed/paths.sh"
# Ends every container process of this bed that outlived its node agent (an agent killed before it
# could stop them): each container's `unshare` and the shell that is its PID namespace's first
# process carry the bed's pod directory on their command line. SIGKILL to their process groups
# ends the namespaces, and with them every process the containers started.
end_leftover_containers() {
  local proc pid pgid groups=()
  for proc in /proc/[0-9]*; do
    if grep -qaF "$bed/agent/pods/" "$proc/cmdline" 2>/dev/null; then
      pid=${proc#/proc/}
      pgid=$(ps -o pgid= -p "$pid" 2>/dev/null | tr -d ' ') || continue
      [ -n "$pgid" ] && groups+=("$pgid")
      kill -9 "$pid" 2>/dev/null || true
    fi
  done
  for pgid in "${groups[@]}"; do kill -9 -- "-$pgid" 2>/dev/null || true; done
  [ ${#groups[@]} -eq 0 ] || echo "cluster-down: ended the processes of ${#groups[@]} container(s) the node agent left"
}
[ -d "$bed/pids" ] || { echo "cluster-down: nothing running"; end_leftover_containers; rm -rf "$bed"; exit 0; }
# The optional real node (real-node.sh) first: its kubelet, containers and mounts live in the bed.
[ -d "$bed/real-node" ] && "$root/e2e/bed/real-node.sh" down
# Reverse start order: the agent first (it kills the processes it runs), etcd last.
for name in node-agent operator external-metrics kube-scheduler kube-controller-manager kube-apiserver etcd; do
  stop_recorded "$bed/pids/$name"
  [ "$name" = node-agent ] && end_leftover_containers
done
rm -rf "$bed"
# The pod network's route (cluster-up.sh), once no bed uses it.
if [ "$(id -u)" = 0 ] && ! pgrep -f deepinfer-node-agent >/dev/null 2>&1; then
  ip route del local 10.244.0.0/16 dev lo 2>/dev/null || true
fi
echo "cluster-down: stopped and removed $bed"
