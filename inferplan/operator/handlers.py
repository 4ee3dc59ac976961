"""kopf handlers: thin. Nodes feed a small index of GPUs; plans are planned off the event loop by
`reconcile.reconcile_plan`, and their status is built by the pure `status.next_status` and written only
when its content changed (no timestamp churn, clean GitOps diffs).

When a plan is re-planned: on create, resume and every spec change; when the GPU inventory of the types it
can use changes (checked every INFERPLAN_CHECK_SECONDS); and at least every INFERPLAN_RESYNC_SECONDS.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import logging
import math
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kopf
import kubernetes

from inferplan import __version__
from inferplan.observe.prometheus import EndpointsFile
from inferplan.operator import GROUP, PLURAL, VERSION, metrics
from inferplan.operator.inventory import Inventory, build_inventory, node_gpus
from inferplan.operator.observing import CurrentError, DeploymentReader, observe_plan, observe_status
from inferplan.operator.reconcile import ConfigMapReader, Outcome, reconcile_plan
from inferplan.operator.settings import load_settings
from inferplan.operator.status import next_status, status_patch
from inferplan.planner.gpus import resolve_gpu
from inferplan.planner.names import CatalogLookupError

SETTINGS = load_settings()
EXECUTOR = ThreadPoolExecutor(max_workers=SETTINGS.planner_threads, thread_name_prefix="planner")
# Prometheus queries wait on the network: their own pool, so a slow Prometheus never holds up planning.
OBSERVE_EXECUTOR = ThreadPoolExecutor(max_workers=SETTINGS.observe_threads, thread_name_prefix="observe")
ENDPOINTS = EndpointsFile(SETTINGS.prometheus_config)
_last_planned: dict[str, float] = {}  # plan uid -> monotonic time of its last plan (resync bookkeeping)
_last_observed: dict[str, float] = {}  # plan uid -> monotonic time of its last observation
_planned_inputs: dict[str, tuple[float, ...]] = {}  # plan uid -> what observation fed its last plan
_conditions: dict[str, dict[str, str]] = {}  # plan uid -> {condition type: status}, for inferplan_plans
_locks: dict[str, asyncio.Lock] = {}  # plan uid -> one reconcile at a time


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, logger: logging.Logger, **_: Any) -> None:
    # Silent watch stalls are kopf's best-known failure: let the server end watches, the client notice.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    settings.posting.level = logging.WARNING  # events only for problems
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="inferplan.io")
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="inferplan.io")
    logging.getLogger().setLevel(SETTINGS.log_level)
    if SETTINGS.metrics_port:
        from prometheus_client import start_http_server

        start_http_server(SETTINGS.metrics_port, registry=metrics.REGISTRY)
    logger.info("inferplan operator %s: namespaces=%s resync=%ss check=%ss metrics=:%s", __version__,
                ",".join(SETTINGS.namespaces) or "all", SETTINGS.resync_seconds, SETTINGS.check_seconds,
                SETTINGS.metrics_port or "off")


@kopf.index("", "v1", "nodes")
def gpu_nodes(name: str, labels: dict, spec: dict, status: dict, **_: Any) -> dict | None:
    """One small value per GPU node (never the whole object)."""
    info = node_gpus(name, labels, status.get("allocatable") or {}, bool(spec.get("unschedulable")),
                     status.get("conditions") or [])
    return {name: info} if info is not None else None


def _inventory(index: kopf.Index) -> Inventory:
    return build_inventory(value for store in index.values() for value in store)


def _relevant_inventory(spec: dict, inventory: Inventory) -> list[dict]:
    """The inventory entries of the GPU types a plan can use, as its status records them."""
    wanted = (spec.get("constraints") or {}).get("gpuTypes")
    entries = [e.model_dump(by_alias=True) for e in inventory.entries]
    if not wanted:
        return entries
    keys = set()
    for name in wanted:
        try:
            keys.add(resolve_gpu(name).key)
        except CatalogLookupError:
            continue
    return [e for e in entries if e["gpuType"] in keys]


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _config_map_reader(namespace: str) -> ConfigMapReader:
    def read(name: str, key: str) -> str:
        api = kubernetes.client.CoreV1Api()
        try:
            data = api.read_namespaced_config_map(name, namespace).data or {}
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                raise KeyError(f"ConfigMap {namespace}/{name} not found") from None
            raise kopf.TemporaryError(f"reading ConfigMap {namespace}/{name}: {exc.reason}", delay=30) from exc
        return data[key]

    return read


def _deployment_reader(namespace: str) -> DeploymentReader:
    def read(name: str) -> dict | None:
        api = kubernetes.client.AppsV1Api()
        try:
            deployment = api.read_namespaced_deployment(name, namespace)
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise CurrentError(f"cannot read Deployment {namespace}/{name}: {exc.reason}") from None
        return kubernetes.client.ApiClient().sanitize_for_serialization(deployment)

    return read


def _planning_inputs(spec: dict, status: dict | None) -> tuple[float, ...]:
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


async def _observe(spec_now: dict, old: dict | None, namespace: str, generation: int,
                   logger: logging.Logger) -> dict:
    """The status after querying Prometheus for the plan (off the loop, in the observe pool)."""
    loop = asyncio.get_running_loop()
    observe = spec_now.get("observe") or {}
    try:
        outcome = await loop.run_in_executor(OBSERVE_EXECUTOR, observe_plan, spec_now, ENDPOINTS.get(),
                                             _deployment_reader(namespace), old, _config_map_reader(namespace))
    except Exception:  # never let one plan take the operator down; the status keeps what it had
        metrics.RECONCILE_ERRORS.labels("Unexpected").inc()
        logger.exception("observing failed")
        return dict(old or {})
    try:
        max_error = float(observe.get("maxErrorRatio", "0.25"))
    except ValueError:
        max_error = 0.25
    return observe_status(old, outcome, now=_now(), generation=generation, max_error_ratio=max_error,
                          drift_seconds=float(observe.get("driftSeconds", 900)),
                          calibrate=bool(observe.get("calibrate")))


async def _reconcile(body: kopf.Body, spec: dict, status: dict, meta: dict, namespace: str, name: str,
                     patch: kopf.Patch, index: kopf.Index, logger: logging.Logger, *, replan: bool = True,
                     observe: bool = False) -> None:
    # Timers get live views of the object that change while we await: take what this reconcile is about
    # now, and serialise reconciles of one plan so that a slow old one cannot overwrite a newer answer.
    generation = int(meta.get("generation") or 0)
    spec_now, old = copy.deepcopy(dict(spec)), copy.deepcopy(dict(status)) if status else None
    uid = meta["uid"]
    async with _locks.setdefault(uid, asyncio.Lock()):
        started = time.perf_counter()
        current = old
        if observe and spec_now.get("observe"):
            current = await _observe(spec_now, old, namespace, generation, logger)
            _last_observed[uid] = time.monotonic()
        inputs = _planning_inputs(spec_now, current)
        replan = replan or (bool(inputs) and _moved(_planned_inputs.get(uid), inputs))
        if replan:
            new = await _plan(body, spec_now, current, generation, index, logger)
            _planned_inputs[uid] = inputs
            _last_planned[uid] = time.monotonic()
        else:
            new = dict(current or {})
        if int(meta.get("generation") or 0) != generation:
            return  # the spec changed meanwhile: the reconcile of the new generation writes
        for key, value in status_patch(old, new).items():  # nothing when nothing changed: no GitOps churn
            patch.status[key] = value
        metrics.record_plan(namespace, name, new)
        _conditions[uid] = {c["type"]: c["status"] for c in new.get("conditions", [])}
        metrics.record_conditions(Counter((t, s) for conds in _conditions.values() for t, s in conds.items()))
        metrics.RECONCILE_DURATION.observe(time.perf_counter() - started)


async def _plan(body: kopf.Body, spec_now: dict, old: dict | None, generation: int, index: kopf.Index,
                logger: logging.Logger) -> dict:
    """The status after planning `spec_now` against the cluster's inventory (off the loop)."""
    inventory = _inventory(index)
    metrics.record_inventory(inventory.available())
    loop = asyncio.get_running_loop()
    namespace = body.get("metadata", {}).get("namespace", "")
    try:
        outcome: Outcome = await loop.run_in_executor(
            EXECUTOR, reconcile_plan, spec_now, inventory, _config_map_reader(namespace), SETTINGS.verify, old)
    except kopf.TemporaryError:
        raise
    except Exception as exc:  # never let one plan take the operator down
        metrics.RECONCILE_ERRORS.labels("Unexpected").inc()
        logger.exception("planning failed")
        outcome = Outcome(None, ("PlanningFailed", f"unexpected error while planning: {exc}"))
    ttft_slo = ((spec_now.get("slo") or {}).get("ttft") or {}).get("percentile", "p95")
    new = next_status(old, generation=generation, now=_now(), planner_version=__version__,
                      inventory=inventory, result=outcome.result, error=outcome.error, ttft_percentile=ttft_slo)
    if outcome.warnings:
        new["warnings"] = list(dict.fromkeys([*outcome.warnings, *new.get("warnings", [])]))
    new["inventory"] = _relevant_inventory(spec_now, inventory)
    if outcome.error:
        if outcome.error[0] != "PlanningFailed":  # already counted as Unexpected
            metrics.RECONCILE_ERRORS.labels(outcome.error[0]).inc()
        previous = {c["type"]: c for c in (old or {}).get("conditions", [])}.get("Ready", {})
        if previous.get("reason") != outcome.error[0]:  # one event per new problem, not per reconcile
            kopf.warn(body, reason=outcome.error[0], message=outcome.error[1][:1024])
    return new


