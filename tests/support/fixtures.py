"""Pytest fixtures for tests against a real Prometheus (registered in tests/conftest.py).

    def test_something(engine_standin, prometheus):
        engine = engine_standin(standin_config(labels={"model_name": "m"}, requests_per_second=20))
        prom = prometheus([engine])            # or [engine.target], or ["127.0.0.1:PORT", ...]
        prom.wait_for_series('vllm:e2e_request_latency_seconds_count{model_name="m"}')

- `engine_standin(config=None, port=None) -> StandinProcess`: starts tests/support/engine_standin.py as a
  process with `config` (a camelCase dict as `standin_config()` returns, or a StandinConfig; None: defaults)
  and waits for it to serve. The object has `.port`, `.target` ("127.0.0.1:PORT"), `.url`, `.config`,
  `.stop()` and `.start()` (again, same port).
- `prometheus(targets, **kwargs) -> PrometheusServer`: a started Prometheus scraping the targets (host:port
  strings or objects with a `.target`); kwargs as PrometheusServer's (scrape_interval="1s", rule_files,
  extra_scrape_configs, port, evaluation_interval). Without Prometheus (or the testenv folder) a test that
  requests this fixture is skipped at setup, before anything starts; in CI (CI=true) it fails instead.

Everything either fixture started is stopped at teardown, and its temporary folders removed, whether the test
passed or not.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.support import tempdirs
from tests.support.engine_standin import StandinConfig, StandinProcess
from tests.support.prometheus import PrometheusServer, require_prometheus

StandinFactory = Callable[..., StandinProcess]
PrometheusFactory = Callable[..., PrometheusServer]


@pytest.fixture
def engine_standin() -> Iterator[StandinFactory]:
    """Factory: config in, a running serving-engine stand-in out (see the module docstring)."""
    started: list[StandinProcess] = []

    def start(config: Mapping[str, Any] | StandinConfig | None = None, port: int | None = None) -> StandinProcess:
        process = StandinProcess(StandinConfig() if config is None else config, port=port)
        started.append(process)
        return process.start()

    try:
        yield start
    finally:
        for process in reversed(started):
            process.stop()


@pytest.fixture
def prometheus() -> Iterator[PrometheusFactory]:
    """Factory: scrape targets in, a running Prometheus out (see the module docstring)."""
    require_prometheus()  # at setup, so that a test that cannot run starts nothing
    started: list[tuple[PrometheusServer, Path]] = []

    def start(targets: Sequence[str | Any], **kwargs: Any) -> PrometheusServer:
        run_dir = tempdirs.make("prometheus")
        addresses = [t if isinstance(t, str) else t.target for t in targets]
        server = PrometheusServer(run_dir, addresses, **kwargs)
        started.append((server, run_dir))
        return server.start()

    try:
        yield start
    finally:
        for server, run_dir in reversed(started):
            try:
                server.stop()
            finally:
                shutil.rmtree(run_dir, ignore_errors=True)
