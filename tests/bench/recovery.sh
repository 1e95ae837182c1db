#!/bin/bash
# Recovery time of a gang on the local cluster (docs/benchmarks/operator.md,
# "Recovery"): a 2-pod job trains; rank 1's worker is killed (kill -9); the
# clock runs until every rank of the new attempt trains again (each rank has
# logged a step after resuming). Parts, from timestamps of the same clock:
#   detected    kill -> the operator restarts the gang (its log line; rank 0
#               first loses its peer, exits 3, and the pod fails)
#   relaunched  -> the new attempt's last worker process started (the node's
#               log; includes the restart backoff, 1 s for the first counted
#               restart here, and the pods' deletion, creation and scheduling)
#   rendezvous  -> every rank's process groups are ready ("comm: ... ready")
#   loaded      -> every rank resumed from the checkpoint ("resumed from")
#   first step  -> every rank logged its first step
# Each repeat is a fresh job (its first restart), so the backoff is the same.
# Usage: tests/bench/recovery.sh BUILD_DIR [REPEATS] [MODEL]
#   MODEL: tiny (the preset, 0.8 M parameters) or 13.7m (d_model 512, 4
#   layers, vocab 2048: the data-parallel benchmark's model)
# Brings its own local cluster up in BUILD_DIR/recovery-cluster and down.
set -euo pipefail
BUILD=$(cd "${1:?usage: recovery.sh BUILD_DIR [REPEATS] [MODEL]}" && pwd)
REPEATS=${2:-3}
MODEL=${3:-tiny}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
CLUSTER=$BUILD/recovery-cluster
"$SRC/localcluster/cluster.sh" up "$CLUSTER" "$BUILD" >/dev/null
trap '"$SRC/localcluster/cluster.sh" down "$CLUSTER" "$BUILD" >/dev/null 2>&1 || true' EXIT
export KUBECONFIG=$CLUSTER/kubeconfig
. "$SRC/localcluster/kube-bin.sh"   # kubectl of the control plane's release first on PATH
: > "$CLUSTER/rows.txt"
STATE=$CLUSTER/node
NS=recovery
kubectl create namespace $NS >/dev/null 2>&1 || true
case $MODEL in
  tiny) model="{}" train="{steps: 100000, log_every: 1}" ;;
  13.7m) model="{vocab_size: 2048, d_model: 512, n_layers: 4, n_heads: 8, n_kv_heads: 4, max_seq_len: 128}"
         train="{steps: 100000, log_every: 1, micro_batch: 4, seq_len: 128}" ;;
  *) echo "recovery.sh: MODEL is tiny or 13.7m" >&2; exit 2 ;;
esac

