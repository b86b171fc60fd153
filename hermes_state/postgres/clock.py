"""The one clock of the PostgreSQL backend: the database server's.

Workers on several hosts share the database, and their clocks drift; every
lease decision (turn leases, the fence of a transcript write, compression
leases) reads the server's clock inside its own transaction instead.
``clock_timestamp()`` rather than ``now()``: a transaction that waited for a
lock must not judge expiry by the time it began.
"""

from __future__ import annotations

__all__ = ["DB_NOW"]

# Seconds since the Unix epoch, as a float8 (the unit of every lease column).
DB_NOW = "extract(epoch FROM clock_timestamp())::float8"
