"""Hooks: the AWS credentials of an Airflow connection, for one pipeline's calls and its spark-submit.

In Airflow's convention a hook does the I/O of a connection and an operator only declares what
to do: the stage, plan and commit operators (``operators``) call these. They resolve the
pipeline's ``aws_conn_id`` through the Amazon provider's own ``AwsBaseHook`` into the settings
that travel with the pipeline's calls (``pipeline_s3``: never the process's environment), register every
credential with Airflow's secrets masker, and ask the Spark provider's own ``SparkSubmitHook``
whether credentials may travel as spark-submit's environment. The Kafka connection's reader is
``connections`` (registered with ``eobatch.storage.credentials``).
"""

from __future__ import annotations

import os

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk import BaseHook
from airflow.sdk.log import mask_secret

from ..errors import TerminalError
from ..storage import s3conf

AWS_CONN_ID = "aws_default"


def aws_settings(conn_id: str, base: s3conf.S3Settings | None = None) -> s3conf.S3Settings | None:
    """The S3 settings of Airflow connection ``conn_id``, None when Airflow has no such
    connection. Resolved by the Amazon provider's own hook: keys and session token,
    ``profile_name``, ``role_arn`` (assumed), web identity, or the default chain, whatever the
    connection says, become frozen credentials; with the connection's ``endpoint_url`` (its
    ``service_config.s3`` one first) and ``region_name``; what the connection leaves unset comes
    from ``base`` (default: the environment's settings), but never a session token (one of
    another identity would not match these keys). The values are registered with Airflow's
    secrets masker: never in task logs. Assumed-role credentials are valid for the role's session
    length (one hour by default): a stage job outlasting them fails and is retried with fresh ones."""
    try:
        BaseHook.get_connection(conn_id)
    except Exception:  # noqa: BLE001 - no such connection: the caller decides
        return None
    base = base or s3conf.settings(os.environ)
    v = aws_connection_settings(conn_id)
    return s3conf.S3Settings(endpoint=v["S3_ENDPOINT"] or base.endpoint,
                             access_key=v["AWS_ACCESS_KEY_ID"] or base.access_key,
                             secret_key=v["AWS_SECRET_ACCESS_KEY"] or base.secret_key,
                             session_token=v["AWS_SESSION_TOKEN"], region=v["AWS_REGION"] or base.region)


def pipeline_store(cfg, *, buckets: bool = True) -> s3conf.Store:
    """The S3 settings one pipeline's calls use (``s3conf.Store``), never the process's
    environment changed: its ``aws_conn_id``'s when its locations are on S3 and Airflow has that
    connection (else the environment's, which may be empty: the SDKs' default chains), and each
    bucket its source reads with a connection of its own (``bucket_connections``: a delta
    source's upstream in another store). A connection the source names that Airflow does not have
    is an operator's error (``TerminalError``, naming it). ``buckets=False``: the pipeline's own
    settings alone (what its tables need; a bucket of the source is then read with none)."""
    from ..job.launch import uses_s3  # the one definition of "this pipeline touches S3"

    env = s3conf.settings(os.environ)
    default = (aws_settings(cfg.aws_conn_id, env) if uses_s3(cfg) else None) or env
    own_buckets = []
    for bucket, conn_id in sorted(cfg.source.bucket_connections().items() if buckets else ()):
        own = aws_settings(conn_id, env)
        if own is None:
            raise TerminalError(f"source.conn_id {conn_id!r}: there is no Airflow connection of that id (an AWS "
                                f"connection: its endpoint_url, region_name and credentials serve bucket "
                                f"{bucket!r}); create it (`airflow connections add {conn_id} --conn-type aws "
                                f"...`) or drop source.conn_id")
        own_buckets.append((bucket, own))
    store = s3conf.Store(default, tuple(own_buckets))
    for secret in store.secrets():
        mask_secret(secret)
    return store


def pipeline_s3(cfg):
    """``with pipeline_s3(cfg):`` the calls inside use the pipeline's S3 settings (``pipeline_store``)."""
    return s3conf.using(pipeline_store(cfg))


