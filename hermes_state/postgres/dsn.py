"""The PostgreSQL DSN: constructor-time validation (spec §1) and password redaction.

Only ``postgresql+asyncpg://`` URLs with a host and a database name are
accepted; there is no environment fallback. The URL reaches asyncpg with the
``+asyncpg`` marker stripped, so asyncpg's own parser reads it: libpq
parameters such as ``sslmode`` work, and other query parameters become
``server_settings`` (settings the store passes explicitly, like the forced
``default_transaction_read_only``, win over the DSN's).
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

__all__ = ["SCHEME", "asyncpg_dsn", "endpoint", "redact_dsn", "validate_dsn"]

SCHEME = "postgresql+asyncpg://"


def validate_dsn(db_path: object) -> str:
    """Return ``db_path`` if it is a usable ``postgresql+asyncpg://`` URL; raises ValueError otherwise."""
    if db_path is None:
        raise ValueError("PostgreSQL SessionDB requires an explicit postgresql+asyncpg:// URL")
    if not isinstance(db_path, str) or isinstance(db_path, os.PathLike) or not db_path.startswith(SCHEME):
        raise ValueError(
            "db_path must be a postgresql+asyncpg:// URL; environment/database-file fallback is disabled"
        )
    try:
        parts = urlsplit(db_path)
        host = parts.hostname
    except ValueError:
        host = None
        parts = None
    if not host or parts is None or not parts.path.strip("/"):
        raise ValueError("db_path must include a PostgreSQL host and database name")
    return db_path


def redact_dsn(dsn: str) -> str:
    """The DSN with any password replaced by ``***`` (for repr, logs and errors)."""
    try:
        parts = urlsplit(dsn)
        if parts.password is None:
            return dsn
        netloc = parts.netloc.rsplit("@", 1)
        user = netloc[0].split(":", 1)[0]
        return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[1]}"))
    except ValueError:
        return "postgresql+asyncpg://<unparsable>"


def asyncpg_dsn(dsn: str) -> str:
    """The URL in the form asyncpg parses: ``postgresql://...``."""
    return "postgresql://" + dsn[len(SCHEME):]


def endpoint(dsn: str) -> str:
    """``host:port`` of the DSN (port 5432 when absent), for error messages."""
    parts = urlsplit(dsn)
    try:
        port = parts.port or 5432
    except ValueError:
        port = 5432
    return f"{parts.hostname}:{port}"
