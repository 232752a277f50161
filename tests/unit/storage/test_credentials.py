"""eobatch.storage.credentials.scrub_uris: the password of every URI in a text, as RFC 3986 writes
userinfo and as people paste it (spaces, quotes, unencoded "@" and "/", the URI in quotes), is
``***``; what is not a password (a port, a URI without userinfo, an e-mail address) stays."""

from __future__ import annotations

import pytest

from eobatch.storage.credentials import scrub_uris

CASES = [
    # (text, scrubbed, what it must not show)
    ("postgres://svc:hunter2@db:5432/app", "postgres://svc:***@db:5432/app", "hunter2"),
    ("redis://:onlypass@cache:6379/0", "redis://:***@cache:6379/0", "onlypass"),
    ("smtp://ops:pa ss@mail:25", "smtp://ops:***@mail:25", "pa ss"),
    ("smtp://ops:two  spaces and\ttab@mail:25 done", "smtp://ops:***@mail:25 done", "spaces"),
    ("dsn='postgres://u:pw@db/x' retried", "dsn='postgres://u:***@db/x' retried", "pw@"),
    ('dsn="postgres://u:pw@db/x" retried', 'dsn="postgres://u:***@db/x" retried', "pw@"),
    ("'smtp://ops:it's s3cret@mail:25' failed, ask ops@example.com",
     "'smtp://ops:***@mail:25' failed, ask ops@example.com", "s3cret"),
    ('"kafka://u:pa\\"ss w0rd@broker:9092" and more', '"kafka://u:***@broker:9092" and more', "w0rd"),
    ('"kafka://u:say "hi" there@broker:9092"', '"kafka://u:***@broker:9092"', "hi"),
    ("kafka://svc:pa/ss@w0rd@broker:9x/ (fallback smtp://ops:hunter2!@mail:25)",
     "kafka://svc:***@broker:9x/ (fallback smtp://ops:***@mail:25)", "w0rd"),
    ("mysql://root:p@ss w0rd@db:3306", "mysql://root:***@db:3306", "w0rd"),
    ("smtp://me@example.com:pw d@mail:587", "smtp://me@example.com:***@mail:587", "pw d"),
    ("s3a://AKIA123:abc/def+ghi=@bucket/key", "s3a://AKIA123:***@bucket/key", "abc/def"),
    ("amqp://u:%40pct%20enc@rabbit/vh", "amqp://u:***@rabbit/vh", "pct"),
    ("x=postgres://a:b@h1,postgres://c:d e@h2", "x=postgres://a:***@h1,postgres://c:***@h2", "d e"),
    ("line one postgres://u:multi\nline@host", "line one postgres://u:multi\nline@host", None),  # no "@" on its line
    ("postgres://u:secret@[::1]:5432/db", "postgres://u:***@[::1]:5432/db", "secret"),
    ("postgres://u:secret @ db-host", "postgres://u:***@ db-host", "secret"),  # no "@" with a host right after
    # not passwords: kept as they are
    ("http://host:8080/status returned 500 for user@example.com", None, None),
    ("http://user@host:8080/x", None, None),
    ("see https://example.com/a:b and mail me@example.com", None, None),
    ("ratio 3:2 at noon, user@example.com", None, None),
]


@pytest.mark.parametrize("text, scrubbed, secret", CASES)
def test_every_uri_password_is_scrubbed_and_nothing_else(text, scrubbed, secret):
    out = scrub_uris(text)
    assert out == (text if scrubbed is None else scrubbed)
    if secret is not None:
        assert secret not in out
