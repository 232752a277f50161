# Exactly-once micro-batches into Delta Lake with Airflow + Spark. See README.md and docs/site/.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
PIPELINE ?= orders
# `make workers-check` runs 6 runs unless RUNS is given (`make run`'s default is 1)
WORKERS_CHECK_RUNS := $(if $(filter undefined,$(origin RUNS)),6,)
RUNS ?= 1
# `make history-check` runs 2000 batches unless BATCHES is given (`make chaos`'s default is 20)
HISTORY_CHECK_BATCHES := $(if $(filter undefined,$(origin BATCHES)),2000,)
CONF ?=
DATE ?=
FORMAT ?= table
BATCHES ?= 20
SEED ?= 1
BACKEND ?= files
PYTEST_ARGS ?=
# `make test` runs the test files on this many pytest workers (each file on one worker, so that a
# file's module fixtures, a broker or a cluster, are started once), in the order tests/conftest.py
# gives them (the long files first; xdist would otherwise start with the files of most tests, the
# short unit ones, and end on one long file); 1 runs them in one process. Default: one per core
# this machine lets the tests use, at least 2 and at most 4 (include/test_workers.py).
TEST_WORKERS ?= $(shell python3 include/test_workers.py 2>/dev/null || echo 2)
# MASTER, BATCH, DRY_RUN: no default (unset unless given; an empty MASTER would mislead spark-submit)

# The values of these variables reach the recipes only through the environment ("$$CONF" in a
# recipe, never $(CONF)): the shell never parses them, so a quote or a `;` in CONF or PIPELINE
# stays a character of the value. `override VAR := $(value VAR)` keeps make from expanding a `$`
# in a value given on the command line: CONF='{"note": "$5"}' arrives as it was typed.
# (PYTEST_ARGS is meant to be split into words: it stays pasted into the command.)
USER_VARS := PIPELINE RUNS CONF DATE FORMAT BATCHES SEED BACKEND MASTER BATCH DRY_RUN PYTHONS SIZES SINGLE_FILE_GB PLAN_LATE_BATCHES KAFKA_RECORDS MERGE_RECORDS DRIVER_MEMORY SINK
define verbatim_env
override $(1) := $$(value $(1))
export $(1)
endef
$(foreach v,$(USER_VARS),$(if $(filter undefined,$(origin $(v))),,$(eval $(call verbatim_env,$(v)))))

.PHONY: wheel lint schema docs help setup venv jars kafka-jars s3-jars class-archive cluster-up cluster-down ui-up ui-down demo demo-chain chain-check workers-check test test-unit install-check run ledger maintain pools replay sweep lock jar-lock clean up down chaos reset-batch rewind bench model-check history-check

help:
	@echo "make setup | demo | demo-chain | chain-check | workers-check [RUNS=n] | test | lint | schema | docs | wheel | install-check [PYTHONS=\"3.11 3.12\"] | up | down | cluster-up | cluster-down | ui-up | ui-down"
	@echo "make run PIPELINE=<name> [RUNS=n] [CONF=json] [DATE=date] | ledger PIPELINE=<name> [FORMAT=json] | maintain PIPELINE=<name> | pools"
	@echo "make chaos BATCHES=<n> SEED=<s> [BACKEND=files|kafka|s3|delta] [SINK=append|merge|totals] [MINUTES=<m>] | sweep PIPELINE=<name>"

setup: venv jars kafka-jars s3-jars class-archive

# The stage job's JVM class-data archive (eobatch/job/driver_jvm.py): one small stage job, once per
# pyspark and Java; every later stage job's driver starts from it.
class-archive: venv jars
	@source include/env.sh && python -m eobatch.cli class-archive

# Python environment from the two locks (the product's runtime and the repository's test and lint
# tools), every distribution checked against the lock's SHA-256 (--require-hashes: an unpinned or
# changed package fails the install); re-installed when a lock changes.
venv: $(VENV)/.installed
$(VENV)/.installed: requirements.txt requirements-dev.txt
	@test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --require-hashes -r requirements.txt -r requirements-dev.txt
	@touch $@

