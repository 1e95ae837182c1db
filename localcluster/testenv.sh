#!/bin/bash
# The local Kubernetes control plane (the `kube` ctest fixture's and
# cluster.sh's), like controller-runtime's envtest but with the real garbage
# collector and scheduler: etcd, kube-apiserver, kube-controller-manager and
# kube-scheduler of the release WEFT_KUBE_VERSION selects (kube-bin.sh: the
# current one, localcluster/kube/VERSION, by default; build-kube.sh builds
# each) on loopback, with fresh certificates, the Node and RBAC authorizers
# and an admin kubeconfig. No kubelet: pods stay unbound or Pending unless a
# test writes their status, weft-node runs them, or real nodes do
# (nodes.sh; the API server then listens on their bridge, WEFT_KUBE_ADDRESS).
#
# Usage: localcluster/testenv.sh start|stop|restart-apiserver|status DIR
#   start              starts everything under DIR (free ports picked at random), writes
#                      DIR/kubeconfig (client certificate) and DIR/env (ports, paths)
#   stop               stops everything started from DIR (by pid file) and wipes etcd data
#   restart-apiserver  stops kube-apiserver and starts it again on the same port
#   status             exit 0 when the apiserver answers /readyz
# Env: WEFT_KUBE_VERSION (current, the default, oldest or a release; see
#      kube-bin.sh), WEFT_KUBE_BIN
#      (binaries; default ~/.cache/weft/kube-v<version>/bin, see kube-bin.sh),
#      WEFT_KUBE_ADDRESS (the API server's address; default 127.0.0.1),
#      WEFT_KUBE_CONTROLLERS=0 to skip controller-manager and scheduler,
#      WEFT_KUBE_CRDS (a file or directory of CustomResourceDefinitions) to
#      install before the controller-manager starts: its garbage collector
#      finds resource types once at start and then every 30 s, so an owner
#      type created later would have its deletions ignored for up to 30 s.
set -euo pipefail
CMD=${1:?usage: testenv.sh start|stop|restart-apiserver|status DIR}
DIR=${2:?usage: testenv.sh $CMD DIR}
# shellcheck source=kube-bin.sh
. "$(dirname "$0")/kube-bin.sh"
BIN=$WEFT_KUBE_BIN
ETCD=$BIN/etcd
P=$DIR/pki
LOGS=$DIR/logs
# The API server's address: loopback, or with real nodes (nodes.sh) the
# bridge's first address, where their kubelets and pods reach it and whose
# lease-reconciled endpoint kube-proxy serves as kubernetes.default.
ADDR=${WEFT_KUBE_ADDRESS:-127.0.0.1}
if [ "$ADDR" = 127.0.0.1 ]; then RECONCILER=none; else RECONCILER=lease; fi

# Three distinct free ports (held together while picked). Another process may
# still take one before etcd or the apiserver binds it: start retries.
free_ports() {
  /usr/bin/python3 -c 'import socket
ss = [socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))'
}

