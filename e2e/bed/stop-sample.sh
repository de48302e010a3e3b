#!/usr/bin/env bash
# What `make run` leaves on a bed it shares with the tests, the bench and the chaos scenarios: its
# operator, which watches every namespace and would reconcile their resources beside the
# operators they start, and its sample deployment, whose workers hold devices they need. Stops
# the one and deletes the other; does nothing when `make run` left nothing.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bed="${TESTBED_DIR:-$root/.testbed}"
if [ -f "$bed/pids/operator" ]; then
  # shellcheck source=paths.sh
  source "$root/e2e/bed/paths.sh"
  stop_recorded "$bed/pids/operator"
  # Foreground: the command returns once the sample's pods are gone and their devices free.
  "$bed/bin/kubectl" --kubeconfig "$bed/kubeconfig" delete deepinferdeployment flash -n default \
    --ignore-not-found --cascade=foreground --timeout=120s >/dev/null
  echo "stopped the operator 'make run' started and deleted its sample deployment (default/flash)"
fi
