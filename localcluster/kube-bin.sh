# Sourced (not run) by the scripts that start or talk to the local control
# plane. Each Kubernetes release the tests can run is a Go module of its own
# under localcluster/ that pins it (VERSION, go.mod, go.sum, tools.go;
# build-kube.sh builds every binary, etcd and kubectl included, from the Go
# module proxy with it): localcluster/kube, the newest (1.37.2), and
# localcluster/kube-<minor>, older ones (kube-1.35: 1.35.4, the oldest minor
# upstream still supports). Which one runs is WEFT_KUBE_VERSION:
#   unset or `current`: localcluster/kube's release (the default);
#   `oldest`: the oldest release of those modules;
#   a release one of their VERSION files names (1.37.2, 1.35.4; a leading v
#   is allowed).
# Any other value is refused. Every one of them enforces the CRD's CEL rules.
# Sets WEFT_KUBE_VERSION (resolved, no leading v), WEFT_KUBE_MODULE (the
# module's directory), WEFT_KUBE_CURRENT and WEFT_KUBE_OLDEST (releases),
# WEFT_KUBE_BIN (where the binaries are, unless already set) and puts
# WEFT_KUBE_BIN first on PATH, so that `kubectl` is the release's own.
WEFT_KUBE_MODULES_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
WEFT_KUBE_CURRENT=$(tr -d ' \n' < "$WEFT_KUBE_MODULES_DIR/kube/VERSION")
WEFT_KUBE_OLDEST=$(cat "$WEFT_KUBE_MODULES_DIR"/kube/VERSION "$WEFT_KUBE_MODULES_DIR"/kube-*/VERSION 2>/dev/null \
  | tr -d ' ' | sort -V | head -1)
WEFT_KUBE_VERSION=${WEFT_KUBE_VERSION:-current}
WEFT_KUBE_VERSION=${WEFT_KUBE_VERSION#v}
case "$WEFT_KUBE_VERSION" in
  current) WEFT_KUBE_VERSION=$WEFT_KUBE_CURRENT ;;
  oldest) WEFT_KUBE_VERSION=$WEFT_KUBE_OLDEST ;;
esac
WEFT_KUBE_MODULE=
for _weft_mod in "$WEFT_KUBE_MODULES_DIR"/kube "$WEFT_KUBE_MODULES_DIR"/kube-*; do
  [ -f "$_weft_mod/VERSION" ] || continue
  if [ "$(tr -d ' \n' < "$_weft_mod/VERSION")" = "$WEFT_KUBE_VERSION" ]; then
    WEFT_KUBE_MODULE=$_weft_mod
    break
  fi
done
unset _weft_mod
if [ -z "$WEFT_KUBE_MODULE" ]; then
  echo "kube-bin: WEFT_KUBE_VERSION=$WEFT_KUBE_VERSION: use current ($WEFT_KUBE_CURRENT, the default), oldest ($WEFT_KUBE_OLDEST) or a release of $(cat "$WEFT_KUBE_MODULES_DIR"/kube/VERSION "$WEFT_KUBE_MODULES_DIR"/kube-*/VERSION 2>/dev/null | tr -d ' ' | sort -V | paste -sd' ')" >&2
  return 2 2>/dev/null || exit 2
fi
WEFT_KUBE_BIN=${WEFT_KUBE_BIN:-$HOME/.cache/weft/kube-v$WEFT_KUBE_VERSION/bin}
case ":$PATH:" in
  *":$WEFT_KUBE_BIN:"*) ;;
  *) PATH=$WEFT_KUBE_BIN:$PATH ;;
esac
export WEFT_KUBE_VERSION WEFT_KUBE_MODULE WEFT_KUBE_CURRENT WEFT_KUBE_OLDEST WEFT_KUBE_BIN PATH
