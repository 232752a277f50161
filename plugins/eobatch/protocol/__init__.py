"""eobatch.protocol: the exactly-once protocol of one pipeline: one state machine, five verbs.

::

            plan                stage               verify              commit
 (none) ─────────▶ PLANNED ─────────▶ STAGED ─────────▶ PREPARED ─────────▶ COMMITTED
                      │                  │                                   ▲
                      └──── abort ───────┴──▶ (attempt aborted)  recover ────┘

Like Flink's TwoPhaseCommitSinkFunction (beginTransaction / preCommit / commit / abort,
with a commit issued again on restore), with a batch in the role of a checkpoint:

``plan``    (begin) write the batch plan, the exact source range, put-if-absent, before any
            data is written. Never plans N+1 while N is not committed.
``stage``   (write) done by the spark-submit job under attempt-unique names + manifests;
            idempotent: a new attempt never touches another attempt's files.
``verify``  (pre-commit) check every manifest, file, size, footer, count and schema; then write
            PREPARED put-if-absent. From here on the batch must commit; it is never aborted.
``commit``  one Delta transaction per participant: the prepared files, txn(appId=pipeline,
            version=batch), the offsets and the fingerprint. Idempotent: a participant that
            already holds the batch is checked (same fingerprint) and skipped.
``abort``   remove one failed attempt's staged files; refuses a PREPARED attempt.
``recover`` at the start of every run: check ledger and tables agree (no gap, no unknown
            batch), finish a rewind, commit a PREPARED batch, hand back a PLANNED/STAGED batch
            for re-staging, sweep orphan files of dead or zombie attempts.

Two repairs move the pipeline's position explicitly, never by editing a table behind its back:
``rewind(K)`` reserves batch L+1 (put-if-absent, like any plan: a plan that got there first wins
and the rewind does nothing) as the first batch read again from K's start, then restores every
table to before batch K and marks batches K..L REWOUND (L+1 is a new id: txn versions only grow);
``reset(K)`` forgets batches that no table holds.

Interval mode: a batch's range is its run's data interval, and its commit replaces the files
of earlier batches of the same interval in the same Delta transaction. Batches stay strictly
ordered: a run whose interval is not the in-flight batch's waits (``BatchInFlight``); a run that
fails before PREPARED abandons its batch (ABANDONED and PREPARED share one put-if-absent
record, so exactly one of them is ever decided) and the interval can simply run again.

The tables' txn version is the source of truth for "which batch committed"; the batch plan is
the truth for "what that batch contained". Nothing lives only in Airflow's database.

Where it lives, one module per phase: ``verbs`` the ``Protocol`` facade, whose verbs each hand
over to the object of their phase; ``planning`` plan (begin); ``verify`` verify (pre-commit)
and its checks of a staged attempt; ``committing`` commit; ``recovery`` recover; abort and
abandon on the facade itself; ``repairs`` the operator's repairs (``Repairs``: rewind, reset)
and the sweep (``Sweeper``). Shared by the phases: ``state`` the decisions as pure functions
(no I/O); ``queries`` the facade's public queries as the phases read it (a structural type);
``replacing`` the files an interval's commit replaces; ``config_check`` the configuration
check every phase runs first. Around them: ``batch_run`` one DAG run's batches, step by step
(what the Airflow tasks and the CLI verbs drive); ``replay`` quarantined records back into the
landing zone; ``backlog`` what a pipeline has not published yet; ``maintenance`` a pass over
each table by its sink kind; ``lineage`` a run's batches as lineage datasets.
The errors are the taxonomy of ``eobatch.errors`` (wait, retry, terminal).

The layer above the kinds: the protocol drives ``eobatch.sources`` and ``eobatch.sinks``, which
build on the vocabulary of ``eobatch.core`` (the ledger and its records, checkpoints, table
files) and never import this package.

May import: ``eobatch.errors``, ``eobatch.config``, ``eobatch.storage``, ``eobatch.core``,
``eobatch.sources``, ``eobatch.sinks`` (the kinds, through their registries), ``eobatch.pipelines``
(the pipeline file's contract: what a plan records), pyarrow and
deltalake (deltalake inside functions).
Must not import: Apache Airflow, pyspark, ``eobatch.airflow``, ``eobatch.job``, ``eobatch.ui``,
``eobatch.cli`` (tests/unit/test_packages.py checks every import statement).
"""

from ..core.formats import utcnow
from ..errors import (
    AttemptPrepared,
    BatchInFlight,
    CommitBlocked,
    ConcurrentPlan,
    ConfigChanged,
    IntervalNotSettled,
    LedgerMismatch,
    ProtocolError,
)
from ..sinks import FingerprintMismatch
from .recovery import Recovery
from .state import interval_of
from .verbs import Protocol
from .verify import NotReady, VerifyFailed

__all__ = ["Protocol", "Recovery", "ProtocolError", "BatchInFlight", "IntervalNotSettled", "AttemptPrepared",
           "LedgerMismatch", "ConcurrentPlan", "ConfigChanged", "CommitBlocked", "FingerprintMismatch", "NotReady", "VerifyFailed",
           "interval_of", "utcnow"]
