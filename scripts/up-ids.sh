#!/usr/bin/env bash
# Starts `farm up --consumers 3` N times (default 50) on one data dir and
# checks, each time, that the three consumer processes hold three distinct
# node ids in the database, each id by exactly one of them (one live
# process per id; see issue 12), and that none met another process on its
# id. Prints
# one line per start and a summary; exits 1 on the first violation.
#
#   scripts/up-ids.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-50}
work=$(mktemp -d /tmp/upids.XXXXXX)
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT
go build -o "$work/farm" ./cmd/farm

# The consumers are non-dumpable (their /proc/PID/environ is root's), so
# what each runs as is read from the database: the node id each child's pid
# holds, with the URL `farm up` records in its data dir.
db_url() { sed -n 's/^ *"database_url": "\(.*\)",$/\1/p' "$work/data/farm.json" 2>/dev/null; }

total=0
for run in $(seq 1 "$runs"); do
  "$work/farm" up --data-dir "$work/data" --consumers 3 --listen 127.0.0.1:0 >"$work/up.log" 2>&1 &
  up=$!
  declare -A idOf=()
  deadline=$((SECONDS + 120))
  while :; do
    idOf=()
    db=$(db_url || true)
    children=$(pgrep -P "$up" -f 'farm consumer' | paste -sd, || true)
    if [ -n "$db" ] && [ -n "$children" ]; then
      # Each child's id, as the database holds it for that child's pid.
      while IFS='|' read -r p id; do
        [ -n "$p" ] && idOf[$p]=$id
      done < <(psql "$db" -Atc "SELECT pid, id FROM nodes WHERE state = 'active' AND pid IN ($children)" 2>/dev/null || true)
    fi
    if [ ${#idOf[@]} -eq 3 ]; then
      break
    fi
    if [ $SECONDS -ge $deadline ]; then
      echo "run $run: consumers did not all register within 120 s" >&2
      tail -20 "$work/up.log" >&2
      kill -INT "$up"; wait "$up" || true
      exit 1
    fi
    sleep 0.2
  done
  # The database holds an id for one pid at most (its key): three children
  # each holding one hold three ids. Two given one id would not both have
  # registered, and the wait above would have timed out.
  echo "run $run: pids ${!idOf[*]} -> ids ${idOf[*]} (each held by its own pid)"
  total=$((total + ${#idOf[@]}))
  if grep -q "held by a live process\|another process registered this node id" "$work"/data/logs/consumer-*.log; then
    echo "run $run: a consumer met another process on its id:" >&2
    grep -h "held by a live process\|another process registered this node id" "$work"/data/logs/consumer-*.log >&2
    kill -INT "$up"; wait "$up" || true
    exit 1
  fi
  kill -INT "$up"
  wait "$up" || true
done
echo "summary: $runs starts of farm up --consumers 3: $total consumer processes, each with a node id no other live process had"
