#!/bin/bash
# Real nodes for the local cluster: on each, the kubelet of the control
# plane's release with its own containerd 2.x and runc, pods in network
# namespaces on one bridge, and for the cluster CoreDNS (the DNS of Service
# and pod names, from the API server) and kube-proxy (ClusterIP Services:
# pods reach the API server at kubernetes.default). All built from the Go
# module proxy (build-kube.sh, build-node-runtime.sh).
#
# The network stays on this machine: the bridge (weft0, WEFT_POD_SUBNET,
# default 10.234.0.0/24) has no port and no uplink, pods get no default route
# (only the pod subnet and the Service range), ip_forward is left off and
# nothing masquerades pod traffic. Every listener is on loopback or on the
# bridge's own addresses (the API server, each kubelet, CoreDNS), which only
# this machine and its pods can reach.
#
# The kubelet sets kernel tunables at start (vm.overcommit_memory=1,
# kernel.panic=10, kernel.panic_on_oops=1, ...): `up` records them, with the
# bridge and conntrack settings, before anything starts and `down` writes them
# back. cgroup v1 (these machines' hybrid layout) needs `failCgroupV1: false`
# since 1.35; cgroups are driven by cgroupfs (no systemd as PID 1), each node
# under its own root (/weft-node-N in every hierarchy); containerd runs with
# restrict_oom_score_adj, since this machine's root lacks CAP_SYS_RESOURCE and
# may only raise oom_score_adj.
#
# One cluster with real nodes per machine: kube-proxy's rules and the bridge
# are the machine's. A second `up` while another cluster's nodes run is
# refused, naming it.
#
# Usage: localcluster/nodes.sh net-up|up|down|status|address|pid DIR
#   net-up  the bridge and its addresses (before the API server, which binds
#           the first of them: WEFT_KUBE_ADDRESS, see `address`)
#   up      nodes weft-node-0..N-1 (WEFT_CLUSTER_NODES, default 1), CoreDNS and
#           kube-proxy against the control plane of DIR (testenv.sh), the
#           images of WEFT_CLUSTER_IMAGES (OCI archives) imported on every node
#   down    stops every pod, container, shim, kubelet, containerd, CoreDNS and
#           kube-proxy of DIR, removes their mounts, cgroups, iptables rules and
#           the bridge, and restores the kernel settings: nothing is left
#   address prints the API server's address (the bridge's first)
#   pid     DIR NAMESPACE POD CONTAINER: the host pid of a running container
set -euo pipefail
CMD=${1:?usage: nodes.sh net-up|up|down|status|address DIR}
DIR=${2:?usage: nodes.sh $CMD DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=kube-bin.sh
. "$HERE/kube-bin.sh"
N=${WEFT_CLUSTER_NODES:-1}
SUBNET=${WEFT_POD_SUBNET:-10.234.0.0/24}
NET=${SUBNET%.*}              # 10.234.0
GATEWAY=$NET.1
SERVICE_RANGE=10.0.0.0/24     # testenv.sh's --service-cluster-ip-range
BRIDGE=weft0
NODES=$DIR/nodes
RUN=/run/weft-nodes           # sockets and the machine-wide owner/sysctl files
SYSCTLS="vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys
kernel.keys.root_maxbytes net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables
net.ipv4.conf.all.route_localnet net.ipv4.ip_forward net.netfilter.nf_conntrack_max"
node_ip() { echo "$NET.$(( $1 + 1 ))"; }      # weft-node-0 has the gateway's address
say() { echo "nodes: $*" >&2; }
die() { say "$*"; exit 1; }

[ "$CMD" = address ] && { echo "$GATEWAY"; exit 0; }
[ "$(id -u)" = 0 ] || die "real nodes need root (network namespaces, mounts, cgroups)"

runtime_dir() { "$HERE/build-node-runtime.sh" --print-dir; }

stop_pidfile() {  # stop_pidfile FILE [SECONDS]: SIGTERM, wait, SIGKILL
  local f=$1 secs=${2:-10} pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 1 $((secs * 10))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

net_up() {
  mkdir -p "$RUN"
  if [ -f "$RUN/owner" ] && [ "$(cat "$RUN/owner")" != "$DIR" ]; then
    local other; other=$(cat "$RUN/owner")
    if [ -d "$other/nodes" ] && ls "$other"/nodes/*/containerd.pid >/dev/null 2>&1 \
       && kill -0 "$(cat "$(ls "$other"/nodes/*/containerd.pid | head -1)")" 2>/dev/null; then
      die "another local cluster's nodes are up on this machine ($other): run 'localcluster/cluster.sh down $other BUILD' first"
    fi
    say "cleaning up after a cluster that was not taken down ($other)"
    "$0" down "$other" >/dev/null 2>&1 || true
  fi
  echo "$DIR" > "$RUN/owner"
  # The kernel settings as they were before any cluster touched them: a file
  # left by a cluster that was not taken down keeps the true originals.
  if [ ! -f "$RUN/sysctl.saved" ]; then
    local k v
    for k in $SYSCTLS; do
      v=$(sysctl -n "$k" 2>/dev/null) && printf '%s=%s\n' "$k" "$v"
    done > "$RUN/sysctl.saved.tmp"
    mv "$RUN/sysctl.saved.tmp" "$RUN/sysctl.saved"
  fi
  ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge
  local i
  for i in $(seq 0 $((N - 1))); do
    ip addr show dev "$BRIDGE" | grep -q "inet $(node_ip "$i")/" || ip addr add "$(node_ip "$i")/${SUBNET#*/}" dev "$BRIDGE"
  done
  ip link set "$BRIDGE" up
  # kube-proxy's Service rules must see traffic between pods on the bridge.
  modprobe br_netfilter 2>/dev/null || true
  sysctl -qw net.bridge.bridge-nf-call-iptables=1
}

make_certs() {  # make_certs NAME IP: the kubelet's client (Node authorizer) and serving certificates
  local name=$1 ip=$2 d=$NODES/$1/pki P=$DIR/pki o=/dev/null
  mkdir -p "$d"
  openssl genrsa -out "$d/client.key" 2048 2>$o
  openssl req -new -key "$d/client.key" -subj "/O=system:nodes/CN=system:node:$name" -out "$d/client.csr" 2>$o
  openssl x509 -req -in "$d/client.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial -days 3650 \
    -extfile "$P/client.ext" -out "$d/client.crt" 2>$o
  openssl genrsa -out "$d/serving.key" 2048 2>$o
  openssl req -new -key "$d/serving.key" -subj "/CN=$name" -out "$d/serving.csr" 2>$o
  printf 'subjectAltName=IP:%s,DNS:%s\nextendedKeyUsage=serverAuth\n' "$ip" "$name" > "$d/serving.ext"
  openssl x509 -req -in "$d/serving.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial -days 3650 \
    -extfile "$d/serving.ext" -out "$d/serving.crt" 2>$o
}

kubeconfig_for() {  # kubeconfig_for CERT KEY > FILE
  local server ca
  server=$(kubectl --kubeconfig "$DIR/kubeconfig" config view --raw -o jsonpath='{.clusters[0].cluster.server}')
  ca=$(kubectl --kubeconfig "$DIR/kubeconfig" config view --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
  cat <<KC
apiVersion: v1
kind: Config
clusters:
- name: weft-local
  cluster: {server: "$server", certificate-authority-data: "$ca"}
users:
- name: u
  user: {client-certificate: "$1", client-key: "$2"}
contexts:
- name: c
  context: {cluster: weft-local, user: u}
current-context: c
KC
}

node_up() {  # node_up I
  local i=$1 name=weft-node-$1 ip d sock run rt
  ip=$(node_ip "$i") d=$NODES/weft-node-$i run=$RUN/n$i rt=$(runtime_dir)
  sock=$run/containerd.sock
  mkdir -p "$d/cni" "$d/logs" "$run"
  make_certs "$name" "$ip"
  kubeconfig_for "$d/pki/client.crt" "$d/pki/client.key" > "$d/kubeconfig"
  # Each node's pods in their own cgroup root, in every v1 hierarchy.
  local h
  for h in /sys/fs/cgroup/*/; do
    case $h in */unified/) continue ;; esac
    mkdir -p "$h/$name"
  done
  cat /sys/fs/cgroup/cpuset/cpuset.cpus > "/sys/fs/cgroup/cpuset/$name/cpuset.cpus"
  cat /sys/fs/cgroup/cpuset/cpuset.mems > "/sys/fs/cgroup/cpuset/$name/cpuset.mems"
  # Pod addresses: one /24 bridge for every node, a 48-address range each.
  local lo=$(( 16 + i * 48 ))
  cat > "$d/cni/10-weft.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "weft",
  "plugins": [
    {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$run/ipam",
              "ranges": [[{"subnet": "$SUBNET", "rangeStart": "$NET.$lo", "rangeEnd": "$NET.$(( lo + 47 ))", "gateway": "$GATEWAY"}]],
              "routes": [{"dst": "$SERVICE_RANGE"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  cat > "$d/containerd.toml" <<EOF
version = 3
root = "$d/containerd"
state = "$run/containerd"
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile", "io.containerd.snapshotter.v1.erofs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$sock"
[ttrpc]
  address = "$sock.ttrpc"
[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = "$d/containerd-opt"
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "$(cat "$rt/pause.ref")"
  [plugins.'io.containerd.cri.v1.runtime']
    enable_selinux = false
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = "$rt/bin/runc"
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["$rt/bin/cni"]
      conf_dir = "$d/cni"
  [plugins.'io.containerd.grpc.v1.cri']
    disable_tcp_service = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
EOF
  PATH=$rt/bin:$PATH setsid "$rt/bin/containerd" --config "$d/containerd.toml" </dev/null >>"$d/logs/containerd.log" 2>&1 &
  echo $! > "$d/containerd.pid"
  for _ in $(seq 1 100); do [ -S "$sock" ] && break; sleep 0.1; done
  [ -S "$sock" ] || { tail -5 "$d/logs/containerd.log" >&2; die "$name: containerd did not start (log: $d/logs/containerd.log)"; }
  local img
  for img in "$rt/pause.tar" ${WEFT_CLUSTER_IMAGES:-}; do
    "$rt/bin/ctr" --address "$sock" -n k8s.io images import "$img" >>"$d/logs/import.log" 2>&1 \
      || { tail -5 "$d/logs/import.log" >&2; die "$name: importing $img failed"; }
  done
  : > "$d/resolv.conf"   # pods of dnsPolicy Default get no nameserver from this machine
  cat > "$d/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $ip
port: 10250
readOnlyPort: 0
healthzPort: 0
tlsCertFile: $d/pki/serving.crt
tlsPrivateKeyFile: $d/pki/serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $DIR/pki/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
cgroupRoot: /$name
failCgroupV1: false
failSwapOn: false
clusterDNS: [$GATEWAY]
clusterDomain: cluster.local
resolvConf: $d/resolv.conf
containerRuntimeEndpoint: unix://$sock
podLogsDir: $d/pod-logs
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
enforceNodeAllocatable: [pods]
nodeStatusUpdateFrequency: 2s
syncFrequency: 10s
EOF
  PATH=$rt/bin:$PATH setsid "$WEFT_KUBE_BIN/kubelet" --config "$d/kubelet.yaml" --kubeconfig "$d/kubeconfig" \
    --root-dir "$d/kubelet" --cert-dir "$d/pki" --hostname-override "$name" --node-ip "$ip" --v=1 \
    </dev/null >>"$d/logs/kubelet.log" 2>&1 &
  echo $! > "$d/kubelet.pid"
}

cluster_services_up() {
  local rt d=$NODES/cluster
  rt=$(runtime_dir)
  mkdir -p "$d/logs"
  # CoreDNS reads Services, EndpointSlices, pods and namespaces as admin: the
  # local control plane's identities are static (testenv.sh).
  cat > "$d/Corefile" <<EOF
cluster.local:53 in-addr.arpa:53 {
  bind $GATEWAY
  errors
  kubernetes cluster.local in-addr.arpa {
    kubeconfig $DIR/kubeconfig
    pods verified
    fallthrough in-addr.arpa
  }
}
.:53 {
  bind $GATEWAY
  errors
  template ANY ANY {
    rcode NXDOMAIN
  }
}
EOF
  setsid "$rt/bin/coredns" -conf "$d/Corefile" -dns.port 53 </dev/null >>"$d/logs/coredns.log" 2>&1 &
  echo $! > "$d/coredns.pid"
  local hp mp
  read -r hp mp <<<"$(/usr/bin/python3 -c 'import socket
ss = [socket.socket() for _ in range(2)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))')"
  cat > "$d/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $DIR/kubeconfig}
hostnameOverride: weft-node-0
mode: iptables
clusterCIDR: $SUBNET
bindAddress: $GATEWAY
healthzBindAddress: 127.0.0.1:$hp
metricsBindAddress: 127.0.0.1:$mp
nodePortAddresses: [$SUBNET]
iptables: {localhostNodePorts: false}
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
  setsid "$WEFT_KUBE_BIN/kube-proxy" --config "$d/kube-proxy.yaml" --v=1 </dev/null >>"$d/logs/kube-proxy.log" 2>&1 &
  echo $! > "$d/kube-proxy.pid"
}

nodes_down() {  # everything of DIR's nodes, whatever state it is in
  local rt d i n sock mine=1
  # The machine-wide parts (bridge, kube-proxy's and the kubelet's rules,
  # kernel settings) belong to the cluster named in $RUN/owner.
  [ -f "$RUN/owner" ] && [ "$(cat "$RUN/owner")" != "$DIR" ] && mine=0
  if [ $mine = 0 ] && [ ! -d "$NODES" ]; then return 0; fi
  rt=$(runtime_dir)
  for d in "$NODES"/weft-node-*/; do
    [ -d "$d" ] || continue
    stop_pidfile "$d/kubelet.pid" 3
  done
  for d in "$NODES"/weft-node-*/; do
    [ -d "$d" ] || continue
    n=$(basename "$d") i=${n#weft-node-} sock=$RUN/n$i/containerd.sock
    if [ -S "$sock" ] && [ -x "$rt/bin/crictl" ]; then
      # Every pod sandbox stopped and removed through the CRI: containers
      # killed, networks torn down by CNI, addresses released.
      "$rt/bin/crictl" --runtime-endpoint "unix://$sock" --timeout 30s rmp --all --force >/dev/null 2>&1 || true
    fi
    stop_pidfile "$d/containerd.pid" 10
    pkill -9 -f "containerd-shim-runc-v2 .*-address $sock" 2>/dev/null || true
  done
  stop_pidfile "$NODES/cluster/coredns.pid" 5
  stop_pidfile "$NODES/cluster/kube-proxy.pid" 5
  # Whatever still runs in a node's cgroups (a container whose shim was killed).
  local h cg pid
  for h in /sys/fs/cgroup/*/; do
    for cg in "$h"weft-node-*; do
      [ -d "$cg" ] || continue
      while read -r pid; do kill -9 "$pid" 2>/dev/null || true; done < <(find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null)
    done
  done
  sleep 0.2
  # Mounts: volumes of the kubelet, containers' root filesystems, network namespaces.
  local m
  for m in $(findmnt -rn -o TARGET | grep -E "^($NODES|$RUN)/" | sort -r); do umount -l "$m" 2>/dev/null || true; done
  for h in /sys/fs/cgroup/*/; do
    for cg in "$h"weft-node-*; do
      [ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} \; 2>/dev/null
    done
  done
  if [ $mine = 0 ]; then rm -rf "$NODES"; return 0; fi
  if [ -x "$WEFT_KUBE_BIN/kube-proxy" ]; then "$WEFT_KUBE_BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true; fi
  # The kubelet's own chains (KUBE-FIREWALL, canaries) and any kube-proxy
  # left: rules jumping to KUBE-* first, then the chains. This machine runs
  # no other Kubernetes node (one cluster with real nodes at a time).
  local ipt t r c
  for ipt in iptables ip6tables; do
    command -v "$ipt" >/dev/null || continue
    for t in filter nat mangle; do
      "$ipt" -t "$t" -S 2>/dev/null | grep -E -- '-j KUBE-' | grep -v '^-A KUBE-' | sed 's/^-A /-D /' \
        | while read -r r; do eval "$ipt -t $t $r" 2>/dev/null || true; done || true
      for c in $("$ipt" -t "$t" -S 2>/dev/null | sed -n 's/^-N \(KUBE-[^ ]*\)$/\1/p'); do "$ipt" -t "$t" -F "$c" 2>/dev/null || true; done
      for c in $("$ipt" -t "$t" -S 2>/dev/null | sed -n 's/^-N \(KUBE-[^ ]*\)$/\1/p'); do "$ipt" -t "$t" -X "$c" 2>/dev/null || true; done
    done
  done
  ip link del "$BRIDGE" 2>/dev/null || true
  if [ -f "$RUN/sysctl.saved" ]; then
    sysctl -q -p "$RUN/sysctl.saved" >/dev/null 2>&1 || true
    rm -f "$RUN/sysctl.saved"
  fi
  rm -rf "$RUN/n"* "$NODES"
  [ -f "$RUN/owner" ] && [ "$(cat "$RUN/owner")" = "$DIR" ] && rm -f "$RUN/owner"
  rmdir "$RUN" 2>/dev/null || true
}

case "$CMD" in
net-up) net_up ;;
up)
  "$HERE/build-node-runtime.sh" >/dev/null
  [ -x "$WEFT_KUBE_BIN/kubelet" ] && [ -x "$WEFT_KUBE_BIN/kube-proxy" ] || die "kubelet or kube-proxy missing in $WEFT_KUBE_BIN: run localcluster/build-kube.sh"
  [ -f "$DIR/kubeconfig" ] || die "no control plane in $DIR (testenv.sh start first)"
  net_up   # again: the addresses of every node (net-up may have run with fewer)
  export KUBECONFIG=$DIR/kubeconfig
  for i in $(seq 0 $((N - 1))); do node_up "$i"; done
  cluster_services_up
  ok=0
  for _ in $(seq 1 600); do
    ready=$(kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.name}{" "}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null | grep -c "^weft-node-[0-9]* True$" || true)
    [ "$ready" -ge "$N" ] && { ok=1; break; }
    for d in "$NODES"/weft-node-*/; do
      for p in kubelet containerd; do
        kill -0 "$(cat "$d/$p.pid")" 2>/dev/null || { tail -5 "$d/logs/$p.log" >&2; die "$(basename "$d"): $p exited (log: $d/logs/$p.log)"; }
      done
    done
    sleep 0.2
  done
  [ $ok = 1 ] || die "nodes not Ready after 120 s (logs in $NODES/*/logs)"
  for p in coredns kube-proxy; do
    kill -0 "$(cat "$NODES/cluster/$p.pid")" 2>/dev/null || { tail -5 "$NODES/cluster/logs/$p.log" >&2; die "$p exited"; }
  done
  say "$N node(s) Ready: kubelet $WEFT_KUBE_VERSION, $("$(runtime_dir)/bin/containerd" --version | cut -d' ' -f3), pods on $SUBNET, DNS at $GATEWAY"
  ;;
down) nodes_down ;;
pid)  # pid DIR NAMESPACE POD CONTAINER: the host pid of a running container's first process
  NSP=${3:?namespace} POD=${4:?pod} CTR=${5:?container}
  rt=$(runtime_dir)
  for d in "$NODES"/weft-node-*/; do
    n=$(basename "$d")
    sock=unix://$RUN/n${n#weft-node-}/containerd.sock
    pod=$("$rt/bin/crictl" --runtime-endpoint "$sock" pods -q --namespace "$NSP" --name "^$POD\$" --state ready 2>/dev/null | head -1)
    [ -n "$pod" ] || continue
    c=$("$rt/bin/crictl" --runtime-endpoint "$sock" ps -q --pod "$pod" --name "^$CTR\$" --state running 2>/dev/null | head -1)
    [ -n "$c" ] || continue
    "$rt/bin/crictl" --runtime-endpoint "$sock" inspect -o go-template --template '{{.info.pid}}' "$c" && exit 0
  done
  exit 1
  ;;
status)
  for d in "$NODES"/weft-node-*/; do
    for p in kubelet containerd; do kill -0 "$(cat "$d/$p.pid")" 2>/dev/null || exit 1; done
  done
  ;;
*) die "unknown command '$CMD'" ;;
esac
