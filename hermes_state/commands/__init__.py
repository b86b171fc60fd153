"""Write commands: one frozen msgspec struct per write operation.

The facade validates arguments and encodes values, then builds one of these;
the actor queues it; a backend handler turns it into SQL. Commands hold data
only: no I/O, no SQL, no callables, so they can be logged, counted, encoded
with msgspec and replayed in tests.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Union

from .base import Command
from .leases import AcquireTurnLease, RefreshTurnLease, ReleaseTurnLease, TurnFence, WithdrawTurnTicket
from .messages import AppendMessages, MessageRow, PopMessage, ReplaceMessages
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

# Import every command module so each Command subclass exists before the union is built.
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def _concrete(cls: type[Command]) -> list[type[Command]]:
    found: list[type[Command]] = []
    for sub in cls.__subclasses__():
        found.append(sub)
        found.extend(_concrete(sub))
    return found


# Every concrete command; decode a mixed stream with ``msgspec.msgpack.decode(data, type=AnyCommand)``.
AnyCommand: Any = Union[tuple(_concrete(Command))]  # type: ignore[valid-type]

__all__ = [
    "AnyCommand",
    "Command",
    "AcquireTurnLease",
    "RefreshTurnLease",
    "ReleaseTurnLease",
    "TurnFence",
    "WithdrawTurnTicket",
    "AppendMessages",
    "MessageRow",
    "PopMessage",
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
