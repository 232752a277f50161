"""A pipeline file's bytes to its YAML mapping, with every cost bounded before anything walks it
(pure Python, no Airflow, no pyspark).

A pipeline folder is shared: one DAG file builds every pipeline's DAG, the ledger page and ``eobatch
doctor`` load every file. Whatever bytes one file holds, reading it ends soon, in a mapping of text
keys or in a ``ConfigError`` naming the file, never another exception:

* the file: a regular file (never a FIFO, a device or a folder: opened without blocking) of at most
  ``MAX_FILE_BYTES``, UTF-8 text;
* the YAML: one document, nested at most ``MAX_DEPTH`` deep, at most ``MAX_NODES`` values once every
  alias is expanded (``&a`` / ``*a``: an alias counts as everything it stands for, so a "billion
  laughs" file is refused at its first alias past the bound; an alias inside its own anchor is
  refused), parsed within ``MAX_PARSE_SECONDS`` of this thread's CPU time (a busy machine never
  refuses a good file: a wall clock would);
* the values: YAML's plain types only (text, numbers, booleans, null, dates, lists, mappings; no
  ``!!binary``, ``!!set``, ``!!python/...`` or other tags), mapping keys text only (``1:`` or
  ``null:`` is refused naming its line).

The events are counted before any node is built (libyaml's parser when PyYAML has it, else
PyYAML's own; both keep no Python recursion per nesting level), and the nodes are built from them
here, without recursion.
"""

from __future__ import annotations

import os
import stat
import time
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.events import (
    AliasEvent,
    CollectionStartEvent,
    DocumentStartEvent,
    MappingEndEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
)
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

from ..errors import ConfigError

MAX_FILE_BYTES = 1 << 20  # 1 MiB: a pipeline with a schema of thousands of columns is a few hundred KiB
MAX_DEPTH = 32  # a pipeline's own keys nest 4 deep; transform options and notifier args may nest more
MAX_NODES = 5_000  # values (scalars, lists, mappings), aliases expanded: about 0.15 s of parsing at most
# a backstop: the bounds above keep a parse far below it (Airflow imports the DAG file, every
# pipeline of the folder, within its import timeout: 30 s by default)
MAX_PARSE_SECONDS = 2.0
MAX_MESSAGE_CHARS = 2_000  # an error shown for one file (an import error, a doctor line)

_TAG = "tag:yaml.org,2002:"
PLAIN_TAGS = frozenset(_TAG + t for t in ("str", "int", "float", "bool", "null", "timestamp", "seq", "map",
                                          "merge"))
_Parser = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_mapping(file: str) -> dict[str, Any]:
    """The YAML mapping of pipeline file ``file``: ``ConfigError`` naming it for anything else."""
    text = read_text(file)
    try:
        node = compose_bounded(text, file)
        data = SafeConstructor().construct_document(node) if node is not None else None
    except ConfigError:
        raise
    except yaml.YAMLError as e:
        raise ConfigError(file, "", clip(f"invalid YAML: {e}")) from None
    except Exception as e:  # noqa: BLE001 - a value the constructor cannot build, e.g. an int of 5000 digits
        raise ConfigError(file, "", clip(f"invalid YAML value: {type(e).__name__}: {e}")) from None
    if not isinstance(data, dict):
        raise ConfigError(file, "", "must be a YAML mapping of keys (name, mode, source, ...)")
    return data