def aws_connection_settings(conn_id: str) -> dict[str, str | None]:
    """The S3 settings of Airflow connection ``conn_id`` (``s3conf.ENV_KEYS`` -> value), resolved by
    the Amazon provider's ``AwsBaseHook`` (see ``aws_settings``); the credentials are
    registered with the secrets masker."""
    # the Amazon provider: needed only by a pipeline with s3:// locations that names a connection
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

    hook = AwsBaseHook(aws_conn_id=conn_id, client_type="s3")
    creds = hook.get_credentials()
    wrapper = hook.conn_config
    values = {"AWS_ACCESS_KEY_ID": creds.access_key, "AWS_SECRET_ACCESS_KEY": creds.secret_key,
              "AWS_SESSION_TOKEN": creds.token, "S3_ENDPOINT": wrapper.get_service_endpoint_url("s3"),
              "AWS_REGION": wrapper.region_name}
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        if values[k]:
            mask_secret(values[k])
    return values


def mask_credentials() -> None:
    """Every S3 credential of this process's environment (access key id, secret, session
    token; inside ``pipeline_s3`` also the pipeline's) registered with Airflow's secrets masker:
    whatever prints one (a command line, a child's output) shows ``***``."""
    for v in s3conf.all_secrets():
        mask_secret(v)


def credentials_travel_as_env(conn_id: str, *, deploy_mode: str | None = None,
                              spark_binary: str | None = None) -> bool:
    """May S3 credentials travel as spark-submit's process environment? The Spark hook's own
    answer, from the hook itself built for the connection: SparkSubmitHook turns env_vars
    into ``--conf`` values on the command line (its "Spark-Submit cmd" log line masks only
    keys containing secret/password, and ``ps`` shows everything) whenever its master
    *contains* "yarn" or "k8s" (``_is_yarn``, ``_is_kubernetes``; a missing connection means
    yarn), refuses them in standalone cluster mode, and otherwise hands them to the process
    (Popen's env). Only that last case forwards; a hook that cannot be built forwards nothing.

    No I/O beyond the connection lookup: ``keytab=""`` keeps the hook from writing the
    connection's base64 keytab to disk (the stage's own hook still does when it runs)."""
    try:
        hook = SparkSubmitHook(conn_id=conn_id, deploy_mode=deploy_mode, spark_binary=spark_binary, keytab="")
    except Exception:  # e.g. a k8s master without the cncf.kubernetes provider: the stage fails anyway
        return False
    return not (hook._is_yarn or hook._is_kubernetes) and hook._connection["deploy_mode"] != "cluster"


class StageSubmitHook(SparkSubmitHook):
    """The Spark provider's hook, its spark-submit started with exactly ``child_env`` as its
    environment (``eobatch.job.launch.spark_env``: an allow-list and the pipeline's own settings).

    The provider's ``submit`` hands Popen a copy of the task's whole ``os.environ`` updated with
    ``env_vars`` whenever it has any (its ``_env``): every secret of the Airflow worker would reach
    the driver, a pipeline's transform and, in local mode, the Python workers. Here ``_env`` always
    reads as unset (what the provider would have set is kept in ``requested_env``), so its ``submit``
    passes our ``env`` to Popen as it is; everything else of the provider (command line, ``--conf``
    of YARN or Kubernetes built from ``env_vars``, tracking, kill) is unchanged. The stage task's
    test asserts the environment Popen receives, so a provider that changes this fails it."""

    child_env: dict[str, str] = {}
    requested_env: dict | None = None

    @property
    def _env(self) -> None:
        return None

    @_env.setter
    def _env(self, value) -> None:
        self.requested_env = value

    @classmethod
    def adopt(cls, hook: SparkSubmitHook, child_env: dict[str, str]) -> StageSubmitHook:
        """``hook`` (built by the Spark operator with all its arguments), as this class."""
        requested = hook.__dict__.pop("_env", None)
        hook.__class__ = cls
        assert isinstance(hook, cls)
        hook.requested_env, hook.child_env = requested, dict(child_env)
        return hook

    def submit(self, application: str = "", **kwargs):
        kwargs["env"] = dict(self.child_env)
        return super().submit(application, **kwargs)
