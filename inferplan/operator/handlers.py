"""kopf handlers and the loop that keeps every plan answered.

kopf watches the plans and the nodes; it runs no per-plan handler state. Nodes feed a small index of GPUs. Each
plan's events feed a registry (`_plans`: its generation, spec and status as last seen). One loop, the
`Checker`, decides which plans need work and runs their reconciles as tasks, one at a time per plan: plan
(`reconcile.reconcile_plan`, off the event loop), build the status (the pure `status.next_status`) and write
it, only when its content changed (no timestamp churn, clean GitOps diffs).

When a plan is planned: when its generation has no answer yet (create, spec change); when first seen by this
process (start, restart, taking over from a peer) unless its status already answers its generation, GPU
inventory and planner version; when the GPU inventory of the types it can use changes (checked every
INFERPLAN_CHECK_SECONDS); and at least every INFERPLAN_RESYNC_SECONDS. A plan with spec.observe is observed
every INFERPLAN_OBSERVE_SECONDS.

Why this shape (bench/bench_operator_load.py, docs/operator.md "Scale"): a kopf timer per plan costs ~70 KiB
of memory and a handler call every few seconds per plan, and makes kopf put its finalizer on every plan (a
plan could not be deleted while the operator is down); kopf's changing handlers write two annotations and
deep-copy the body on every patch. Here a plan costs its registry entry, and a check of an unchanged plan a
few microseconds. Planning is CPU-bound Python, so it runs in worker processes (`PlannerPool`): every core
plans, and the event loop never waits for the GIL behind a planner thread.

With peering (INFERPLAN_PEERING), kopf pauses the watches of every replica but the highest-priority one; the
checker applies the same rule to the same peering object, so that only that replica works.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import getpass
import hashlib
import json
import logging
import math
import multiprocessing
import os
import random
import socket
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

import kopf
import kubernetes
import urllib3

from inferplan import __version__
from inferplan.observe.prometheus import EndpointsFile
from inferplan.operator import GROUP, PLURAL, VERSION, metrics
from inferplan.operator.inventory import Inventory, build_inventory, node_gpus
from inferplan.operator.main import planner_worker_init
from inferplan.operator.observing import CurrentError, DeploymentReader, observe_plan, observe_status
from inferplan.operator.reconcile import (
    ConfigMapReader,
    Outcome,
    current_deployment_name,
    error_reason,
    reconcile_plan,
    with_config_map,
    with_current_change,
)
from inferplan.operator.settings import load_settings
from inferplan.operator.status import next_status, status_patch
from inferplan.planner.gpus import resolve_gpu
from inferplan.planner.names import CatalogLookupError
from inferplan.planner.spec import PlanError

SETTINGS = load_settings()
# This process's name in the peering object (kopf.run gets it from main.py): POD_ID as kopf's own default, else
# user@host/pid/random.
IDENTITY = os.environ.get("POD_ID") or (
    f"{getpass.getuser()}@{socket.gethostname()}/{os.getpid()}/{random.randrange(16**6):06x}")
ANSWER_GRACE_S = 120.0
"""Our status write comes back as a watch event a moment later, and under load seconds later. Only when the
status has not shown an answer for this long is the write taken for lost, and the plan planned again."""
_WRITE_BACKOFF_S = (1, 1, 2, 3, 5, 8, 13, 21)  # kopf's own API retries: rides out an API server restart


class PlannerPool:
    """Runs `reconcile_plan` off the event loop: in `processes` worker processes, or in `threads` threads of
    this process when `processes` is 0. Bounded: that many plans are planned at once, the others queue."""

    def __init__(self, processes: int, threads: int) -> None:
        self.processes, self.threads = processes, threads
        self._executor: Executor | None = None

    def _current(self) -> Executor:
        if self._executor is None:
            if self.processes:
                # spawn, not fork: this process runs threads (kopf's, the metrics server's), and a forked child
                # could inherit a lock that one of them held at that moment.
                self._executor = ProcessPoolExecutor(self.processes, mp_context=multiprocessing.get_context("spawn"),
                                                     initializer=planner_worker_init, initargs=(os.getpid(),))
            else:
                self._executor = ThreadPoolExecutor(self.threads, thread_name_prefix="planner")
        return self._executor

    async def plan(self, spec: Mapping[str, Any], inventory: Inventory, verify: bool,
                   status: Mapping[str, Any] | None, name: str, namespace: str,
                   current_deployment: Mapping[str, Any] | None) -> Outcome:
        """`reconcile_plan(spec, inventory, None, verify, status, ...)` in a worker (the spec's ConfigMap and
        the current Deployment, if any, already read: a worker process has no API client)."""
        executor = self._current()
        call = functools.partial(reconcile_plan, spec, inventory, None, verify, status, name=name,
                                 namespace=namespace, current_deployment=current_deployment)
        try:
            return await asyncio.get_running_loop().run_in_executor(executor, call)
        except BrokenProcessPool:
            # A worker died (killed, out of memory) and took every queued plan with it: start a new pool, and try
            # those plans again shortly.
            if self._executor is executor:
                self._executor = None
                executor.shutdown(wait=False, cancel_futures=True)
            raise kopf.TemporaryError("a planner process died; planning again", delay=1) from None

    def shutdown(self) -> None:
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)


PLANNER = PlannerPool(SETTINGS.planner_processes, SETTINGS.planner_threads)
# The operator's own API requests (status writes, ConfigMap and Deployment reads, events): blocking, in threads.
API_EXECUTOR = ThreadPoolExecutor(max_workers=4, thread_name_prefix="api")
# Prometheus queries wait on the network: their own pool, so a slow Prometheus never holds up planning.
OBSERVE_EXECUTOR = ThreadPoolExecutor(max_workers=SETTINGS.observe_threads, thread_name_prefix="observe")
ENDPOINTS = EndpointsFile(SETTINGS.prometheus_config)


# ----------------------------------------------------------------------------------------------------------
# What this process knows about each plan


@dataclass
class _Plan:
    """A plan as its last event showed it (the status: or as this process wrote it since)."""

    uid: str
    namespace: str
    name: str
    generation: int
    spec: dict[str, Any]
    status: dict[str, Any] | None
    seen_at: float  # time.monotonic() of the last event


@dataclass(frozen=True)
class _Answer:
    """What the last plan of a plan answered: its generation and the inventory it could use, and when."""

    generation: int
    inventory: list[dict[str, Any]]
    at: float  # time.monotonic()


@dataclass
class _State:
    plans: dict[str, _Plan] = field(default_factory=dict)  # uid -> the plan
    answered: dict[str, _Answer] = field(default_factory=dict)  # uid -> its last plan, written
    last_planned: dict[str, float] = field(default_factory=dict)  # uid -> monotonic time (resync bookkeeping)
    last_observed: dict[str, float] = field(default_factory=dict)  # uid -> monotonic time of its observation
    planned_inputs: dict[str, tuple[float, ...]] = field(default_factory=dict)  # uid -> what observing fed it
    retry_at: dict[str, float] = field(default_factory=dict)  # uid -> not before (after a temporary error)
    conditions: dict[str, dict[str, str]] = field(default_factory=dict)  # uid -> {type: status}
    condition_counts: Counter[tuple[str, str]] = field(default_factory=Counter)  # their sum, inferplan_plans
    recorded: set[str] = field(default_factory=set)  # uids whose metrics are exported


_state = _State()
_index: kopf.Index | None = None  # the gpu_nodes index, as kopf hands it to handlers


class _QuietSuccess(logging.Filter):
    """Drops kopf's INFO line "Handler 'plan_event' succeeded.": one per watch event of every plan, saying
    nothing; a failing handler is still logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.msg if isinstance(record.msg, str) else ""
        return not (record.levelno == logging.INFO and message.endswith(" succeeded.")
                    and "'plan_event'" in message)


