#!/bin/bash
# A 4-rank example (manifests/examples/tuning.yaml: data parallel over 4 CPU
# ranks, tuning enabled: in 30 steps the tuner may start a trial or two;
# tuning.sh is the test of the tuner),
# applied with the real kubectl with its step count cut from 400 to 30 for
# CI: the four ranks rendezvous, train, all exit 0 and the job succeeds.
# (manifests/examples/zero.yaml is the other 4-rank example: ZeRO-2 over the
# same 4 ranks.)
. "$(dirname "$0")/lib.sh" "$1" "$2" four-ranks
sed 's/train: {steps: 400}/train: {steps: 30, log_every: 10}/' "$SRC/manifests/examples/tuning.yaml" \
  | kubectl apply -n "$NS" -f - >/dev/null || fail "kubectl apply"
[ "$(tj_field tiny-tuned .spec.worker.train.steps)" = 30 ] || fail "step override not applied"
wait_for 60 "phase Running" phase_is tiny-tuned Running
log "Running: $(kubectl get tj tiny-tuned -n "$NS" --no-headers)"
work=$(workdir_of tiny-tuned-0) || fail "rank 0's working directory"
wait_for 240 "phase Succeeded" phase_is tiny-tuned Succeeded
log "Succeeded: $(kubectl get tj tiny-tuned -n "$NS" --no-headers)"
codes=$(kubectl get pods -n "$NS" -o jsonpath='{range .items[*]}{.status.containerStatuses[0].state.terminated.exitCode}{" "}{end}')
[ "$codes" = "0 0 0 0 " ] || fail "exit codes: $codes"
summary=$work/runs/weft/summary.json
[ "$(python3 -c "import json;s=json.load(open('$summary'));print(s['steps_done'], s['world_size'])")" = "30 4" ] \
  || fail "summary: $(head -c 400 "$summary" 2>&1)"
log "PASS: 4 data-parallel ranks trained 30 steps"
finish 0
