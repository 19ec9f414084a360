# syntax=docker/dockerfile:1
# browserfarm: one image, default command `farm consumer` in respawn mode.
#
#   docker build -t browserfarm .
#   docker run -d --restart=unless-stopped --shm-size=1g --stop-timeout 120 \
#     -e FARM_DATABASE_URL=postgres://farm:secret@db.internal:5432/farm \
#     -e FARM_NODE_ID=consumer-a browserfarm
#
# Base images (both from Docker Hub; scripts/image-check.sh makes local
# stand-ins from Debian packages when there is no registry):
#   golang:1.26-bookworm   the build stage (Go toolchain on Debian 12)
#   debian:bookworm-slim   the runtime
#
# Recycling: the consumer exits 75 every --exit-after-jobs jobs to get a fresh
# process. Docker and Kubernetes back off restarting a container that exits
# often (Docker from 100 ms, doubling unless it ran 10 s; Kubernetes 10 s up
# to 5 min), so the image sets FARM_RESPAWN=true: `farm consumer` stays up as
# the container's main process and restarts its consumer child in place at
# once (crashes still back off). Set FARM_RESPAWN=false to let the container
# exit 75 instead. --stop-timeout 120: on `docker stop` the consumer drains
# its in-flight jobs (--drain-timeout, 60 s) and hands the rest back; Docker's
# default 10 s would cut that short. --shm-size is a safety margin: Chrome is
# started with --disable-dev-shm-usage, but Docker's default 64 MiB /dev/shm
# is still too small for some of its allocations.
#
# Browser: Debian's chromium-headless-shell (old headless mode, about half
# the CPU per page of full Chromium), which the consumer picks by default, and
# full Chromium for sites that tell the shell apart (FARM_BROWSER=chrome).
# --build-arg FULL_CHROMIUM=false leaves full Chromium out: about 280 MiB
# smaller, shell only.

# ---- build ------------------------------------------------------------------
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "-s -w -X main.version=${VERSION}" -o /out/farm ./cmd/farm

# ---- runtime ----------------------------------------------------------------
FROM debian:bookworm-slim
ARG FULL_CHROMIUM=true
# chromium-headless-shell (and chromium): the browsers; fonts: pages render text the way
# users see it.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      chromium-headless-shell $([ "$FULL_CHROMIUM" = true ] && echo chromium) \
      fonts-liberation fonts-noto-color-emoji fonts-noto-cjk ca-certificates \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
 && useradd --system --create-home --home-dir /home/farm --uid 10001 farm
# Executable but not readable by the farm user, so every farm process is
# non-dumpable from its exec on (README: What Chrome can read of the farm).
COPY --from=build --chmod=0711 /out/farm /usr/local/bin/farm
USER farm
WORKDIR /home/farm
# Chrome's own sandbox needs unprivileged user namespaces, which Docker's
# default seccomp profile (and a chroot) refuse: the container is the
# isolation boundary here. To keep Chrome's sandbox too, run with a seccomp
# profile that allows it and FARM_CHROME_NO_SANDBOX=false.
ENV FARM_RESPAWN=true \
    FARM_CHROME_NO_SANDBOX=true \
    FARM_HEALTH_ADDR=127.0.0.1:9091
# The consumer answers /healthz on FARM_HEALTH_ADDR while its loop and Chrome
# are alive; `farm health` reads the same variable. For a producer container
# set FARM_HEALTH_ADDR to its --listen address (it serves /healthz there too).
# The start period covers the consumer's wait for its database and schema
# (--database-wait, 2 minutes), before which it serves no health endpoint.
HEALTHCHECK --interval=30s --timeout=5s --start-period=150s --retries=3 \
    CMD ["farm", "health"]
STOPSIGNAL SIGTERM
# PID 1 is `farm init`: tini's work (signals passed on, zombies reaped, the
# command's exit status), but non-dumpable (README: Docker).
ENTRYPOINT ["/usr/local/bin/farm", "init", "--", "/usr/local/bin/farm"]
CMD ["consumer"]
