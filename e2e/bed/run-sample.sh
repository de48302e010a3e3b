#!/usr/bin/env bash
# `make run`: on a running bed, install the CRD, start the operator (as a local process with the
# bed's admin identity), give the sample's checkpoint claim a real PersistentVolume holding the
# fixture checkpoint, apply the sample deployment unchanged and show what the operator made of it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bed="${TESTBED_DIR:-$root/.testbed}"
k() { "$bed/bin/kubectl" --kubeconfig "$bed/kubeconfig" "$@"; }

# As the README tells users: the CRD is server-side applied.
k apply --server-side -f "$root/crds/" >/dev/null
# Polled rather than `kubectl wait`, which fails while a new CRD's conditions are still null.
# kubectl's jsonpath filter fails (and prints the whole CRD) while the CRD has no conditions yet.
established() {
  [ "$(k get crd/deepinferdeployments.deepinfer.io -o 'jsonpath={.status.conditions[?(@.type=="Established")].status}' 2>/dev/null)" = True ]
}
for _ in $(seq 150); do established && break; sleep 0.2; done
established || { echo "the CRD deepinferdeployments.deepinfer.io was not Established within 30 s" >&2; exit 1; }

if ! { [ -f "$bed/pids/operator" ] && kill -0 "$(cat "$bed/pids/operator")" 2>/dev/null; }; then
  nohup "$root/target/debug/deepinfer-operator" run --kubeconfig "$bed/kubeconfig" \
    --accepted-licenses mit --operator-image deepinfer-operator:dev >"$bed/logs/operator.log" 2>&1 &
  echo $! > "$bed/pids/operator"
fi

# The claim and the sample as users apply them; the bed's storage gives the claim a volume holding
# the fixture checkpoint, and the bed's stand-in for DeepInfer's runtime image replays the
# sample's answers (no GPU, no DeepSeek weights here).
PATH="$bed/bin:$PATH" KUBECONFIG="$bed/kubeconfig" "$root/e2e/bed/checkpoint-volume.sh" default deepseek-checkpoint >/dev/null
k apply -f "$root/config/samples/checkpoint-pvc.yaml" >/dev/null
k apply --server-side -f "$root/config/samples/nvidia-colocated.yaml"

echo "Waiting for the checkpoint to be verified, the acceptance workload to pass and the workers to be ready…"
if ! k wait --for=condition=Ready --timeout=180s did/flash >/dev/null; then
  echo "flash did not become Ready; its conditions:" >&2
  k get did flash -o jsonpath='{range .status.conditions[*]}{.type}{"\t"}{.status}{"\t"}{.reason}{"\t"}{.message}{"\n"}{end}' >&2
  exit 1
fi
echo; k get nodes -L nvidia.com/gpu.clique,accelerator
echo; k get did
echo; k get jobs,pods -o wide -l deepinfer.io/deployment=flash
echo; k get did flash -o jsonpath='{range .status.conditions[*]}{.type}{"\t"}{.status}{"\t"}{.reason}{"\t"}{.message}{"\n"}{end}'
evidence=$(k get did flash -o jsonpath='{.status.acceptance.evidence}')
echo; echo "Acceptance manifest (ConfigMap $evidence, key manifest.json):"
k get configmap "$evidence" -o jsonpath='{.data.manifest\.json}' | jq .
echo
echo "Operator log: $bed/logs/operator.log — stop everything with: make cluster-down"
