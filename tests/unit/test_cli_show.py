"""`cli show` reads each table with its participant's storage options (S3 endpoint, region,
credentials), as every other reader of the tables does; without them an S3 table cannot be opened."""

from __future__ import annotations


def test_show_opens_tables_with_the_participants_storage_options(make_cfg, monkeypatch, capsys):
    import deltalake
    import pyarrow as pa
    from deltalake import write_deltalake

    from eobatch.cli import show
    from eobatch.protocol import Protocol

    cfg = make_cfg()
    write_deltalake(cfg.sink_table, pa.table({"order_id": ["o1", "o2"], "amount": [1.0, 2.0]}))
    proto = Protocol(cfg)
    for part in proto.participants.values():
        part.storage_options = {"eobatch_marker": part.name}  # delta-rs accepts (ignores) it for a local table

    opened = []
    real = deltalake.DeltaTable

    class Recording(real):
        def __init__(self, table_uri, *args, **kwargs):
            opened.append((str(table_uri), kwargs.get("storage_options", args[1] if len(args) > 1 else None)))
            super().__init__(table_uri, *args, **kwargs)

    monkeypatch.setattr(deltalake, "DeltaTable", Recording)
    show(proto, limit=5)

    out = capsys.readouterr().out
    assert "Delta version 0, 2 rows" in out and '"order_id": "o2"' in out
    parts = {p.uri: p for p in proto.participants.values()}
    assert opened and all(opts == parts[uri].storage_options for uri, opts in opened), opened
