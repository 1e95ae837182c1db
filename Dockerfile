# syntax=docker/dockerfile:1
# weft container images (docker build, BuildKit or buildah; `make images`):
#   --target operator  weft-operator on slim Debian bookworm (the chart's Deployment)
#   --target worker    weft-worker + weft-run on WORKER_BASE: the NVIDIA CUDA
#                      runtime for GPU jobs, or Debian bookworm for CPU-only jobs
#
# CPU worker and operator (the default arguments, what the tests build):
#   docker build --target worker   --build-arg WORKER_BASE=debian:bookworm-slim -t weft-worker:0.1.0-cpu .
#   docker build --target operator -t weft-operator:0.1.0 .
# CUDA worker: the build stage needs nvcc and NCCL, so it runs on the CUDA
# devel image of the same Ubuntu release as the runtime base; the cudnn
# variants give attention cuDNN's fused kernels (cudnn.h to build, libcudnn
# at run time; on the plain images weft's SIMT attention kernels run):
#   docker build --target worker --build-arg WEFT_CUDA=ON \
#     --build-arg BUILD_BASE=nvidia/cuda:12.6.3-cudnn-devel-ubuntu24.04 \
#     --build-arg WORKER_BASE=nvidia/cuda:12.6.3-cudnn-runtime-ubuntu24.04 -t weft-worker:0.1.0 .
#
# The build stage runs what CI runs (scripts/install-deps.sh build, then
# make), building only the three programs, through a compiler cache kept
# between builds. Runtime stages receive the
# programs plus exactly the shared libraries ldd resolves for them
# (scripts/stage-runtime.sh), re-checked with ldd on the runtime base: no
# compiler, no headers, no -dev packages. Both run as uid/gid 65532 like the
# pods the operator and the chart create.
ARG BUILD_BASE=debian:bookworm
ARG WORKER_BASE=nvidia/cuda:12.6.3-cudnn-runtime-ubuntu24.04
ARG OPERATOR_BASE=debian:bookworm-slim

# The build dependencies alone: this stage depends only on the dependency
# list, so source edits reuse it (the image test keeps it between runs).
FROM ${BUILD_BASE} AS deps
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
COPY scripts/install-deps.sh scripts/
RUN scripts/install-deps.sh build && apt-get clean && rm -rf /var/lib/apt/lists/*

# The compiler cache (ccache, from install-deps.sh) lives in a cache mount
# that outlasts the build: an image rebuilt after a source edit recompiles
# only what changed, like a local build tree. CCACHE_DIR may name another
# cache the builder mounts instead (`buildah build -v` or `podman build -v`
# HOST_CACHE:DIR --build-arg CCACHE_DIR=DIR): a machine's own ccache, whose
# objects of the same sources are hits here, since the tree is built at
# /src/build like a clone's build/ and ccache keys paths relative to the
# source tree (CMakeLists.txt). The image test builds this way after the
# test build, so the CPU sources compile once per CI run.
FROM deps AS build
ARG WEFT_CUDA=OFF
ARG JOBS=
ARG CCACHE_DIR=/root/.cache/ccache
COPY . .
RUN --mount=type=cache,target=/root/.cache/ccache,id=weft-ccache \
    export CCACHE_STATSLOG=/tmp/ccache-stats.log \
 && make programs BUILD=/src/build JOBS="${JOBS:-$(nproc)}" CMAKE_ARGS="-DWEFT_CUDA=${WEFT_CUDA}" \
 && { ccache --show-log-stats -v 2>/dev/null | sed 's/^/ccache: /' || true; } \
 && scripts/stage-runtime.sh /stage/worker /src/build/bin/weft-worker /src/build/bin/weft-run \
 && scripts/stage-runtime.sh /stage/operator /src/build/bin/weft-operator \
 && for d in worker operator; do cp scripts/stage-runtime.sh /stage/$d/usr/local/lib/; done \
 && rm -rf /src/build /tmp/ccache-stats.log

FROM ${OPERATOR_BASE} AS operator
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="weft-operator" \
      org.opencontainers.image.description="Kubernetes operator for weft TrainingJobs" \
      org.opencontainers.image.source="https://github.com/weft-dev/weft" \
      org.opencontainers.image.url="https://github.com/weft-dev/weft/blob/main/docs/user-guide.md" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.vendor="weft"
COPY --from=build /stage/operator/ /
RUN ldconfig && sh /usr/local/lib/stage-runtime.sh --check /usr/local/bin/weft-operator \
 && rm /usr/local/lib/stage-runtime.sh \
 && echo 'weft:x:65532:65532:weft:/tmp:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'weft:x:65532:' >> /etc/group
USER 65532:65532
WORKDIR /tmp
# The chart's Deployment runs `weft-operator --leader-elect ...`.
ENTRYPOINT ["weft-operator"]

FROM ${WORKER_BASE} AS worker
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="weft-worker" \
      org.opencontainers.image.description="weft training worker (weft-worker, weft-run)" \
      org.opencontainers.image.source="https://github.com/weft-dev/weft" \
      org.opencontainers.image.url="https://github.com/weft-dev/weft/blob/main/docs/user-guide.md" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.vendor="weft"
COPY --from=build /stage/worker/ /
RUN ldconfig && sh /usr/local/lib/stage-runtime.sh --check /usr/local/bin/weft-worker /usr/local/bin/weft-run \
 && rm /usr/local/lib/stage-runtime.sh \
 && echo 'weft:x:65532:65532:weft:/tmp:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'weft:x:65532:' >> /etc/group
USER 65532:65532
# The root filesystem is read-only in pods; /tmp is the scratch emptyDir.
WORKDIR /tmp
ENV HOME=/tmp
# Pods run `weft-worker /etc/weft/config.yaml` (operator/trainingjob/builders.cc).
ENTRYPOINT ["weft-worker"]
