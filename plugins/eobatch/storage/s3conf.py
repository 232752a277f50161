"""Where S3 is and who we are on it: one place for endpoint, region and credentials.

Resolved from the environment only (no Airflow import here: the Spark job uses it too):

* ``S3_ENDPOINT``         an S3-compatible server, e.g. ``http://127.0.0.1:9000``; unset = AWS.
                          (``AWS_ENDPOINT_URL`` is accepted as well.) With an endpoint,
                          requests use path-style addressing.
* ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``  (unset: the SDKs'
                          default chains: instance profile, web identity, ~/.aws ...)
* ``AWS_REGION``          (or ``AWS_DEFAULT_REGION``), default ``us-east-1``.

Pipeline YAMLs hold only ``s3a://bucket/prefix`` locations, never credentials. The Airflow
operators export the pipeline's AWS connection (``aws_conn_id``, resolved by the Amazon
provider's hook) into these variables (airflow.hooks), and the
stage job forwards them to its executors as environment variables (never as ``--conf``, which
spark-submit's command line and the task log would show). Nothing here puts a secret into an
exception message: ``redact`` removes them from any text that leaves this process.

URIs stay ``s3a://bucket/key`` everywhere (what Spark reads); boto3 and pyarrow get bucket and
key, delta-rs gets ``s3://bucket/key`` plus ``delta_storage_options``.

A bucket in another store (a delta source's upstream table with its own ``conn_id``): its settings
(endpoint, region, credentials) are in ``EOBATCH_S3_BUCKETS``, a JSON object of bucket -> the
variables above, which the Airflow stage task gives its spark-submit (``bucket_env``).
``settings_for(uri)`` picks a URI's settings: its bucket's when listed there, else the
environment's. The stage job gives s3a the same per bucket (``bucket_hadoop_conf``:
``fs.s3a.bucket.<bucket>.*``, set on the running session, never on a command line).

One pipeline's settings in a process that serves many (the api-server's ledger page, the DAG
processor, a task of a DAG holding several pipelines' tasks) are never written to the process's
environment: they travel with the call, as a ``Store`` (the pipeline's own settings and its
buckets' ones) that ``using(store)`` makes current for the calls made inside it (a context
variable: this thread or asyncio task only, restored on exit; ``carried`` hands it to a worker
thread). Inside it, ``settings()``, ``bucket_settings()`` and ``settings_for()`` answer from the
store instead of the environment; ``storage_for`` and every S3 client the call makes follow.
"""

from __future__ import annotations

import contextvars
import json
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

