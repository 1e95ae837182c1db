# Shared by the scripts that run an add-on of the local cluster as a process
# (kueue.sh, coscheduling.sh): building its program from a pinned module of
# localcluster/ into ~/.cache/weft, installing its CRDs, starting it against
# DIR/kubeconfig with fresh loopback ports, stopping it. Source it after
# setting:
#   NAME    the script's name in messages ("kueue")
#   MOD     the module's directory (go.mod, go.sum, tools.go)
#   CACHE   where the build goes; BIN=$CACHE/bin/<program>, CRDS=$CACHE/crds
#   PIDF    (up/down/status) DIR/<name>.pid
# and defining:
#   compile OUT LOG   builds the program into OUT (under nice), CRDs into $CACHE/stage/crds
#   built             true when the cache holds the program and its CRDs
#   ours PID          true when PID runs this DIR's program

addon_build() {  # addon_build [quiet] WHAT: quiet prints nothing when the build is cached
  local quiet=$1 what=$2 start
  if built; then [ -n "$quiet" ] || echo "$NAME: cached in $CACHE"; return 0; fi
  mkdir -p "$CACHE"
  exec 9>"$CACHE/.build.lock"
  flock 9
  if built; then [ -n "$quiet" ] || echo "$NAME: cached in $CACHE (built by a concurrent run)"; exec 9>&-; return 0; fi
  GO=$("$HERE/find-go.sh" "$MOD/go.mod") || exit 1
  local log=$CACHE/build.log
  : > "$log"
  rm -rf "$CACHE/stage"
  mkdir -p "$CACHE/stage/crds" "$CACHE/bin"
  start=$(date +%s)
  echo "$NAME: building $what"
  compile "$CACHE/stage/$(basename "$BIN")" "$log"
  chmod -R u+w "$CACHE/stage/crds"   # the module cache's files are read-only
  # The CRDs first, the program last: built() checks both.
  rm -rf "$CRDS.old"
  [ -d "$CRDS" ] && mv "$CRDS" "$CRDS.old"
  mv "$CACHE/stage/crds" "$CRDS"
  rm -rf "$CRDS.old"
  mv "$CACHE/stage/$(basename "$BIN")" "$BIN.tmp" && mv "$BIN.tmp" "$BIN"
  rm -rf "$CACHE/stage"
  echo "$NAME: built in $(( $(date +%s) - start )) s into $CACHE" | tee -a "$log"
  exec 9>&-
}

# go_build LOG PACKAGE ARGS...: `go build` in MOD, reproducible, under nice 19
# unless NICE=0; the log's tail on failure.
go_build() {
  local log=$1 pkg=$2 nice=()
  shift 2
  [ "${NICE:-19}" = 0 ] || nice=(nice -n "${NICE:-19}")
  (cd "$MOD" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly "${nice[@]}" "$GO" build -trimpath -buildvcs=false "$@" "$pkg") \
    >>"$log" 2>&1 || { tail -30 "$log" >&2; echo "$NAME: building $pkg failed (log: $log)" >&2; exit 1; }
}

module_dir() {  # module_dir MODULE: where the module cache holds MODULE at MOD's version
  (cd "$MOD" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly "$GO" list -m -f '{{.Dir}}' "$1")
}

addon_dir() {  # addon_dir CMD DIR: sets DIR to DIR made absolute, or does what CMD does without it
  if [ ! -d "$2" ]; then
    case $1 in
      down) exit 0 ;;
      status) echo "$NAME: not running (no $2)"; exit 1 ;;
      up) echo "$NAME: no $2: start a cluster there first (cluster.sh up or testenv.sh start)" >&2; exit 1 ;;
    esac
  fi
  DIR=$(cd "$2" && pwd)
}

alive() { [ -f "$PIDF" ] && ours "$(cat "$PIDF")"; }

addon_stop() {  # SIGTERM, wait up to 5 s, SIGKILL; the program leads its own process group (setsid)
  local pid stopped=1
  if [ -f "$PIDF" ]; then
    pid=$(cat "$PIDF")
    if ours "$pid"; then
      kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL -- "-$pid" 2>/dev/null || true
      kill -KILL "$pid" 2>/dev/null || true
      for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      stopped=0
    fi
    rm -f "$PIDF"
  fi
  return $stopped
}

addon_apply_crds() {  # addon_apply_crds STATE_DIR: server-side (big CRDs outgrow the last-applied annotation)
  kubectl apply --server-side --force-conflicts --field-manager="weft-$NAME-sh" -f "$CRDS/" >"$1/apply.log" 2>&1 \
    || { cat "$1/apply.log" >&2; echo "$NAME: installing the CRDs failed" >&2; exit 1; }
  kubectl wait --for condition=established --timeout=60s -f "$CRDS/" >>"$1/apply.log" 2>&1 \
    || { cat "$1/apply.log" >&2; echo "$NAME: the CRDs were not established in 60 s" >&2; exit 1; }
}

free_ports() {  # free_ports N: N distinct free loopback ports (held together while picked)
  /usr/bin/python3 -c 'import socket, sys
ss = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))' "$1"
}

# addon_start START READY SECONDS LOG CLEANUP: runs START (writes the config
# with fresh ports, starts the program, writes PIDF) until READY answers;
# a port taken before the program bound it starts it again (3 tries).
addon_start() {
  local start=$1 ready=$2 secs=$3 log=$4 cleanup=$5 try ok
  for try in 1 2 3; do
    "$start"
    ok=0
    for _ in $(seq 1 $((secs * 5))); do
      "$ready" && { ok=1; break; }
      alive || break
      sleep 0.2
    done
    [ $ok = 1 ] && return 0
    if alive; then
      tail -20 "$log" >&2; addon_stop || true; "$cleanup"
      echo "$NAME: not ready in $secs s (log $log)" >&2; exit 1
    fi
    rm -f "$PIDF"; "$cleanup"
    if [ $try -lt 3 ] && tail -20 "$log" | grep -q 'address already in use'; then continue; fi
    tail -20 "$log" >&2
    echo "$NAME: it exited (log $log)" >&2; exit 1
  done
}
