"""The hosts a PostgreSQL URL lists, in both of libpq's multi-host forms, and how errors name them.

libpq (and so upstream's psycopg URLs) accepts the host list two ways:
``postgresql://h1:p1,h2:p2/db`` and ``postgresql:///db?host=h1,h2&port=p1,p2``
(a single port applies to every host; a list must have one per host). asyncpg
reads the first form fully but ignores a query ``port`` list when the
netloc names hosts, so :func:`asyncpg_netloc` rewrites either form into the
first one. Errors name the host a connection was talking to, or this list
when no connection was made: never a default the URL does not contain.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

__all__ = ["Host", "asyncpg_netloc", "host_list", "parse_hosts", "peer"]

Host = tuple[str, int]
_DEFAULT_PORT = 5432


def _split_hostspec(spec: str) -> tuple[str, str]:
    """``(host, port text)`` of one ``host[:port]`` / ``[v6][:port]`` / ``/socket/dir`` entry."""
    if spec.startswith("["):
        host, sep, rest = spec[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"db_path host {spec!r} is not a valid [IPv6]:port")
        return host, rest[1:]
    if spec.startswith("/"):
        return spec, ""
    host, _, port = spec.partition(":")
    return host, port


def _port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"db_path port {text!r} is not a port number (1-65535)")
    return int(text)


def parse_hosts(dsn: str) -> tuple[Host, ...]:
    """Every ``(host, port)`` the URL lists, in order; raises ValueError naming the problem (or no host)."""
    parts = urlsplit(dsn)
    netloc_hosts = parts.netloc.rpartition("@")[2]
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    specs = [unquote(s) for s in netloc_hosts.split(",")] if netloc_hosts else query.get("host", "").split(",")
    if not any(specs):
        raise ValueError("db_path must include a PostgreSQL host and database name")
    if not all(specs):
        raise ValueError(f"db_path host list {','.join(specs)!r} has an empty entry")
    pairs = [_split_hostspec(s) for s in specs]
    query_ports = [p.strip() for p in query["port"].split(",")] if query.get("port") else []
    if query_ports and any(port for _, port in pairs):
        raise ValueError("db_path gives ports both after the hosts and in ?port=; keep one of them")
    if len(query_ports) > 1 and len(query_ports) != len(pairs):
        raise ValueError(f"db_path lists {len(pairs)} host(s) but {len(query_ports)} ports; give one port, or one per host")
    hosts: list[Host] = []
    for index, (host, port) in enumerate(pairs):
        if not host:
            raise ValueError(f"db_path host list entry {specs[index]!r} has no host")
        text = port or (query_ports[index if len(query_ports) > 1 else 0] if query_ports else "")
        hosts.append((host, _port(text) if text else _DEFAULT_PORT))
    return tuple(hosts)


def _format(host: str, port: int) -> str:
    if host.startswith("/"):
        return f"{host} (port {port})"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def host_list(dsn: str) -> str:
    """``h1:p1,h2:p2`` (port 5432 where the URL gives none), for messages; the raw netloc if unparsable."""
    try:
        return ",".join(_format(h, p) for h, p in parse_hosts(dsn))
    except ValueError:
        return urlsplit(dsn).netloc.rpartition("@")[2] or "<no host>"


def asyncpg_netloc(dsn: str) -> tuple[str, list[tuple[str, str]]]:
    """The netloc (user info kept) listing every host with its port, and the query without ``host``/``port``."""
    parts = urlsplit(dsn)
    query = parse_qsl(parts.query, keep_blank_values=True)
    if not any(key in ("host", "port") for key, _ in query):
        return parts.netloc, query  # already the form asyncpg reads
    userinfo = parts.netloc.rpartition("@")[0]
    hosts = []
    for host, port in parse_hosts(dsn):
        if host.startswith("/"):  # a socket directory cannot sit in a netloc: keep the libpq query form
            return parts.netloc, query
        hosts.append(_format(host, port))
    netloc = (userinfo + "@" if userinfo else "") + ",".join(hosts)
    return netloc, [(k, v) for k, v in query if k not in ("host", "port")]


def peer(conn: Any, fallback: str) -> str:
    """``host:port`` a live asyncpg connection talks to (asyncpg keeps it as ``_addr``), else ``fallback``."""
    addr = getattr(conn, "_addr", None)
    if isinstance(addr, tuple) and len(addr) >= 2:
        return _format(str(addr[0]), int(addr[1]))
    if isinstance(addr, str):
        return addr
    return fallback
