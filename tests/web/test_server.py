"""``hermes-state serve`` as a process: its URL line, signals, headers, methods, JSON mirrors, tokens, read-only files."""

from __future__ import annotations

import hashlib
import json
import re
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import pytest

from hermes_state import SessionDB
from hermes_state.web.hitcount import SEARCH_COUNT_CAP
from hermes_state.web.pages import SEARCH_PAGE
from tests.cli_support import run_cli
from tests.web.support import (
    BACKEND_PARAMS, HOSTILE_ID, URL_ID, SeededStore, Viewer, fresh_store, request, run_seed, write_elsewhere,
)

PAGES = ["/", "/sessions/deploy", "/sessions/deploy?view=trace", "/sessions/deploy?q=docker", "/search?q=zebrafish", "/usage",
         "/api/sessions", "/api/sessions/deploy", "/assets/highlight.css",
         "/api/search?q=zebrafish", "/static/style.css", "/static/viewer.js"]


def test_the_url_line_and_every_page_answers(viewer: Viewer) -> None:
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", viewer.url)
    for path in PAGES:
        status, headers, _ = viewer.get(path)
        assert status == 200, path
        assert "script-src 'self'" in headers["content-security-policy"], path
        assert "unsafe-inline" not in headers["content-security-policy"], path
        assert headers["x-content-type-options"] == "nosniff", path


@pytest.mark.parametrize("path", ["/", "/sessions/deploy", "/api/sessions", "/static/style.css", "/no/such/page"])
@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_every_other_method_is_405(viewer: Viewer, path: str, method: str) -> None:
    status, headers, _ = request(viewer.base.rstrip("/") + path, method=method)
    assert status == 405
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["allow"] == "GET, HEAD"


def test_not_found_and_bad_requests(viewer: Viewer) -> None:
    status, headers, body = viewer.get("/sessions/no-such-session")
    assert status == 404 and b"no-such-session" in body and "default-src 'none'" in headers["content-security-policy"]
    status, _, body = viewer.get("/api/sessions/no-such-session")
    assert status == 404 and json.loads(body) == {"error": "no session with the id 'no-such-session'"}
    assert viewer.get("/nothing-here")[0] == 404
    assert viewer.get("/sessions/")[0] == 404
    for path in ("/?page=0", "/?archived=maybe", "/?from=yesterday", "/sessions/deploy?before=x", "/usage?metric=joy",
                 "/search?q=a%00b", "/api/sessions?page=-1"):
        assert viewer.get(path)[0] == 400, path


def test_json_mirrors_are_bare(viewer: Viewer, seeded_store: SeededStore) -> None:
    sessions = json.loads(viewer.get("/api/sessions")[2])
    assert isinstance(sessions, list) and {"deploy", "compacted", HOSTILE_ID} <= {row["id"] for row in sessions}
    detail = json.loads(viewer.get("/api/sessions/deploy")[2])
    assert set(detail) == {"session", "messages"}
    assert detail["session"]["id"] == "deploy" and detail["session"]["title"] == "Compose outage"
    contents = [m["content"] for m in detail["messages"]]
    assert contents[0] == "Why did the docker compose deployment fail?"
    assert detail["messages"][1]["tool_calls"][0]["function"]["name"] == "terminal"
    page = json.loads(viewer.get(f"/api/sessions/deploy?after={detail['messages'][0]['id']}&limit=2")[2])
    assert [m["id"] for m in page["messages"]] == [m["id"] for m in detail["messages"][1:3]]
    hits = json.loads(viewer.get("/api/search?q=zebrafish")[2])
    assert isinstance(hits, list) and hits and all(hit["session_id"] == "deploy" for hit in hits)
    hostile = json.loads(viewer.get("/api/sessions/" + quote(HOSTILE_ID, safe=""))[2])
    assert hostile["session"]["id"] == HOSTILE_ID  # an id full of URL and HTML characters round-trips
    odd = json.loads(viewer.get("/api/sessions/" + quote(URL_ID, safe=""))[2])
    assert odd["session"]["id"] == URL_ID and odd["messages"][0]["content"] == "reachable by its escaped id"
    status, _, body = viewer.get("/sessions/" + quote(URL_ID, safe=""))
    assert status == 200 and "reachable by its escaped id" in body.decode()


