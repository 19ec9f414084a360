#!/usr/bin/env bash
# Build the Dockerfile and check the image from its own filesystem, on a
# machine with no Docker daemon and no registry (not part of scripts/test.sh;
# it takes several minutes, most of them apt inside the build).
#
#   scripts/image-check.sh            # build with podman, then check
#   FULL_CHROMIUM=false scripts/image-check.sh  # the shell-only image
#
# Steps: make the Dockerfile's two base images from Debian packages
# (mmdebstrap minbase bookworm -> debian:bookworm-slim; that plus this
# machine's Go toolchain -> golang:1.26-bookworm), `podman build` with vfs
# storage, chroot isolation, host network and --pull=never; export the image's
# filesystem and, under chroot (podman run needs cgroups this machine lacks):
# `farm version`, the browser's --version, the non-root user and `farm init` as
# the entrypoint (the binary executable but not readable by that user), and five
# real jobs rendered by the image's entrypoint (a fresh process every two) against a PostgreSQL and
# internal/testsite on 127.0.0.1 (internal/imagecheck); then the image size.
# Needs root (chroot, mounts), podman and mmdebstrap (installed if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
work=${FARM_IMAGE_WORK:-/var/tmp/browserfarm-image}
image=localhost/browserfarm:check
full=${FULL_CHROMIUM:-true}
mkdir -p "$work"
pm() { podman --storage-driver vfs --root "$work/storage" --runroot "$work/run" "$@"; }
t0=$(date +%s)

if [ "$(id -u)" != 0 ]; then echo "image-check: needs root (chroot, mounts)" >&2; exit 1; fi
if ! command -v podman >/dev/null || ! command -v mmdebstrap >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y podman mmdebstrap >/dev/null
fi

printf '== base images\n'
if ! pm image exists docker.io/library/debian:bookworm-slim; then
  mmdebstrap --variant=minbase --include=ca-certificates bookworm "$work/base.tar" \
    "deb http://deb.debian.org/debian bookworm main" \
    "deb http://deb.debian.org/debian bookworm-updates main" \
    "deb http://deb.debian.org/debian-security bookworm-security main"
  pm import "$work/base.tar" docker.io/library/debian:bookworm-slim >/dev/null
  rm -f "$work/base.tar"
fi
if ! pm image exists docker.io/library/golang:1.26-bookworm; then
  goroot=$(go env GOROOT)
  ctx=$(mktemp -d "$work/goctx.XXXXXX")
  cp -a "$goroot" "$ctx/go"
  # This machine's CA bundle: the build stage reaches the Go module proxy
  # through the same (TLS-inspecting) egress as the host does.
  cp /etc/ssl/certs/ca-certificates.crt "$ctx/ca-certificates.crt"
  cat > "$ctx/Containerfile" <<'CF'
FROM docker.io/library/debian:bookworm-slim
COPY go /usr/local/go
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
ENV GOPATH=/go PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin GOTOOLCHAIN=local
WORKDIR /go
CF
  pm build --isolation chroot --network host --pull=never -t docker.io/library/golang:1.26-bookworm "$ctx" >/dev/null
  rm -rf "$ctx"
fi
pm images

printf '\n== build (Dockerfile, FULL_CHROMIUM=%s)\n' "$full"
b0=$(date +%s)
pm build --isolation chroot --network host --pull=never --layers=false \
  --build-arg VERSION="$(git describe --always --dirty 2>/dev/null || echo dev)" --build-arg FULL_CHROMIUM="$full" \
  -t "$image" . > "$work/build.log" 2>&1 || { tail -40 "$work/build.log"; exit 1; }
b1=$(date +%s)
echo "build took $((b1 - b0)) s (log: $work/build.log)"
# The image an earlier run tagged is now untagged: 1.6 GB of vfs storage each.
pm image prune -f >/dev/null

printf '\n== export the image filesystem\n'
rootfs="$work/rootfs"
rootfs_ro="$work/rootfs-ro"
cleanup() {
  mountpoint -q "$rootfs_ro" 2>/dev/null && umount -R -l "$rootfs_ro"
  for m in dev/shm dev/pts dev proc; do mountpoint -q "$rootfs/$m" 2>/dev/null && umount -l "$rootfs/$m"; done
  [ -n "${ctr:-}" ] && pm rm -f "$ctr" >/dev/null 2>&1 || true
}
trap cleanup EXIT
cleanup
rm -rf "$rootfs"; mkdir -p "$rootfs"
ctr=$(pm create "$image")
pm export "$ctr" | tar -x -C "$rootfs"
mount -t proc proc "$rootfs/proc"
mount --rbind /dev "$rootfs/dev"

