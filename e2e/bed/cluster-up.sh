#!/usr/bin/env bash
# Starts the local test bed: etcd, kube-apiserver (TLS, RBAC, service-account issuer, aggregation
# layer), kube-controller-manager, kube-scheduler on free loopback ports, the external metrics API
# (external-metrics.py, on a host address), then the simulated node agent.
# Idempotent: when the bed already runs and answers, it only reports so.
# State, PIDs and logs live under .testbed/ (git-ignored); `cluster-down.sh` stops exactly these PIDs.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
here="$root/e2e/bed"
# shellcheck source=paths.sh
source "$here/paths.sh"
bed="${TESTBED_DIR:-$root/.testbed}"
start=$(date +%s%N)

"$here/provision.sh"

alive() { [ -f "$bed/pids/$1" ] && kill -0 "$(cat "$bed/pids/$1")" 2>/dev/null; }
# A bed started before the external metrics API existed (or whose metrics API died) starts anew;
# a host without a non-loopback address never has one (marker no-external-metrics).
if alive kube-apiserver && alive etcd && alive kube-controller-manager && alive kube-scheduler && alive node-agent \
   && { alive external-metrics || [ -f "$bed/no-external-metrics" ]; } \
   && [ -f "$bed/deepinfer-runtime/examples/offline_inference.py" ] \
   && "$bed/bin/kubectl" --kubeconfig "$bed/kubeconfig" get --raw /readyz >/dev/null 2>&1; then
  echo "cluster-up: test bed already running ($(sed -n 's/.*server: //p' "$bed/kubeconfig"))"
  exit 0
fi
# Partial leftovers (a crashed component, a reboot): start from clean state.
[ -d "$bed/pids" ] && "$here/cluster-down.sh" >/dev/null 2>&1 || true

mkdir -p "$bed"/{pids,cmd,logs,pki,bin,etcd,agent}
ln -sfn "$k8s_dir/kubectl" "$bed/bin/kubectl"
ln -sfn "$tools_dir/helm" "$bed/bin/helm"
ln -sfn "$health_dir/deepinfer-health" "$bed/bin/deepinfer-health"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
etcd_port=$(free_port); etcd_peer=$(free_port); api_port=$(free_port); kcm_port=$(free_port); sched_port=$(free_port)

# --- PKI: one CA, the API server's serving cert, client certs per identity, the SA signing key.
pki="$bed/pki"
openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=deepinfer-testbed-ca" \
  -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
cert() { # name CN O [extfile-line]  (signed by $CA, default the bed's CA)
  local name=$1 cn=$2 o=$3 ext=${4:-} ca=${CA:-ca}
  openssl req -newkey rsa:2048 -nodes -subj "/CN=$cn${o:+/O=$o}" -keyout "$pki/$name.key" -out "$pki/$name.csr" 2>/dev/null
  # Always X.509 v3 (rustls refuses v1 certificates): usage extensions on every leaf.
  printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=${ext:+serverAuth,}clientAuth" ${ext:+"$ext"} > "$pki/$name.ext"
  openssl x509 -req -in "$pki/$name.csr" -CA "$pki/$ca.crt" -CAkey "$pki/$ca.key" -CAcreateserial -days 30 \
    -extfile "$pki/$name.ext" -out "$pki/$name.crt" 2>/dev/null
}
cert apiserver kube-apiserver "" "subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
cert admin deepinfer-testbed-admin system:masters
cert kube-controller-manager system:kube-controller-manager ""
cert kube-scheduler system:kube-scheduler ""
# The aggregation layer: a CA of its own for the front proxy, whose client certificate the API
# server presents to aggregated API servers (the external metrics API below), and that API's
# serving certificate for its Service's DNS name.
openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=deepinfer-testbed-front-proxy-ca" \
  -keyout "$pki/front-proxy-ca.key" -out "$pki/front-proxy-ca.crt" 2>/dev/null
CA=front-proxy-ca cert front-proxy-client front-proxy-client ""
metrics_service=deepinfer-test-metrics
cert external-metrics "$metrics_service" "" "subjectAltName=DNS:$metrics_service.kube-system.svc"
openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null