_QUIET = _QuietSuccess()


# ----------------------------------------------------------------------------------------------------------
# kopf: startup, cleanup, the node index and the plans' events


_METRICS_SERVED: list[int] = []


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, logger: logging.Logger, **kwargs: Any) -> None:
    global _state, _index, CHECKER
    # Silent watch stalls are kopf's best-known failure: let the server end watches, the client notice.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    settings.posting.level = logging.WARNING  # kopf's own events only for problems
    logging.getLogger().setLevel(SETTINGS.log_level)
    if _QUIET not in logging.getLogger("kopf.objects").filters:
        logging.getLogger("kopf.objects").addFilter(_QUIET)
    if SETTINGS.metrics_port and not _METRICS_SERVED:
        from prometheus_client import start_http_server

        start_http_server(SETTINGS.metrics_port, registry=metrics.REGISTRY)
        _METRICS_SERVED.append(SETTINGS.metrics_port)  # once per process: kopf may be run again (main.run)
    # A fresh start (tests run the operator several times in one process): nothing carried over.
    _state, _index = _State(), kwargs.get("gpu_nodes")
    peering = "off"
    if SETTINGS.peering:
        settings.peering.lifetime = SETTINGS.peering_lifetime
        settings.peering.stealth = True  # no log line per keep-alive
        peering = (f"{SETTINGS.peering} as {IDENTITY} priority={settings.peering.priority} "
                   f"lifetime={settings.peering.lifetime}s")
        await _check_peering_object(logger)
    CHECKER = Checker(settings.peering.priority)
    CHECKER.start()
    logger.info("inferplan operator %s: namespaces=%s resync=%ss check=%ss metrics=:%s planner=%s peering=%s",
                __version__, ",".join(SETTINGS.namespaces) or "all", SETTINGS.resync_seconds, SETTINGS.check_seconds,
                SETTINGS.metrics_port or "off",
                f"{SETTINGS.planner_processes} processes" if SETTINGS.planner_processes
                else f"{SETTINGS.planner_threads} threads", peering)