def test_listing_filters(viewer: Viewer) -> None:
    def ids(query: str) -> list[str]:
        return [row["id"] for row in json.loads(viewer.get("/api/sessions" + query)[2])]

    everything = ids("")
    assert everything[0] == HOSTILE_ID and "deploy" in everything  # newest first
    assert ids("?source=telegram") == ["compacted"]
    assert ids("?q=compose") == ["deploy"]
    assert ids("?pinned=1") == []
    assert ids("?from=2000-01-01&to=2000-01-02") == []
    assert set(ids("?from=2000-01-01")) == set(everything)
    assert ids("?tool=terminal") == ["deploy"]
    assert ids("?min_messages=200") == ["long"]
    assert ids("?sort=cost")[:2] == [HOSTILE_ID, "long"]
    assert ids("?sort=messages")[0] == "long"
    assert ids("?model=gpt-test&min_cost=0.01") == ["long", "deploy"]
    status, headers, body = viewer.get("/api/sessions?model=gpt-test")
    assert int(headers["x-total-count"]) == len(json.loads(body)) >= 5
    for bad in ("sort=price", "min_cost=-1", "min_cost=nan", "min_messages=x"):
        status, _, body = viewer.get("/api/sessions?" + bad)
        assert status == 400 and bad.split("=")[0].encode() in body, bad


def _hit_count(viewer: Viewer, path: str) -> tuple[str, str]:
    """The search page's hit count line and its pager's "page N of M"."""
    status, _, body = viewer.get(path)
    assert status == 200, path
    page = body.decode()
    count = re.search(r'<p class="hit-count">(.*?)</p>', page)
    where = re.search(r'<span class="where">(.*?)</span>', page)
    assert count and where, path
    return count.group(1), where.group(1)


def test_search_shows_the_total_over_all_pages(viewer: Viewer) -> None:
    # "thanks N" closes each of the long session's 50 turns: three pages of hits.
    assert _hit_count(viewer, "/search?q=thanks") == ("Matches 1–20 of 50", "page 1 of 3")
    assert _hit_count(viewer, "/search?q=thanks&page=3") == ("Matches 41–50 of 50", "page 3 of 3")
    assert 'class="last" href="/search?q=thanks&amp;page=3"' in viewer.get("/search?q=thanks")[2].decode()
    assert _hit_count(viewer, "/search?q=kingfisher") == ("1 match", "page 1 of 1")
    assert _hit_count(viewer, "/search?q=nomatchword") == ("0 matches", "page 1 of 1")
    status, headers, body = viewer.get("/api/search?q=thanks&page=3")
    assert status == 200 and headers["x-total-count"] == "50" and "x-total-count-capped" not in headers
    assert len(json.loads(body)) == 50 - 2 * SEARCH_PAGE
    status, headers, body = viewer.get("/api/search?q=nomatchword")
    assert status == 200 and headers["x-total-count"] == "0" and json.loads(body) == []


@contextmanager
def _herons(backend: str, directory: Path, web_home: Path, n: int) -> Iterator[tuple[Viewer, str]]:
    """``(viewer, db)``: a viewer on a fresh store of ``backend`` holding ``n`` messages that say "heron"."""
    async def fill(store: SessionDB) -> None:
        await store.create_session("busy", "cli")
        await store.append_messages_batch("busy", [{"role": "user", "content": f"heron sighting {k}"} for k in range(n)])

    db, drop = fresh_store(backend, directory, fill)
    try:
        viewer = Viewer(web_home, db)
        try:
            yield viewer, db
        finally:
            assert viewer.stop() == 0
    finally:
        drop()


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_search_counts_stop_at_the_cap(tmp_path: Path, web_home: Path, backend: str) -> None:
    with _herons(backend, tmp_path / "busy", web_home, SEARCH_COUNT_CAP + 5) as (viewer, _):
        pages = SEARCH_COUNT_CAP // SEARCH_PAGE
        assert _hit_count(viewer, "/search?q=heron") == (f"Matches 1–20 of {SEARCH_COUNT_CAP:,}+", f"page 1 of {pages}+")
        page = viewer.get("/search?q=heron")[2].decode()
        assert 'class="last"' not in page and 'rel="next"' in page  # the last page is unknown; the next one is not
        # Past the counted pages the next link still follows the hits.
        assert _hit_count(viewer, f"/search?q=heron&page={pages + 1}")[0] == (
            f"Matches {SEARCH_COUNT_CAP + 1:,}–{SEARCH_COUNT_CAP + 5:,} of {SEARCH_COUNT_CAP:,}+")
        _, headers, _ = viewer.get("/api/search?q=heron")
        assert headers["x-total-count"] == str(SEARCH_COUNT_CAP) and headers["x-total-count-capped"] == "1"


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_a_remembered_count_never_trails_the_hits(tmp_path: Path, web_home: Path, backend: str) -> None:
    with _herons(backend, tmp_path / "few", web_home, 25) as (viewer, db):
        assert _hit_count(viewer, "/search?q=heron") == ("Matches 1–20 of 25", "page 1 of 2")
        # Another process adds 30 more while later pages reuse the first page's count.
        write_elsewhere(db, web_home, '        await db.append_messages_batch("busy", '
                                      '[{"role": "user", "content": f"heron again {n}"} for n in range(30)])')
        assert _hit_count(viewer, "/search?q=heron&page=3") == ("Matches 41–55 of 55", "page 3 of 3")


