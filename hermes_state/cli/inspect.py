"""``info`` and ``doctor``: what a store is, and whether it is healthy."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any, Awaitable, Callable, TypeVar

from .errors import FAILURE, OK, CliError
from .output import print_json, progress, size
from .target import Target, open_store

__all__ = ["add_parsers"]

# A WAL this large means checkpoints are not keeping up (a long reader, or a writer that never closes).
WAL_WARN_BYTES = 64 * 1024 * 1024
# The database and the files SQLite keeps beside it.
STORE_FILE_SUFFIXES = ("", "-wal", "-shm", "-journal")
T = TypeVar("T")


def add_parsers(add: Callable[..., argparse.ArgumentParser]) -> None:
    info = add("info", "show backend, versions, journal mode, sizes, counts and FTS state (read-only)")
    info.set_defaults(run=run_info)
    doctor = add(
        "doctor",
        "check schema, integrity (PostgreSQL: indexes, counters, orphan rows, schema shape), full-text indexes, "
        "WAL size, file permissions and leases; --repair fixes what is safe",
    )
    doctor.add_argument(
        "--repair", action="store_true",
        help="fix what is safe: a damaged SQLite file (copied aside first), invalid indexes (REINDEX), "
             "message counters that disagree with the rows, expired leases",
    )
    doctor.set_defaults(run=run_doctor)


def _file_sizes(target: Target) -> dict[str, int | None]:
    if target.path is None:
        return {}
    sizes: dict[str, int | None] = {}
    for label, suffix in (("file_bytes", ""), ("wal_bytes", "-wal")):
        try:
            sizes[label] = os.stat(f"{target.path}{suffix}").st_size
        except OSError:
            sizes[label] = 0 if suffix else None
    return sizes


async def _if_supported(call: Awaitable[T]) -> T | None:
    """The result, or None where the backend has no such query (a check it cannot run is skipped)."""
    try:
        return await call
    except NotImplementedError:
        return None


async def _facts(db: Any, target: Target) -> dict[str, Any]:
    info: dict[str, Any] = dict(await db.storage_info())
    info.update(_file_sizes(target))
    info["sessions"] = await _if_supported(db.session_count(include_archived=True))
    info["messages"] = await db.message_count()
    info["fts_rebuild"] = await _if_supported(db.fts_rebuild_status())
    info["fts_cjk_rebuild"] = await _if_supported(db.fts_cjk_rebuild_status())
    info["writer"] = await db.writer_stats()
    return info


async def run_info(args: argparse.Namespace) -> int:
    async with open_store(args.target, read_only=True) as db:
        info = await _facts(db, args.target)
    if args.json:
        print_json(info)
        return OK
    print(f"store: {args.target}")
    versions = [f"{key} {info[key]}" for key in ("sqlite_version", "server_version") if info.get(key)]
    print(f"  backend {info.get('backend')}, driver {info.get('driver')}" + "".join(f", {v}" for v in versions))
    print(f"  journal mode {info.get('journal_mode') or '-'}, schema version {info.get('schema_version')}")
    if "file_bytes" in info:
        print(f"  file {size(info['file_bytes'])}, WAL {size(info.get('wal_bytes'))}")
    print(f"  {'-' if info['sessions'] is None else info['sessions']} sessions, {info['messages']} messages")
    pending = info["fts_rebuild"]
    fts = info.get("fts") or "-"
    print(f"  full-text index: {fts}" + (f", backfill {pending['percent']}% done" if pending else ""))
    writer = info["writer"]
    print(f"  writer (this process): {writer['commands_applied']} commands in {writer['batches_applied']} commits")
    return OK


def _trigram_note(info: dict[str, Any]) -> str:
    """How substring (and CJK) search runs, where the backend says (PostgreSQL's pg_trgm)."""
    trigram = info.get("trigram")
    if trigram == "indexed":
        return "; substring search uses a pg_trgm index"
    if trigram == "available":
        return "; pg_trgm installed but no trigram index: substring search scans messages"
    if trigram == "unavailable":
        return "; pg_trgm not installed: substring search scans messages"
    return ""


def _amcheck_note(info: dict[str, Any]) -> str:
    """Whether PostgreSQL's page checks ran with the integrity check (SQLite's always checks pages)."""
    if "amcheck" not in info:
        return ""
    return " (pages verified by amcheck)" if info["amcheck"] else " (amcheck not installed: pages not verified)"


def _lease_detail(leases: list[dict[str, Any]]) -> str:
    """Live leases with their holders, then the expired ones (which guard nothing any more)."""
    live = [lease for lease in leases if lease["live"]]
    expired = [lease for lease in leases if not lease["live"]]
    detail = f"{len(live)} live, {len(expired)} expired"
    if live:
        detail += ": " + ", ".join(f"{lease['kind']} {lease['key']} held by {lease['holder']}" for lease in live[:5])
    if expired:
        detail += "; expired, guarding nothing (the next acquirer replaces them, doctor --repair removes them): " + (
            ", ".join(f"{lease['kind']} {lease['key']} of {lease['holder']}" for lease in expired[:5])
        )
    return detail


def _check(name: str, status: str, detail: str) -> dict[str, str]:
    return {"check": name, "status": status, "detail": detail}


def _permissions_check(path: Path) -> dict[str, str]:
    """Warn (never fail) when the database or a sidecar lets group or others in, with the command that fixes it."""
    import shlex

    from ..private_files import shared_bits

    exposed: list[tuple[Path, int]] = []
    for suffix in STORE_FILE_SUFFIXES:
        candidate = Path(f"{path}{suffix}")
        bits = shared_bits(candidate)
        if bits:
            exposed.append((candidate, os.stat(candidate).st_mode & 0o777))
    if not exposed:
        return _check("permissions", "ok", "the database and its -wal/-shm files are private to their owner")
    modes = ", ".join(f"{file.name} {mode:04o}" for file, mode in exposed)
    command = "chmod 600 " + " ".join(shlex.quote(str(file)) for file, _ in exposed)
    return _check("permissions", "warn", f"readable or writable by group or others ({modes}): "
                                   f"conversations may hold secrets; run: {command}")


async def _run_checks(db: Any, target: Target) -> tuple[list[dict[str, str]], list[str] | None]:
    """The checks, and the integrity problems found (None where the backend has no such check)."""
    from ..sqlite.schema import SCHEMA_VERSION

    checks: list[dict[str, str]] = []
    bar = progress(5, "doctor", unit="check")
    try:
        try:
            info = await _facts(db, target)
        except Exception:  # counting rows can trip over the very damage the checks below name
            info = {**(await db.storage_info()), **_file_sizes(target)}
        version = info.get("schema_version")
        checks.append(_check("schema", "ok" if version == SCHEMA_VERSION else "fail",
                             f"version {version} (this release writes {SCHEMA_VERSION})"))
        bar.update()
        problems = await _if_supported(db.integrity_problems())
        if problems is None:
            checks.append(_check("integrity", "skip", "this backend has no integrity check"))
        else:
            clean = "no problems found" + _amcheck_note(info)
            checks.append(_check("integrity", "fail" if problems else "ok", "; ".join(problems[:5]) or clean))
        bar.update()
        pending = info.get("fts_rebuild")
        fts = info.get("fts")
        if "fts" not in info:
            checks.append(_check("fts", "skip", "this backend does not report its full-text index state"))
        elif fts in (None, "none"):
            checks.append(_check("fts", "warn", "no full-text index: search uses slower scans"))
        elif fts == "invalid":
            checks.append(_check("fts", "fail", "the search index is invalid (an interrupted build): "
                                                "doctor --repair rebuilds it"))
        elif pending:
            checks.append(_check("fts", "warn", f"{fts} layout, backfill {pending['percent']}% done"))
        else:
            checks.append(_check("fts", "ok", f"{fts} layout, fully indexed{_trigram_note(info)}"))
        bar.update()
        wal = info.get("wal_bytes")
        if "wal_bytes" in info:
            status = "warn" if wal is not None and wal > WAL_WARN_BYTES else "ok"
            checks.append(_check("wal", status, f"journal mode {info.get('journal_mode')}, WAL {size(wal)}"))
        if target.path is not None:
            checks.append(_permissions_check(target.path))
        bar.update()
        leases = await _if_supported(db.leases())
        if leases is None:
            checks.append(_check("leases", "skip", "this backend does not list its leases"))
        else:
            expired = any(not lease["live"] for lease in leases)
            checks.append(_check("leases", "warn" if expired else "ok", _lease_detail(leases)))
        bar.update()
    finally:
        bar.close()
    return checks, problems


def _file_repair(target: Target) -> dict[str, Any]:
    """SQLite's repair of a damaged file, after copying it aside (``repair_state_db_schema``)."""
    assert target.path is not None
    if not os.access(target.path.parent, os.W_OK):
        raise CliError(f"doctor --repair needs write access to {target.path.parent} for the backup")
    from ..sqlite.safety import repair_database

    return repair_database(Path(target.path), backup=True)


def _needs_repair(checks: list[dict[str, str]]) -> bool:
    """A failed check, or leases to clear; a warning --repair cannot fix (permissions, WAL size) is not one."""
    return any(c["status"] == "fail" or (c["check"] == "leases" and c["status"] == "warn") for c in checks)


async def _repair(target: Target, checks: list[dict[str, str]], before: list[str] | None) -> dict[str, Any]:
    """The file repair where a SQLite file failed its checks, then the in-place repair on a writable store."""
    if not _needs_repair(checks):
        return {"ok": True, "backup": None, "steps": [], "integrity": "ok", "note": "nothing to repair"}
    report: dict[str, Any] = {"ok": False, "backup": None, "steps": [], "integrity": None}
    if target.path is not None and any(c["status"] == "fail" for c in checks):
        report = _file_repair(target)
        if not report["ok"]:
            return report
    if any(c["check"] == "open" for c in checks):
        # Only a store that opens as one may be opened writable: that would create or
        # migrate a schema, which is no repair (and perhaps not our file).
        try:
            async with open_store(target, read_only=True):
                pass
        except Exception as exc:
            return {**report, "ok": False, "integrity": f"the store still cannot be opened: {exc}",
                    "note": "it does not open as a store: nothing in it was changed" if not report["steps"] else None}
    async with open_store(target, read_only=False) as db:
        fixed = await db.repair_store()
    # Opening a PostgreSQL store writable runs the schema's additive reconcile (missing indexes, columns).
    restored = [f"restored by the schema reconcile: {problem}" for problem in before or []
                if problem.startswith(("missing ", "table ")) and problem not in fixed["problems"]]
    return {**report, "ok": fixed["ok"], "steps": [*report["steps"], *restored, *fixed["steps"]],
            "integrity": fixed["integrity"]}


def _print_repair(repair: dict[str, Any]) -> None:
    if repair.get("refused"):  # the repair ledger: too many failed attempts on this very file
        print(f"repair refused: {repair['error']}")
        return
    backup = f"backup at {repair['backup']}; " if repair.get("backup") else ""
    if repair.get("note"):
        print(f"repair: {backup}{repair['note']}" + ("" if repair["ok"] else f" ({repair['integrity']})"))
        return
    print(f"repair: {backup}{len(repair['steps'])} step(s); integrity now: {repair['integrity']}")
    for step in repair["steps"]:
        print(f"  - {step}")


async def run_doctor(args: argparse.Namespace) -> int:
    checks: list[dict[str, str]]
    problems: list[str] | None = None
    try:
        async with open_store(args.target, read_only=True) as db:
            checks, problems = await _run_checks(db, args.target)
    except CliError:
        raise
    except Exception as exc:  # a store that cannot even open is the doctor's main case
        checks = [_check("open", "fail", str(exc))]
    failed = any(c["status"] == "fail" for c in checks)
    report: dict[str, Any] = {"ok": not failed, "checks": checks}
    if args.repair:
        report["repair"] = await _repair(args.target, checks, problems)
        report["ok"] = bool(report["repair"]["ok"])
    if args.json:
        print_json(report)
    else:
        for check in checks:
            print(f"{check['status'].upper():>4}  {check['check']:<11} {check['detail']}")
        if "repair" in report:
            _print_repair(report["repair"])
    return OK if report["ok"] else FAILURE
