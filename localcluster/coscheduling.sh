#!/bin/bash
# Gang scheduling for a local cluster: scheduler-plugins' kube-scheduler
# (sigs.k8s.io/scheduler-plugins, cmd/scheduler: the upstream kube-scheduler
# with the out-of-tree plugins compiled in) of the release pinned in
# localcluster/scheduler-plugins/go.mod (go.sum fixes every module's hash),
# built from the Go module proxy like the cluster's other programs
# (build-kube.sh, build-node-runtime.sh, kueue.sh), run as a second scheduler
# beside the control plane's own, with one profile, schedulerName
# scheduler-plugins-scheduler, whose Coscheduling plugin binds the pods of a
# PodGroup (scheduling.x-k8s.io/v1alpha1; a pod joins one with the label
# scheduling.x-k8s.io/pod-group=NAME) all together or not at all: pods naming
# another scheduler are not its business. It runs as a process on this
# machine against the cluster whose admin kubeconfig is DIR/kubeconfig
# (cluster.sh up, which runs this with WEFT_CLUSTER_COSCHEDULING=1, or
# testenv.sh start). A process rather than the upstream Deployment: the
# testenv control plane has no nodes, and on real nodes nothing can be
# pulled, while the scheduler needs nothing from a pod but its kubeconfig.
#
#   build   builds cmd/scheduler into
#           ~/.cache/weft/scheduler-plugins-<key>/bin/kube-scheduler
#           (WEFT_COSCHED_CACHE; the key a hash of go.mod and go.sum only, not
#           of this script, so that editing its comments rebuilds nothing: a
#           change to the build command below wants a fresh WEFT_COSCHED_CACHE
#           or the old directory removed; built once under a lock, installed
#           by atomic renames) and copies the module's PodGroup CRD
#           (manifests/coscheduling/crd.yaml) to <cache>/crds/.
#   up      builds if needed (saying so), installs the CRD (server-side
#           apply), writes DIR/coscheduling/config.yaml (a free loopback port
#           for the scheduler's secure serving, its /healthz; DIR/coscheduling/env
#           records it) and starts the scheduler (pid DIR/coscheduling.pid, log
#           DIR/logs/coscheduling.log); waits until its /healthz answers ok.
#           A scheduler already up from DIR is stopped first.
#   down    stops it (SIGTERM, 5 s, SIGKILL); nothing to do when it is not up.
#           The CRD and the PodGroups stay (testenv.sh stop wipes etcd).
#   status  exit 0 when the scheduler runs and its /healthz answers ok.
#
# The configuration (KubeSchedulerConfiguration v1): no leader election, the
# admin kubeconfig, Coscheduling as the queue sort (the other queue sorts
# disabled: a profile has exactly one, and Coscheduling's keeps a group's pods
# together in the queue) and in PreFilter, PostFilter, Permit and Reserve
# beside the default plugins; the Permit stage holds a group's pods that fit
# for up to permitWaitingTimeSeconds (WEFT_COSCHED_PERMIT_WAIT) until
# minMember of them do, then binds them together, else rejects them all. No
# --authentication-kubeconfig/--authorization-kubeconfig: against the testenv
# API server (no requestheader CA) the scheduler would log an error about the
# missing client CA bundle again and again; without them /healthz, /readyz
# and /livez still answer anyone (the scheduler's always-allowed paths), over
# a self-signed certificate.
#
# The version: the Go module proxy serves only the tags it is asked for by
# name (`go list -m -versions sigs.k8s.io/scheduler-plugins` is refused with
# 403, @latest 404), so the release was picked from upstream's tags:
# v0.35.4-devel is the newest (upstream's name for the line that follows
# Kubernetes 1.35; it requires k8s.io/kubernetes v1.35.4, the release
# localcluster/kube-1.35 pins). Against the 1.37 API server of the default
# local cluster that is a scheduler two minors older, beyond upstream's skew
# policy (one minor); it works for PodGroup gang scheduling here. With
# WEFT_KUBE_VERSION=oldest (1.35.4) the releases match exactly.
#
# PodGroup .status (phase, scheduled, running) stays empty: the scheduler
# never writes it; scheduler-plugins' controller (cmd/controller) does, and
# it is not run here. Coscheduling reads only the PodGroup's spec (minMember,
# minResources, scheduleTimeoutSeconds) and the pods.
#
# Usage: localcluster/coscheduling.sh build [--print-dir]
#        localcluster/coscheduling.sh up|down|status DIR
# Env: WEFT_COSCHED_CACHE (the build's directory), WEFT_COSCHED_BUILD_NICE=0
#      (build at normal priority; default nice 19), GO (the go command),
#      WEFT_COSCHED_PERMIT_WAIT (Coscheduling's permitWaitingTimeSeconds,
#      default 60), WEFT_COSCHED_LOG_LEVEL (--v, default 2),
#      WEFT_KUBE_VERSION (which kubectl, kube-bin.sh).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
NAME=coscheduling
MOD=$HERE/scheduler-plugins
CACHE=${WEFT_COSCHED_CACHE:-$HOME/.cache/weft/scheduler-plugins-$(cat "$MOD/go.mod" "$MOD/go.sum" | sha256sum | cut -c1-12)}
BIN=$CACHE/bin/kube-scheduler
CRDS=$CACHE/crds
NICE=${WEFT_COSCHED_BUILD_NICE:-19}
VERSION=$(sed -n 's#^\(require \)\{0,1\}[[:space:]]*sigs.k8s.io/scheduler-plugins \(v[^ ]*\).*#\2#p' "$MOD/go.mod" | head -1)
# The version the binary reports (--version, /version) and takes as its own
# Kubernetes release: that of k8s.io/kubernetes (go.mod's replace), v1.35.4.
# Not upstream Makefile's v0.35.4 (the plugins' tag): component-base checks
# the binary's version against its emulation and compatibility versions, and
# with v0.35.4 the scheduler exits at start ("emulation version 0.35 is not
# between [1.31, 0.35.0]"); unset, it is v0.0.0-master.
KUBE_GIT_VERSION=$(sed -n 's#^[[:space:]]*k8s.io/kubernetes => k8s.io/kubernetes \(v[^ ]*\).*#\1#p' "$MOD/go.mod" | head -1)
SCHEDULER_NAME=scheduler-plugins-scheduler
USAGE="usage: coscheduling.sh build [--print-dir] | coscheduling.sh up|down|status DIR"
CMD=${1:?$USAGE}
# shellcheck source=addon-lib.sh
. "$HERE/addon-lib.sh"
WHAT="scheduler-plugins $VERSION's kube-scheduler (cmd/scheduler; about 3 minutes the first time)"

