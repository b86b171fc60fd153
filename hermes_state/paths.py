"""Where the store lives: the profile directory and the default database file.

Kept apart from ``config`` (which needs msgspec and PyYAML) so that the
package and the command can name these paths without loading either.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["hermes_home", "default_db_path"]


def hermes_home() -> Path:
    """Return the active profile directory: ``$HERMES_HOME`` or ``~/.hermes``."""
    raw = os.environ.get("HERMES_HOME", "").strip()
    return Path(raw).expanduser() if raw else Path.home() / ".hermes"


def default_db_path() -> Path:
    """Return ``<HERMES_HOME>/state.db``, resolved at call time."""
    return hermes_home() / "state.db"
