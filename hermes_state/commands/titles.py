"""Commands for session titles and the conversation-wide archived/pinned/hidden/read flags."""

from __future__ import annotations

from typing import Literal

from .base import Command

TitleSource = Literal["derived", "llm", "user"]
LineageFlag = Literal["archived", "pinned", "hidden", "last_read_at"]


class SetSessionTitle(Command, frozen=True):
    """Set (``title`` None: clear) a title with the authority of ``source``.

    ``title`` is already sanitized. An automatic source (``derived``,
    ``llm``) never replaces a title of equal or higher authority. Resolves
    to whether the row changed.
    """

    session_id: str
    title: str | None
    source: TitleSource


class SetSessionTitleSource(Command, frozen=True):
    """Overwrite the provenance of an existing title. Resolves to whether a row changed."""

    session_id: str
    source: TitleSource


class SetLineageFlag(Command, frozen=True):
    """Set ``archived``, ``pinned``, ``hidden`` or ``last_read_at`` on every session of a conversation.

    Resolves to the number of sessions updated.
    """

    session_id: str
    column: LineageFlag
    value: float
