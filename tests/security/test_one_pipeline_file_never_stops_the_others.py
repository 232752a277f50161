"""Issue 42: a pipelines folder is shared, and its YAML-only authors are not DAG authors. Whatever
bytes one pipeline file holds, it fails alone: every other pipeline's DAG is in Airflow's own DagBag,
the bad file is an import error naming it, the ledger page of another pipeline answers, and
``eobatch doctor`` names the file and goes on (``eobatch.config.yamlfile``: one bounded door from a
file to a pipeline or a ConfigError)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eobatch.config import yamlfile
from eobatch.pipelines import loader
from eobatch.pipelines.loader import ConfigError, load_all, load_pipeline

from .conftest import GOOD

BAD = "m_bad.yaml"
GOOD_DAGS = {name + suffix for name in GOOD for suffix in ("", "_maintenance")}

# name -> the bytes of the bad file: each kind of bytes that once escaped the loader, or could
HOSTILE: dict[str, bytes] = {
    "not_utf8": b"name: bad\ndescription: caf\xe9\n",
    "utf16": "name: bad\n".encode("utf-16"),
    "nul_byte": b"name: bad\x00\n",
    "key_not_text": b"name: bad\n1: one\nzz: two\n",  # mixed keys: sorting them raised TypeError
    "null_key": b"name: bad\n~: x\n",
    "list_key": b"name: bad\n? [a, b]\n: x\n",
    "deep_nesting": b"name: bad\nsource: " + b"[" * 5000,  # RecursionError in PyYAML's composer
    "deep_mappings": b"name: bad\ntransform: {name: passthrough, options: " + b"{a: " * 3000 + b"}" * 3000 + b"}\n",
    "recursive_alias": b"name: bad\ntransform: {name: passthrough, options: &a {x: *a}}\n",
    "undefined_alias": b"name: bad\ndescription: *nowhere\n",
    "int_of_5000_digits": b"name: bad\nmax_record_bytes: " + b"9" * 5000 + b"\n",  # int() refuses past 4300
    "impossible_date": b"name: bad\ndescription: 2024-13-45\n",  # a timestamp by YAML's regex, not a date
    "python_tag": b"name: bad\ndescription: !!python/object/apply:os.system ['true']\n",
    "binary_tag": b"name: bad\ndescription: !!binary aGVsbG8=\n",
    "set_tag": b"name: bad\ndescription: !!set {a, b}\n",
    "two_documents": b"name: bad\n---\nname: bad2\n",
    "too_big": b"name: bad\ndescription: " + b"x" * (yamlfile.MAX_FILE_BYTES + 1) + b"\n",
    "empty": b"",
    "a_list": b"- name: bad\n",
    "not_yaml": b"name: [bad\n",
}


def alias_bomb(levels: int = 12, width: int = 9) -> bytes:
    """A "billion laughs" pipeline file: ``width ** levels`` values once its aliases are expanded, in
    about 450 bytes. The ${VAR} check walked every path of it: hours for this one."""
    names = "abcdefghijklmnopqrstuvw"
    lines = ["name: bomb", 'a: &a ["lol"]']
    lines += [f"{n}: &{n} [{','.join(['*' + p] * width)}]" for p, n in zip(names, names[1:levels + 1])]
    return ("\n".join(lines) + "\n").encode()


def assert_only_that_file_fails(bag, bad: str = BAD) -> None:
    """Every good pipeline's DAG (and its maintenance DAG) is in the bag; the one import error is the
    DAG file's and names the bad file."""
    assert GOOD_DAGS <= set(bag.dags), (sorted(bag.dags), bag.import_errors)
    (error,) = bag.import_errors.values()
    assert bad in error, error
    assert not any(name in error for name in ("a_orders.yaml", "z_refunds.yaml")), error


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_pipeline_file_is_its_own_import_error_and_every_other_dag_loads(case, folder, dagbag):
    (folder / BAD).write_bytes(HOSTILE[case])
    with pytest.raises(ConfigError) as e:
        load_pipeline(str(folder / BAD))
    assert str(e.value).startswith(f"{BAD}: "), e.value
    assert len(str(e.value)) <= yamlfile.MAX_MESSAGE_CHARS + len(BAD) + 2
    assert_only_that_file_fails(dagbag(folder))


def test_an_alias_bomb_is_refused_by_its_bound_at_the_alias_past_it(folder, dagbag):
    """The refusal is the bound's, before any key is checked: the first alias that takes the expanded
    count past MAX_NODES (not a clock: the parse never gets near MAX_PARSE_SECONDS)."""
    bomb = alias_bomb()
    assert len(bomb) < 600
    (folder / BAD).write_bytes(bomb)
    with pytest.raises(ConfigError) as e:
        load_pipeline(str(folder / BAD))
    # line 6, "e: &e [*d, ...]": each *d stands for 1,549 values (its lists and 9**3 "lol"), the third of
    # them takes the file past MAX_NODES; nothing after it is parsed
    assert str(e.value) == (f"{BAD}: line 6: more than {yamlfile.MAX_NODES} YAML values once its aliases "
                            f"(*name) are expanded: a pipeline file holds at most {yamlfile.MAX_NODES}")
    assert_only_that_file_fails(dagbag(folder))


