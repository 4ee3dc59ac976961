"""The operator's settings: one typed object read from INFERPLAN_* environment variables.

| variable | meaning | default |
|---|---|---|
| INFERPLAN_NAMESPACES | comma-separated namespace names to watch (exact names, no patterns); empty: all | all |
| INFERPLAN_RESYNC_SECONDS | re-plan every plan at least this often, even when nothing changed | 600 |
| INFERPLAN_CHECK_SECONDS | how often every plan is checked (GPU inventory, resync, observation) | 5 |
| INFERPLAN_LOG_LEVEL | DEBUG, INFO, WARNING or ERROR | INFO |
| INFERPLAN_METRICS_PORT | port of the Prometheus /metrics endpoint (0: off) | 8080 |
| INFERPLAN_HEALTH_PORT | port of kopf's liveness endpoint /healthz (0: off; not the metrics port) | 8081 |
| INFERPLAN_PLANNER_PROCESSES | planning runs in this many worker processes, off the event loop (0: in threads) | 2 |
| INFERPLAN_PLANNER_THREADS | with INFERPLAN_PLANNER_PROCESSES=0: planning runs in this many threads instead | 2 |
| INFERPLAN_VERIFY | simulate the leading candidates of plans that do not set spec.verify (true/false) | true |
| INFERPLAN_PROMETHEUS_CONFIG | YAML file listing the Prometheus endpoints spec.observe may name | none |
| INFERPLAN_OBSERVE_SECONDS | how often plans with spec.observe query Prometheus | 60 |
| INFERPLAN_OBSERVE_THREADS | Prometheus queries run in this many worker threads (apart from planning) | 4 |
| INFERPLAN_PEERING | name of the (Cluster)KopfPeering object replicas share; empty: standalone, no peering | none |
| INFERPLAN_PEERING_PRIORITY | this replica's peering priority (the highest one works, the others wait) | random |
| INFERPLAN_PEERING_LIFETIME | seconds a replica's keep-alive counts; a crashed replica is replaced this late | 30 |

The Prometheus file is read at start (a bad file stops the operator with its problem named) and again
whenever it changes (a mounted ConfigMap is updated in place).

Planning is CPU-bound Python, so it runs in worker processes by default: threads would share one core through
the GIL and slow kopf's event loop down with it. Peering (kopf's, see docs/operator.md "High availability")
lets several replicas run with exactly one working; replicas of one Deployment share their environment, so the
priority is drawn at random per process unless set (equal priorities would pause them all, by kopf's rule).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")  # DNS-1123 label (at most 63 characters)
_OBJECT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")  # DNS-1123 subdomain
PEERING_PRIORITY_MAX = 2**31 - 1


class SettingsError(ValueError):
    """An INFERPLAN_* variable has a value the operator cannot use."""


@dataclass(frozen=True)
class OperatorSettings:
    namespaces: tuple[str, ...] = ()
    resync_seconds: float = 600.0
    check_seconds: float = 5.0
    log_level: str = "INFO"
    metrics_port: int = 8080
    health_port: int = 8081
    planner_processes: int = 2
    planner_threads: int = 2
    verify: bool = True
    prometheus_config: str | None = None
    observe_seconds: float = 60.0
    observe_threads: int = 4
    peering: str | None = None  # None: standalone
    peering_priority: int | None = None  # None: drawn at random when the operator starts
    peering_lifetime: int = 30

    @property
    def all_namespaces(self) -> bool:
        return not self.namespaces


def _number(env: Mapping[str, str], name: str, default: float, minimum: float, integer: bool) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise SettingsError(f"{name} must be {kind}, got {raw!r}") from None
    if not math.isfinite(value):  # float("nan") compares false with everything: a NaN period passed the minimum
        raise SettingsError(f"{name} must be a finite number, got {raw!r}")
    if value < minimum:
        raise SettingsError(f"{name} must be >= {minimum:g}, got {raw!r}")
    return value


def load_settings(env: Mapping[str, str] | None = None) -> OperatorSettings:
    """Settings from `env` (default: the process environment); a bad value raises SettingsError naming it."""
    env = os.environ if env is None else env
    namespaces = _namespaces(env)
    level = env.get("INFERPLAN_LOG_LEVEL", "INFO").strip().upper() or "INFO"
    if level not in LOG_LEVELS:
        raise SettingsError(f"INFERPLAN_LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
    ports = {name: int(_number(env, name, default, 0, True)) for name, default in
             (("INFERPLAN_METRICS_PORT", 8080), ("INFERPLAN_HEALTH_PORT", 8081))}
    for name, port in ports.items():
        if port > 65535:
            raise SettingsError(f"{name} must be a port number (0-65535), got {port}")
    metrics_port, health_port = ports.values()
    if metrics_port and metrics_port == health_port:  # two servers: the second would not bind
        raise SettingsError(f"INFERPLAN_METRICS_PORT and INFERPLAN_HEALTH_PORT must be different ports (or 0: off), "
                            f"both are {metrics_port}")
    verify_raw = env.get("INFERPLAN_VERIFY", "").strip().lower()
    if verify_raw not in ("", "true", "false", "1", "0", "yes", "no"):
        raise SettingsError(f"INFERPLAN_VERIFY must be true or false, got {verify_raw!r}")
    return OperatorSettings(
        namespaces=namespaces,
        resync_seconds=_number(env, "INFERPLAN_RESYNC_SECONDS", 600.0, 1.0, False),
        check_seconds=_number(env, "INFERPLAN_CHECK_SECONDS", 5.0, 0.1, False),
        log_level=level,
        metrics_port=ports["INFERPLAN_METRICS_PORT"],
        health_port=ports["INFERPLAN_HEALTH_PORT"],
        planner_processes=int(_number(env, "INFERPLAN_PLANNER_PROCESSES", 2, 0, True)),
        planner_threads=int(_number(env, "INFERPLAN_PLANNER_THREADS", 2, 1, True)),
        verify=verify_raw in ("", "true", "1", "yes"),
        prometheus_config=_prometheus_config(env),
        observe_seconds=_number(env, "INFERPLAN_OBSERVE_SECONDS", 60.0, 1.0, False),
        observe_threads=int(_number(env, "INFERPLAN_OBSERVE_THREADS", 4, 1, True)),
        **_peering(env),
    )


def _namespaces(env: Mapping[str, str]) -> tuple[str, ...]:
    """Exact names: kopf would take "team-*" or "!kube-system" as patterns, but the operator's own requests (the
    peering objects) and the chart's Roles need names, and "a b" or "a;b" would match no namespace at all."""
    raw = env.get("INFERPLAN_NAMESPACES", "")
    namespaces = tuple(ns.strip() for ns in raw.split(",") if ns.strip())
    for ns in namespaces:
        if len(ns) > 63 or not _NAMESPACE.match(ns):
            raise SettingsError(f"INFERPLAN_NAMESPACES must be namespace names separated by commas (lower case a-z, "
                                f"0-9, '-'; no patterns), got {ns!r} in {raw!r}")
    return namespaces


