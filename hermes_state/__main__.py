"""``python -m hermes_state``: the command-line entry point."""

from .cli import entry

entry()
