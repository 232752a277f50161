"""eobatch.airflow.runs: the logical date `eobatch run --date` gives `airflow dags test`."""

from __future__ import annotations

import pytest

from eobatch.airflow.runs import run_dags_test, run_date


def test_an_interval_runs_at_the_end_of_the_interval_that_starts_at_the_date(make_cfg):
    hourly = make_cfg(mode="interval", schedule="@hourly")
    assert run_date(hourly, "2026-11-21T06:00:00+00:00") == "2026-11-21T07:00:00+00:00"
    assert run_date(make_cfg(), "2026-11-21T06:00:00+00:00") == "2026-11-21T06:00:00+00:00"
    with pytest.raises(ValueError):
        run_date(hourly, "yesterday")


def test_bad_runs_and_conf_are_refused_before_anything_runs(capsys):
    assert run_dags_test("orders", runs=0) == 2
    assert run_dags_test("orders", conf="{not json") == 2
    assert "RUNS must be a positive integer" in capsys.readouterr().err
