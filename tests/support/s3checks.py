"""Independent checks of what a pipeline published on S3: boto3 listings of the raw _delta_log
and the staged files, delta-rs with explicit storage options. Never the product's own code
(no eobatch.storage.fs, no eobatch.storage.s3conf).
"""

from __future__ import annotations

import collections
import json
import re
import textwrap
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .checks import parse_commit

BUCKET = "eobatch-test"


class S3Reader:
    def __init__(self, endpoint: str, key: str, secret: str, region: str = "us-east-1"):
        import boto3
        from botocore.config import Config

        self.endpoint, self.key, self.secret, self.region = endpoint, key, secret, region
        self.s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=key, aws_secret_access_key=secret,
                               region_name=region, config=Config(s3={"addressing_style": "path"}))

    @staticmethod
    def split(uri: str) -> tuple[str, str]:
        rest = uri.split("://", 1)[1]
        b, _, k = rest.partition("/")
        return b, k.rstrip("/")

    def keys(self, uri: str) -> dict[str, int]:
        """key relative to ``uri`` -> size, every object below it (all pages)."""
        b, k = self.split(uri)
        out = {}
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=b, Prefix=k + "/"):
            for o in page.get("Contents", []):
                out[o["Key"][len(k) + 1:]] = o["Size"]
        return out

    def get(self, uri: str, rel: str) -> bytes:
        b, k = self.split(uri)
        return self.s3.get_object(Bucket=b, Key=f"{k}/{rel}")["Body"].read()

    def put(self, uri: str, data: bytes) -> None:
        b, k = self.split(uri)
        self.s3.put_object(Bucket=b, Key=k, Body=data)

    def storage_options(self) -> dict:
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": self.key,
                "AWS_SECRET_ACCESS_KEY": self.secret, "AWS_REGION": self.region, "AWS_ALLOW_HTTP": "true",
                "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false", "aws_conditional_put": "etag"}

    def table(self, uri: str):
        from deltalake import DeltaTable

        return DeltaTable("s3://" + uri.split("://", 1)[1], storage_options=self.storage_options())

    def read_rows(self, uri: str) -> list[dict]:
        return self.table(uri).to_pyarrow_table().to_pylist()

    def delta_log_commits(self, uri: str) -> list[dict]:
        """Every commit of the table's raw _delta_log, in version order (``checks.parse_commit``)."""
        names = sorted(k for k in self.keys(uri) if re.fullmatch(r"_delta_log/\d+\.json", k))
        return [parse_commit(int(k[len("_delta_log/"):-5]), self.get(uri, k)) for k in names]

    def orphans(self, uri: str) -> list[str]:
        live = set()
        for c in self.delta_log_commits(uri):
            for r in c["removes"]:
                live.discard(r["path"])
            for a in c["adds"]:
                live.add(a["path"])
        return sorted(k for k in self.keys(uri) if k.startswith("eo_batches/") and k not in live)

    def assert_exactly_once(self, p, batches: int, key: str = "order_id") -> None:
        """Published = every good record landed, once; quarantined = every bad line, once; txn
        versions 1..batches, one commit each carrying its offsets; every live file exists with
        its size; no orphan staged files."""
        rows = self.read_rows(p.sink)
        got = collections.Counter(r[key] for r in rows)
        want = collections.Counter(r[key] for r in p.landed)
        dup = {k: v for k, v in got.items() if v > 1}
        assert not dup, f"duplicates published: {list(dup.items())[:5]}"
        assert set(got) == set(want), (f"lost {sorted(set(want) - set(got))[:5]} "
                                       f"unexpected {sorted(set(got) - set(want))[:5]}")
        bad = collections.Counter(r["raw"] for r in self.read_rows(p.quarantine))
        assert bad == collections.Counter(p.landed_bad), f"quarantine {bad} != {collections.Counter(p.landed_bad)}"
        for table in (p.sink, p.quarantine):
            assert self.table(table).transaction_version(p.name) == batches
            commits = [c for c in self.delta_log_commits(table) if c["txns"]]
            assert [c["txns"][0]["version"] for c in commits] == list(range(1, batches + 1)), \
                f"{table}: txn versions in the log {[c['txns'] for c in commits]}"
            sizes = self.keys(table)
            for c in commits:
                assert c["commitInfo"].get("eo.batchId") == str(c["txns"][0]["version"])
                assert json.loads(c["commitInfo"]["eo.offsets"]), "commit carries no offsets"
                for a in c["adds"]:
                    assert sizes.get(a["path"]) == a["size"], f"{table}: {a['path']} missing or resized"
            assert self.orphans(table) == [], f"orphan files in {table}: {self.orphans(table)}"


@dataclass
class S3Pipeline:
    """A pipeline whose landing zone and tables are under one fresh s3a:// prefix."""

    yaml_path: Path
    name: str
    landing: str
    sink: str
    quarantine: str
    reader: S3Reader
    landed: list = field(default_factory=list)
    landed_bad: list = field(default_factory=list)

    @property
    def cfg(self):
        from eobatch.pipelines.loader import load_pipeline

        return load_pipeline(str(self.yaml_path))

    def protocol(self):
        from eobatch.protocol import Protocol

        return Protocol(self.cfg)

    def land(self, name: str, records: list[dict], bad: Sequence[str] = ()) -> str:
        lines = [json.dumps(r) for r in records] + list(bad)
        uri = f"{self.landing}/{name}"
        self.reader.put(uri, ("\n".join(lines) + "\n").encode())
        self.landed.extend(records)
        self.landed_bad.extend(bad)
        return uri


def s3_pipeline(tmp_path: Path, reader: S3Reader, name: str = "orders", max_records: int = 100000,
                bucket: str = BUCKET, extra: str = "", kind: str = "files") -> S3Pipeline:
    """The product (config, protocol) is used only through the pipeline YAML it writes."""
    root = f"s3a://{bucket}/{uuid.uuid4().hex[:8]}"
    landing, sink, quarantine = f"{root}/landing/{name}", f"{root}/lake/{name}", f"{root}/lake/{name}_bad"
    (tmp_path / "pipelines").mkdir(parents=True, exist_ok=True)
    path = tmp_path / "pipelines" / f"{name}.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: {name}
        source:
          kind: {kind}
          path: {landing}
          max_records_per_batch: {max_records}
        schema: "order_id STRING NOT NULL, customer STRING, amount DOUBLE, ts TIMESTAMP"
        sink:
          table: {sink}
        quarantine:
          table: {quarantine}
        spark:
          conf: {{spark.executor.memory: 1g}}
        retries:
          stage: 0
          commit: 3
          delay_seconds: 2
        """) + extra)
    return S3Pipeline(path, name, landing, sink, quarantine, reader)