# An unexpected exception is retried with backoff a bounded number of times, never every 60 s forever;
# bad specs do not raise at all (they become Ready=False), and API errors on patching are retried by kopf.
_RETRY = {"timeout": 300, "retries": 10, "backoff": 15}


@kopf.on.resume(GROUP, VERSION, PLURAL, **_RETRY)
@kopf.on.create(GROUP, VERSION, PLURAL, **_RETRY)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec", **_RETRY)
async def plan_changed(body: kopf.Body, spec: dict, status: dict, meta: dict, namespace: str, name: str,
                       patch: kopf.Patch, gpu_nodes: kopf.Index, logger: logging.Logger, **_: Any) -> None:
    await _reconcile(body, spec, status, meta, namespace, name, patch, gpu_nodes, logger)


@kopf.timer(GROUP, VERSION, PLURAL, interval=SETTINGS.check_seconds, initial_delay=SETTINGS.check_seconds,
            backoff=15)
async def plan_check(body: kopf.Body, spec: dict, status: dict, meta: dict, namespace: str, name: str,
                     patch: kopf.Patch, gpu_nodes: kopf.Index, logger: logging.Logger, **_: Any) -> None:
    """Re-plan when the spec is newer than the status, the usable inventory changed, or resync is due; observe
    (spec.observe) every INFERPLAN_OBSERVE_SECONDS, re-planning when what the observation feeds planning moved."""
    stale = (status or {}).get("observedGeneration") != meta.get("generation")
    moved = (status or {}).get("inventory", []) != _relevant_inventory(spec, _inventory(gpu_nodes))
    due = time.monotonic() - _last_planned.get(meta["uid"], 0.0) >= SETTINGS.resync_seconds
    observe = bool(spec.get("observe")) and (
        time.monotonic() - _last_observed.get(meta["uid"], -math.inf) >= SETTINGS.observe_seconds)
    if stale or moved or due or observe:
        await _reconcile(body, spec, status, meta, namespace, name, patch, gpu_nodes, logger,
                         replan=stale or moved or due, observe=observe)


@kopf.on.delete(GROUP, VERSION, PLURAL, optional=True)
def plan_deleted(meta: dict, namespace: str, name: str, **_: Any) -> None:
    """Drop the plan's metric series (optional: no finalizer blocks deletion)."""
    metrics.forget_plan(namespace, name)
    for registry in (_last_planned, _last_observed, _planned_inputs, _conditions, _locks):
        registry.pop(meta["uid"], None)
