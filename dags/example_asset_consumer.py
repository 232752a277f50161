"""Example downstream DAGs: one per pipeline named in ``EOBATCH_EXAMPLE_CONSUMERS`` (comma-separated
names, or ``*`` for every pipeline; unset or empty: none), scheduled on its sink table's Airflow
Asset. ``make ui-up`` names ``orders`` when the variable is not set, so the demo shows one.

Each committed batch of pipeline ``<name>`` emits one asset event on the sink table's asset
(``file:///<path>`` or ``s3://<bucket>/<key>``, ``eobatch.airflow.assets``), whose extra carries the batch
id and the Delta version that holds it. The DAG ``<name>_downstream_example`` runs on each event
and reads exactly that version with delta-rs (``DeltaTable(uri, version=v)``): the rows the batch
added (the files its commit added, nothing else), and the table's row count at that version. Its
task returns (XCom) and logs one summary per event it was triggered by.

Copy it as the start of your own consumer: replace ``summarize`` with your work on ``new_rows``.
A batch's sink and quarantine tables are committed one after the other, so a reader may briefly
see one table a batch ahead of the other; the event's ``delta_versions`` names both.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import urllib.parse

_PLUGINS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "plugins")
if _PLUGINS not in sys.path:  # Airflow adds plugins/ itself; `python dags/...` and tests may not
    sys.path.insert(0, _PLUGINS)

from airflow.sdk import DAG, task  # noqa: E402

from eobatch.airflow import assets  # noqa: E402
from eobatch.pipelines.loader import PipelineConfig, load_all  # noqa: E402

SUFFIX = "_downstream_example"


def _open(table: str, version: int | None = None, aws_conn_id: str = "aws_default"):
    """delta-rs's DeltaTable of a table location (local path or s3a:// URI) at ``version``."""
    from deltalake import DeltaTable

    from eobatch.storage import s3conf

    options = None
    if s3conf.is_s3(table):
        from eobatch.airflow.hooks import aws_settings

        # the pipeline's connection, as its tasks use it (the environment's settings without it)
        options = s3conf.delta_storage_options(table, aws_settings(aws_conn_id) or s3conf.settings())
    return DeltaTable(s3conf.table_uri(table), version=version, storage_options=options)


def _adds(dtab) -> dict[str, int]:
    """{path relative to the table root: records} of a snapshot's files."""
    import pyarrow as pa

    rows = pa.table(dtab.get_add_actions(flatten=True)).to_pylist()
    return {urllib.parse.unquote(r["path"]): int(r["num_records"] or 0) for r in rows}


def read_version(table: str, version: int, aws_conn_id: str = "aws_default"):
    """Exactly Delta ``version`` of ``table``: (its snapshot, the arrow table of the rows that
    version's commit added: the files in version v that are not in version v-1)."""
    import pyarrow.dataset as pds

    snap = _open(table, version, aws_conn_id)
    if snap.version() != version:
        raise RuntimeError(f"{table}: asked for Delta version {version}, delta-rs opened {snap.version()}")
    added = set(_adds(snap)) - (set(_adds(_open(table, version - 1, aws_conn_id))) if version > 0 else set())
    ds = snap.to_pyarrow_dataset()
    fragments = [f for f in ds.get_fragments() if urllib.parse.unquote(f.path) in added]
    new = pds.FileSystemDataset(fragments, ds.schema, ds.format, ds.filesystem)
    return snap, new.to_table()


def summarize(table: str, extra: dict, aws_conn_id: str = "aws_default") -> dict:
    """What the example does with one event: read its version, count what it added and what the
    table holds then. Replace this with your own work."""
    version = int(extra["delta_version"])
    snap, new_rows = read_version(table, version, aws_conn_id)
    return {"pipeline": extra.get("pipeline"), "batch_id": extra.get("batch_id"), "delta_version": version,
            "version_read": snap.version(), "new_rows": new_rows.num_rows,
            "table_rows": sum(_adds(snap).values()), "rows_published": extra.get("rows_published")}


def build_consumer(cfg: PipelineConfig) -> DAG:
    sink = assets.table_asset(cfg.sink_table)
    with DAG(
        dag_id=cfg.name + SUFFIX,
        description=cfg.shown(f"example consumer of {sink.uri}: reads exactly the Delta version of each batch of {cfg.name}"),
        schedule=[sink],
        start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
        catchup=False,
        tags=["eobatch", "example", "asset-consumer"],
        doc_md=__doc__,
    ) as dag:

        @task(task_id="read_new_version")
        def read_new_version(**context) -> list[dict]:
            events = sorted(context["triggering_asset_events"][sink],
                            key=lambda e: int((e.extra or {}).get("delta_version", -1)))
            out = []
            for event in events:
                extra = dict(event.extra or {})
                summary = summarize(cfg.sink_table, extra, cfg.aws_conn_id)
                print(f"batch {summary['batch_id']} of {summary['pipeline']}: read {sink.uri} at Delta version "
                      f"{summary['version_read']}: {summary['new_rows']} new rows, {summary['table_rows']} in the table")
                out.append(summary)
            return out

        read_new_version()
    return dag


OPT_IN = "EOBATCH_EXAMPLE_CONSUMERS"


def wanted(name: str, opt_in: str | None) -> bool:
    """Whether pipeline ``name`` gets an example consumer under ``EOBATCH_EXAMPLE_CONSUMERS``."""
    names = {n.strip() for n in (opt_in or "").split(",") if n.strip()}
    return "*" in names or name in names


def build_all(directory: str | None = None, opt_in: str | None = None) -> dict[str, DAG]:
    """An example consumer per valid pipeline that opted in (invalid ones are reported by
    eobatch_pipelines.py); ``opt_in`` defaults to the environment's ``EOBATCH_EXAMPLE_CONSUMERS``."""
    opt_in = os.environ.get(OPT_IN) if opt_in is None else opt_in
    configs, _ = load_all(directory)
    return {cfg.name + SUFFIX: build_consumer(cfg) for cfg in configs.values()
            if wanted(cfg.name, opt_in) and cfg.name + SUFFIX not in configs}


globals().update({f"dag_{dag_id}": d for dag_id, d in build_all().items()})
