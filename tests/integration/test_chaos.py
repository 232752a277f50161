"""A short `make chaos` inside the test suite: faults at every phase boundary, each fault kind
drawn at most once (in the seed's order) so one short run covers as many kinds as it can.

The long runs (hundreds of batches) stay in `make chaos BATCHES=... SEED=...`.
"""

from __future__ import annotations

import pytest

from chaos.run_chaos import FAULTS, Chaos

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("seed", [11])
def test_short_chaos_run_is_exactly_once(tmp_path, seed):
    res = Chaos(batches=5, seed=seed, workdir=tmp_path, fault_rate=0.8, quiet=True, distinct=True).run()
    assert res["problems"] == []
    assert (res["duplicates"], res["lost"], res["orphans"]) == (0, 0, 0), res
    assert res["batches"] >= 5 and res["faults"] >= 3, res
    assert len(res["faults_by_kind"]) == min(res["faults"], len(FAULTS)), res  # distinct kinds