def _sidecars(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name.startswith(path.name + "-"))


def test_sqlite_file_unchanged_and_no_sidecars_left(tmp_path: Path, web_home: Path) -> None:
    db = tmp_path / "state.db"
    run_seed(lambda: SessionDB(db))
    assert _sidecars(db) == []
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    viewer = Viewer(web_home, str(db))
    try:
        for path in PAGES:
            assert viewer.get(path)[0] == 200, path
    finally:
        assert viewer.stop(signal.SIGTERM) == 0
    assert viewer.stderr == ""
    assert _sidecars(db) == []
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
def test_signals_stop_it_cleanly(viewer: Viewer, seeded_store: SeededStore, web_home: Path, signum: int, code: int) -> None:
    own = Viewer(web_home, seeded_store.db)
    assert own.get("/")[0] == 200
    assert own.stop(signum) == code
    assert "Traceback" not in own.stderr and own.stderr.strip() == ""
    assert viewer.get("/")[0] == 200  # the shared viewer on the same store is unaffected


def test_a_non_loopback_bind_needs_the_token(seeded_store: SeededStore, web_home: Path) -> None:
    own = Viewer(web_home, seeded_store.db, "--host", "0.0.0.0")
    try:
        match = re.fullmatch(r"http://0\.0\.0\.0:(\d+)/\?token=([A-Za-z0-9_-]{20,})", own.url)
        assert match, own.url
        base, token = f"http://127.0.0.1:{match.group(1)}", match.group(2)
        for path in ("/", "/api/sessions", "/static/style.css", "/sessions/deploy"):
            status, headers, _ = request(base + path)
            assert status == 401 and headers["x-content-type-options"] == "nosniff", path
            assert request(base + path + "?token=wrong-token-123")[0] == 403, path
            wrong_cookie = {"Cookie": f"hermes_state_token_{match.group(1)}=wrong-token-123"}
            assert request(base + path, headers=wrong_cookie)[0] == 403, path
        status, headers, _ = request(base + "/sessions/deploy?token=" + token + "&at=1")
        assert status == 303 and headers["location"] == "/sessions/deploy?at=1"
        cookie = headers["set-cookie"].split(";", 1)[0]
        assert cookie == f"hermes_state_token_{match.group(1)}={token}" and "HttpOnly" in headers["set-cookie"]
        assert request(base + "/sessions/deploy?at=1", headers={"Cookie": cookie})[0] == 200
        assert request(base + "/api/sessions", headers={"Cookie": cookie})[0] == 200
        # Bound to every address: IP literals and this machine's name are its names, others are not.
        import socket

        for host, status in ((f"{socket.gethostname()}:{match.group(1)}", 200), (f"192.0.2.7:{match.group(1)}", 200),
                             (f"attacker.example:{match.group(1)}", 400)):
            assert request(base + "/api/sessions", headers={"Cookie": cookie, "Host": host})[0] == status, host
    finally:
        assert own.stop() == 0


def test_a_given_token_is_required_on_loopback_too(seeded_store: SeededStore, web_home: Path) -> None:
    own = Viewer(web_home, seeded_store.db, "--token", "s3cret-token")
    try:
        assert own.url.endswith("/?token=s3cret-token")
        assert own.get("/")[0] == 401
        assert request(own.url)[0] == 303
    finally:
        own.stop()


def test_command_errors_are_one_line(tmp_path: Path, web_home: Path) -> None:
    missing = run_cli(web_home, "--db", str(tmp_path / "missing.db"), "serve", "--port", "0")
    assert missing.returncode == 3 and "no database" in missing.stderr and "Traceback" not in missing.stderr
    bad_token = run_cli(web_home, "--db", str(tmp_path / "missing.db"), "serve", "--token", "a b")
    assert bad_token.returncode == 1 and bad_token.stderr.count("\n") == 1 and "--token" in bad_token.stderr
    bad_port = run_cli(web_home, "serve", "--port", "70000")
    assert bad_port.returncode == 2


def test_serve_is_in_the_help_and_imports_no_web_stack() -> None:
    import subprocess
    import sys

    code = ("import sys, hermes_state.cli as c; c.build_parser(); "
            "print(sorted(m for m in ('starlette', 'uvicorn', 'jinja2', 'markdown_it', 'pygments') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stderr
    from hermes_state.cli import build_parser

    assert "serve" in build_parser().format_help()
