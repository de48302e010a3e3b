#!/usr/bin/env bash
# `make run`: on a running bed, install the CRD, start the operator (as a local process with the
# bed's admin identity), put the fixture checkpoint on a real PersistentVolume, apply the sample
# deployment and show what the operator made of it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bed="${TESTBED_DIR:-$root/.testbed}"
k() { "$bed/bin/kubectl" --kubeconfig "$bed/kubeconfig" "$@"; }

if k get crd deepinferdeployments.deepinfer.io >/dev/null 2>&1; then
  k replace --validate=false -f "$root/crds/deepinfer.io_deepinferdeployments.yaml" >/dev/null
else
  # v1.20 cannot server-side apply a CRD with CEL rules; modern clusters: kubectl apply --server-side.
  k create --validate=false -f "$root/crds/deepinfer.io_deepinferdeployments.yaml" >/dev/null
fi
k wait --for=condition=Established --timeout=30s crd/deepinferdeployments.deepinfer.io >/dev/null

if ! { [ -f "$bed/pids/operator" ] && kill -0 "$(cat "$bed/pids/operator")" 2>/dev/null; }; then
  nohup "$root/target/debug/deepinfer-operator" run --kubeconfig "$bed/kubeconfig" \
    --accepted-licenses mit --operator-image deepinfer-operator:dev >"$bed/logs/operator.log" 2>&1 &
  echo $! > "$bed/pids/operator"
fi

# The fixture checkpoint on a hostPath PersistentVolume, bound by the real PV controller.
vol="$bed/volumes/sample-checkpoint"
mkdir -p "$vol/model" && cp -r "$root/e2e/fixtures/checkpoint/." "$vol/model/"
k apply -f - >/dev/null <<PV
apiVersion: v1
kind: PersistentVolume
metadata: {name: sample-checkpoint}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce, ReadOnlyMany]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  claimRef: {namespace: default, name: deepseek-checkpoint}
  hostPath: {path: $vol, type: Directory}
PV
k apply -f - >/dev/null <<PVC
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: deepseek-checkpoint, namespace: default}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  volumeName: sample-checkpoint
  resources: {requests: {storage: 1Gi}}
PVC
k apply -f "$root/config/samples/nvidia-colocated.yaml"

echo "Waiting for the checkpoint to be verified and the worker pods to be placed…"
for _ in $(seq 120); do
  phase=$(k get did flash -o jsonpath='{.status.phase}' 2>/dev/null || true)
  running=$(k get pods -l deepinfer.io/deployment=flash,deepinfer.io/component=worker --no-headers 2>/dev/null | grep -c Running || true)
  [ "$phase" = Ready ] && break
  [ "$phase" = Provisioning ] && [ "$running" -ge 4 ] && break
  sleep 1
done
echo; k get nodes -L nvidia.com/gpu.clique,accelerator
echo; k get did
echo; k get pods -o wide -l deepinfer.io/deployment=flash
echo; k get did flash -o jsonpath='{range .status.conditions[*]}{.type}{"\t"}{.status}{"\t"}{.reason}{"\t"}{.message}{"\n"}{end}'
echo
echo "Operator log: $bed/logs/operator.log — stop everything with: make cluster-down"