# Maven: the repository's own checksums must match what is downloaded (--strict-checksums), and the
# resolved jars must be exactly those of the committed SHA-256 lists under include/jars/.
MVN := mvn --batch-mode --quiet --strict-checksums -s include/maven-settings.xml
# The one Maven plugin they run, by its full coordinates, the version each pom pins too (a bare
# `dependency:` prefix runs the installed Maven's default); eobatch/job/jars.py names the same.
DEPENDENCY_PLUGIN := org.apache.maven.plugins:maven-dependency-plugin:3.11.0

# JVM jars of the Spark jobs, resolved by mvn into .jars/ (git-ignored): both sets, the core one
# (Delta) and the s3 one (hadoop-aws 3.5.0 with the AWS SDK v2 bundle it declares, s3a://), which
# the tests need. The same command as an installed product's `eobatch jars --with s3`
# (eobatch/job/jars.py: the mvn call, the Maven settings it runs with, and the check).
jars: .jars/.resolved .jars/eobatch-jvm.jar
.jars/.resolved: include/pom.xml $(VENV)/.installed
	PYTHONPATH=plugins $(VENV)/bin/python -m eobatch.cli jars --dir .jars --with s3 \
	    $${JAR_LOCK_WRITE:+--write-list include/jars/spark.sha256}
	@touch $@

# The stage job's own JVM code (include/jvm/: from_json reading a record's UTF-8 bytes in place),
# compiled by the JDK's javac against the Spark jars of the venv's pyspark, into .jars/ with the rest.
.jars/eobatch-jvm.jar: .jars/.resolved $(VENV)/.installed include/jvm/build.sh $(shell find include/jvm -name '*.java')
	VENV=$(VENV) include/jvm/build.sh $@

# The Kafka broker (KRaft, single node) of `make up` and the tests: jars into .jars-kafka/.
kafka-jars: .jars-kafka/.resolved
.jars-kafka/.resolved: include/kafka-broker/pom.xml
	rm -rf .jars-kafka && mkdir -p .jars-kafka
	$(MVN) -f include/kafka-broker/pom.xml \
	    $(DEPENDENCY_PLUGIN):copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CURDIR)/.jars-kafka
	include/check-jars.sh .jars-kafka include/jars/kafka-broker.sha256
	@touch $@

# The S3-compatible server (S3Proxy, filesystem backend) of `make up` and the tests: .jars-s3proxy/.
s3-jars: .jars-s3proxy/.resolved
.jars-s3proxy/.resolved: include/s3proxy/pom.xml
	rm -rf .jars-s3proxy && mkdir -p .jars-s3proxy
	$(MVN) -f include/s3proxy/pom.xml \
	    $(DEPENDENCY_PLUGIN):copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CURDIR)/.jars-s3proxy
	include/check-jars.sh .jars-s3proxy include/jars/s3proxy.sha256
	@touch $@

# Local services on loopback (a Kafka broker and an S3 server); `make up` writes .services/env.
up: setup
	@source include/env.sh && python tests/support/services.py up

down: venv
	@source include/env.sh && python tests/support/services.py down

# A Spark standalone cluster on loopback (a master, two workers) from pyspark's own classes;
# writes .services/cluster-env (AIRFLOW_CONN_SPARK_DEFAULT=spark://127.0.0.1:<port>).
cluster-up: setup
	@source include/env.sh && python tests/support/services.py cluster-up

cluster-down: venv
	@source include/env.sh && python tests/support/services.py cluster-down

