"""Ctrl-C and SIGTERM for the command: one line and exit 130 or 143, never a traceback.

:class:`SignalGuard` handles both signals from the first line of the command
to its exit. Outside the command's event loop (start-up, argument parsing,
printing the result) a signal raises :class:`Interrupted`, which the command
turns into its exit line. While the command's coroutine runs, the signal
cancels that coroutine instead: ``async with`` blocks close their stores, so
queued writes commit or roll back whole and files are not left half written.
A second signal during that clean-up stops the process at once (every
transaction the stores run is atomic, so that is still consistent).

Imports stay light: this module runs before anything else is loaded.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any, Callable

__all__ = ["SIGNALS", "Interrupted", "SignalGuard", "exit_code", "exit_line"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_WORDS: dict[int, str] = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated"}


def exit_code(signum: int) -> int:
    """The shell's convention: 128 + the signal number (130 for SIGINT, 143 for SIGTERM)."""
    return 128 + signum


def exit_line(signum: int) -> str:
    """The one line the command prints when a signal ends it."""
    return f"hermes-state: {_WORDS.get(signum, f'stopped by signal {signum}')}"


class Interrupted(BaseException):
    """A signal arrived while no command coroutine was running (a BaseException, like KeyboardInterrupt)."""

    def __init__(self, signum: int) -> None:
        super().__init__(exit_line(signum))
        self.signum = signum


class SignalGuard:
    """Owns SIGINT and SIGTERM for one run of the command; ``signum`` is the first signal received, if any.

    Modes: ``raise`` (plain code: raise :class:`Interrupted`), ``defer`` (an
    event loop is starting or finishing: only remember the signal),
    ``cancel`` (the command's task runs: cancel it), ``exit`` (the command
    is over: leave the process with the signal's line and code). A second
    signal in any mode leaves the process at once.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self.mode = "raise"
        self._cancel: Callable[[], Any] | None = None
        self._previous: dict[int, Any] = {}
        self._reported = False

    def install(self) -> SignalGuard:
        """Take over both signals (main thread only: elsewhere Python cannot install handlers)."""
        for signum in SIGNALS:
            try:
                self._previous[signum] = signal.signal(signum, self._handle)
            except ValueError:  # not the main thread: leave the signals to their owner
                break
        return self

    def restore(self) -> None:
        """Give the signals back to the handlers that were there before :meth:`install`."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def set_mode(self, mode: str, cancel: Callable[[], Any] | None = None) -> None:
        """Switch mode; ``cancel`` (for ``cancel`` mode) must be safe to call from a signal handler."""
        self.mode, self._cancel = mode, cancel
        if mode == "cancel" and cancel is not None and self.signum is not None:
            cancel()  # a signal that arrived while the loop was starting

    def report(self) -> int:
        """Print the signal's line (once) and return its exit code."""
        assert self.signum is not None
        if not self._reported:
            self._reported = True
            print(exit_line(self.signum), file=sys.stderr, flush=True)
        return exit_code(self.signum)

    def _handle(self, signum: int, frame: Any) -> None:
        first = self.signum is None
        if first:
            self.signum = signum
        if self.mode == "exit" or not first:
            self._exit_now()
        if self.mode == "cancel" and self._cancel is not None:
            self._cancel()
        elif self.mode == "raise":
            raise Interrupted(signum)

    def _exit_now(self) -> None:
        assert self.signum is not None
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # a closed pipe, or the handler interrupted a write to it
                pass
        if not self._reported:
            self._reported = True
            try:
                os.write(2, (exit_line(self.signum) + "\n").encode())
            except OSError:
                pass
        os._exit(exit_code(self.signum))
