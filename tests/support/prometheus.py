"""Debian's Prometheus (2.42) on loopback for a test, started and stopped by ../shared/k8s-testenv/prometheus.sh.

    server = PrometheusServer(run_dir, targets=["127.0.0.1:8000"], scrape_interval="1s")
    server.start()
    server.wait_for_series('vllm:time_to_first_token_seconds_count{model_name="m"}', timeout_s=20)
    server.query('sum(rate(vllm:e2e_request_latency_seconds_count[30s]))')   # -> the API's `result` list
    server.stop()

- The port is chosen once (a free one, unless given) and kept: `stop()` then `start()` brings Prometheus back
  on the same URL, which is how a test simulates an outage. prometheus.sh wipes `run_dir/data` on every start,
  so a restarted Prometheus has no history: series reappear with its first scrapes, and `rate()` needs two
  samples again.
- A new target's first sample arrives about 6 s after start even with scrape_interval 1s (Prometheus throttles
  target discovery to 5 s): `wait_for_series` polls, 20 s by default.
- `rule_files` are written into the configuration as absolute paths; `extra_scrape_configs` are appended to
  `scrape_configs` as given (dicts in Prometheus's configuration schema). All targets are in one job, `engine`.
- The testenv folder is `$K8S_TESTENV` or ../shared/k8s-testenv beside the repository (as in
  tests/e2e/conftest.py). Without it or without `prometheus` on PATH, `require_prometheus()` skips the test,
  except in CI (CI=true) where it fails.
- `query` raises PrometheusError when Prometheus cannot be reached or rejects the expression (`kind` says
  which: "unreachable", or the API's errorType such as "bad_data").
- `promql_string(value)` quotes a label value for a PromQL selector, e.g. `{note=` + promql_string(v) + `}`.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.engine_standin import free_port

REPO = Path(__file__).resolve().parents[2]
TESTENV = Path(os.environ.get("K8S_TESTENV") or REPO.parent / "shared" / "k8s-testenv")
PROMETHEUS_SH = TESTENV / "prometheus.sh"


class PrometheusError(RuntimeError):
    """A query that got no result: `kind` is "unreachable" or the API's errorType (e.g. "bad_data")."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind


def missing_prerequisite() -> str | None:
    """Why Prometheus cannot run here, or None."""
    if not PROMETHEUS_SH.is_file():
        return f"{PROMETHEUS_SH} not found (set K8S_TESTENV)"
    for tool in ("prometheus", "promtool", "curl"):
        if shutil.which(tool) is None:
            return f"{tool} not installed; apt-get install -y --no-install-recommends prometheus curl"
    return None


