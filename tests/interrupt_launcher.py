"""Run the ``hermes-state`` command and signal it at one exact moment (for the signal tests).

Usage: ``python tests/interrupt_launcher.py WHEN SIGNAL -- ARGS...`` where
``WHEN`` is

- ``import:MODULE``: when the command starts importing ``MODULE``;
- ``call:QUALNAME[:N]``: at the N-th (default first) call or resumption of
  the function or method ``QUALNAME`` (e.g. ``SessionWriter._import``);
- ``return:QUALNAME``: when ``QUALNAME`` returns (e.g. ``_main``, after the
  command printed its result);

and ``SIGNAL`` is ``SIGINT`` or ``SIGTERM``. The process sends the signal to
itself, so it lands at that moment and no other; then it runs exactly what
the ``hermes-state`` script runs (``hermes_state.cli.entry``). The launcher
prints ``launcher: signal sent`` on stderr when it fired, so a test knows the
moment was reached.
"""

from __future__ import annotations

import os
import signal
import sys
from importlib.abc import MetaPathFinder
from typing import Any


def _fire(signum: int) -> None:
    os.write(2, b"launcher: signal sent\n")
    os.kill(os.getpid(), signum)


class _ImportTrigger(MetaPathFinder):
    def __init__(self, module: str, signum: int) -> None:
        self.module, self.signum, self.fired = module, signum, False

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == self.module and not self.fired:
            self.fired = True
            _fire(self.signum)
        return None  # the real finders import it


def _profile_trigger(event_kind: str, qualname: str, nth: int, signum: int) -> Any:
    seen = 0

    def hook(frame: Any, event: str, arg: Any) -> None:
        nonlocal seen
        if event == event_kind and frame.f_code.co_qualname == qualname:
            seen += 1
            if seen == nth:
                sys.setprofile(None)
                _fire(signum)

    return hook


def main() -> None:
    when, signame, dashdash, *args = sys.argv[1:]
    assert dashdash == "--", "usage: interrupt_launcher.py WHEN SIGNAL -- ARGS..."
    signum = getattr(signal, signame)
    kind, _, spec = when.partition(":")
    if kind == "import":
        sys.meta_path.insert(0, _ImportTrigger(spec, signum))
    elif kind in ("call", "return"):
        qualname, _, nth = spec.partition(":")
        sys.setprofile(_profile_trigger(kind, qualname, int(nth or 1), signum))
    else:
        raise SystemExit(f"unknown moment {when!r}")
    sys.argv = ["hermes-state", *args]
    from hermes_state.cli import entry

    entry()


if __name__ == "__main__":
    main()
