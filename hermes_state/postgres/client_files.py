"""asyncpg's client files (``~/.pgpass``, ``~/.postgresql/*``) read on a worker thread, never on the event loop.

``asyncpg.connect`` settles its arguments synchronously before its first
``await``: it looks for the password file and, for an ``sslmode`` that may
use TLS, for the client key and certificate, the root certificate and the
CRL. :class:`Connector` runs that step on a worker thread, with asyncpg's
own parser, and hands the connect what it found: the password (a callable
answering None when there is none, so asyncpg does not look again) and the
SSL context with its files already loaded.

An explicit context makes asyncpg insist on TLS, so the two lenient modes
are kept here: ``prefer`` falls back to a plain connection when the server
refuses TLS (remembered, so later connects go plain at once), ``allow``
tries plain first and TLS when the server demands it. Where asyncpg's parser
cannot be used (another asyncpg version), asyncpg settles the arguments
itself, as it always did.
"""

from __future__ import annotations

import inspect
import logging
import ssl
from typing import Any

from ..off_loop import off_loop

__all__ = ["Connector"]

log = logging.getLogger("hermes_state.postgres")


def _no_password() -> None:
    """The password when none is configured: asyncpg calls it only if the server asks for one."""
    return None


def _settled(dsn: str, kwargs: dict[str, Any]) -> Any:
    """asyncpg's connection parameters for ``dsn`` and ``kwargs`` (reads the client files), or None."""
    try:
        from asyncpg import connect_utils  # type: ignore[import-untyped]

        parse = connect_utils._parse_connect_dsn_and_args
        names = [name for name in inspect.signature(parse).parameters if name != "dsn"]
        _addresses, params = parse(dsn=dsn, **{name: kwargs.get(name) for name in names})
        return params
    except Exception:  # noqa: BLE001 - asyncpg reports a bad argument itself, in the connect
        log.debug("asyncpg's connect parameters could not be settled ahead", exc_info=True)
        return None


class Connector:
    """Opens asyncpg connections to one DSN, with the client-file lookups on a worker thread."""

    def __init__(self, dsn: str, kwargs: dict[str, Any]) -> None:
        self._dsn = dsn
        self._kwargs = kwargs
        self._plain = False  # under sslmode=prefer the server refused TLS: connect plain from now on

    async def connect(self) -> Any:
        """Return a new asyncpg connection (the driver's errors propagate unchanged)."""
        import asyncpg

        given_ssl = self._kwargs.get("ssl")
        if given_ssl is False or isinstance(given_ssl, ssl.SSLContext):
            lookups_ssl = False  # asyncpg reads no certificate file for these
        else:
            lookups_ssl = True
        params = await off_loop(_settled, self._dsn, self._kwargs)
        if params is None:
            return await asyncpg.connect(self._dsn, **self._kwargs)
        args = dict(self._kwargs)
        if args.get("password") is None:
            args["password"] = params.password if params.password is not None else _no_password
        if not lookups_ssl:
            return await asyncpg.connect(self._dsn, **args)
        context = params.ssl if isinstance(params.ssl, ssl.SSLContext) else None
        mode = getattr(params.sslmode, "name", "")
        if context is None:  # sslmode=disable, or a Unix socket
            return await asyncpg.connect(self._dsn, **{**args, "ssl": False})
        if mode == "prefer":
            if not self._plain:
                try:
                    return await asyncpg.connect(self._dsn, **{**args, "ssl": context})
                except ConnectionError as exc:
                    if "rejected SSL upgrade" not in str(exc):
                        raise
                    self._plain = True
            return await asyncpg.connect(self._dsn, **{**args, "ssl": False})
        if mode == "allow":
            try:
                return await asyncpg.connect(self._dsn, **{**args, "ssl": False})
            except asyncpg.InvalidAuthorizationSpecificationError:  # the server's pg_hba wants TLS
                pass
        return await asyncpg.connect(self._dsn, **{**args, "ssl": context})
