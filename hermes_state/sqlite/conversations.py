"""The stored conversation id of every session (SQLite): triggers that keep it, and the backfill.

``sessions.conversation_id`` names the conversation a session belongs to: a
session's own id, unless it continues a parent that ended by compression
(and is not an explicit fork: tool run, /branch, delegate or reset child, see
``continuation_sql``), in which case it is the parent's conversation id. Turn
leases are keyed by it and the hidden/pinned/archived/read flags apply to
all sessions sharing it, so both mean the same "conversation".

Triggers rather than handler code keep it right on every path that writes
``sessions`` (create, compression hand-off, import, an older writer on the
same file):

- a new row takes its parent's id when the parent already ended by compression;
- a parent ending by compression pulls its continuations' conversations into its own;
- a row that gains a parent later (imports link children after the fact) joins
  the parent's conversation on the same terms.

A parent row deleted later leaves the ids alone: pruning a compressed root
never moves its live tip to another key.
"""

from __future__ import annotations

from typing import Any

from .queries.compression import continuation_sql
from .script import run_script

__all__ = ["CONVERSATION_TRIGGERS", "CONVERSATION_TRIGGERS_SQL", "backfill_conversation_ids", "same_conversation_sql"]



def same_conversation_sql(param: str) -> str:
    """SQL true for the ``sessions`` rows in the conversation of the session whose id is ``param``."""
    return f"conversation_id = (SELECT conversation_id FROM sessions WHERE id = {param})"


CONVERSATION_TRIGGERS = (
    "sessions_conversation_on_insert",
    "sessions_conversation_on_compression",
    "sessions_conversation_on_adopt",
)

CONVERSATION_TRIGGERS_SQL = f"""
CREATE TRIGGER IF NOT EXISTS sessions_conversation_on_insert AFTER INSERT ON sessions
WHEN NEW.conversation_id IS NULL
BEGIN
    UPDATE sessions SET conversation_id = COALESCE(
        (SELECT COALESCE(p.conversation_id, p.id) FROM sessions AS p
         WHERE p.id = NEW.parent_session_id AND p.end_reason = 'compression' AND {continuation_sql('NEW')}),
        NEW.id)
    WHERE id = NEW.id;
END;

CREATE TRIGGER IF NOT EXISTS sessions_conversation_on_compression AFTER UPDATE OF end_reason ON sessions
WHEN NEW.end_reason = 'compression' AND OLD.end_reason IS NOT 'compression'
BEGIN
    UPDATE sessions SET conversation_id = COALESCE(NEW.conversation_id, NEW.id)
    WHERE conversation_id IN (
        SELECT c.conversation_id FROM sessions AS c WHERE c.parent_session_id = NEW.id AND {continuation_sql('c')})
      AND conversation_id IS NOT COALESCE(NEW.conversation_id, NEW.id);
END;

CREATE TRIGGER IF NOT EXISTS sessions_conversation_on_adopt AFTER UPDATE OF parent_session_id ON sessions
WHEN OLD.parent_session_id IS NULL AND NEW.parent_session_id IS NOT NULL
    AND NEW.conversation_id = NEW.id AND {continuation_sql('NEW')}
    AND EXISTS (SELECT 1 FROM sessions AS p WHERE p.id = NEW.parent_session_id AND p.end_reason = 'compression')
BEGIN
    UPDATE sessions SET conversation_id = (
        SELECT COALESCE(p.conversation_id, p.id) FROM sessions AS p WHERE p.id = NEW.parent_session_id)
    WHERE conversation_id = NEW.id;
END;
"""

# Every session reached from a conversation's first session through continuations of
# compression-ended parents, with that first session's id. UNION (not ALL) and the
# depth bound stop a corrupt parent cycle; rows on such a cycle keep their own id.
_BACKFILL_SQL = f"""
CREATE TEMP TABLE hermes_conversation_backfill (id TEXT PRIMARY KEY, cid TEXT NOT NULL);
WITH RECURSIVE conv(id, cid, depth) AS (
    SELECT s.id, s.id, 0 FROM sessions AS s
    WHERE NOT {continuation_sql('s')}
       OR NOT EXISTS (SELECT 1 FROM sessions AS p WHERE p.id = s.parent_session_id AND p.end_reason = 'compression')
    UNION
    SELECT c.id, conv.cid, conv.depth + 1 FROM conv
    JOIN sessions AS p ON p.id = conv.id
    JOIN sessions AS c ON c.parent_session_id = p.id
    WHERE p.end_reason = 'compression' AND {continuation_sql('c')} AND conv.depth < 100000
)
INSERT OR IGNORE INTO hermes_conversation_backfill (id, cid) SELECT id, cid FROM conv;
UPDATE sessions SET conversation_id = COALESCE(
    (SELECT b.cid FROM temp.hermes_conversation_backfill AS b WHERE b.id = sessions.id), id)
WHERE conversation_id IS NULL;
DROP TABLE temp.hermes_conversation_backfill;
"""


def backfill_conversation_ids(conn: Any) -> int:
    """Give every session without one its conversation id (inside the caller's transaction); returns how many."""
    missing = conn.execute("SELECT COUNT(*) FROM sessions WHERE conversation_id IS NULL").fetchone()[0]
    if missing:
        run_script(conn, _BACKFILL_SQL)
    return int(missing)
