"""Compatibility entry point: ``from hermes_state_postgres import SessionDB`` (the reference's import path)."""

from __future__ import annotations

from hermes_state.postgres import PoolTimeoutError, SessionDB
from hermes_state.postgres.schema import SCHEMA_VERSION

__all__ = ["SCHEMA_VERSION", "PoolTimeoutError", "SessionDB"]