@kopf.on.cleanup()
async def stop(**_: Any) -> None:
    await CHECKER.stop()
    PLANNER.shutdown()


@kopf.on.probe(id="checker")
async def checker_probe(**_: Any) -> str:
    """Part of /healthz: a checker loop that ended (a bug) makes the operator unhealthy, to be restarted."""
    if not CHECKER.running():
        raise kopf.PermanentError("the plans' checker loop is not running")
    return "running"


async def _check_peering_object(logger: logging.Logger) -> None:
    """kopf waits (does no work) until the peering object exists and it is the highest-priority replica in it;
    it does not say so. Say it: an operator that silently does nothing is the worst outcome."""

    def missing() -> list[str]:
        # Startup handlers run before kopf's login: load the configuration as kopf's login_via_client will.
        try:
            kubernetes.config.load_incluster_config()
        except kubernetes.config.ConfigException:
            kubernetes.config.load_kube_config()
        return [where for where, status in _peering_statuses() if status is None]

    try:
        absent = await asyncio.get_running_loop().run_in_executor(API_EXECUTOR, missing)
    except kubernetes.client.ApiException as exc:
        if exc.status == 404:
            logger.error("peering %s: the kopf peering CRDs are not installed (kubectl apply -f "
                         "crds/kopf-peering.yaml); the operator waits until they are", SETTINGS.peering)
        else:
            logger.warning("peering %s: cannot check the peering object: %s %s", SETTINGS.peering, exc.status,
                           exc.reason)
        return
    except Exception as exc:  # the check only helps; kopf's own peering goes on regardless
        logger.warning("peering %s: cannot check the peering object: %s", SETTINGS.peering, exc)
        return
    if absent:
        logger.error("peering %s: %s does not exist; the operator waits (does nothing) until it is created "
                     "(docs/operator.md, High availability)", SETTINGS.peering, ", ".join(absent))


@kopf.index("", "v1", "nodes")
def gpu_nodes(name: str, labels: dict, spec: dict, status: dict, **_: Any) -> dict | None:
    """One small value per GPU node (never the whole object)."""
    info = node_gpus(name, labels, status.get("allocatable") or {}, bool(spec.get("unschedulable")),
                     status.get("conditions") or [])
    return {name: info} if info is not None else None


@kopf.on.event(GROUP, VERSION, PLURAL)
async def plan_event(event: dict, meta: dict, spec: dict, status: dict, namespace: str, name: str,
                     gpu_nodes: kopf.Index, **_: Any) -> None:
    """Every event of every plan (the initial listing too): remember the plan as it is now, and have the checker
    look at it. A plan seen for the first time whose status already answers it is not planned again."""
    global _index
    _index = gpu_nodes
    uid = meta["uid"]
    if event.get("type") == "DELETED":
        _forget(uid, namespace, name)
        return
    now = time.monotonic()
    generation = int(meta.get("generation") or 0)
    # The event's body is never changed after it is parsed: keep its parts rather than copies.
    plan = _Plan(uid, namespace, name, generation, dict(spec), dict(status) if status else None, now)
    first = uid not in _state.plans
    _state.plans[uid] = plan
    if first and uid not in _state.answered:
        relevant = _relevant_inventory(plan.spec, _inventory())
        why = _unanswered(plan.spec, plan.status, generation, relevant)
        if why is not None:
            CHECKER.logger.info("%s/%s: to plan: %s", namespace, name, why)
        else:
            _state.answered[uid] = _Answer(generation, relevant, now)
            # Their resyncs are spread over the second half of the interval after the start: a restart neither
            # re-plans them at once nor all together one interval later.
            _state.last_planned[uid] = now - random.uniform(0.0, SETTINGS.resync_seconds / 2)
            _state.planned_inputs[uid] = _planning_inputs(plan.spec, plan.status)
            _record(plan, plan.status or {})
    CHECKER.touch(uid)


def _forget(uid: str, namespace: str, name: str) -> None:
    """A deleted plan: its metric series and everything this process kept about it go."""
    for registry in (_state.plans, _state.answered, _state.last_planned, _state.last_observed,
                     _state.planned_inputs, _state.retry_at):
        registry.pop(uid, None)
    if uid in _state.recorded:
        _state.recorded.discard(uid)
        metrics.forget_plan(namespace, name)
    _set_conditions(uid, {})


# ----------------------------------------------------------------------------------------------------------
# The inventory