now() { date +%s.%N; }
# Epoch seconds of a worker log line's "[HH:MM:SS.mmm]" stamp (today, local time).
stamp() { python3 -c "
import sys, datetime as d
t = d.datetime.strptime(sys.argv[1], '%H:%M:%S.%f').time()
print(d.datetime.combine(d.date.today(), t).timestamp())" "$1"; }
stamp_of() { grep -m1 "$2" "$1" | grep -o '^\[[0-9:.]*\]' | tr -d '[]'; }
wait_until() {  # wait_until SECONDS CMD...
  local end=$((SECONDS + $1)); shift
  until "$@"; do [ $SECONDS -lt $end ] || return 1; sleep 0.1; done
}
pod_field() { kubectl get pod "$1" -n $NS -o jsonpath="$2" 2>/dev/null; }
log_of() {  # the worker log of pod $1 in attempt $2
  local uid; uid=$(pod_field "$1" '{.metadata.uid}')
  [ "$(pod_field "$1" '{.metadata.labels.weft\.dev/attempt}')" = "$2" ] || return 1
  ls "$STATE"/logs/${NS}_$1_$uid/worker/0.log 2>/dev/null
}
stepped_after_resume() { local f; f=$(log_of "$1" "$2") && grep -q "resumed from" "$f" && grep -A1000 "resumed from" "$f" | grep -qE 'step +[0-9]+/'; }
past_checkpoint() { local f; f=$(log_of job-0 "$A") && grep -q "checkpoint written: /ckpt/step-" "$f" && [ "$(grep -cE 'step +[0-9]+/' "$f")" -ge 12 ]; }

printf '| repeat | detected | relaunched | rendezvous | checkpoint loaded | first step | total |\n|---|---|---|---|---|---|---|\n'
totals=()
for r in $(seq 1 "$REPEATS"); do
  kubectl delete tj job -n $NS --wait=true >/dev/null 2>&1 || true
  wait_until 60 bash -c "[ -z \"\$(kubectl get pods -n $NS -o name 2>/dev/null)\" ]"
  ckpt=$CLUSTER/ckpt-$r; rm -rf "$ckpt"; mkdir -p "$ckpt"
  kubectl apply -n $NS -f - >/dev/null <<YAML
apiVersion: weft.dev/v1alpha1
kind: TrainingJob
metadata: {name: job}
spec:
  replicas: 2
  image: ghcr.io/weft-dev/weft:0.1.0
  restartPolicy: {maxRestarts: 5, backoffSeconds: 1}
  template:
    volumes: [{name: ckpt, hostPath: {path: $ckpt, type: DirectoryOrCreate}}]
    volumeMounts: [{name: ckpt, mountPath: /ckpt}]
  worker:
    preset: tiny
    device: cpu
    model: $model
    train: $train
    checkpoint: {dir: /ckpt, every: 5, async: false}
    parallel: {strategy: dp}
YAML
  wait_until 60 bash -c "[ -n \"\$(kubectl get tj job -n $NS -o jsonpath='{.status.attempt}' 2>/dev/null)\" ]"
  A=$(kubectl get tj job -n $NS -o jsonpath='{.status.attempt}'); B=$((A + 1))
  wait_until 120 past_checkpoint || { echo "recovery.sh: the job never trained past a checkpoint (attempt $A)" >&2; kubectl get tj,pods -n $NS -o wide >&2; kubectl get tj job -n $NS -o jsonpath="{.status.conditions}" >&2; ls "$STATE"/logs >&2; tail -5 "$STATE"/logs/${NS}_job-0_*/worker/0.log >&2; exit 1; }
  uid1=$(pod_field job-1 '{.metadata.uid}')
  run=$(python3 -c "import json;print(json.load(open('$STATE/pods/$uid1/record.json'))['run'])")
  pid=$(python3 -c "import json;print(json.load(open('$STATE/pods/$uid1/runs/$run/pid.json'))['pid'])")
  t_kill=$(now)
  kill -9 "$pid"
  wait_until 120 stepped_after_resume job-0 $B && wait_until 60 stepped_after_resume job-1 $B \
    || { echo "recovery.sh: attempt 2 never trained" >&2; exit 1; }
  # The first line of the operator's or the node's log after the kill that
  # contains every given string, as epoch seconds.
  after_kill() { python3 - "$t_kill" "$@" <<'PY'
import sys, datetime as d
kill, path, *want = float(sys.argv[1]), sys.argv[2], *sys.argv[3:]
for line in open(path):
    try:
        t = d.datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S.%f").timestamp()
    except ValueError:
        try:  # "[HH:MM:SS.mmm]" (weft-node): today
            t = d.datetime.combine(d.date.today(), d.datetime.strptime(line[1:13], "%H:%M:%S.%f").time()).timestamp()
        except ValueError:
            continue
    if t >= kill and all(w in line for w in want):
        print(t); break
PY
  }
  t_detect=$(after_kill "$CLUSTER/logs/weft-operator.log" "$NS/job:" "as attempt $B ")
  last() { printf '%s\n' "$@" | sort -g | tail -1; }
  starts=() readies=() loads=() firsts=()
  for p in job-0 job-1; do
    f=$(log_of $p $B)
    starts+=("$(after_kill "$CLUSTER/logs/weft-node.log" "pod $NS/$p: started run")")
    readies+=("$(stamp "$(stamp_of "$f" 'comm: rank .* ready')")")
    loads+=("$(stamp "$(stamp_of "$f" 'resumed from')")")
    firsts+=("$(stamp "$(grep -A1000 'resumed from' "$f" | grep -m1 -E 'step +[0-9]+/' | grep -o '^\[[0-9:.]*\]' | tr -d '[]')")")
  done
  python3 - "$r" "$t_kill" "$t_detect" "$(last "${starts[@]}")" "$(last "${readies[@]}")" \
    "$(last "${loads[@]}")" "$(last "${firsts[@]}")" <<'PY' | tee -a "$CLUSTER/rows.txt"
import sys
r, kill, detect, start, ready, load, first = sys.argv[1], *map(float, sys.argv[2:])
marks = [kill, detect, start, ready, load, first]
parts = [b - a for a, b in zip(marks, marks[1:])]
print(f"| {r} | " + " | ".join(f"{p:.2f} s" for p in parts) + f" | **{first - kill:.2f} s** |")
PY
done
python3 - "$CLUSTER/rows.txt" "$MODEL" <<'PY'
import re, statistics, sys
tot = [float(re.search(r"\*\*([0-9.]+) s\*\*", l).group(1)) for l in open(sys.argv[1])]
print(f"\n{sys.argv[2]}: recovery (kill -9 of a rank -> every rank training again) "
      f"min {min(tot):.2f} s, median {statistics.median(tot):.2f} s, max {max(tot):.2f} s over {len(tot)} repeats")
PY
