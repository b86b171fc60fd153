"""The viewer's defences over real HTTP: Host allow-list (DNS rebinding), tokens for scripts, same-origin redirects, no 500s."""

from __future__ import annotations

import http.client
import json
from urllib.parse import quote, urlsplit

import pytest

from tests.web.support import SeededStore, Viewer, request

DATA_PATHS = ["/", "/api/sessions", "/api/search?q=zebrafish", "/api/sessions/deploy", "/sessions/deploy",
              "/search?q=zebrafish", "/usage", "/static/viewer.js"]


def raw_get(viewer: Viewer, target: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """A GET with ``target`` sent as is on the request line (no client-side normalisation)."""
    parts = urlsplit(viewer.base)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.putrequest("GET", target, skip_host=True, skip_accept_encoding=True)
        conn.putheader("Host", (headers or {}).pop("Host", parts.netloc))
        for name, value in (headers or {}).items():
            conn.putheader(name, value)
        conn.endheaders()
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def test_foreign_host_headers_get_no_data(viewer: Viewer) -> None:
    port = urlsplit(viewer.base).port
    for host in (f"attacker.example:{port}", "attacker.example", f"127.0.0.1.nip.example:{port}",
                 f"localhost.attacker.example:{port}", f"[::2]:{port}", f"10.0.0.1:{port}"):
        for path in DATA_PATHS:
            status, headers, body = raw_get(viewer, path, {"Host": host})
            assert status == 400, (host, path)
            assert b"deploy" not in body and b"zebrafish" not in body and b"Compose" not in body, (host, path)
            assert headers["content-type"].startswith("text/plain")
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"LOCALHOST.:{port}", f"[::1]:{port}",
                 f"127.0.0.2:{port}", f"app.localhost:{port}"):
        assert raw_get(viewer, "/api/sessions", {"Host": host})[0] == 200, host


@pytest.fixture
def token_viewer(seeded_store: SeededStore, web_home) -> Viewer:  # type: ignore[no-untyped-def]
    own = Viewer(web_home, seeded_store.db, "--token", "s3cret-token")
    yield own
    assert own.stop() == 0


def test_scripts_use_the_api_with_a_bearer_header_or_the_query_token(token_viewer: Viewer) -> None:
    api = token_viewer.base + "api/sessions"
    status, headers, body = request(api, headers={"Authorization": "Bearer s3cret-token"})
    assert status == 200 and "set-cookie" not in headers
    assert "deploy" in {row["id"] for row in json.loads(body)}
    assert request(api, headers={"Authorization": "bearer   s3cret-token"})[0] == 200
    assert request(api, headers={"Authorization": "Bearer wrong-token-1"})[0] == 403
    status, headers, body = request(api + "?token=s3cret-token")
    assert status == 200 and "set-cookie" not in headers and json.loads(body)
    status, _, body = request(token_viewer.base + "api/search?q=zebrafish&token=s3cret-token")
    assert status == 200 and json.loads(body)[0]["session_id"] == "deploy"
    assert request(api + "?token=wrong-token-1")[0] == 403
    status, headers, _ = request(api)
    assert status == 401 and "Bearer" in headers["www-authenticate"]
    # A browser's page still moves the token into a cookie.
    status, headers, _ = request(token_viewer.base + "?token=s3cret-token")
    assert status == 303 and headers["location"] == "/" and "HttpOnly" in headers["set-cookie"]


@pytest.mark.parametrize("target", [
    "//attacker.example/%2e%2e?token=s3cret-token",
    "///attacker.example/?token=s3cret-token",
    "/\\attacker.example/?token=s3cret-token",
    "//\\attacker.example?token=s3cret-token&q=1",
    "/%2F%2Fattacker.example?token=s3cret-token",
])
def test_token_redirects_stay_on_this_server(token_viewer: Viewer, target: str) -> None:
    status, headers, _ = raw_get(token_viewer, target)
    assert status == 303
    location = headers["location"]
    assert location.startswith("/") and not location.startswith(("//", "/\\")) and "\\" not in location, location
    assert urlsplit(location).netloc == "" and urlsplit("http://127.0.0.1:1" + location).hostname == "127.0.0.1"
    assert "token" not in location


WEIRD = ["9999-12-31", "0001-01-01", "10000-01-01", "2026-02-30", "-1", "0", "99999999999999999999999", "1e9",
         "%ED%A0%80", "%FF%FE", "%E2%80%AE", "%22", "*", "NOT", "()", "'%20OR%201=1%20--", "%20", "A" * 3000]
ROUTES = {
    "/": ["source", "q", "archived", "pinned", "hidden", "from", "to", "page"],
    "/api/sessions": ["source", "q", "archived", "from", "to", "page"],
    "/sessions/deploy": ["at", "before", "after", "page", "n", "q"],
    "/api/sessions/deploy": ["after", "limit"],
    "/tail?session=deploy": ["session", "after", "first"],
    "/search": ["q", "page"],
    "/api/search": ["q", "page"],
    "/usage": ["from", "to", "metric"],
}


@pytest.mark.parametrize("path", list(ROUTES))
def test_no_query_value_is_a_server_error(viewer: Viewer, path: str) -> None:
    for name in ROUTES[path]:
        for value in WEIRD:
            status, _, body = viewer.get(f"{path}{'&' if '?' in path else '?'}{name}={value}")
            assert status in (200, 204, 400), (path, name, value, status, body[:300])
            if status == 400:
                assert name.encode() in body, (path, name, value, body[:300])


@pytest.mark.parametrize("path", ["/", "/api/sessions", "/usage"])
def test_the_last_day_of_the_calendar_and_reversed_ranges(viewer: Viewer, path: str) -> None:
    status, _, body = viewer.get(path + "?to=9999-12-31")
    assert status == 200
    if path == "/api/sessions":
        assert "deploy" in {row["id"] for row in json.loads(body)}
    status, _, body = viewer.get(path + "?from=9999-12-31&to=9999-12-31")
    assert status == 200
    status, _, body = viewer.get(path + "?from=2026-02-01&to=2026-01-01")
    assert status == 400 and b"from" in body and b"to" in body


def test_session_ids_round_trip_through_the_redirect(token_viewer: Viewer) -> None:
    odd = "/sessions/" + quote("dir/sub?x=1&y=2#frag %2F ..", safe="")
    status, headers, _ = raw_get(token_viewer, odd + "?token=s3cret-token&at=1")
    assert status == 303 and headers["location"] == odd + "?at=1"
