"""The layout this release keeps in PostgreSQL, how to recognise the ones it migrates, and what a schema lacks.

:func:`assess` reads a :class:`~.catalog.Catalog` and answers three things:

* where the schema comes from (``source``): empty; this layout; an earlier
  hermes-state layout (unmarked, or an older marker); async-hermes-agent's
  anchor layout (its payload snapshots and no storage marker) or one of its
  storage versions 1-5;
* what keeps it from being current (``pending``, one line per gap, worded
  for ``doctor``): a missing table, column, index, key, function, trigger or
  sequence, a column type to widen, an invalid index, a definition that
  changed since it was created, a missing marker;
* what this release must refuse (``fatal``): a shape it does not know. A
  newer or unknown marker or ``schema_version``, rows that disagree, a
  column whose type cannot be converted losslessly, a store table without
  ``schema_version``, a mix of upstream's snapshots and our own columns.

Markers (``state_meta`` rows): :data:`LAYOUT_KEY` holds :data:`LAYOUT`;
:data:`DEFINITIONS_KEY` a JSON object of the hash of every function,
trigger, index and foreign-key definition as created (so a body changed in
a later release is replaced at the next open, and an unchanged one costs
nothing); :data:`ORIGIN_KEY` the layout a migration started from.
Upstream's own marker (:data:`UPSTREAM_KEY`) names upstream's layouts,
which a migrated database no longer has, so the migration removes it.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from .catalog import Catalog, Column, read_catalog
from .schema import (
    _TABLE_CONSTRAINTS,
    _UNIQUE_INDEXES,
    FOREIGN_KEYS,
    FUNCTIONS,
    INDEXES,
    SCHEMA_VERSION,
    SEARCH_COLUMN,
    SEQUENCES,
    TABLES,
    TRIGGERS,
)
from .upstream import UPSTREAM_COLUMNS, UPSTREAM_ONLY

__all__ = [
    "DEFINITIONS_KEY",
    "LAYOUT",
    "LAYOUT_KEY",
    "META_KEYS",
    "ORIGIN_KEY",
    "UPSTREAM_KEY",
    "Assessment",
    "Declared",
    "assess",
    "declared_columns",
    "definition_hashes",
    "read_store_catalog",
]

# This release's physical layout. A later release that changes it raises the number and
# migrates from every lower one; a database marked higher is refused.
LAYOUT = 1
LAYOUT_KEY = "hermes_state_postgres_layout"
DEFINITIONS_KEY = "hermes_state_postgres_definitions"
ORIGIN_KEY = "hermes_state_postgres_migrated_from"
UPSTREAM_KEY = "postgres_storage_version"
UPSTREAM_STORAGE = range(1, 6)  # upstream's storage versions 1-5 (upstream-2026-08.md §4.2)
META_KEYS = [LAYOUT_KEY, DEFINITIONS_KEY, ORIGIN_KEY, UPSTREAM_KEY]

# Known conversions: (found base type -> wanted type) that keep every value.
_WIDENS: dict[str, frozenset[str]] = {
    "text": frozenset({"character varying"}),
    "bigint": frozenset({"integer", "smallint"}),
    "integer": frozenset({"smallint"}),
    "double precision": frozenset({"real"}),
}


async def read_store_catalog(conn: Any) -> Catalog:
    """The catalog facts of the store's tables, functions, triggers, sequences and markers."""
    return await read_catalog(conn, list(TABLES), [*FUNCTIONS, *TRIGGERS, *SEQUENCES], META_KEYS)


@dataclass(frozen=True)
class Declared:
    """A column as this release declares it in ``TABLES``."""

    type: str  # format_type spelling: text, bigint, double precision, ...
    not_null: bool
    default: str | None
    identity: bool


_KIND = re.compile(r"^(?P<type>[A-Z ]+?)(?= NOT NULL| DEFAULT| PRIMARY KEY| GENERATED|$)")


@cache
def declared_columns() -> dict[str, dict[str, Declared]]:
    """table -> column -> :class:`Declared`, parsed from ``TABLES``."""
    result: dict[str, dict[str, Declared]] = {}
    for table, columns in TABLES.items():
        for name, kind in columns:
            match = _KIND.match(kind)
            assert match is not None, kind
            default = re.search(r"(?<!BY )DEFAULT (\S+)", kind)
            result.setdefault(table, {})[name] = Declared(
                match["type"].lower(),
                "NOT NULL" in kind or "PRIMARY KEY" in kind,
                default[1] if default else None,
                "IDENTITY" in kind,
            )
    return result


