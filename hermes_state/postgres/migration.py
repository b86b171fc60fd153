"""The open-time handshake: check the catalog cheaply, else migrate in place in one transaction.

A writable open takes the advisory lock ``MIGRATION_LOCK_KEY`` (upstream's
key) shared, reads the catalog (:mod:`.catalog`) and judges it
(:func:`.layout.assess`):

* current: commit, no DDL (DDL takes heavy locks even when it changes
  nothing, and would queue behind, and in front of, live writers);
* a shape this release does not know: ``RuntimeError`` naming it, nothing
  changed;
* anything else it knows (an empty schema, an earlier hermes-state layout,
  async-hermes-agent's anchor layout or storage versions 1-5): take the
  lock exclusively in a new transaction, judge again, and migrate.

A migration first locks every store table that exists (ACCESS EXCLUSIVE, in
one fixed order, so it never deadlocks against itself or waits half-way);
then it creates what is missing, moves upstream's snapshot values into
columns (:mod:`.upstream`), converts column types and nullability,
reconciles the search objects (:mod:`.search_schema`), rebuilds invalid or
redefined indexes, adds keys, functions and triggers, fills conversation
ids, writes the version and the markers, reads the catalog again and refuses to
commit unless it is now current. All of it is one transaction: a failure
anywhere (or a cancelled open) leaves no partial catalog, data or marker,
and the next open starts over. A second process opening meanwhile waits on
the advisory lock and then finds the schema current. The lock spans the
database, so a migration in one schema also holds up opens of other schemas
of that database until it commits.

A read-only store takes no lock and writes nothing: it refuses a schema that
needs migrating, naming why.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from .catalog import Catalog
from .conversations import backfill_conversation_ids
from .layout import (
    DEFINITIONS_KEY,
    LAYOUT,
    LAYOUT_KEY,
    ORIGIN_KEY,
    UPSTREAM_KEY,
    Assessment,
    assess,
    definition_hashes,
    primary_keys,
    read_store_catalog,
)
from .schema import (
    _UNIQUE_INDEXES,
    FOREIGN_KEYS,
    FUNCTIONS,
    INDEXES,
    MIGRATION_LOCK_KEY,
    SCHEMA_VERSION,
    SEQUENCES,
    TABLES,
    TRIGGERS,
    _add_column_type,
    _create_table_sql,
)
from .search_schema import SEARCH_COLUMN, reconcile_search, search_catalog, search_facts
from .upstream import UPSTREAM_ONLY, content_from_payloads, live_leases, merge_usage_rows, null_usage_keys, sessions_from_payloads

__all__ = ["check_schema_read_only", "ensure_schema"]

log = logging.getLogger("hermes_state.postgres")

_TITLE_INDEX = "idx_sessions_title_unique"
_USAGE = "session_model_usage"


def _refusal(assessment: Assessment) -> RuntimeError:
    return RuntimeError(
        f"PostgreSQL SessionDB refuses this schema ({assessment.source}), changing nothing: "
        + "; ".join(assessment.fatal)
    )


async def _conversations_unfilled(conn: Any) -> bool:
    return bool(await conn.fetchval("SELECT EXISTS (SELECT 1 FROM sessions WHERE conversation_id IS NULL)"))


async def ensure_schema(conn: Any) -> dict[str, Any]:
    """Check, or migrate, the schema under the migration lock; returns facts for ``storage_info``.

    The facts hold ``schema_version``, ``layout``, ``reconciled`` (whether
    anything changed) and, after a migration, ``migrated_from``. Raises
    ``RuntimeError`` naming every problem for a schema this release must not
    touch (a newer or unknown version or marker, rows that disagree, a type
    it cannot convert, store tables without ``schema_version``, ...).

    The check holds the lock shared, so workers opening a current schema do
    not queue behind each other; a migration holds it exclusively (the mode
    async-hermes-agent takes, with the same key) and judges the catalog again
    first: another process may have migrated it meanwhile.
    """
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock_shared($1)", MIGRATION_LOCK_KEY)
        current, _, _ = await _judge(conn)
        if current is not None:
            return current
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK_KEY)
        current, catalog, assessment = await _judge(conn)
        if current is not None:
            return current
        log.info("PostgreSQL SessionDB: migrating %s in place: %s", assessment.source,
                 "; ".join(assessment.pending) or "conversation ids and search objects")
        facts = await _migrate(conn, catalog, assessment)
    return {"schema_version": SCHEMA_VERSION, "layout": LAYOUT, "reconciled": True,
            "migrated_from": assessment.source, **facts}


async def _judge(conn: Any) -> tuple[dict[str, Any] | None, Catalog, Assessment]:
    """(facts when the schema is current, else None; the catalog; its assessment). Raises for a refused shape."""
    catalog = await read_store_catalog(conn)
    assessment = assess(catalog)
    if assessment.fatal:
        raise _refusal(assessment)
    if assessment.pending:
        return None, catalog, assessment
    search = await search_catalog(conn)
    if not search.current or await _conversations_unfilled(conn):
        return None, catalog, assessment
    facts = {"schema_version": SCHEMA_VERSION, "layout": LAYOUT, "reconciled": False,
             **search_facts(search.trigram_index)}
    return facts, catalog, assessment


async def _migrate(conn: Any, catalog: Catalog, assessment: Assessment) -> dict[str, Any]:
    present = [table for table in TABLES if table in catalog.columns]
    if present and assessment.pending:
        # Before the first change, in one fixed order: no lock is taken half-way, so two openers
        # never deadlock and a migration never stalls between steps behind a live writer. (Only
        # the search objects or conversation ids missing: their statements lock what they touch.)
        await conn.execute(f"LOCK TABLE {', '.join(_ident(t) for t in present)} IN ACCESS EXCLUSIVE MODE")
    for name in SEQUENCES:
        await conn.execute(f"CREATE SEQUENCE IF NOT EXISTS {_ident(name)}")
    for table, columns in TABLES.items():
        if table not in catalog.columns:
            await conn.execute(_create_table_sql(table))
            continue
        for name, kind in columns:
            if name not in catalog.columns[table]:
                await conn.execute(f"ALTER TABLE {_ident(table)} ADD COLUMN {_ident(name)} {_add_column_type(kind)}")
    dropped: set[str] = set()
    if assessment.upstream is not None:
        dropped = await _from_upstream(conn, catalog, assessment)
    else:
        for table, clauses in assessment.alterations.items():
            await conn.execute(f"ALTER TABLE {_ident(table)} {', '.join(clauses)}")
    # The search column rewrites messages (when missing): before its indexes are built, not after.
    facts = await reconcile_search(conn, await search_catalog(conn))
    await _keys_and_indexes(conn, catalog, assessment, dropped)
    await _routines(conn, catalog, assessment)
    await backfill_conversation_ids(conn)
    await _stamp(conn, assessment)
    await _verify(conn)
    return facts


async def _from_upstream(conn: Any, catalog: Catalog, assessment: Assessment) -> set[str]:
    """Move what only upstream's snapshots hold into columns, then drop what is upstream's alone.

    Returns the indexes dropped on the way: ``messages`` is updated, then
    rewritten twice (its column types here, the search column next), and its
    indexes are built once afterwards instead of being maintained and rebuilt
    by each step. Upstream's search index is on the text expression; the stored
    search column replaces it (:func:`.search_schema.reconcile_search`).
    """
    dropped = {name for name, index in catalog.indexes.items() if index.table == "messages"}
    for name in sorted(dropped):
        await conn.execute(f"DROP INDEX {_ident(name)}")
    # The anchor read titles from the snapshot; once the unique title index existed, from the column.
    await sessions_from_payloads(conn, title_from_snapshot=assessment.upstream == 0 and _TITLE_INDEX not in catalog.indexes)
    await content_from_payloads(conn)
    if _USAGE in catalog.columns:
        await null_usage_keys(conn)
    for table in TABLES:
        if table not in catalog.columns:
            continue
        drops = [f"DROP COLUMN {_ident(c)}" for c in UPSTREAM_ONLY.get(table, ()) if c in catalog.columns[table]]
        if table == _USAGE:
            drops = [d for d in drops if d != 'DROP COLUMN "id"']  # merge_usage_rows needs it
        clauses = [*assessment.alterations.get(table, ()), *drops]
        if clauses:
            await conn.execute(f"ALTER TABLE {_ident(table)} {', '.join(clauses)}")
    if "id" in catalog.columns.get(_USAGE, {}):
        await merge_usage_rows(conn)
        await conn.execute(f'ALTER TABLE {_USAGE} DROP COLUMN "id"')  # and its primary key with it
    if "session_turn_leases" in catalog.columns:
        await live_leases(conn)
    return dropped


async def _keys_and_indexes(conn: Any, catalog: Catalog, assessment: Assessment, dropped: set[str]) -> None:
    """The usage key, foreign keys and fixed indexes: missing, ``dropped``, invalid or redefined ones (re)made."""
    key = primary_keys()[_USAGE]
    if catalog.primary_keys.get(_USAGE) != key and _USAGE in catalog.columns:
        await conn.execute(f"ALTER TABLE {_USAGE} ADD CONSTRAINT pk_{_USAGE} PRIMARY KEY ({', '.join(key)})")
    indexes = {**INDEXES, **_UNIQUE_INDEXES}
    rebuild = {
        name for name, index in catalog.indexes.items()
        if name in indexes and name not in dropped and (not index.valid or name in assessment.changed)
    }
    title = catalog.indexes.get(_TITLE_INDEX)
    if title is not None and not (title.unique and title.partial):
        rebuild.add(_TITLE_INDEX)
    for name in sorted(rebuild):
        await conn.execute(f"DROP INDEX {_ident(name)}")
    for name, (table, definition) in FOREIGN_KEYS.items():
        if name in catalog.foreign_keys and name in assessment.changed:
            await conn.execute(f"ALTER TABLE {_ident(table)} DROP CONSTRAINT {_ident(name)}")
        if name not in catalog.foreign_keys or name in assessment.changed:
            await conn.execute(f"ALTER TABLE {_ident(table)} ADD CONSTRAINT {_ident(name)} {definition}")
    for name, body in indexes.items():
        if name in catalog.indexes and name not in rebuild and name not in dropped:
            continue
        if name == _TITLE_INDEX:
            await _drop_duplicate_titles(conn)
        unique = "UNIQUE " if name in _UNIQUE_INDEXES else ""
        await conn.execute(f"CREATE {unique}INDEX {_ident(name)} ON {body}")


async def _drop_duplicate_titles(conn: Any) -> None:
    """Before the unique title index exists: a title shared by several sessions stays with the newest only.

    Upstream's rule (newest by ``started_at``, then id), for titles its anchor
    checked in the application alone, which two writers could race past.
    """
    await conn.execute(
        "WITH ranked AS (SELECT id, row_number() OVER (PARTITION BY title "
        "ORDER BY started_at DESC NULLS LAST, id DESC) AS position FROM sessions WHERE title IS NOT NULL) "
        "UPDATE sessions AS s SET title = NULL, title_source = NULL FROM ranked "
        "WHERE s.id = ranked.id AND ranked.position > 1"
    )


async def _routines(conn: Any, catalog: Catalog, assessment: Assessment) -> None:
    """Functions (created or replaced) before the triggers that call them (dropped and created)."""
    for name, statement in FUNCTIONS.items():
        if name not in catalog.routines or name in assessment.changed:
            await conn.execute(statement)
    for name, statement in TRIGGERS.items():
        if name in catalog.routines and name in assessment.changed:
            table = re.search(r"\bON (\w+)", statement)
            assert table is not None, statement
            await conn.execute(f"DROP TRIGGER {_ident(name)} ON {_ident(table[1])}")
        if name not in catalog.routines or name in assessment.changed:
            await conn.execute(statement)


async def _stamp(conn: Any, assessment: Assessment) -> None:
    """The version row and the markers (see :mod:`.layout`)."""
    await conn.execute("DELETE FROM schema_version")
    await conn.execute("INSERT INTO schema_version (version) VALUES ($1)", SCHEMA_VERSION)
    values = {LAYOUT_KEY: str(LAYOUT), DEFINITIONS_KEY: json.dumps(definition_hashes(), sort_keys=True)}
    if assessment.marker != LAYOUT:
        values[ORIGIN_KEY] = assessment.source
    await conn.execute(
        "INSERT INTO state_meta (key, value) SELECT * FROM unnest($1::text[], $2::text[]) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        list(values), list(values.values()),
    )
    await conn.execute("DELETE FROM state_meta WHERE key = $1", UPSTREAM_KEY)


async def _verify(conn: Any) -> None:
    """Refuse to commit a migration whose result is not the current layout (the transaction rolls back)."""
    after = assess(await read_store_catalog(conn))
    search = await search_catalog(conn)
    problems = [*after.fatal, *after.pending]
    if not (search.column and search.index_on_column):
        problems.append("the search column or its index is missing")
    if problems:
        raise RuntimeError("PostgreSQL SessionDB migration did not produce the expected catalog: " + "; ".join(problems))


async def check_schema_read_only(conn: Any) -> dict[str, Any]:
    """Validate a read-only store's connection and schema without writing; returns facts.

    Raises ``RuntimeError`` when the connection is not read-only, the schema
    is missing, holds no version row, is a shape this release refuses, or its
    layout needs a migration (only a writable store migrates). Missing or
    invalid indexes, keys and functions only log a warning: reads work
    without them, and ``doctor`` must be able to open such a store to name them.
    """
    async with conn.transaction(readonly=True):
        if await conn.fetchval("SHOW transaction_read_only") != "on":
            raise RuntimeError("PostgreSQL read-only SessionDB did not receive transaction_read_only=on")
        catalog = await read_store_catalog(conn)
        if catalog.versions is None and not (catalog.tables & set(TABLES)):
            raise RuntimeError("read-only PostgreSQL SessionDB requires an initialized schema")
        if catalog.versions == []:
            raise RuntimeError("read-only PostgreSQL SessionDB requires a schema version row")
        assessment = assess(catalog)
        if assessment.fatal:
            raise _refusal(assessment)
        search = await search_catalog(conn)
        # Catalog reads only: planning any query on a table reads its indexes' metapages, and
        # doctor must be able to open a store whose index is damaged in order to name it.
        needed = list(assessment.relayout)
        if not search.column:
            needed.append(f"messages lacks the stored search column {SEARCH_COLUMN}")
    if needed:
        raise RuntimeError(
            "read-only PostgreSQL SessionDB requires the current schema; writable migration is required ("
            + "; ".join(needed) + ")"
        )
    if assessment.pending:  # objects a writable open restores; reads work without them (doctor names them)
        log.warning("PostgreSQL SessionDB (read-only): the schema lacks objects a writable open restores: %s",
                    "; ".join(assessment.pending))
    return {"schema_version": SCHEMA_VERSION, "layout": LAYOUT, "reconciled": False,
            **search_facts(search.trigram_index)}


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
