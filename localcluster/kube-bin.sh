# Sourced (not run) by the scripts that start or talk to the local control
# plane. Which Kubernetes release runs is WEFT_KUBE_VERSION:
#   1.20.2 (the default): kube-apiserver, controller-manager and scheduler
#     built from Debian's source package (build-kube-debian.sh), Debian's
#     etcd and the kubectl on PATH; the API server ignores CEL rules.
#   current, or the release localcluster/kube/VERSION names (1.37.2): every
#     binary, etcd and kubectl included, built from the Go module proxy with
#     the module localcluster/kube (build-kube.sh); CEL rules enforced.
# Sets WEFT_KUBE_VERSION (resolved), WEFT_KUBE_LEGACY (1 for 1.20.2, else 0),
# WEFT_KUBE_BIN (where the binaries are, unless already set) and, for the
# current release, puts WEFT_KUBE_BIN first on PATH so that `kubectl` is the
# release's own.
WEFT_KUBE_CURRENT=$(tr -d ' \n' < "$(dirname "${BASH_SOURCE[0]}")/kube/VERSION")
WEFT_KUBE_VERSION=${WEFT_KUBE_VERSION:-1.20.2}
[ "$WEFT_KUBE_VERSION" = current ] && WEFT_KUBE_VERSION=$WEFT_KUBE_CURRENT
case "$WEFT_KUBE_VERSION" in
  1.20.2) WEFT_KUBE_LEGACY=1 ;;
  "$WEFT_KUBE_CURRENT") WEFT_KUBE_LEGACY=0 ;;
  *) echo "kube-bin: WEFT_KUBE_VERSION=$WEFT_KUBE_VERSION: use 1.20.2 or current ($WEFT_KUBE_CURRENT)" >&2; return 2 2>/dev/null || exit 2 ;;
esac
WEFT_KUBE_BIN=${WEFT_KUBE_BIN:-$HOME/.cache/weft/kube-v$WEFT_KUBE_VERSION/bin}
if [ "$WEFT_KUBE_LEGACY" = 0 ]; then
  case ":$PATH:" in
    *":$WEFT_KUBE_BIN:"*) ;;
    *) PATH=$WEFT_KUBE_BIN:$PATH ;;
  esac
fi
export WEFT_KUBE_VERSION WEFT_KUBE_CURRENT WEFT_KUBE_LEGACY WEFT_KUBE_BIN PATH
