"""A serving-engine stand-in: a small HTTP process exposing vLLM (or SGLang) metrics from a known latency model.

Tests point a real Prometheus at it (see tests/support/prometheus.py and the fixtures in
tests/support/fixtures.py) and check that what the operator reads back matches what was configured.

Running it
----------
    python -m tests.support.engine_standin --config FILE.json --port PORT

from the repository root. It binds 127.0.0.1:PORT, serves the metrics on `/metrics` (any other path too), prints
exactly one line `ready` on stdout once it is serving, and exits 0 on SIGTERM or SIGINT (or when its parent
process goes away, so that a killed test run leaves nothing behind). The exposition is
`prometheus_client.generate_latest()` served with `Content-Type: text/plain; version=0.0.4`: with the
OpenMetrics format that Prometheus 2.42 asks for, prometheus_client 0.26 would escape the ':' in `vllm:...`
names (../shared/k8s-testenv/README.md, "Gotcha: metric names with ':'"). `_created` series are disabled.

Configuration (JSON, camelCase; every key optional, defaults in `StandinConfig`)
------------------------------------------------------------------------------
- `family`: "vllm" | "sglang": which names (inferplan/observe/engine_metrics.py, FAMILIES) are exported.
- `names`: "current" | "legacy" | "both": the first name of each metric in EngineMetrics, the last one (e.g.
  legacy vLLM exports vllm:time_per_output_token_seconds and vllm:gpu_cache_usage_perc), or both with the same
  values (a deployment in the middle of an upgrade).
- `labels`: constant labels put on every series, e.g. {"model_name": "llama-3-8b", "namespace": "serving"}.
  Values may contain any character (quotes, backslashes, newlines: prometheus_client escapes them in the
  exposition). Names must be valid Prometheus label names and must not clash with the labels the stand-in sets
  itself (le, finished_reason, num_gpu_blocks, block_size).
- `requestsPerSecond`: rate of the synthetic requests: Poisson arrivals in real time (a background thread).
  The first request completes the moment the process starts; nothing is backdated. 0 means no traffic (the
  histograms and counters exist, at zero). If the process is stalled, overdue arrivals are caught up at once,
  so the long-run rate stays right.
- `promptTokens`, `outputTokens`: {"mean": M, "cv": C}: lognormal token counts per request with that mean
  and coefficient of variation (C = 0: always round(M)); rounded, at least 1, at most `maxModelLen`.
- `latency`: {"ttft": {"0.5": s, "0.9": s, "0.95": s, "0.99": s}, "tpot": {...}, "e2e": {...}}: the quantiles
  (at least two, strictly increasing values) of each metric's distribution; see `LatencyDistribution`.
  Each request draws its three values independently of each other and of its token counts.
- `running`, `waiting`: gauge values (requests in the batch, requests queued). `kvCacheUsage`: gauge, 0-1.
- `cacheConfig`: {"numGpuBlocks": N, "blockSize": B} or null; vLLM only, exported as
  `vllm:cache_config_info{num_gpu_blocks="N", block_size="B"} 1` (strings, as vLLM does).
- `maxModelLen`: bounds the token histograms' buckets (`token_buckets`) and the token counts. Default 32768.
- `seed`: seeds the arrivals and the samples (one numpy Generator).

What each synthetic request observes
------------------------------------
- the TTFT, TPOT and e2e histograms with vLLM's bucket bounds (TTFT_BUCKETS, TPOT_BUCKETS, E2E_BUCKETS). TPOT is
  observed ONCE per request with that request's mean inter-token latency; real vLLM observes
  `vllm:inter_token_latency_seconds` once per output token (so its histogram is weighted by tokens) and the
  older `vllm:time_per_output_token_seconds` likewise per token. The stand-in's TPOT histogram is therefore
  exactly the configured distribution, per request.
- the per-request prompt and generation token histograms (vLLM only; SGLang has none), buckets
  `token_buckets(maxModelLen)`;
- the prompt and generation token counters;
- the request counter: `vllm:request_success_total{finished_reason="stop"}` for vLLM,
  `sglang:num_requests_total` for SGLang (these names are not in EngineMetrics; they live in REQUEST_COUNTERS).

Importable parts
----------------
`StandinConfig` (`from_dict` / `to_dict`), `standin_config(**snake_case)` (a validated camelCase dict),
`LatencyDistribution` (`sample`, `quantile`, `cdf`), `RequestSampler` (one `SyntheticRequest` per draw),
`StandinMetrics` (the registry and its exposition), `StandinProcess` (start/stop the process from a test).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import pairwise
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np
import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from inferplan.observe.engine_metrics import (
    E2E_BUCKETS,
    FAMILIES,
    TPOT_BUCKETS,
    TTFT_BUCKETS,
    EngineMetrics,
    token_buckets,
)

REPO = Path(__file__).resolve().parents[2]
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
NAME_MODES = ("current", "legacy", "both")
LATENCY_METRICS = ("ttft", "tpot", "e2e")

REQUEST_COUNTERS: dict[str, tuple[str, dict[str, str]]] = {
    "vllm": ("vllm:request_success_total", {"finished_reason": "stop"}),
    "sglang": ("sglang:num_requests_total", {}),
}
"""Per family: the finished-requests counter and the labels the stand-in puts on it."""

Z_CAP = NormalDist().inv_cdf(1 - 1e-4)
"""Samples are drawn at normal scores z in [-Z_CAP, Z_CAP] (the 0.01 % and 99.99 % points): see LatencyDistribution."""

_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_RESERVED_LABELS = {"le", "quantile", "finished_reason", "num_gpu_blocks", "block_size"}


class LatencyDistribution:
    """A distribution with exactly the given quantiles, interpolated log-linearly in normal-score space.

    With z = Phi^-1(p) (the standard normal quantile of p), log(value) is piecewise linear in z through the knots
    (z_i, log v_i): exact at every configured level, and a lognormal distribution is reproduced exactly. Below
    the lowest knot the line continues with the slope of the lowest segment, above the highest knot with the
    slope of the highest segment, and both extensions are capped at z = +-Z_CAP (the 0.01 % and 99.99 % points):
    a draw beyond the cap takes the cap's value, so 1e-4 of the mass sits on each bound. With the usual knots
    (0.5, 0.9, 0.95, 0.99) the largest possible draw is about v_0.99 * (v_0.99 / v_0.95) ** 2.05, so the tail
    cannot run away however steep it is configured.

    Sampling draws z ~ N(0, 1) and maps it (no inverse CDF needed); `cdf` inverts the map.
    """

    def __init__(self, quantiles: Mapping[float, float] | Mapping[str, float]) -> None:
        knots = sorted((float(p), float(v)) for p, v in quantiles.items())
        if len(knots) < 2:
            raise ValueError(f"need at least two quantiles, got {dict(quantiles)}")
        for p, v in knots:
            if not 0.0 < p < 1.0:
                raise ValueError(f"quantile levels must lie in (0, 1), got {p}")
            if not (math.isfinite(v) and v > 0.0):
                raise ValueError(f"quantile values must be positive and finite, got {v} at {p}")
        for (p0, v0), (p1, v1) in pairwise(knots):
            if p1 == p0:
                raise ValueError(f"quantile level {p0} given twice")
            if v1 <= v0:
                raise ValueError(f"quantile values must increase strictly with the level, got {knots}")
        self.knots: tuple[tuple[float, float], ...] = tuple(knots)
        self._z = np.array([NormalDist().inv_cdf(p) for p, _ in knots])
        self._log_v = np.log([v for _, v in knots])
        self._slope_low = (self._log_v[1] - self._log_v[0]) / (self._z[1] - self._z[0])
        self._slope_high = (self._log_v[-1] - self._log_v[-2]) / (self._z[-1] - self._z[-2])

    def _log_value(self, z: np.ndarray) -> np.ndarray:
        z = np.clip(z, -Z_CAP, Z_CAP)
        inside = np.interp(z, self._z, self._log_v)
        below = self._log_v[0] + self._slope_low * (z - self._z[0])
        above = self._log_v[-1] + self._slope_high * (z - self._z[-1])
        return np.where(z < self._z[0], below, np.where(z > self._z[-1], above, inside))

    @property
    def bounds(self) -> tuple[float, float]:
        """The smallest and the largest value a draw can take."""
        low, high = np.exp(self._log_value(np.array([-Z_CAP, Z_CAP])))
        return float(low), float(high)

    def quantile(self, p: float) -> float:
        """The value below which a fraction p of the draws fall (exact at the configured levels)."""
        return float(np.exp(self._log_value(np.array([NormalDist().inv_cdf(p)])))[0])

    def cdf(self, value: float) -> float:
        """P(draw <= value)."""
        low, high = self.bounds
        if value < low:
            return 0.0
        if value >= high:
            return 1.0
        log_v = math.log(value)
        if log_v < self._log_v[0]:
            z = self._z[0] + (log_v - self._log_v[0]) / self._slope_low
        elif log_v > self._log_v[-1]:
            z = self._z[-1] + (log_v - self._log_v[-1]) / self._slope_high
        else:
            z = float(np.interp(log_v, self._log_v, self._z))
        return NormalDist().cdf(z)

    def sample(self, rng: np.random.Generator, size: int | None = None) -> np.ndarray:
        """`size` independent draws (a 1-d array; a 0-d array when size is None)."""
        return np.exp(self._log_value(rng.standard_normal(size)))


@dataclass(frozen=True)
class TokenDistribution:
    """Lognormal token counts per request: mean and coefficient of variation (cv = 0: constant)."""

    mean: float
    cv: float = 0.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.mean) and self.mean >= 1.0):
            raise ValueError(f"token mean must be at least 1, got {self.mean}")
        if not (math.isfinite(self.cv) and self.cv >= 0.0):
            raise ValueError(f"token cv must be >= 0, got {self.cv}")

    def sample(self, rng: np.random.Generator, max_len: int) -> int:
        if self.cv == 0.0:
            value = self.mean
        else:
            sigma2 = math.log1p(self.cv**2)
            value = rng.lognormal(math.log(self.mean) - sigma2 / 2, math.sqrt(sigma2))
        return int(min(max_len, max(1, round(value))))


@dataclass(frozen=True)
class CacheConfig:
    num_gpu_blocks: int
    block_size: int


def _default_latency() -> dict[str, dict[float, float]]:
    return {
        "ttft": {0.5: 0.15, 0.9: 0.4, 0.95: 0.6, 0.99: 1.5},
        "tpot": {0.5: 0.03, 0.9: 0.045, 0.95: 0.055, 0.99: 0.08},
        "e2e": {0.5: 6.0, 0.9: 12.0, 0.95: 15.0, 0.99: 25.0},
    }


@dataclass(frozen=True)
class StandinConfig:
    """The stand-in's configuration (snake_case here, camelCase in JSON: see the module docstring)."""

    family: str = "vllm"
    names: str = "current"
    labels: dict[str, str] = field(default_factory=lambda: {"model_name": "standin"})
    requests_per_second: float = 5.0
    prompt_tokens: TokenDistribution = TokenDistribution(1000.0, 0.5)
    output_tokens: TokenDistribution = TokenDistribution(200.0, 0.5)
    latency: dict[str, dict[float, float]] = field(default_factory=_default_latency)
    running: float = 8.0
    waiting: float = 0.0
    kv_cache_usage: float = 0.3
    cache_config: CacheConfig | None = CacheConfig(num_gpu_blocks=20000, block_size=16)
    max_model_len: int = 32768
    seed: int = 0

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"family must be one of {sorted(FAMILIES)}, got {self.family!r}")
        if self.names not in NAME_MODES:
            raise ValueError(f"names must be one of {NAME_MODES}, got {self.names!r}")
        for name, value in self.labels.items():
            if not _LABEL_NAME.match(name) or name.startswith("__") or name in _RESERVED_LABELS:
                raise ValueError(f"label name {name!r} is not allowed (invalid, reserved or set by the stand-in)")
            if not isinstance(value, str):
                raise ValueError(f"label {name!r}: value must be a string, got {value!r}")
        if not (math.isfinite(self.requests_per_second) and self.requests_per_second >= 0.0):
            raise ValueError(f"requestsPerSecond must be >= 0, got {self.requests_per_second}")
        if set(self.latency) != set(LATENCY_METRICS):
            raise ValueError(f"latency needs exactly the keys {LATENCY_METRICS}, got {sorted(self.latency)}")
        for metric, quantiles in self.latency.items():
            try:
                LatencyDistribution(quantiles)
            except ValueError as exc:
                raise ValueError(f"latency.{metric}: {exc}") from None
        for name in ("running", "waiting"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0.0):
                raise ValueError(f"{name} must be >= 0, got {value}")
        if not 0.0 <= self.kv_cache_usage <= 1.0:
            raise ValueError(f"kvCacheUsage must lie in [0, 1], got {self.kv_cache_usage}")
        if self.cache_config is not None and (self.cache_config.num_gpu_blocks < 1 or self.cache_config.block_size < 1):
            raise ValueError(f"cacheConfig values must be positive, got {self.cache_config}")
        if self.max_model_len < 1:
            raise ValueError(f"maxModelLen must be positive, got {self.max_model_len}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {self.seed!r}")

    @property
    def metrics(self) -> EngineMetrics:
        return FAMILIES[self.family]

    def names_of(self, names: tuple[str, ...]) -> list[str]:
        """The names exported for one metric of EngineMetrics (none if the family has no such metric)."""
        if not names:
            return []
        chosen = {"current": [names[0]], "legacy": [names[-1]], "both": [names[0], names[-1]]}[self.names]
        return list(dict.fromkeys(chosen))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StandinConfig:
        """Build from the camelCase JSON form; missing keys take the defaults, unknown keys are an error."""
        known = {"family", "names", "labels", "requestsPerSecond", "promptTokens", "outputTokens", "latency",
                 "running", "waiting", "kvCacheUsage", "cacheConfig", "maxModelLen", "seed"}
        if unknown := set(data) - known:
            raise ValueError(f"unknown stand-in config keys: {sorted(unknown)} (known: {sorted(known)})")
        default = cls()
        kwargs: dict[str, Any] = {}
        for key in ("family", "names", "seed"):
            if key in data:
                kwargs[key] = data[key]
        if "labels" in data:
            kwargs["labels"] = dict(data["labels"])
        for key, attr in (("requestsPerSecond", "requests_per_second"), ("running", "running"),
                          ("waiting", "waiting"), ("kvCacheUsage", "kv_cache_usage")):
            if key in data:
                kwargs[attr] = float(data[key])
        if "maxModelLen" in data:
            kwargs["max_model_len"] = int(data["maxModelLen"])
        for key, attr in (("promptTokens", "prompt_tokens"), ("outputTokens", "output_tokens")):
            if key in data:
                kwargs[attr] = TokenDistribution(float(data[key]["mean"]), float(data[key].get("cv", 0.0)))
        if "latency" in data:
            latency = dict(default.latency)
            for metric, quantiles in data["latency"].items():
                latency[metric] = {float(p): float(v) for p, v in quantiles.items()}
            kwargs["latency"] = latency
        if "cacheConfig" in data:
            cache = data["cacheConfig"]
            kwargs["cache_config"] = None if cache is None else CacheConfig(int(cache["numGpuBlocks"]),
                                                                            int(cache["blockSize"]))
        return replace(default, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        """The camelCase JSON form (quantile levels as strings, e.g. "0.99")."""
        return {
            "family": self.family,
            "names": self.names,
            "labels": dict(self.labels),
            "requestsPerSecond": self.requests_per_second,
            "promptTokens": {"mean": self.prompt_tokens.mean, "cv": self.prompt_tokens.cv},
            "outputTokens": {"mean": self.output_tokens.mean, "cv": self.output_tokens.cv},
            "latency": {m: {repr(float(p)): v for p, v in q.items()} for m, q in self.latency.items()},
            "running": self.running,
            "waiting": self.waiting,
            "kvCacheUsage": self.kv_cache_usage,
            "cacheConfig": None if self.cache_config is None else {
                "numGpuBlocks": self.cache_config.num_gpu_blocks, "blockSize": self.cache_config.block_size},
            "maxModelLen": self.max_model_len,
            "seed": self.seed,
        }


def standin_config(**kwargs: Any) -> dict[str, Any]:
    """A validated camelCase config dict; keyword arguments are the snake_case fields of StandinConfig.

    `prompt_tokens` / `output_tokens` may be {"mean": M, "cv": C} and `cache_config` {"numGpuBlocks": N,
    "blockSize": B} (or the dataclasses); `latency` may give only some of ttft / tpot / e2e (the others keep
    their defaults). Example: `standin_config(labels={"model_name": "m"}, requests_per_second=20)`.
    """
    camel = {"requests_per_second": "requestsPerSecond", "prompt_tokens": "promptTokens",
             "output_tokens": "outputTokens", "kv_cache_usage": "kvCacheUsage", "cache_config": "cacheConfig",
             "max_model_len": "maxModelLen"}
    data: dict[str, Any] = {}
    for key, value in kwargs.items():
        if isinstance(value, TokenDistribution):
            value = {"mean": value.mean, "cv": value.cv}
        elif isinstance(value, CacheConfig):
            value = {"numGpuBlocks": value.num_gpu_blocks, "blockSize": value.block_size}
        data[camel.get(key, key)] = value
    return StandinConfig.from_dict(data).to_dict()


@dataclass(frozen=True)
class SyntheticRequest:
    prompt_tokens: int
    output_tokens: int
    ttft: float  # s
    tpot: float  # s, the request's mean inter-token latency
    e2e: float   # s


class RequestSampler:
    """Draws synthetic requests from a StandinConfig's token and latency distributions."""

    def __init__(self, config: StandinConfig) -> None:
        self.config = config
        self.latency = {metric: LatencyDistribution(q) for metric, q in config.latency.items()}

    def draw(self, rng: np.random.Generator) -> SyntheticRequest:
        cfg = self.config
        return SyntheticRequest(
            prompt_tokens=cfg.prompt_tokens.sample(rng, cfg.max_model_len),
            output_tokens=cfg.output_tokens.sample(rng, cfg.max_model_len),
            ttft=float(self.latency["ttft"].sample(rng)),
            tpot=float(self.latency["tpot"].sample(rng)),
            e2e=float(self.latency["e2e"].sample(rng)),
        )


class StandinMetrics:
    """The stand-in's series in their own registry; `observe` records one finished request."""

    def __init__(self, config: StandinConfig, registry: CollectorRegistry | None = None) -> None:
        self.config = config
        self.registry = registry if registry is not None else CollectorRegistry()
        m = config.metrics
        labels = config.labels
        names = list(labels)

        def histograms(metric: tuple[str, ...], doc: str, buckets: Sequence[float]) -> list[Any]:
            return [Histogram(n, doc, names, buckets=buckets, registry=self.registry).labels(**labels)
                    for n in config.names_of(metric)]

        def counters(metric: tuple[str, ...], doc: str) -> list[Any]:
            return [Counter(n, doc, names, registry=self.registry).labels(**labels) for n in config.names_of(metric)]

        def gauges(metric: tuple[str, ...], doc: str, value: float) -> None:
            for n in config.names_of(metric):
                Gauge(n, doc, names, registry=self.registry).labels(**labels).set(value)

        tokens = token_buckets(config.max_model_len)
        self._ttft = histograms(m.ttft, "Time to first token [s] (stand-in).", TTFT_BUCKETS)
        self._tpot = histograms(m.tpot, "Mean inter-token latency per request [s] (stand-in).", TPOT_BUCKETS)
        self._e2e = histograms(m.e2e, "End-to-end request latency [s] (stand-in).", E2E_BUCKETS)
        self._prompt_hist = histograms(m.prompt_tokens, "Prompt tokens per request (stand-in).", tokens)
        self._output_hist = histograms(m.output_tokens, "Generation tokens per request (stand-in).", tokens)
        self._prompt_total = counters(m.prompt_tokens_total, "Prompt tokens processed (stand-in).")
        self._output_total = counters(m.output_tokens_total, "Generation tokens produced (stand-in).")
        counter_name, counter_labels = REQUEST_COUNTERS[config.family]
        self._requests = Counter(counter_name, "Finished requests (stand-in).", [*names, *counter_labels],
                                 registry=self.registry).labels(**labels, **counter_labels)
        gauges(m.running, "Requests in the running batch (stand-in).", config.running)
        gauges(m.waiting, "Requests waiting (stand-in).", config.waiting)
        gauges(m.kv_usage, "KV cache usage, 0-1 (stand-in).", config.kv_cache_usage)
        if m.cache_config and config.cache_config is not None:
            cache_labels = {"num_gpu_blocks": str(config.cache_config.num_gpu_blocks),
                            "block_size": str(config.cache_config.block_size)}
            for n in config.names_of(m.cache_config):
                Gauge(n, "KV cache configuration (stand-in).", [*names, *cache_labels],
                      registry=self.registry).labels(**labels, **cache_labels).set(1)
        self._lock = threading.Lock()
        self.requests_observed = 0

    def observe(self, request: SyntheticRequest) -> None:
        with self._lock:  # one request's series change together (a scrape sees whole requests)
            for series, value in ((self._ttft, request.ttft), (self._tpot, request.tpot), (self._e2e, request.e2e),
                                  (self._prompt_hist, request.prompt_tokens),
                                  (self._output_hist, request.output_tokens)):
                for child in series:
                    child.observe(value)
            for child in self._prompt_total:
                child.inc(request.prompt_tokens)
            for child in self._output_total:
                child.inc(request.output_tokens)
            self._requests.inc()
            self.requests_observed += 1

    def exposition(self) -> bytes:
        """The text format 0.0.4 (serve it with CONTENT_TYPE)."""
        with self._lock:
            return prometheus_client.generate_latest(self.registry)


class TrafficGenerator(threading.Thread):
    """Poisson arrivals in real time; each arrival observes one request drawn by a RequestSampler."""

    def __init__(self, config: StandinConfig, metrics: StandinMetrics) -> None:
        super().__init__(name="standin-traffic", daemon=True)
        self.config = config
        self.metrics = metrics
        self.sampler = RequestSampler(config)
        self.rng = np.random.default_rng(config.seed)
        self._stop_event = threading.Event()

    def run(self) -> None:
        rate = self.config.requests_per_second
        if rate <= 0.0:
            self._stop_event.wait()
            return
        next_at = time.monotonic()  # the first request completes now: nothing is backdated
        while not self._stop_event.is_set():
            while next_at <= time.monotonic():
                self.metrics.observe(self.sampler.draw(self.rng))
                next_at += float(self.rng.exponential(1.0 / rate))
            self._stop_event.wait(max(0.0, next_at - time.monotonic()))

    def stop(self) -> None:
        self._stop_event.set()


def _handler(metrics: StandinMetrics) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = metrics.exposition()
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # quiet: Prometheus scrapes every second
            pass

    return Handler


def serve(config: StandinConfig, port: int, host: str = "127.0.0.1") -> int:
    """Serve until SIGTERM / SIGINT; print `ready` once serving. Returns the exit status."""
    prometheus_client.disable_created_metrics()
    metrics = StandinMetrics(config)
    server = ThreadingHTTPServer((host, port), _handler(metrics))
    server.daemon_threads = True
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    server_thread = threading.Thread(target=server.serve_forever, name="standin-http", daemon=True)
    traffic = TrafficGenerator(config, metrics)
    server_thread.start()
    traffic.start()
    print("ready", flush=True)
    parent = os.getppid()
    while not stop.wait(0.5):
        if os.getppid() != parent:  # the test process died without stopping us: do not linger
            break
    traffic.stop()
    server.shutdown()
    server.server_close()
    traffic.join(timeout=5)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.engine_standin", description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, type=Path, help="JSON file (camelCase keys)")
    parser.add_argument("--port", required=True, type=int, help="port on 127.0.0.1")
    args = parser.parse_args(argv)
    config = StandinConfig.from_dict(json.loads(args.config.read_text()))
    return serve(config, args.port)


class StandinProcess:
    """The stand-in as a child process, for tests: `start()` waits for `ready`, `stop()` sends SIGTERM.

    Its config and log (stdout and stderr) live in a temporary folder that `stop()` removes. With `port=None`
    a free port is chosen (and another one tried if it is taken before the process binds it). `start()` after
    `stop()` starts it again on the same port, with the counters back at zero (like a restarted engine).
    """

    def __init__(self, config: Mapping[str, Any] | StandinConfig, port: int | None = None) -> None:
        self.config = config if isinstance(config, StandinConfig) else StandinConfig.from_dict(config)
        self._fixed_port = port is not None
        self.port = port if port is not None else free_port()
        self._dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self.log = ""  # the last run's output, kept after stop()
        self.exit_code: int | None = None  # the last run's exit status, set by stop()

    @property
    def target(self) -> str:
        """host:port, as a Prometheus scrape target."""
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.target}/metrics"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout_s: float = 30.0) -> StandinProcess:
        if self.running:
            raise RuntimeError(f"stand-in already running on {self.target}")
        for attempt in range(3):
            if self._launch(timeout_s):
                return self
            if self._fixed_port or "Address already in use" not in self.log or attempt == 2:
                break
            self.port = free_port()
        raise RuntimeError(f"engine stand-in did not become ready on {self.target}:\n{self.log[-3000:]}")

    def _launch(self, timeout_s: float) -> bool:
        from tests.support import tempdirs  # here: the stand-in process itself does not import pytest

        self._dir = tempdirs.make("standin")
        config_file = self._dir / "config.json"
        config_file.write_text(json.dumps(self.config.to_dict()))
        log_path = self._dir / "standin.log"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
        with open(log_path, "wb") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "tests.support.engine_standin", "--config", str(config_file),
                 "--port", str(self.port)],
                cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            text = log_path.read_text(errors="replace")
            if "ready\n" in text.splitlines(keepends=True):
                return True
            if self._proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        return False

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after `timeout_s`; removes the temporary folder. Safe to call twice."""
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.terminate()
                try:
                    self._proc.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()
            self.exit_code = self._proc.returncode
            self._proc = None
        if self._dir is not None:
            log_path = self._dir / "standin.log"
            if log_path.is_file():
                self.log = log_path.read_text(errors="replace")
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> StandinProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


if __name__ == "__main__":
    sys.exit(main())
