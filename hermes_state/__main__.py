"""``python -m hermes_state``: the command-line entry point."""

from .cli import main

raise SystemExit(main())
