"""The Prometheus endpoints the operator may query, and a small HTTP client for the query API.

Endpoints come from the YAML file named by INFERPLAN_PROMETHEUS_CONFIG, a list of

    - name: main                      # what spec.observe.prometheus names
      url: https://prometheus.monitoring.svc:9090
      bearerTokenFile: /var/run/secrets/prometheus/token   # optional
      caFile: /etc/inferplan/prometheus-ca.crt              # optional
      timeoutSeconds: 10                                     # optional, default 10

A plan names an endpoint; it never supplies a URL, so the operator only ever talks to the addresses its
administrator configured. Errors name the endpoint, never its URL or token (they end up in plan status).
"""

from __future__ import annotations

import http.client
import json
import math
import re
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DEFAULT_TIMEOUT_S = 10.0
MAX_RESPONSE_BYTES = 8 * 1024 * 1024


class PrometheusConfigError(ValueError):
    """The endpoints file cannot be used; the message names the entry and field."""


class PrometheusError(Exception):
    """A query failed. `reason` is a condition reason: PrometheusUnreachable (connection, timeout, HTTP 5xx)
    or PrometheusBadResponse (an answer that is not a Prometheus query result, or a rejected query)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class PrometheusEndpoint:
    name: str
    url: str
    bearer_token_file: str | None = None
    ca_file: str | None = None
    timeout_seconds: float = DEFAULT_TIMEOUT_S


def parse_endpoints(data: Any, source: str = "INFERPLAN_PROMETHEUS_CONFIG") -> dict[str, PrometheusEndpoint]:
    """Endpoints by name from the parsed YAML; every problem raises PrometheusConfigError naming it."""
    if data is None:
        return {}
    if not isinstance(data, list):
        raise PrometheusConfigError(f"{source}: must be a list of endpoints, got {type(data).__name__}")
    endpoints: dict[str, PrometheusEndpoint] = {}
    allowed = {"name", "url", "bearerTokenFile", "caFile", "timeoutSeconds"}
    for i, item in enumerate(data):
        where = f"{source}[{i}]"
        if not isinstance(item, Mapping):
            raise PrometheusConfigError(f"{where}: must be a mapping")
        unknown = sorted(set(item) - allowed)
        if unknown:
            raise PrometheusConfigError(f"{where}: unknown keys {', '.join(map(str, unknown))} "
                                        f"(allowed: {', '.join(sorted(allowed))})")
        name, url = item.get("name"), item.get("url")
        if not isinstance(name, str) or not _NAME.match(name) or len(name) > 63:
            raise PrometheusConfigError(f"{where}.name: must be a DNS label (a-z, 0-9, -), got {name!r}")
        if name in endpoints:
            raise PrometheusConfigError(f"{where}.name: {name!r} is listed twice")
        parsed = urllib.parse.urlparse(url) if isinstance(url, str) else None
        if parsed is None or parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise PrometheusConfigError(f"{where}.url: must be an http(s) URL")
        if "@" in parsed.netloc:  # urllib sends no credentials from a URL: it looked the host up as 'user:pass@host'
            raise PrometheusConfigError(f"{where}.url: must not hold credentials (user:password@): the operator sends "
                                        "none from a URL; give a bearerTokenFile")
        timeout = item.get("timeoutSeconds", DEFAULT_TIMEOUT_S)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 300 \
                or math.isnan(timeout):
            raise PrometheusConfigError(f"{where}.timeoutSeconds: must be a number in (0, 300]")
        files = {}
        for key in ("bearerTokenFile", "caFile"):
            value = item.get(key)
            if value is not None and (not isinstance(value, str) or not value):
                raise PrometheusConfigError(f"{where}.{key}: must be a file path")
            files[key] = value
        endpoints[name] = PrometheusEndpoint(name, url.rstrip("/"), files["bearerTokenFile"], files["caFile"],
                                             float(timeout))
    return endpoints


def load_endpoints(path: str | Path) -> dict[str, PrometheusEndpoint]:
    """Endpoints from the YAML file at `path` (PrometheusConfigError when unreadable or invalid)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise PrometheusConfigError(f"INFERPLAN_PROMETHEUS_CONFIG: cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:  # a UTF-16 file, or Latin-1 text: the operator stopped with a traceback
        raise PrometheusConfigError(f"INFERPLAN_PROMETHEUS_CONFIG: {path} is not UTF-8 text (byte {exc.start}: "
                                    f"{exc.reason})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        # Where, not what: YAML's own message quotes the line, which holds a URL (and its credentials, if any).
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise PrometheusConfigError(f"INFERPLAN_PROMETHEUS_CONFIG: {path} is not YAML: {problem}{where}") from None
    return parse_endpoints(data)


Sample = tuple[dict[str, str], float]  # (labels, value) of one series of an instant vector


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects are answers, not directions: following one would send the query and the bearer token to an
    address nobody configured (urllib keeps the Authorization header across hosts), and take that address's
    answer as the endpoint's."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> None:
        return None  # urllib then raises the 3xx as an HTTPError


class PrometheusClient:
    """Instant queries against one endpoint (`/api/v1/query`); redirects are not followed."""

    def __init__(self, endpoint: PrometheusEndpoint) -> None:
        self.endpoint = endpoint
        self._context: ssl.SSLContext | None = None
        if endpoint.url.startswith("https"):
            self._context = ssl.create_default_context(cafile=endpoint.ca_file)
        self._opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=self._context), _NoRedirect)

    def _headers(self) -> tuple[dict[str, str], str | None]:
        """The request headers, and the bearer token in them (None without one)."""
        headers = {"Accept": "application/json", "User-Agent": "inferplan"}
        if not self.endpoint.bearer_token_file:
            return headers, None
        try:
            token = Path(self.endpoint.bearer_token_file).read_text(encoding="utf-8").strip()
        except OSError as exc:  # re-read each time: mounted tokens rotate
            raise PrometheusError("PrometheusUnreachable", f"Prometheus {self.endpoint.name!r}: cannot read "
                                  f"its bearer token file ({exc.strerror})") from None
        headers["Authorization"] = f"Bearer {token}"
        return headers, token

    def _scrub(self, text: str, token: str | None) -> str:
        """`text` without the endpoint's URL, host and token: what Prometheus (or a proxy in front of it) says
        ends up in plan status, and an answer may echo the request."""
        secrets = [self.endpoint.url, urllib.parse.urlparse(self.endpoint.url).netloc, token]
        for secret in sorted((s for s in secrets if s and len(s) >= 4), key=len, reverse=True):
            text = text.replace(secret, "<redacted>")
        return text

    def query(self, expr: str, time_s: float | None = None) -> list[Sample]:
        """The instant vector `expr` evaluates to (at `time_s`, default now); a scalar comes back as one
        sample without labels. Raises PrometheusError, whose message never holds the URL or the token."""
        headers, token = self._headers()
        try:
            return self._query(expr, time_s, headers, token)
        except PrometheusError as exc:
            raise PrometheusError(exc.reason, self._scrub(str(exc), token)) from None

    def _query(self, expr: str, time_s: float | None, headers: dict[str, str], token: str | None) -> list[Sample]:
        name = self.endpoint.name
        params = {"query": expr}
        if time_s is not None:
            params["time"] = f"{time_s:.3f}"
        request = urllib.request.Request(f"{self.endpoint.url}/api/v1/query",
                                         data=urllib.parse.urlencode(params).encode(), headers=headers)
        try:
            deadline = time.monotonic() + self.endpoint.timeout_seconds
            with self._opener.open(request, timeout=self.endpoint.timeout_seconds) as response:
                body = _read_until(response, deadline)
        except urllib.error.HTTPError as exc:
            if 300 <= exc.code < 400:  # never followed (_NoRedirect); where to is not said: it may hold a secret
                raise PrometheusError("PrometheusBadResponse", f"Prometheus {name!r} answered a redirect (HTTP "
                                      f"{exc.code}), which is not followed: configure the URL it redirects "
                                      "to") from None
            if exc.code in (400, 422):  # the query was rejected: an answer, not an outage
                text = self._scrub(_error_text(exc), token)[:300]  # scrubbed whole: no token half cut off
                raise PrometheusError("PrometheusBadResponse", f"Prometheus {name!r} rejected a query "
                                      f"(HTTP {exc.code}): {text}") from None
            raise PrometheusError("PrometheusUnreachable", f"Prometheus {name!r} answered HTTP {exc.code}") from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            text = "timed out" if isinstance(reason, TimeoutError) or "timed out" in str(reason) else "unreachable"
            raise PrometheusError("PrometheusUnreachable",
                                  f"Prometheus {name!r} {text} ({type(reason).__name__})") from None
        except http.client.HTTPException as exc:  # not HTTP at all (a bad status line, a truncated answer)
            raise PrometheusError("PrometheusBadResponse", f"Prometheus {name!r} did not answer in HTTP "
                                  f"({type(exc).__name__})") from None
        if len(body) > MAX_RESPONSE_BYTES:
            raise PrometheusError("PrometheusBadResponse", f"Prometheus {name!r}: answer larger than "
                                  f"{MAX_RESPONSE_BYTES} bytes")
        if token and token.encode() in body:  # an answer echoing the token: gone before any of it is quoted
            body = body.replace(token.encode(), b"<redacted>")
        return parse_query_response(body, name)