stop_one() {  # stop_one NAME: SIGTERM, wait up to 5 s, then SIGKILL
  local f="$DIR/$1.pid" pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

make_pki() {
  mkdir -p "$P"
  local o=/dev/null
  openssl genrsa -out "$P/ca.key" 2048 2>$o
  openssl req -x509 -new -key "$P/ca.key" -subj "/CN=weft-testenv-ca" -days 3650 -out "$P/ca.crt" 2>$o
  openssl genrsa -out "$P/apiserver.key" 2048 2>$o
  openssl req -new -key "$P/apiserver.key" -subj "/CN=kube-apiserver" -out "$P/apiserver.csr" 2>$o
  # Go >= 1.15 ignores the CN: the serving certificate needs SANs.
  printf 'subjectAltName=IP:127.0.0.1,IP:%s,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n' "$ADDR" > "$P/apiserver.ext"
  openssl x509 -req -in "$P/apiserver.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial \
    -days 3650 -extfile "$P/apiserver.ext" -out "$P/apiserver.crt" 2>$o
  openssl genrsa -out "$P/admin.key" 2048 2>$o
  openssl req -new -key "$P/admin.key" -subj "/O=system:masters/CN=weft-admin" -out "$P/admin.csr" 2>$o
  printf 'extendedKeyUsage=clientAuth\n' > "$P/client.ext"
  openssl x509 -req -in "$P/admin.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial \
    -days 3650 -extfile "$P/client.ext" -out "$P/admin.crt" 2>$o
  openssl genrsa -out "$P/sa.key" 2048 2>$o
  openssl rsa -in "$P/sa.key" -pubout -out "$P/sa.pub" 2>$o
  # Static bearer tokens: an admin one (tests of token auth) and one for the
  # operator's own RBAC identity (tests that the ClusterRole is sufficient).
  echo "weft-admin-token,weft-admin,weft-admin,system:masters" > "$P/tokens.csv"
  echo "weft-operator-token,system:serviceaccount:weft-system:weft-operator,weft-operator-uid,system:serviceaccounts" >> "$P/tokens.csv"
}

start_apiserver() {
  setsid "$BIN/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address="$ADDR" --advertise-address="$ADDR" --secure-port="$APISERVER_PORT" \
    --tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" \
    --client-ca-file="$P/ca.crt" --token-auth-file="$P/tokens.csv" \
    --service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range=10.0.0.0/24 \
    --authorization-mode=Node,RBAC --allow-privileged=true --endpoint-reconciler-type="$RECONCILER" \
    --kubelet-client-certificate="$P/admin.crt" --kubelet-client-key="$P/admin.key" \
    --kubelet-certificate-authority="$P/ca.crt" --kubelet-preferred-address-types=InternalIP \
    --cert-dir="$DIR/certs" --profiling=false --v=1 \
    </dev/null >>"$LOGS/kube-apiserver.log" 2>&1 &
  echo $! > "$DIR/kube-apiserver.pid"
  # Each probe is bounded: when another process holds the port, curl would
  # otherwise wait on its silent listener and the exited apiserver go unseen.
  for _ in $(seq 1 600); do
    kill -0 "$(cat "$DIR/kube-apiserver.pid")" 2>/dev/null || break
    if curl -sf --max-time 2 --cacert "$P/ca.crt" --cert "$P/admin.crt" --key "$P/admin.key" \
         "https://$ADDR:$APISERVER_PORT/readyz" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  echo "testenv: kube-apiserver did not become ready; last lines of $LOGS/kube-apiserver.log:" >&2
  tail -20 "$LOGS/kube-apiserver.log" >&2
  return 1
}

case "$CMD" in
start)
  for b in kube-apiserver kube-controller-manager kube-scheduler; do
    [ -x "$BIN/$b" ] || { echo "testenv: $BIN/$b missing; run localcluster/build-kube.sh" >&2; exit 1; }
  done
  command -v "$ETCD" >/dev/null || { echo "testenv: $ETCD not found; run localcluster/build-kube.sh" >&2; exit 1; }
  for c in kube-scheduler kube-controller-manager kube-apiserver etcd; do stop_one $c; done
  rm -rf "$DIR/etcd" "$DIR/certs" "$LOGS"
  mkdir -p "$LOGS"
  T0=$(date +%s%N)
  make_pki
  # etcd and the apiserver on fresh ports, up to three times: a port picked
  # free can be taken by a parallel test before it is bound.
  started=0
  for attempt in 1 2 3; do
  read -r ETCD_PORT ETCD_PEER_PORT APISERVER_PORT <<<"$(free_ports)"
  cat > "$DIR/env" <<ENV
ETCD_PORT=$ETCD_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
APISERVER_PORT=$APISERVER_PORT
KUBECONFIG=$DIR/kubeconfig
WEFT_KUBE_BIN=$BIN
WEFT_KUBE_VERSION=$WEFT_KUBE_VERSION
ENV
  b64() { base64 -w0 < "$1"; }
  cat > "$DIR/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: weft-testenv
  cluster:
    server: https://$ADDR:$APISERVER_PORT
    certificate-authority-data: $(b64 "$P/ca.crt")
