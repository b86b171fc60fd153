"""Importing the modules a package lists, so their decorators register (commands, handlers, queries).

Packages list their modules instead of discovering them: listing a directory
at import would block the event loop of a host whose first store call imports
the backend. tests/test_import_graph.py checks each list against its directory.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

__all__ = ["import_modules"]


def import_modules(package: str, names: Iterable[str]) -> None:
    """Import ``<package>.<name>`` for each name; returns None."""
    for name in names:
        importlib.import_module(f"{package}.{name}")
