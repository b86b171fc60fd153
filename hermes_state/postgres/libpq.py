"""libpq spellings (what psycopg and ``postgresql+psycopg://`` URLs use) translated for asyncpg.

The driver stays asyncpg. Upstream's configuration names connection
settings the libpq way; these helpers read those names so such a
configuration keeps working:

- ``options``: libpq's string of server command-line switches. Only the
  switches that set a server parameter mean anything to a client
  connection: ``-c name=value``, ``-cname=value`` and ``--name=value``
  (``-`` in a name reads as ``_``, as the server reads it); whitespace
  separates switches unless escaped with ``\\``. They become asyncpg
  ``server_settings``.
- ``connect_timeout``: whole seconds, at least 1; asyncpg's ``timeout``.
- URL parameters libpq knows and asyncpg does not are refused by name
  (asyncpg would send them to the server as settings, which fails at the
  first connection instead of here).
"""

from __future__ import annotations

import re

__all__ = ["LIBPQ_ONLY_URL_PARAMETERS", "READ_ONLY_SETTING", "parse_options"]

# Forced by ``read_only=True``; never taken from configuration.
READ_ONLY_SETTING = "default_transaction_read_only"

# libpq connection parameters with no asyncpg counterpart (asyncpg reads host, port,
# dbname, user, password, passfile, the ssl* files and modes, target_session_attrs,
# krbsrvname, gsslib and service itself, and maps connect_timeout/options here).
LIBPQ_ONLY_URL_PARAMETERS = frozenset({
    "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout",
    "gssencmode", "gssdelegation", "channel_binding", "require_auth", "fallback_application_name",
    "hostaddr", "requirepeer", "sslcompression", "sslsni", "sslcertmode", "load_balance_hosts", "replication",
})

_SETTING_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.$]*")


def _switches(text: str) -> list[str]:
    """Split ``text`` at unescaped whitespace; ``\\x`` stands for ``x``."""
    words: list[str] = []
    current: list[str] = []
    escaped = started = False
    for char in text:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            escaped = started = True
        elif char.isspace():
            if started:
                words.append("".join(current))
            current, started = [], False
        else:
            current.append(char)
            started = True
    if escaped:
        raise ValueError("ends with an unfinished backslash escape")
    if started:
        words.append("".join(current))
    return words


def _setting(assignment: str) -> tuple[str, str]:
    name, sep, value = assignment.partition("=")
    name = name.replace("-", "_")
    if not sep or not _SETTING_NAME.fullmatch(name):
        raise ValueError(f"{assignment!r} is not name=value")
    return name, value


def parse_options(text: str) -> dict[str, str]:
    """The server settings an ``options`` string sets, in order (a repeated name keeps the last value).

    Raises ValueError (without naming the key: callers add it) for switches
    other than ``-c``/``--`` and malformed settings.
    """
    words = _switches(text)
    settings: dict[str, str] = {}
    position = 0
    while position < len(words):
        word = words[position]
        if word == "-c":
            if position + 1 == len(words):
                raise ValueError("-c needs a name=value after it")
            name, value = _setting(words[position + 1])
            position += 2
        elif word.startswith("-c"):
            name, value = _setting(word[2:])
            position += 1
        elif word.startswith("--"):
            name, value = _setting(word[2:])
            position += 1
        else:
            raise ValueError(f"{word!r} is not a -c name=value or --name=value setting")
        settings[name] = value
    return settings

