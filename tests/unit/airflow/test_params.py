"""Run params: what the trigger form accepts, refused with one clear message otherwise."""

from __future__ import annotations

import pytest

from eobatch.airflow.params import PARAMS_DOC, ParamsError, RunParams, check_params, params_for_mode


def test_defaults_and_values():
    assert check_params({}, {"max_records_per_batch": None, "dry_run": False, "rewind_to_batch": None},
                        "continuous") == RunParams()
    got = check_params({"max_records_per_batch": 50, "dry_run": True, "rewind_to_batch": 3}, {}, "continuous")
    assert got == RunParams(50, True, 3)
    got = check_params({"rewind_to_batch": 3, "confirm_rewind": True}, {}, "continuous")
    assert got == RunParams(None, False, 3, True)
    assert check_params({"max_records_per_batch": "20"}, {}, "continuous").max_records_per_batch == 20
    assert check_params({"max_batches_per_run": 7}, {}, "continuous") == RunParams(max_batches_per_run=7)
    assert check_params({"max_batches_per_run": 1}, {}, "interval") == RunParams(max_batches_per_run=1)


@pytest.mark.parametrize("conf, text", [
    ({"colour": "red"}, "unknown param(s) ['colour']"),
    ({"max_records": 5}, "unknown param(s) ['max_records']"),
    ({"max_records_per_batch": 0}, "positive integer"),
    ({"max_records_per_batch": -1}, "positive integer"),
    ({"max_records_per_batch": 2.5}, "positive integer"),
    ({"max_records_per_batch": True}, "positive integer"),
    ({"max_records_per_batch": "lots"}, "positive integer"),
    ({"dry_run": "yes"}, "true or false"),
    ({"dry_run": 1}, "true or false"),
    ({"rewind_to_batch": 0}, "positive integer"),
    ({"confirm_rewind": "yes", "rewind_to_batch": 2}, "true or false"),
    ({"confirm_rewind": True}, "set 'rewind_to_batch' too"),
    ({"max_batches_per_run": 0}, "positive integer"),
    ({"max_batches_per_run": 1001}, "param 'max_batches_per_run' must be at most 1000, got 1001"),
])
def test_bad_params_are_refused(conf, text):
    with pytest.raises(ParamsError) as ei:
        check_params(conf, {}, "continuous")
    assert text in str(ei.value)


def test_rewind_is_refused_in_interval_mode():
    with pytest.raises(ParamsError, match="continuous mode"):
        check_params({"rewind_to_batch": 2}, {}, "interval")


def test_batches_per_run_are_refused_in_interval_mode_saying_why():
    with pytest.raises(ParamsError, match="param 'max_batches_per_run' is for continuous mode; in interval mode a "
                                          "run's batch is its data interval"):
        check_params({"max_batches_per_run": 3}, {}, "interval")
    assert "max_batches_per_run" not in params_for_mode("interval")


def test_a_rewind_that_changes_the_tables_needs_its_confirmation_and_points_at_the_dry_run():
    with pytest.raises(ParamsError) as ei:
        check_params({"rewind_to_batch": 4}, {"confirm_rewind": False}, "continuous")
    msg = str(ei.value)
    assert "rewind_to_batch=4" in msg and "dry_run=true" in msg and "confirm_rewind=true" in msg
    assert "nothing was changed" in msg
    # the report needs no confirmation
    assert check_params({"rewind_to_batch": 4, "dry_run": True}, {}, "continuous") == RunParams(None, True, 4)


def test_interval_mode_offers_no_rewind_and_refuses_one_clearly():
    assert params_for_mode("continuous") == tuple(PARAMS_DOC)
    assert "rewind_to_batch" not in params_for_mode("interval")
    assert "confirm_rewind" not in params_for_mode("interval")
    for conf in ({"rewind_to_batch": 2, "confirm_rewind": True}, {"confirm_rewind": True}):
        with pytest.raises(ParamsError, match="continuous mode"):
            check_params(conf, {}, "interval")
    with pytest.raises(ParamsError) as ei:
        check_params({"colour": "red"}, {}, "interval")
    assert "rewind_to_batch" not in str(ei.value)


def test_a_users_dag_may_declare_params_of_its_own_and_a_key_no_one_declares_is_still_refused():
    """The pipeline's tasks in a user's DAG (``pipeline_tasks``): a key the DAG declares is the DAG's own."""
    declared = ["region", *params_for_mode("continuous")]
    got = check_params({"region": "us", "dry_run": True}, {"region": "us"}, "continuous", declared=declared)
    assert got == RunParams(dry_run=True)
    with pytest.raises(ParamsError, match=r"unknown param\(s\) \['dryrun'\]; this pipeline accepts .* and its DAG "
                                          r"declares \['region'\]"):
        check_params({"dryrun": True}, {}, "continuous", declared=declared)
