"""A source kind and a sink kind added from outside the product's tree: each a distribution of its
own (tests/support/toy_kinds: ``eobatch-numbers``, ``eobatch-labelled``), installed as pip installs
it (the package beside its ``.dist-info`` with METADATA and entry_points.txt, on a folder of
``sys.path``), found by its entry point (``eobatch.sources``, ``eobatch.sinks``) and run through the
protocol: plan, stage (the pyarrow stager), verify, commit. No file of the product changes
(docs/site/contributing.md "How to add a source kind", "How to add a sink")."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from deltalake import DeltaTable

from eobatch import sinks, sources
from eobatch.errors import ConfigChanged, ConfigError
from eobatch.pipelines.loader import config_values, contract, harmless, load_pipeline
from eobatch.protocol import Protocol
from eobatch.sources import KindUnavailable
from support.protocol_runs import land_ids, run_next
from support.pyarrow_stager import stage

REPO = Path(__file__).resolve().parents[3]
PRODUCT = [REPO / "plugins", REPO / "spark_jobs", REPO / "dags"]
TOYS = REPO / "tests" / "support" / "toy_kinds"


def product_files() -> dict[str, str]:
    """The SHA-256 of every file of the product's tree."""
    return {str(p.relative_to(REPO)): hashlib.sha256(p.read_bytes()).hexdigest()
            for root in PRODUCT for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def install(site: Path, dist: str, group: str, entry_points: dict[str, str], package: str | None = None,
            code: str | None = None) -> None:
    """Distribution ``dist`` as pip installs it into ``site``: its package (a toy of TOYS, or a module
    of ``code``) and ``<dist>-0.1.dist-info`` with its METADATA and entry points of ``group``."""
    if package is not None:
        shutil.copytree(TOYS / package, site / package, ignore=shutil.ignore_patterns("__pycache__"))
    if code is not None:
        module = next(iter(entry_points.values())).split(":")[0]
        (site / f"{module}.py").write_text(code)
    info = site / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n" + "".join(f"{n} = {v}\n" for n, v in entry_points.items()))


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A folder of installed distributions on ``sys.path``, outside the product's tree; the
    registries as they were before, and the toys' modules forgotten, after the test."""
    folder = tmp_path / "site-packages"
    folder.mkdir()
    assert REPO not in folder.parents
    before = product_files()
    monkeypatch.syspath_prepend(str(folder))
    for registry in (sources.REGISTRY, sinks.REGISTRY):
        monkeypatch.setattr(registry, "registered", dict(registry.registered))
    modules = set(sys.modules)
    yield folder
    for name in set(sys.modules) - modules:
        if name.split(".")[0] in {"eobatch_numbers", "eobatch_labelled"} or name.startswith("toy_"):
            del sys.modules[name]
    assert product_files() == before, "a file of the product changed"


def pipeline_file(root: Path, doc: dict) -> str:
    path = root / "pipelines" / f"{doc['name']}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def numbers_doc(root: Path, **source) -> dict:
    return {"name": "numbers", "mode": "continuous", "schedule": None,
            "source": {"kind": "numbers", "stop": 25, "field": "n", "max_records_per_batch": 10, **source},
            "schema": "n BIGINT NOT NULL", "transform": "passthrough",
            "sink": {"table": str(root / "lake" / "numbers")}, "quarantine": {"table": str(root / "lake" / "numbers_bad")}}


def numbers_lines(rng: dict, field: str) -> list[tuple[str, str, int, bytes]]:
    """The lines the kind's ``read`` gives for ``rng`` (the integers [from, to), ``{field: n}``), as the
    pyarrow stager takes a model source's records: (slice, source, position, raw)."""
    return [("", "numbers", n, json.dumps({field: n}).encode()) for n in range(rng["from"], rng["to"])]


def stage_numbers(proto: Protocol, batch_id: int) -> str:
    """Stage the batch as the job does with the kind's ``read`` and ``positions``."""
    plan = proto.ledger.plan(batch_id)
    assert plan is not None
    rng, job = plan.range, sources.kind_for(plan.source_kind).job_source(proto.cfg.source)  # the job spec's source
    return stage(proto, batch_id, lines=numbers_lines(rng, job["field"]),
                 source_positions={"first": rng["from"], "last": rng["to"] - 1})


def run_numbers(proto: Protocol) -> int | None:
    proto.recover()
    plan, _ = proto.plan()
    if plan is None:
        return None
    proto.verify(plan.batch_id, stage_numbers(proto, plan.batch_id))
    proto.commit(plan.batch_id)
    return plan.batch_id


# -- How to add a source kind ---------------------------------------------------------------------------
def test_a_source_kind_of_its_own_distribution_runs_through_the_protocol(site, tmp_path, make_cfg):
    files_before = config_values(make_cfg())
    install(site, "eobatch-numbers", "eobatch.sources", {"numbers": "eobatch_numbers:KIND"}, "eobatch_numbers")
    assert "numbers" in sources.kind_names() and "eobatch_numbers" not in sys.modules  # listed, not imported
    cfg = load_pipeline(pipeline_file(tmp_path, numbers_doc(tmp_path)))
    kind = sources.kind_for("numbers")
    assert type(kind).__module__ == "eobatch_numbers" and Path(sys.modules["eobatch_numbers"].__file__).is_relative_to(site)

    # its part of the configuration contract: source.field pinned, its bounds harmless
    assert contract().roles()["source.field"] == "pending"
    assert {k: harmless()[k] for k in ("source.start", "source.stop")} == dict.fromkeys(
        ("source.start", "source.stop"), sources.base.PLANNED)
    # a pipeline of another kind records the kind's key as None, and nothing else of it changes
    assert config_values(make_cfg()) == {**files_before, "source.field": None}

    proto = Protocol(cfg)
    assert [run_numbers(proto) for _ in range(4)] == [1, 2, 3, None]
    rows = DeltaTable(cfg.sink_table).to_pyarrow_table().to_pylist()
    assert sorted(r["n"] for r in rows) == list(range(25))
    plans = [proto.ledger.plan(b) for b in (1, 2, 3)]
    assert [(p.source_kind, p.range, p.rows_in) for p in plans] == [
        ("numbers", {"from": 0, "to": 10}, 10), ("numbers", {"from": 10, "to": 20}, 10),
        ("numbers", {"from": 20, "to": 25}, 5)]
    assert all(p.config == config_values(cfg) for p in plans)
    assert plans[0].config["source.field"] == "n" and plans[0].config["source.kind"] == "numbers"
    assert plans[0].config["source.path"] is None and "source.stop" not in plans[0].config
    commit = next(h for h in DeltaTable(cfg.sink_table).history() if h.get("eo.batchId") == "1")
    assert (commit["eo.source"], json.loads(commit["eo.offsets"])) == ("numbers", [0, 10])

    # a harmless edit (stop) is taken by the next plan; a pending batch finishes under its source.field
    more = load_pipeline(pipeline_file(tmp_path, numbers_doc(tmp_path, stop=30)))
    proto = Protocol(more)
    proto.recover()
    plan, _ = proto.plan()
    assert plan is not None and plan.range == {"from": 25, "to": 30}
    attempt = stage_numbers(proto, plan.batch_id)
    renamed = load_pipeline(pipeline_file(tmp_path, numbers_doc(tmp_path, stop=30, field="m")))
    with pytest.raises(ConfigChanged, match="source.field was 'n' when batch 4 was planned"):
        Protocol(renamed).verify(plan.batch_id, attempt)
    proto.verify(plan.batch_id, attempt)
    proto.commit(plan.batch_id)
    assert sorted(r["n"] for r in DeltaTable(cfg.sink_table).to_pyarrow_table().to_pylist()) == list(range(30))


def test_a_bad_range_is_refused_by_verify_through_the_kinds_own_check(site, tmp_path):
    from eobatch.protocol.verify import VerifyFailed

    install(site, "eobatch-numbers", "eobatch.sources", {"numbers": "eobatch_numbers:KIND"}, "eobatch_numbers")
    proto = Protocol(load_pipeline(pipeline_file(tmp_path, numbers_doc(tmp_path))))
    plan, _ = proto.plan()
    assert plan is not None
    short = stage(proto, plan.batch_id, lines=numbers_lines({"from": 1, "to": 11}, "n"),
                  source_positions={"first": 1, "last": 10})
    with pytest.raises(VerifyFailed, match=r"the job read positions .*'first': 1.*the range is .*'first': 0"):
        proto.verify(plan.batch_id, short)


# -- How to add a sink --------------------------------------------------------------------------------------
def test_a_sink_kind_of_its_own_distribution_runs_through_the_protocol(site, tmp_path, base_cfg, make_cfg):
    before = config_values(make_cfg())
    install(site, "eobatch-labelled", "eobatch.sinks", {"labelled": "eobatch_labelled:KIND"}, "eobatch_labelled")
    assert sinks.kind_names() == ["delta", "delta_merge", "labelled"] and "eobatch_labelled" not in sys.modules
    assert sinks.modes() == ["append", "merge", "labelled"]
    doc = {**base_cfg, "sink": {**base_cfg["sink"], "mode": "labelled", "labelled": {"label": "gold", "note": "x"}}}
    cfg = load_pipeline(pipeline_file(tmp_path, doc))
    assert cfg.sink_mode == "labelled" and cfg.sink.label == "gold"
    assert config_values(make_cfg()) == {**before, "sink.labelled.label": None}
    assert harmless()["sink.labelled.note"] == "text for people"

    proto = Protocol(cfg)
    land_ids(cfg, "a.jsonl", range(3))
    assert run_next(proto) == 1
    land_ids(cfg, "b.jsonl", range(3, 5))
    assert run_next(proto) == 2
    table = DeltaTable(cfg.sink_table)
    assert sorted(r["order_id"] for r in table.to_pyarrow_table().to_pylist()) == [f"o{i}" for i in range(5)]
    labelled = [h for h in table.history() if h.get("eo.batchId") is not None]
    assert len(labelled) == 2 and {h["toy.label"] for h in labelled} == {"gold"}
    assert [proto.ledger.plan(b).config["sink.labelled.label"] for b in (1, 2)] == ["gold", "gold"]

    # the label is a TABLE key: refused while the tables hold batches; the note is harmless
    relabelled = {**doc, "sink": {**doc["sink"], "labelled": {"label": "silver"}}}
    with pytest.raises(ConfigChanged, match="sink.labelled.label was 'gold'"):
        Protocol(load_pipeline(pipeline_file(tmp_path, relabelled))).plan()
    renoted = {**doc, "sink": {**doc["sink"], "labelled": {"label": "gold", "note": "y"}}}
    land_ids(cfg, "c.jsonl", range(5, 6))
    assert run_next(Protocol(load_pipeline(pipeline_file(tmp_path, renoted)))) == 3


# -- a plug-in that cannot be used: a clear error naming it, every other kind as before -----------------------
BROKEN = {
    "toy_import": "import no_such_module_anywhere\n",
    "toy_object": "KIND = object()\n",
    "toy_named": "import eobatch_numbers\n\nKIND = eobatch_numbers.NumbersKind()\n",  # called numbers
    "toy_roles": ("import eobatch_numbers\n\n\nclass Kind(eobatch_numbers.NumbersKind):\n    name = 'toy_roles'\n"
                  "    contract_keys = {}\n    harmless_keys = {**eobatch_numbers.NumbersKind.harmless_keys,\n"
                  "                     'source.field': 'x', 'source.path': 'x'}\n\n\nKIND = Kind()\n"),
    "toy_unroled": ("import eobatch_numbers\n\n\nclass Kind(eobatch_numbers.NumbersKind):\n    name = 'toy_unroled'\n"
                    "    harmless_keys = {}\n\n\nKIND = Kind()\n"),
}


def test_a_plug_in_that_cannot_be_used_is_an_error_naming_its_distribution_and_the_others_go_on(
        site, tmp_path, make_cfg):
    files = make_cfg()
    values = config_values(files)
    install(site, "eobatch-numbers", "eobatch.sources", {"numbers": "eobatch_numbers:KIND"}, "eobatch_numbers")
    for module, code in BROKEN.items():
        install(site, module.replace("_", "-"), "eobatch.sources", {module: f"{module}:KIND"}, code=code)
    install(site, "toy-files", "eobatch.sources", {"files": "eobatch_numbers:KIND"})  # a built-in's name
    install(site, "toy-twice", "eobatch.sources", {"numbers": "eobatch_numbers:KIND"})  # another's name

    assert sources.kind_names() == ["delta", "files", "kafka", "numbers", "parquet", *sorted(BROKEN)]
    assert type(sources.kind_for("files")).__module__ == "eobatch.sources.files"  # never the plug-in of its name
    expected = {
        "toy_import": r"cannot be loaded: entry point 'toy_import = toy_import:KIND' \(group eobatch.sources\) of "
                      r"distribution toy-import 0.1: ModuleNotFoundError: No module named 'no_such_module_anywhere'",
        "toy_object": r"toy-object 0.1: <object object at .*> does not implement eobatch.sources.SourceKind "
                      r"\(it has no [a-z_, ]*config_keys",
        "toy_named": r"toy-named 0.1 names a kind called 'numbers'; the entry point's name is the kind's",
        "toy_roles": r"toy-roles 0.1: its keys' roles in the configuration contract are not those of the other "
                     r"kinds: source.path is harmless here and pending for source kind 'files'",
        "toy_unroled": r"toy-unroled 0.1: source kind 'toy_unroled': no role for source.max_records_per_batch, source.start, "
                       r"source.stop: each of its keys is in contract_keys",
        "numbers": r"source kind 'numbers' is published by more than one distribution: .*eobatch-numbers 0.1; "
                   r".*toy-twice 0.1. Uninstall all but one",
    }
    for name, text in expected.items():
        with pytest.raises(KindUnavailable, match=text):
            sources.kind_for(name)
    problems = sources.REGISTRY.problems()
    assert sorted(problems) == sorted([*expected, "files"])
    assert "'files = eobatch_numbers:KIND' (group eobatch.sources) of distribution toy-files 0.1 is not used: " \
           "'files' is a built-in source kind" in problems["files"]

    # the built-in kinds and their pipelines go on as before; a pipeline of a broken kind is told why
    assert [k.name for k in sources.kinds()] == ["files", "kafka", "parquet", "delta"]
    assert config_values(make_cfg()) == values
    doc = numbers_doc(tmp_path)
    with pytest.raises(ConfigError, match=r"numbers.yaml: source.kind: source kind 'toy_import' cannot be loaded: "
                                          r"entry point .* of distribution toy-import 0.1"):
        load_pipeline(pipeline_file(tmp_path, {**doc, "source": {**doc["source"], "kind": "toy_import"}}))


def test_a_kind_registered_in_the_process_declares_its_part_of_the_contract_too(site):
    install(site, "eobatch-numbers", "eobatch.sources", {"numbers": "eobatch_numbers:KIND"}, "eobatch_numbers")
    numbers = type(sources.kind_for("numbers"))

    class Unroled(numbers):
        name = "unroled"
        contract_keys: dict = {}

    with pytest.raises(ValueError, match="source kind 'unroled': no role for source.field"):
        sources.register(Unroled())
    assert "unroled" not in sources.kind_names()
