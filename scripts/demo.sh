#!/usr/bin/env bash
# The demo: one command on a fresh Debian machine. Installs what is missing
# (Chromium, PostgreSQL binaries), builds `farm`, and runs `farm up --demo`:
# a private PostgreSQL, the producer with its dashboard, two consumer
# processes, and a local JavaScript-heavy site whose pages they render —
# Chrome recycled every 20 jobs, each consumer restarted every 80. Nothing
# leaves this machine. Extra arguments go to `farm up`, e.g.
#
#   scripts/demo.sh --demo-jobs 1000 --consumers 3
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
mkdir -p bin
echo "demo: building bin/farm" >&2
go build -o bin/farm ./cmd/farm
exec bin/farm up --demo "$@"
