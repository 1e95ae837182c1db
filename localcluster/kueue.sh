#!/bin/bash
# Kueue (sigs.k8s.io/kueue, the Kubernetes job queueing controller) for a
# local cluster: the real Kueue manager, cmd/kueue of the release pinned in
# localcluster/kueue/go.mod (go.sum fixes every module's hash), built from the
# Go module proxy like the cluster's other programs (build-kube.sh,
# build-node-runtime.sh), run as a process on this machine against the
# cluster whose admin kubeconfig is DIR/kubeconfig (cluster.sh up, which runs
# this with WEFT_CLUSTER_KUEUE=1, or testenv.sh start). A process rather than
# the upstream Deployment: the testenv control plane has no nodes, and on real
# nodes nothing can be pulled, while the manager needs nothing from a pod but
# its kubeconfig.
#
#   build   builds cmd/kueue into ~/.cache/weft/kueue-<key>/bin/kueue
#           (WEFT_KUEUE_CACHE; the key a hash of go.mod and go.sum:
#           built once under a lock, installed by atomic renames) and copies
#           the module's CRDs (config/components/crd/bases) to <cache>/crds/.
#   up      builds if needed (saying so), installs the CRDs (server-side apply:
#           the Workload CRD is too big for the last-applied annotation), the
#           namespace kueue-system, makes a CA and a serving certificate for
#           127.0.0.1/localhost (DIR/kueue/certs), writes DIR/kueue/config.yaml
#           (free loopback ports; DIR/kueue/env records them) and starts the
#           manager (pid DIR/kueue.pid, log DIR/logs/kueue.log); waits until
#           its /readyz answers. A Kueue already up from DIR is stopped first.
#   down    stops it (SIGTERM, 5 s, SIGKILL); nothing to do when it is not up.
#           The CRDs and Kueue's objects stay (testenv.sh stop wipes etcd).
#   status  exit 0 when the manager runs and its /readyz answers.
#
# The configuration: batch/job and weft's TrainingJob (an external framework:
# weft-operator writes the Workloads) integrations, waitForPodsReady with
# requeuing after eviction, no leader election, no metrics server, no
# VisibilityOnDemand (its API server wants certificates at a fixed path),
# Kueue's internal certificate management off.
#
# No webhooks are registered: Kueue's webhooks only default and validate
# Kueue's own objects (and the jobs of its built-in integrations), the
# operator writes complete Workloads, and a webhook with failurePolicy Fail
# would block those API calls whenever this manager is down. The webhook
# server still listens (127.0.0.1, the serving certificate), as cmd/kueue
# always starts it.
#
# /etc/kueue/metrics/certs: with internal certificate management off cmd/kueue
# reads the metrics certificate from that hard-coded path and exits without
# it, even with the metrics server disabled. The manager therefore runs in a
# private mount namespace (unshare -m) where an overlay on /etc (the real /etc
# below, DIR/kueue/ovl/up above, holding kueue/metrics/certs/tls.{crt,key}:
# the serving certificate) adds them: nothing is written to the real /etc and
# the mount vanishes with the process, leaving nothing to unmount. (Mounts on
# top of files in /etc, as a container's /etc/hosts, are not seen through the
# overlay; the manager only talks to 127.0.0.1.) Needs root (CAP_SYS_ADMIN)
# and a DIR on a file system overlayfs accepts as an upper layer.
#
# Usage: localcluster/kueue.sh build [--print-dir]
#        localcluster/kueue.sh up|down|status DIR
# Env: WEFT_KUEUE_CACHE (the build's directory), WEFT_KUEUE_BUILD_NICE=0 (build
#      at normal priority; default nice 19), GO (the go command),
#      WEFT_KUEUE_LOG_LEVEL (--zap-log-level, default 2),
#      WEFT_KUEUE_PODS_READY_TIMEOUT (waitForPodsReady.timeout, default 60s),
#      WEFT_KUEUE_BACKOFF_BASE (requeuingStrategy.backoffBaseSeconds, default 5;
#      backoffMaxSeconds is 60), WEFT_KUBE_VERSION (which kubectl, kube-bin.sh).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
NAME=kueue
MOD=$HERE/kueue
CACHE=${WEFT_KUEUE_CACHE:-$HOME/.cache/weft/kueue-$(cat "$MOD/go.mod" "$MOD/go.sum" | sha256sum | cut -c1-12)}
BIN=$CACHE/bin/kueue
CRDS=$CACHE/crds
NICE=${WEFT_KUEUE_BUILD_NICE:-19}
VERSION=$(sed -n 's#^\(require \)\{0,1\}[[:space:]]*sigs.k8s.io/kueue \(v[^ ]*\).*#\2#p' "$MOD/go.mod" | head -1)
USAGE="usage: kueue.sh build [--print-dir] | kueue.sh up|down|status DIR"
CMD=${1:?$USAGE}
# shellcheck source=addon-lib.sh
. "$HERE/addon-lib.sh"

