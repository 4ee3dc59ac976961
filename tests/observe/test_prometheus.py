"""The Prometheus side of observing (inferplan/observe/prometheus.py): the endpoints file, query answers, and
the query client's error handling."""

from __future__ import annotations

import http.server
import json
import math
import threading
from collections.abc import Iterator
from typing import ClassVar

import pytest

from inferplan.observe.prometheus import (
    PrometheusClient,
    PrometheusConfigError,
    PrometheusEndpoint,
    PrometheusError,
    parse_endpoints,
    parse_query_response,
)


def test_endpoints_file_errors_name_the_entry_and_field() -> None:
    ok = parse_endpoints([{"name": "main", "url": "http://prom:9090/", "timeoutSeconds": 5}])
    assert ok["main"] == PrometheusEndpoint("main", "http://prom:9090", None, None, 5.0)
    cases = [
        ({"name": "main"}, r"\[0\]\.url"),
        ({"name": "Main!", "url": "http://x"}, r"\[0\]\.name"),
        ({"name": "a", "url": "file:///etc/passwd"}, r"\[0\]\.url"),
        ({"name": "a", "url": "http://x", "timeoutSeconds": 0}, "timeoutSeconds"),
        ({"name": "a", "url": "http://x", "password": "x"}, "unknown keys password"),
    ]
    for entry, message in cases:
        with pytest.raises(PrometheusConfigError, match=message):
            parse_endpoints([entry])
    # Credentials in the URL were taken, and then every query failed as unreachable (the host looked up was
    # 'admin:hunter2@prom'), with the password in the operator's memory and in whatever quoted its URL.
    for url in ("http://admin:hunter2@prom:9090", "https://hunter2@prom"):
        with pytest.raises(PrometheusConfigError, match=r"\[0\]\.url: must not hold credentials") as caught:
            parse_endpoints([{"name": "a", "url": url}])
        assert "hunter2" not in str(caught.value)
    with pytest.raises(PrometheusConfigError, match="listed twice"):
        parse_endpoints([{"name": "a", "url": "http://x"}, {"name": "a", "url": "http://y"}])
    with pytest.raises(PrometheusConfigError, match="must be a list"):
        parse_endpoints({"name": "a"})


@pytest.mark.parametrize("body", [b"<html>", b'{"status": "error"}', b'{"status": "success", "data": {}}',
                                  b'{"status":"success","data":{"resultType":"matrix","result":[]}}',
                                  b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},'
                                  b'"value":[1,"x"]}]}}'])
def test_garbage_answers_are_bad_responses(body: bytes) -> None:
    with pytest.raises(PrometheusError) as caught:
        parse_query_response(body, "main")
    assert caught.value.reason == "PrometheusBadResponse"


def test_a_vector_answer_parses_with_labels() -> None:
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"le": "0.5"}, "value": [1, "3.5"]}, {"metric": {"le": "+Inf"}, "value": [1, "NaN"]}]}})
    samples = parse_query_response(body.encode())
    assert samples[0] == ({"le": "0.5"}, 3.5) and math.isnan(samples[1][1])


class _Handler(http.server.BaseHTTPRequestHandler):
    mode = "ok"

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        self.rfile.read(length)
        if self.mode == "slow":
            threading.Event().wait(2.0)
        status, body = {"ok": (200, b'{"status":"success","data":{"resultType":"scalar","result":[1,"2"]}}'),
                        "slow": (200, b"{}"), "500": (500, b"oops"),
                        "400": (400, b'{"status":"error","error":"parse error"}')}[self.mode]
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def server() -> Iterator[tuple[str, type[_Handler]]]:
    handler = type("H", (_Handler,), {})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    httpd.shutdown()


