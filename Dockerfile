# layerserve container: build stage with the -dev packages, runtime stage with only
# the shared libraries the binaries load. Build: podman/docker build -t layerserve .
FROM debian:bookworm AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config \
      libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc grpc-proto \
      libabsl-dev libdnnl-dev ocl-icd-opencl-dev opencl-c-headers \
      prometheus-cpp-dev nlohmann-json3-dev libhwy-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY CMakeLists.txt ./
COPY proto proto
COPY kernels kernels
COPY server server
COPY client client
RUN cmake -S . -B build -G Ninja -DLAYERSERVE_BUILD_TESTS=OFF -DLAYERSERVE_BUILD_BENCH=OFF \
 && cmake --build build \
 && install -D -m 0755 build/server/layerserve /out/layerserve \
 && install -D -m 0755 build/client/layerserve-cli /out/layerserve-cli

FROM debian:bookworm
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libgrpc++1.51 libprotobuf32 libabsl20220623 libdnnl2 libgomp1 \
      ocl-icd-libopencl1 libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin layerserve
COPY --from=build /out/ /usr/local/bin/
USER 10001
EXPOSE 50051 9464
# The server drains on SIGTERM (health NOT_SERVING, accepted calls finish within
# --shutdown-grace) and exits 0, also as PID 1.
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s \
  CMD ["layerserve-cli", "--target=127.0.0.1:50051", "--timeout-ms=2000", "health"]
ENTRYPOINT ["layerserve", "--host=0.0.0.0", "--port=50051", "--metrics-port=9464"]
