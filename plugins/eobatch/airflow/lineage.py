"""A run's batches as OpenLineage facets of the pipeline's tasks, for the
``apache-airflow-providers-openlineage`` listener (the wheel's optional extra ``openlineage``).

The tasks collect their batches' lineage while they run (``collect``: the ledger's records, read
with the pipeline's storage settings, ``eobatch.protocol.lineage``) only when the provider is installed
and enabled (``wanted``); the listener calls the operator's ``get_openlineage_facets_on_complete``
(and ``_on_failure``, which falls back to it) after the task, and ``operator_lineage`` turns what
was collected into the provider's ``OperatorLineage``:

* inputs: each dataset the batches read (a landing folder, a Kafka topic, an upstream Delta table
  at the newest version read), facet ``eobatch_range`` (each batch's files, offsets or versions),
  ``inputStatistics``;
* outputs: every table of the commit (sink, quarantine, a merge sink's own tables), facets
  ``version`` (the Delta version holding the newest batch), ``storage`` (delta/parquet),
  ``eobatch_commit`` (each batch's version), ``outputStatistics``;
* the run facet ``eobatch_batch``: the pipeline, the batch ids, and per batch its attempt, counts,
  versions, range and whether this task's call committed it.

Nothing here imports OpenLineage or the provider at module level: ``plugins/`` imports (and the
DAGs parse) where the provider is not installed; every entry point then returns None.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..protocol.lineage import RunLineage
    from ..storage.lineage import LineageDataset

log = logging.getLogger(__name__)

RUN_FACET, INPUT_FACET, OUTPUT_FACET = "eobatch_batch", "eobatch_range", "eobatch_commit"
# the custom facets' ``_schemaURL``: the spec's schema of the facet they extend (their own fields are
# documented on the docs site, operations.md "Lineage (OpenLineage)"); no schema of ours is served
SPEC = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/"


def wanted() -> bool:
    """Is the OpenLineage provider installed and enabled in this process (a transport configured,
    ``[openlineage] disabled`` not set)? The tasks collect nothing otherwise."""
    try:
        # OpenLineage: an optional extra, imported only where lineage is reported
        from airflow.providers.openlineage import conf
    except ImportError:
        return False
    try:
        return not conf.is_disabled()
    except Exception as e:  # noqa: BLE001 - a broken OpenLineage setting is the provider's to report
        log.warning("OpenLineage: its configuration could not be read (%s: %s): no lineage collected",
                    type(e).__name__, e)
        return False


def collect(what: str, fn, *args, **kwargs) -> RunLineage | None:
    """``fn(*args, **kwargs)`` (``protocol.lineage.planned`` or ``committed``) when lineage is ``wanted``;
    None otherwise, or when it fails: lineage is never a reason to fail a task (the task log says why)."""
    if not wanted():
        return None
    try:
        return fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - see above
        log.warning("OpenLineage: the %s task's lineage was not collected (%s: %s)", what, type(e).__name__, e)
        return None


@functools.cache
def _facet_types() -> dict[str, type]:
    """The custom facets, defined once OpenLineage's client is imported (never at module level)."""
    # OpenLineage: an optional extra, imported only where lineage is reported
    import attr
    from openlineage.client.facet_v2 import InputDatasetFacet, OutputDatasetFacet, RunFacet

    def schema(base: str):
        return staticmethod(lambda: SPEC + base)

    @attr.define
    class EobatchBatchRunFacet(RunFacet):
        """The batches a task reported: ``batch_ids`` and one entry per batch."""

        pipeline: str
        batch_ids: list[int]
        batches: list[dict[str, Any]]
        _get_schema = schema("RunFacet")

    @attr.define
    class EobatchRangeInputDatasetFacet(InputDatasetFacet):
        """What each batch read of the dataset: ``batches`` {batch id: the kind's range facts}."""

        batches: dict[str, dict[str, Any]]
        _get_schema = schema("InputDatasetFacet")

    @attr.define
    class EobatchCommitOutputDatasetFacet(OutputDatasetFacet):
        """Each batch's commit of the table: ``batches`` {batch id: {participant, delta_version}}."""

        batches: dict[str, dict[str, Any]]
        _get_schema = schema("OutputDatasetFacet")

    return {"run": EobatchBatchRunFacet, "input": EobatchRangeInputDatasetFacet, "output": EobatchCommitOutputDatasetFacet}


def _dataset_facets(ds: LineageDataset) -> dict[str, Any]:
    # OpenLineage: an optional extra, imported only where lineage is reported
    from openlineage.client.facet_v2 import dataset_version_dataset, storage_dataset

    facets: dict[str, Any] = {}
    if ds.version is not None:
        facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=ds.version)
    if ds.storage:
        facets["storage"] = storage_dataset.StorageDatasetFacet(storageLayer=ds.storage, fileFormat="parquet")
    return facets


def operator_lineage(lineage: RunLineage | None):
    """The provider's ``OperatorLineage`` of ``lineage`` (None: nothing collected, or OpenLineage is
    not installed here)."""
    if lineage is None:
        return None
    try:
        # OpenLineage: an optional extra, imported only where lineage is reported
        from airflow.providers.openlineage.extractors import OperatorLineage
        from openlineage.client.event_v2 import InputDataset, OutputDataset
        from openlineage.client.facet_v2 import input_statistics_input_dataset as ins
        from openlineage.client.facet_v2 import output_statistics_output_dataset as outs
    except ImportError:
        return None
    types = _facet_types()
    inputs = []
    for ds in lineage.inputs:
        input_facets: dict[str, Any] = {INPUT_FACET: types["input"](batches=ds.detail.get("batches", {}))}
        if (ds.rows, ds.bytes, ds.files) != (None, None, None):
            input_facets["inputStatistics"] = ins.InputStatisticsInputDatasetFacet(rowCount=ds.rows, size=ds.bytes,
                                                                                   fileCount=ds.files)
        inputs.append(InputDataset(ds.namespace, ds.name, facets=_dataset_facets(ds), inputFacets=input_facets))
    outputs = []
    for ds in lineage.outputs:
        output_facets: dict[str, Any] = {OUTPUT_FACET: types["output"](batches=ds.detail.get("batches", {}))}
        if (ds.rows, ds.bytes, ds.files) != (None, None, None):
            output_facets["outputStatistics"] = outs.OutputStatisticsOutputDatasetFacet(rowCount=ds.rows, size=ds.bytes,
                                                                                       fileCount=ds.files)
        outputs.append(OutputDataset(ds.namespace, ds.name, facets=_dataset_facets(ds), outputFacets=output_facets))
    run = types["run"](pipeline=lineage.pipeline, batch_ids=[b["batch_id"] for b in lineage.batches],
                       batches=lineage.batches)
    return OperatorLineage(inputs=inputs, outputs=outputs, run_facets={RUN_FACET: run})