def _peering(env: Mapping[str, str]) -> dict[str, object]:
    name = env.get("INFERPLAN_PEERING", "").strip()
    if name and (len(name) > 253 or not _OBJECT_NAME.match(name)):
        raise SettingsError(f"INFERPLAN_PEERING must be a Kubernetes object name (lower case a-z, 0-9, '-', '.'), "
                            f"got {name!r}")
    priority = None
    if env.get("INFERPLAN_PEERING_PRIORITY", "").strip():
        priority = int(_number(env, "INFERPLAN_PEERING_PRIORITY", 0, 0, True))
        if priority > PEERING_PRIORITY_MAX:
            raise SettingsError(f"INFERPLAN_PEERING_PRIORITY must be <= {PEERING_PRIORITY_MAX}, got {priority}")
    # A keep-alive is sent 5-10 s before the lifetime ends (at least every second): shorter lifetimes would let a
    # replica that is merely slow be taken for dead, and two replicas would work at once.
    lifetime = int(_number(env, "INFERPLAN_PEERING_LIFETIME", 30, 5, True))
    return {"peering": name or None, "peering_priority": priority, "peering_lifetime": lifetime}


def _prometheus_config(env: Mapping[str, str]) -> str | None:
    path = env.get("INFERPLAN_PROMETHEUS_CONFIG", "").strip()
    if not path:
        return None
    from inferplan.observe.prometheus import PrometheusConfigError, load_endpoints

    try:
        load_endpoints(path)
    except PrometheusConfigError as exc:
        raise SettingsError(str(exc)) from None
    return path
