#!/usr/bin/env bash
# The test command. On a fresh Debian machine it installs what the tests need
# (Chromium; PostgreSQL server binaries — no server is started here, the tests
# start private ones), then runs gofmt, go vet and the race-enabled test suite
# against real PostgreSQL and real Chromium.
#
#   scripts/test.sh                 # everything
#   scripts/test.sh ./jobqueue/...  # some packages (extra args go to go test)
#
# FARM_TEST_DATABASE_URL points the tests at an existing server instead.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\n== %s\n' "$*"; }

missing=()
if [ -z "${FARM_CHROME:-}" ] && ! [ -x /usr/lib/chromium/chromium ] && ! command -v chromium >/dev/null 2>&1 \
   && ! command -v google-chrome >/dev/null 2>&1; then
  missing+=(chromium fonts-liberation)
fi
if [ -z "${FARM_TEST_DATABASE_URL:-}" ] && ! command -v initdb >/dev/null 2>&1 \
   && ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
  missing+=(postgresql)
fi
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "scripts/test.sh: the tests need: ${missing[*]}" >&2
    echo "install them first, e.g.: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi
command -v go >/dev/null 2>&1 || { echo "scripts/test.sh: Go 1.26+ is required (https://go.dev/dl/)" >&2; exit 1; }

say "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:" >&2; echo "$unformatted" >&2; exit 1
fi

say "go vet"
go vet ./...

say "go test -race"
pkgs=("$@")
[ ${#pkgs[@]} -gt 0 ] || pkgs=(./...)
go test -race -count=1 -timeout 25m "${pkgs[@]}"
