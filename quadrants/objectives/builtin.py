"""Importing this module registers every built-in objective: each module of quadrants/objectives/
other than the shared ones below registers itself when imported, so a new objective is one new file
(plus its YAML and its test), with no list to extend."""

import importlib
import pkgutil

import quadrants.objectives as _package

# modules that hold shared pieces rather than an objective
SHARED = frozenset(
    {"__init__", "batch", "builtin", "common", "control", "loss", "metrics", "registry"}
)

for _module in pkgutil.iter_modules(_package.__path__):  # sorted by name
    if _module.name not in SHARED:
        importlib.import_module(f"{_package.__name__}.{_module.name}")
