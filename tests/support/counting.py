"""A storage that counts the calls made to it, for unit tests of what a step reads: how many
records a plan reads of the ledger, which folders a planner lists."""

from __future__ import annotations


class Counting:
    """A real storage that counts the calls made to it (reads, listings, writes)."""

    READS = ("read_bytes", "open_read", "exists", "stat", "list_files", "list_dirs")

    def __init__(self, real):
        self._real = real
        self.calls: dict[str, int] = {}
        self.listed: list[str] = []  # the folders listed

    def __getattr__(self, name):
        attr = getattr(self._real, name)
        if not callable(attr):
            return attr

        def counted(*a, **k):
            self.calls[name] = self.calls.get(name, 0) + 1
            if name == "list_files":
                self.listed.append(a[0])
            out = attr(*a, **k)
            return list(out) if name == "list_files" else out

        return counted

    @property
    def reads(self) -> int:
        return sum(n for k, n in self.calls.items() if k in self.READS)
