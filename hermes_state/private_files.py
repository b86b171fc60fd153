"""Files and directories the store creates are private to their owner, whatever the umask.

Conversations hold whatever people paste into them, so what the store writes
(the profile directory, the database and its ``-wal``/``-shm`` files, repair
backups, exports) gets no group or other permission bits: directories 0700,
files 0600. Each mode is set on the new file descriptor before any data is
written, so no reader can open the file in between. What already exists
keeps its mode: an administrator who shared a directory on purpose keeps that
choice, and ``hermes-state doctor`` warns about store files others can read.

SQLite creates ``-wal``, ``-shm`` and ``-journal`` files with the database
file's own permission bits, so a database created here 0600 keeps its
sidecars private too.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

__all__ = [
    "PRIVATE_DIR_MODE",
    "PRIVATE_FILE_MODE",
    "make_private_dirs",
    "create_private_file",
    "open_private",
    "copy_private",
    "make_private",
    "shared_bits",
]

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
_NEW_FILE = os.O_WRONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)


def _set_mode(fd: int, path: Path) -> None:
    # The umask may have taken owner bits as well as added none: set the mode exactly.
    if hasattr(os, "fchmod"):
        os.fchmod(fd, PRIVATE_FILE_MODE)
    else:  # pragma: no cover - Windows, where these bits mean little
        os.chmod(path, PRIVATE_FILE_MODE)


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


def create_private_file(path: os.PathLike[str] | str) -> bool:
    """Create ``path`` empty with mode 0600 unless it exists; returns whether it was created."""
    target = Path(path)
    try:
        fd = os.open(target, _NEW_FILE | os.O_EXCL, PRIVATE_FILE_MODE)
    except FileExistsError:
        return False
    try:
        _set_mode(fd, target)
    finally:
        os.close(fd)
    return True


def open_private(path: os.PathLike[str] | str) -> BinaryIO:
    """Open ``path`` for writing in binary, truncated, with mode 0600 (an existing file is made 0600 too)."""
    target = Path(path)
    fd = os.open(target, _NEW_FILE | os.O_TRUNC, PRIVATE_FILE_MODE)
    try:
        _set_mode(fd, target)
        return os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise


def copy_private(source: os.PathLike[str] | str, destination: os.PathLike[str] | str) -> None:
    """Copy the bytes and the times of ``source`` to a new 0600 ``destination`` (``shutil.copy2`` would copy the mode)."""
    import shutil

    with open(source, "rb") as reader, open_private(destination) as writer:
        shutil.copyfileobj(reader, writer)
    stat = os.stat(source)
    os.utime(destination, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def make_private(path: os.PathLike[str] | str) -> None:
    """Set an existing file the store owns (a database moved aside) to 0600."""
    os.chmod(path, PRIVATE_FILE_MODE)


def shared_bits(path: os.PathLike[str] | str) -> int | None:
    """The group and other permission bits of ``path`` (0 when private), or None when it does not exist."""
    try:
        return os.stat(path).st_mode & 0o077
    except FileNotFoundError:
        return None
