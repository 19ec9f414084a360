#!/usr/bin/env bash
# Benchmarks that need the whole machine: real PostgreSQL (a private cluster
# started from the machine's own binaries), real Chromium, the local test site.
# Progress goes to stderr; the result is ONE JSON line on stdout.
#
#   scripts/bench.sh soak      Chrome-tree PSS over 400 /leak/ jobs, recycling every 20 vs never
#                              (-isolation wipe|context|shared: the jobs' isolation, default wipe)
#   scripts/bench.sh recycle   one node's pages/s, recycling every 20 vs never, latency- and CPU-bound
#   scripts/bench.sh go        the Go benchmarks (queue, assignment, latency, rendering, dashboard, the
#                              supervisor's node), each at the count its README row uses
#   scripts/bench.sh autoscale a simulated day: node-hours autoscaled vs a fixed fleet, longest wait
#                              (pack and spread assignment)
#   scripts/bench.sh river     BenchmarkLifecycle and BenchmarkEnqueue10k side by side with River v0.51
#                              (bench/river, a module of its own) inserting then working the same
#                              number of jobs on a private PostgreSQL with the same settings, in both
#                              shapes: River's one client of 96 workers (river.*, beside the lifecycle's
#                              nodes=1x96) and 16 clients of 6 (river16x6.*, beside the lifecycle's
#                              16 nodes of 6); extra arguments make it one River run of those flags
#   scripts/bench.sh fleet     10, 100 and 1,000 simulated nodes (real connections, heartbeats every 3 s,
#                              6 slots, no browser) and one producer on one PostgreSQL: assignment round,
#                              submit→start, connections per node and producer, PostgreSQL CPU share
#                              (-poll-only for nodes and producer without LISTEN, -http-wake for nodes woken
#                              by the producer's HTTP long-poll, -pgbouncer N, -assign pack|spread)
#   scripts/bench.sh crawlee   pages/s and CPU-ms/page of the farm's node path (default isolation; with
#                              -sides also shared, cache batch, the egress proxy) vs Crawlee's PuppeteerCrawler
#                              with its defaults, 6 at once, CPU- and latency-bound /page/ (-page app: /app/, the
#                              page behind a cacheable script bundle) (installs the pinned @crawlee/puppeteer
#                              and puppeteer-core from npm into a temp dir)
#   scripts/bench.sh scale     with 0 and 10,000,000 retained finished jobs (COPY, -retained 0,1000,1000000 to
#                              choose), each with the same busy last hour (-recent): p50/p99 of /api/stats,
#                              /api/failures, /metrics (uncached), the dashboard's load and `farm status` (4
#                              rounds, -read-rounds, alternating between the sizes: each p50's paired ratio to
#                              the first size's), lifecycle jobs/s (4 rounds, -lifecycle-rounds, that
#                              alternate between the sizes' databases, kept side by side: each size's median
#                              and its paired ratio to the first size; each round with the autovacuums and
#                              autoanalyzes of jobs that ended in it and its WAL bytes per job), and the
#                              retention purge's deletes/s (10M: about 10 GB of disk under $TMPDIR, the
#                              sizes' sum at once; -history-jobs N[,N...] first runs N jobs through the queue,
#                              a recent history at its own rate of finishes, one count for all sizes or one each;
#                              -backlog N measures the reads again beside N pending jobs)
#
# Extra arguments go to the mode, e.g. `scripts/bench.sh recycle -rounds 5 -jobs 200`.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  sed -n '2,/^set /{/^#/p}' "$0" | sed 's/^# \{0,1\}//' >&2
  echo "usage: scripts/bench.sh soak|recycle|go|autoscale|river|fleet|crawlee|scale [mode flags]" >&2
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
  fleet)
    build internal/benchfleet
    "$tmp/benchfleet" "$@"
    ;;
  river)
    # Our queue first, then River, in one run on one machine: compare only
    # figures of the same run, and of the same shape.
    out="$tmp/go-bench.txt"
    go test -run '^$' -bench 'BenchmarkEnqueue10k|BenchmarkLifecycle' -benchtime 20x -count 1 ./jobqueue | tee "$out" >&2
    echo "bench.sh: building bench/river" >&2
    (cd bench/river && go build -o "$tmp/riverbench" .)
    # River's line is {"bench":"river",...}: its fields follow ours.
    if [ $# -gt 0 ]; then
      "$tmp/riverbench" -jobs 20000 "$@" | sed 's/^{"bench":"river"//' > "$tmp/river.json"
    else
      "$tmp/riverbench" -jobs 20000 | sed 's/^{"bench":"river"//; s/}$//' > "$tmp/river.json"
      "$tmp/riverbench" -jobs 20000 -clients 16 -workers 6 |
        sed 's/^{"bench":"river"//; s/"river\./"river16x6./g' >> "$tmp/river.json"
    fi
    awk '
      /^Benchmark/ {
        name=$1; sub(/-[0-9]+$/, "", name)
        for (i = 3; i < NF; i += 2) { m[name "." $(i+1)] = $i }
      }
      END {
        printf "{\"bench\":\"river\",\"load_avg\":\"%s\"", load
        for (k in m) printf ",\"%s\":%s", k, m[k]
      }' load="$(cut -d' ' -f1-3 /proc/loadavg)" "$out"
    tr -d '\n' < "$tmp/river.json"
    echo
    ;;
  go | autoscale)
    # Each benchmark with the iteration count that makes it meaningful (they
    # count jobs, pages or rounds per op), one package at a time: they share
    # two cores. go test's output (benchstat-compatible) goes to stderr; the
    # JSON line collects every metric as "Benchmark.unit": value.
    if [ "$mode" = go ]; then
      runs=(
        "./jobqueue BenchmarkEnqueue10k 20x"
        "./jobqueue BenchmarkLifecycle 20x"
        "./farm BenchmarkAssign100Nodes 6000x"
        "./farm BenchmarkSubmitToStart 300x"
        "./browser BenchmarkColdStart 5x"
        "./browser BenchmarkRender6 120x"
        "./browser BenchmarkIsolation 60x"
        "./browser BenchmarkChromeLife 3x"
        "./browser BenchmarkEgress 120x"
        "./supervisor BenchmarkNode 200x"
        "./farm/web . 20x"
        "./cmd/farm BenchmarkReadSpecs 20x"
      )
    else
      runs=("./farm/autoscale BenchmarkSimulateDay 1x")
    fi
    out="$tmp/go-bench.txt"
    : > "$out"
    for r in "${runs[@]}"; do
      read -r pkg re bt <<<"$r"
      go test -run '^$' -bench "$re" -benchtime "$bt" -count 1 -timeout 60m "$pkg" "$@" | tee -a "$out" >&2
    done
    awk -v mode="$mode" '
      /^Benchmark/ {
        name=$1; sub(/-[0-9]+$/, "", name)
        for (i = 3; i < NF; i += 2) { m[name "." $(i+1)] = $i }
      }
      END {
        printf "{\"bench\":\"%s\"", mode
        for (k in m) printf ",\"%s\":%s", k, m[k]
        print "}"
      }' "$out"
    ;;
  crawlee)
    # Crawlee runs from a temp dir: its packages are installed there at each
    # run (puppeteer-core, not puppeteer, which would download a browser;
    # @crawlee/puppeteer, not the crawlee meta-package, whose linkedom part
    # does not install here) and the driver is copied next to them, where
    # node resolves its imports. Crawlee's incognito pages import
    # 'puppeteer' itself, hence the alias of it to puppeteer-core.
    echo "bench.sh: installing @crawlee/puppeteer and puppeteer-core" >&2
    # Pinned: a re-run compares the same Crawlee (the result names them).
    npm install --no-audit --no-fund --silent --prefix "$tmp/crawlee" @crawlee/puppeteer@3.18.1 puppeteer-core@25.16.0 puppeteer@npm:puppeteer-core@25.16.0 >&2
    cp scripts/crawlee-bench.mjs "$tmp/crawlee/"
    build internal/benchcrawlee
    "$tmp/benchcrawlee" -driver "$tmp/crawlee/crawlee-bench.mjs" "$@"
    ;;
  scale)
    build internal/benchscale
    "$tmp/benchscale" "$@"
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
