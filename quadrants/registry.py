"""One registry type: the kinds that a config key chooses among by name.

`rollout.engine` names an `EngineKind` (quadrants/rollout/registry.py), `task.name` a `TaskKind`
(quadrants/tasks/registry.py); each is a `Registry` of its kinds, which own everything about them.
A kind has a `name`; registering a second kind of the same name, or a kind without one, is an
error; an unknown name is refused naming the key and the registered names. (The objectives'
registry, quadrants/objectives/registry.py, holds specs read from each function's signature, not
kinds.) A leaf: it imports nothing of quadrants.
"""

from __future__ import annotations

from typing import Generic, TypeVar

K = TypeVar("K")


class Registry(Generic[K]):
    """Kinds by name, in the order they were registered.

    `key`: the config key whose values are the names (`rollout.engine`), named by the refusal of
    an unknown one; `what`: how the refusal of a second registration calls a kind ("task")."""

    def __init__(self, key: str, what: str) -> None:
        self.key = key
        self.what = what
        self.kinds: dict[str, K] = {}

    def register(self, kind: K) -> K:
        """Register `kind` under `kind.name`; a second registration of the same name is an error."""
        name = getattr(kind, "name", "")
        if not name:
            raise ValueError(f"{type(kind).__name__} has no name")
        if name in self.kinds:
            raise ValueError(f"{self.what} {name!r} is already registered")
        self.kinds[name] = kind
        return kind

    def names(self) -> list[str]:
        return list(self.kinds)

    def get(self, name: str) -> K:
        """The kind registered under `name`; an unknown name lists the registered ones."""
        if name not in self.kinds:
            raise ValueError(f"{self.key}={name!r} is unknown; choose one of {self.names()}")
        return self.kinds[name]
