"""What a record of a JSON-lines landing file is: one definition, shared by the planner (which
counts the records of a planned range), the Spark job (which reads them) and the tests.

* A line is the bytes between two ``\\n`` bytes (or the start or end of the file). A ``\\r``
  just before the ``\\n`` belongs to the line terminator (``\\r\\n``) and is not part of the line.
* A line is blank, and is not a record, when it holds only the ASCII whitespace bytes
  space, ``\\t``, ``\\r``, ``\\x0b`` (VT) and ``\\x0c`` (FF), or nothing.
* A UTF-8 byte order mark (``EF BB BF``) at the very start of a file is not part of its first
  line (editors on Windows write one; Hadoop's line reader drops it too).
* Nothing else ends a line or makes it blank: a lone ``\\r``, U+0085 (NEL), U+2028 and U+2029
  are record content. A line made of them is a record (and is quarantined as malformed JSON),
  never silently dropped. Java disagrees by default (its ``$`` matches before a final U+0085,
  U+2028, U+2029 or lone ``\\r``), so the Spark job uses the expressions below, anchored with
  ``\\z`` (the very end of the input).

The job reads the lines with ``eobatch.jvm.BoundedLines`` (include/jvm/): this definition, with a
bound on what it holds of a line. A line longer than ``max_line_bytes(max_record_bytes)`` is never
held whole: its record is too large whatever its bytes, the job keeps its first bytes (what the
quarantine keeps of it) and its length (it goes to quarantine, at its line). Counting needs no bound: ``count_records`` holds one chunk.

Pure Python: no Airflow, no pyspark.
"""

from __future__ import annotations

import re
from typing import BinaryIO, Iterator

BLANK_BYTES = b" \t\r\x0b\x0c"
BOM = b"\xef\xbb\xbf"


# The quarantine keeps at most this many characters of a record's raw text (the stage job cuts it,
# replay refuses a record cut there).
RAW_CHARS = 65536


def max_line_bytes(max_record_bytes: int) -> int:
    """The longest line the job holds whole: a record of ``max_record_bytes`` and its ``\\r``, and
    at least what the quarantine keeps of a record (RAW_CHARS characters, 4 bytes at most each).
    A longer line's record is too large and its first bytes are all the quarantine keeps of it."""
    return max(max_record_bytes, 4 * RAW_CHARS) + 1

# The same rules as Java regular expressions, for Spark SQL (rlike / regexp_replace).
SPARK_BLANK_LINE = r"^[ \t\r\x0B\f]*\z"
SPARK_TRAILING_CR = r"\r\z"


def is_blank(line: bytes) -> bool:
    return not line.strip(BLANK_BYTES)


def _record(line: bytes) -> bytes:
    return line[:-1] if line.endswith(b"\r") else line


def split_records(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, record bytes) of every non-blank line of ``data`` (a whole file)."""
    if data.startswith(BOM):
        data = data[len(BOM):]
    for i, line in enumerate(data.split(b"\n")):
        if not is_blank(line):
            yield i + 1, _record(line)


# The \n before a blank line that ends in the buffer searched: one match per such line (only the
# \n is consumed, so blank lines in a row each match). Led by a literal, the search skips to the
# next \n and fails there at the first byte of a record: 6 times faster than a pattern anchored
# with a MULTILINE ^, which is tried at every byte (478 MB: 2.5 s -> 0.43 s, measured).
_NL_BEFORE_BLANK_LINE = re.compile(rb"\n(?=[ \t\r\x0b\x0c]*\n)")


def count_records(stream: BinaryIO, chunk_size: int = 1 << 22, max_bytes: int | None = None) -> int:
    """Non-blank lines of a stream, read in chunks (a line may span chunks, however long it is);
    of its first ``max_bytes`` bytes only when given (a file's size as planned: a file that grows
    while it is read is counted as it was).

    Counted in C, not line by line in Python: the lines that end in a chunk are its ``\\n`` bytes,
    minus the blank ones (a regular expression). Of a line still open at a chunk's end only
    whether it is blank so far is carried over, never its bytes: memory stays one chunk.
    """
    n = 0
    open_line, open_blank = False, True  # an unfinished line has bytes; all of them blank ones
    left = max_bytes
    head: bytes | None = b""  # the file's first bytes, until it is known whether they are a byte order mark
    while True:
        chunk = stream.read(chunk_size if left is None else min(chunk_size, left))
        if left is not None:
            left -= len(chunk)
        end = not chunk
        if head is not None:  # the file's first bytes: a byte order mark there is no line's
            head += chunk
            if len(head) < len(BOM) and not end:
                continue
            chunk, head = (head[len(BOM):] if head.startswith(BOM) else head), None
        if not chunk:
            if end:
                break
            continue
        first = chunk.find(b"\n")
        if first < 0:
            open_line, open_blank = True, open_blank and is_blank(chunk)
            continue
        if not (open_blank and is_blank(chunk[:first])):  # the open line ends here
            n += 1
        last = chunk.rfind(b"\n")
        # the complete lines after the first are counted in C: they start after the \n at
        # ``first`` and end at a \n up to ``last``; the blank ones among them, by the \n before them
        n += chunk.count(b"\n", first + 1, last + 1) - sum(1 for _ in _NL_BEFORE_BLANK_LINE.finditer(chunk, first, last + 1))
        rest = chunk[last + 1:]
        open_line, open_blank = bool(rest), is_blank(rest)
    if open_line and not open_blank:
        n += 1
    return n