class _InventoryCache:
    """The inventory, rebuilt only when the node index changed (every check of every plan asks for it), and its
    entries as the status records them."""

    def __init__(self) -> None:
        self.nodes: frozenset[Any] | None = None
        self.inventory = build_inventory(())
        self.entries: list[dict[str, Any]] = []

    def get(self, index: kopf.Index | None) -> Inventory:
        nodes = frozenset(value for store in (index or {}).values() for value in store)
        if nodes != self.nodes:
            self.inventory = build_inventory(nodes)
            self.entries = _entries(self.inventory)
            self.nodes = nodes
            metrics.record_inventory(self.inventory.available())
        return self.inventory

    def entries_of(self, inventory: Inventory) -> list[dict[str, Any]]:
        return self.entries if inventory is self.inventory else _entries(inventory)


def _entries(inventory: Inventory) -> list[dict[str, Any]]:
    return [entry.model_dump(by_alias=True) for entry in inventory.entries]


_INVENTORY = _InventoryCache()


def _inventory() -> Inventory:
    return _INVENTORY.get(_index)


@functools.lru_cache(maxsize=4096)
def _gpu_keys(names: tuple[str, ...]) -> frozenset[str]:
    """The catalog keys of the GPU names a plan's constraints.gpuTypes lists (unknown names left out)."""
    keys = set()
    for name in names:
        try:
            keys.add(resolve_gpu(name).key)
        except CatalogLookupError:
            continue
    return frozenset(keys)


def _relevant_inventory(spec: Mapping[str, Any], inventory: Inventory) -> list[dict[str, Any]]:
    """The inventory entries of the GPU types a plan can use, as its status records them (shared dicts: copy
    before changing one)."""
    entries = _INVENTORY.entries_of(inventory)
    wanted = (spec.get("constraints") or {}).get("gpuTypes")
    if not wanted:
        return list(entries)
    keys = _gpu_keys(tuple(str(name) for name in wanted))
    return [e for e in entries if e["gpuType"] in keys]


# ----------------------------------------------------------------------------------------------------------
# The operator's own API requests


class _Client:
    """The API client of the operator's own requests: made from the configuration kopf's login stored as the
    kubernetes client's default (again when a new login replaces it), and shared, so its connections are
    reused."""

    def __init__(self) -> None:
        self._client: kubernetes.client.ApiClient | None = None
        self._configuration: kubernetes.client.Configuration | None = None
        self._lock = threading.Lock()

    def get(self) -> kubernetes.client.ApiClient:
        with self._lock:
            configuration = kubernetes.client.Configuration.get_default()
            if self._client is None or configuration is not self._configuration:
                self._client = kubernetes.client.ApiClient(configuration)
                self._configuration = configuration
            return self._client


_CLIENT = _Client()


def _quote(part: str) -> str:
    return urllib.parse.quote(part, safe="")


def _request(method: str, path: str, body: Any = None, query: list[tuple[str, str]] | None = None,
             content_type: str = "application/json") -> dict:
    """One API request (blocking: call it in a thread), the JSON answer as a dict; ApiException on an error
    status, urllib3's HTTPError when the server cannot be reached.

    Raw on purpose: the client's typed APIs (CoreV1Api.read_namespaced_config_map, AppsV1Api.
    read_namespaced_deployment, ...) import about 250 model modules, 20 MiB of the operator's memory, to build
    objects that would be turned back into dicts."""
    client = _CLIENT.get()
    headers = {"Accept": "application/json"} | ({"Content-Type": content_type} if body is not None else {})
    request = client.param_serialize(method=method, resource_path=path, query_params=query, header_params=headers,
                                     body=body, auth_settings=["BearerToken"])
    response = client.call_api(*request, _request_timeout=30)
    data = response.read()
    if not 200 <= response.status <= 299:
        raise kubernetes.client.ApiException(http_resp=response)
    return json.loads(data) if data else {}


def _config_map_reader(namespace: str) -> ConfigMapReader:
    def read(name: str, key: str) -> str:
        try:
            config_map = _request("GET", f"/api/v1/namespaces/{_quote(namespace)}/configmaps/{_quote(name)}")
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                raise KeyError(f"ConfigMap {namespace}/{name} not found") from None
            raise kopf.TemporaryError(f"reading ConfigMap {namespace}/{name}: {exc.reason}", delay=30) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise kopf.TemporaryError(f"reading ConfigMap {namespace}/{name}: {exc}", delay=5) from exc
        return (config_map.get("data") or {})[key]

    return read


def _deployment_reader(namespace: str) -> DeploymentReader:
    def read(name: str) -> dict | None:
        try:
            return _request("GET", f"/apis/apps/v1/namespaces/{_quote(namespace)}/deployments/{_quote(name)}")
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise CurrentError(f"cannot read Deployment {namespace}/{name}: {exc.reason}") from None
        except urllib3.exceptions.HTTPError:
            raise CurrentError(f"cannot read Deployment {namespace}/{name}: the API server is unreachable") from None

    return read


