# tiletuned in a container, on a node whose GPUs are passed through by the
# NVIDIA Container Toolkit (docs/operations.md, "In a container"):
#
#   docker build -t tiletune .
#   docker run -d --name tiletuned --gpus all \
#       -v tiletune-db:/var/lib/tiletune -v tiletune-cache:/var/cache/tiletune \
#       -v /run/tiletune:/run/tiletune tiletune
#
# The build stage makes the Debian packages (cpack -G DEB); the runtime
# stage installs them. The runtime image is the same CUDA image: the
# workers compile kernels with NVRTC at run time, against the CUDA headers
# at the path the build saw. libcuda comes from the host driver, mounted by
# the toolkit (the binaries never link it).
ARG CUDA_IMAGE=nvidia/cuda:13.0.1-devel-ubuntu24.04

FROM ${CUDA_IMAGE} AS build
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        build-essential cmake ninja-build pkg-config libuv1-dev libsqlite3-dev libjansson-dev \
        libsystemd-dev dpkg-dev file \
    && rm -rf /var/lib/apt/lists/*
COPY . /src
RUN cmake -S /src -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF \
        -DCMAKE_INSTALL_PREFIX=/usr -DCUDAToolkit_ROOT=/usr/local/cuda \
    && cmake --build /build \
    && cd /build && cpack -G DEB -B /pkg

FROM ${CUDA_IMAGE}
COPY --from=build /pkg/tiletune_*.deb /tmp/
# The user the daemon runs as (systemd-sysusers does it on a host); its
# group reaches the socket.
RUN groupadd --system tiletune && groupadd --system tiletune-admin \
    && useradd --system --gid tiletune --home-dir /var/lib/tiletune --shell /usr/sbin/nologin tiletune \
    && apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends /tmp/tiletune_*.deb \
    && rm -rf /var/lib/apt/lists/* /tmp/tiletune_*.deb \
    && install -d -o tiletune -g tiletune -m 0750 /var/lib/tiletune /var/cache/tiletune \
    && install -d -o tiletune -g tiletune -m 0755 /run/tiletune
ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    CUDA_CACHE_PATH=/var/cache/tiletune/nvidia
VOLUME ["/var/lib/tiletune", "/var/cache/tiletune"]
USER tiletune
# One daemon per database: a second container on the same volume exits,
# naming the first. SIGTERM (docker stop) stops it cleanly.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/sbin/tiletuned", "--socket", "/run/tiletune/tiletune.sock", \
            "--db", "/var/lib/tiletune/tiletune.db", "--cache-dir", "/var/cache/tiletune"]
HEALTHCHECK --interval=30s --timeout=5s CMD ["/usr/bin/tiletune", "--socket", "/run/tiletune/tiletune.sock", "ping"]
