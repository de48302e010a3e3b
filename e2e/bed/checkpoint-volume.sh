#!/usr/bin/env bash
# The test bed's storage for a checkpoint claim: `checkpoint-volume.sh NAMESPACE CLAIM` makes a
# hostPath PersistentVolume holding the fixture checkpoint under `model/`, reserved for that claim
# and bound to it by the real PV controller once the claim exists. On a cluster, your storage
# provides the claim's volume and you copy the real checkpoint into it; the bed has no
# provisioner and no DeepSeek weights. Uses `kubectl` from PATH and $KUBECONFIG (the bed's), as
# README's install section sets them.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 NAMESPACE CLAIM" >&2; exit 2; }
ns=$1 claim=$2
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bed="$(cd "$(dirname "${KUBECONFIG:?set KUBECONFIG to the kubeconfig of the bed}")" && pwd -P)"
pv="checkpoint-$ns-$claim"
vol="$bed/volumes/$pv"
mkdir -p "$vol/model" && cp -r "$root/e2e/fixtures/checkpoint/." "$vol/model/"
kubectl apply -f - >/dev/null <<PV
apiVersion: v1
kind: PersistentVolume
metadata: {name: $pv}
spec:
  capacity: {storage: 2Ti}
  accessModes: [ReadWriteOnce, ReadOnlyMany]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  claimRef: {namespace: $ns, name: $claim}
  hostPath: {path: $vol, type: Directory}
PV
echo "persistentvolume/$pv holds the fixture checkpoint for claim $ns/$claim"