inspect() { pm image inspect --format "$1" "$image"; }
user=$(inspect '{{.Config.User}}')
entry=$(inspect '{{range .Config.Entrypoint}}{{.}} {{end}}')
inspect '{{range .Config.Env}}{{println .}}{{end}}' > "$work/image.env"
uid=$(chroot "$rootfs" id -u "$user"); gid=$(chroot "$rootfs" id -g "$user")
printf 'entrypoint: %s\ncmd: %s\nuser: %s (uid %s, gid %s)\n' "$entry" "$(inspect '{{.Config.Cmd}}')" "$user" "$uid" "$gid"
[ "$uid" != 0 ] || { echo "image-check: the image runs as root" >&2; exit 1; }
case "$entry" in "/usr/local/bin/farm init -- /usr/local/bin/farm "*) ;; *) echo "image-check: entrypoint is not farm init -- farm" >&2; exit 1;; esac
printf 'farm version: '; chroot --userspec="$uid:$gid" "$rootfs" /usr/local/bin/farm version
printf 'farm binary: %s\n' "$(stat -c '%A %U:%G' "$rootfs/usr/local/bin/farm")"
if chroot --userspec="$uid:$gid" "$rootfs" cat /usr/local/bin/farm >/dev/null 2>&1; then
  echo "image-check: the image's user can read /usr/local/bin/farm; farm processes would be dumpable at their start" >&2; exit 1
fi
for b in /usr/lib/chromium/chromium-headless-shell /usr/lib/chromium/chromium; do
  if [ -x "$rootfs$b" ]; then
    printf '%s --version: ' "$b"; chroot --userspec="$uid:$gid" "$rootfs" env HOME=/home/farm "$b" --version 2>/dev/null
  elif [ "$b" = /usr/lib/chromium/chromium-headless-shell ] || [ "$full" = true ]; then
    echo "image-check: $b missing" >&2; exit 1
  fi
done
printf 'respawn by default: %s\n' "$(grep '^FARM_RESPAWN=' "$work/image.env")"

printf '\n== jobs rendered by the image across process recycles (farm init -- farm consumer, under chroot)\n'
FARM_IMAGE_ROOTFS="$rootfs" FARM_IMAGE_ENV_FILE="$work/image.env" FARM_IMAGE_USER="$uid:$gid" FARM_IMAGE_ENTRYPOINT="$entry" \
  go test -tags imagecheck -count=1 -v -run TestImageRendersJob ./internal/imagecheck 2>&1 | grep -v '^=== RUN'

printf '\n== the image as deploy/kubernetes runs it (producer and consumer pods, under chroot)\n'
# The producer's container has a read-only root filesystem: a read-only view
# of the same files (with their proc and dev).
mkdir -p "$rootfs_ro"
mount --rbind "$rootfs" "$rootfs_ro"
mount -o remount,bind,ro "$rootfs_ro"
(cd deploy/kubernetes && go run ./tojson 10-producer.yaml) > "$work/k8s-producer.json"
(cd deploy/kubernetes && go run ./tojson 20-consumer.yaml) > "$work/k8s-consumer.json"
FARM_IMAGE_ROOTFS="$rootfs" FARM_IMAGE_ROOTFS_RO="$rootfs_ro" FARM_IMAGE_ENV_FILE="$work/image.env" \
  FARM_IMAGE_USER="$uid:$gid" FARM_IMAGE_ENTRYPOINT="$entry" \
  FARM_IMAGE_K8S_PRODUCER="$work/k8s-producer.json" FARM_IMAGE_K8S_CONSUMER="$work/k8s-consumer.json" \
  go test -tags imagecheck -count=1 -v -run TestImageAsKubernetesPods ./internal/imagecheck 2>&1 | grep -v '^=== RUN'

printf '\n== size\n'
pm images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E 'browserfarm|debian|golang'
echo "exported filesystem: $(du -sh --exclude=proc --exclude=dev "$rootfs" | cut -f1)"
for p in chromium-headless-shell chromium chromium-common fonts-noto-cjk fonts-noto-color-emoji; do
  s=$(chroot "$rootfs" dpkg-query -W -f='${Installed-Size}' "$p" 2>/dev/null || true)
  [ -n "$s" ] && echo "  $p: $((s / 1024)) MiB installed"
done
echo "image-check: all good in $(( $(date +%s) - t0 )) s"