server="https://127.0.0.1:$api_port"
kubeconfig_for() { # name file
  cat > "$2" <<KC
apiVersion: v1
kind: Config
clusters:
- name: testbed
  cluster:
    server: $server
    certificate-authority-data: $(base64 -w0 "$pki/ca.crt")
users:
- name: $1
  user:
    client-certificate-data: $(base64 -w0 "$pki/$1.crt")
    client-key-data: $(base64 -w0 "$pki/$1.key")
contexts:
- name: testbed
  context: {cluster: testbed, user: $1}
current-context: testbed
KC
}
kubeconfig_for admin "$bed/kubeconfig"
kubeconfig_for kube-controller-manager "$pki/kube-controller-manager.kubeconfig"
kubeconfig_for kube-scheduler "$pki/kube-scheduler.kubeconfig"

# Audit log of every write (metadata only): lets tests count what the operator wrote.
cat > "$bed/audit-policy.yaml" <<'AP'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
AP

# What a current inference cluster serves beyond the defaults: the Workload/PodGroup gang-scheduling
# API (beta in 1.37, off by default) and PodGroup-level ResourceClaims. DRA (resource.k8s.io/v1)
# is on by default.
FEATURE_GATES="GenericWorkload=true,DRAWorkloadResourceClaims=true"
RUNTIME_CONFIG="scheduling.k8s.io/v1beta1=true"

launch() { # name cmd... (the command line is kept so that restart.sh can start it again)
  local name=$1; shift
  printf '%s\0' "$@" > "$bed/cmd/$name"
  # A session of its own: no signal to the caller's process group (a test run, make) reaches it.
  nohup setsid "$@" >"$bed/logs/$name.log" 2>&1 &
  echo $! > "$bed/pids/$name"
}

launch etcd "$k8s_dir/etcd" --name testbed --data-dir "$bed/etcd" \
  --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
  --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
  --initial-cluster "testbed=http://127.0.0.1:$etcd_peer" --unsafe-no-fsync=true --quota-backend-bytes=4294967296

launch kube-apiserver "$k8s_dir/kube-apiserver" \
  --etcd-servers "http://127.0.0.1:$etcd_port" \
  --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" \
  --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
  --client-ca-file "$pki/ca.crt" \
  --authorization-mode RBAC \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
  --api-audiences https://kubernetes.default.svc.cluster.local \
  --service-cluster-ip-range 10.96.0.0/16 \
  --endpoint-reconciler-type none \
  --enable-admission-plugins NamespaceLifecycle,LimitRanger,ServiceAccount,DefaultStorageClass,ResourceQuota,PodSecurity \
  --feature-gates "$FEATURE_GATES" --runtime-config "$RUNTIME_CONFIG" \
  --audit-policy-file "$bed/audit-policy.yaml" --audit-log-path "$bed/logs/audit.log" --audit-log-maxsize 200 \
  --allow-privileged=true --event-ttl 1h \
  --requestheader-client-ca-file "$pki/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
  --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
  --requestheader-extra-headers-prefix X-Remote-Extra- \
  --proxy-client-cert-file "$pki/front-proxy-client.crt" --proxy-client-key-file "$pki/front-proxy-client.key" \
  --enable-aggregator-routing=true

wait_ready() { # url-path timeout-seconds what
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    if "$bed/bin/kubectl" --kubeconfig "$bed/kubeconfig" get --raw "$1" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  echo "cluster-up: $3 did not become ready within $2 s; see $bed/logs/" >&2
  tail -20 "$bed/logs/kube-apiserver.log" >&2
  return 1
}
wait_ready /readyz 60 kube-apiserver

