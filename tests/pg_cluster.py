"""Throwaway PostgreSQL 15 instances for failover and replica tests: a primary and streaming standbys.

Each instance is a real server on a free 127.0.0.1 port with its data
directory under a private temporary directory, run as the ``postgres`` OS
user when the tests run as root (initdb refuses root). The primary has
``wal_level=replica``; a standby is made with ``pg_basebackup -R`` and
streams from it. Nothing here touches the machine's own server. Blocking
steps (initdb, pg_ctl) are plain functions: fixtures call them outside the
event loop, tests inside one go through ``asyncio.to_thread``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .pg_instances import _free_port

BIN = Path(os.environ.get("HERMES_PG_BIN", "/usr/lib/postgresql/15/bin"))
HOST = "127.0.0.1"
# Small and quick: these servers hold a few rows for a few seconds.
_SETTINGS = {
    "listen_addresses": f"'{HOST}'",
    "wal_level": "replica",
    "max_wal_senders": "4",
    "shared_buffers": "16MB",
    "max_connections": "40",
    "hot_standby": "on",
    "wal_receiver_status_interval": "1s",
    "autovacuum": "off",
    "jit": "off",
    "logging_collector": "off",
}


def available() -> bool:
    """Whether the PostgreSQL server binaries are installed here."""
    return (BIN / "initdb").exists() and (BIN / "pg_basebackup").exists()


def _as_postgres() -> list[str]:
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


def _run(*args: str, timeout: float = 60) -> str:
    done = subprocess.run([*_as_postgres(), *args], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): {done.stdout}{done.stderr}")
    return done.stdout


@dataclass
class Instance:
    """One server: its data directory, port and whether it was started (and not stopped) here."""

    name: str
    datadir: Path
    port: int
    running: bool = False

    @property
    def url(self) -> str:
        """A plain ``postgresql://`` URL (database ``postgres``) for raw asyncpg connections."""
        return f"postgresql://postgres@{HOST}:{self.port}/postgres"

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        log = self.datadir.parent / f"{self.name}.log"
        _run(str(BIN / "pg_ctl"), "-D", str(self.datadir), "-l", str(log), "-w", "-t", "60", "-o", f"-p {self.port}", "start")
        self.running = True

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``immediate``: as a crash would, no shutdown checkpoint)."""
        if self.running:
            _run(str(BIN / "pg_ctl"), "-D", str(self.datadir), "-m", mode, "-w", "-t", "60", "stop")
            self.running = False

    def promote(self) -> None:
        """Turn this standby into a primary and wait until it accepts writes."""
        _run(str(BIN / "pg_ctl"), "-D", str(self.datadir), "-w", "-t", "60", "promote")

    def sql(self, statement: str) -> str:
        """Run one statement with psql; returns its unaligned output."""
        return _run(str(BIN / "psql"), "-X", "-At", "-h", HOST, "-p", str(self.port), "-U", "postgres", "-d", "postgres",
                    "-c", statement).strip()


@dataclass
class Cluster:
    """A primary and its standbys under one temporary directory; ``close()`` stops them all."""

    root: Path
    primary: Instance
    standbys: list[Instance] = field(default_factory=list)

    def instances(self) -> list[Instance]:
        return [self.primary, *self.standbys]

    def multi_host_url(self, *instances: Instance, query: str = "") -> str:
        """A store URL listing the given instances (all of them by default), libpq's netloc form."""
        hosts = ",".join(f"{HOST}:{i.port}" for i in instances or self.instances())
        return f"postgresql+asyncpg://postgres@{hosts}/postgres" + (f"?{query}" if query else "")

    def add_standby(self, *, synchronous: bool = False) -> Instance:
        """``pg_basebackup -R`` a new standby from the primary, start it and wait until it streams.

        ``synchronous``: the primary then waits for this standby at every commit
        (``synchronous_standby_names``), so an acknowledged commit is on both.
        """
        name = f"standby{len(self.standbys) + 1}"
        standby = Instance(name, self.root / name, _free_port())
        _run(str(BIN / "pg_basebackup"), "-h", HOST, "-p", str(self.primary.port), "-U", "postgres",
             "-D", str(standby.datadir), "-R", "-X", "stream", "--no-sync", "-c", "fast", timeout=120)
        with (standby.datadir / "postgresql.auto.conf").open("a") as conf:
            conf.write(f"cluster_name = '{name}'\n")  # the walreceiver's application_name
        # pg_basebackup as root-via-runuser wrote files owned by postgres; the append above kept the owner.
        self.standbys.append(standby)
        standby.start()
        _wait(lambda: self.primary.sql(f"SELECT count(*) FROM pg_stat_replication WHERE application_name = '{name}' "
                                       "AND state = 'streaming'") == "1", f"{name} streaming")
        if synchronous:
            self.primary.sql(f"ALTER SYSTEM SET synchronous_standby_names = '{name}'")
            self.primary.sql("SELECT pg_reload_conf()")
            _wait(lambda: self.primary.sql(f"SELECT sync_state FROM pg_stat_replication WHERE application_name = '{name}'")
                  == "sync", f"{name} synchronous")
        return standby

    def close(self) -> None:
        """Stop every instance still running (immediately: their data is thrown away) and delete it all."""
        for instance in self.instances():
            with contextlib.suppress(Exception):
                instance.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


async def wait_replayed(standby: Instance, query: str, expected: str, timeout: float = 30.0) -> None:
    """Wait (off the loop) until ``query`` on ``standby`` answers ``expected``: the primary's write was replayed."""

    def answered() -> bool:
        try:
            return standby.sql(query) == expected
        except RuntimeError:  # e.g. the table itself is not replayed yet
            return False

    await asyncio.to_thread(_wait, answered, f"{query!r} = {expected} on {standby.name}", timeout)


def _wait(check: object, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if check():  # type: ignore[operator]
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:g} s for {what}")
        time.sleep(0.05)


def start_primary() -> Cluster:
    """initdb and start a primary on a free port; the caller must ``close()`` the returned cluster."""
    root = Path(tempfile.mkdtemp(prefix="hermes-pg-cluster-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    primary = Instance("primary", root / "primary", _free_port())
    cluster = Cluster(root, primary)
    try:
        _run(str(BIN / "initdb"), "-D", str(primary.datadir), "-U", "postgres", "--auth=trust", "--no-sync",
             "--no-instructions", "-E", "UTF8", "--locale=C.UTF-8", timeout=120)
        with (primary.datadir / "postgresql.auto.conf").open("a") as conf:
            conf.writelines(f"{key} = {value}\n" for key, value in _SETTINGS.items())
            conf.write(f"unix_socket_directories = '{root}'\n")
        primary.start()
    except BaseException:
        cluster.close()
        raise
    return cluster


@pytest.fixture
def pg_primary() -> Iterator[Cluster]:
    """A primary of the test's own (no standby yet); stopped and deleted afterwards, pass or fail.

    Test modules import it (``from .pg_cluster import pg_primary``); the ``pg_`` prefix marks
    its tests ``postgres``.
    """
    if not available():
        pytest.skip("PostgreSQL server binaries are not installed")
    cluster = start_primary()
    try:
        yield cluster
    finally:
        cluster.close()
