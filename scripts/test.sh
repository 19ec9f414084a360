#!/usr/bin/env bash
# The test command. On a fresh Debian machine it installs what the tests need
# (scripts/setup.sh: Chromium, PostgreSQL server binaries — the tests start
# private servers), then runs gofmt, go vet and the race-enabled test suite
# against real PostgreSQL and real Chromium.
#
#   scripts/test.sh                 # everything
#   scripts/test.sh ./jobqueue/...  # some packages
#
# FARM_TEST_DATABASE_URL points the tests at an existing server instead.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh

printf '\n== gofmt\n'
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.git/*'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:" >&2; echo "$unformatted" >&2; exit 1
fi

printf '\n== go vet\n'
go vet ./...

printf '\n== go test -race\n'
pkgs=("$@")
[ ${#pkgs[@]} -gt 0 ] || pkgs=(./...)
go test -race -count=1 -timeout 30m "${pkgs[@]}"

# The suite above runs the default browser (the headless shell); the browser
# package and the supervisor's real-Chromium tests run again on full
# Chromium, the other supported binary.
if [ $# -eq 0 ]; then
  printf '\n== go test -race ./browser ./supervisor on full Chromium (FARM_TEST_BROWSER=chrome)\n'
  FARM_TEST_BROWSER=chrome go test -race -count=1 -p 1 -timeout 20m ./browser ./supervisor
  # Its own module (the farm binary never links k8s.io): the Kubernetes
  # manifests, decoded strictly into the API types.
  printf '\n== deploy/kubernetes manifests\n'
  (cd deploy/kubernetes && go vet ./... && go test -count=1 ./...)
  printf '\n== bench/river (the River baseline of scripts/bench.sh river: built and vetted, not run)\n'
  (cd bench/river && go vet ./... && go build -o /dev/null .)
fi