@cache
def primary_keys() -> dict[str, tuple[str, ...]]:
    """table -> its primary-key columns (``schema_version`` has none of ours)."""
    keys = {table: tuple(name for name, kind in columns if "PRIMARY KEY" in kind) for table, columns in TABLES.items()}
    for table, constraints in _TABLE_CONSTRAINTS.items():
        for constraint in constraints:
            found = re.search(r"PRIMARY KEY \(([^)]*)\)", constraint)
            if found:
                keys[table] = tuple(c.strip() for c in found[1].split(","))
    return {table: key for table, key in keys.items() if key}


@cache
def definition_hashes() -> dict[str, str]:
    """name -> hash of the statement that creates each function, trigger, index and foreign key."""
    definitions = {
        **FUNCTIONS, **TRIGGERS, **INDEXES, **_UNIQUE_INDEXES,
        **{name: f"{table} {body}" for name, (table, body) in FOREIGN_KEYS.items()},
    }
    return {name: hashlib.sha256(text.encode()).hexdigest()[:16] for name, text in definitions.items()}


@cache
def _ours_only() -> dict[str, frozenset[str]]:
    """Columns of ours upstream never had (their presence beside a snapshot column is a mixed layout)."""
    ours = {table: frozenset(declared) - UPSTREAM_COLUMNS.get(table, frozenset()) for table, declared in declared_columns().items()}
    ours["messages"] = ours["messages"] | {SEARCH_COLUMN}
    return ours


@dataclass
class Assessment:
    """What :func:`assess` found; the schema is current when ``fatal`` and ``pending`` are both empty."""

    source: str
    upstream: int | None = None  # upstream's storage version; 0 for its anchor layout (no marker)
    fatal: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)  # every gap, ``relayout`` ones included
    # The gaps in tables, columns, keys and markers: reads need them migrated. The others (an
    # index, a foreign key, a function) a writable open restores, and a read-only store can
    # still read, and ``doctor`` report, without them.
    relayout: list[str] = field(default_factory=list)
    # table -> ALTER TABLE clauses that convert existing columns (types, NOT NULL, defaults)
    alterations: dict[str, list[str]] = field(default_factory=dict)
    changed: list[str] = field(default_factory=list)  # objects whose stored definition hash differs
    invalid: list[str] = field(default_factory=list)  # fixed-name indexes left invalid by a failed build
    marker: int | None = None  # our layout marker as found

    def needs(self, gap: str) -> None:
        """Record a gap in the layout itself (tables, columns, keys, markers)."""
        self.relayout.append(gap)
        self.pending.append(gap)


def _names(items: list[str]) -> str:
    return ", ".join(items)


def _int_marker(value: str | None) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:
        return -1


def _versions(assessment: Assessment, versions: list[str]) -> None:
    try:
        numbers = sorted(int(v) for v in versions)
    except (TypeError, ValueError):
        assessment.fatal.append(f"schema_version holds {versions!r}, not version numbers")
        return
    if not numbers:
        assessment.fatal.append(f"schema_version holds no row (this release writes [{SCHEMA_VERSION}]); "
                                "refusing to guess the schema's version")
    elif max(numbers) > SCHEMA_VERSION:
        assessment.fatal.append("PostgreSQL SessionDB schema is newer than this backend "
                                f"(schema_version {max(numbers)}, this release knows {SCHEMA_VERSION})")
    elif len(set(numbers)) > 1:
        assessment.fatal.append(f"schema_version holds {numbers} (this release writes [{SCHEMA_VERSION}]): rows "
                                "that disagree; refusing to guess which one holds")
    elif numbers[0] < SCHEMA_VERSION:
        assessment.fatal.append(
            f"PostgreSQL SessionDB logical schema version {numbers[0]} is unsupported (this release migrates "
            f"version {SCHEMA_VERSION} layouts only); restore a supported backup or migrate it explicitly"
        )
    elif len(numbers) > 1:
        assessment.needs(f"schema_version holds {numbers} (this release writes [{SCHEMA_VERSION}])")