def _read_until(response: Any, deadline: float) -> bytes:
    """The answer's body, at most MAX_RESPONSE_BYTES + 1 bytes of it, by `deadline` (time.monotonic()): the socket
    timeout bounds each read, and an answer trickling in a byte at a time would otherwise take as long as it
    likes. Raises TimeoutError past the deadline."""
    chunks: list[bytes] = []
    size = 0
    while size <= MAX_RESPONSE_BYTES:
        if time.monotonic() > deadline:
            raise TimeoutError("the answer took longer than the timeout")
        chunk = response.read1(MAX_RESPONSE_BYTES + 1 - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read(4096)).get("error", ""))
    except (ValueError, AttributeError, OSError):
        return ""


def parse_query_response(body: bytes, name: str = "prometheus") -> list[Sample]:
    """Samples of a /api/v1/query answer; anything else raises PrometheusError(PrometheusBadResponse)."""
    def bad(why: str) -> PrometheusError:
        return PrometheusError("PrometheusBadResponse", f"Prometheus {name!r}: {why}")

    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise bad("the answer is not JSON") from None
    if not isinstance(data, dict) or data.get("status") != "success" or not isinstance(data.get("data"), dict):
        raise bad("the answer is not a successful query result")
    result_type, result = data["data"].get("resultType"), data["data"].get("result")
    if result_type == "scalar":
        return [({}, _number(result, bad))]
    if result_type != "vector" or not isinstance(result, list):
        raise bad(f"expected an instant vector, got {result_type!r}")
    samples: list[Sample] = []
    for item in result:
        if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
            raise bad("a series without labels")
        labels = {str(k): str(v) for k, v in item["metric"].items()}
        samples.append((labels, _number(item.get("value"), bad)))
    return samples