def read_text(file: str, limit: int = MAX_FILE_BYTES, what: str = "a pipeline file") -> str:
    """The text of regular file ``file`` (at most ``limit`` bytes, UTF-8)."""
    data = read_bytes(file, limit, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ConfigError(file, "", f"is not UTF-8 text: byte 0x{data[e.start]:02x} at offset {e.start} "
                                    f"(line {line}); save it as UTF-8") from None


def read_bytes(file: str, limit: int, what: str) -> bytes:
    """At most ``limit`` bytes of regular file ``file``, opened without blocking (a FIFO never hangs)."""
    try:
        fd = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise ConfigError(file, "", f"cannot read: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(file, "", f"is not a regular file: {what} must be one")
        if st.st_size > limit:
            raise ConfigError(file, "", f"has {st.st_size} bytes, more than {limit}: {what} holds at most {limit}")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as e:
        raise ConfigError(file, "", f"cannot read: {e.strerror or e}") from None
    finally:
        os.close(fd)
    if size > limit:  # grew while read
        raise ConfigError(file, "", f"has more than {limit} bytes: {what} holds at most {limit}")
    return b"".join(chunks)


class _Bounds:
    """The running counts of one parse: refuses the first event past a bound, naming it."""

    def __init__(self, file: str, clock=time.thread_time):  # CPU time, not a busy machine's wall clock
        self.file, self.clock = file, clock
        self.deadline = clock() + MAX_PARSE_SECONDS
        self.nodes = 0

    def refuse(self, event: Any, message: str) -> ConfigError:
        mark = getattr(event, "start_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        return ConfigError(self.file, "", where + message)

    def count(self, event: Any, n: int) -> None:
        self.nodes += n
        if self.nodes > MAX_NODES:
            alias = " once its aliases (*name) are expanded" if isinstance(event, AliasEvent) else ""
            raise self.refuse(event, f"more than {MAX_NODES} YAML values{alias}: a pipeline file holds at most "
                                     f"{MAX_NODES}")
        if self.clock() > self.deadline:
            raise self.refuse(event, f"took more than {MAX_PARSE_SECONDS:g} s to parse")


class _Open:
    """A collection being built: its node, its children, the expanded count when it started."""

    __slots__ = ("node", "children", "start", "anchor")

    def __init__(self, node: Node, start: int, anchor: str | None):
        self.node, self.start, self.anchor = node, start, anchor
        self.children: list[Node] = []


def compose_bounded(text: str, file: str) -> Node | None:
    """The node tree of the single YAML document of ``text`` (None: empty), refused at the first
    event past a bound (``MAX_DEPTH``, ``MAX_NODES`` with aliases expanded, ``MAX_PARSE_SECONDS``)."""
    bounds, resolver = _Bounds(file), Resolver()
    anchors: dict[str, tuple[Node, int]] = {}  # anchor -> (node, expanded size)
    stack: list[_Open] = []
    root: list[Node] = []
    for event in yaml.parse(text, Loader=_Parser):
        if isinstance(event, DocumentStartEvent) and root:
            raise bounds.refuse(event, "holds more than one YAML document (---): a pipeline file is one mapping")
        node = _event_node(event, stack, anchors, bounds, resolver)
        if node is None:
            continue
        (stack[-1].children if stack else root).append(node)
    return root[0] if root else None


def _event_node(event: Any, stack: list[_Open], anchors: dict[str, tuple[Node, int]], bounds: _Bounds,
                resolver: Resolver) -> Node | None:
    """The node ``event`` completes (a scalar, an alias, a collection's end), else None."""
    anchor = getattr(event, "anchor", None)
    if isinstance(event, AliasEvent):
        if anchor not in anchors:
            raise bounds.refuse(event, f"alias *{anchor} is not defined before it, or is inside its own anchor "
                                       f"&{anchor} (a recursive value)")
        node, size = anchors[anchor]
        bounds.count(event, size)
        return node
    if isinstance(event, ScalarEvent):
        start = bounds.nodes
        bounds.count(event, 1)
        tag = event.tag if event.tag not in (None, "!") else resolver.resolve(ScalarNode, event.value, event.implicit)
        node = ScalarNode(_plain(tag, event, bounds), event.value, event.start_mark, event.end_mark, event.style)
        if anchor is not None:
            anchors[anchor] = (node, bounds.nodes - start)
        return node
    if isinstance(event, CollectionStartEvent):
        if len(stack) >= MAX_DEPTH:
            raise bounds.refuse(event, f"nested more than {MAX_DEPTH} deep: a pipeline file nests at most "
                                       f"{MAX_DEPTH} lists or mappings")
        start = bounds.nodes
        bounds.count(event, 1)
        kind = SequenceNode if isinstance(event, SequenceStartEvent) else MappingNode
        tag = event.tag if event.tag not in (None, "!") else resolver.resolve(kind, None, event.implicit)
        stack.append(_Open(kind(_plain(tag, event, bounds), [], event.start_mark, None, event.flow_style),
                           start, anchor))
        return None
    if isinstance(event, (SequenceEndEvent, MappingEndEvent)):
        done = stack.pop()
        done.node.end_mark = event.end_mark
        if isinstance(done.node, MappingNode):
            pairs = list(zip(done.children[::2], done.children[1::2]))
            for key, _value in pairs:
                _text_key(key, bounds)
            done.node.value = pairs
        else:
            done.node.value = done.children
        if done.anchor is not None:
            anchors[done.anchor] = (done.node, bounds.nodes - done.start)
        return done.node
    return None  # stream and document starts and ends


def _plain(tag: str, event: Any, bounds: _Bounds) -> str:
    if tag not in PLAIN_TAGS:
        raise bounds.refuse(event, f"the YAML tag {tag!r} is not allowed: a pipeline file holds text, numbers, "
                                   f"booleans, null, dates, lists and mappings only")
    return tag


def _text_key(key: Node, bounds: _Bounds) -> None:
    """A mapping key is text (or ``<<``, YAML's merge key)."""
    if isinstance(key, ScalarNode) and key.tag in (_TAG + "str", _TAG + "merge"):
        return
    shown = clip(repr(key.value), 80) if isinstance(key, ScalarNode) else "a list or mapping"
    raise bounds.refuse(key, f"the key {shown} is not text ({key.tag.removeprefix(_TAG)}): keys are names; quote "
                             f"it if it is meant as one")


def clip(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text``, cut at ``limit`` characters (an error message of one file stays short)."""
    return text if len(text) <= limit else text[: limit - 20] + f"... ({len(text) - limit + 20} more)"