async def _with_retries(what: str, call: Any, logger: logging.Logger, backoff: tuple[float, ...] = _WRITE_BACKOFF_S,
                        still_wanted: Any = None) -> dict | None:
    """`call()` in the API pool, again after each delay of `backoff` while the API server is unreachable or
    overloaded. None when it gave up, or when `still_wanted()` says the result is no longer needed."""
    loop = asyncio.get_running_loop()
    for delay in (*backoff, None):
        try:
            return await loop.run_in_executor(API_EXECUTOR, call)
        except kubernetes.client.ApiException as exc:
            if exc.status not in (429, 500, 502, 503, 504):
                raise
            problem = f"{exc.status} {exc.reason}"
        except urllib3.exceptions.HTTPError as exc:
            problem = type(exc).__name__
        if delay is None:
            logger.error("%s: giving up after %d attempts (%s)", what, len(backoff) + 1, problem)
            return None
        logger.warning("%s: %s; trying again in %s s", what, problem, delay)
        await asyncio.sleep(delay)
        if still_wanted is not None and not still_wanted():
            return None
    return None


def _peering_statuses() -> list[tuple[str, dict | None]]:
    """The peering objects this operator announces itself in (one cluster-wide, or one per watched namespace),
    with their status (None: the object does not exist)."""
    selector = [("fieldSelector", f"metadata.name={SETTINGS.peering}")]
    if not SETTINGS.namespaces:
        where = [(f"ClusterKopfPeering {SETTINGS.peering}", "/apis/kopf.dev/v1/clusterkopfpeerings")]
    else:
        where = [(f"KopfPeering {ns}/{SETTINGS.peering}", f"/apis/kopf.dev/v1/namespaces/{_quote(ns)}/kopfpeerings")
                 for ns in SETTINGS.namespaces]
    found = []
    for name, path in where:
        items = _request("GET", path, query=selector).get("items") or []
        found.append((name, (items[0].get("status") or {}) if items else None))
    return found


# ----------------------------------------------------------------------------------------------------------
# One reconcile


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _planning_inputs(spec: Mapping[str, Any], status: Mapping[str, Any] | None) -> tuple[float, ...]:
    """What an observation contributes to planning: the observed workload (workload.source: observed) and
    the calibration (observe.calibrate). A re-plan follows when one of them moves by more than 5%."""
    observed = (status or {}).get("observed") or {}
    calibration = (status or {}).get("calibration") or {}
    inputs: list[float] = []
    if (spec.get("workload") or {}).get("source") == "observed":
        inputs += [float(observed.get(k) or 0.0) for k in ("requestsPerSecond", "promptTokensMean",
                                                            "outputTokensMean")]
    if (spec.get("observe") or {}).get("calibrate"):
        inputs += [float(calibration.get(k) or 1.0) for k in ("decode", "prefill")]
    return tuple(inputs)


def _moved(old: tuple[float, ...] | None, new: tuple[float, ...]) -> bool:
    if old is None or len(old) != len(new):
        return True
    return any(abs(a - b) > 0.05 * max(abs(a), abs(b), 1e-9) for a, b in zip(old, new, strict=True))


def _unanswered(spec: Mapping[str, Any], status: Mapping[str, Any] | None, generation: int,
                relevant: list[dict[str, Any]]) -> str | None:
    """Why `status` does not answer the plan as it is, or None when it does: it was made for this generation,
    this inventory and this planner version, with an outcome (Ready True, or False for a problem of the spec).
    A ConfigMap model may have changed unseen, and an unexpected failure deserves another try: those are
    planned again."""
    status = status or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
    if status.get("observedGeneration") != generation:
        return f"no status for generation {generation}"
    if status.get("plannerVersion") != __version__:
        return f"planned by version {status.get('plannerVersion')}"
    if status.get("inventory", []) != relevant:
        return "the GPU inventory changed"
    if ready.get("status") not in ("True", "False") or ready.get("reason") == "PlanningFailed":
        return f"Ready is {ready.get('status')} ({ready.get('reason')})"
    if (spec.get("model") or {}).get("configMapRef"):
        return "its model is a ConfigMap's, which may have changed"
    return None


def _already_answered(uid: str, generation: int, relevant: list[dict[str, Any]]) -> bool:
    """Whether this process planned (and wrote) the plan for this generation and inventory."""
    answer = _state.answered.get(uid)
    return answer is not None and answer.generation == generation and answer.inventory == relevant


def _record(plan: _Plan, status: Mapping[str, Any]) -> None:
    """Export the plan's status as metrics, and count its conditions into inferplan_plans."""
    metrics.record_plan(plan.namespace, plan.name, dict(status), plan.spec)
    _state.recorded.add(plan.uid)
    _set_conditions(plan.uid, {c["type"]: c["status"] for c in status.get("conditions", [])})


def _set_conditions(uid: str, conditions: dict[str, str]) -> None:
    # Kept as a running count: recounting every plan on each reconcile is quadratic in the number of plans.
    _state.condition_counts.subtract(_state.conditions.pop(uid, {}).items())
    if conditions:
        _state.conditions[uid] = conditions
        _state.condition_counts.update(conditions.items())
    metrics.record_conditions({key: count for key, count in _state.condition_counts.items() if count > 0})


