#!/usr/bin/env bash
# make run PIPELINE=<name> [RUNS=<n>] [CONF='<json>'] [DATE=<logical date>]
# n DAG runs of the pipeline, one after another, each with `airflow dags test`.
set -euo pipefail
source "$(dirname "$0")/env.sh"
PIPELINE="${1:?usage: run_pipeline.sh PIPELINE [RUNS] [CONF] [DATE]}"
RUNS="${2:-1}"; CONF="${3:-}"; DATE="${4:-}"
[[ "$RUNS" =~ ^[0-9]+$ ]] && [ "$RUNS" -ge 1 ] || { echo "error: RUNS must be a positive integer, got '$RUNS'" >&2; exit 2; }
airflow_init
python -m eobatch.cli ledger "$PIPELINE" --format json >/dev/null || exit 2   # the pipeline exists and loads
# Interval mode: DATE is the start of the interval to run, as a backfill's logical date would be.
[ -n "$DATE" ] && { DATE=$(python -m eobatch.cli run-date "$PIPELINE" "$DATE") || exit 2; }
for i in $(seq 1 "$RUNS"); do
  args=(dags test "$PIPELINE")
  [ -n "$DATE" ] && args+=("$DATE")
  [ -n "$CONF" ] && args+=(-c "$CONF")
  log="$AIRFLOW_HOME/last-run-$PIPELINE.log"
  echo "== run $i/$RUNS of $PIPELINE (log: $log)" >&2
  set +e
  airflow "${args[@]}" >"$log" 2>&1
  rc=$?
  set -e
  grep -E "\] (recover|plan|stage|verify|commit|abort): |\[eobatch\]|AirflowSkipException|nothing new" "$log" \
    | sed -E 's/^[0-9TZ:.-]+ \[[a-z ]+\] //; s/ \[(airflow|eobatch)[^]]*\].*$//' | sed 's/^/   /' >&2 || true
  state=$(grep -oE "DagRun Finished: .*state=[a-z_]+" "$log" | grep -oE "state=[a-z_]+$" | tail -1 | cut -d= -f2 || true)
  if [ "$rc" -ne 0 ] || [ "$state" != "success" ]; then
    echo "error: run $i of $PIPELINE ended with state '${state:-unknown}' (exit $rc); see $log" >&2
    grep -E "ParamValidationError|Error|Exception" "$log" | grep -v "^\s*at " | tail -5 >&2 || true
    exit 1
  fi
done
