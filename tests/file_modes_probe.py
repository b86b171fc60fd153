"""Everything the store writes, under a given umask, with the mode each file ends up with (for test_private_files).

Usage: ``python tests/file_modes_probe.py UMASK WORKDIR``; prints one JSON
object ``{label: "0o600" | None}`` (None: the file does not exist). The umask
is set before anything is imported, so every file below is created under it.
"""

from __future__ import annotations

import os
import sys

os.umask(int(sys.argv[1], 8))

import asyncio  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
from pathlib import Path  # noqa: E402

from hermes_state import SessionDB, repair_state_db_schema  # noqa: E402
from hermes_state.sqlite.driver import driver_module  # noqa: E402

from tests.test_damaged_files import make_file, marker, page_of, smash_page  # noqa: E402

WORK = Path(sys.argv[2])
HOME = WORK / "home"  # does not exist yet: the store creates it
os.environ["HERMES_HOME"] = str(HOME)


def mode(path: Path) -> str | None:
    return oct(path.stat().st_mode & 0o777) if path.exists() else None


def modes(prefix: str, paths: dict[str, Path]) -> dict[str, str | None]:
    return {f"{prefix} {label}": mode(path) for label, path in paths.items()}


async def store_files(found: dict[str, str | None]) -> None:
    db = SessionDB()  # $HERMES_HOME/state.db
    try:
        await db.create_session("s", "cli")
        await db.append_message("s", "user", "my API key is sk-not-really")
        db_path = HOME / "state.db"
        found["journal mode"] = (await db.storage_info())["journal_mode"]  # rollback with a WAL-reset-bug SQLite
        found.update(modes("open", {"home": HOME, "db": db_path, "wal": Path(f"{db_path}-wal"),
                                    "shm": Path(f"{db_path}-shm")}))
        await db.export_all_to(HOME / "api-export.jsonl")
    finally:
        await db.close()
    found["api export"] = mode(HOME / "api-export.jsonl")

    nested = WORK / "a" / "b" / "nested.db"  # two missing parents
    async with SessionDB(nested) as db:
        await db.create_session("n", "cli")
    found.update(modes("nested", {"a": WORK / "a", "b": WORK / "a" / "b", "db": nested}))

    shared = WORK / "shared"
    shared.mkdir()
    os.chmod(shared, 0o755)  # an administrator's choice: kept
    async with SessionDB(shared / "state.db") as db:
        await db.create_session("x", "cli")
    found.update(modes("existing dir", {"dir": shared, "db": shared / "state.db"}))

    journal = WORK / "journal"
    journal.mkdir()
    (journal / "config.yaml").write_text("database:\n  journal_mode: delete\n")
    os.environ["HERMES_HOME"] = str(journal)
    try:
        async with SessionDB(journal / "state.db") as db:
            await db.create_session("j", "cli")
            found["rollback journal db"] = mode(journal / "state.db")
    finally:
        os.environ["HERMES_HOME"] = str(HOME)
    conn = driver_module().connect(str(journal / "state.db"), isolation_level=None)
    try:  # the -journal file lives while a write transaction does
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO state_meta (key, value) VALUES ('probe', 'x')")
        found["rollback journal"] = mode(journal / "state.db-journal")
        conn.execute("ROLLBACK")
    finally:
        conn.close()


def command_files(found: dict[str, str | None]) -> None:
    env = dict(os.environ)
    out = WORK / "cli-export.jsonl"
    done = subprocess.run([sys.executable, "-m", "hermes_state", "export", "-o", str(out)], env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    found["cli export"] = mode(out)
    out.write_text("an older export, 0644\n")
    os.chmod(out, 0o644)
    done = subprocess.run([sys.executable, "-m", "hermes_state", "export", "-o", str(out)], env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    found["cli export over a 0644 file"] = mode(out)


async def repair_files(found: dict[str, str | None]) -> None:
    damaged = WORK / "damaged" / "state.db"
    damaged.parent.mkdir()
    await make_file(damaged)
    os.chmod(damaged, 0o644)  # a file from before this release: its copies must not inherit that
    smash_page(damaged, page_of(damaged, marker(200)))
    report = await repair_state_db_schema(damaged, backup=True)
    assert report["ok"] and report["steps"][-1] == "salvage", report
    found["repair backup"] = mode(Path(report["backup"]))
    found["salvaged db"] = mode(damaged)

    moved = WORK / "moved" / "state.db"  # no backup: the damaged file itself is moved aside
    moved.parent.mkdir()
    await make_file(moved)
    os.chmod(moved, 0o644)
    smash_page(moved, page_of(moved, marker(200)))
    report = await repair_state_db_schema(moved, backup=False)
    assert report["ok"], report
    found["moved aside"] = mode(Path(report["backup"]))

    zeroed = WORK / "zeroed" / "state.db"
    zeroed.parent.mkdir()
    zeroed.write_bytes(b"\0" * 8192)
    os.chmod(zeroed, 0o644)
    async with SessionDB(zeroed) as db:
        await db.create_session("z", "cli")
    [quarantined] = [p for p in zeroed.parent.iterdir() if ".zeroed-" in p.name]
    found["quarantined zeroed file"] = mode(quarantined)
    found["fresh db after quarantine"] = mode(zeroed)


async def main() -> None:
    found: dict[str, str | None] = {}
    await store_files(found)
    command_files(found)
    await repair_files(found)
    print(json.dumps(found))


asyncio.run(main())