# A real Airflow on loopback (api-server, scheduler, dag-processor; SQLite) for the pipelines of
# PIPELINES_DIR, with Airflow's own login; AIRFLOW_HOME defaults to .services/airflow here. Returns
# once the API answers; writes .services/ui-env (AIRFLOW_UI_URL, AIRFLOW_UI_USER, AIRFLOW_UI_PASSWORD).
ui-up: setup
	@export AIRFLOW_HOME="$${AIRFLOW_HOME:-$(CURDIR)/.services/airflow}"; source include/env.sh && \
	    python tests/support/services.py ui-up

ui-down: venv
	@source include/env.sh && python tests/support/services.py ui-down

demo: setup
	bash include/demo.sh

# three pipelines chained by their tables: orders -> orders_silver (upsert) -> orders_gold (totals over
# silver's Change Data Feed); docs/site/sources.md "Read another pipeline's Delta table"
demo-chain: setup
	bash include/demo_chain.sh

test: setup
	$(VENV)/bin/python -m pytest $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder) $(PYTEST_ARGS)

# The JSON Schema of a pipeline YAML, from the typed models (checked in; a unit test fails when it is
# not current). docs/site/reference.md "Pipeline files in an editor".
schema: venv
	PYTHONPATH=plugins $(VENV)/bin/python -m eobatch.pipelines.json_schema docs/pipeline.schema.json

# The documentation site (docs/mkdocs.yml, pages in docs/site/) into docs/_build/ (git-ignored),
# strict: a broken link or anchor fails it. Its YAML reference is generated from
# docs/pipeline.schema.json, its benchmark figures from .bench/results.json (docs/hooks.py).
docs: venv
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -f docs/mkdocs.yml

# The build backend's own environment, from its lock only (the dev lock holds the same distributions).
BUILD_ENV := build/backend
$(BUILD_ENV)/.installed: requirements-build.txt $(VENV)/.installed
	rm -rf $(BUILD_ENV) && $(VENV)/bin/python -m venv $(BUILD_ENV)
	$(BUILD_ENV)/bin/pip install --quiet --require-hashes -r requirements-build.txt
	@touch $@

# The product's wheel, dist/eobatch-<version>-py3-none-any.whl (pyproject.toml says what goes in: the
# package, the Spark job, the stage job's JVM jar built here, the Maven files of `eobatch jars`).
# Beside it, dist/eobatch-<version>-requirements.txt installs it with the runtime lock, every hash checked.
# The wheel is built by the backend of its lock (requirements-build.txt, pyproject.toml's [build-system]
# requires with its dependencies, every distribution hash-checked), installed into an environment of its
# own and run in place: never an isolated build (pip's or `python -m build`'s), which would install the
# backend from the index with no hash checked.
wheel: venv .jars/eobatch-jvm.jar $(BUILD_ENV)/.installed
	rm -f dist/eobatch-*
	$(BUILD_ENV)/bin/hatchling build -t wheel
	$(VENV)/bin/python include/wheel_requirements.py dist/eobatch-*.whl requirements.txt

# Static checks (configuration in pyproject.toml); CI runs them before the tests.
lint: venv
	$(VENV)/bin/ruff check dags spark_jobs plugins tests include
	$(VENV)/bin/mypy

# The wheel installed into a fresh Airflow (Airflow and its providers pinned) on each Python of PYTHONS
# (default "3.11 3.12", which `make test` runs too): it changes neither Airflow nor a provider, and its
# command, DAG factory and provider work. tests/integration/test_install_beside_airflow.py
install-check: venv .jars/eobatch-jvm.jar
	@EOBATCH_INSTALL_PYTHONS="$${PYTHONS:-3.11 3.12}" $(VENV)/bin/python -m pytest tests/integration/test_install_beside_airflow.py \
	    -q -s -p no:cacheprovider $(PYTEST_ARGS)

test-unit: setup
	$(VENV)/bin/python -m pytest -m "not integration" $(PYTEST_ARGS)

