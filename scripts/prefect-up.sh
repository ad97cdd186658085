#!/usr/bin/env bash
# A local Prefect: server (SQLite in .prefect-local/home, UI and API on 127.0.0.1:4200), the
# `cpu` and `gpu` pools, the `gpu` concurrency limit and the deployments (flows/deploy.py), and
# a worker for the `cpu` pool. Stop it with `make prefect-down`. GPU machines start their own
# worker (the Dockerfile's image); until one is online the `paper` schedule stays paused.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
STATE=.prefect-local
mkdir -p "$STATE"
export PREFECT_HOME="$PWD/$STATE/home"
export PREFECT_API_URL="${PREFECT_API_URL:-http://127.0.0.1:4200/api}"
export PREFECT_SERVER_ANALYTICS_ENABLED=false
export PREFECT_WORKER_QUERY_SECONDS="${PREFECT_WORKER_QUERY_SECONDS:-5}"
set -m  # background jobs lead their own process group: `make prefect-down` can stop them

healthy() { curl -sf "$PREFECT_API_URL/health" >/dev/null; }

if ! healthy; then
  nohup "$BIN/prefect" server start --host 127.0.0.1 --port 4200 >"$STATE/server.log" 2>&1 &
  echo $! >"$STATE/server.pid"
  for _ in $(seq 90); do healthy && break; sleep 1; done
  healthy || { echo "Prefect server did not answer on $PREFECT_API_URL; see $STATE/server.log" >&2; exit 1; }
fi
"$BIN/python" -m flows.deploy --worker-starting cpu
if ! { [ -f "$STATE/worker-cpu.pid" ] && kill -0 "$(cat "$STATE/worker-cpu.pid")" 2>/dev/null; }; then
  nohup "$BIN/prefect" worker start --pool cpu --name "cpu-$(hostname)" >"$STATE/worker-cpu.log" 2>&1 &
  echo $! >"$STATE/worker-cpu.pid"
fi
cat <<MSG
Prefect UI:  http://127.0.0.1:4200   (server log: $STATE/server.log, worker log: $STATE/worker-cpu.log)
In a shell:  export PREFECT_API_URL=$PREFECT_API_URL
Run now:     $BIN/prefect deployment run maopd-paper/smoke --watch
MSG
