"""Files and directories the store creates are private to their owner, whatever the umask.

Conversations hold whatever people paste into them, so what the store writes
(the profile directory, the database and its ``-wal``/``-shm`` files, repair
backups and ledgers, databases set aside, exports) gets no group or other
permission bits: directories 0700, files 0600. Every file is opened through
:func:`open_private`: ``os.open`` with mode 0600 (the umask can only remove
bits from that), then ``fchmod`` before any data is written, which also
fixes a file that already existed with a wider mode, so no reader can open
it in between. Directories and files that already exist elsewhere keep their
mode: an administrator who shared a directory on purpose keeps that choice,
and ``hermes-state doctor`` warns about store files others can read.

SQLite creates ``-wal``, ``-shm`` and ``-journal`` files with the database
file's own permission bits, so a database created here 0600 keeps its
sidecars private too.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

__all__ = [
    "PRIVATE_DIR_MODE",
    "PRIVATE_MODE",
    "copy_private",
    "create_private_file",
    "make_private",
    "make_private_dirs",
    "move_private",
    "open_private",
    "private_writer",
    "replaced_atomically",
    "shared_bits",
    "write_private",
]

PRIVATE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700
_NEW_FILE = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)


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


def private_writer(path: os.PathLike[str] | str) -> BinaryIO:
    """``path`` opened for writing in binary, truncated, as a 0600 file (an existing file is made 0600 too)."""
    return os.fdopen(open_private(path, _NEW_FILE | os.O_TRUNC), "wb")


def create_private_file(path: os.PathLike[str] | str) -> bool:
    """Create ``path`` empty with mode 0600 unless it exists; returns whether it was created."""
    try:
        fd = open_private(path, _NEW_FILE | os.O_EXCL)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def make_private_dirs(directory: os.PathLike[str] | str) -> None:
    """Create ``directory`` and its missing parents, each 0700; directories that exist keep their mode."""
    missing: list[Path] = []
    current = Path(directory)
    while not current.is_dir():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, PRIVATE_DIR_MODE)
        except FileExistsError:
            if path.is_dir():  # made meanwhile by someone else: theirs, mode and all
                continue
            raise
        os.chmod(path, PRIVATE_DIR_MODE)


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


def make_private(path: os.PathLike[str] | str) -> None:
    """Set an existing file the store owns (a database moved aside) to 0600."""
    os.chmod(path, PRIVATE_MODE)


def move_private(source: Path, target: Path) -> None:
    """Rename ``source`` to ``target`` and make it 0600: what is set aside holds the conversations too."""
    os.replace(source, target)
    make_private(target)


def shared_bits(path: os.PathLike[str] | str) -> int | None:
    """The group and other permission bits of ``path`` (0 when private), or None when it does not exist."""
    try:
        return os.stat(path).st_mode & 0o077
    except FileNotFoundError:
        return None
