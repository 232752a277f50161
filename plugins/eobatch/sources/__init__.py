"""Sources answer two questions for the protocol:

* ``next_range(previous_plans, limit)``: the next range after everything already planned,
  or ``None`` when there is nothing new (recorded in the batch plan before staging);
* ``count(range)``: how many records that range holds, by the source's own count, so
  verification can reconcile it with what the Spark job read.

The Spark side of each source (reading exactly a recorded range) lives in spark_jobs/.
"""

from __future__ import annotations


def source_for(cfg):
    if cfg.source.kind == "files":
        from .files import FilesSource

        return FilesSource(cfg)
    if cfg.source.kind == "kafka":
        from .kafka import KafkaSource

        return KafkaSource(cfg)
    raise ValueError(f"unknown source kind {cfg.source.kind!r}")
