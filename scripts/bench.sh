#!/usr/bin/env bash
# Benchmarks that need the whole machine: real PostgreSQL (a private cluster
# started from the machine's own binaries), real Chromium, the local test site.
# Progress goes to stderr; the result is ONE JSON line on stdout.
#
#   scripts/bench.sh soak      Chrome-tree PSS over 400 /leak/ jobs, recycling every 20 vs never
#   scripts/bench.sh recycle   one node's pages/s, recycling every 20 vs never, latency- and CPU-bound
#
# Extra arguments go to the mode, e.g. `scripts/bench.sh recycle -rounds 5 -jobs 200`.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2
  echo "usage: scripts/bench.sh soak|recycle [mode flags]" >&2
}

[ $# -ge 1 ] || { usage; exit 2; }
mode=$1
shift

# build compiles the bench harness once per invocation into a temp dir that
# is removed on exit.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
build() {
  echo "bench.sh: building $1" >&2
  go build -o "$tmp/$(basename "$1")" "./$1"
}

case "$mode" in
  soak | recycle)
    build internal/benchfarm
    "$tmp/benchfarm" "$mode" "$@"
    ;;
  -h | --help | help)
    usage
    ;;
  *)
    echo "bench.sh: unknown mode '$mode'" >&2
    usage
    exit 2
    ;;
esac
