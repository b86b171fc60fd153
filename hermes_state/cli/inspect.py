"""``info`` and ``doctor``: what a store is, and whether it is healthy."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any, Awaitable, Callable, TypeVar

from .. import SCHEMA_VERSION, repair_state_db_schema
from .errors import FAILURE, OK, CliError
from .output import print_json, progress, size
from .target import Target, open_store

__all__ = ["add_parsers"]

# A WAL this large means checkpoints are not keeping up (a long reader, or a writer that never closes).
WAL_WARN_BYTES = 64 * 1024 * 1024
T = TypeVar("T")


def add_parsers(add: Callable[..., argparse.ArgumentParser]) -> None:
    info = add("info", "show backend, versions, journal mode, sizes, counts and FTS state (read-only)")
    info.set_defaults(run=run_info)
    doctor = add(
        "doctor",
        "check integrity, full-text indexes, WAL size, compression leases and schema version; "
        "--repair fixes a damaged SQLite file after copying it aside",
    )
    doctor.add_argument("--repair", action="store_true", help="run the repair (SQLite only; a backup is made first)")
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
    """Live leases with their holders, then the stale (expired, not yet replaced) ones."""
    live = [lease for lease in leases if lease["live"]]
    stale = [lease for lease in leases if not lease["live"]]
    detail = f"{len(live)} live, {len(stale)} expired"
    if live:
        detail += ": " + ", ".join(f"{lease['session_id']} held by {lease['holder']}" for lease in live[:5])
    if stale:
        detail += "; stale (the next acquirer replaces them): " + ", ".join(
            f"{lease['session_id']} of {lease['holder']}" for lease in stale[:5]
        )
    return detail


def _check(name: str, status: str, detail: str) -> dict[str, str]:
    return {"check": name, "status": status, "detail": detail}


async def _run_checks(db: Any, target: Target) -> list[dict[str, str]]:
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
            checks.append(_check("fts", "fail", "the search index is invalid (an interrupted build): REINDEX it"))
        elif pending:
            checks.append(_check("fts", "warn", f"{fts} layout, backfill {pending['percent']}% done"))
        else:
            checks.append(_check("fts", "ok", f"{fts} layout, fully indexed{_trigram_note(info)}"))
        bar.update()
        wal = info.get("wal_bytes")
        if "wal_bytes" in info:
            status = "warn" if wal is not None and wal > WAL_WARN_BYTES else "ok"
            checks.append(_check("wal", status, f"journal mode {info.get('journal_mode')}, WAL {size(wal)}"))
        bar.update()
        leases = await _if_supported(db.compression_leases())
        if leases is None:
            checks.append(_check("leases", "skip", "this backend does not list compression leases"))
        else:
            checks.append(_check("leases", "ok", _lease_detail(leases)))
        bar.update()
    finally:
        bar.close()
    return checks


def _repair(target: Target) -> dict[str, Any]:
    if target.path is None:
        raise CliError("doctor --repair works on SQLite files only")
    if not os.access(target.path.parent, os.W_OK):
        raise CliError(f"doctor --repair needs write access to {target.path.parent} for the backup")
    return repair_state_db_schema(Path(target.path), backup=True)


async def run_doctor(args: argparse.Namespace) -> int:
    checks: list[dict[str, str]]
    try:
        async with open_store(args.target, read_only=True) as db:
            checks = await _run_checks(db, args.target)
    except CliError:
        raise
    except Exception as exc:  # a store that cannot even open is the doctor's main case
        checks = [_check("open", "fail", str(exc))]
    failed = any(c["status"] == "fail" for c in checks)
    report: dict[str, Any] = {"ok": not failed, "checks": checks}
    if args.repair:
        if failed:
            report["repair"] = _repair(args.target)
            report["ok"] = bool(report["repair"]["ok"])
        else:
            report["repair"] = {"ok": True, "backup": None, "steps": [], "integrity": "ok", "note": "nothing to repair"}
    if args.json:
        print_json(report)
    else:
        for check in checks:
            print(f"{check['status'].upper():>4}  {check['check']:<9} {check['detail']}")
        repair = report.get("repair")
        if repair is not None:
            if repair.get("note"):
                print(f"repair: {repair['note']}")
            elif repair.get("refused"):
                print(f"repair refused: {repair['error']}")
            else:
                print(f"repair: backup at {repair['backup']}; steps: {', '.join(repair['steps']) or 'none'}; "
                      f"integrity now: {repair['integrity']}")
    return OK if report["ok"] else FAILURE