# Model-based test of the protocol (hypothesis; real verbs, real delta-rs tables, no Spark):
# EXAMPLES random examples (default 500; `make test-unit` runs a fixed 250), SEED repeats a run.
model-check: venv
	@examples="$${EXAMPLES:-500}"; [[ "$$examples" =~ ^[0-9]+$$ ]] || { echo "usage: make model-check [EXAMPLES=<n>] [SEED=<s>]" >&2; exit 2; }; \
	EOBATCH_MODEL_EXAMPLES="$$examples" $(VENV)/bin/python -m pytest tests/model -q -p no:cacheprovider \
	    --hypothesis-seed="$${SEED:-1}" --hypothesis-show-statistics $(PYTEST_ARGS)

# three pipelines chained by their tables under a real Airflow scheduler (asset-scheduled hops, upstream
# maintenance, a killed downstream stage): tests/chain/test_chain_scheduler.py, several minutes
chain-check: setup
	@source include/env.sh && EOBATCH_CHAIN_CHECK=1 python -m pytest tests/chain -q -p no:cacheprovider $(PYTEST_ARGS)

# RUNS runs (default 6; `make test` runs 2) of a pipeline under Airflow's Celery executor on two workers
# (Redis from Debian as the broker), each with its own caches, the tasks of every run alternating between
# them: tests/integration/test_many_workers.py
workers-check: setup
	@runs="$$RUNS"; $(if $(WORKERS_CHECK_RUNS),runs=$(WORKERS_CHECK_RUNS);) \
	[[ "$$runs" =~ ^[0-9]+$$ ]] && [ "$$runs" -ge 2 ] || { echo "usage: make workers-check [RUNS=<n>, at least 2]" >&2; exit 2; }; \
	source include/env.sh && EOBATCH_MANY_WORKERS_RUNS="$$runs" python -m pytest tests/integration/test_many_workers.py \
	    -q -s -p no:cacheprovider $(PYTEST_ARGS)

# a long history (many small batches, maintenance passes, late files, re-runs) in both modes;
# make test runs 40 batches of it
history-check: venv
	@batches="$$BATCHES"; $(if $(HISTORY_CHECK_BATCHES),batches=$(HISTORY_CHECK_BATCHES);) [[ "$$batches" =~ ^[0-9]+$$ ]] || { echo "usage: make history-check [BATCHES=<n>]" >&2; exit 2; }; \
	EOBATCH_HISTORY_BATCHES="$$batches" $(VENV)/bin/python -m pytest tests/unit/protocol/test_maintenance.py \
	    tests/unit/sinks/delta/test_compaction.py -k "long and history" -q -p no:cacheprovider $(PYTEST_ARGS)

run: setup
	bash include/run_pipeline.sh "$$PIPELINE" "$$RUNS" "$$CONF" "$$DATE"

# Fault injection at every phase boundary; last line: chaos: batches=.. faults=.. duplicates=.. lost=.. orphans=..
# [MODE=continuous|interval] [FAULTS=kind,kind] (unset: continuous, every kind of the backend and mode)
# [SINK=append|merge|totals] (merge: the sink upserts by key; totals: running totals per customer)
chaos: setup
	@source include/env.sh && python tests/chaos/run_chaos.py --batches "$$BATCHES" --seed "$$SEED" --backend "$$BACKEND" \
	    $${MASTER:+--master "$$MASTER"} $${MODE:+--mode "$$MODE"} $${FAULTS:+--faults "$$FAULTS"} $${SINK:+--sink "$$SINK"} \
	    $${MINUTES:+--minutes "$$MINUTES"}

# The product against Spark Structured Streaming (availableNow) and a plain delta-spark append on
# the same generated data, plus the protocol's own costs, in one run: .bench/results.json, a table,
# .bench/bench.png. [SIZES=1000,1000000,5000000] [SINGLE_FILE_GB=1] [MASTER=local[*]]
# [PLAN_LATE_BATCHES=100000] [KAFKA_RECORDS=1000000] [MERGE_RECORDS=1000000] [DRIVER_MEMORY=<size>]
# [CATCHUP=10x500000] [CATCHUP_ONE_PER_RUN=1] [SCHEDULER_RUNS=3] [DELTA_RECORDS=1000000]
# [LANDING_SIZES=1000,1000000] [LANDING_S3_SIZES=1000,10000] [LANDING_SSS_SIZES=<LANDING_SIZES>]
# [LANDING_SSS_REAL_UP_TO=10000] (read from the environment; 0 skips a figure)
bench: setup
	@source include/env.sh && python tests/bench/run_bench.py

