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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

__all__ = ["PRIVATE_MODE", "copy_private", "open_private", "replaced_atomically", "write_private"]

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


@contextmanager
def replaced_atomically(path: Path, *, private: bool = True, tag: str = "tmp") -> Iterator[BinaryIO]:
    """Yield a file beside ``path`` for its new content; a clean exit flushes it to disk and renames it over ``path``.

    On an error the partial file is removed and ``path`` is left as it was.
    ``private`` creates the file through :func:`open_private` (mode 0600).
    """
    temp = path.with_name(f".{path.name}.{os.getpid()}.{tag}")
    try:
        with os.fdopen(open_private(temp), "wb") if private else open(temp, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def write_private(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically, as a private file."""
    with replaced_atomically(path) as handle:
        handle.write(data)


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
