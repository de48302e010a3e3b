#!/usr/bin/env bash
# One real node for the running test bed: a kubelet built from the pinned k8s.io/kubernetes
# release, containerd and runc from the Debian packages, CNI bridge networking, and a local image
# built from Debian's static busybox (no registry is needed). `make test` brings it up with its bed.
#
#   real-node.sh provision  when the host passes the first checks (root, a writable cgroup
#                           filesystem): install the Debian packages and build the kubelet (cached);
#                           otherwise print why not (provision.sh runs it)
#   real-node.sh up         the same, then start containerd, check that runc starts a container,
#                           import the images, start the kubelet and wait until the node is Ready
#                           (idempotent: a running node is only reported). When the host cannot run
#                           a node (not root, no writable cgroup filesystem, the runtime does not
#                           start a container), it prints one line with the reason, records it in
#                           <bed>/real-node.unavailable (the real-node tests report themselves
#                           skipped with it) and exits with status 3; any later failure exits 1.
#   real-node.sh down       delete the Node, stop the kubelet, every container and containerd,
#                           unmount and remove the node's state and cgroups, and restore the host
#                           settings the kubelet and the bridge changed (idempotent)
#
# The bed is TESTBED_DIR (default <repo>/.testbed); the node's state lives in <bed>/real-node and
# `cluster-down.sh` takes the node down with the bed.
# The node `real-0` carries the taint deepinfer.io/real-node=true:NoSchedule, so only pods that
# tolerate it land there; its images are deepinfer.local/busybox:1 (imagePullPolicy: Never or
# IfNotPresent) and the sandbox image deepinfer.local/pause:1.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
here="$root/e2e/bed"
# shellcheck source=paths.sh
source "$here/paths.sh"
bed="${TESTBED_DIR:-$root/.testbed}"
case "$bed" in /*) ;; *) bed="$PWD/$bed" ;; esac
state="$bed/real-node"
node=real-0
kubectl() { "$bed/bin/kubectl" --kubeconfig "$bed/kubeconfig" "$@"; }
# One bridge and pod subnet per bed, so that beds of other checkouts do not collide.
tag=$(echo -n "$bed" | sha256sum | cut -c1-6)
bridge="cnirn$tag"
subnet="10.237.$(( 16#${tag:0:2} )).0/24"
# Host settings the kubelet (kernel tunables) and the bridge plugin change; `down` restores them.
sysctls=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys
  kernel/keys/root_maxbytes net/ipv4/ip_forward net/bridge/bridge-nf-call-iptables net/bridge/bridge-nf-call-ip6tables)
# The cgroup the kubelet puts its pods under (cgroupRoot), one per bed: kubelets of two beds
# sharing /kubepods would remove each other's pod cgroups as orphans. `down` removes it.
cgroup_root="deepinfer-real-$tag"
# Why this host cannot run the node, when the preflight found so (read by tests/real_node.rs).
unavailable_file="$bed/real-node.unavailable"
ctr=(ctr -a "$state/run/containerd.sock" -n k8s.io)

# The node's cgroup directory in every mounted hierarchy (the cgroup v1 controllers, the v2 tree).
cgroup_dirs() { findmnt -rn -t cgroup,cgroup2 -o TARGET | sed "s|\$|/$cgroup_root|"; }

# The first half of the preflight: root and a cgroup filesystem it can write. Prints the reason
# this host cannot run a kubelet and fails, or prints nothing.
host_can_run() {
  [ "$(id -u)" = 0 ] || { echo "not running as root (containerd and the kubelet need root)"; return 1; }
  local hierarchy=/sys/fs/cgroup
  if [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" != cgroup2fs ]; then
    hierarchy=$(findmnt -rn -t cgroup -o TARGET,OPTIONS | awk '$2 ~ /(^|,)memory(,|$)/ {print $1; exit}')
    [ -n "$hierarchy" ] || { echo "no cgroup filesystem with the memory controller is mounted"; return 1; }
  fi
  mkdir "$hierarchy/$cgroup_root-preflight" 2>/dev/null && rmdir "$hierarchy/$cgroup_root-preflight" \
    || { echo "cannot create a cgroup in $hierarchy (the cgroup filesystem is read-only here)"; return 1; }
}

# Prints and records why this host cannot run the node, removes what was started, exits 3.
unavailable() {
  [ -d "$state" ] && down >/dev/null
  echo "real-node: this host cannot run a kubelet, the real-node tests are skipped: $1"
  echo "$1" > "$unavailable_file"
  exit 3
}

install_packages() {
  local p need=()
  for p in containerd runc containernetworking-plugins busybox-static iptables; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
  done
  [ ${#need[@]} -eq 0 ] && return
  echo "real-node: installing Debian packages: ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
}

build_kubelet() {
  [ -x "$kubelet_dir/kubelet" ] && return
  # One build at a time: a second provision waits for it and finds the kubelet built.
  mkdir -p "$cache"; exec 8>"$cache/build-kubelet.lock"; flock 8
  [ -x "$kubelet_dir/kubelet" ] && return
  grep -Eq "^(require |\s+)k8s.io/kubernetes v$K8S_VERSION( |\$)" "$here/kubelet/go.mod" \
    || { echo "real-node: e2e/bed/kubelet/go.mod does not pin k8s.io/kubernetes v$K8S_VERSION (versions.env)" >&2; exit 1; }
  local go t0 log="$cache/build-kubelet.log"; go="$(go_bin)"; t0=$(date +%s)
  echo "real-node: building kubelet v$K8S_VERSION from its Go module (cold: several minutes on 2 cores)"
  rm -rf "$kubelet_dir.tmp"; mkdir -p "$kubelet_dir.tmp"
  (cd "$here/kubelet" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly \
     "$go" build -trimpath -ldflags "$(k8s_ldflags)" -o "$kubelet_dir.tmp/" k8s.io/kubernetes/cmd/kubelet) >"$log" 2>&1 \
     || { echo "real-node: the kubelet build failed; log: $log" >&2; tail -30 "$log" >&2; exit 1; }
  rm -rf "$kubelet_dir"; mv "$kubelet_dir.tmp" "$kubelet_dir"
  echo "real-node: kubelet built in $(( $(date +%s) - t0 ))s"
}

# A docker-archive image (what `ctr images import` reads) of one layer holding the static busybox,
# with entrypoint $3 (a JSON array, or null); written to $1 and tagged $2.
image_archive() {
  local out=$1 ref=$2 entrypoint=$3 dir diff cfg
  dir=$(mktemp -d); mkdir -p "$dir/rootfs/bin" "$dir/rootfs/tmp" "$dir/rootfs/etc"
  cp /bin/busybox "$dir/rootfs/bin/busybox"
  for a in sh sleep httpd cat echo ls rm mkdir wget; do ln -s busybox "$dir/rootfs/bin/$a"; done
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$dir/rootfs" -cf "$dir/layer.tar" .
  diff=$(sha256sum "$dir/layer.tar" | cut -d' ' -f1)
  printf '{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/bin"],"Entrypoint":%s},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$entrypoint" "$diff" > "$dir/config.json"
  cfg=$(sha256sum "$dir/config.json" | cut -d' ' -f1); mv "$dir/config.json" "$dir/$cfg.json"
  printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["layer.tar"]}]' "$cfg" "$ref" > "$dir/manifest.json"
  tar -C "$dir" -cf "$out" manifest.json "$cfg.json" layer.tar
  rm -rf "$dir"
}

import_images() {
  local images
  images=$("${ctr[@]}" images ls -q)
  grep -qx deepinfer.local/busybox:1 <<<"$images" || {
    image_archive "$state/busybox.tar" deepinfer.local/busybox:1 null
    "${ctr[@]}" images import "$state/busybox.tar" >/dev/null; }
  # The sandbox ("pause") container: waits until it is stopped.
  grep -qx deepinfer.local/pause:1 <<<"$images" || {
    image_archive "$state/pause.tar" deepinfer.local/pause:1 \
      "[\"/bin/sh\",\"-c\",\"trap 'exit 0' TERM INT; while :; do sleep 3600 & wait; done\"]"
    "${ctr[@]}" images import "$state/pause.tar" >/dev/null; }
}

write_containerd_config() {
  cat > "$state/containerd.toml" <<EOF
version = 2
root = "$state/containerd"
state = "$state/run/containerd"
[grpc]
  address = "$state/run/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "deepinfer.local/pause:1"
  # The machine's root lacks CAP_SYS_RESOURCE: no oom_score_adj below containerd's own.
  restrict_oom_score_adj = true
  disable_apparmor = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$state/cni"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$state/run/runc"
EOF
  mkdir -p "$state/cni"
  cat > "$state/cni/10-bed.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "bed-real-node", "plugins": [
  {"type": "bridge", "bridge": "$bridge", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$subnet"}]], "dataDir": "$state/cni-ipam"}},
  {"type": "loopback"}]}
EOF
}

# The node's client identity: system:node:real-0 in group system:nodes, signed by the bed's CA and
# bound to the system:node ClusterRole (the bed authorizes with RBAC only, no Node authorizer).
write_kubelet_config() {
  local pki="$bed/pki" port healthz
  openssl req -newkey rsa:2048 -nodes -subj "/CN=system:node:$node/O=system:nodes" \
    -keyout "$state/node.key" -out "$state/node.csr" 2>/dev/null
  printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=clientAuth" > "$state/node.ext"
  openssl x509 -req -in "$state/node.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 30 \
    -extfile "$state/node.ext" -out "$state/node.crt" 2>/dev/null
  kubectl create clusterrolebinding "real-node-$node" --clusterrole system:node --user "system:node:$node" \
    --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  cat > "$state/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: testbed
  cluster: {server: $(sed -n 's/.*server: //p' "$bed/kubeconfig"), certificate-authority: $pki/ca.crt}
users:
- name: node
  user: {client-certificate: $state/node.crt, client-key: $state/node.key}
contexts:
- name: testbed
  context: {cluster: testbed, user: node}
current-context: testbed
EOF
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  healthz=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  # cgroup v1 (deprecated, still supported with failCgroupV1: false) with the cgroupfs driver, as
  # containerd's runc runs here; no swap check; eviction and image GC only at a nearly full disk
  # (the shared disk is past the default thresholds, which would evict pods and delete the
  # imported images); the kubelet's API on loopback for the bed's own certificates only.
  cat > "$state/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $healthz
failCgroupV1: false
failSwapOn: false
cgroupDriver: cgroupfs
cgroupRoot: /$cgroup_root
# No iptables rules: the KUBE-FIREWALL rule (dropping non-loopback packets to 127.0.0.0/8) and the
# hint chains serve kube-proxy, which the bed does not run, and would be host-wide while it runs.
makeIPTablesUtilChains: false
containerRuntimeEndpoint: unix://$state/run/containerd.sock
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: AlwaysAllow}
clusterDomain: cluster.local
registerWithTaints:
- {key: deepinfer.io/real-node, value: "true", effect: NoSchedule}
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, nodefs.inodesFree: 1%, imagefs.available: 1%, imagefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# Pod volumes (ConfigMaps) refreshed every 10 s rather than every minute.
syncFrequency: 10s
EOF
}

launch() { # name cmd...
  local name=$1; shift
  nohup setsid "$@" >"$state/logs/$name.log" 2>&1 &
  echo $! > "$state/pids/$name"
}
alive() { [ -f "$state/pids/$1" ] && kill -0 "$(cat "$state/pids/$1")" 2>/dev/null; }

wait_for() { # seconds what command...
  local secs=$1 what=$2 i; shift 2
  for ((i = 0; i < secs * 2; i++)); do "$@" >/dev/null 2>&1 && return 0; sleep 0.5; done
  echo "real-node: $what within $secs s failed; logs in $state/logs/" >&2
  return 1
}
node_ready() {
  [ "$(kubectl get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

# The second half of the preflight, with containerd started: runc starts a container of the
# node's image here (namespaces, overlay mounts and the node's cgroups work).
runtime_runs_containers() {
  local out
  wait_for 30 "containerd answering" "${ctr[@]}" version 2>/dev/null \
    || unavailable "containerd does not start: $(tail -1 "$state/logs/containerd.log")"
  import_images
  out=$("${ctr[@]}" run --rm --null-io --cgroup "/$cgroup_root/preflight" --runc-root "$state/run/runc" \
    deepinfer.local/busybox:1 "preflight-$tag" /bin/busybox true 2>&1) \
    || unavailable "runc cannot start a container: $(tail -1 <<<"$out")"
}

provision() {
  local why
  why=$(host_can_run) || { echo "real-node: this host cannot run a kubelet, the real-node tests will be skipped: $why"; return; }
  install_packages
  build_kubelet
}

up() {
  [ -f "$bed/kubeconfig" ] || { echo "real-node: no bed at $bed; start it first (TESTBED_DIR=$bed e2e/bed/cluster-up.sh)" >&2; exit 1; }
  if alive containerd && alive kubelet && node_ready; then echo "real-node: $node already running on $bed"; return; fi
  [ -d "$state" ] && down >/dev/null
  rm -f "$unavailable_file"
  local why
  why=$(host_can_run) || unavailable "$why"
  install_packages
  build_kubelet
  mkdir -p "$state"/{pids,logs}
  for s in "${sysctls[@]}"; do [ -f "/proc/sys/$s" ] && echo "$s=$(cat "/proc/sys/$s")"; done > "$state/sysctls.saved"
  cgroup_dirs | xargs mkdir -p
  write_containerd_config
  launch containerd containerd --config "$state/containerd.toml"
  runtime_runs_containers
  write_kubelet_config
  launch kubelet "$kubelet_dir/kubelet" --config "$state/kubelet.yaml" --kubeconfig "$state/kubeconfig" \
    --hostname-override "$node" --root-dir "$state/kubelet" --cert-dir "$state/kubelet/pki" -v 2
  wait_for 90 "node $node Ready" node_ready || exit 1
  echo "$node" > "$state/node-name"
  echo "real-node: $node Ready (kubelet v$K8S_VERSION, $(containerd --version | cut -d' ' -f3), pods in $subnet)"
}

# Ends every process left in the node's cgroups (all its containers run there), then removes them.
remove_cgroups() {
  local d
  for d in $(cgroup_dirs); do
    [ -d "$d" ] || continue
    find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
}

down() {
  rm -f "$unavailable_file"
  [ -d "$state" ] || { echo "real-node: nothing running"; return; }
  [ -f "$bed/kubeconfig" ] && timeout 10 "$bed/bin/kubectl" --kubeconfig "$bed/kubeconfig" \
    delete node "$node" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  stop_recorded "$state/pids/kubelet"
  if alive containerd; then
    local id
    for id in $("${ctr[@]}" tasks ls -q 2>/dev/null); do
      "${ctr[@]}" tasks kill -a -s SIGKILL "$id" >/dev/null 2>&1 || true
    done
    for id in $("${ctr[@]}" tasks ls -q 2>/dev/null); do
      "${ctr[@]}" tasks delete -f "$id" >/dev/null 2>&1 || true
    done
    for id in $("${ctr[@]}" containers ls -q 2>/dev/null); do
      "${ctr[@]}" containers delete "$id" >/dev/null 2>&1 || true
    done
  fi
  stop_recorded "$state/pids/containerd"
  remove_cgroups
  # Mounts left under the state (pod volumes, sandbox shm and network namespaces, overlay roots),
  # deepest first.
  findmnt -rn -o TARGET | { grep -F "$state/" || true; } | sort -r | while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" || true; done
  ip link del "$bridge" 2>/dev/null || true
  if [ -f "$state/sysctls.saved" ]; then
    while IFS== read -r s v; do echo "$v" > "/proc/sys/$s" 2>/dev/null || true; done < "$state/sysctls.saved"
  fi
  rm -rf "$state"
  # containerd 1.6 keeps its shims' sockets under /run/containerd/s whatever its state directory;
  # removed when empty (no other containerd uses them).
  rmdir /run/containerd/s /run/containerd 2>/dev/null || true
  echo "real-node: $node stopped and removed from $bed"
}

case "${1:-}" in
  provision) provision ;;
  up) up ;;
  down) down ;;
  *) echo "usage: TESTBED_DIR=<bed> $0 provision|up|down" >&2; exit 2 ;;
esac
