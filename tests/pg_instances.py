"""PgBouncer instances the tests start themselves (a spare loopback port, a temporary directory).

``start_pgbouncer(target)`` runs ``/usr/sbin/pgbouncer`` (Debian's package;
CI installs it) in front of the PostgreSQL server named by ``target``, by
default in transaction pooling mode with every startup parameter it does not
track refused, as a managed service's pooler behaves. It listens on
127.0.0.1 and on a Unix socket in its own temporary directory, and
``stop_pgbouncer`` ends exactly the process it started. Never touches the
server's own configuration.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

PGBOUNCER = os.environ.get("HERMES_TEST_PGBOUNCER", "/usr/sbin/pgbouncer")


@dataclass
class PgBouncer:
    """A running PgBouncer: its port, the ``postgresql://`` URL through it, and its files."""

    port: int
    admin_dsn: str
    directory: Path
    process: subprocess.Popen[bytes]

    def log(self) -> str:
        """What PgBouncer logged so far (for failure messages)."""
        paths = (self.directory / "stderr.txt", self.directory / "pgbouncer.log")
        return "".join(path.read_text(errors="replace") for path in paths if path.exists())


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_listening(port: int, process: subprocess.Popen[bytes], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def start_pgbouncer(
    target_dsn: str, *, pool_mode: str = "transaction", pool_size: int = 20, connect_query: str | None = None
) -> PgBouncer:
    """Start PgBouncer in front of ``target_dsn`` (a ``postgresql://`` URL, trust auth); returns it running.

    ``connect_query`` runs on each server connection PgBouncer opens (e.g. a
    ``SET search_path``, so clients need no startup parameter for it).

    Fails the test when the binary is missing or PgBouncer does not come up.
    """
    if not os.access(PGBOUNCER, os.X_OK):
        pytest.fail(f"PgBouncer is not installed at {PGBOUNCER} (apt-get install pgbouncer)")
    target = urlsplit(target_dsn)
    user = target.username or "postgres"
    database = target.path.lstrip("/")
    directory = Path(tempfile.mkdtemp(prefix="hermes-pgbouncer-"))
    (directory / "users.txt").write_text(f'"{user}" ""\n')
    port = _free_port()
    query = "" if connect_query is None else " connect_query='" + connect_query.replace("'", "''") + "'"
    (directory / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"{database} = host={target.hostname or '127.0.0.1'} port={target.port or 5432} dbname={database}{query}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir = {directory}\n"
        f"auth_type = trust\nauth_file = {directory / 'users.txt'}\n"
        f"pool_mode = {pool_mode}\ndefault_pool_size = {pool_size}\nmax_client_conn = 500\n"
        f"logfile = {directory / 'pgbouncer.log'}\npidfile = {directory / 'pgbouncer.pid'}\n"
        "server_reset_query =\nlog_connections = 0\nlog_disconnections = 0\n"
    )
    command = [PGBOUNCER, str(directory / "pgbouncer.ini")]
    if os.geteuid() == 0:  # PgBouncer refuses to run as root: drop to nobody, who must reach its files
        command[1:1] = ["-u", "nobody"]
        directory.chmod(0o777)
        for name in ("users.txt", "pgbouncer.ini"):
            (directory / name).chmod(0o644)
    # A file, not a pipe: PgBouncer logs every connection to stderr too, and blocks once a pipe nobody reads is full.
    with open(directory / "stderr.txt", "wb") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)
    bouncer = PgBouncer(port, urlunsplit(target._replace(netloc=f"{user}@127.0.0.1:{port}")), directory, process)
    if not _wait_listening(port, process, 10.0):
        stop_pgbouncer(bouncer)
        pytest.fail(f"PgBouncer did not start on 127.0.0.1:{port}:\n{bouncer.log()}")
    return bouncer


def stop_pgbouncer(bouncer: PgBouncer) -> None:
    """Stop the PgBouncer ``start_pgbouncer`` started (its own process only) and remove its files."""
    if bouncer.process.poll() is None:
        bouncer.process.send_signal(signal.SIGTERM)  # PgBouncer: immediate shutdown (SIGINT waits for clients)
        try:
            bouncer.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            bouncer.process.kill()
            bouncer.process.wait()
    shutil.rmtree(bouncer.directory, ignore_errors=True)
