"""Every pipeline keeps its fingerprint, its recorded contract values and the configuration it
loads to (recorded before configuration became typed models): a batch planned before a change of
the loader still matches its plan after it."""

from __future__ import annotations

import json
import os

import pytest

from support import golden_pipelines

GOLDEN = os.path.join(os.path.dirname(__file__), "data", "pipeline_golden.json")


@pytest.fixture(scope="module")
def now(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        for k, v in golden_pipelines.ENV.items():
            mp.setenv(k, v)
        return golden_pipelines.values(str(tmp_path_factory.mktemp("golden")))


def test_every_pipeline_is_in_the_golden_file(now):
    with open(GOLDEN, encoding="utf-8") as f:
        recorded = json.load(f)
    assert sorted(now) == sorted(recorded), "a pipeline was added or removed: record it (see golden_pipelines)"


@pytest.mark.parametrize("label", sorted(golden_pipelines.sources()))
def test_pipeline_loads_as_recorded(now, label):
    with open(GOLDEN, encoding="utf-8") as f:
        recorded = json.load(f)[label]
    assert now[label]["fingerprint"] == recorded["fingerprint"]
    assert now[label] == recorded
