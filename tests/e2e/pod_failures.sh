#!/bin/bash
# Pods that do not start, or stop at once, on real nodes: each reaches the
# TrainingJob's status as a condition naming the pod and the cause, and the
# gang-restart policy does what docs/operator/reconcile.md says. The e2e-pods
# fixture runs the operator with --pod-start-timeout-seconds 30.
#   image-absent  an image no node has, imagePullPolicy Never: the kubelet's
#                 ErrImageNeverPull; Ready False ImageNotPresent naming the
#                 pod and a Warning event; Failed ImageNotPresent at the start
#                 deadline, no gang restart
#   oom           a memory limit the worker cannot start in (its own check of
#                 the limit skipped): the container is OOMKilled; a counted gang restart (Restarting RankOOMKilled,
#                 naming the pod, OOMKilled and the limit), then Failed
#                 MaxRestartsExceeded at maxRestarts 1
#   stuck         a ConfigMap volume that does not exist: the pod stays
#                 ContainerCreating; at the deadline a counted gang restart
#                 (RankStartTimeout naming the pod), then Failed
#                 MaxRestartsExceeded at the next deadline (maxRestarts 1)
# (A container that exits 1 at start is e2e_bad_config_fails.)
# Usage: pod_failures.sh CLUSTER_DIR SOURCE_DIR
. "$(dirname "$0")/lib.sh" "$1" "$2" pod-failures
[ "$RUNTIME" = containerd ] || { echo "SKIP: needs real nodes (the e2e-pods fixture)"; finish 77; }

job() {  # job NAME IMAGE EXTRA_SPEC_YAML
  cat <<EOF | kubectl apply -n "$NS" -f - >/dev/null || fail "kubectl apply $1"
apiVersion: weft.dev/v1alpha1
kind: TrainingJob
metadata:
  name: $1
spec:
  replicas: 1
  image: $2
$3
  worker:
    preset: tiny
    device: cpu
    train: {steps: 50}
EOF
}
condition() { tj_field "$1" ".status.conditions[?(@.type==\"$2\")].$3"; }
has_reason() { [ "$(condition "$1" "$2" reason)" = "$3" ]; }

# The three jobs at once; their checks in turn.
# The worker refuses a limit it cannot train in (exit 1, BadConfig) unless
# told to skip that check: skipped here, so the kernel kills it.
job oom ghcr.io/weft-dev/weft-worker:0.1.0-cpu "  resources:
    limits: {memory: 24Mi}
  restartPolicy: {maxRestarts: 1, backoffSeconds: 1}
  template:
    env:
    - {name: WEFT_SKIP_MEMORY_CHECK, value: '1'}"
job stuck ghcr.io/weft-dev/weft-worker:0.1.0-cpu "  restartPolicy: {maxRestarts: 1, backoffSeconds: 1}
  template:
    volumes:
    - name: data
      configMap: {name: no-such-configmap}
    volumeMounts:
    - name: data
      mountPath: /data"
# 1. The image is not on any node and is never pulled.
job absent ghcr.io/weft-dev/weft-worker:absent "  imagePullPolicy: Never
  restartPolicy: {maxRestarts: 2, backoffSeconds: 1}"
wait_for 60 "Ready False ImageNotPresent" has_reason absent Ready ImageNotPresent
msg=$(condition absent Ready message)
grep -q "pod absent-0 (rank 0) cannot start: ErrImageNeverPull" <<<"$msg" || fail "Ready condition: $msg"
grep -q "ghcr.io/weft-dev/weft-worker:absent" <<<"$msg" || fail "the Ready condition does not name the image: $msg"
[ "$(tj_field absent .status.phase)" = Pending ] || fail "phase $(tj_field absent .status.phase) before the deadline"
wait_for 30 "a Warning ImageNotPresent event" has_event absent ImageNotPresent Warning
log "1. $msg"
wait_for 60 "phase Failed at the start deadline" phase_is absent Failed
fmsg=$(condition absent Failed message)
[ "$(condition absent Failed reason)" = ImageNotPresent ] || fail "Failed reason $(condition absent Failed reason): $fmsg"
grep -q "pod absent-0 (rank 0) did not start within 30s of being scheduled: ErrImageNeverPull" <<<"$fmsg" \
  || fail "Failed condition: $fmsg"
[ "$(tj_field absent .status.restarts)" = 0 ] || fail "image-absent restarted the gang: $(tj_field absent .status.restarts)"
log "   Failed: $fmsg"

# 2. The container is OOM-killed as it starts.
wait_for 120 "phase Failed after the OOM kills" phase_is oom Failed
fmsg=$(condition oom Failed message)
[ "$(condition oom Failed reason)" = MaxRestartsExceeded ] || fail "Failed reason $(condition oom Failed reason): $fmsg"
grep -q "(pod oom-0) was OOMKilled: its container reached its memory limit 24Mi" <<<"$fmsg" || fail "Failed condition: $fmsg"
[ "$(tj_field oom .status.restarts)" = 1 ] || fail "restarts $(tj_field oom .status.restarts), expected 1"
wait_for 10 "restartsByCause.OOMKilled 1" tj_field_is oom .status.restartsByCause.OOMKilled 1
log "2. $fmsg"

# 3. A volume the kubelet cannot mount: the pod stays ContainerCreating.
creating() { [ "$(kubectl get pod stuck-0 -n "$NS" -o jsonpath='{.status.containerStatuses[0].state.waiting.reason}' 2>/dev/null)" = ContainerCreating ]; }
wait_for 60 "pod stuck-0 ContainerCreating" creating
wait_for 120 "phase Failed at the second deadline" phase_is stuck Failed
fmsg=$(condition stuck Failed message)
[ "$(condition stuck Failed reason)" = MaxRestartsExceeded ] || fail "Failed reason $(condition stuck Failed reason): $fmsg"
grep -q "did not start within 30s of being scheduled: ContainerCreating; restart limit reached (1 of maxRestarts 1)" <<<"$fmsg" \
  || fail "Failed condition: $fmsg"
# The first deadline restarted the gang, counted as StartTimeout (the
# Restarting condition said so; it is gone once Failed).
wait_for 10 "restartsByCause.StartTimeout 1" tj_field_is stuck .status.restartsByCause.StartTimeout 1
[ "$(tj_field stuck .status.restarts)" = 1 ] || fail "restarts $(tj_field stuck .status.restarts), expected 1"
[ "$(tj_field stuck .status.lastRestartCause)" = StartTimeout ] || fail "lastRestartCause $(tj_field stuck .status.lastRestartCause)"
log "3. $fmsg"
log "PASS: image absent, OOM-killed and stuck pods named in the job's status, restarted or not as documented"
finish 0