def _markers(assessment: Assessment, meta: dict[str, str | None]) -> tuple[int | None, int | None]:
    ours, theirs = _int_marker(meta.get(LAYOUT_KEY)), _int_marker(meta.get(UPSTREAM_KEY))
    if ours is not None and ours > LAYOUT:
        assessment.fatal.append(f"state_meta {LAYOUT_KEY} is {ours}: a newer hermes-state layout than this "
                                f"release's ({LAYOUT}); upgrade hermes-state")
    elif ours is not None and ours < 1:
        assessment.fatal.append(f"state_meta {LAYOUT_KEY} holds {meta[LAYOUT_KEY]!r}, not a layout this release knows")
    if theirs is not None and theirs not in UPSTREAM_STORAGE:
        newer = "newer than this backend knows" if theirs > UPSTREAM_STORAGE[-1] else "unknown"
        assessment.fatal.append(
            f"state_meta {UPSTREAM_KEY} holds {meta[UPSTREAM_KEY]!r}: an async-hermes-agent storage version "
            f"{newer} (this release migrates 1-{UPSTREAM_STORAGE[-1]})"
        )
    if ours is not None and theirs is not None:
        assessment.fatal.append(f"state_meta holds both {LAYOUT_KEY} and async-hermes-agent's {UPSTREAM_KEY}; "
                                "refusing to guess which layout the tables are in")
    return ours, theirs


def _source(assessment: Assessment, catalog: Catalog, ours: int | None, theirs: int | None) -> None:
    """Name the source layout; a mix of upstream's snapshots and our own objects is fatal."""
    snapshots = [f"{t}.{c}" for t, cols in UPSTREAM_ONLY.items() for c in cols if c in catalog.columns.get(t, {})]
    if not snapshots and theirs is None:
        assessment.source = f"hermes-state layout {ours}" if ours is not None else "hermes-state (unmarked layout)"
        return
    assessment.upstream = theirs or 0
    assessment.source = (f"async-hermes-agent storage {theirs}" if theirs is not None
                         else "async-hermes-agent anchor layout (no storage marker)")
    if ours is not None:
        assessment.fatal.append(
            f"upstream async-hermes-agent columns ({_names(snapshots)}) reappeared in a database hermes-state "
            "migrated: upstream changed it since, and its rows cannot be told from ours; restore the backup "
            "taken before, or copy the sessions out with upstream and import them"
        )
        return
    for table in ("sessions", "messages"):
        if table in catalog.columns and "payload" not in catalog.columns[table]:
            assessment.fatal.append(f"{table} lacks upstream's payload column while other upstream columns are "
                                    "present: an async-hermes-agent layout this release does not know")
    mixed = [f"{t}.{c}" for t, cols in _ours_only().items() for c in sorted(cols) if c in catalog.columns.get(t, {})]
    mixed += [t for t in TABLES if t not in UPSTREAM_COLUMNS and t in catalog.tables]
    if mixed:
        assessment.fatal.append(
            f"the schema mixes async-hermes-agent's payload snapshots ({_names(snapshots)}) with hermes-state "
            f"objects ({_names(mixed)}): a layout this release does not know"
        )


def _conversion(table: str, name: str, found: Column, wanted: Declared, changes: list[tuple[str, str]]) -> str | None:
    """Append the (ALTER clause, description) pairs that make ``found`` what this release declares.

    Returns a fatal line for a column no lossless conversion fits, else None.
    """
    if found.base_type != wanted.type:
        if found.base_type not in _WIDENS.get(wanted.type, frozenset()):
            return (f"column {table}.{name} is {found.type}; this release needs {wanted.type} and knows no "
                    "lossless conversion")
        changes.append((f'ALTER COLUMN "{name}" TYPE {wanted.type}', f"{name} {found.type} -> {wanted.type}"))
    if wanted.identity and not found.identity and not found.has_default:
        return f"column {table}.{name} has neither an identity nor a default; this release needs an identity"
    if wanted.default is not None and not found.has_default:
        changes.append((f'ALTER COLUMN "{name}" SET DEFAULT {wanted.default}', f"{name} DEFAULT {wanted.default}"))
    if wanted.not_null and not found.not_null:
        changes.append((f'ALTER COLUMN "{name}" SET NOT NULL', f"{name} NOT NULL"))
    elif found.not_null and not wanted.not_null:
        changes.append((f'ALTER COLUMN "{name}" DROP NOT NULL', f"{name} nullable"))
    return None


