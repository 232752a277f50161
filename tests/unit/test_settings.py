"""eobatch.settings: one definition of each platform setting, read in one order by every process."""

from __future__ import annotations

import pytest

from eobatch import settings
from eobatch.airflow.provider import get_provider_info


@pytest.fixture
def airflow_cfg(monkeypatch):
    """What a reader of Airflow's configuration answers (as if written in airflow.cfg)."""
    found: dict[tuple[str, str], str] = {}
    monkeypatch.setattr(settings, "_reader", lambda section, option: found.get((section, option)))
    for s in settings.SETTINGS:
        monkeypatch.delenv(s.env, raising=False)
        if s.override:
            monkeypatch.delenv(s.override, raising=False)
    return found


def test_the_override_then_airflows_variable_then_airflow_cfg(airflow_cfg, monkeypatch):
    s = settings.PIPELINES_DIR
    assert settings.value(s) is None
    airflow_cfg[("eobatch", "pipelines_dir")] = " /from/airflow.cfg "
    assert settings.value(s) == "/from/airflow.cfg"
    monkeypatch.setenv(s.env, "/from/airflow/variable")
    assert settings.value(s) == "/from/airflow/variable"
    monkeypatch.setenv(s.env, "")  # Airflow's rule: a set, empty variable unsets the option
    assert settings.value(s) is None
    monkeypatch.setenv("PIPELINES_DIR", "/from/override")
    assert settings.value(s) == "/from/override"
    monkeypatch.setenv("PIPELINES_DIR", " ")  # an empty override is no override
    assert settings.value(s) is None


def test_every_setting_is_read_the_same_way_and_is_what_airflow_is_told(airflow_cfg):
    from eobatch.config import access, notifiers
    from eobatch.pipelines import loader

    airflow_cfg.update({("eobatch", "pipelines_dir"): "/p", ("eobatch", "access_policy"): "/etc/policy.yaml",
                        ("eobatch", "allowed_notifiers"): "a.B, c.D"})
    assert (loader.pipelines_dir(), access.configured_source(), notifiers.allowed_notifiers()) == (
        "/p", "/etc/policy.yaml", frozenset({"a.B", "c.D"}))
    options = get_provider_info()["config"]["eobatch"]["options"]
    assert sorted(options) == sorted(s.option for s in settings.SETTINGS)
    assert "PIPELINES_DIR overrides it" in options["pipelines_dir"]["description"]
