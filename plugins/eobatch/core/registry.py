"""Kinds by name, for the plug-in registries (``eobatch.sources``, ``eobatch.sinks``).

A registry knows three sorts of kinds:

* the built-in ones: sub-packages of the registry's package, each with a ``KIND`` object, imported
  on first use (a process imports only the kinds it uses);
* the kinds installed distributions publish: entry points of the registry's group (the package's
  name: ``eobatch.sources``, ``eobatch.sinks``), each named as its kind, whose value is its ``KIND``
  object (``module:KIND``), imported on first use too. One that cannot be used (its module does
  not import, its object does not implement the kind's protocol or is named otherwise, a built-in
  kind or another distribution has its name) is a ``KindUnavailable`` naming the distribution
  and the entry point: a lookup of its name raises it, every other kind goes on as before;
* the kinds registered in the process (``register``), which win over a published kind of the
  same name.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from typing import Generic, TypeVar

K = TypeVar("K")
log = logging.getLogger(__name__)


class KindUnavailable(KeyError):
    """A kind an installed distribution publishes that cannot be used (the message says why, naming
    the distribution and the entry point). A KeyError, as an unknown kind's: code that shows a
    recorded range by its kind shows it as recorded."""

    def __str__(self) -> str:
        return str(self.args[0])


def entry_point_text(ep: EntryPoint) -> str:
    """The entry point as its distribution declares it, and the distribution."""
    dist = f"{ep.dist.name} {ep.dist.version}" if ep.dist is not None else "an unnamed distribution"
    return f"entry point '{ep.name} = {ep.value}' (group {ep.group}) of distribution {dist}"


def missing_members(obj: object, protocol: type) -> list[str]:
    """The attributes and methods of ``protocol`` that ``obj`` lacks."""
    members = set(getattr(protocol, "__annotations__", {})) | {
        n for n, v in vars(protocol).items() if callable(v) and not n.startswith("_")}
    return sorted(m for m in members if not hasattr(obj, m))


def _mtime(path: str) -> int:
    try:
        return os.stat(path or ".").st_mtime_ns
    except OSError:
        return -1


class Registry(Generic[K]):
    """The kinds of ``package`` (a ``protocol`` each; ``what``: "source", "sink"). ``check``: what a
    kind that is not built in must also pass (ValueError or TypeError saying why not), e.g. its part
    of the configuration contract."""

    def __init__(self, package: str, builtin: tuple[str, ...], protocol: type, what: str,
                 check: Callable[[K], None] | None = None, group: str | None = None):
        self.package, self.builtin, self.protocol, self.what = package, builtin, protocol, what
        self.check, self.group = check, group or package
        self.registered: dict[str, K] = {}
        self._scan: tuple[tuple[tuple[str, int], ...], dict[str, list[EntryPoint]]] | None = None
        self._broken: dict[str, KindUnavailable] = {}

    def register(self, kind: K) -> K:
        """Make ``kind`` known under ``kind.name`` (a second kind of the same name replaces the first)."""
        self._conforms(kind)
        name: str = kind.name  # type: ignore[attr-defined]
        if name not in self.builtin and self.check is not None:
            self.check(kind)
        self.registered[name] = kind
        return kind

    def published(self) -> dict[str, list[EntryPoint]]:
        """The entry points of the registry's group, by name: read again when ``sys.path`` or one
        of its folders changed (a distribution installed or removed since)."""
        key = tuple((p, _mtime(p)) for p in sys.path)
        if self._scan is None or self._scan[0] != key:
            found: dict[str, list[EntryPoint]] = {}
            for ep in entry_points(group=self.group):
                found.setdefault(ep.name, []).append(ep)
            for name in sorted(set(found) & set(self.builtin)):
                log.warning("%s", self._clash(name, found[name]))
            self._scan, self._broken = (key, found), {}
        return self._scan[1]

    def names(self) -> list[str]:
        """The built-in kinds, in their order, then the others by name: registered, or published by
        an installed distribution (not imported until used)."""
        others = (set(self.registered) | set(self.published())) - set(self.builtin)
        return [*self.builtin, *sorted(others)]

    def get(self, name: str) -> K:
        """The kind called ``name``. Raises KeyError for a name no kind has, and KindUnavailable (a
        KeyError) for a published kind that cannot be used."""
        if name in self.registered:
            return self.registered[name]
        if name in self.builtin:
            return self.register(importlib.import_module(f"{self.package}.{name}").KIND)
        published = self.published().get(name)
        if not published:
            raise KeyError(f"unknown {self.what} kind {name!r} (known: {', '.join(self.names())})") from None
        if name not in self._broken:
            try:
                return self._load(name, published)
            except KindUnavailable as e:
                log.warning("%s", e)
                self._broken[name] = e
        raise self._broken[name]

    def kinds(self) -> list[K]:
        """Every kind that can be used, in the order of ``names``: a published kind that cannot be
        used is left out (``problems`` says why; a lookup of its name raises it)."""
        out = []
        for name in self.names():
            try:
                out.append(self.get(name))
            except KindUnavailable:
                continue
        return out

    def problems(self) -> dict[str, str]:
        """Why each kind installed distributions publish that cannot be used cannot, by name."""
        self.kinds()
        found = self.published()
        clashes = {n: str(self._clash(n, found[n])) for n in found if n in self.builtin}
        return {**clashes, **{n: str(e) for n, e in sorted(self._broken.items())}}

    def _conforms(self, kind: object) -> None:
        """TypeError when ``kind`` does not implement the registry's protocol, naming what it lacks."""
        if not isinstance(kind, self.protocol):
            missing = missing_members(kind, self.protocol)
            raise TypeError(f"{kind!r} does not implement {self.package}.{self.protocol.__name__}"
                            + (f" (it has no {', '.join(missing)})" if missing else ""))

    def _clash(self, name: str, published: list[EntryPoint]) -> KindUnavailable:
        return KindUnavailable(f"{entry_point_text(published[0])} is not used: {name!r} is a built-in {self.what} "
                               f"kind of eobatch; a plug-in kind needs a name of its own")

    def _load(self, name: str, published: list[EntryPoint]) -> K:
        """The kind of the one entry point named ``name``, checked, registered."""
        where = entry_point_text(published[0])
        if len(published) > 1:
            raise KindUnavailable(f"{self.what} kind {name!r} is published by more than one distribution: "
                                  f"{'; '.join(map(entry_point_text, published))}. Uninstall all but one")
        try:
            kind = published[0].load()
        except Exception as e:  # noqa: BLE001 - whatever a plug-in's import raises: that kind alone is unusable
            raise KindUnavailable(f"{self.what} kind {name!r} cannot be loaded: {where}: "
                                  f"{type(e).__name__}: {e}") from e
        try:
            self._conforms(kind)
        except TypeError as e:
            raise KindUnavailable(f"{self.what} kind {name!r} cannot be used: {where}: {e}") from e
        if kind.name != name:
            raise KindUnavailable(f"{self.what} kind {name!r} cannot be used: {where} names a kind called "
                                  f"{kind.name!r}; the entry point's name is the kind's")
        try:
            return self.register(kind)
        except Exception as e:  # noqa: BLE001 - the check's refusal, or what the plug-in's attributes raise
            raise KindUnavailable(f"{self.what} kind {name!r} cannot be used: {where}: {e}") from e