built() { [ -x "$BIN" ] && [ -f "$CRDS/scheduling.x-k8s.io_podgroups.yaml" ]; }
compile() {  # compile OUT LOG
  local dir
  [ -n "$VERSION" ] || { echo "coscheduling: $MOD/go.mod requires no sigs.k8s.io/scheduler-plugins" >&2; exit 1; }
  [ -n "$KUBE_GIT_VERSION" ] || { echo "coscheduling: $MOD/go.mod replaces no k8s.io/kubernetes" >&2; exit 1; }
  # CGO_ENABLED=0 as build-kube.sh builds the Kubernetes programs (only the
  # standard library's net and os/user have cgo files in this program).
  CGO_ENABLED=0 go_build "$2" sigs.k8s.io/scheduler-plugins/cmd/scheduler \
    -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_GIT_VERSION" -o "$1"
  # The CRD's file in the module: manifests/crds/scheduling.x-k8s.io_podgroups.yaml
  # is a symlink to it upstream, and module zips drop symlinks.
  dir=$(module_dir sigs.k8s.io/scheduler-plugins 2>>"$2") || true
  if [ -z "$dir" ] || [ ! -f "$dir/manifests/coscheduling/crd.yaml" ]; then
    echo "coscheduling: no PodGroup CRD in sigs.k8s.io/scheduler-plugins@$VERSION's manifests/coscheduling/crd.yaml (log: $2)" >&2; exit 1
  fi
  cp "$dir/manifests/coscheduling/crd.yaml" "$CACHE/stage/crds/scheduling.x-k8s.io_podgroups.yaml"
}

