"""Spark side of ``sink.mode: append``: the transform's output is staged as it is."""

from __future__ import annotations

KEEPS_ROWS = True  # the staged rows are the transform's: a row-preserving transform's count is checked


def step(df, job: dict, within: list[str]):
    """The rows the sink stages, from the transform's output ``df`` (``within``: the columns that
    keep interval slices apart)."""
    return df