async def _observe(plan: _Plan, old: dict | None, logger: logging.Logger) -> dict:
    """The status after querying Prometheus for the plan (off the loop, in the observe pool)."""
    loop = asyncio.get_running_loop()
    observe = plan.spec.get("observe") or {}
    try:
        outcome = await loop.run_in_executor(OBSERVE_EXECUTOR, observe_plan, plan.spec, ENDPOINTS.get(),
                                             _deployment_reader(plan.namespace), old,
                                             _config_map_reader(plan.namespace))
    except Exception:  # never let one plan take the operator down; the status keeps what it had
        metrics.RECONCILE_ERRORS.labels("Unexpected").inc()
        logger.exception("observing failed: %s/%s", plan.namespace, plan.name)
        return dict(old or {})
    try:
        max_error = float(observe.get("maxErrorRatio", "0.25"))
    except ValueError:
        max_error = 0.25
    return observe_status(old, outcome, now=_now(), generation=plan.generation, max_error_ratio=max_error,
                          drift_seconds=float(observe.get("driftSeconds", 900)),
                          calibrate=bool(observe.get("calibrate")))


async def _reconcile(plan: _Plan, replan: bool, observe: bool, logger: logging.Logger) -> None:
    """Observe and/or plan `plan` as it is now, and write its status if that changed."""
    started = time.perf_counter()
    uid, generation, old = plan.uid, plan.generation, plan.status
    current = old
    if observe and plan.spec.get("observe"):
        current = await _observe(plan, old, logger)
        _state.last_observed[uid] = time.monotonic()
    inputs = _planning_inputs(plan.spec, current)
    replan = replan or (bool(inputs) and _moved(_state.planned_inputs.get(uid), inputs))
    if replan:
        new = await _plan(plan, current, logger)
    else:
        new = dict(current or {})
        if observe and new.get("recommendation") and current_deployment_name(plan.spec):
            body = await _current_deployment(plan)
            new = await asyncio.get_running_loop().run_in_executor(API_EXECUTOR, functools.partial(
                with_current_change, plan.spec, new, name=plan.name, namespace=plan.namespace, body=body,
                read_config_map=_config_map_reader(plan.namespace)))

    def still_wanted() -> bool:  # not when the plan was deleted or its spec changed meanwhile
        latest = _state.plans.get(uid)
        return latest is not None and latest.generation == generation

    if not still_wanted():
        return  # the spec changed meanwhile: the new generation's reconcile writes
    patch = status_patch(old, new)
    if patch:  # nothing when nothing changed: no GitOps churn
        path = (f"/apis/{GROUP}/{VERSION}/namespaces/{_quote(plan.namespace)}/{PLURAL}/{_quote(plan.name)}"
                "/status")
        try:
            written = await _with_retries(
                f"writing the status of {plan.namespace}/{plan.name}",
                functools.partial(_request, "PATCH", path, {"status": patch}, None, "application/merge-patch+json"),
                logger, still_wanted=still_wanted)
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:  # deleted meanwhile; its DELETED event cleans up
                return
            raise
        if written is None:
            return  # unreachable for too long, or no longer wanted: the next check tries again
        ready = next((c for c in new.get("conditions", []) if c.get("type") == "Ready"), {})
        logger.info("%s/%s: status written for generation %s (Ready=%s %s)", plan.namespace, plan.name, generation,
                    ready.get("status"), ready.get("reason"))
    if replan:
        now = time.monotonic()
        _state.planned_inputs[uid] = inputs
        _state.last_planned[uid] = now
        _state.answered[uid] = _Answer(generation, new["inventory"], now)
    latest = _state.plans.get(uid)
    if latest is not None and latest.generation == generation:
        latest.status = new  # what the server has now, before its event comes back
    if patch or uid not in _state.recorded:
        _record(plan, new)
    metrics.RECONCILE_DURATION.observe(time.perf_counter() - started)


async def _plan(plan: _Plan, old: dict | None, logger: logging.Logger) -> dict:
    """The status after planning the plan against the cluster's inventory (off the loop)."""
    inventory = _inventory()
    try:
        outcome = await _outcome(plan, old, inventory)
    except kopf.TemporaryError:
        raise
    except Exception as exc:  # never let one plan take the operator down
        metrics.RECONCILE_ERRORS.labels("Unexpected").inc()
        logger.exception("planning failed: %s/%s", plan.namespace, plan.name)
        outcome = Outcome(None, ("PlanningFailed", f"unexpected error while planning: {exc}"))
    ttft_slo = ((plan.spec.get("slo") or {}).get("ttft") or {}).get("percentile", "p95")
    new = next_status(old, generation=plan.generation, now=_now(), planner_version=__version__,
                      inventory=inventory, result=outcome.result, error=outcome.error, ttft_percentile=ttft_slo,
                      manifests=outcome.manifests, change=outcome.change)
    if outcome.warnings:
        new["warnings"] = list(dict.fromkeys([*outcome.warnings, *new.get("warnings", [])]))
    new["inventory"] = [dict(entry) for entry in _relevant_inventory(plan.spec, inventory)]
    if outcome.error:
        if outcome.error[0] != "PlanningFailed":  # already counted as Unexpected
            metrics.RECONCILE_ERRORS.labels(outcome.error[0]).inc()
        previous = {c["type"]: c for c in (old or {}).get("conditions", [])}.get("Ready", {})
        if previous.get("reason") != outcome.error[0]:  # one event per new problem, not per reconcile
            await _warn_once(plan, *outcome.error, logger)
    return new