# The external metrics API (external-metrics.py) on a non-loopback address of this host, served
# through the aggregation layer: the controller-manager's HorizontalPodAutoscaler controller reads
# External metrics from it. A test sets a metric by writing $bed/external-metrics/<name>.
external_metrics() {
  local ip port
  ip=$(ip -4 -o addr show scope global 2>/dev/null | awk '{print $4}' | cut -d/ -f1 | head -1)
  [ -n "$ip" ] || ip=$(hostname -I 2>/dev/null | tr ' ' '\n' | grep -m1 -E '^[0-9]+(\.[0-9]+){3}$' || true)
  if [ -z "$ip" ]; then
    echo "cluster-up: no non-loopback IPv4 address on this host; the external metrics API is not started" >&2
    touch "$bed/no-external-metrics"
    return 0
  fi
  port=$(python3 -c 'import socket,sys; s=socket.socket(); s.bind((sys.argv[1],0)); print(s.getsockname()[1]); s.close()' "$ip")
  launch external-metrics python3 "$here/external-metrics.py" --host "$ip" --port "$port" \
    --cert "$pki/external-metrics.crt" --key "$pki/external-metrics.key" --values "$bed/external-metrics"
  "$bed/bin/kubectl" --kubeconfig "$bed/kubeconfig" apply --server-side -f - >/dev/null <<EM
apiVersion: v1
kind: Service
metadata: {name: $metrics_service, namespace: kube-system}
spec:
  ports: [{name: https, port: 443, targetPort: $port, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: $metrics_service
  namespace: kube-system
  labels: {kubernetes.io/service-name: $metrics_service}
addressType: IPv4
ports: [{name: https, port: $port, protocol: TCP}]
endpoints: [{addresses: ["$ip"], conditions: {ready: true}}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.external.metrics.k8s.io}
spec:
  group: external.metrics.k8s.io
  version: v1beta1
  groupPriorityMinimum: 100
  versionPriority: 100
  caBundle: $(base64 -w0 "$pki/ca.crt")
  service: {name: $metrics_service, namespace: kube-system, port: 443}
EM
}

launch kube-controller-manager "$k8s_dir/kube-controller-manager" \
  --kubeconfig "$pki/kube-controller-manager.kubeconfig" \
  --authentication-kubeconfig "$pki/kube-controller-manager.kubeconfig" \
  --authorization-kubeconfig "$pki/kube-controller-manager.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port "$kcm_port" --feature-gates "$FEATURE_GATES" \
  --leader-elect=false --use-service-account-credentials=true \
  --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
  --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
  --enable-hostpath-provisioner=true \
  --controllers '*,-node-ipam-controller,-certificatesigningrequest-approving-controller,-certificatesigningrequest-signing-controller,-bootstrap-signer-controller,-token-cleaner-controller' \
  --node-monitor-grace-period 20s \
  --horizontal-pod-autoscaler-sync-period 2s \
  --concurrent-gc-syncs 5

launch kube-scheduler "$k8s_dir/kube-scheduler" \
  --kubeconfig "$pki/kube-scheduler.kubeconfig" \
  --authentication-kubeconfig "$pki/kube-scheduler.kubeconfig" \
  --authorization-kubeconfig "$pki/kube-scheduler.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port "$sched_port" --leader-elect=false --feature-gates "$FEATURE_GATES"

# Default StorageClass served by the controller-manager's host-path provisioner.
"$bed/bin/kubectl" --kubeconfig "$bed/kubeconfig" apply -f - >/dev/null <<'SC'
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: standard
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: kubernetes.io/host-path
reclaimPolicy: Delete
volumeBindingMode: Immediate
SC

# DeviceClasses of the simulated DRA drivers the node agent acts as (see the dra pools of the
# topology), as a driver's Helm chart installs them.
"$bed/bin/kubectl" --kubeconfig "$bed/kubeconfig" apply --server-side -f - >/dev/null <<'DC'
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: gpu.nvidia.com
spec:
  selectors:
  - cel:
      expression: device.driver == 'gpu.nvidia.com'
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: compute-domain-default-channel.nvidia.com
spec:
  selectors:
  - cel:
      expression: device.driver == 'compute-domain.nvidia.com'
DC

# The llama.cpp example's image (config/samples/llama-cpp): a container of image
# `deepinfer-llama-cpp` (any registry, tag or digest) runs the example's adapter with the
# node-llama-cpp llama-cpp.sh installed, serving on its pod's loopback address.
mkdir -p "$bed/llama-cpp"
bed_abs="$(cd "$bed" && pwd)"
ln -sfn "$root/config/samples/llama-cpp/adapter.mjs" "$bed/llama-cpp/adapter.mjs"
ln -sfn "$llama_dir/node_modules" "$bed/llama-cpp/node_modules"
ln -sfn "$gguf_dir/model.gguf" "$bed/llama-cpp/model.gguf"
cat > "$bed/bin/deepinfer-llama-cpp" <<LAUNCHER
#!/bin/sh
# The entrypoint of the llama.cpp example's image on this bed (written by cluster-up.sh).
exec "$llama_dir/node" --preserve-symlinks-main "$bed_abs/llama-cpp/adapter.mjs" "\$@" \${SIM_POD_LOOPBACK_IP:+--host "\$SIM_POD_LOOPBACK_IP"}
LAUNCHER
chmod +x "$bed/bin/deepinfer-llama-cpp"

external_metrics

# DeepInfer's runtime image, as far as the bed can have it: its offline example (the default
# acceptance engine) needs GPUs and DeepSeek weights, so the stand-in replays the shot-planner
# sample's valid answers through the stand-in engine, with the flags the run gave it. The node
# agent binds this directory at /opt/deepinfer in every executed engine container.
fake_engine="$(dirname "${OPERATOR_BIN:-$root/target/debug/deepinfer-operator}")/deepinfer-fake-engine"
mkdir -p "$bed/deepinfer-runtime/examples"
cat > "$bed/deepinfer-runtime/examples/offline_inference.py" <<EXAMPLE
#!/usr/bin/env python3
# The test bed's stand-in for DeepInfer's offline example (written by cluster-up.sh).
import os, sys
engine = "$fake_engine"
canned = "$root/e2e/fixtures/shot-planner/valid-2-2-2.jsonl"
os.execv(engine, [engine, *sys.argv[1:], "--canned", canned])
EXAMPLE

agent="${NODE_AGENT_BIN:-$root/target/debug/deepinfer-node-agent}"
operator_bin="${OPERATOR_BIN:-$root/target/debug/deepinfer-operator}"
# The Jobs' binary, beside the operator's in its image.
runner_bin="${RUNNER_BIN:-$(dirname "$operator_bin")/deepinfer-runner}"
if [ ! -x "$agent" ]; then
  echo "cluster-up: $agent is missing; build it first (make build)" >&2; exit 1
fi
# The pod network: the pod range (10.244.0.0/16, the node agent's pod IPs) is made local to the
# host, so that executed containers listen on their pod's own IP and one pod reaches another at the
# address its status reports (a judge reaching a serving group's endpoint, as across a pod network).
# Without the rights to add the route, pods listen on 127.b.c.d for pod IP 10.b.c.d and only probes
# reach them.
if ! ip route show table local 2>/dev/null | grep -q '^local 10.244.0.0/16 '; then
  sudo_if_needed() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo -n "$@"; fi; }
  sudo_if_needed ip route add local 10.244.0.0/16 dev lo 2>/dev/null \
    || echo "cluster-up: could not make the pod range 10.244.0.0/16 local (ip route add local … dev lo needs root); pods reach each other only through loopback addresses" >&2
fi
launch node-agent "$agent" --kubeconfig "$bed/kubeconfig" --topology "${TOPOLOGY:-$here/topology.yaml}" \
  --state-dir "$bed/agent" --own-binary "deepinfer-operator=$operator_bin" \
  --own-binary "deepinfer-runner=$runner_bin" \
  --own-binary "deepinfer-llama-cpp=$bed_abs/bin/deepinfer-llama-cpp" \
  --runtime-files "$bed_abs/deepinfer-runtime"

# Ready when the nodes are registered and the service-account controller made the default SA.
for ((i = 0; i < 300; i++)); do
  nodes=$("$bed/bin/kubectl" --kubeconfig "$bed/kubeconfig" get nodes --no-headers 2>/dev/null | grep -c ' Ready' || true)
  sa=$("$bed/bin/kubectl" --kubeconfig "$bed/kubeconfig" -n default get sa default --no-headers 2>/dev/null | wc -l || true)
  [ "$nodes" -ge 1 ] && [ "$sa" -ge 1 ] && break
  sleep 0.1
done
[ "$nodes" -ge 1 ] || { echo "cluster-up: no Ready node after 30 s; see $bed/logs/node-agent.log" >&2; exit 1; }
echo "cluster-up: test bed v$K8S_VERSION at $server, $nodes Ready nodes, kubeconfig $bed/kubeconfig (started in $(( ($(date +%s%N) - start) / 1000000 )) ms)"