if [ "$CMD" = build ]; then
  if [ "${2:-}" = --print-dir ]; then echo "$CACHE"; exit 0; fi
  addon_build "" "$WHAT"
  exit 0
fi

case $CMD in up|down|status) ;; *) echo "coscheduling: unknown command '$CMD'; $USAGE" >&2; exit 2 ;; esac
addon_dir "$CMD" "${2:?$USAGE}"
STATE=$DIR/coscheduling
PIDF=$DIR/coscheduling.pid
LOGF=$DIR/logs/coscheduling.log

ours() {  # ours PID: PID runs this DIR's scheduler (not the control plane's kube-scheduler)
  [ -n "$1" ] && kill -0 "$1" 2>/dev/null \
    && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF -- "--config=$STATE/config.yaml"
}
health() { sed -n 's/^COSCHED_HEALTH=//p' "$STATE/env" 2>/dev/null; }
healthy() { local h; h=$(health); [ -n "$h" ] && [ "$(curl -sk -m 2 "https://$h/healthz" 2>/dev/null)" = ok ]; }
nothing() { :; }

case $CMD in
down)
  if addon_stop; then echo "coscheduling: down"; fi
  exit 0
  ;;
status)
  if alive && healthy; then
    echo "coscheduling: up (pid $(cat "$PIDF"), schedulerName $SCHEDULER_NAME, https://$(health)/healthz)"; exit 0
  fi
  echo "coscheduling: not running"; exit 1
  ;;
esac

# ---- up ----
[ -f "$DIR/kubeconfig" ] || { echo "coscheduling: no $DIR/kubeconfig: start a cluster first (cluster.sh up or testenv.sh start)" >&2; exit 1; }
addon_build quiet "$WHAT"
T0=$(date +%s%N)
addon_stop || true
export KUBECONFIG=$DIR/kubeconfig
# shellcheck source=kube-bin.sh
. "$HERE/kube-bin.sh"   # kubectl of the control plane's release first on PATH
mkdir -p "$STATE" "$DIR/logs"
addon_apply_crds "$STATE"

start_scheduler() {  # writes the config, picks a fresh port and starts the scheduler
  local port
  port=$(free_ports 1)
  cat > "$STATE/config.yaml" <<Y
# Written by localcluster/coscheduling.sh (scheduler-plugins $VERSION).
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
clientConnection:
  kubeconfig: "$DIR/kubeconfig"
profiles:
- schedulerName: $SCHEDULER_NAME
  plugins:
    queueSort:
      enabled:
      - name: Coscheduling
      disabled:
      - name: "*"
    preFilter:
      enabled:
      - name: Coscheduling
    postFilter:
      enabled:
      - name: Coscheduling
    permit:
      enabled:
      - name: Coscheduling
    reserve:
      enabled:
      - name: Coscheduling
  pluginConfig:
  - name: Coscheduling
    args:
      permitWaitingTimeSeconds: ${WEFT_COSCHED_PERMIT_WAIT:-60}
Y
  printf 'COSCHED_VERSION=%s\nCOSCHED_SCHEDULER_NAME=%s\nCOSCHED_HEALTH=127.0.0.1:%s\nCOSCHED_LOG=%s\n' \
    "$VERSION" "$SCHEDULER_NAME" "$port" "$LOGF" > "$STATE/env"
  echo "---- coscheduling.sh up $(date -u +%FT%TZ): $BIN" >> "$LOGF"
  # setsid (not a process group leader here, so it does not fork) execs the
  # scheduler: the pid is the scheduler's, leading its group.
  setsid "$BIN" --config="$STATE/config.yaml" --bind-address=127.0.0.1 --secure-port="$port" \
    --v="${WEFT_COSCHED_LOG_LEVEL:-2}" </dev/null >>"$LOGF" 2>&1 &
  echo $! > "$PIDF"
}
addon_start start_scheduler healthy 60 "$LOGF" nothing
echo "coscheduling: scheduler-plugins $VERSION up in $(( ($(date +%s%N) - T0) / 1000000 )) ms (log $LOGF)"
