# Environment of every Airflow / Spark command of the Makefile (sourced, not executed).
# Each value can be overridden from the caller's environment.
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PATH="$REPO/.venv/bin:$PATH"
export AIRFLOW_HOME="${AIRFLOW_HOME:-$REPO/.demo/airflow}"
export AIRFLOW__CORE__DAGS_FOLDER="${AIRFLOW__CORE__DAGS_FOLDER:-$REPO/dags}"
export AIRFLOW__CORE__PLUGINS_FOLDER="${AIRFLOW__CORE__PLUGINS_FOLDER:-$REPO/plugins}"
export AIRFLOW__CORE__LOAD_EXAMPLES="${AIRFLOW__CORE__LOAD_EXAMPLES:-False}"
export AIRFLOW__CORE__UNIT_TEST_MODE="${AIRFLOW__CORE__UNIT_TEST_MODE:-False}"
export AIRFLOW__LOGGING__LOGGING_LEVEL="${AIRFLOW__LOGGING__LOGGING_LEVEL:-INFO}"
# The Spark connection of the stage task: local[*] unless the caller defines another one
# (or defines spark_default in Airflow's own connections).
if [ -z "${AIRFLOW_CONN_SPARK_DEFAULT:-}" ]; then
  export AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[*]"}'
fi
# Airflow's example connections (spark_default -> yarn among them) are not created.
export AIRFLOW__DATABASE__LOAD_DEFAULT_CONNECTIONS="${AIRFLOW__DATABASE__LOAD_DEFAULT_CONNECTIONS:-False}"
export PYTHONPATH="$REPO/plugins${PYTHONPATH:+:$PYTHONPATH}"
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$REPO/.venv/bin/python}"

airflow_init() {  # initialise a new Airflow home (SQLite) once
  if [ ! -f "$AIRFLOW_HOME/airflow.db" ] && [ ! -f "$AIRFLOW_HOME/.initialised" ]; then
    mkdir -p "$AIRFLOW_HOME"
    echo "initialising Airflow home $AIRFLOW_HOME" >&2
    airflow db migrate >"$AIRFLOW_HOME/db-migrate.log" 2>&1 || { cat "$AIRFLOW_HOME/db-migrate.log" >&2; return 1; }
    touch "$AIRFLOW_HOME/.initialised"
  fi
}