S3_SCHEMES = ("s3a://", "s3://")
ENV_KEYS = ("S3_ENDPOINT", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION")
BUCKETS_ENV = "EOBATCH_S3_BUCKETS"  # {bucket: {ENV_KEYS...}}: buckets in another store (``bucket_env``)


def is_s3(uri: str) -> bool:
    return str(uri).startswith(S3_SCHEMES)


def split(uri: str) -> tuple[str, str]:
    """(bucket, key) of ``s3a://bucket/key`` or ``s3://bucket/key``; key without leading slash."""
    for scheme in S3_SCHEMES:
        if uri.startswith(scheme):
            rest = uri[len(scheme):]
            bucket, _, key = rest.partition("/")
            return bucket, key
    raise ValueError(f"not an S3 URI: {uri!r}")


def to_s3a(bucket: str, key: str) -> str:
    return f"s3a://{bucket}/{key}" if key else f"s3a://{bucket}"


def table_uri(uri: str) -> str:
    """The URI delta-rs understands: ``s3://`` for S3 tables, unchanged otherwise."""
    return "s3://" + uri[len("s3a://"):] if uri.startswith("s3a://") else uri


@dataclass(frozen=True)
class S3Settings:
    endpoint: str | None
    access_key: str | None
    secret_key: str | None
    session_token: str | None
    region: str

    @property
    def path_style(self) -> bool:
        return bool(self.endpoint)

    @property
    def http(self) -> bool:
        return self.endpoint is not None and self.endpoint.startswith("http://")

    def secrets(self) -> list[str]:
        return [s for s in (self.secret_key, self.session_token, self.access_key) if s]


@dataclass(frozen=True)
class Store:
    """The S3 settings of one pipeline's calls: its own (``default``: its ``aws_conn_id``'s) and
    those of each bucket served by a connection of its own (``buckets``)."""
    default: S3Settings
    buckets: tuple[tuple[str, S3Settings], ...] = ()

    def secrets(self) -> list[str]:
        return [x for s in (self.default, *(b for _, b in self.buckets)) for x in s.secrets()]


_store: contextvars.ContextVar[Store | None] = contextvars.ContextVar("eobatch_s3_store", default=None)
T = TypeVar("T")


@contextmanager
def using(store: Store) -> Iterator[Store]:
    """The calls inside this block (this thread or asyncio task) use ``store``'s settings."""
    token = _store.set(store)
    try:
        yield store
    finally:
        _store.reset(token)


def current_store() -> Store | None:
    """The store of ``using`` in force here (None: the environment's settings serve)."""
    return _store.get()


def carried(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` run with the store in force where ``carried`` is called (for a worker thread, which
    does not inherit it)."""
    store = _store.get()

    def run(*args: Any, **kwargs: Any) -> T:
        token = _store.set(store)
        try:
            return fn(*args, **kwargs)
        finally:
            _store.reset(token)
    return run


def settings(env: Mapping[str, str] | None = None) -> S3Settings:
    """The settings of ``env`` (a mapping of ``ENV_KEYS``); without it: the current store's
    (``using``), else the process environment's."""
    if env is None and (store := _store.get()) is not None:
        return store.default
    env = os.environ if env is None else env
    return S3Settings(
        endpoint=(env.get("S3_ENDPOINT") or env.get("AWS_ENDPOINT_URL") or None),
        access_key=env.get("AWS_ACCESS_KEY_ID") or None,
        secret_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
        session_token=env.get("AWS_SESSION_TOKEN") or None,
        region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
    )


_parsed: dict[str, dict[str, S3Settings]] = {}


def bucket_settings(env: Mapping[str, str] | None = None) -> dict[str, S3Settings]:
    """The buckets of the current store (``using``), else of ``EOBATCH_S3_BUCKETS`` (of ``env``,
    default the process environment), and their settings (none when it is unset)."""
    if env is None and (store := _store.get()) is not None:
        return dict(store.buckets)
    raw = (os.environ if env is None else env).get(BUCKETS_ENV) or ""
    if not raw:
        return {}
    got = _parsed.get(raw)
    if got is None:
        try:
            got = {str(b): settings(v) for b, v in dict(json.loads(raw)).items()}
        except (ValueError, TypeError, AttributeError):
            raise ValueError(f"{BUCKETS_ENV} must be a JSON object of bucket -> S3 settings") from None
        _parsed.clear()  # one value at a time in a process
        _parsed[raw] = got
    return got


def settings_for(uri: str, env: Mapping[str, str] | None = None) -> S3Settings:
    """The settings that serve ``uri``: its bucket's own (``EOBATCH_S3_BUCKETS``), else the environment's."""
    if is_s3(uri):
        own = bucket_settings(env).get(split(uri)[0])
        if own is not None:
            return own
    return settings(env)


def bucket_env(buckets, env: Mapping[str, str] | None = None) -> str:
    """``EOBATCH_S3_BUCKETS`` holding only these buckets (of the ones ``bucket_settings`` knows)."""
    wanted = set(buckets)
    return json.dumps({b: credential_env(s) for b, s in bucket_settings(env).items() if b in wanted}, sort_keys=True)


def all_secrets(env: Mapping[str, str] | None = None) -> list[str]:
    """Every credential of the environment's settings and of each listed bucket's (and, without
    ``env``, of the current store's)."""
    out = settings(env).secrets()
    for s in bucket_settings(env).values():
        out += s.secrets()
    if env is None and _store.get() is not None:
        out += all_secrets(os.environ)
    return out


def redact(text: str, s: S3Settings | None = None) -> str:
    """``text`` with every credential of ``s`` (default: the environment's, and each listed
    bucket's) replaced by ***."""
    out = str(text)
    for secret in sorted(s.secrets() if s else all_secrets(), key=len, reverse=True):
        if len(secret) >= 4:
            out = out.replace(secret, "***")
    return out


_clients: dict = {}
_lock = threading.Lock()


def boto3_client(s: S3Settings | None = None):
    """A boto3 S3 client for these settings, created on first use and cached per process."""
    s = s or settings()
    key = (os.getpid(), s)
    c = _clients.get(key)
    if c is None:
        with _lock:
            c = _clients.get(key)
            if c is None:
                # boto3: only for s3:// paths (the Spark job loads this module)
                import boto3
                from botocore.config import Config

                cfg = Config(s3={"addressing_style": "path" if s.path_style else "auto"},
                             retries={"max_attempts": 5, "mode": "standard"},
                             connect_timeout=10, read_timeout=60)
                c = boto3.session.Session().client(
                    "s3", endpoint_url=s.endpoint, region_name=s.region, aws_access_key_id=s.access_key,
                    aws_secret_access_key=s.secret_key, aws_session_token=s.session_token, config=cfg)
                _clients[key] = c
    return c


def arrow_filesystem(s: S3Settings | None = None):
    """pyarrow's S3FileSystem for these settings (the stage job's Parquet writers, footers);
    cached per process like the boto3 client."""
    s = s or settings()
    key = ("arrow", os.getpid(), s)
    fs = _clients.get(key)
    if fs is None:
        fs = _clients[key] = _new_arrow_fs(s)
    return fs


def _new_arrow_fs(s: S3Settings):
    # pyarrow: only for an Arrow filesystem (the rest of storage is pure Python)
    import pyarrow.fs as pafs

    kw = dict(region=s.region, retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=5))
    if s.access_key and s.secret_key:
        kw.update(access_key=s.access_key, secret_key=s.secret_key, session_token=s.session_token)
    if s.endpoint:
        scheme, _, host = s.endpoint.partition("://")
        kw.update(endpoint_override=host.rstrip("/"), scheme=scheme, force_virtual_addressing=False)
    return pafs.S3FileSystem(**kw)


def delta_storage_options(uri: str, s: S3Settings | None = None) -> dict | None:
    """delta-rs storage options for a table at ``uri`` (None for local tables).

    Commits use S3 conditional writes (``If-None-Match: *`` on the log entry,
    ``aws_conditional_put=etag``), so two committers never both write version N.
    ``AWS_S3_ALLOW_UNSAFE_RENAME`` is never set: that would allow lost commits.
    """
    if not is_s3(uri):
        return None
    s = s or settings_for(uri)
    opts = {"AWS_REGION": s.region, "aws_conditional_put": "etag"}
    if s.endpoint:
        opts["AWS_ENDPOINT_URL"] = s.endpoint
        opts["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false"
        if s.http:
            opts["AWS_ALLOW_HTTP"] = "true"
    if s.access_key and s.secret_key:
        opts["AWS_ACCESS_KEY_ID"] = s.access_key
        opts["AWS_SECRET_ACCESS_KEY"] = s.secret_key
        if s.session_token:
            opts["AWS_SESSION_TOKEN"] = s.session_token
    return opts


# A landing object is read as one object or not at all: s3a sends every GET of a stream with
# If-Match of the ETag the stream opened at (server mode), so an object overwritten while a task
# reads it fails that task (RemoteFileChangedException, or the analytics stream's 412) instead of
# mixing two objects; a server that answers no ETag fails the read. Pipelines cannot change these
# (policy.SPARK_CONF_PRODUCT); which object a read must be is checked by the stage job itself
# (sources/files/read.py: before and after the read).
CHANGE_DETECTION = {
    "spark.hadoop.fs.s3a.change.detection.mode": "server",
    "spark.hadoop.fs.s3a.change.detection.source": "etag",
    "spark.hadoop.fs.s3a.change.detection.version.required": "true",
}


def spark_hadoop_conf(s: S3Settings | None = None) -> dict:
    """s3a settings for spark-submit ``--conf``: endpoint, addressing and change detection, no secrets.

    Credentials reach s3a through its default provider chain (environment variables of the
    driver and, via ``spark.executorEnv.*`` set by the job itself, of the executors).
    """
    s = s or settings()
    conf = {"spark.hadoop.fs.s3a.endpoint.region": s.region, **CHANGE_DETECTION}
    if s.endpoint:
        conf.update({
            "spark.hadoop.fs.s3a.endpoint": s.endpoint,
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "false" if s.http else "true",
        })
    return conf


def bucket_hadoop_conf(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """s3a's per-bucket settings (``fs.s3a.bucket.<bucket>.*``) of each bucket of
    ``EOBATCH_S3_BUCKETS``, credentials included: set by the stage job on its running session's
    Hadoop configuration (which its file scans hand to the executors), never on a command line."""
    conf: dict[str, str] = {}
    for bucket, s in sorted(bucket_settings(env).items()):
        p = f"fs.s3a.bucket.{bucket}."
        conf[p + "endpoint.region"] = s.region
        if s.endpoint:
            conf |= {p + "endpoint": s.endpoint, p + "path.style.access": "true",
                     p + "connection.ssl.enabled": "false" if s.http else "true"}
        if s.access_key and s.secret_key:
            conf |= {p + "access.key": s.access_key, p + "secret.key": s.secret_key}
            if s.session_token:
                conf |= {p + "session.token": s.session_token,
                         p + "aws.credentials.provider": "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"}
            else:
                conf[p + "aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
    return conf


def credential_env(s: S3Settings | None = None) -> dict:
    """The S3 variables to hand on to a child process or to executors (only those set)."""
    s = s or settings()
    out = {"AWS_REGION": s.region}
    for k, v in (("S3_ENDPOINT", s.endpoint), ("AWS_ACCESS_KEY_ID", s.access_key),
                 ("AWS_SECRET_ACCESS_KEY", s.secret_key), ("AWS_SESSION_TOKEN", s.session_token)):
        if v:
            out[k] = v
    return out
