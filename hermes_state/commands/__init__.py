"""Write commands: one frozen msgspec struct per write operation.

The facade validates arguments and encodes values, then builds one of these;
the actor queues it; a backend handler turns it into SQL. Commands hold data
only: no I/O, no SQL, no callables, so they can be logged, counted, encoded
with msgspec and replayed in tests.
"""

from __future__ import annotations

from typing import Union

from .base import Command
from .messages import AppendMessages, MessageRow, ReplaceMessages
from .meta import SetMeta
from .sessions import (
    DeleteSession,
    EndSession,
    ReopenSession,
    UpdateSessionMeta,
    UpdateSessionModel,
    UpdateSystemPrompt,
    UpsertSession,
)
from .usage import RecordAuxiliaryUsage, UpdateTokenCounts

# Every concrete command; decode a mixed stream with ``msgspec.msgpack.decode(data, type=AnyCommand)``.
AnyCommand = Union[
    AppendMessages, ReplaceMessages, SetMeta, DeleteSession, EndSession, ReopenSession,
    UpdateSessionMeta, UpdateSessionModel, UpdateSystemPrompt, UpsertSession,
    RecordAuxiliaryUsage, UpdateTokenCounts,
]

__all__ = [
    "AnyCommand",
    "Command",
    "AppendMessages",
    "MessageRow",
    "ReplaceMessages",
    "SetMeta",
    "DeleteSession",
    "EndSession",
    "ReopenSession",
    "UpdateSessionMeta",
    "UpdateSessionModel",
    "UpdateSystemPrompt",
    "UpsertSession",
    "RecordAuxiliaryUsage",
    "UpdateTokenCounts",
]
