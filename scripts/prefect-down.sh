#!/usr/bin/env bash
# Stop what scripts/prefect-up.sh started (worker first, then the server).
set -uo pipefail
cd "$(dirname "$0")/.."
for name in worker-cpu server; do
  pidfile=".prefect-local/$name.pid"
  [ -f "$pidfile" ] || continue
  pid="$(cat "$pidfile")"
  kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null
  for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -9 -- "-$pid" 2>/dev/null
  rm -f "$pidfile"
  echo "stopped $name ($pid)"
done
