"""One error taxonomy: every error the product raises on purpose says what its caller should do.

===========  ======================================================  ==========================  ========
kind         meaning                                                 Airflow (``operators``)     CLI exit
===========  ======================================================  ==========================  ========
``wait``     not yet: another party (a stage job, another run, the   the sensor pokes again      3
             clock) will make it true; nothing is wrong
``retry``    transient: the same call may succeed later (a broker    the task is retried         7
             or store that is down, a lost commit race)
``terminal`` a person must act: bad input, a broken invariant, a     the task fails, no retry    5
             repair to run; the message says which
===========  ======================================================  ==========================  ========

Two terminal kinds have their own exit codes: ``UsageError`` (bad config, params or ids: 2)
and ``VerifyFailed`` (the attempt does not verify and is aborted: 4). Errors that are not an
``EobatchError`` (a bug, an OSError of a library) are treated as retryable by Airflow (its
retries) and print a traceback in the CLI (exit 1).

The kind is a class attribute, so a subclass can change it without changing its place in the
hierarchy (``ConcurrentPlan`` is a ``ProtocolError`` that means "wait").
"""

from __future__ import annotations

import os
from typing import ClassVar, Literal

Kind = Literal["wait", "retry", "terminal"]


class EobatchError(Exception):
    """Base of every error the product raises on purpose."""

    kind: ClassVar[Kind] = "terminal"
    """What the caller should do: ``wait`` (not yet: poke again), ``retry`` (transient) or
    ``terminal`` (a person must act); a subclass may change it (``ConcurrentPlan`` waits)."""
    exit_code: ClassVar[int | None] = None
    """The CLI's exit code for this error; None: its kind's (``EXIT_BY_KIND``)."""


class WaitError(EobatchError):
    """Not yet: another party (a stage job, another run, the clock) will make it true; nothing is wrong."""

    kind: ClassVar[Kind] = "wait"


class RetryableError(EobatchError):
    """Transient: the same call may succeed later (a broker or a store that is down, a lost commit race)."""

    kind: ClassVar[Kind] = "retry"


class TerminalError(EobatchError):
    """A person must act: bad input, a broken invariant, a repair to run; the message says which."""

    kind: ClassVar[Kind] = "terminal"


class UsageError(TerminalError, ValueError):
    """Bad input from a person: a pipeline file, a run's params, an id on a command line."""

    exit_code: ClassVar[int | None] = 2


class ConfigError(UsageError):
    """A pipeline YAML that cannot be loaded: names the file (its base name) and the key path, e.g.
    ``orders.yaml: source.path: must be ...``. One error may carry all of a file's problems
    (``problems``, each a ConfigError of one key; ``of``): ``orders.yaml: 4 problems: source.path:
    must be ...; schema: ...``, so that a file with four mistakes takes one run to fix, not four."""

    def __init__(self, file: str, key: str, message: str, problems: tuple[ConfigError, ...] = ()):
        self.file, self.key, self.message = file, key, message
        self.problems: tuple[ConfigError, ...] = problems or (self,)
        name = shown_name(os.path.basename(file))
        super().__init__(f"{name}: {key}: {message}" if key else f"{name}: {message}")

    @classmethod
    def of(cls, errors: list[ConfigError]) -> ConfigError:
        """One ConfigError of every problem of ``errors`` (of one file), in their order, each once:
        the one problem itself, or an error listing them all."""
        problems: list[ConfigError] = []
        for e in errors:
            problems += [p for p in e.problems if not any(str(p) == str(q) for q in problems)]
        if len(problems) == 1:
            return problems[0]
        text = "; ".join(f"{p.key}: {p.message}" if p.key else p.message for p in problems)
        return cls(problems[0].file, "", f"{len(problems)} problems: {text}", tuple(problems))


def shown_name(name: str) -> str:
    """A file name as text to show: bytes that are not UTF-8 (``\\xff``) and characters that are not
    printable (a new line) escaped, so a name can neither break where an error is stored nor forge a line."""
    try:
        raw = os.fsencode(name)
    except UnicodeError:
        raw = name.encode("utf-8", "backslashreplace")
    text = raw.decode("utf-8", "backslashreplace")
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class Invalid(ValueError):
    """A value a check of a pipeline YAML refuses (``config_model``): ``message`` about the key
    being checked, or about the key ``at`` below it (relative), or about another key ``key`` (a
    full key path). The loader raises it as a ``ConfigError`` naming the file and the key."""

    def __init__(self, message: str, *, at: str | None = None, key: str | None = None):
        super().__init__(message)
        self.message, self.at, self.key = message, at, key


def kind_of(e: BaseException) -> Kind | None:
    """The kind of a product error; None for anything else (a bug, a library's own error)."""
    return e.kind if isinstance(e, EobatchError) else None


# -- the protocol's own errors (eobatch.protocol) ---------------------------------------------
class ProtocolError(TerminalError):
    """A state the protocol cannot resolve by itself; the message says how to repair."""


class LedgerMismatch(ProtocolError):
    """The ledger and the tables disagree (a gap, an unknown batch, a foreign ledger)."""


class ConcurrentPlan(ProtocolError):
    """Another planner wrote this batch id first: wait for that batch, then plan again."""

    kind: ClassVar[Kind] = "wait"


class CommitBlocked(ProtocolError):
    """A PREPARED batch whose files are gone: a person must repair (the message says how)."""


class ConfigChanged(ProtocolError):
    """The pipeline's file changed a key that the tables, or a pending batch, depend on
    (``config.contract``): refused until the edit is undone or the batch is decided."""


class SliceRewritten(ProtocolError):
    """Interval mode: the files a republished interval's last batch published are no longer in
    the table (another writer rewrote them, e.g. an OPTIMIZE compaction): no replace can remove
    exactly that interval's earlier records, so the interval is not published again."""


class BatchInFlight(ProtocolError):
    """Another run's batch is not decided yet (batches are strictly ordered): wait for it."""

    kind: ClassVar[Kind] = "wait"


class IntervalNotSettled(BatchInFlight):
    """Interval mode: the interval ended less than ``source.settle_seconds`` ago; wait, then plan."""


class AttemptPrepared(ProtocolError):
    """abort lost the attempt's decision to verify: the attempt is (being) PREPARED, not aborted."""


#: CLI exit codes by kind (``EobatchError.exit_code`` overrides: UsageError 2, VerifyFailed 4).
EXIT_BY_KIND: dict[str, int] = {"wait": 3, "terminal": 5, "retry": 7}
NOTHING_TO_DO = 6  # `plan`: nothing new to read


def exit_code(e: BaseException) -> int:
    """The CLI's exit status for an error: 1 for anything that is not a product error."""
    if not isinstance(e, EobatchError):
        return 1
    return e.exit_code if e.exit_code is not None else EXIT_BY_KIND[e.kind]