def test_an_alias_bomb_under_a_valid_key_is_refused_the_same_way(folder):
    """Under transform.options (a key the loader takes any JSON value in), the bomb is still refused
    while parsing: nothing walks it."""
    lines = alias_bomb().decode().splitlines()[1:]
    doc = yaml.safe_dump({"name": "bad", "source": {"kind": "files", "path": "/tmp/x"}, "schema": "a STRING"})
    text = "defs:\n" + "".join(f"  {ln}\n" for ln in lines) + doc + "transform: {name: passthrough, options: *m}\n"
    (folder / BAD).write_text(text)
    with pytest.raises(ConfigError, match=f"more than {yamlfile.MAX_NODES} YAML values once its aliases"):
        load_pipeline(str(folder / BAD))


def test_a_few_aliases_within_the_bound_still_load(folder, tmp_path):
    """Anchors are YAML: a file that uses them within the bound loads like the same file written out."""
    text = (folder / "a_orders.yaml").read_text().replace("name: orders", "name: anchored")
    text = text.replace(str(tmp_path / "lake") + "/orders", str(tmp_path / "lake2") + "/orders")
    text += "spark: &s {conn_id: spark_default}\nx_defaults: *s\n"
    (folder / BAD).write_text(text)
    with pytest.raises(ConfigError, match="x_defaults: unknown key"):  # the alias expands; the key is checked
        load_pipeline(str(folder / BAD))
    (folder / BAD).write_text(text.replace("x_defaults: *s\n", "").replace("spark: &s", "spark:"))
    assert load_pipeline(str(folder / BAD)).name == "anchored"


def test_a_fifo_named_like_a_pipeline_file_never_hangs_the_folder(folder, dagbag):
    """Opening a FIFO for reading blocks until a writer comes: the DAG file's parse would hang to
    Airflow's import timeout, taking every pipeline with it."""
    os.mkfifo(folder / BAD)
    configs, errors = load_all(str(folder))
    assert set(configs) == set(GOOD)
    assert errors == {str(folder / BAD): f"{BAD}: is not a regular file: a pipeline file must be one"}
    assert_only_that_file_fails(dagbag(folder))


def test_a_folder_named_like_a_pipeline_file_is_its_own_error(folder, dagbag):
    (folder / BAD).mkdir()
    assert_only_that_file_fails(dagbag(folder))


def test_a_file_name_that_is_not_utf8_or_holds_a_new_line_is_shown_escaped(folder, dagbag):
    """The error names the file in text that can be stored and shown: no undecodable byte, no forged line."""
    name = os.fsdecode(b"m_bad\xff\nforged.yaml")
    (folder / name).write_text("name: [bad\n")
    bag = dagbag(folder)
    assert_only_that_file_fails(bag, bad="m_bad\\xff\\nforged.yaml")
    (error,) = bag.import_errors.values()
    error.encode("utf-8")  # storable as it is


def test_a_huge_transform_file_is_that_pipelines_error(folder, tmp_path, dagbag):
    """The transform beside the pipeline file is read (checked and hashed) at load: at most 1 MiB."""
    (folder / "transforms").mkdir()
    with open(folder / "transforms" / "evil.py", "wb") as f:
        f.truncate(1 << 30)  # sparse: a GiB read into memory by every parse of the DAG file
    doc = yaml.safe_load((folder / "a_orders.yaml").read_text())
    doc.update(name="bad", transform="evil", sink={"table": str(tmp_path / "x" / "t")},
               quarantine={"table": str(tmp_path / "x" / "q")})
    (folder / BAD).write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match="transforms/evil.py has 1073741824 bytes, more than 1048576"):
        load_pipeline(str(folder / BAD))
    assert_only_that_file_fails(dagbag(folder))


def test_a_dag_that_airflow_refuses_to_build_is_that_files_error(folder, monkeypatch):
    """A file the loader takes but whose DAG Airflow cannot build (any exception) fails alone too."""
    from eobatch.airflow import dag_factory

    real = dag_factory.build_dag

    def build(cfg, pipelines=None):
        if cfg.name == "refunds":
            raise RuntimeError("Airflow refuses it")
        return real(cfg, pipelines)

    monkeypatch.setattr(dag_factory, "build_dag", build)
    dags, errors = dag_factory.build_all(str(folder))
    assert set(dags) == {"orders", "orders_maintenance"}
    assert errors == {str(folder / "z_refunds.yaml"): "z_refunds.yaml: its DAG cannot be built: RuntimeError: "
                                                      "Airflow refuses it"}


# -- any bytes at all: only ConfigError comes out -------------------------------------------------

