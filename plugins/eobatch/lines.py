"""What a record of a JSON-lines landing file is: one definition, shared by the planner (which
counts the records of a planned range), the Spark job (which reads them) and the tests.

* A line is the bytes between two ``\\n`` bytes (or the start or end of the file). A ``\\r``
  just before the ``\\n`` belongs to the line terminator (``\\r\\n``) and is not part of the line.
* A line is blank, and is not a record, when it holds only the ASCII whitespace bytes
  space, ``\\t``, ``\\r``, ``\\x0b`` (VT) and ``\\x0c`` (FF), or nothing.
* Nothing else ends a line or makes it blank: a lone ``\\r``, U+0085 (NEL), U+2028 and U+2029
  are record content. A line made of them is a record (and is quarantined as malformed JSON),
  never silently dropped. Java disagrees by default (its ``$`` matches before a final U+0085,
  U+2028, U+2029 or lone ``\\r``), so the Spark job uses the expressions below, anchored with
  ``\\z`` (the very end of the input).

Pure Python: no Airflow, no pyspark.
"""

from __future__ import annotations

from typing import BinaryIO, Iterator

BLANK_BYTES = b" \t\r\x0b\x0c"

# The same rules as Java regular expressions, for Spark SQL (rlike / regexp_replace).
SPARK_BLANK_LINE = r"^[ \t\r\x0B\f]*\z"
SPARK_TRAILING_CR = r"\r\z"


def is_blank(line: bytes) -> bool:
    return not line.strip(BLANK_BYTES)


def _record(line: bytes) -> bytes:
    return line[:-1] if line.endswith(b"\r") else line


def split_records(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, record bytes) of every non-blank line of ``data``."""
    for i, line in enumerate(data.split(b"\n")):
        if not is_blank(line):
            yield i + 1, _record(line)


def count_records(stream: BinaryIO, chunk_size: int = 1 << 22) -> int:
    """Non-blank lines of a stream, read in chunks (a line may span chunks)."""
    n = 0
    tail = b""
    while True:
        chunk = stream.read(chunk_size)
        if not chunk:
            break
        lines = (tail + chunk).split(b"\n")
        tail = lines.pop()
        n += sum(1 for line in lines if not is_blank(line))
    if not is_blank(tail):
        n += 1
    return n
