"""The one range type, and how a key of the run configuration states its allowed values beside
its default.

`Range` is how every numeric bound in quadrants is declared and checked: the keys of `RunConfig`
(quadrants/config.py), the probe's and the evaluation's own checks of them, and every objective's
hyper-parameters (`objectives.registry.check_range` builds one). Its one error message names the
key, the value and the allowed interval: `train.lr=-1.0 is out of range; allowed: (0, inf)`.

Every leaf key of `RunConfig` is declared with `checked` (a dataclass field whose metadata holds
its rule), so its default and its allowed values sit on one line of quadrants/config.py: either
`allowed`, the interval its values must lie in, or `why` it has none (a name checked against a
registry, a flag, a value whose bounds depend on another key and are checked there).
tests/unit/test_config_ranges.py walks every leaf key of `RunConfig` and fails for a key with
neither, so a new key cannot arrive unchecked. `check_ranges` (which walks the fields) runs first
in `RunPlan.parse` (quadrants/run_plan).

A list value (`train.betas`, `eval.ks`) is checked element by element; `null=True` allows None.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import MISSING, Field, dataclass, field, fields, is_dataclass
from typing import Any


@dataclass(frozen=True)
class Range:
    """An interval of allowed values: [low, high] with either end open; None = unbounded.

    `null=True` accepts None (the key's "not set" value); `why` is said after the interval when
    the bound is not obvious. (Whole numbers are the schema's types' business: Hydra refuses
    `train.steps=2.5` when it composes.)
    """

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    null: bool = False
    why: str = ""

    def contains(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            return False
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        return not (
            self.high is not None and (value > self.high or (self.high_open and value == self.high))
        )

    def text(self) -> str:
        low = "-inf" if self.low is None else f"{self.low:g}"
        high = "inf" if self.high is None else f"{self.high:g}"
        left = "(" if self.low is None or self.low_open else "["
        right = ")" if self.high is None or self.high_open else "]"
        text = f"{left}{low}, {high}{right}" + (", or null" if self.null else "")
        return f"{text} ({self.why})" if self.why else text

    def check(self, key: str, value: Any) -> None:
        """Raise ValueError naming `key`, its value and this range unless the value lies in it
        (each element of a list or tuple value; None only where `null`)."""
        if value is None and self.null:
            return
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        if any(item is None or not self.contains(item) for item in values):
            raise ValueError(f"{key}={_show(value)} is out of range; allowed: {self.text()}")


@dataclass(frozen=True)
class Choice:
    """A fixed set of allowed values (names, or a few numbers such as a sleep level), beside
    `Range`: its one error message names the key, the value and the choices,
    `train.behaviour_pass='never' is unknown; choose one of ['auto', 'always']`, then `hint`
    when given."""

    values: tuple[Any, ...]
    hint: str = ""

    def check(self, key: str, value: Any) -> None:
        """Raise ValueError naming `key`, its value and the choices unless the value is one."""
        if value not in self.values:
            hint = f" ({self.hint})" if self.hint else ""
            raise ValueError(f"{key}={value!r} is unknown; choose one of {list(self.values)}{hint}")


POSITIVE = Range(0, low_open=True)
NON_NEGATIVE = Range(0)
AT_LEAST_ONE = Range(1)
PROBABILITY_MASS = Range(0, 1, low_open=True)  # top_p

ALLOWED = "allowed"  # the metadata key of a field's Range or Choice
UNCHECKED = "unchecked"  # the metadata key of the reason a field has no Range


def checked(
    default: Any = MISSING,
    allowed: Range | Choice | None = None,
    *,
    why: str = "",
    factory: Any = MISSING,
) -> Any:
    """A field of the run configuration's schema with its rule beside its default: `allowed`, the
    range its values must lie in or the choice of values the schema itself fixes (both checked by
    `check_ranges`), or `why` it has none (where it is checked instead, e.g. against a set that
    another package owns, or why it needs no check). `factory` in place of `default` for a mutable
    default (dataclasses' `default_factory`)."""
    if (allowed is None) == (not why):
        raise TypeError("give a field either its allowed range or why it has none, not both")
    metadata = {ALLOWED: allowed} if allowed is not None else {UNCHECKED: why}
    return field(default=default, default_factory=factory, metadata=metadata)


def leaves(node: Any, prefix: str = "") -> Iterator[tuple[str, Any, Field]]:
    """(dotted key, value, dataclass field) of every leaf of a config dataclass instance, nested
    sections walked, in the order the schema declares them."""
    for item in fields(node):
        value = getattr(node, item.name)
        key = f"{prefix}{item.name}"
        if is_dataclass(value) and not isinstance(value, type):
            yield from leaves(value, f"{key}.")
        else:
            yield key, value, item


def lookup(cfg: Any, key: str) -> Any:
    """The value of dotted `key` ("train.lr") in a config object."""
    value = cfg
    for part in key.split("."):
        value = getattr(value, part)
    return value


def check_ranges(cfg: Any, prefix: str = "") -> None:
    """Raise ValueError naming the first key of `cfg` (a config dataclass instance; its keys named
    after `prefix`) whose value is outside the range or choice its field declares."""
    for key, value, item in leaves(cfg, prefix):
        allowed = item.metadata.get(ALLOWED)
        if allowed is not None:
            allowed.check(key, value)


def check_section(section: Any, prefix: str) -> None:
    """`check_ranges` for one section of the config (`cfg.probe` with prefix "probe"), for the
    commands that validate only the section they use."""
    check_ranges(section, prefix + ".")


def _show(value: Any) -> str:
    return str(list(value)) if isinstance(value, tuple) else str(value)
