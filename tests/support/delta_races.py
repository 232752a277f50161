"""Committers racing for the first commit of a table that does not exist yet (eobatch.sinks.delta)."""

from __future__ import annotations

import threading
from typing import Callable


def race_first_commit(table: str, delta_log_commits: Callable[[str], list[dict]], racers: int = 3) -> None:
    """``racers`` threads commit batch 1 of app ``app`` to ``table`` at once, each creating the
    table if it finds none. Asserts what must hold whoever wins: every racer committed or was told
    another did (CommitConflict), none failed otherwise, the batch is in one commit, and version 0
    is the only CREATE TABLE (``delta_log_commits``: the independent reader of the raw log)."""
    import deltalake.exceptions  # noqa: F401 - imported once before the threads (real committers are
    import deltalake.schema  # noqa: F401 - processes; a first import racing in threads can see a
    import deltalake.transaction  # noqa: F401 - partially initialised module, which is not the race here)
    import pyarrow as pa

    from eobatch.sinks import CommitConflict, StagedFile
    from eobatch.sinks.delta import DeltaParticipant

    schema = pa.schema([("x", pa.int64())])
    outcomes: list = []

    def commit():
        try:
            outcomes.append(DeltaParticipant("sink", table).commit(
                "app", 1, [StagedFile("eo_batches/app-1.parquet", 1)], schema, [],
                {"eo.pipeline": "app", "eo.batchId": "1"}))
        except CommitConflict as e:
            outcomes.append(("conflict", str(e)[:400]))
        except Exception as e:  # noqa: BLE001 - the failure these races are about
            outcomes.append(e)

    threads = [threading.Thread(target=commit) for _ in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(isinstance(o, (tuple, int)) for o in outcomes), outcomes
    # Someone's commit landed. Its committer may still have been told CommitConflict ("you may
    # have lost: re-read"): on S3 delta-rs can fail to read back the version it just wrote
    # ("Requested snapshot version 1 is not available"); the protocol then re-reads the txn
    # and finds the batch committed. So the table is the judge, below, not the outcomes.
    commits = delta_log_commits(table)
    assert sum(1 for c in commits for t in c["txns"] if t["appId"] == "app") == 1, commits
    # one CREATE TABLE, version 0: a lost create is not retried as a new table id on top
    assert [c["version"] for c in commits if c["commitInfo"].get("operation") == "CREATE TABLE"] == [0], commits
    assert DeltaParticipant("sink", table).committed_batch("app") == 1
