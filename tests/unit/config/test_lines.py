"""eobatch.config.lines: what a record of a landing file is, and counting them whatever the chunking; the
planner counts a planned file's records with it (``sources.files.count_records``), the Spark job
reads them by the same definition."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eobatch.config import lines
from eobatch.sources.files import count_records
from eobatch.storage.fs import LocalStorage

CHUNK = 1 << 22  # count_records reads 4 MiB at a time


def _reference_count(data: bytes) -> int:
    """What the Spark job keeps: lines split on \\n, minus whitespace-only ones (a BOM first is no line's)."""
    data = data[3:] if data.startswith(b"\xef\xbb\xbf") else data
    return sum(1 for line in data.split(b"\n") if line.strip(b" \t\r\x0b\x0c"))


def _count(tmp_path, data: bytes) -> int:
    p = tmp_path / "f.jsonl"
    p.write_bytes(data)
    return count_records(LocalStorage(), str(p))


@pytest.mark.parametrize("data,expected", [
    (b"", 0),
    (b"\n", 0),
    (b"{}", 1),
    (b"{}\n", 1),
    (b'{"a":1}\n{"a":2}\n{"a":3}', 3),
    (b'{"a":1}\n{"a":2}\n{"a":3}\n', 3),
    (b'{"a":1}\r\n{"a":2}\r\n', 2),
    (b'{"a":1}\r\n{"a":2}', 2),
    (b"\r\n\r\n{}\r\n\r\n", 1),
    (b"{}\n\n\n{}\n", 2),
    (b"{}\n   \n\t\n \x0b\x0c\r\n{}", 2),
    (b"   \n\t", 0),
    (b"not json at all\n  {}  \n", 2),  # invalid lines are records too (they go to quarantine)
    (b"\xef\xbb\xbf", 0),  # a byte order mark first is no line's: a file of only one has no record
    (b"\xef\xbb\xbf\n{}\n", 1),
    (b"\xef\xbb\xbf \r\n{}", 1),
    (b"\xef\xbb\xbf{}", 1),
    (b"{}\n\xef\xbb\xbf\n", 2),  # anywhere else it is record content (quarantined: not JSON)
    (b"\xef\xbb", 1),
])
def test_count_records_small(tmp_path, data, expected):
    assert _count(tmp_path, data) == expected
    assert _reference_count(data) == expected


@pytest.mark.parametrize("case", ["crlf-split", "blank-across", "record-across", "newline-at-boundary",
                                  "many-lines"])
def test_count_records_across_chunk_boundary(tmp_path, case):
    if case == "crlf-split":  # \r is the last byte of chunk 1, \n the first of chunk 2
        data = b"x" * (CHUNK - 1) + b"\r\n" + b'{"b":2}\r\n'
    elif case == "blank-across":  # a whitespace-only line spans the boundary
        data = b'{"a":1}\n' + b" " * CHUNK + b"\n" + b'{"b":2}'
    elif case == "record-across":  # one record spans the boundary, no trailing newline
        data = b'{"a":1}\n' + b"y" * (CHUNK + 10)
    elif case == "newline-at-boundary":
        data = b"z" * (CHUNK - 1) + b"\n" + b"\n" + b"w\n"
    else:
        line = b'{"id":"0123456789","amount":12.5}\n'  # 35 bytes: 4 MiB is not a multiple
        data = line * ((CHUNK * 2) // len(line) + 17) + b"   \r\n"
    assert len(data) > CHUNK
    assert _count(tmp_path, data) == _reference_count(data)
    expected = {"crlf-split": 2, "blank-across": 2, "record-across": 2, "newline-at-boundary": 2}
    if case in expected:
        assert _reference_count(data) == expected[case]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from([b"\n", b"\r", b" ", b"\t", b"\x0b", b"\x0c", b"x", b"{}", b"\xe2\x80\xa8", b"\x85",
                                  b"\xef\xbb\xbf", b"\xef"]),
                max_size=60), st.integers(1, 9))
def test_count_records_agrees_with_the_line_definition_at_any_chunk_size(parts, chunk_size):
    """The planner's count (in C, chunk by chunk) is eobatch.config.lines' own split, whatever the chunking
    (a byte order mark first included, whatever chunk it ends in)."""
    data = b"".join(parts)
    assert lines.count_records(io.BytesIO(data), chunk_size) == sum(1 for _ in lines.split_records(data))


ODD_TERMINATORS = {  # record content for the planner and the job alike: counted, never dropped
    "NEL": "\u0085".encode(), "LS": "\u2028".encode(), "PS": "\u2029".encode(),
    "lone-CR-inside": b"{}\r{}", "NEL-after-record": '{"a":1}\u0085'.encode(),
    "CR-then-NEL": "\r\u0085".encode(),
}


@pytest.mark.parametrize("name", sorted(ODD_TERMINATORS))
def test_lines_of_only_unicode_line_separators_are_records(tmp_path, name):
    from eobatch.config import lines

    data = b'{"a":1}\n' + ODD_TERMINATORS[name] + b"\n\r\n" + ODD_TERMINATORS[name]
    assert _count(tmp_path, data) == 3
    assert [n for n, _ in lines.split_records(data)] == [1, 2, 4]
    assert not lines.is_blank(ODD_TERMINATORS[name])


def test_the_spark_expressions_say_what_the_python_definition_says():
    """The job's regular expressions are Java's: anchored with \\z, never $ (which matches before a
    final U+0085, U+2028, U+2029 or lone \\r in Java)."""
    from eobatch.config import lines

    assert "$" not in lines.SPARK_BLANK_LINE and lines.SPARK_BLANK_LINE.endswith(r"\z")
    assert "$" not in lines.SPARK_TRAILING_CR and lines.SPARK_TRAILING_CR.endswith(r"\z")
    for blank in (b"", b" ", b"\t\r", b"\x0b\x0c \r"):
        assert lines.is_blank(blank)
