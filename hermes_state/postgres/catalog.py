"""What the current schema holds, read from the system catalogs in a few queries.

The open-time handshake (:mod:`.schema`), the read-only check and
``doctor`` (:mod:`.queries.health`) judge the same facts: tables and their
columns with type and nullability, indexes with their state, primary and
foreign keys, the functions, triggers and sequences of ours, the
``schema_version`` rows and the layout markers in ``state_meta``. Reading
them takes no lock a writer would wait for, so an open that finds
everything current runs no DDL at all.

Every lookup is scoped to ``current_schema()`` (the store's ``search_path``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Catalog", "Column", "Index", "read_catalog"]


@dataclass(frozen=True)
class Column:
    """One column: ``format_type`` spelling (``character varying(255)``), NOT NULL, identity, has a default."""

    type: str
    not_null: bool
    identity: bool
    has_default: bool

    @property
    def base_type(self) -> str:
        """The type without its modifier: ``character varying(255)`` -> ``character varying``."""
        return self.type.split("(", 1)[0]


@dataclass(frozen=True)
class Index:
    table: str
    valid: bool  # indisvalid and indisready: a failed CREATE INDEX CONCURRENTLY leaves neither
    unique: bool
    partial: bool


@dataclass
class Catalog:
    """The facts of one schema. ``versions`` and ``meta`` are None when their table is missing."""

    tables: set[str] = field(default_factory=set)  # every base table of the schema, ours or not
    columns: dict[str, dict[str, Column]] = field(default_factory=dict)  # of the tables asked about
    indexes: dict[str, Index] = field(default_factory=dict)
    foreign_keys: dict[str, bool] = field(default_factory=dict)  # name -> validated
    primary_keys: dict[str, tuple[str, ...]] = field(default_factory=dict)  # table -> key columns
    routines: set[str] = field(default_factory=set)  # functions, triggers and sequences of ours, by name
    versions: list[str] | None = None  # as text: the assessment judges what they hold
    meta: dict[str, str | None] | None = None


_TABLES_SQL = """
SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attidentity <> '', a.atthasdef
FROM pg_class AS c
JOIN pg_namespace AS n ON n.oid = c.relnamespace
LEFT JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND c.relname = ANY($1::text[])
WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
"""

# Catalog joins only: pg_indexes calls pg_get_indexdef, which fails on indexes of
# other schemas being dropped meanwhile.
_INDEXES_SQL = """
SELECT c.relname, t.relname, i.indisvalid AND i.indisready, i.indisunique, i.indpred IS NOT NULL
FROM pg_index AS i
JOIN pg_class AS c ON c.oid = i.indexrelid
JOIN pg_class AS t ON t.oid = i.indrelid
JOIN pg_namespace AS n ON n.oid = t.relnamespace
WHERE n.nspname = current_schema() AND t.relname = ANY($1::text[]) AND NOT i.indisprimary
"""

_CONSTRAINTS_SQL = """
SELECT con.contype::text, con.conname, t.relname, con.convalidated,
       ARRAY(SELECT a.attname FROM unnest(con.conkey) WITH ORDINALITY AS k(num, pos)
             JOIN pg_attribute AS a ON a.attrelid = con.conrelid AND a.attnum = k.num ORDER BY k.pos)
FROM pg_constraint AS con
JOIN pg_class AS t ON t.oid = con.conrelid
JOIN pg_namespace AS n ON n.oid = t.relnamespace
WHERE n.nspname = current_schema() AND con.contype IN ('f', 'p')
"""

_ROUTINES_SQL = """
SELECT p.proname FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
WHERE n.nspname = current_schema() AND p.proname = ANY($1::text[])
UNION ALL SELECT t.tgname FROM pg_trigger AS t JOIN pg_class AS c ON c.oid = t.tgrelid
JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND NOT t.tgisinternal AND t.tgname = ANY($1::text[])
UNION ALL SELECT c.relname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND c.relkind = 'S' AND c.relname = ANY($1::text[])
"""


async def read_catalog(conn: Any, tables: list[str], routines: list[str], meta_keys: list[str]) -> Catalog:
    """The facts of the current schema: columns of ``tables``, the named ``routines``, the ``meta_keys`` rows."""
    catalog = Catalog()
    for table, column, kind, not_null, identity, has_default in await conn.fetch(_TABLES_SQL, tables):
        catalog.tables.add(table)
        if column is not None:
            catalog.columns.setdefault(table, {})[column] = Column(kind, not_null, identity, has_default)
    for name, table, valid, unique, partial in await conn.fetch(_INDEXES_SQL, tables):
        catalog.indexes[name] = Index(table, valid, unique, partial)
    for kind, name, table, validated, columns in await conn.fetch(_CONSTRAINTS_SQL):
        if kind == "f":
            catalog.foreign_keys[name] = validated
        elif table in tables:
            catalog.primary_keys[table] = tuple(columns)
    catalog.routines = {r[0] for r in await conn.fetch(_ROUTINES_SQL, routines)}
    if "version" in catalog.columns.get("schema_version", {}):
        catalog.versions = [r[0] for r in await conn.fetch("SELECT version::text FROM schema_version")]
    if {"key", "value"} <= set(catalog.columns.get("state_meta", {})):
        rows = await conn.fetch("SELECT key::text, value::text FROM state_meta WHERE key = ANY($1::text[])", meta_keys)
        catalog.meta = {r[0]: r[1] for r in rows}
    return catalog
