"""``serve``: a local, read-only web viewer of the store (transcripts, search, lineage, usage).

This module only declares the command: the web stack (Starlette, uvicorn,
Jinja2, the ``[web]`` extra) is imported when the command runs, so the rest
of the command line starts without it.
"""

from __future__ import annotations

import argparse
from typing import Callable

from .argtypes import port_number
from .errors import CliError

__all__ = ["add_parser"]


def add_parser(add: Callable[..., argparse.ArgumentParser]) -> None:
    parser = add("serve", "browse the store in a web browser: sessions, transcripts, search, lineage, usage (read-only)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1; any other address requires a token)")
    parser.add_argument("--port", type=port_number, default=8765, help="port (default 8765; 0 picks a free one)")
    parser.add_argument("--token", help="access token; generated and printed in the URL when --host is not loopback")
    parser.set_defaults(run=run_serve)


async def run_serve(args: argparse.Namespace) -> int:
    try:
        from ..web.server import serve
    except ImportError as exc:
        raise CliError(f"serve needs the web extra: pip install 'hermes-state[web]' ({exc})") from None
    return await serve(args.target, host=args.host, port=args.port, token=args.token)
