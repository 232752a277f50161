"""One pipeline's S3 settings never become another's: the ledger page (the api-server's process
serves every pipeline) reads each pipeline with its own connection's endpoint and keys, per request,
and leaves the process's environment as it was. Two S3 servers on loopback (S3Proxy), each with
keys that work on it alone and a bucket of the same name, and two Airflow connections."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
import yaml

from eobatch.storage import s3conf
from eobatch.ui import view
from support.services import S3Server

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    one = S3Server(str(tmp_path_factory.mktemp("s3-one"))).start()
    two = S3Server(str(tmp_path_factory.mktemp("s3-two"))).start()
    try:
        for srv in (one, two):
            srv.create_bucket("lake")  # the same name on both: only the endpoint tells them apart
        two.create_bucket("lakec")
        yield one, two
    finally:
        one.stop()
        two.stop()


def _connection(monkeypatch, conn_id: str, srv: S3Server) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({
        "conn_type": "aws", "login": srv.access_key, "password": srv.secret_key,
        "extra": {"endpoint_url": srv.endpoint, "region_name": "us-east-1"}}))


def _pipeline(folder: Path, name: str, conn: str, bucket: str = "lake", source: dict | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    root = f"s3a://{bucket}/{name}"
    (folder / f"{name}.yaml").write_text(yaml.safe_dump({
        "name": name, "aws_conn_id": conn, "schema": "order_id STRING NOT NULL",
        "source": source or {"kind": "files", "path": f"{root}/landing"},
        "sink": {"table": f"{root}/sink"}, "quarantine": {"table": f"{root}/bad"}}))


def test_each_ledger_page_reads_its_own_bucket_with_its_own_keys(servers, tmp_path, monkeypatch):
    one, two = servers
    for k in (*s3conf.ENV_KEYS, "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION", s3conf.BUCKETS_ENV):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    _connection(monkeypatch, "lake_one", one)
    _connection(monkeypatch, "lake_two", two)
    folder = tmp_path / "pipelines"
    _pipeline(folder, "alpha", "lake_one")  # s3a://lake/alpha/... on server one
    _pipeline(folder, "beta", "lake_two")  # s3a://lake/beta/... on server two: same bucket name
    # gamma: its own tables on server two, a Delta source in bucket "lake" of server one (source.conn_id):
    # its page must not make "lake" mean server one for the pages after it
    _pipeline(folder, "gamma", "lake_two", bucket="lakec",
              source={"kind": "delta", "table": "s3a://lake/alpha/sink", "conn_id": "lake_one"})
    monkeypatch.setenv("PIPELINES_DIR", str(folder))
    for srv, name, n in ((one, "alpha", 2), (two, "beta", 3)):
        for i in range(n):
            srv.client().put_object(Bucket="lake", Key=f"{name}/landing/f{i}.jsonl", Body=b'{"order_id": "x"}\n')
    monkeypatch.setattr(view, "BACKLOGS", view.Memo(0.0))  # every page load reads the source again
    before = dict(os.environ)

    def files(name: str) -> int | None:
        v = view.page_view(view.find(name))
        assert v.rows == [] and not v.backlog.get("error"), (name, v.backlog)
        assert json.loads(view.batches_json(view.find(name))) == []  # the ledger: read from its own server
        return v.backlog["files"]

    for name in ("alpha", "gamma", "beta", "alpha", "gamma", "beta"):
        if name != "gamma":
            assert files(name) == {"alpha": 2, "beta": 3}[name], name
        else:
            view.page_view(view.find(name))  # its backlog (an upstream with no table yet) may say why not
    assert dict(os.environ) == before and s3conf.current_store() is None

    seen: dict[str, list] = {"alpha": [], "beta": []}

    def load(name: str) -> None:
        for _ in range(4):
            seen[name].append(files(name))

    threads = [threading.Thread(target=load, args=(n,)) for n in ("alpha", "beta")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"alpha": [2] * 4, "beta": [3] * 4}  # at the same time, in two threads of one process


def test_an_s3_landing_bucket_that_is_missing_or_denied_fails_the_plan_an_empty_prefix_is_nothing_new(
        servers, tmp_path, monkeypatch):
    """S3 has no folders: a prefix without objects is an empty landing folder (nothing new). A bucket
    that does not exist, or that the pipeline's credentials may not list, fails the plan naming it
    (it used to list as empty: NoSuchBucket was "nothing new")."""
    from eobatch.pipelines.loader import load_pipeline
    from eobatch.protocol import Protocol
    from eobatch.sources import source_for
    from eobatch.sources.base import LandingUnreadable

    one, _two = servers
    for k in (*s3conf.ENV_KEYS, "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION", s3conf.BUCKETS_ENV):
        monkeypatch.delenv(k, raising=False)

    def plan(landing: str, secret: str = one.secret_key):
        path = tmp_path / f"p{abs(hash((landing, secret)))}.yaml"
        path.write_text(yaml.safe_dump({
            "name": "orders", "schema": "order_id STRING NOT NULL", "source": {"kind": "files", "path": landing},
            "sink": {"table": str(tmp_path / "lake" / "orders")}, "quarantine": {"table": str(tmp_path / "lake" / "bad")}}))
        settings = s3conf.S3Settings(one.endpoint, one.access_key, secret, None, "us-east-1")
        with s3conf.using(s3conf.Store(settings)):
            return Protocol(load_pipeline(str(path))).plan()

    assert plan("s3a://lake/never-written/landing") == (None, False)  # an empty prefix: nothing new, no error
    with pytest.raises(LandingUnreadable) as e:
        plan("s3a://no-such-bucket/landing")
    assert ("the landing folder s3a://no-such-bucket/landing (source.path of" in str(e.value)
            and "which does not exist (NoSuchBucket)" in str(e.value) and "create the bucket" in str(e.value)), e.value
    with pytest.raises(LandingUnreadable) as e:
        plan("s3a://lake/alpha/landing", secret="not-" + one.secret_key)
    assert "cannot be listed: access denied (" in str(e.value) and one.secret_key not in str(e.value), e.value
    # discovery lexical, after a first plan: the listing after its position is the check (no LIST of its
    # own while files are found), and a bucket missing or denied then is still said as such
    one.client().put_object(Bucket="lake", Key="lexical/landing/a.jsonl", Body=b'{"order_id": "a"}\n')
    path = tmp_path / "lexical.yaml"
    path.write_text(yaml.safe_dump({
        "name": "lexical", "schema": "order_id STRING NOT NULL",
        "source": {"kind": "files", "path": "s3a://lake/lexical/landing", "discovery": "lexical"},
        "sink": {"table": str(tmp_path / "lake" / "lexical")}, "quarantine": {"table": str(tmp_path / "lake" / "lbad")}}))
    good = s3conf.S3Settings(one.endpoint, one.access_key, one.secret_key, None, "us-east-1")
    cfg = load_pipeline(str(path))
    with s3conf.using(s3conf.Store(good)):
        first = Protocol(cfg).plan()[0]
        assert [f["path"] for f in first.range["files"]] == ["s3a://lake/lexical/landing/a.jsonl"]
        assert first.range["listed_after"] == "s3a://lake/lexical/landing/a.jsonl"
        assert source_for(cfg).next_range([first], 100)[0] is None  # nothing after it: nothing new
    denied = s3conf.S3Settings(one.endpoint, one.access_key, "not-" + one.secret_key, None, "us-east-1")
    with s3conf.using(s3conf.Store(denied)), pytest.raises(LandingUnreadable) as e:
        source_for(cfg).next_range([first], 100)
    assert "cannot be listed: access denied (" in str(e.value) and one.secret_key not in str(e.value), e.value