def test_client_maps_failures_to_reasons_without_the_url(server: tuple[str, type[_Handler]], tmp_path) -> None:
    url, handler = server
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    client = PrometheusClient(PrometheusEndpoint("main", url, str(token), None, 0.5))
    assert client.query("1+1") == [({}, 2.0)]
    for mode, reason in (("slow", "PrometheusUnreachable"), ("500", "PrometheusUnreachable"),
                         ("400", "PrometheusBadResponse")):
        handler.mode = mode
        with pytest.raises(PrometheusError) as caught:
            client.query("up")
        assert caught.value.reason == reason
        assert url not in str(caught.value) and "s3cret" not in str(caught.value)
    down = PrometheusClient(PrometheusEndpoint("main", "http://127.0.0.1:9", None, None, 0.5))
    with pytest.raises(PrometheusError, match="'main' unreachable"):
        down.query("up")


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Another host: answers every request with a query result and records what it was sent."""

    seen: ClassVar[list[tuple[str, str | None]]] = []

    def _answer(self) -> None:
        self.seen.append((self.command, self.headers.get("Authorization")))
        body = b'{"status":"success","data":{"resultType":"scalar","result":[1,"7"]}}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


class _Redirector(http.server.BaseHTTPRequestHandler):
    """The configured endpoint: answers every query with a redirect (`code`) to `location`."""

    location = ""
    code = 302

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(self.code)
        self.send_header("Location", self.location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_is_not_followed_and_the_token_goes_nowhere_else(code: int, tmp_path) -> None:
    """An endpoint answering with a redirect is a bad response: the client neither sends the bearer token to the
    address the redirect names nor takes that address's answer (the operator talks to the configured endpoints
    only, docs/security.md). urllib followed 301-303 as a GET with the Authorization header."""
    recorder = type("R", (_Recorder,), {"seen": []})
    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), recorder)
    redirector = type("D", (_Redirector,), {"code": code})
    endpoint = http.server.ThreadingHTTPServer(("127.0.0.1", 0), redirector)
    redirector.location = f"http://localhost:{other.server_address[1]}/api/v1/query?query=up"
    for httpd in (other, endpoint):
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        token = tmp_path / "token"
        token.write_text("s3cret\n")
        url = f"http://127.0.0.1:{endpoint.server_address[1]}"
        client = PrometheusClient(PrometheusEndpoint("main", url, str(token), None, 5.0))
        with pytest.raises(PrometheusError) as caught:
            client.query("up")
        assert recorder.seen == []
        assert caught.value.reason == "PrometheusBadResponse"
        assert f"redirect (HTTP {code})" in str(caught.value)
        assert url not in str(caught.value) and "localhost" not in str(caught.value)
    finally:
        for httpd in (other, endpoint):
            httpd.shutdown()
            httpd.server_close()


class _Trickle(http.server.BaseHTTPRequestHandler):
    """Answers with a valid query result one byte at a time, each within the client's socket timeout, the whole
    answer far beyond it (a proxy or an overloaded Prometheus streaming slowly)."""

    pause_s = 0.1

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = b'{"status":"success","data":{"resultType":"scalar","result":[1,"2"]}}' + b" " * 200
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.flush()
        try:
            for i in range(len(body)):
                self.wfile.write(body[i:i + 1])
                self.wfile.flush()
                threading.Event().wait(self.pause_s)
        except OSError:  # the client gave up
            pass

    def log_message(self, *args: object) -> None:
        pass


def test_an_answer_that_trickles_in_beyond_the_timeout_times_out() -> None:
    """timeoutSeconds bounds the whole answer, not each read from the socket: a body arriving a byte every 0.1 s
    (27 s in all) against a 1 s timeout is PrometheusUnreachable, timed out (it was read to its end)."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Trickle)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        client = PrometheusClient(PrometheusEndpoint("main", f"http://127.0.0.1:{httpd.server_address[1]}", None,
                                                     None, 1.0))
        with pytest.raises(PrometheusError) as caught:
            client.query("1+1")
        assert caught.value.reason == "PrometheusUnreachable" and "timed out" in str(caught.value)
    finally:
        httpd.shutdown()
        httpd.server_close()
