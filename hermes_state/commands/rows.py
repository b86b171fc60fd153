"""Commands that write stored rows as they are (a lossless copy): no encoding, no guards."""

from __future__ import annotations

from typing import Any

from .base import Command


class RestoreRows(Command, frozen=True):
    """Insert the rows of a keyed table whose primary key is absent; rows already there stay as they are.

    ``rows`` hold one value per name in ``columns``, already checked
    against the store's column kinds. For ``sessions`` a parent link is
    written only when the parent exists once the batch is in (a child before
    its parent in the same call is fine). Resolves to ``{"inserted": n,
    "skipped": [key, ...], "detached": [session id, ...]}``.
    """

    table: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]


class RestoreMessages(Command, frozen=True):
    """Store ``rows`` as the session's messages at positions ``start``, ``start + 1``, ...

    Positions the session already holds are skipped, so a repeated call
    adds nothing twice; a ``start`` past the session's end is refused
    (``ValueError``). The session's counters grow by the rows inserted and
    their ``calls`` (each row's tool calls, as the store counts them), so
    they agree with the rows at every commit; ``counters`` (column, value)
    pairs, when given, are set instead once the rows are in: the source's
    values for a session whose messages are now complete. Resolves to the
    number of rows inserted.
    """

    session_id: str
    start: int
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    calls: tuple[int, ...]  # one per row
    counters: tuple[tuple[str, Any], ...] = ()
