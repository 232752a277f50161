"""Issue 42: ``${VAR}`` in a location key is expanded from the platform's environment. A YAML-only
author can name any variable there; what Airflow shows of a pipeline to whoever reads its DAG (its
doc, its description, an import error) shows the variable's name, never its value. The asset URI is
the table's identity, not a display: it keeps the expanded location, so the upstream/downstream chain
and every consumer of the contract's ``file:///...`` / ``s3://...`` URI still match
(docs/site/security.md)."""

from __future__ import annotations

import yaml

from eobatch.airflow import assets
from eobatch.pipelines.loader import ConfigError, load_all, load_pipeline

from .conftest import good_pipeline

VAR = "EOBATCH_TEST_LAKE_ROOT"
SECRET = "s3cr3t-value-of-the-platform"


def _write(folder, name: str, doc: dict) -> None:
    (folder / name).write_text(yaml.safe_dump(doc), encoding="utf-8")


def _chain(tmp_path, monkeypatch, downstream_asset: str):
    """A folder: ``up`` (tables under ${VAR}) and ``down`` scheduled on ``downstream_asset``."""
    root = tmp_path / SECRET
    monkeypatch.setenv(VAR, str(root))
    folder = tmp_path / "chain"
    folder.mkdir(parents=True)
    _write(folder, "up.yaml", good_pipeline(tmp_path, "up", table_root="${%s}/lake" % VAR))
    down = good_pipeline(tmp_path, "down", table_root=str(tmp_path / "other"))
    down["source"] = {"kind": "delta", "table": "${%s}/lake/up" % VAR}
    down["schedule"] = {"asset": downstream_asset}
    _write(folder, "down.yaml", down)
    return folder, root


def test_a_dags_doc_and_description_show_the_variable_not_its_value(tmp_path, monkeypatch, dagbag):
    folder, root = _chain(tmp_path, monkeypatch, "up")
    bag = dagbag(folder)
    assert bag.import_errors == {}
    assert {"up", "down", "up_maintenance", "down_maintenance"} <= set(bag.dags)
    for dag in bag.dags.values():
        for text in (dag.doc_md or "", dag.description or ""):
            assert SECRET not in text, (dag.dag_id, text)
    up = bag.dags["up"]
    assert "${%s}/lake/up" % VAR in up.doc_md and "file://${%s}/lake/up" % VAR in up.doc_md
    assert "${%s}/lake/up" % VAR in bag.dags["up_maintenance"].description


def test_the_asset_chain_still_matches_by_the_tables_location(tmp_path, monkeypatch, dagbag):
    """``schedule: {asset: up}`` and ``schedule: {asset: ${VAR}/lake/up}`` both name the upstream's sink
    asset, whose URI is the table's location (expanded: an identity, as the commit's events carry it)."""
    for named in ("up", "${%s}/lake/up" % VAR):
        folder, root = _chain(tmp_path / named.strip("${}/").replace("/", "_"), monkeypatch, named)
        bag = dagbag(folder)
        assert bag.import_errors == {}
        up = load_pipeline(str(folder / "up.yaml"))
        assert up.sink_table == str(root / "lake" / "up")
        expected = assets.table_asset(up.sink_table)
        assert expected.uri == f"file://{root}/lake/up"
        assert bag.dags["down"].timetable.asset_condition == expected


def test_an_import_error_shows_the_variable_not_its_value(tmp_path, monkeypatch, dagbag, folder):
    root = tmp_path / SECRET
    monkeypatch.setenv(VAR, str(root))
    monkeypatch.setenv("EOBATCH_TEST_RELATIVE", f"relative/{SECRET}")
    overlapping = good_pipeline(tmp_path, "overlap", table_root="${%s}/lake" % VAR)
    overlapping["quarantine"] = {"table": "${%s}/lake/overlap/inside" % VAR}
    _write(folder, "m_overlap.yaml", overlapping)
    relative = good_pipeline(tmp_path, "relative")
    relative["sink"] = {"table": "${EOBATCH_TEST_RELATIVE}"}
    _write(folder, "m_relative.yaml", relative)
    clash = good_pipeline(tmp_path, "clash")
    clash["sink"] = {"table": str(tmp_path / "lake" / "orders")}  # orders' table, spelled out
    _write(folder, "m_clash.yaml", clash)
    _, errors = load_all(str(folder))
    assert set(errors) == {str(folder / f) for f in ("m_overlap.yaml", "m_relative.yaml", "m_clash.yaml")}
    assert errors[str(folder / "m_overlap.yaml")] == (
        "m_overlap.yaml: sink.table: '${%s}/lake/overlap' overlaps quarantine.table '${%s}/lake/overlap/inside'; "
        "they must be separate folders" % (VAR, VAR))
    assert "'${EOBATCH_TEST_RELATIVE}' must be an absolute path" in errors[str(folder / "m_relative.yaml")]
    (error,) = dagbag(folder).import_errors.values()
    assert SECRET not in error and "m_overlap.yaml" in error and "m_relative.yaml" in error


def test_a_default_written_in_the_file_is_the_files_own_text(tmp_path, monkeypatch):
    """``${VAR:-default}``: the default is the author's text, shown as written; only values from the
    environment are hidden."""
    monkeypatch.delenv("EOBATCH_TEST_UNSET", raising=False)
    doc = good_pipeline(tmp_path, "orders", table_root="${EOBATCH_TEST_UNSET:-%s}" % (tmp_path / "lake"))
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(doc))
    cfg = load_pipeline(str(tmp_path / "p.yaml"))
    assert cfg.concealed == () and cfg.shown(cfg.sink_table) == str(tmp_path / "lake" / "orders")


def test_an_error_past_the_checks_shows_the_variable_not_its_value(tmp_path, monkeypatch):
    """Even an error no check of ours wrote (a library's) is shown through the same filter."""
    from eobatch.pipelines import loader

    monkeypatch.setenv(VAR, str(tmp_path / SECRET))
    doc = good_pipeline(tmp_path, "orders", table_root="${%s}/lake" % VAR)
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(doc))

    def broken(model, data, file):
        raise RuntimeError(f"cannot use {data['sink']['table']}")

    monkeypatch.setattr(loader, "validate", broken)
    try:
        load_pipeline(str(tmp_path / "p.yaml"))
    except ConfigError as e:
        assert str(e) == "p.yaml: cannot be loaded: RuntimeError: cannot use ${%s}/lake/orders" % VAR
    else:
        raise AssertionError("loaded")
