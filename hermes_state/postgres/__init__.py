"""The PostgreSQL backend (asyncpg): ``from hermes_state.postgres import SessionDB``.

Layout mirrors ``hermes_state.sqlite``: ``dsn`` (URL rules), ``config``
(``database.postgres``), ``pool`` (read pool), ``schema`` (DDL and the
handshake), ``content`` (structured content columns), ``errors`` (driver
error mapping), ``writer`` (one transaction per batch), ``handlers/*``
(write SQL per command), ``queries/*`` (named reads), ``pooler`` (behind a
transaction pooler), ``lease_listener`` (LISTEN for lease releases), ``backend`` (the
``Backend`` protocol), ``store`` (the ``SessionDB`` subclass). asyncpg is
imported only at the first awaited call, so constructing a store without the
``postgres`` extra installed works and the first call says what is missing.
"""

from __future__ import annotations

from .errors import TransactionPoolerError
from .pool import PoolTimeoutError
from .store import SessionDB

__all__ = ["PoolTimeoutError", "SessionDB", "TransactionPoolerError"]
