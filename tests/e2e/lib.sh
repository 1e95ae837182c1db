#!/bin/bash
# Shared helpers of the end-to-end tests: each test runs against the local
# cluster of its ctest fixture (localcluster/cluster.sh), in its own
# namespace, with the real kubectl. The cluster's nodes are weft-node's
# (fixture e2e-cluster: pod processes, logs and exit results are found
# through its state dir CLUSTER/node: logs/<ns>_<pod>_<uid>/worker/<run>.log)
# or real ones (fixture e2e-pods, CLUSTER/runtime says containerd: each
# kubelet's podLogsDir, CLUSTER/nodes/<node>/pod-logs/<ns>_<pod>_<uid>/<container>/<restart>.log,
# whose files are hard-linked under CLUSTER/kept-logs as they appear, since
# the kubelet deletes a pod's logs with the pod and a test reads every
# attempt's; processes through the CRI, localcluster/nodes.sh pid).
# Source it: . lib.sh CLUSTER_DIR SOURCE_DIR TEST_NAME
set -uo pipefail
CLUSTER=$1 SRC=$2 TEST=$3
export KUBECONFIG=$CLUSTER/kubeconfig
. "$SRC/localcluster/kube-bin.sh"   # kubectl of the control plane's release first on PATH
STATE=$CLUSTER/node
RUNTIME=$(cat "$CLUSTER/runtime" 2>/dev/null || echo weft-node)
NS=e2e-$TEST-$$
KEEP=$CLUSTER/kept-logs/$NS
KEEPER=""
if [ "$RUNTIME" = containerd ]; then
  mkdir -p "$KEEP"
  (
    while kill -0 $$ 2>/dev/null; do
      for f in "$CLUSTER"/nodes/weft-node-*/pod-logs/"$NS"_*/*/*.log; do
        [ -f "$f" ] || continue
        d=$KEEP/$(basename "$(dirname "$(dirname "$f")")")/$(basename "$(dirname "$f")")
        [ -e "$d/$(basename "$f")" ] || { mkdir -p "$d"; ln "$f" "$d/" 2>/dev/null; }
      done
      sleep 0.2
    done
  ) &
  KEEPER=$!
fi
T0=$(date +%s%N)

elapsed() { echo "$(( ($(date +%s%N) - T0) / 1000000 ))"; }  # ms since the test started
log() { printf '[%6.1fs] %s\n' "$(echo "$(elapsed) / 1000" | bc -l)" "$*"; }
dump() {
  echo "---- kubectl get tj,pods -n $NS"
  kubectl get tj,pods -n "$NS" -o wide 2>&1
  kubectl get tj -n "$NS" -o jsonpath='{range .items[*]}{.status}{"\n"}{end}' 2>&1
  local f
  for f in $(all_logs); do
    echo "---- $f"; tail -8 "$f"
  done
  if [ "$RUNTIME" = containerd ]; then
    echo "---- weft-operator pods (last lines)"
    kubectl logs -n weft-system -l app.kubernetes.io/name=weft-operator --prefix --tail 15 2>&1
  else
    echo "---- weft-operator (last lines)"; tail -15 "$CLUSTER/logs/weft-operator.log"
  fi
}
fail() { echo "FAIL [$TEST]: $*" >&2; dump >&2; finish 1; }
finish() {
  kubectl delete namespace "$NS" --wait=false >/dev/null 2>&1
  [ -n "${WATCHER:-}" ] && kill "$WATCHER" 2>/dev/null
  rm -rf "$EXITS" "$CLUSTER/$NS"-work-*
  if [ -n "$KEEPER" ]; then
    kill "$KEEPER" 2>/dev/null
    [ "${1:-0}" = 0 ] && rm -rf "$KEEP"   # kept for a failed test's post-mortem
  fi
  exit "${1:-0}"
}

kubectl create namespace "$NS" >/dev/null || fail "cannot create namespace"
for _ in $(seq 1 100); do kubectl get sa default -n "$NS" >/dev/null 2>&1 && break; sleep 0.1; done

tj_field() { kubectl get tj "$1" -n "$NS" -o jsonpath="{$2}" 2>/dev/null; }
# has_event OBJECT REASON [TYPE]: whether an object of this namespace (by
# name) has an event of that reason (and type). The list is read whole before
# grep looks: grep -q's early exit would fail kubectl with SIGPIPE under
# pipefail.
has_event() {
  local e
  e=$(kubectl get events -n "$NS" --field-selector "involvedObject.name=$1" \
        -o jsonpath='{range .items[*]}{.type} {.reason}{"\n"}{end}' 2>/dev/null)
  if [ -n "${3:-}" ]; then grep -qx "$3 $2" <<<"$e"; else grep -q " $2\$" <<<"$e"; fi
}
# wait_for SECONDS DESCRIPTION COMMAND...: polls every 0.2 s.
wait_for() {
  local secs=$1 what=$2; shift 2
  local until=$(( $(date +%s) + secs ))
  while [ "$(date +%s)" -lt $until ]; do
    "$@" && return 0
    sleep 0.2
  done
  fail "timed out after ${secs}s waiting for: $what"
}
# wait_for_quiet SECONDS COMMAND...: like wait_for, but returns 1 on timeout.
wait_for_quiet() {
  local secs=$1; shift
  local until=$(( $(date +%s) + secs ))
  while [ "$(date +%s)" -lt $until ]; do "$@" && return 0; sleep 0.2; done
  return 1
}
phase_is() { [ "$(tj_field "$1" .status.phase)" = "$2" ]; }
# A pod's uid. Retried for up to 10 s: under load a kubectl call can fail, and
# an empty uid would point every later path at a directory that never exists.
pod_uid() {
  local u _
  for _ in $(seq 1 50); do
    u=$(kubectl get pod "$1" -n "$NS" -o jsonpath='{.metadata.uid}' 2>/dev/null)
    [ -n "$u" ] && { echo "$u"; return 0; }
    sleep 0.2
  done
  return 1
}
has_log() { [ -n "$(logs_of "$1")" ]; }
# Every log of a pod name across attempts, oldest first; all_logs: of every pod.
if [ "$RUNTIME" = containerd ]; then
  logs_of() { ls -tr "$KEEP"/"$NS"_"$1"_*/worker/*.log 2>/dev/null; }
  all_logs() { ls -tr "$KEEP"/"$NS"_*/worker/*.log 2>/dev/null; }
else
  logs_of() { ls -tr "$STATE"/logs/"$NS"_"$1"_*/worker/*.log 2>/dev/null; }
  all_logs() { ls -tr "$STATE"/logs/"$NS"_*/worker/*.log 2>/dev/null; }
fi
if [ "$RUNTIME" = containerd ]; then
  CRICTL=$("$SRC/localcluster/build-node-runtime.sh" --print-dir)/bin/crictl
  # crictl on every node: crictl_all ARGS... (one line per node's output line)
  crictl_all() {
    local s
    for s in /run/weft-nodes/n*/containerd.sock; do
      [ -S "$s" ] && "$CRICTL" --runtime-endpoint "unix://$s" "$@" 2>/dev/null
    done
  }
  # The host pid of a running pod's worker container (its first process).
  worker_pid() { "$SRC/localcluster/nodes.sh" pid "$CLUSTER" "$NS" "$1" worker; }
  # Running worker containers of this namespace's pods, on every node.
  live_processes() {
    crictl_all ps -q --state running --name '^worker$' --label "io.kubernetes.pod.namespace=$NS" | grep -c .
  }
  # A pod's working directory (/tmp, an emptyDir the kubelet removes with the
  # container): copied while its rank serves its final metrics after
  # "training done" (metrics.linger_seconds); prints the copy's path.
  workdir_of() {
    local pod=$1 node uid scratch dest=$CLUSTER/$NS-work-$1 _
    for _ in $(seq 1 1500); do
      grep -q "training done" $(logs_of "$pod") /dev/null 2>/dev/null && break
      sleep 0.2
    done
    grep -q "training done" $(logs_of "$pod") /dev/null 2>/dev/null || { echo "no 'training done' from $pod" >&2; return 1; }
    node=$(kubectl get pod "$pod" -n "$NS" -o jsonpath='{.spec.nodeName}') && uid=$(pod_uid "$pod") || return 1
    scratch=$CLUSTER/nodes/$node/kubelet/pods/$uid/volumes/kubernetes.io~empty-dir/weft-tmp
    rm -rf "$dest"
    cp -a "$scratch" "$dest" || return 1
    echo "$dest"
  }
  # What a pod of this namespace left running on a node: kubelet pod
  # directories (volumes), running containers, ready sandboxes (network
  # namespaces). Exited containers and sandboxes wait for the kubelet's
  # garbage collection (every minute), as on any node.
  pod_leftovers() {
    local d
    for d in "$CLUSTER"/nodes/weft-node-*/kubelet/pods/*/; do
      [ -f "$d/etc-hosts" ] && grep -q "$NS" "$d/etc-hosts" 2>/dev/null && echo "$d"
    done
    crictl_all ps -q --label "io.kubernetes.pod.namespace=$NS"
    crictl_all pods -q --state ready --namespace "$NS"
  }
else
  # The container's pid (leader of its process group) of a running pod.
  worker_pid() {
    local uid; uid=$(pod_uid "$1")
    [ -n "$uid" ] || return 1
    local run; run=$(python3 -c "import json;print(json.load(open('$STATE/pods/$uid/record.json'))['run'])" 2>/dev/null) || return 1
    python3 -c "import json;print(json.load(open('$STATE/pods/$uid/runs/$run/pid.json'))['pid'])" 2>/dev/null
  }
  # Live processes started for this namespace's pods (by pid files of existing pod dirs).
  live_processes() {
    local n=0 rec pidf pid
    for rec in "$STATE"/pods/*/record.json; do
      [ -f "$rec" ] || continue
      grep -q "\"namespace\":\"$NS\"" "$rec" || continue
      for pidf in "$(dirname "$rec")"/runs/*/pid.json; do
        [ -f "$pidf" ] || continue
        pid=$(python3 -c "import json;print(json.load(open('$pidf'))['pid'])" 2>/dev/null) || continue  # pod just removed
        kill -0 "$pid" 2>/dev/null && n=$((n + 1))
      done
    done
    echo $n
  }
  workdir_of() { local u; u=$(pod_uid "$1") && echo "$STATE/pods/$u/work"; }
  pod_leftovers() {
    ls "$STATE"/pods/ | while read -r d; do grep -q "\"namespace\":\"$NS\"" "$STATE/pods/$d/record.json" 2>/dev/null && echo "$d"; done
  }
fi
# Every container exit of this namespace's pods as the API server shows it
# ("pod uid exitCode" lines in $EXITS), recorded from a watch started by
# watch_exits: a pod deleted after its containers stopped is gone before a
# test could read its status.
EXITS=$CLUSTER/$NS.exits
watch_exits() {
  kubectl get pods -n "$NS" --watch -o jsonpath='{.metadata.name}{" "}{.metadata.uid}{" "}{.status.containerStatuses[0].state.terminated.exitCode}{"\n"}' \
    > "$EXITS" 2>/dev/null &
  WATCHER=$!
}
exit_code_of() { awk -v p="$1" '$1 == p && NF == 3 {c = $3} END {print c}' "$EXITS" 2>/dev/null; }
exit_code_of_uid() { awk -v u="$1" '$2 == u && NF == 3 {c = $3} END {print c}' "$EXITS" 2>/dev/null; }
# The log of a pod's first container run, by pod name and uid (it may not exist yet).
if [ "$RUNTIME" = containerd ]; then
  log_path_of() { echo "$KEEP/${NS}_$1_$2/worker/0.log"; }
else
  log_path_of() { echo "$STATE/logs/${NS}_$1_$2/worker/0.log"; }
fi
# apply_testdata FILE [SED_EXPR...]: apply a manifest from tests/e2e/testdata
# with __CKPT__ replaced by a fresh host dir, and the sed expressions applied.
apply_testdata() {
  local file=$1 e; shift
  local args=(-e "s#__CKPT__#$CKPT_ROOT/$NS#g")
  for e in "$@"; do args+=(-e "$e"); done
  CKPT=$CKPT_ROOT/$NS
  rm -rf "$CKPT"; mkdir -p "$CKPT"
  chmod 0777 "$CKPT"   # the pods of real nodes run as uid 65532 (the chart's and the operator's securityContext)
  sed "${args[@]}" "$SRC/tests/e2e/testdata/$file" | kubectl apply -n "$NS" -f - >/dev/null || fail "kubectl apply $file"
}
CKPT_ROOT=$CLUSTER/ckpt
latest_step() { [ -f "$CKPT/latest" ] && sed -n 's/^step-\([0-9][0-9]*\)$/\1/p' "$CKPT/latest"; }
# Predicates for wait_for (evaluated on every poll).
ckpt_at_least() { [ "$(latest_step || echo 0)" -ge "$1" ]; }
tj_field_is() { [ "$(tj_field "$1" "$2")" = "$3" ]; }
tj_field_set() { [ -n "$(tj_field "$1" "$2")" ]; }
live_processes_are() { [ "$(live_processes)" = "$1" ]; }
no_pods() { [ -z "$(kubectl get pods -n "$NS" -o name 2>/dev/null)" ]; }

# step_losses STEPS PREFIX FILE...: the "step N/STEPS | loss X" lines that
# follow PREFIX (a sed regex: '\[rank 0\] ' in weft-run's output, '' in a
# one-rank pod's own log) as "N X".
step_losses() {
  local steps=$1 prefix=$2; shift 2
  sed -n "s/.*${prefix}.*step *\([0-9][0-9]*\)\/${steps} | loss \([0-9.]*\).*/\1 \2/p" "$@"
}
# match_weft_run JOB WORLD STEPS PREFIX WHAT [TOL]: runs `weft-run -n WORLD`
# (from $BIN) outside the cluster on JOB's spec.worker and compares every loss
# that pod JOB-0 logged after PREFIX, in all its attempts, with that run's:
# fails on a difference beyond TOL (default 0: equal as logged) or a step the
# pods never logged.
match_weft_run() {
  local job=$1 world=$2 steps=$3 prefix=$4 what=$5 tol=${6:-0}
  local ref=$CLUSTER/ref-$NS
  rm -rf "$ref"; mkdir -p "$ref"
  kubectl get tj "$job" -n "$NS" -o jsonpath='{.spec.worker}' > "$ref/worker.json"  # JSON is YAML
  (cd "$ref" && WEFT_CHECKPOINT_DIR=$ref/ckpt WEFT_METRICS_PORT=0 timeout 600 "$BIN/weft-run" -n "$world" -- \
    "$ref/worker.json" > "$ref/run.log" 2>&1) || fail "weft-run -n $world: $(tail -5 "$ref/run.log")"
  step_losses "$steps" '\[rank 0\] ' "$ref/run.log" | sort > "$ref/want"  # join's order
  [ "$(wc -l < "$ref/want")" = "$steps" ] \
    || fail "weft-run -n $world logged $(wc -l < "$ref/want") losses: $(tail -3 "$ref/run.log")"
  step_losses "$steps" "$prefix" $(logs_of "$job-0") | sort > "$ref/got"
  join "$ref/want" "$ref/got" | sort -n > "$ref/both"
  local logged; logged=$(cut -d' ' -f1 "$ref/both" | sort -u | wc -l)
  [ "$logged" = "$steps" ] || fail "the pods logged $logged of $steps steps"
  awk -v tol="$tol" '{d = $2 - $3; if (d < 0) d = -d; if (d > worst) worst = d}
    d > tol {bad = 1; print "step " $1 ": weft-run -n '"$world"' " $2 ", pods " $3}
    END {printf "largest difference %.4f (allowed %s)\n", worst, tol > "/dev/stderr"; exit bad}' "$ref/both" \
    || fail "losses differ from weft-run -n $world"
  log "losses (step, weft-run -n $world, $what): $(awk 'NR == 1 || NR % 10 == 0' "$ref/both" | head -4 | paste -sd'|') ... $(tail -1 "$ref/both")"
  if [ "$tol" = 0 ]; then log "all $(wc -l < "$ref/both") logged losses equal over $steps steps"
  else log "all $(wc -l < "$ref/both") logged losses within $tol over $steps steps"; fi
  rm -rf "$ref"
}
