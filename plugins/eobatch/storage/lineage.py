"""What a batch read and wrote, as datasets named the OpenLineage way (https://openlineage.io/docs/spec/naming):
plain data, no OpenLineage import (``eobatch.airflow.lineage`` turns it into the client's objects).

* ``dataset_at(location)``: the one mapping of a location (a landing folder, a Delta table's
  folder) to (namespace, name): a local path -> ``("file", "/abs/path")``; ``s3a://b/k`` or
  ``s3://b/k`` -> ``("s3://b", "k")``. The tables' Airflow asset URIs (``airflow.assets.asset_uri``)
  are built from it: ``file://`` + the path, ``s3://b/k``.
* ``LineageDataset``: one dataset of a batch's lineage, with what OpenLineage has a standard facet for
  (the version, the storage layer, row/byte/file counts) and the kind's own facts (``detail``: JSON,
  bounded by the kind: a files range lists at most ``MAX_FILES_LISTED`` paths).
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass, field
from typing import Any

from . import s3conf

MAX_FILES_LISTED = 100  # a files range names at most this many files in a dataset's facet (the count always)


def dataset_at(location: str) -> tuple[str, str]:
    """(namespace, name) of the folder or table at ``location`` (OpenLineage's naming: local file
    system ``file`` + the absolute path; S3 ``s3://<bucket>`` + the key, no trailing slash)."""
    if "://" in location:
        scheme, rest = location.split("://", 1)
        if scheme.lower() not in ("s3a", "s3"):
            raise ValueError(f"no dataset name for {location!r}: a table or folder is a local path or an s3a:// URI")
        bucket, key = s3conf.split("s3://" + rest)
        if not bucket:
            raise ValueError(f"no bucket in {location!r}")
        key = posixpath.normpath(key).strip("/") if key.strip("/") else ""
        return f"s3://{bucket}", key
    path = os.path.normpath(os.path.abspath(location))
    return "file", path.rstrip("/") or "/"


def kafka_namespace(bootstrap_servers: str) -> str:
    """``kafka://host:port`` of the first of ``bootstrap_servers`` (OpenLineage's naming of a Kafka
    topic's namespace; the topic is the name)."""
    first = str(bootstrap_servers).split(",")[0].strip()
    return "kafka://" + first.split("://", 1)[-1]


@dataclass
class LineageDataset:
    """One dataset a batch read (an input) or wrote (an output)."""

    namespace: str
    name: str
    version: str | None = None  # the dataset's version (a Delta table's), OpenLineage's ``version`` facet
    storage: str | None = None  # "delta" for a Delta table, OpenLineage's ``storage`` facet (file format parquet)
    rows: int | None = None  # records read, or rows written (input/output statistics)
    bytes: int | None = None
    files: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)  # the kind's own facts (JSON)

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name


def at(location: str, **kwargs: Any) -> LineageDataset:
    """The dataset of the folder or table at ``location`` (``dataset_at``)."""
    namespace, name = dataset_at(location)
    return LineageDataset(namespace, name, **kwargs)