async def _outcome(plan: _Plan, old: dict | None, inventory: Inventory) -> Outcome:
    """Plan in the planner pool, with a ConfigMap model's config.json and the current Deployment read (here, in
    a thread) beforehand."""
    spec: Mapping[str, Any] = plan.spec
    loop = asyncio.get_running_loop()
    if (spec.get("model") or {}).get("configMapRef"):
        try:
            spec = await loop.run_in_executor(API_EXECUTOR, with_config_map, spec, _config_map_reader(plan.namespace))
        except PlanError as exc:  # no such ConfigMap or key, or not JSON: a problem of the spec
            return Outcome(None, (error_reason(exc.problems), str(exc)))
    body = await _current_deployment(plan)
    return await PLANNER.plan(spec, inventory, SETTINGS.verify, old, plan.name, plan.namespace, body)


async def _current_deployment(plan: _Plan) -> dict | None:
    """The body of spec.observe.current.deployment (None when the spec names none, it does not exist or it
    cannot be read now: the change then says so)."""
    name = current_deployment_name(plan.spec)
    if name is None:
        return None
    try:
        return await asyncio.get_running_loop().run_in_executor(API_EXECUTOR, _deployment_reader(plan.namespace),
                                                                name)
    except CurrentError:
        return None


async def _warn_once(plan: _Plan, reason: str, message: str, logger: logging.Logger) -> None:
    """A Warning event for a new problem of the plan, named after (plan, generation, reason): posted again (an
    operator killed between posting it and writing the status that says so, two replicas during a peering
    handover), it is the same event, refused as existing, not a duplicate."""
    digest = hashlib.sha256(f"{plan.uid}/{plan.generation}/{reason}".encode()).hexdigest()[:16]
    now = datetime.datetime.now(datetime.UTC).isoformat()
    event = {
        "metadata": {"name": f"{plan.name[:200]}.{digest}", "namespace": plan.namespace},
        "involvedObject": {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceCapacityPlan", "name": plan.name,
                           "namespace": plan.namespace, "uid": plan.uid},
        "type": "Warning", "reason": reason, "message": message[:1024], "count": 1,
        "firstTimestamp": now, "lastTimestamp": now,
        "source": {"component": "inferplan"}, "reportingComponent": "inferplan",
        "reportingInstance": socket.gethostname()[:128],
    }
    try:
        await _with_retries(f"posting the {reason} event of {plan.namespace}/{plan.name}", functools.partial(
            _request, "POST", f"/api/v1/namespaces/{_quote(plan.namespace)}/events", event), logger, (1, 2, 4))
    except kubernetes.client.ApiException as exc:
        if exc.status != 409:  # 409: posted before
            # An event is a courtesy: the status says the same, and planning goes on.
            logger.warning("cannot post the %s event of %s/%s: %s %s", reason, plan.namespace, plan.name,
                           exc.status, exc.reason)


# ----------------------------------------------------------------------------------------------------------
# The checker


