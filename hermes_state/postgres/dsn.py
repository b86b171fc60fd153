"""The PostgreSQL DSN: constructor-time validation (spec §1) and password redaction.

``postgresql+asyncpg://`` and ``postgresql+psycopg://`` URLs (current
upstream's form) with a host and a database name are accepted; there is no
environment fallback. The driver is asyncpg either way: the URL reaches it
with the ``+driver`` marker stripped, so asyncpg's own parser reads it.
libpq parameters asyncpg reads (``sslmode``, ...) work as they are; the two
it would misread are translated (``connect_timeout`` becomes asyncpg's
``timeout``, ``options`` its ``server_settings``, see ``libpq``); libpq
parameters with no asyncpg counterpart are refused by name; any other query
parameter becomes a server setting (settings the store passes explicitly,
like the forced ``default_transaction_read_only``, win over the URL's).
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .hosts import asyncpg_netloc, host_list, parse_hosts
from .libpq import LIBPQ_ONLY_URL_PARAMETERS, READ_ONLY_SETTING, parse_options
from .pooler import POOLER_MODES

__all__ = [
    "SCHEME", "SCHEMES", "asyncpg_dsn", "commit_outcome_timeout", "endpoint", "redact_dsn", "url_connect_kwargs",
    "url_store_options", "validate_dsn",
]

SCHEME = "postgresql+asyncpg://"
SCHEMES = (SCHEME, "postgresql+psycopg://")
# Query parameters read here rather than by asyncpg.
_TRANSLATED = ("connect_timeout", "options", "pooler", "listen_url")
# Query parameters for the store itself, never sent to the server.
_STORE_PARAMETERS = ("commit_outcome_timeout",)
# Driver options people put in URLs; none of them is a URL parameter of asyncpg.
_DRIVER_OPTIONS = ("statement_cache_size", "prepare_threshold", "prepared_statements")
# The store's own parameters (see ``pooler`` and ``lease_listener``); never sent to the server.
STORE_PARAMETERS = ("pooler", "listen_url")


def validate_dsn(db_path: object) -> str:
    """Return ``db_path`` if it is a usable PostgreSQL URL; raises ValueError (naming the problem) otherwise."""
    if db_path is None:
        raise ValueError("PostgreSQL SessionDB requires an explicit postgresql+asyncpg:// or postgresql+psycopg:// URL")
    if not isinstance(db_path, str) or isinstance(db_path, os.PathLike) or not db_path.startswith(SCHEMES):
        raise ValueError(
            "db_path must be a postgresql+asyncpg:// or postgresql+psycopg:// URL (the driver is asyncpg either way); "
            "environment/database-file fallback is disabled"
        )
    try:
        parts = urlsplit(db_path)
        parse_hosts(db_path)  # one host or a libpq host list, in the netloc or as ?host=&port=
    except ValueError as exc:
        message = str(exc)
        raise ValueError(message if message.startswith("db_path") else "db_path must include a PostgreSQL host and database name") from None
    if not parts.path.strip("/"):
        raise ValueError("db_path must include a PostgreSQL host and database name")
    url_connect_kwargs(db_path)  # the query parameters read here must be valid too
    url_store_options(db_path)
    return db_path


def _query(dsn: str) -> list[tuple[str, str]]:
    return parse_qsl(urlsplit(dsn).query, keep_blank_values=True)


def url_connect_kwargs(dsn: str) -> dict[str, Any]:
    """asyncpg ``connect`` arguments for the URL's ``connect_timeout`` and ``options``; raises ValueError naming them."""
    kwargs: dict[str, Any] = {}
    for key, value in _query(dsn):
        if key in LIBPQ_ONLY_URL_PARAMETERS:
            raise ValueError(f"db_path parameter {key!r} is a libpq setting asyncpg has no equivalent for; remove it")
        if key in _DRIVER_OPTIONS:  # asyncpg would send it to the server as a setting, which refuses it
            raise ValueError(
                f"db_path parameter {key!r} is not a server setting: behind a transaction pooler add "
                "pooler=transaction (it turns prepared statements off); otherwise set "
                "database.postgres.connect_args.statement_cache_size in config.yaml"
            )
        if key == "connect_timeout":
            if not value.isdigit() or int(value) < 1:
                raise ValueError(f"db_path parameter connect_timeout must be a whole number of seconds >= 1, not {value!r}")
            kwargs["timeout"] = float(value)
        elif key == "options":
            try:
                settings = parse_options(value)
            except ValueError as exc:
                raise ValueError(f"db_path parameter options: {exc}") from None
            if READ_ONLY_SETTING in settings:
                raise ValueError(f"db_path parameter options sets {READ_ONLY_SETTING}, which is controlled by read_only")
            kwargs.setdefault("server_settings", {}).update(settings)
    commit_outcome_timeout(dsn)
    return kwargs


def commit_outcome_timeout(dsn: str) -> float | None:
    """The URL's ``commit_outcome_timeout`` in seconds (None when absent); raises ValueError when not > 0."""
    for key, value in _query(dsn):
        if key == "commit_outcome_timeout":
            try:
                seconds = float(value)
            except ValueError:
                seconds = float("nan")
            if not 0 < seconds < float("inf"):
                raise ValueError(f"db_path parameter commit_outcome_timeout must be a number of seconds > 0, not {value!r}")
            return seconds
    return None


def url_store_options(dsn: str) -> dict[str, str]:
    """The URL's ``pooler`` and ``listen_url`` parameters (validated); raises ValueError naming them."""
    options = {k: v for k, v in _query(dsn) if k in STORE_PARAMETERS}
    if options.get("pooler", "none") not in POOLER_MODES:
        raise ValueError(f"db_path parameter pooler must be one of {', '.join(POOLER_MODES)}, not {options['pooler']!r}")
    if "listen_url" in options:
        try:
            validate_dsn(options["listen_url"])
        except ValueError as exc:
            raise ValueError(f"db_path parameter listen_url: {exc}") from None
    return options


def redact_dsn(dsn: str) -> str:
    """The DSN with any password replaced by ``***`` (for repr, logs and errors)."""
    try:
        parts = urlsplit(dsn)
        if "listen_url=" in parts.query:  # a URL inside the URL may carry a password of its own
            query = [(k, redact_dsn(v) if k == "listen_url" else v) for k, v in _query(dsn)]
            parts = parts._replace(query=urlencode(query, safe=":/@*"))
            dsn = urlunsplit(parts)
        if parts.password is None:
            return dsn
        netloc = parts.netloc.rsplit("@", 1)
        user = netloc[0].split(":", 1)[0]
        return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[1]}"))
    except ValueError:
        return "postgresql+asyncpg://<unparsable>"


def asyncpg_dsn(dsn: str) -> str:
    """The URL in the form asyncpg parses: ``postgresql://`` with every host (and port) in the netloc,
    without the parameters read here."""
    netloc, query = asyncpg_netloc(dsn)
    kept = urlencode([(k, v) for k, v in query if k not in _TRANSLATED and k not in _STORE_PARAMETERS])
    # Built by hand: urlunsplit drops the "//" of an empty netloc (a ?host= socket directory).
    return f"postgresql://{netloc}{urlsplit(dsn).path}" + (f"?{kept}" if kept else "")


def endpoint(dsn: str) -> str:
    """The URL's hosts as ``host:port[,host:port...]`` (port 5432 where absent), for error messages."""
    return host_list(dsn)