users:
- name: weft-admin
  user:
    client-certificate-data: $(b64 "$P/admin.crt")
    client-key-data: $(b64 "$P/admin.key")
contexts:
- name: weft-testenv
  context: {cluster: weft-testenv, user: weft-admin, namespace: default}
current-context: weft-testenv
KC
  setsid "$ETCD" --name weft --data-dir "$DIR/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "weft=http://127.0.0.1:$ETCD_PEER_PORT" \
    --unsafe-no-fsync --quota-backend-bytes=2147483648 </dev/null >"$LOGS/etcd.log" 2>&1 &
  echo $! > "$DIR/etcd.pid"
  etcd_ok=0
  for _ in $(seq 1 300); do
    kill -0 "$(cat "$DIR/etcd.pid")" 2>/dev/null || break
    curl -sf --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" >/dev/null 2>&1 && { etcd_ok=1; break; }
    sleep 0.1
  done
  if [ $etcd_ok = 1 ] && start_apiserver; then started=1; break; fi
  [ $etcd_ok = 1 ] || { echo "testenv: etcd did not become healthy; last lines of $LOGS/etcd.log:" >&2; tail -5 "$LOGS/etcd.log" >&2; }
  echo "testenv: attempt $attempt of 3 failed (ports $ETCD_PORT, $ETCD_PEER_PORT, $APISERVER_PORT)" >&2
  stop_one kube-apiserver
  stop_one etcd
  rm -rf "$DIR/etcd" "$DIR/certs"
  done
  [ $started = 1 ] || exit 1
  if [ -n "${WEFT_KUBE_CRDS:-}" ]; then
    kubectl --kubeconfig="$DIR/kubeconfig" apply -f "$WEFT_KUBE_CRDS" >/dev/null
    kubectl --kubeconfig="$DIR/kubeconfig" wait --for condition=established --timeout=60s \
      -f "$WEFT_KUBE_CRDS" >/dev/null
  fi
  if [ "${WEFT_KUBE_CONTROLLERS:-1}" = 1 ]; then
    setsid "$BIN/kube-controller-manager" --kubeconfig="$DIR/kubeconfig" \
      --secure-port=0 --leader-elect=false \
      --service-account-private-key-file="$P/sa.key" --root-ca-file="$P/ca.crt" \
      --use-service-account-credentials=true --concurrent-gc-syncs=5 \
      --v=1 </dev/null >"$LOGS/kube-controller-manager.log" 2>&1 &
    echo $! > "$DIR/kube-controller-manager.pid"
    setsid "$BIN/kube-scheduler" --kubeconfig="$DIR/kubeconfig" \
      --secure-port=0 --leader-elect=false --v=1 \
      </dev/null >"$LOGS/kube-scheduler.log" 2>&1 &
    echo $! > "$DIR/kube-scheduler.pid"
    # Pods are only admitted once the namespace's default ServiceAccount exists.
    ok=0
    for _ in $(seq 1 300); do
      kubectl --kubeconfig="$DIR/kubeconfig" get serviceaccount default -n default >/dev/null 2>&1 && { ok=1; break; }
      sleep 0.2
    done
    [ $ok = 1 ] || { echo "testenv: default ServiceAccount never appeared; see $LOGS/kube-controller-manager.log" >&2; exit 1; }
  fi
  echo "testenv: ready in $(( ($(date +%s%N) - T0) / 1000000 )) ms; KUBECONFIG=$DIR/kubeconfig"
  ;;
stop)
  for c in kube-scheduler kube-controller-manager kube-apiserver etcd; do stop_one $c; done
  rm -rf "$DIR/etcd"
  ;;
restart-apiserver)
  # shellcheck disable=SC1091
  . "$DIR/env"
  stop_one kube-apiserver
  start_apiserver
  ;;
status)
  # shellcheck disable=SC1091
  . "$DIR/env"
  curl -sf --max-time 5 --cacert "$P/ca.crt" --cert "$P/admin.crt" --key "$P/admin.key" \
    "https://$ADDR:$APISERVER_PORT/readyz" >/dev/null
  ;;
*) echo "testenv: unknown command '$CMD'" >&2; exit 2 ;;
esac
