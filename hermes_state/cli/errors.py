"""Exit codes and the one error type the command layer raises."""

from __future__ import annotations

__all__ = ["OK", "FAILURE", "USAGE", "NOT_FOUND", "MISMATCH", "CliError", "EXIT_CODES_HELP"]

OK = 0
FAILURE = 1
USAGE = 2
NOT_FOUND = 3
MISMATCH = 4

EXIT_CODES_HELP = """exit codes:
  0  success
  1  failure (the message says what went wrong)
  2  usage error (bad arguments)
  3  not found (no such session, or no database file for a read command)
  4  the two stores differ (copy or verify), or an import met rows the store holds with other values"""


class CliError(Exception):
    """A failure the command reports as one line, with its exit code."""

    def __init__(self, message: str, code: int = FAILURE) -> None:
        super().__init__(message)
        self.code = code
