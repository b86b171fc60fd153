"""Files only their owner may read or write (mode 0600), whatever the process umask is.

Every such file is created through :func:`open_private`: ``os.open`` with
mode 0600 (the umask can only remove bits from that) and then ``fchmod``,
which also fixes a file that already existed with a wider mode. The repair
ledger and the forensic backups of ``repair_state_db_schema`` are written
this way; they hold the same conversations as the database.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["PRIVATE_MODE", "copy_private", "open_private", "write_private"]

PRIVATE_MODE = 0o600


def open_private(path: os.PathLike[str] | str, flags: int = os.O_WRONLY | os.O_CREAT | os.O_TRUNC) -> int:
    """Open ``path`` with ``flags``, creating it with mode 0600 and forcing that mode; returns the descriptor."""
    fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0), PRIVATE_MODE)
    try:
        if hasattr(os, "fchmod"):  # POSIX; elsewhere the creation mode is all there is
            os.fchmod(fd, PRIVATE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_private(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically: a private file beside it, flushed to disk, renamed over it."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with os.fdopen(open_private(temp), "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def copy_private(source: Path, target: Path) -> None:
    """Copy ``source`` to a new private file ``target`` (``FileExistsError`` if it exists), keeping its times (ns)."""
    with open(source, "rb") as src:
        fd = open_private(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            with os.fdopen(fd, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
                out.flush()
                os.fsync(out.fileno())
            stat = os.fstat(src.fileno())
            os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        except BaseException:
            target.unlink(missing_ok=True)
            raise
