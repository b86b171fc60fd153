"""``repair_state_db_schema``'s attempt ledger and backup retention (upstream 2026-08, spec §3.12).

Real damaged files: a database cut to its first two pages cannot be
repaired (no transcript table survives), so every attempt fails the same way.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from hermes_state import SessionDB, repair_state_db_schema
from hermes_state.private_files import copy_private, open_private, write_private
from hermes_state.sqlite.driver import driver_module


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A umask that takes no bits away: files are private only if the code makes them so."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


async def make_store(path: Path) -> None:
    db = SessionDB(path)
    try:
        await db.create_session("s", "cli")
        await db.append_messages_batch("s", [{"role": "user", "content": f"line {i} " + "x" * 300} for i in range(200)])
    finally:
        await db.close()


def cut_short(path: Path) -> None:
    with closing(driver_module().connect(str(path))) as conn:
        size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    os.truncate(path, 2 * size)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def backups(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.glob(f"{path.name}.malformed-backup-*"))


def ledger(path: Path) -> dict[str, object]:
    return json.loads(Path(f"{path}.repair-attempts.json").read_text())


async def test_three_failures_then_refusal_until_the_file_changes(db_path: Path, open_umask: None) -> None:
    await make_store(db_path)
    cut_short(db_path)
    os.chmod(db_path, 0o644)
    ledger_file = Path(f"{db_path}.repair-attempts.json")

    first = await repair_state_db_schema(db_path)
    assert not first["ok"] and first["failed_attempts"] == 1 and first["ledger"] == str(ledger_file)
    assert first["repaired"] is False and first["strategy"] is None and first["error"]
    assert first["backup_path"] == first["backup"]
    assert first["backup_reused"] is False
    assert mode(ledger_file) == 0o600 and mode(Path(first["backup"])) == 0o600
    assert ledger(db_path)["failed_attempts"] == 1
    stamp = db_path.stat()
    assert ledger(db_path)["fingerprint"] == f"{stamp.st_size}:{stamp.st_mtime_ns}"

    second = await repair_state_db_schema(db_path)
    assert second["failed_attempts"] == 2
    # The file did not change: its newest backup is reused, not copied again.
    assert second["backup_reused"] is True and second["backup"] == first["backup"]
    assert len(backups(db_path)) == 1
    assert (await repair_state_db_schema(db_path))["failed_attempts"] == 3

    before = (db_path.read_bytes(), backups(db_path), db_path.stat().st_mtime_ns)
    refused = await repair_state_db_schema(db_path)
    assert refused["ok"] is False and refused["refused"] is True and refused["steps"] == []
    assert refused["failed_attempts"] == 3 and refused["backup"] is None
    assert "manual recovery is required" in refused["error"]
    assert refused["repaired"] is False and refused["backup_path"] is None
    assert f'sqlite3 {db_path} ".recover"' in refused["error"] and str(ledger_file) in refused["error"]
    assert (db_path.read_bytes(), backups(db_path), db_path.stat().st_mtime_ns) == before  # not even probed
    assert ledger(db_path)["failed_attempts"] == 3  # a refusal is not an attempt

    # Another version of the file (here only a new mtime) starts the count again.
    os.utime(db_path, ns=(time.time_ns(), time.time_ns() + 5_000_000_000))
    again = await repair_state_db_schema(db_path)
    assert not again.get("refused") and again["failed_attempts"] == 1
    assert again["backup_reused"] is False and len(backups(db_path)) == 2

    # Deleting the ledger, as the message says, allows another attempt.
    for _ in range(2):
        await repair_state_db_schema(db_path)
    assert (await repair_state_db_schema(db_path))["refused"] is True
    ledger_file.unlink()
    assert (await repair_state_db_schema(db_path))["failed_attempts"] == 1


async def test_any_success_clears_the_ledger(db_path: Path, tmp_path: Path) -> None:
    await make_store(db_path)
    healthy = tmp_path / "healthy.db"
    shutil.copyfile(db_path, healthy)
    cut_short(db_path)
    for _ in range(3):
        await repair_state_db_schema(db_path)
    assert (await repair_state_db_schema(db_path))["refused"] is True
    shutil.copyfile(healthy, db_path)  # a restored file is another fingerprint
    report = await repair_state_db_schema(db_path)
    assert report["ok"] and report["integrity"] == "ok"  # already healthy counts as a success
    assert report["repaired"] is True and report["strategy"] == "already_healthy"
    assert not Path(f"{db_path}.repair-attempts.json").exists()
    db = SessionDB(db_path)
    try:
        assert len(await db.get_messages("s")) == 200
    finally:
        await db.close()


async def test_backup_retention_keeps_the_newest_three_with_their_sidecars(db_path: Path, open_umask: None) -> None:
    await make_store(db_path)
    cut_short(db_path)
    Path(f"{db_path}-wal").write_bytes(b"")  # an (empty) sidecar travels with each backup
    old = [f"{db_path.name}.malformed-backup-20200101-000000{suffix}" for suffix in ("", "-2", "-10")]
    for name in old:
        for ending in ("", "-wal", "-shm"):
            (db_path.parent / f"{name}{ending}").write_bytes(b"old")
    foreign = db_path.parent / f"{db_path.name}.malformed-backup-notes.txt"
    foreign.write_text("not a backup")

    report = await repair_state_db_schema(db_path)
    new = Path(report["backup"])
    assert not report["backup_reused"]
    # Newest three by stamp, then collision number (-10 is newer than -2): the plain one goes.
    kept = {new.name, old[2], old[1]}
    remaining = {p.name for p in db_path.parent.glob(f"{db_path.name}.malformed-backup-*")}
    assert remaining == kept | {f"{n}-wal" for n in kept} | {f"{n}-shm" for n in kept - {new.name}} | {foreign.name}
    assert mode(new) == mode(Path(f"{new}-wal")) == 0o600


def test_private_files_whatever_the_umask(tmp_path: Path, open_umask: None) -> None:
    ledger_file = tmp_path / "ledger.json"
    ledger_file.write_text("{}")
    os.chmod(ledger_file, 0o666)
    write_private(ledger_file, b'{"x": 1}')  # replaces a world-writable file with a private one
    assert mode(ledger_file) == 0o600 and ledger_file.read_bytes() == b'{"x": 1}'
    loose = tmp_path / "loose"
    loose.write_text("")
    os.chmod(loose, 0o644)
    os.close(open_private(loose))  # an existing file is tightened too
    assert mode(loose) == 0o600
    source = tmp_path / "source"
    source.write_bytes(b"payload")
    os.utime(source, ns=(1_000_000_123, 2_000_000_456))
    copy = tmp_path / "copy"
    copy_private(source, copy)
    assert copy.read_bytes() == b"payload" and mode(copy) == 0o600
    assert copy.stat().st_mtime_ns == 2_000_000_456
    with pytest.raises(FileExistsError):
        copy_private(source, copy)
    assert copy.read_bytes() == b"payload"  # an existing target is left alone
