# layerserve container: a build stage with the -dev packages and a runtime stage with
# only the shared libraries the two binaries load.
#
#   docker build -t layerserve:$(cat VERSION) .      (any Docker; podman: --format docker)
#   scripts/container-build                          (CI: podman, offline base, ccache)
#   docker run --rm -p 50051:50051 -p 9464:9464 layerserve:$(cat VERSION)
#   docker run --rm -v /srv/models:/models:ro -p 50051:50051 layerserve:$(cat VERSION) \
#     --model-repository=/models
# layerserve:VERSION is the name every manifest under deploy/ uses; a registry's copy
# is REGISTRY/layerserve:VERSION (docs/operations/deploy.md, "The image").
#
# BASE_IMAGE lets CI build from a local debootstrap'd bookworm (no registry there).
ARG BASE_IMAGE=debian:bookworm

FROM ${BASE_IMAGE} AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config ccache \
      libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc grpc-proto \
      golang-github-gogo-googleapis-dev \
      libabsl-dev libdnnl-dev ocl-icd-opencl-dev opencl-c-headers \
      prometheus-cpp-dev nlohmann-json3-dev libhwy-dev libjemalloc-dev \
 && rm -rf /var/lib/apt/lists/*
# ccache makes rebuilds after a source change cheap when /ccache is a volume kept
# between builds (`podman build --volume HOST_DIR:/ccache`); without one it is just
# an empty directory of the discarded build stage.
ENV CCACHE_DIR=/ccache CCACHE_BASEDIR=/src CCACHE_MAXSIZE=2G
WORKDIR /src
# Only what the two binaries need, so edits to tests, docs or deploy/ keep this
# stage's layers cached.
COPY CMakeLists.txt VERSION ./
COPY proto proto
COPY common common
COPY kernels kernels
COPY server server
COPY client client
COPY tools tools
RUN mkdir -p /ccache && ccache --zero-stats >/dev/null \
 && cmake -S . -B build -G Ninja -DLAYERSERVE_BUILD_TESTS=OFF -DLAYERSERVE_BUILD_BENCH=OFF \
 && cmake --build build -j "$(nproc)" --target layerserve layerserve-cli \
 && install -D -m 0755 build/bin/layerserve /out/layerserve \
 && install -D -m 0755 build/bin/layerserve-cli /out/layerserve-cli \
 && { ccache --show-stats | grep -E 'Hits|Misses' || true; }

FROM ${BASE_IMAGE}
# procps: /bin/kill, for the documented reload `kubectl exec POD -- kill -HUP 1`
# (debian:bookworm has no kill executable, only the shell's builtin).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libgrpc++1.51 libprotobuf32 libabsl20220623 libdnnl2 libgomp1 libhwy1 \
      ocl-icd-libopencl1 libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libjemalloc2 \
      procps \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin layerserve \
 && mkdir /models
COPY --from=build /out/ /usr/local/bin/
USER 10001
# Mount a model repository here and pass --model-repository=/models; without one
# the built-in demo model is served.
VOLUME /models
EXPOSE 50051 9464
# Where the health check calls: set it when --port is not 50051.
ENV LAYERSERVE_PORT=50051
# The server drains on SIGTERM (health NOT_SERVING, accepted calls finish within
# --shutdown-grace) and exits 0, also as PID 1 (it takes the signals with sigwait).
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s \
  CMD layerserve-cli --target=127.0.0.1:${LAYERSERVE_PORT} --timeout-ms=2000 health
# Arguments after the image name are appended; a repeated flag takes the last value.
ENTRYPOINT ["layerserve", "--host=0.0.0.0", "--port=50051", "--metrics-port=9464"]
