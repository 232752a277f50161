#!/usr/bin/env bash
# make run PIPELINE=<name> [RUNS=<n>] [CONF='<json>'] [DATE=<logical date>]
# n DAG runs of the pipeline, one after another, each with `airflow dags test`: `eobatch run`
# (eobatch.airflow.runs) with this checkout's Airflow home and DAG folder (include/env.sh).
set -euo pipefail
source "$(dirname "$0")/env.sh"
PIPELINE="${1:?usage: run_pipeline.sh PIPELINE [RUNS] [CONF] [DATE]}"
RUNS="${2:-1}"; CONF="${3:-}"; DATE="${4:-}"
[[ "$RUNS" =~ ^[0-9]+$ ]] && [ "$RUNS" -ge 1 ] || { echo "error: RUNS must be a positive integer, got '$RUNS'" >&2; exit 2; }
airflow_init
args=(run "$PIPELINE" --runs "$RUNS")
[ -n "$CONF" ] && args+=(--conf "$CONF")
[ -n "$DATE" ] && args+=(--date "$DATE")
exec python -m eobatch.cli "${args[@]}"
