"""The stored conversation id of every session (PostgreSQL): trigger functions, triggers and the backfill.

The rule is ``sqlite.conversations``'s: a session's own id, unless it
continues (``continuation_sql``) a parent that ended by compression, then
the parent's conversation id. A ``BEFORE INSERT`` trigger sets it on new
rows; an ``AFTER UPDATE`` trigger pulls a compression-ended parent's
continuations (and a row that gains such a parent) into its conversation.
Deleting a parent changes nothing.
"""

from __future__ import annotations

from typing import Any

from .lineage_sql import continuation_sql

__all__ = ["CONVERSATION_FUNCTIONS", "CONVERSATION_TRIGGERS", "backfill_conversation_ids", "same_conversation_sql"]


def same_conversation_sql(param: str) -> str:
    """SQL true for the ``sessions`` rows in the conversation of the session whose id is ``param``."""
    return f"conversation_id = (SELECT conversation_id FROM sessions WHERE id = {param})"


# name -> CREATE OR REPLACE FUNCTION statement
CONVERSATION_FUNCTIONS: dict[str, str] = {
    "hermes_conversation_on_insert": f"""
CREATE OR REPLACE FUNCTION hermes_conversation_on_insert() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF NEW.conversation_id IS NULL THEN
        IF NEW.parent_session_id IS NOT NULL AND {continuation_sql('NEW')} THEN
            SELECT COALESCE(p.conversation_id, p.id) INTO NEW.conversation_id FROM sessions AS p
            WHERE p.id = NEW.parent_session_id AND p.end_reason = 'compression';
        END IF;
        NEW.conversation_id := COALESCE(NEW.conversation_id, NEW.id);
    END IF;
    RETURN NEW;
END $fn$""",
    "hermes_conversation_on_update": f"""
CREATE OR REPLACE FUNCTION hermes_conversation_on_update() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
    parent_conversation text;
BEGIN
    IF NEW.end_reason = 'compression' AND OLD.end_reason IS DISTINCT FROM 'compression' THEN
        UPDATE sessions SET conversation_id = COALESCE(NEW.conversation_id, NEW.id)
        WHERE conversation_id IN (
            SELECT c.conversation_id FROM sessions AS c WHERE c.parent_session_id = NEW.id AND {continuation_sql('c')})
          AND conversation_id IS DISTINCT FROM COALESCE(NEW.conversation_id, NEW.id);
    END IF;
    IF OLD.parent_session_id IS NULL AND NEW.parent_session_id IS NOT NULL
       AND NEW.conversation_id = NEW.id AND {continuation_sql('NEW')} THEN
        SELECT COALESCE(p.conversation_id, p.id) INTO parent_conversation FROM sessions AS p
        WHERE p.id = NEW.parent_session_id AND p.end_reason = 'compression';
        IF parent_conversation IS NOT NULL THEN
            UPDATE sessions SET conversation_id = parent_conversation WHERE conversation_id = NEW.id;
        END IF;
    END IF;
    RETURN NULL;
END $fn$""",
}

# name -> CREATE TRIGGER statement (created when missing)
CONVERSATION_TRIGGERS: dict[str, str] = {
    "sessions_conversation_on_insert": (
        "CREATE TRIGGER sessions_conversation_on_insert BEFORE INSERT ON sessions "
        "FOR EACH ROW EXECUTE FUNCTION hermes_conversation_on_insert()"
    ),
    "sessions_conversation_on_update": (
        "CREATE TRIGGER sessions_conversation_on_update AFTER UPDATE OF end_reason, parent_session_id ON sessions "
        "FOR EACH ROW WHEN (NEW.end_reason IS DISTINCT FROM OLD.end_reason "
        "OR NEW.parent_session_id IS DISTINCT FROM OLD.parent_session_id) "
        "EXECUTE FUNCTION hermes_conversation_on_update()"
    ),
}

_BACKFILL_SQL = f"""
WITH RECURSIVE conv(id, cid, depth) AS (
    SELECT s.id, s.id, 0 FROM sessions AS s
    WHERE NOT {continuation_sql('s')}
       OR NOT EXISTS (SELECT 1 FROM sessions AS p WHERE p.id = s.parent_session_id AND p.end_reason = 'compression')
    UNION
    SELECT c.id, conv.cid, conv.depth + 1 FROM conv
    JOIN sessions AS p ON p.id = conv.id
    JOIN sessions AS c ON c.parent_session_id = p.id
    WHERE p.end_reason = 'compression' AND {continuation_sql('c')} AND conv.depth < 100000
), firsts AS (
    SELECT DISTINCT ON (id) id, cid FROM conv ORDER BY id, depth
)
UPDATE sessions AS s SET conversation_id = COALESCE(f.cid, s.id)
FROM sessions AS t LEFT JOIN firsts AS f ON f.id = t.id
WHERE t.id = s.id AND s.conversation_id IS NULL
"""


async def backfill_conversation_ids(conn: Any) -> int:
    """Give every session without one its conversation id (inside the caller's transaction); returns how many."""
    missing = int(await conn.fetchval("SELECT count(*) FROM sessions WHERE conversation_id IS NULL"))
    if missing:
        await conn.execute(_BACKFILL_SQL)
    return missing
