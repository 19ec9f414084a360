#!/usr/bin/env bash
# Starts `farm up --consumers 3` N times (default 50) on one data dir and
# checks, each time, that the three consumer processes run under three
# distinct node ids, and that in the database each id is held by exactly the
# process that carries it (one live process per id; see issue 12). Prints
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

env_of() { tr '\0' '\n' <"/proc/$1/environ" | sed -n "s/^$2=//p"; }

total=0
for run in $(seq 1 "$runs"); do
  "$work/farm" up --data-dir "$work/data" --consumers 3 --listen 127.0.0.1:0 >"$work/up.log" 2>&1 &
  up=$!
  declare -A idOf=()
  deadline=$((SECONDS + 120))
  while :; do
    idOf=()
    for p in $(pgrep -P "$up" -f 'farm consumer' || true); do
      id=$(env_of "$p" FARM_NODE_ID || true)
      [ -n "$id" ] && idOf[$p]=$id
    done
    if [ ${#idOf[@]} -eq 3 ]; then
      first=$(printf '%s\n' "${!idOf[@]}" | head -1)
      db=$(env_of "$first" FARM_DATABASE_URL)
      # Each child's id is held, in the database, by that child's pid.
      held=0
      for p in "${!idOf[@]}"; do
        got=$(psql "$db" -Atc "SELECT pid FROM nodes WHERE id = '${idOf[$p]}' AND state = 'active'" 2>/dev/null || true)
        [ "$got" = "$p" ] && held=$((held + 1))
      done
      [ $held -eq 3 ] && break
    fi
    if [ $SECONDS -ge $deadline ]; then
      echo "run $run: consumers did not all register within 120 s" >&2
      tail -20 "$work/up.log" >&2
      kill -INT "$up"; wait "$up" || true
      exit 1
    fi
    sleep 0.2
  done
  distinct=$(printf '%s\n' "${idOf[@]}" | sort -u | wc -l)
  echo "run $run: pids ${!idOf[*]} -> ids ${idOf[*]} ($distinct distinct, each held by its own pid)"
  if [ "$distinct" -ne 3 ]; then
    echo "run $run: two consumers share a node id" >&2
    kill -INT "$up"; wait "$up" || true
    exit 1
  fi
  total=$((total + distinct))
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
