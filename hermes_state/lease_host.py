"""Which process table a lease's holder lives in, and whether that process still runs.

Workers on many machines (or containers) can share one database, so a pid
means something only where it was written. A lease row records the token of
the writer's process table (``holder_host``): the kernel's boot id plus the
PID namespace, so two containers with their own PID namespaces, or one host
after a reboot, never match. A store judges a holder dead only when the
row's token is its own; any other row ends by expiry or release alone.

Turn leases also record the acquiring process's pid and start time (from
``/proc``), never a pid parsed from the caller's holder string: a reused pid
has another start time, so it never keeps a dead holder's lease alive.
"""

from __future__ import annotations

import os
from typing import Any

from .off_loop import off_loop

__all__ = [
    "is_local", "local_host", "local_host_token", "own_process", "pid_is_gone", "process_identity", "process_is_gone",
    "process_started", "reads_proc",
]


def local_host_token() -> str | None:
    """``<boot id>:<pid namespace device>:<inode>``, or None where Linux's /proc does not say (never local)."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            boot = handle.read().strip()
        namespace = os.stat("/proc/self/ns/pid")
    except OSError:
        return None
    if not boot:
        return None
    return f"{boot}:{namespace.st_dev}:{namespace.st_ino}"


# Read once, on first use (not at import: the first import of the store may run on an event loop):
# a process does not change boot or PID namespace while it runs.
_host: list[str | None] = []


def local_host() -> str | None:
    """:func:`local_host_token`, read once per process (async code gets it through :func:`own_process` first)."""
    if not _host:
        _host.append(local_host_token())
    return _host[0]


def __getattr__(name: str) -> Any:
    if name == "LOCAL_HOST":  # the name earlier releases had as a constant
        return local_host()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def is_local(token: str | None) -> bool:
    """Whether a lease row's ``holder_host`` is this process table (None, from another writer or version: no)."""
    return token is not None and token == local_host()


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first), or None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def process_started(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks since boot (``/proc``), or None where unknown."""
    fields = _stat_fields(pid)
    try:
        return int(fields[19]) if fields is not None else None
    except (IndexError, ValueError):
        return None


# (pid, start time) of this process, read once; a forked child has another pid and reads its own.
_own: tuple[int, int | None] | None = None


def process_identity() -> tuple[str | None, int, int | None]:
    """``(host token, pid, start time)`` of the calling process, recorded with a lease it takes.

    Reads ``/proc`` the first time in each process (see :func:`own_process` for async callers).
    """
    global _own
    pid = os.getpid()
    if _own is None or _own[0] != pid:
        _own = (pid, process_started(pid))
    return local_host(), pid, _own[1]


async def own_process() -> tuple[str | None, int, int | None]:
    """:func:`process_identity`, with its one ``/proc`` read on a worker thread instead of the event loop."""
    if _own is None or _own[0] != os.getpid() or not _host:
        return await off_loop(process_identity)
    return process_identity()


def reads_proc(host: str | None, pid: int | None) -> bool:
    """Whether judging the holder ``(host, pid)`` reads ``/proc``: a local process other than this one.

    Async callers run such a judgement on a worker thread.
    """
    return is_local(host) and pid is not None and pid > 0 and pid != os.getpid()


def pid_is_gone(pid: int) -> bool:
    """True when no process of this PID namespace has ``pid``, or it is a zombie; any doubt answers False."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OSError, OverflowError):
        return False
    fields = _stat_fields(pid)
    return fields is not None and fields[0] == "Z"


def process_is_gone(host: str | None, pid: int | None, started: int | None) -> bool:
    """True only when the recorded process ran in this process table and no longer runs.

    A zombie counts as gone; so does a pid now held by a process that started
    at another time. Any doubt (another host, no pid, permission errors, no
    ``/proc``) answers False, so a live holder is never judged dead.
    """
    if not is_local(host) or pid is None or pid <= 0:
        return False
    if pid == os.getpid():
        return started is not None and process_identity()[2] not in (None, started)
    if pid_is_gone(pid):
        return True
    now_started = process_started(pid)
    return started is not None and now_started is not None and now_started != started