class Checker:
    """One loop for all plans: looks at plans that had an event at once, and at every plan every
    INFERPLAN_CHECK_SECONDS (inventory, resync, observation); runs what is due as one task per plan."""

    def __init__(self, priority: int) -> None:
        self.priority = priority
        self.logger = logging.getLogger("inferplan.checker")
        self._touched: set[str] = set()
        self._wake = asyncio.Event()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._loop_task: asyncio.Task[None] | None = None
        self._active = not SETTINGS.peering  # with peering: not before the peering object says so
        self._stale_before = -math.inf  # plans last seen before this replica paused: stale until kopf relists
        self._peering_checked = -math.inf

    def start(self) -> None:
        self._loop_task = asyncio.get_running_loop().create_task(self._run(), name="inferplan checker")

    async def stop(self) -> None:
        tasks = [t for t in (self._loop_task, *self._tasks.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def running(self) -> bool:
        return self._loop_task is not None and not self._loop_task.done()

    def touch(self, uid: str) -> None:
        """The plan had an event: look at it now."""
        self._touched.add(uid)
        self._wake.set()

    async def _run(self) -> None:
        last_scan, last_inventory = -math.inf, None
        last_error, last_logged = "", -math.inf
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=SETTINGS.check_seconds)
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                if not await self._works():
                    continue
                now, inventory = time.monotonic(), _inventory()
                if now - last_scan >= SETTINGS.check_seconds or inventory is not last_inventory:
                    uids, last_scan, last_inventory = list(_state.plans), now, inventory
                    self._touched.clear()
                else:
                    uids, self._touched = list(self._touched), set()
                for uid in uids:
                    self._check(uid, inventory, now)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the loop must go on: logged (once a minute while it repeats), retried
                if repr(exc) != last_error or time.monotonic() - last_logged >= 60:
                    self.logger.exception("checking the plans failed")
                    last_error, last_logged = repr(exc), time.monotonic()

    def _check(self, uid: str, inventory: Inventory, now: float) -> None:
        plan = _state.plans.get(uid)
        if plan is None or uid in self._tasks or _state.retry_at.get(uid, 0.0) > now:
            return
        if plan.seen_at <= self._stale_before:
            return  # last seen before this replica paused; kopf lists every plan again when it resumes
        relevant = _relevant_inventory(plan.spec, inventory)
        status = plan.status or {}
        behind = status.get("observedGeneration") != plan.generation or status.get("inventory", []) != relevant
        answered = _already_answered(uid, plan.generation, relevant)
        # Our write comes back as an event later: while its event is on the way the status is behind but answered.
        lost = behind and answered and now - _state.answered[uid].at >= ANSWER_GRACE_S
        due = now - _state.last_planned.setdefault(uid, now) >= SETTINGS.resync_seconds
        observe = bool(plan.spec.get("observe")) and (
            now - _state.last_observed.get(uid, -math.inf) >= SETTINGS.observe_seconds)
        replan = (behind and (not answered or lost)) or due
        if replan or observe:
            task = asyncio.get_running_loop().create_task(self._work(plan, replan, observe),
                                                          name=f"reconcile {plan.namespace}/{plan.name}")
            self._tasks[uid] = task

    async def _work(self, plan: _Plan, replan: bool, observe: bool) -> None:
        try:
            await _reconcile(plan, replan, observe, self.logger)
        except kopf.TemporaryError as exc:
            self.logger.warning("%s/%s: %s", plan.namespace, plan.name, exc)
            _state.retry_at[plan.uid] = time.monotonic() + float(exc.delay or 15)
        except asyncio.CancelledError:
            raise
        except Exception:
            metrics.RECONCILE_ERRORS.labels("Unexpected").inc()
            self.logger.exception("reconciling %s/%s failed", plan.namespace, plan.name)
            _state.retry_at[plan.uid] = time.monotonic() + 15.0
        finally:
            self._tasks.pop(plan.uid, None)
            latest = _state.plans.get(plan.uid)
            if latest is not None and latest is not plan:
                self.touch(plan.uid)  # it changed while this reconcile ran: look again now

    async def _works(self) -> bool:
        """Whether this replica works: always when standalone; with peering, when kopf's rule makes it the
        highest-priority live replica in every peering object it announces itself in (as kopf decides whether
        to pause its watches). Asked of the API at most once a second; kept as it was when that fails."""
        if not SETTINGS.peering:
            return True
        now = time.monotonic()
        if now - self._peering_checked < 1.0:
            return self._active
        self._peering_checked = now
        try:
            statuses = await asyncio.get_running_loop().run_in_executor(API_EXECUTOR, _peering_statuses)
        except Exception:
            return self._active
        active = all(status is not None and _leads(status, self.priority) for _, status in statuses)
        if active != self._active:
            self._active = active
            if active:
                self.logger.info("peering %s: this replica (%s) works now", SETTINGS.peering, IDENTITY)
            else:
                # What this replica knows may go stale while another one works: trust only what kopf delivers
                # after it resumes (it lists every plan again then).
                self._stale_before = now
                self.logger.info("peering %s: another replica works; this one (%s) waits", SETTINGS.peering,
                                 IDENTITY)
        return active


def _leads(peers: Mapping[str, Any], priority: int) -> bool:
    """kopf's peering rule from a peering object's status ({identity: {priority, lifetime, lastseen}}): this
    replica has announced itself, and no other live replica has the same or a higher priority."""
    if IDENTITY not in peers:
        return False
    now = datetime.datetime.now(datetime.UTC)
    for identity, info in peers.items():
        if identity == IDENTITY or not isinstance(info, Mapping):
            continue
        try:
            lastseen = datetime.datetime.fromisoformat(str(info["lastseen"]))
            if lastseen.tzinfo is None:
                lastseen = lastseen.replace(tzinfo=datetime.UTC)
            alive = lastseen + datetime.timedelta(seconds=int(info.get("lifetime", 60))) > now
            if alive and int(info.get("priority", 0)) >= priority:
                return False
        except (KeyError, TypeError, ValueError):
            continue
    return True


CHECKER = Checker(0)  # replaced at startup
