"""Commands that change session metadata, activity labels and individual messages.

These back the host-facing helpers of ``hermes_state.methods.listing``: cwd
and git metadata, model-config patches, billing routes, activity heartbeats,
clearing a transcript and back-filling the API sidecar of a user turn.
"""

from __future__ import annotations

from .base import Command
from .messages import ContentValue


class UpdateSessionCwd(Command, frozen=True):
    """Set the working directory; git fields only when given (or always with ``replace_git_meta``)."""

    session_id: str
    cwd: str
    git_branch: str | None = None
    git_repo_root: str | None = None
    replace_git_meta: bool = False


class PatchModelConfig(Command, frozen=True):
    """Merge a JSON object into ``model_config`` key by key (a JSON null removes the key).

    ``runtime_lock_model`` set means the patch is a runtime lock: the session
    model is filled from it (when not None) and the prompt reference dropped.
    Resolves to whether the session exists.
    """

    session_id: str
    patch_json: str
    runtime_lock: bool = False
    runtime_lock_model: str | None = None


class UpdateBillingRoute(Command, frozen=True):
    """Overwrite the billing provider and base URL (and mode when given); drop the prompt reference."""

    session_id: str
    provider: str | None
    base_url: str | None
    billing_mode: str | None = None


class BackfillRepoRoots(Command, frozen=True):
    """Fill an empty ``git_repo_root`` for every session whose cwd matches; resolves to rows changed."""

    pairs: tuple[tuple[str, str], ...]


class TouchSessionActivity(Command, frozen=True):
    """Stamp activity unless a newer stamp is already stored; resolves to whether it was written."""

    session_id: str
    at: float
    description: str
    provenance: str


class ClearSessionActivityLabels(Command, frozen=True):
    """Blank the activity description and provenance, keeping the timestamp."""

    session_id: str


class ClearMessages(Command, frozen=True):
    """Delete every message of a session and zero its counters."""

    session_id: str


class SetLatestUserApiContent(Command, frozen=True):
    """Set ``api_content`` on the newest active user row when its stored content matches."""

    session_id: str
    content: ContentValue
    api_content: str | None
