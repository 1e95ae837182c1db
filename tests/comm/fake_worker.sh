#!/bin/sh
# A stand-in worker for weft-run's tests. $1 picks the behaviour:
#   env         print the rank's environment contract, exit 0
#   fail R C    rank R exits with code C after 0.2 s; the others sleep (and
#               record SIGTERM in their output)
#   trap        every rank waits; SIGTERM makes it print and exit 143
case "$1" in
  env)
    echo "RANK=$RANK WORLD_SIZE=$WORLD_SIZE MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT"
    echo "LOCAL_RANK=$LOCAL_RANK LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE NODE_RANK=$NODE_RANK"
    echo "TOKEN=${WEFT_RDZV_TOKEN:+set} OMP=$OMP_NUM_THREADS BLAS=$OPENBLAS_NUM_THREADS ARGS=$*"
    printf 'no newline at end'
    ;;
  fail)
    if [ "$RANK" = "$2" ]; then sleep 0.2; echo "rank $RANK failing" >&2; exit "$3"; fi
    trap 'echo "got SIGTERM"; exit 143' TERM
    sleep 60 & wait
    ;;
  trap)
    trap 'echo "got SIGTERM"; exit 143' TERM
    echo ready
    sleep 60 & wait
    ;;
esac
