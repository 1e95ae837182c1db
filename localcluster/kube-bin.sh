# Sourced (not run) by the scripts that start or talk to the local control
# plane. Which Kubernetes release runs is WEFT_KUBE_VERSION:
#   unset, `current`, or the release localcluster/kube/VERSION names (1.37.2;
#     the default): every binary, etcd and kubectl included, built from the
#     Go module proxy with the module localcluster/kube (build-kube.sh); CEL
#     rules enforced.
#   1.20.2 (or v1.20.2): kube-apiserver, controller-manager and scheduler
#     built from Debian's source package (build-kube-debian.sh), Debian's
#     etcd and the kubectl on PATH; the API server ignores CEL rules. Kept to
#     show the operator still works on the oldest release it states.
# Sets WEFT_KUBE_VERSION (resolved, no leading v), WEFT_KUBE_LEGACY (1 for
# 1.20.2, else 0), WEFT_KUBE_BIN (where the binaries are, unless already set)
# and, for the current release, puts WEFT_KUBE_BIN first on PATH so that
# `kubectl` is the release's own.
WEFT_KUBE_CURRENT=$(tr -d ' \n' < "$(dirname "${BASH_SOURCE[0]}")/kube/VERSION")
WEFT_KUBE_VERSION=${WEFT_KUBE_VERSION:-current}
WEFT_KUBE_VERSION=${WEFT_KUBE_VERSION#v}
[ "$WEFT_KUBE_VERSION" = current ] && WEFT_KUBE_VERSION=$WEFT_KUBE_CURRENT
case "$WEFT_KUBE_VERSION" in
  1.20.2) WEFT_KUBE_LEGACY=1 ;;
  "$WEFT_KUBE_CURRENT") WEFT_KUBE_LEGACY=0 ;;
  *) echo "kube-bin: WEFT_KUBE_VERSION=$WEFT_KUBE_VERSION: use current ($WEFT_KUBE_CURRENT, the default) or 1.20.2" >&2; return 2 2>/dev/null || exit 2 ;;
esac
WEFT_KUBE_BIN=${WEFT_KUBE_BIN:-$HOME/.cache/weft/kube-v$WEFT_KUBE_VERSION/bin}
if [ "$WEFT_KUBE_LEGACY" = 0 ]; then
  case ":$PATH:" in
    *":$WEFT_KUBE_BIN:"*) ;;
    *) PATH=$WEFT_KUBE_BIN:$PATH ;;
  esac
fi
export WEFT_KUBE_VERSION WEFT_KUBE_CURRENT WEFT_KUBE_LEGACY WEFT_KUBE_BIN PATH