def _number(pair: Any, bad: Any) -> float:
    if not isinstance(pair, list) or len(pair) != 2:
        raise bad("a sample is not [time, value]")
    try:
        return float(pair[1])  # "NaN", "+Inf" parse; callers decide what they mean
    except (TypeError, ValueError):
        raise bad(f"a sample value is not a number: {str(pair[1])[:40]!r}") from None


class EndpointsFile:
    """The endpoints of a file, read again when its modification time changes (a mounted ConfigMap is
    replaced in place). A file that turns bad (or goes) keeps the last good endpoints and says why in `error`
    until it is good again (the operator logs each new error)."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._stamp: float | None = None
        self._endpoints: dict[str, PrometheusEndpoint] = {}
        self.error: str | None = None

    def get(self) -> dict[str, PrometheusEndpoint]:
        if self.path is None:
            return {}
        try:
            stamp = Path(self.path).stat().st_mtime
        except OSError as exc:
            self._stamp = None  # read again whenever it is back
            self.error = f"INFERPLAN_PROMETHEUS_CONFIG: cannot read {self.path}: {exc.strerror}"
            return self._endpoints
        if stamp != self._stamp:
            self._stamp = stamp
            try:
                self._endpoints, self.error = load_endpoints(self.path), None
            except PrometheusConfigError as exc:
                self.error = str(exc)
        return self._endpoints
