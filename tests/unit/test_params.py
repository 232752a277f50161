"""Run params: what the trigger form accepts, refused with one clear message otherwise."""

from __future__ import annotations

import pytest

from eobatch.params import ParamsError, RunParams, check_params


def test_defaults_and_values():
    assert check_params({}, {"max_records_per_batch": None, "dry_run": False, "rewind_to_batch": None},
                        "continuous") == RunParams()
    got = check_params({"max_records_per_batch": 50, "dry_run": True, "rewind_to_batch": 3}, {}, "continuous")
    assert got == RunParams(50, True, 3)
    assert check_params({"max_records_per_batch": "20"}, {}, "continuous").max_records_per_batch == 20


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
])
def test_bad_params_are_refused(conf, text):
    with pytest.raises(ParamsError) as ei:
        check_params(conf, {}, "continuous")
    assert text in str(ei.value)


def test_rewind_is_refused_in_interval_mode():
    with pytest.raises(ParamsError, match="continuous mode"):
        check_params({"rewind_to_batch": 2}, {}, "interval")