ledger: venv
	@source include/env.sh && python -m eobatch.cli ledger "$$PIPELINE" --format "$$FORMAT"

reset-batch: venv
	@test -n "$$BATCH" || { echo "usage: make reset-batch PIPELINE=<name> BATCH=<id> [ACCEPT_LOSS=1]" >&2; exit 2; }
	@source include/env.sh && python -m eobatch.cli reset-batch "$$PIPELINE" "$$BATCH" $${ACCEPT_LOSS:+--accept-loss}

rewind: venv
	@test -n "$$BATCH$$UPSTREAM_VERSION" || { echo "usage: make rewind PIPELINE=<name> BATCH=<id>|UPSTREAM_VERSION=<v> [DRY_RUN=1] [ACCEPT_LOSS=1]" >&2; exit 2; }
	@source include/env.sh && python -m eobatch.cli rewind "$$PIPELINE" $${BATCH:+"$$BATCH"} $${UPSTREAM_VERSION:+--upstream-version "$$UPSTREAM_VERSION"} $${DRY_RUN:+--dry-run} $${ACCEPT_LOSS:+--accept-loss}

maintain: venv
	@test -n "$$PIPELINE" || { echo "usage: make maintain PIPELINE=<name>" >&2; exit 2; }
	@source include/env.sh && python -m eobatch.cli maintain "$$PIPELINE"

# the one-slot Airflow pools that pipelines name in maintenance.pool (their commit and maintenance
# tasks take a slot of it), created or reset in the Airflow home of include/env.sh
pools: venv
	@source include/env.sh && airflow_init && python -m eobatch.cli pools --create

replay: venv
	@test -n "$$PIPELINE" -a -n "$$BATCH" || { echo "usage: make replay PIPELINE=<name> BATCH=<id> [REASON=<text>]" >&2; exit 2; }
	@source include/env.sh && python -m eobatch.cli replay "$$PIPELINE" "$$BATCH" $${REASON:+--reason "$$REASON"}

sweep: venv
	@source include/env.sh && python -m eobatch.cli sweep "$$PIPELINE" --all

# The Python locks, with the SHA-256 of every distribution, from requirements.in, requirements-build.in and
# requirements-dev.in (versions already locked are kept unless an input asks otherwise; uv comes
# from the dev lock). The dev lock is constrained by the runtime lock, the build backend's lock by
# the dev lock: one version per package.
LOCK_PY := 3.11.7
lock: venv
	$(VENV)/bin/uv pip compile --quiet --generate-hashes --python-version $(LOCK_PY) \
	    --custom-compile-command "make lock" requirements.in -o requirements.txt
	$(VENV)/bin/uv pip compile --quiet --generate-hashes --python-version $(LOCK_PY) \
	    --no-strip-extras --custom-compile-command "make lock" requirements-dev.in -o requirements-dev.txt
	$(VENV)/bin/uv pip compile --quiet --generate-hashes --python-version $(LOCK_PY) \
	    --custom-compile-command "make lock" requirements-build.in -o requirements-build.txt

# After a reviewed change of a pom: the SHA-256 lists of the resolved jars (include/jars/).
jar-lock:
	rm -f .jars/.resolved .jars-kafka/.resolved .jars-s3proxy/.resolved
	$(MAKE) --no-print-directory JAR_LOCK_WRITE=1 jars kafka-jars s3-jars

clean:
	rm -rf .demo .cache .pytest_cache
