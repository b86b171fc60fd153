"""Turn-lease releases from other processes on this host, through datagram sockets beside the store file.

SQLite has no NOTIFY, so a waiter in another process would only see a
release at its next poll. Instead, every store that has a waiter binds a
unix datagram socket in ``<store file>-wake/`` (the directory 0700, the
socket 0600, both the store owner's), and a release sends the
conversation's wake key (32 hex digits, ``lease_wakeups.wake_key``) to every
socket there. A received key goes to the process-wide wake-up registry.

A wake-up is only a hint: polling the lease stays the fallback, so a lost
datagram, a full receive buffer or a directory we may not use costs at most
a poll interval. Receiving runs on the event loop through ``add_reader``
(non-blocking ``recv``); everything touching the file system (the
directory, binding, listing the peers, unlinking) runs in a worker thread.
Sockets of processes that died are removed by the next sender that finds
them refusing. Paths too long for ``sun_path`` go through
``/proc/self/fd/<directory fd>/``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import secrets
import socket
import stat
import time
from pathlib import Path

from ..lease_wakeups import notify_release
from ..off_loop import off_loop

__all__ = ["LeaseWakeSockets", "wake_directory"]

log = logging.getLogger("hermes_state.sqlite")

RETRY_SECONDS = 5.0
_SUN_PATH_MAX = 100  # sun_path holds 108 bytes on Linux; keep a margin
_KEY_BYTES = 32


def wake_directory(store_path: Path) -> Path:
    """The directory of wake-up sockets beside ``store_path``."""
    return Path(f"{store_path}-wake")


def _private_directory(directory: Path) -> int:
    """Create ``directory`` 0700 if missing; returns an fd on it. Refuses one another user could write to."""
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    info = os.fstat(fd)
    if info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) & 0o077:
        os.close(fd)
        raise PermissionError(f"{directory} is not a private directory of this user")
    return fd


def _address(directory: Path, dirfd: int, name: str) -> str:
    full = str(directory / name)
    return full if len(os.fsencode(full)) <= _SUN_PATH_MAX else f"/proc/self/fd/{dirfd}/{name}"


class LeaseWakeSockets:
    """The wake-up sockets of one SQLite store: bound on its first wait, closed with the store."""

    def __init__(self, store_path: Path, database: str) -> None:
        self.directory = wake_directory(store_path)
        self._database = database
        self._prefix = f"{os.getpid()}-"
        self._sock: socket.socket | None = None
        self._name: str | None = None
        self._dirfd: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock: asyncio.Lock | None = None
        self._failed_at = float("-inf")
        self.notices = 0  # wake-ups received (tests and stats)

    @property
    def listening(self) -> bool:
        return self._sock is not None

    async def ensure(self) -> bool:
        """Bind this store's socket unless bound (or a recent attempt failed); returns whether it listens."""
        if self._sock is not None:
            return True
        if time.monotonic() - self._failed_at < RETRY_SECONDS:
            return False
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._sock is not None:
                return True
            try:
                sock, dirfd, name = await off_loop(self._bind)
            except OSError as exc:
                self._failed_at = time.monotonic()
                log.warning("no turn-lease wake-up socket in %s (%s); waiters poll instead", self.directory, exc)
                return False
            self._loop = asyncio.get_running_loop()
            self._sock, self._dirfd, self._name = sock, dirfd, name
            self._loop.add_reader(sock.fileno(), self._on_readable)
            return True

    def _bind(self) -> tuple[socket.socket, int, str]:
        for attempt in range(2):  # a closing peer may remove the empty directory in between
            dirfd = _private_directory(self.directory)
            name = f"{self._prefix}{secrets.token_hex(6)}.sock"
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                sock.bind(_address(self.directory, dirfd, name))
                os.chmod(name, 0o600, dir_fd=dirfd)
                sock.setblocking(False)
                return sock, dirfd, name
            except FileNotFoundError:
                sock.close()
                os.close(dirfd)
                if attempt:
                    raise
            except BaseException:
                sock.close()
                os.close(dirfd)
                raise
        raise AssertionError("unreachable")

    def _on_readable(self) -> None:
        sock = self._sock
        while sock is not None:
            try:
                data = sock.recv(64)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            if len(data) == _KEY_BYTES:
                self.notices += 1
                notify_release(self._database, data.decode("ascii", "replace"))

    async def announce(self, key: str) -> None:
        """Send ``key`` to the sockets of the other processes on this store (a worker thread lists them)."""
        try:
            await off_loop(self._broadcast, key.encode("ascii"))
        except OSError as exc:
            log.debug("turn-lease wake-up broadcast failed: %s", exc)

    def _broadcast(self, payload: bytes) -> None:
        try:
            dirfd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:  # nobody waits in another process (or we may not look): nothing to do
            return
        try:
            names = [n for n in os.listdir(dirfd) if n.endswith(".sock") and not n.startswith(self._prefix)]
            if not names:
                return
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
                sender.setblocking(False)
                for name in names:
                    self._send(sender, dirfd, name, payload)
        finally:
            os.close(dirfd)

    def _send(self, sender: socket.socket, dirfd: int, name: str, payload: bytes) -> None:
        try:
            sender.sendto(payload, _address(self.directory, dirfd, name))
        except (BlockingIOError, InterruptedError):
            pass  # its queue is full: that process has wake-ups to read already
        except OSError as exc:
            if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):  # its process is gone
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=dirfd)

    async def close(self) -> None:
        """Stop listening and remove this store's socket (and the directory, once empty)."""
        sock, self._sock = self._sock, None
        if sock is None:
            return
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(sock.fileno())
        sock.close()
        dirfd, name = self._dirfd, self._name
        self._dirfd = self._name = None
        if dirfd is not None and name is not None:
            await off_loop(self._remove, dirfd, name)

    def _remove(self, dirfd: int, name: str) -> None:
        try:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=dirfd)
            with contextlib.suppress(OSError):
                os.rmdir(self.directory)  # fails while another process listens there: fine
        finally:
            os.close(dirfd)
