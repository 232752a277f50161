"""The code blocks of a docs page, so that a test runs what the page tells a reader to run.

``blocks(page, heading)``: the fenced code blocks (language, text) under the section whose
heading is ``heading``, up to the next heading of the same or a higher level, in page order.
``block(page, heading, holding)``: the one block of that section whose text holds ``holding``
(AssertionError naming the page otherwise: the page changed, and so must the test that walks it).
``commands(text)``: a shell block's commands, one per line, with comments and blank lines left out.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs" / "site"
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")
_FENCE = re.compile(r"^(\s*)```(\w*)\s*$")


def blocks(page: str, heading: str) -> list[tuple[str, str]]:
    lines = (DOCS / page).read_text(encoding="utf-8").splitlines()
    out: list[tuple[str, str]] = []
    level = None
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _HEADING.match(line)
        if m and level is None and m.group(2) == heading:
            level = len(m.group(1))
        elif m and level is not None and len(m.group(1)) <= level:
            break
        elif level is not None and (f := _FENCE.match(line)):
            indent, lang, body = f.group(1), f.group(2), []
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
                i += 1
            out.append((lang, textwrap.dedent("\n".join(body)) + "\n"))
        i += 1
    assert level is not None, f"docs/site/{page} has no heading {heading!r}"
    return out


def block(page: str, heading: str, holding: str) -> str:
    found = [text for _lang, text in blocks(page, heading) if holding in text]
    assert len(found) == 1, f"docs/site/{page} section {heading!r}: {len(found)} code blocks hold {holding!r}"
    return found[0]


def commands(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        cmd = re.sub(r"\s+#.*$", "", line).strip()
        if cmd and not cmd.startswith("#"):
            out.append(cmd)
    return out