YAMLISH = st.lists(st.sampled_from(list("[]{}:,-?&*!|>'\"#%@` \n\t\\abcnm01.~<=") +
                                   ["name", "\x00", "\udcff", "é", "!!str", "!!python/name:os.system", "${HOME}",
                                    "\nsource: ", "\nschema: ", "<<"]), max_size=120).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.one_of(st.binary(max_size=400), YAMLISH.map(lambda t: t.encode("utf-8", "surrogateescape"))))
def test_any_bytes_give_a_pipeline_or_a_config_error_naming_the_file(tmp_path, data):
    path = tmp_path / "p.yaml"
    path.write_bytes(data)
    try:
        load_pipeline(str(path))
    except ConfigError as e:
        assert str(e).startswith("p.yaml: ")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(at=st.integers(min_value=0), junk=st.binary(min_size=1, max_size=40))
def test_a_good_file_with_any_bytes_spliced_in_gives_a_pipeline_or_a_config_error(folder, at, junk):
    text = (folder / "a_orders.yaml").read_bytes()
    at %= len(text)
    path = folder / BAD
    path.write_bytes(text[:at] + junk + text[at:])
    try:
        load_pipeline(str(path))
    except ConfigError as e:
        assert str(e).startswith(f"{BAD}: ")


# -- the ledger page and doctor --------------------------------------------------------------------


def _page_client(monkeypatch, folder: Path):
    from fastapi.testclient import TestClient

    from eobatch.ui.app import create_app

    monkeypatch.setenv("PIPELINES_DIR", str(folder))
    app = create_app()
    for route in app.routes:  # Airflow's access check, as for a signed-in user who may read the DAG
        for dep in getattr(route, "dependencies", []):
            app.dependency_overrides[dep.dependency] = lambda: None
    return TestClient(app)


@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
@pytest.mark.parametrize("case", ["not_utf8", "key_not_text", "deep_nesting", "recursive_alias", "bomb"])
def test_the_ledger_page_of_another_pipeline_answers_beside_a_hostile_file(case, folder, monkeypatch):
    (folder / BAD).write_bytes(alias_bomb() if case == "bomb" else HOSTILE[case])
    client = _page_client(monkeypatch, folder)
    page = client.get("/pipelines/orders")
    assert page.status_code == 200 and "orders" in page.text
    api = client.get("/api/pipelines/refunds/batches")
    assert api.status_code == 200 and api.json() == []
    assert client.get("/pipelines/bad").status_code == 404


@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
def test_the_ledger_page_loads_a_pipeline_file_again_only_when_it_changed(folder, monkeypatch):
    """Every request looks its pipeline up in the folder: unchanged files are not parsed again."""
    from eobatch.ui import view

    (folder / BAD).write_bytes(alias_bomb())
    loads: list[str] = []
    real = loader.load_pipeline
    monkeypatch.setattr(loader, "load_pipeline", lambda f: loads.append(os.path.basename(f)) or real(f))
    monkeypatch.setattr(view, "PIPELINES", loader.LoadCache())
    client = _page_client(monkeypatch, folder)
    assert client.get("/pipelines/orders").status_code == 200
    assert sorted(loads) == ["a_orders.yaml", BAD, "z_refunds.yaml"]
    loads.clear()
    for _ in range(3):
        assert client.get("/api/pipelines/orders/batches").status_code == 200
    assert loads == []
    st_ = os.stat(folder / "z_refunds.yaml")
    os.utime(folder / "z_refunds.yaml", ns=(st_.st_atime_ns, st_.st_mtime_ns + 1_000_000))
    assert client.get("/pipelines/orders").status_code == 200
    assert loads == ["z_refunds.yaml"]


def test_the_load_cache_gives_a_refused_file_its_error_again_without_parsing_it(folder, monkeypatch):
    (folder / BAD).write_bytes(alias_bomb())
    cache = loader.LoadCache(clock=lambda: 0.0)
    first = load_all(str(folder), cache=cache)
    monkeypatch.setattr(loader, "load_pipeline", lambda f: pytest.fail(f"loaded {f} again"))
    assert load_all(str(folder), cache=cache) == first


def test_doctor_names_the_hostile_file_and_checks_the_other_pipelines(folder, monkeypatch):
    from eobatch import doctor

    for check in ("_java", "_spark", "_jars"):  # the deployment's own checks: not what this test is about
        monkeypatch.setattr(doctor, check, lambda *_a: doctor.Check("skipped", True, "-"))
    for case in ("not_utf8", "key_not_text", "deep_nesting", "recursive_alias"):
        (folder / BAD).write_bytes(HOSTILE[case])
        lines: list[str] = []
        started = time.monotonic()
        assert doctor.run(str(folder), log=lines.append) == 1
        assert time.monotonic() - started < 60
        (failed,) = [ln for ln in lines if ln.startswith("FAIL pipelines")]  # one line names the file
        assert failed.startswith("FAIL pipelines: ") and f"{BAD}: " in failed, lines
        assert not [ln for ln in lines if ln.startswith("FAIL") and ln != failed and BAD in ln], lines
        assert {"ok   write orders", "ok   write refunds"} <= {ln.split(":")[0] for ln in lines}, lines