def skip_or_fail(reason: str) -> None:
    """Skip locally; in CI (CI=true) a missing prerequisite fails the run (like tests/e2e/conftest.py)."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: Prometheus tests must run, not skip)", pytrace=False)
    pytest.skip(reason)


def require_prometheus() -> None:
    """Skip (or in CI fail) the calling test if Prometheus cannot run here."""
    if reason := missing_prerequisite():
        skip_or_fail(reason)


def promql_string(value: str) -> str:
    """`value` as a double-quoted PromQL string literal (Go escapes: backslash, quote, newline, CR, tab)."""
    escaped = (value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
               .replace("\t", "\\t"))
    return f'"{escaped}"'


class PrometheusServer:
    """One Prometheus process scraping `targets` (host:port) every `scrape_interval`; see the module docstring."""

    def __init__(self, run_dir: Path | str, targets: Sequence[str], scrape_interval: str = "1s",
                 rule_files: Sequence[Path | str] = (), extra_scrape_configs: Sequence[Mapping[str, Any]] = (),
                 port: int | None = None, evaluation_interval: str | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.targets = list(targets)
        self.scrape_interval = scrape_interval
        self.evaluation_interval = evaluation_interval or scrape_interval
        self.rule_files = [Path(f).resolve() for f in rule_files]
        self.extra_scrape_configs = [dict(c) for c in extra_scrape_configs]
        self._fixed_port = port is not None
        self.port = port if port is not None else free_port()
        self._started_once = False
        self.running = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.run_dir / "prometheus.yml"

    @property
    def log_path(self) -> Path:
        return self.run_dir / "prometheus.log"

    def config(self) -> dict[str, Any]:
        """The configuration written to `config_path`."""
        scrape_configs: list[dict[str, Any]] = []
        if self.targets:
            scrape_configs.append({"job_name": "engine", "static_configs": [{"targets": list(self.targets)}]})
        return {
            "global": {"scrape_interval": self.scrape_interval, "scrape_timeout": self.scrape_interval,
                       "evaluation_interval": self.evaluation_interval},
            "rule_files": [str(f) for f in self.rule_files],
            "scrape_configs": scrape_configs + self.extra_scrape_configs,
        }

    def start(self, timeout_s: float = 60.0) -> PrometheusServer:
        """Start (or restart after `stop()`, on the same port) and wait until it is ready."""
        if self.running:
            raise RuntimeError(f"Prometheus already running at {self.url}")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        for attempt in range(3):
            env = {**os.environ, "PROM_START_TIMEOUT": str(int(timeout_s))}
            done = subprocess.run([str(PROMETHEUS_SH), "start", str(self.run_dir), str(self.config_path),
                                   str(self.port)], env=env, capture_output=True, text=True, timeout=timeout_s + 30)
            if done.returncode == 0:
                self.running = True
                self._started_once = True
                return self
            retry = not self._fixed_port and not self._started_once and "is in use" in done.stderr and attempt < 2
            if not retry:
                raise RuntimeError(f"Prometheus did not start on port {self.port}:\n{done.stdout}\n{done.stderr}")
            self.port = free_port()
        raise AssertionError("unreachable")

    def stop(self) -> None:
        """Stop it (prometheus.sh stop: by PID file, SIGTERM then SIGKILL). Safe to call when stopped."""
        subprocess.run([str(PROMETHEUS_SH), "stop", str(self.run_dir)], capture_output=True, text=True, timeout=60)
        self.running = False

    def _get(self, path: str, params: Mapping[str, str] | None = None, timeout_s: float = 10.0) -> Any:
        url = f"{self.url}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as response:
                body = json.load(response)
        except urllib.error.HTTPError as exc:
            try:
                body = json.load(exc)
            except ValueError:
                raise PrometheusError("http", f"{exc.code} for {url}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise PrometheusError("unreachable", f"{self.url}: {exc}") from None
        if body.get("status") != "success":
            raise PrometheusError(body.get("errorType", "error"), body.get("error", str(body)))
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query (at Unix time `at`, default now): the API's `data.result` list.

        For a vector each element is {"metric": {label: value}, "value": [time, "string value"]}.
        """
        params = {"query": expr}
        if at is not None:
            params["time"] = repr(at)
        data = self._get("/api/v1/query", params)
        return data["result"] if isinstance(data["result"], list) else [data["result"]]

    def value(self, expr: str, at: float | None = None) -> float:
        """The value of a query that must return exactly one series (at Unix time `at`, default now)."""
        result = self.query(expr, at)
        if len(result) != 1:
            raise AssertionError(f"{expr!r}: expected one series, got {len(result)}: {result}")
        return float(result[0]["value"][1])

    def wait_for_series(self, expr: str, timeout_s: float = 20.0, interval_s: float = 0.25) -> list[dict[str, Any]]:
        """Poll `expr` until it returns at least one series, and return them.

        An invalid expression fails at once; "unreachable" is retried. On timeout an AssertionError says what
        the targets look like and ends with the log's tail.
        """
        deadline = time.monotonic() + timeout_s
        last_error = ""
        while True:
            try:
                if result := self.query(expr):
                    return result
            except PrometheusError as exc:
                if exc.kind == "bad_data":
                    raise
                last_error = str(exc)
            if time.monotonic() > deadline:
                raise AssertionError(f"no series for {expr!r} within {timeout_s} s (last error: {last_error or '-'})"
                                     f"\ntargets: {self._targets_summary()}\nlog tail:\n{self.log_tail()}")
            time.sleep(interval_s)

    def active_targets(self) -> list[dict[str, Any]]:
        """/api/v1/targets' activeTargets (scrapeUrl, health, lastError, ...)."""
        return list(self._get("/api/v1/targets")["activeTargets"])

    def _targets_summary(self) -> str:
        try:
            return "; ".join(f"{t['scrapeUrl']} {t['health']} {t.get('lastError') or ''}".strip()
                             for t in self.active_targets()) or "none"
        except PrometheusError as exc:
            return str(exc)

    def log_tail(self, lines: int = 20) -> str:
        if not self.log_path.is_file():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_exposition(body: Callable[[], bytes]) -> http.server.ThreadingHTTPServer:
    """An HTTP server on a free local port that answers every GET with `body()` as a Prometheus text exposition, in
    a daemon thread; the caller stops it (`shutdown()`, `server_close()`). Its scrape target is
    f"127.0.0.1:{server.server_address[1]}"."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            payload = body()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