def _columns(assessment: Assessment, catalog: Catalog) -> None:
    declared = declared_columns()
    missing_tables = [t for t in TABLES if t not in catalog.columns]
    if missing_tables:
        assessment.needs(f"missing table(s): {_names(missing_tables)}")
    for table, wanted in declared.items():
        found = catalog.columns.get(table)
        if found is None:
            continue
        absent = [name for name in wanted if name not in found]
        if absent:
            assessment.needs(f"table {table} lacks column(s): {_names(absent)}")
        changes: list[tuple[str, str]] = []
        for name, column in found.items():
            if name in UPSTREAM_ONLY.get(table, ()):
                if name == "payload" and column.base_type not in ("text", "character varying"):
                    assessment.fatal.append(f"column {table}.payload is {column.type}; upstream's snapshots are text")
                continue
            if name in wanted:
                problem = _conversion(table, name, column, wanted[name], changes)
                if problem:
                    assessment.fatal.append(problem)
            elif column.not_null and not column.has_default and not column.identity:
                assessment.fatal.append(f"column {table}.{name} is not this release's and is NOT NULL without a "
                                        "default: every insert of this release would fail")
        if changes:
            assessment.alterations[table] = [clause for clause, _ in changes]
            assessment.needs(f"table {table} needs column changes: {_names([d for _, d in changes])}")
        snapshots = [c for c in UPSTREAM_ONLY.get(table, ()) if c in found]
        if snapshots:
            assessment.needs(f"table {table} holds upstream column(s) to migrate: {_names(snapshots)}")


def _keys(assessment: Assessment, catalog: Catalog) -> None:
    for table, key in primary_keys().items():
        if table not in catalog.columns or catalog.primary_keys.get(table) == key:
            continue
        found = catalog.primary_keys.get(table)
        if table == "session_model_usage" and found in (None, ("id",)):
            assessment.needs(f"table {table} lacks its primary key ({_names(list(key))})")
        else:
            shown = f"({_names(list(found))})" if found else "none"
            assessment.fatal.append(f"table {table} has primary key {shown}; this release needs ({_names(list(key))})")
    missing_fks = [name for name in FOREIGN_KEYS if name not in catalog.foreign_keys]
    if missing_fks:
        assessment.pending.append(f"missing foreign key(s): {_names(missing_fks)}")


def _objects(assessment: Assessment, catalog: Catalog) -> None:
    wanted = (*INDEXES, *_UNIQUE_INDEXES)
    missing = [name for name in wanted if name not in catalog.indexes]
    if missing:
        assessment.pending.append(f"missing index(es): {_names(missing)}")
    assessment.invalid = [name for name in wanted if name in catalog.indexes and not catalog.indexes[name].valid]
    if assessment.invalid:
        assessment.pending.append(f"invalid index(es) to rebuild: {_names(assessment.invalid)}")
    for name in _UNIQUE_INDEXES:
        index = catalog.indexes.get(name)
        if index is not None and not (index.unique and index.partial):
            assessment.pending.append(f"index {name} is not a partial unique index")
    for what, names in (("function", FUNCTIONS), ("trigger", TRIGGERS), ("sequence", SEQUENCES)):
        absent = [name for name in names if name not in catalog.routines]
        if absent:
            assessment.pending.append(f"missing {what}(s): {_names(absent)}")


def _definitions(assessment: Assessment, stored_text: str | None) -> None:
    try:
        stored = json.loads(stored_text) if stored_text is not None else None
    except ValueError:
        stored = None
    if not isinstance(stored, dict):
        # Never recorded (an unmarked or upstream layout): functions and triggers are replaced
        # (cheap, and their bodies may predate this release); indexes and keys are trusted by name.
        assessment.changed = [*FUNCTIONS, *TRIGGERS]
        assessment.pending.append("definitions of functions and triggers not recorded")
        return
    assessment.changed = [name for name, digest in definition_hashes().items() if stored.get(name) != digest]
    if assessment.changed:
        assessment.pending.append(f"definition(s) changed since created: {_names(assessment.changed)}")


def assess(catalog: Catalog) -> Assessment:
    """Judge ``catalog``: source layout, gaps to migrate, shapes to refuse (see the module docstring)."""
    assessment = Assessment(source="empty")
    if catalog.versions is None:
        known = sorted(t for t in catalog.tables if t in TABLES or t in UPSTREAM_COLUMNS)
        if known:
            assessment.fatal.append(
                f"PostgreSQL SessionDB found a non-empty schema without schema_version (tables: "
                f"{_names(known)}); refusing to guess its layout"
            )
        else:
            assessment.needs("empty schema")
        return assessment
    _versions(assessment, catalog.versions)
    ours, theirs = _markers(assessment, catalog.meta or {})
    assessment.marker = ours
    _source(assessment, catalog, ours, theirs)
    _columns(assessment, catalog)
    _keys(assessment, catalog)
    _objects(assessment, catalog)
    if assessment.upstream is None:
        _definitions(assessment, (catalog.meta or {}).get(DEFINITIONS_KEY))
    else:
        assessment.changed = [*FUNCTIONS, *TRIGGERS]
    if ours != LAYOUT:
        assessment.needs(f"state_meta lacks {LAYOUT_KEY} = {LAYOUT} (found {ours})")
    return assessment
