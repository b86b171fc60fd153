"""Which process table a compression lease's ``pid=`` names: the lease's host token.

Workers on many machines share one PostgreSQL database, so a ``pid=<N>``
holder means something only where it was written. Each lease row records
the token of the writer's process table (``holder_host``): the kernel's
boot id plus the PID namespace, so two containers with their own PID
namespaces, or one host after a reboot, never match. A store judges a
holder dead (as SQLite does on its one machine) only when the row's token
is its own; any other row ends by expiry or release alone.
"""

from __future__ import annotations

import os

__all__ = ["LOCAL_HOST", "is_local", "local_host_token"]


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


# Read once: a process does not change boot or PID namespace while it runs.
LOCAL_HOST: str | None = local_host_token()


def is_local(token: str | None) -> bool:
    """Whether a lease row's ``holder_host`` is this process table (None, from another writer or version: no)."""
    return token is not None and token == LOCAL_HOST