built() { [ -x "$BIN" ] && [ -f "$CRDS/kueue.x-k8s.io_workloads.yaml" ]; }
compile() {  # compile OUT LOG
  local dir
  [ -n "$VERSION" ] || { echo "kueue: $MOD/go.mod requires no sigs.k8s.io/kueue" >&2; exit 1; }
  CGO_ENABLED=1 go_build "$2" sigs.k8s.io/kueue/cmd/kueue -ldflags "-s -w" -o "$1"
  dir=$(module_dir sigs.k8s.io/kueue 2>>"$2") || true
  if [ -z "$dir" ] || ! ls "$dir"/config/components/crd/bases/*.yaml >/dev/null 2>&1; then
    echo "kueue: no CRDs in sigs.k8s.io/kueue@$VERSION's config/components/crd/bases (log: $2)" >&2; exit 1
  fi
  cp "$dir"/config/components/crd/bases/*.yaml "$CACHE/stage/crds/"
}

if [ "$CMD" = build ]; then
  if [ "${2:-}" = --print-dir ]; then echo "$CACHE"; exit 0; fi
  addon_build "" "Kueue $VERSION's manager (cmd/kueue; about 6 minutes the first time)"
  exit 0
fi

case $CMD in up|down|status) ;; *) echo "kueue: unknown command '$CMD'; $USAGE" >&2; exit 2 ;; esac
addon_dir "$CMD" "${2:?$USAGE}"
STATE=$DIR/kueue
PIDF=$DIR/kueue.pid
LOGF=$DIR/logs/kueue.log

ours() {  # ours PID: PID runs this DIR's manager (or the setsid/unshare/sh before its exec)
  [ -n "$1" ] && kill -0 "$1" 2>/dev/null \
    && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF -- "--config=$STATE/config.yaml"
}
health() { sed -n 's/^KUEUE_HEALTH=//p' "$STATE/env" 2>/dev/null; }
ready() { local h; h=$(health); [ -n "$h" ] && curl -sf -m 2 "http://$h/readyz" >/dev/null 2>&1; }
no_overlay() { rm -rf "$STATE/ovl"; }

case $CMD in
down)
  if addon_stop; then echo "kueue: down"; fi
  no_overlay
  exit 0
  ;;
status)
  if alive && ready; then
    echo "kueue: up (pid $(cat "$PIDF"), http://$(health)/readyz)"; exit 0
  fi
  echo "kueue: not running"; exit 1
  ;;
esac

# ---- up ----
[ -f "$DIR/kubeconfig" ] || { echo "kueue: no $DIR/kubeconfig: start a cluster first (cluster.sh up or testenv.sh start)" >&2; exit 1; }
case $DIR in *,*|*:*) echo "kueue: DIR '$DIR' must not contain ',' or ':' (overlay mount options)" >&2; exit 1 ;; esac
addon_build quiet "Kueue $VERSION's manager (cmd/kueue; about 6 minutes the first time)"
T0=$(date +%s%N)
addon_stop || true
no_overlay
export KUBECONFIG=$DIR/kubeconfig
# shellcheck source=kube-bin.sh
. "$HERE/kube-bin.sh"   # kubectl of the control plane's release first on PATH
mkdir -p "$STATE" "$DIR/logs"
addon_apply_crds "$STATE"
kubectl get namespace kueue-system >/dev/null 2>&1 || kubectl create namespace kueue-system >/dev/null

# A CA and the serving certificate of the webhook server (and the metrics
# server's, were it on): kept across restarts.
C=$STATE/certs
if [ ! -f "$C/tls.crt" ] || [ ! -f "$C/tls.key" ] || [ ! -f "$C/ca.crt" ]; then
  mkdir -p "$C"
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' > "$C/ext"
  {
    openssl genrsa -out "$C/ca.key" 2048
    openssl req -x509 -new -key "$C/ca.key" -subj "/CN=weft-kueue-ca" -days 3650 -out "$C/ca.crt"
    openssl genrsa -out "$C/tls.key" 2048
    openssl req -new -key "$C/tls.key" -subj "/CN=kueue-webhook-service.kueue-system.svc" -out "$C/tls.csr"
    openssl x509 -req -in "$C/tls.csr" -CA "$C/ca.crt" -CAkey "$C/ca.key" -CAcreateserial \
      -days 3650 -extfile "$C/ext" -out "$C/tls.crt"
  } 2>"$C/openssl.log" || { cat "$C/openssl.log" >&2; echo "kueue: making the certificates failed" >&2; rm -f "$C/tls.crt"; exit 1; }
  rm -f "$C/openssl.log"
fi

start_manager() {  # writes the config with fresh ports and starts the manager
  local hport wport vport
  read -r hport wport vport <<<"$(free_ports 3)"
  cat > "$STATE/config.yaml" <<Y
# Written by localcluster/kueue.sh (Kueue $VERSION's config API v1beta2).
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
health:
  healthProbeBindAddress: 127.0.0.1:$hport
metrics:
  bindAddress: "0"     # no metrics server
webhook:
  host: 127.0.0.1
  port: $wport
  certDir: "$C"
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
clientConnection:
  qps: 50
  burst: 100
integrations:
  frameworks:
  - batch/job
  externalFrameworks:
  - TrainingJob.v1alpha1.weft.dev
featureGates:
  VisibilityOnDemand: false   # its API server would want /visibility/tls.crt
waitForPodsReady:
  timeout: ${WEFT_KUEUE_PODS_READY_TIMEOUT:-60s}
  blockAdmission: false
  requeuingStrategy:
    timestamp: Eviction
    backoffBaseSeconds: ${WEFT_KUEUE_BACKOFF_BASE:-5}
    backoffMaxSeconds: 60
Y
  printf 'KUEUE_VERSION=%s\nKUEUE_HEALTH=127.0.0.1:%s\nKUEUE_WEBHOOK=127.0.0.1:%s\nKUEUE_CA=%s\nKUEUE_LOG=%s\n' \
    "$VERSION" "$hport" "$wport" "$C/ca.crt" "$LOGF" > "$STATE/env"
  no_overlay
  mkdir -p "$STATE/ovl/up/kueue/metrics/certs" "$STATE/ovl/work"
  cp "$C/tls.crt" "$C/tls.key" "$STATE/ovl/up/kueue/metrics/certs/"
  echo "---- kueue.sh up $(date -u +%FT%TZ): $BIN" >> "$LOGF"
  # setsid (not a process group leader here, so it does not fork), unshare
  # and sh each exec the next: the pid is the manager's, leading its group.
  # shellcheck disable=SC2016
  setsid unshare -m --propagation private sh -c \
    'mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1,workdir=$2" /etc || exit 1
     shift 2; exec "$@"' kueue-overlay "$STATE/ovl/up" "$STATE/ovl/work" \
    "$BIN" --config="$STATE/config.yaml" --kubeconfig="$DIR/kubeconfig" \
      --visibility-server-port="$vport" --zap-log-level="${WEFT_KUEUE_LOG_LEVEL:-2}" \
    </dev/null >>"$LOGF" 2>&1 &
  echo $! > "$PIDF"
}
addon_start start_manager ready 120 "$LOGF" no_overlay
echo "kueue: $VERSION up in $(( ($(date +%s%N) - T0) / 1000000 )) ms (log $LOGF)"
