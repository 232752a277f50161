"""Kinds by name, for the plug-in registries (``eobatch.sources``, ``eobatch.sinks``): the built-in
ones are sub-packages of the registry's package, each with a ``KIND`` object, imported on first use
(a process imports only the kinds it uses); others are registered."""

from __future__ import annotations

import importlib
from typing import Generic, TypeVar

K = TypeVar("K")


class Registry(Generic[K]):
    def __init__(self, package: str, builtin: tuple[str, ...], protocol: type, what: str):
        self.package, self.builtin, self.protocol, self.what = package, builtin, protocol, what
        self.registered: dict[str, K] = {}

    def register(self, kind: K) -> K:
        """Make ``kind`` known under ``kind.name`` (a second kind of the same name replaces the first)."""
        if not isinstance(kind, self.protocol):
            raise TypeError(f"{kind!r} does not implement {self.package}.{self.protocol.__name__}")
        self.registered[kind.name] = kind  # type: ignore[attr-defined]
        return kind

    def names(self) -> list[str]:
        """The built-in kinds, in their order, then the others registered, by name."""
        return [*self.builtin, *sorted(set(self.registered) - set(self.builtin))]

    def get(self, name: str) -> K:
        """The kind called ``name``. Raises KeyError for a name no kind has."""
        if name not in self.registered and name in self.builtin:
            self.register(importlib.import_module(f"{self.package}.{name}").KIND)
        try:
            return self.registered[name]
        except KeyError:
            raise KeyError(f"unknown {self.what} kind {name!r} (known: {', '.join(self.names())})") from None
