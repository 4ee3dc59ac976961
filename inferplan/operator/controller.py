"""The controller: keeps every plan answered. kopf's handlers (`handlers.py`) only feed it.

Each plan's events feed a registry (`Registry.plans`: its generation, spec and status as last seen); the node
index feeds the inventory. One loop, the checker, decides which plans need work (the pure rules of
`scheduling.py`) and runs their reconciles as tasks, one at a time per plan: plan (`reconcile.reconcile_plan`,
in the planner pool), build the status (the pure `status.next_status`) and write it, only when its content
changed (no timestamp churn, clean GitOps diffs).

When a plan is planned: when its generation has no answer yet (create, spec change); when first seen by this
process (start, restart, taking over from a peer) unless its status already answers its generation, GPU
inventory and planner version; when the GPU inventory of the types it can use changes so that the answer may
not hold (a type comes or goes, or a count leaves the range the status records: `scheduling.inventory_holds`;
checked every INFERPLAN_CHECK_SECONDS); and at least every INFERPLAN_RESYNC_SECONDS. A plan with spec.observe
is observed every INFERPLAN_OBSERVE_SECONDS. A plan whose status's warnings about the nodes no longer describe them
(a node of its types cordoned or back while the count stays within the range) has only those rewritten.

Why this shape (bench/bench_operator_load.py, docs/operator.md "Scale"): a kopf timer per plan costs ~70 KiB
of memory and a handler call every few seconds per plan, and makes kopf put its finalizer on every plan (a
plan could not be deleted while the operator is down); kopf's changing handlers write two annotations and
deep-copy the body on every patch. Here a plan costs its registry entry, and a check of an unchanged plan a
few microseconds.

With peering (INFERPLAN_PEERING), kopf pauses the watches of every replica but the highest-priority one; the
checker applies the same rule (`scheduling.leads`) to the same peering object, so that only that replica works.
A plan the replica last saw before it began to work (kopf, resuming, lists the plans again, but not all at once)
is read from the API server before any work on it (`_refresh`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import json
import logging
import math
import random
import socket
import sys
import time
import weakref
import zlib
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from inferplan.observe.prometheus import EndpointsFile, PrometheusEndpoint
from inferplan.operator import kube, metrics
from inferplan.operator.cluster_spec import error_reason, with_config_map
from inferplan.operator.inventory import Inventory, NodeGpus, build_inventory
from inferplan.operator.observing import (
    CurrentError,
    assess,
    measure,
    observe_status,
    only_sample_time_moved,
    utc_now,
)
from inferplan.operator.pool import PlannerPool
from inferplan.operator.reconcile import Outcome, current_deployment_name, with_current_change
from inferplan.operator.retry import RetryLater
from inferplan.operator.scheduling import (
    Answer,
    leads,
    moved,
    planning_inputs,
    relevant_inventory,
    unanswered,
    usable_gpu_types,
    work_due,
)
from inferplan.operator.settings import OperatorSettings
from inferplan.operator.status import (
    next_status,
    only_ranges_moved,
    ranges_text,
    status_patch,
    with_inventory_warnings,
)
from inferplan.planner.spec_parsing import PlanError
from inferplan.version import planner_version

ANSWER_GRACE_S = 120.0
"""Our status write comes back as a watch event a moment later, and under load seconds later. Only when the
status has not shown an answer for this long is the write taken for lost, and the plan planned again."""


_CHECKED = ("observedGeneration", "plannerVersion", "inventory", "warnings")
CHECKED_CONSTRAINTS = ("gpuTypes", "availableGpus")
"""The constraints the checks read (`scheduling.usable_gpu_types`: the GPU types a plan may use, which its own
availableGpus names where it names no gpuTypes). Kept parsed with the plan: without availableGpus the checks took
every type of the cluster for such a plan, its status (which records the types it lists) never held, and it was
planned again at every check."""


def planning_slots(settings: OperatorSettings) -> int:
    """How many reconciles that only plan run at once (the others wait before unpacking their plan): enough that
    the planners and the status writes (the operator's API threads) always have work queued. Each holds its plan's
    spec and status parsed (about 7 KiB for a new plan, 74 KiB with a status of 18 KB: bench_operator_load's plans),
    which a reconcile waiting for a planner held too: about 70 MiB at 10,000 new plans, 700 MiB at 10,000 answered
    ones planned again at once."""
    return 4 * (settings.planner_processes or settings.planner_threads) + 8


def _pack(value: Mapping[str, Any]) -> bytes:
    return zlib.compress(json.dumps(value, separators=(",", ":")).encode())


class _SharedEntry(dict):  # type: ignore[type-arg]
    """An inventory entry of a status as the checks keep it: one object for every plan whose status records the same
    (a dict subclass only so that the table below can hold it weakly)."""

    __slots__ = ("__weakref__",)


# Inventory entries by their content. Every plan's status records the entries of the GPU types it may use, mostly
# the same few on one cluster, and each event of a plan brings them parsed afresh (about 0.8 KiB an entry): kept
# per plan they were 5-7 KiB of each plan's memory, 50-70 MiB at 10,000 plans. Weak: an entry no status records
# any more goes. Content-addressed and never mutated (the checks only read), so it holds no state of a run.
_ENTRIES: weakref.WeakValueDictionary[str, _SharedEntry] = weakref.WeakValueDictionary()


def _shared_entry(entry: Any) -> Any:
    if not isinstance(entry, Mapping):
        return entry
    key = json.dumps(entry, sort_keys=True, separators=(",", ":"), default=str)
    shared = _ENTRIES.get(key)
    if shared is None:
        shared = _ENTRIES[key] = _SharedEntry(entry)
    return shared


def _checked_ready(conditions: Any) -> list[dict[str, str]]:
    """The status's Ready condition as the checks read it (type, status and reason: `scheduling.unanswered`), its
    message and times left in the packed status."""
    return [{key: sys.intern(c[key]) for key in ("type", "status", "reason") if isinstance(c.get(key), str)}
            for c in conditions or () if isinstance(c, Mapping) and c.get("type") == "Ready"]


class Plan:
    """A plan as its last event showed it (the status: or as this process wrote it since).

    Its spec and status are kept packed (zlib-compressed JSON: about 2 KiB for a status whose parsed dicts take
    about 27 KiB, and 0.5 KiB for a 4 KiB spec; parsed, they were most of the operator's memory at 10,000 plans)
    and unpacked for a reconcile. What the checker reads of them every few seconds stays parsed: `checked`, the
    status's generation, planner version, inventory ranges, warnings and Ready condition (`scheduling.unanswered`,
    `work_due`), and `checked_spec`, the spec's constraints.gpuTypes and availableGpus, model.configMapRef and
    observe."""

    __slots__ = ("_packed", "_packed_spec", "checked", "checked_spec", "generation", "name", "namespace", "seen_at",
                 "uid")

    def __init__(self, uid: str, namespace: str, name: str, generation: int, spec: Mapping[str, Any],
                 status: Mapping[str, Any] | None, seen_at: float) -> None:
        self.uid, self.namespace, self.name, self.generation = uid, namespace, name, generation
        self.spec = spec
        self.seen_at = seen_at  # time.monotonic() of the last event
        self.status = status

    @property
    def spec(self) -> dict[str, Any]:
        return json.loads(zlib.decompress(self._packed_spec))

    @spec.setter
    def spec(self, value: Mapping[str, Any]) -> None:
        value = dict(value)  # kopf's view of the body (a Mapping) holds plain JSON values
        self._packed_spec = _pack(value)
        model, constraints = value.get("model") or {}, value.get("constraints") or {}
        self.checked_spec: dict[str, Any] = {
            "model": {k: v for k, v in model.items() if k == "configMapRef"},
            "constraints": {k: v for k, v in constraints.items() if k in CHECKED_CONSTRAINTS},
            **({"observe": value["observe"]} if value.get("observe") else {})}

    @property
    def status(self) -> dict[str, Any] | None:
        return None if self._packed is None else json.loads(zlib.decompress(self._packed))

    @status.setter
    def status(self, value: Mapping[str, Any] | None) -> None:
        value = dict(value or {})
        self._packed = _pack(value) if value else None
        checked = {key: value[key] for key in _CHECKED if key in value}
        if isinstance(checked.get("inventory"), list):
            checked["inventory"] = [_shared_entry(entry) for entry in checked["inventory"]]
        if isinstance(checked.get("warnings"), list):  # mostly the same few texts in every plan's status: shared
            checked["warnings"] = [sys.intern(w) if isinstance(w, str) else w for w in checked["warnings"]]
        self.checked: dict[str, Any] | None = None if not value else {
            **checked, "conditions": _checked_ready(value.get("conditions"))}


@dataclass
class Registry:
    """What this process knows about each plan, by uid."""

    plans: dict[str, Plan] = field(default_factory=dict)
    answered: dict[str, Answer] = field(default_factory=dict)  # its last plan, written
    last_planned: dict[str, float] = field(default_factory=dict)  # monotonic time (resync bookkeeping)
    last_observed: dict[str, float] = field(default_factory=dict)  # monotonic time of its observation
    planned_inputs: dict[str, tuple[float, ...]] = field(default_factory=dict)  # what observing fed its plan
    retry_at: dict[str, float] = field(default_factory=dict)  # not before (after a passing failure)
    conditions: dict[str, dict[str, str]] = field(default_factory=dict)  # {type: status}
    condition_counts: Counter[tuple[str, str]] = field(default_factory=Counter)  # their sum, inferplan_plans
    recorded: set[str] = field(default_factory=set)  # uids whose metrics are exported


class InventoryCache:
    """The inventory, rebuilt only when the nodes changed (every check of every plan asks for it), its entries as
    the status records them, and its warnings as the status of a plan of some GPU types records them."""

    def __init__(self) -> None:
        self.nodes: frozenset[NodeGpus] | None = None
        self.version: Hashable | None = None  # the node index's version `nodes` was read at (`get`)
        self.inventory = build_inventory(())
        self.entries: list[dict[str, Any]] = []
        self._warnings: dict[frozenset[str] | None, list[str]] = {}

    def get(self, read_nodes: Callable[[], Iterable[NodeGpus]], version: Hashable | None = None) -> Inventory:
        """The inventory of the nodes `read_nodes` gives now; read again only where `version` (of the node index
        they come from: None, unknown) is not the one they were last read at. Every plan's event and every wake of
        the checker asks for it: reading thousands of nodes each time was milliseconds a call (docs/operator.md,
        "Scale")."""
        if version is not None and version == self.version:
            return self.inventory
        nodes = frozenset(read_nodes())
        self.version = version
        if nodes != self.nodes:
            self.inventory = build_inventory(nodes)
            self.entries = [entry.model_dump(by_alias=True) for entry in self.inventory.entries]
            self._warnings = {}
            self.nodes = nodes
            metrics.record_inventory(self.inventory.available())
        return self.inventory

    def warnings(self, spec: Mapping[str, Any], inventory: Inventory) -> list[str]:
        """The inventory's warnings for the GPU types the plan can use (`Inventory.usable`), as its status has them
        (`next_status`, `with_inventory_warnings`)."""
        types = usable_gpu_types(spec)
        if inventory is not self.inventory:
            return inventory.usable(types).warnings()
        if types not in self._warnings:
            self._warnings[types] = self.inventory.usable(types).warnings()
        return self._warnings[types]

    def relevant(self, spec: Mapping[str, Any], inventory: Inventory) -> list[dict[str, Any]]:
        """The entries of the GPU types the plan can use, as its status records them (shared dicts)."""
        if inventory is self.inventory:
            return relevant_inventory(spec, self.entries)
        return relevant_inventory(spec, [entry.model_dump(by_alias=True) for entry in inventory.entries])


class Controller:
    """Keeps every plan answered: the registry, the inventory and the checker loop. Everything it needs is
    passed in; nothing is kept in module state, so an operator run again (or a test) starts afresh."""

    def __init__(self, settings: OperatorSettings, *, pool: PlannerPool, api: Executor, observe: Executor,
                 endpoints: EndpointsFile, identity: str, priority: int,
                 nodes: Callable[[], Iterable[NodeGpus]] = tuple, node_count: Callable[[], int] | None = None) -> None:
        self.settings, self.pool, self.api, self.observe_pool = settings, pool, api, observe
        self.endpoints, self.identity, self.priority = endpoints, identity, priority
        self.nodes = nodes  # the GPU nodes as kopf's index has them now
        # How many nodes the index holds (None: no index; `nodes` is read at every look), and its node events so far
        # (`nodes_changed`): together, the index's version (`inventory`).
        self.node_count = node_count
        self._node_events = 0
        self.registry = Registry()
        self.inventories = InventoryCache()
        self.logger = logging.getLogger("inferplan.checker")
        self._endpoints_error: str | None = None  # the endpoints file's error last logged
        self._touched: set[str] = set()
        self._wake = asyncio.Event()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._planning = asyncio.Semaphore(planning_slots(settings))
        self._loop_task: asyncio.Task[None] | None = None
        self._active = not settings.peering  # with peering: not before the peering object says so
        metrics.VIEW.working = self._active  # what this replica saw of the plans is exported while it works only
        # When this replica last began to work (peering): what it saw of a plan before may be older than what a
        # peer wrote meanwhile, and kopf, resuming, may not have listed that plan again yet.
        self._active_since = -math.inf
        self._peering_checked = -math.inf

    # -- lifecycle -----------------------------------------------------------------------------------------

    def start(self) -> None:
        self._loop_task = asyncio.get_running_loop().create_task(self._run(), name="inferplan checker")

    async def stop(self) -> None:
        tasks = [t for t in (self._loop_task, *self._tasks.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def running(self) -> bool:
        return self._loop_task is not None and not self._loop_task.done()

    # -- what kopf tells ---------------------------------------------------------------------------------

    def nodes_changed(self) -> None:
        """A node had an event, which kopf has applied to its index of the GPU nodes (`handlers.node_event`)."""
        self._node_events += 1

    def inventory(self) -> Inventory:
        """The GPU inventory of the nodes as the index has them now. The index is read again only after a node
        event or where its count of nodes changed: a node added or deleted changes the count as kopf indexes it,
        before the node's event reaches `nodes_changed` (a plan's event may come between the two)."""
        version = None if self.node_count is None else (self._node_events, self.node_count())
        return self.inventories.get(self.nodes, version)

    def seen(self, uid: str, namespace: str, name: str, generation: int, spec: Mapping[str, Any],
             status: Mapping[str, Any] | None) -> None:
        """A plan as an event shows it (the initial listing too): remember it, and look at it. A plan seen for
        the first time whose status already answers it is not planned again."""
        now = time.monotonic()
        plan = Plan(uid, namespace, name, generation, spec, status, now)
        registry = self.registry
        previous = registry.plans.get(uid)
        # A plan last seen before this replica began to work is looked at as if seen for the first time: a peer
        # may have answered it meanwhile.
        first = previous is None or previous.seen_at < self._active_since
        registry.plans[uid] = plan
        if first and uid not in registry.answered:
            relevant = self.inventories.relevant(plan.checked_spec, self.inventory())
            why = unanswered(plan.checked_spec, plan.checked, generation, relevant, planner_version())
            if why is not None:
                if previous is None:
                    self.logger.info("%s/%s: to plan: %s", namespace, name, why)
                # Due at the next check: the checks (`work_due`) see a status behind its generation or inventory,
                # not one of another planner version, nor a failure or a ConfigMap model, which then waited for the
                # resync.
                registry.last_planned[uid] = -math.inf
            else:
                # The event's own spec and status: the plan's packed copies hold the same, unpacked only to read.
                registry.answered[uid] = Answer(generation, list((plan.checked or {}).get("inventory", [])), now)
                # Their resyncs are spread over the second half of the interval after the start: a restart
                # neither re-plans them at once nor all together one interval later.
                registry.last_planned[uid] = now - random.uniform(0.0, self.settings.resync_seconds / 2)
                registry.planned_inputs[uid] = planning_inputs(spec, status)
                self._record(plan, status or {})
        self.touch(uid)

    def forget(self, uid: str, namespace: str, name: str) -> None:
        """A deleted plan: its metric series and everything this process kept about it go."""
        registry = self.registry
        for kept in (registry.plans, registry.answered, registry.last_planned, registry.last_observed,
                     registry.planned_inputs, registry.retry_at):
            kept.pop(uid, None)
        if uid in registry.recorded:
            registry.recorded.discard(uid)
            metrics.forget_plan(namespace, name)
        self._set_conditions(uid, {})

    def touch(self, uid: str) -> None:
        """The plan had an event: look at it now."""
        self._touched.add(uid)
        self._wake.set()

    # -- the checker loop --------------------------------------------------------------------------------

    async def _run(self) -> None:
        last_scan, last_inventory = -math.inf, None
        last_error, last_logged = "", -math.inf
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self.settings.check_seconds)
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                if not await self._works():
                    continue
                now, inventory = time.monotonic(), self.inventory()
                if now - last_scan >= self.settings.check_seconds or inventory is not last_inventory:
                    uids, last_scan, last_inventory = list(self.registry.plans), now, inventory
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
        registry = self.registry
        plan = registry.plans.get(uid)
        if plan is None or uid in self._tasks or registry.retry_at.get(uid, 0.0) > now:
            return
        work = work_due(generation=plan.generation, status=plan.checked,
                        relevant=self.inventories.relevant(plan.checked_spec, inventory),
                        answer=registry.answered.get(uid), observes=bool(plan.checked_spec.get("observe")), now=now,
                        last_planned=registry.last_planned.setdefault(uid, now),
                        last_observed=registry.last_observed.get(uid, -math.inf),
                        resync_s=self.settings.resync_seconds, observe_s=self.settings.observe_seconds,
                        answer_grace_s=ANSWER_GRACE_S, warnings_hold=self._warnings_hold(plan, inventory))
        if work and plan.seen_at < self._active_since:
            # Seen before this replica began to work: what it holds of the plan may be older than a peer's answer
            # (kopf, resuming, lists every plan again, but not all at once). Read it again before any work.
            self._tasks[uid] = asyncio.get_running_loop().create_task(
                self._refresh(plan), name=f"read {plan.namespace}/{plan.name}")
        elif work:
            self._tasks[uid] = asyncio.get_running_loop().create_task(
                self._work(plan, work.replan, work.observe), name=f"reconcile {plan.namespace}/{plan.name}")

    def _warnings_hold(self, plan: Plan, inventory: Inventory) -> bool:
        """Whether the plan's status (none: nothing to rewrite) says of the nodes what they are now."""
        warnings = (plan.checked or {}).get("warnings")
        if not isinstance(warnings, list):
            return True
        return with_inventory_warnings(warnings, self.inventories.warnings(plan.checked_spec, inventory)) == warnings

    async def _refresh(self, plan: Plan) -> None:
        """Read `plan` from the API server and take it as an event would show it (`seen`); let it go if it is gone
        (deleted, or deleted and created again, while kopf's watch was paused: no event says so)."""
        body: dict | None = None
        gone = False
        try:
            body = await kube.with_retries(f"reading {plan.namespace}/{plan.name}",
                                           functools.partial(kube.read_plan, plan.namespace, plan.name), self.api,
                                           self.logger)
        except kube.ApiException as exc:
            gone = exc.status == 404
            if not gone:
                self.logger.warning("%s/%s: reading it failed: %s %s", plan.namespace, plan.name, exc.status,
                                    exc.reason)
                self.registry.retry_at[plan.uid] = time.monotonic() + 15.0
        except Exception:
            self.logger.exception("reading %s/%s failed", plan.namespace, plan.name)
            self.registry.retry_at[plan.uid] = time.monotonic() + 15.0
        finally:
            self._tasks.pop(plan.uid, None)
        if self.registry.plans.get(plan.uid) is not plan:
            return  # kopf delivered it (or its deletion) meanwhile
        meta = (body or {}).get("metadata") or {}
        if body is not None and meta.get("uid") == plan.uid:
            self.seen(plan.uid, plan.namespace, plan.name, int(meta.get("generation") or plan.generation),
                      body.get("spec") or {}, body.get("status"))
        elif gone or body is not None:  # deleted (another uid: created again, with events of its own)
            self.forget(plan.uid, plan.namespace, plan.name)
            for other in list(self.registry.plans.values()):  # the new one keeps the name's metric series
                if (other.namespace, other.name) == (plan.namespace, plan.name) and other.uid in self.registry.recorded:
                    self._record(other, other.status or {})
        # else unreachable: the next check reads it again

    async def _work(self, plan: Plan, replan: bool, observe: bool) -> None:
        try:
            await self.reconcile(plan, replan, observe)
        except RetryLater as exc:
            self.logger.warning("%s/%s: %s", plan.namespace, plan.name, exc)
            self.registry.retry_at[plan.uid] = time.monotonic() + exc.delay
        except asyncio.CancelledError:
            raise
        except Exception:
            metrics.RECONCILE_ERRORS.labels("Unexpected").inc()
            self.logger.exception("reconciling failed: %s/%s", plan.namespace, plan.name)
            self.registry.retry_at[plan.uid] = time.monotonic() + 15.0
        finally:
            self._tasks.pop(plan.uid, None)
            latest = self.registry.plans.get(plan.uid)
            if latest is not None and latest is not plan:
                self.touch(plan.uid)  # it changed while this reconcile ran: look again now

    async def _works(self) -> bool:
        """Whether this replica works: always when standalone; with peering, when kopf's rule makes it the
        highest-priority live replica in every peering object it announces itself in (as kopf decides whether
        to pause its watches). Asked of the API at most once a second; kept as it was when that fails."""
        peering = self.settings.peering
        if not peering:
            return True
        now = time.monotonic()
        if now - self._peering_checked < 1.0:
            return self._active
        self._peering_checked = now
        try:
            statuses = await asyncio.get_running_loop().run_in_executor(
                self.api, kube.peering_statuses, peering, self.settings.namespaces)
        except Exception:
            return self._active
        at = datetime.datetime.now(datetime.UTC)
        active = all(status is not None and leads(status, self.identity, self.priority, at)
                     for _, status in statuses)
        if active != self._active:
            self._active = metrics.VIEW.working = active
            if active:
                self._active_since = now
                self.logger.info("peering %s: this replica (%s) works now", peering, self.identity)
            else:
                # What this replica knows may go stale while another one works: once it works again, a plan it
                # last saw before then is read again before any work on it (`_check`, `_refresh`).
                self.logger.info("peering %s: another replica works; this one (%s) waits", peering, self.identity)
        return active

    # -- one reconcile -----------------------------------------------------------------------------------

    async def reconcile(self, plan: Plan, replan: bool, observe: bool) -> None:
        """Observe and/or plan `plan` as it is now, and write its status if that changed."""
        started = time.perf_counter()  # its duration counts the wait for a slot, as it counted the planner's queue
        # A reconcile unpacks the plan's spec and status, then waits for a planner: thousands due at once (new plans,
        # an inventory change, an upgrade) held them all. One that only plans takes a slot (`planning_slots`) first.
        async with self._planning if replan and not observe else contextlib.nullcontext():
            await self._reconcile(plan, replan, observe, started)

    async def _reconcile(self, plan: Plan, replan: bool, observe: bool, started: float) -> None:
        registry, logger = self.registry, self.logger
        uid, generation, old = plan.uid, plan.generation, plan.status
        current = old
        if observe and plan.spec.get("observe"):
            current = await self._observe(plan, old)
            registry.last_observed[uid] = time.monotonic()
        inputs = planning_inputs(plan.spec, current)
        replan = replan or (bool(inputs) and moved(registry.planned_inputs.get(uid), inputs))
        if replan:
            new = await self._plan(plan, current)
        else:
            new = dict(current or {})
            if isinstance(new.get("warnings"), list):  # the nodes as they are now (`work_due`: Work.rewarn)
                new["warnings"] = with_inventory_warnings(
                    new["warnings"], self.inventories.warnings(plan.spec, self.inventory()))
            if observe and new.get("recommendation") and current_deployment_name(plan.spec):
                body = await self._current_deployment(plan)
                new = await asyncio.get_running_loop().run_in_executor(self.api, functools.partial(
                    with_current_change, plan.spec, new, name=plan.name, namespace=plan.namespace, body=body,
                    read_config_map=kube.config_map_reader(plan.namespace)))

        def still_wanted() -> bool:  # not when the plan was deleted or its spec changed meanwhile
            latest = registry.plans.get(uid)
            return latest is not None and latest.generation == generation

        if not still_wanted():
            return  # the spec changed meanwhile: the new generation's reconcile writes
        kept = replan and only_ranges_moved(old, new)
        if kept:
            # The same answer for a count outside the range the status records: nothing to tell anyone. The
            # status keeps its ranges (true still, for the counts it names); this process checks with the new.
            logger.info("%s/%s: planned again for the GPU inventory, the same answer: nothing written (holds "
                        "for %s)", plan.namespace, plan.name, ranges_text(new["inventory"]))
        # An observation that found what the last one did changes only status.observed.sampleTime: not written either
        # (a write per observation would be churn for every watcher and GitOps diff of the plan).
        unchanged = only_sample_time_moved(old, new)
        patch = {} if kept or unchanged else status_patch(old, new)
        if patch:  # nothing when nothing changed: no GitOps churn
            try:
                written = await kube.with_retries(
                    f"writing the status of {plan.namespace}/{plan.name}",
                    functools.partial(kube.write_status, plan.namespace, plan.name, patch), self.api, logger,
                    still_wanted=still_wanted)
            except kube.ApiException as exc:
                if exc.status == 404:  # deleted meanwhile; its DELETED event cleans up
                    return
                raise
            if written is None:
                return  # unreachable for too long, or no longer wanted: the next check tries again
            ready = next((c for c in new.get("conditions", []) if c.get("type") == "Ready"), {})
            logger.info("%s/%s: status written for generation %s (Ready=%s %s; holds for %s)", plan.namespace,
                        plan.name, generation, ready.get("status"), ready.get("reason"),
                        ranges_text(new.get("inventory") or []) or "no GPU type")
            if uid not in registry.plans:
                return  # deleted while the write was in flight: `forget` let it go, and nothing of it is kept again
        if replan:
            now = time.monotonic()
            registry.planned_inputs[uid] = inputs
            registry.last_planned[uid] = now
            # Kept until the plan is planned again: the shared entries, as the status's own (`Plan.checked`), not a
            # copy per plan.
            registry.answered[uid] = Answer(generation, [_shared_entry(e) for e in new["inventory"]], now,
                                            written=not kept)
        latest = registry.plans.get(uid)
        if latest is not None and latest.generation == generation and not kept and not unchanged:
            latest.status = new  # what the server has now, before its event comes back
        elif latest is not None and patch:
            # A spec edit seen during the write came with the status from before it: the next generation's patch is
            # made against what the server has now, else it would not name (and clear) what this answer wrote and
            # the next one leaves out, and a refused spec would keep the recommendation of the spec before it.
            latest.status = written.get("status") or latest.status
        if patch or uid not in registry.recorded:
            self._record(plan, new)
        metrics.RECONCILE_DURATION.observe(time.perf_counter() - started)

    def prometheus_endpoints(self) -> dict[str, PrometheusEndpoint]:
        """The endpoints of INFERPLAN_PROMETHEUS_CONFIG as last read good. A file that turned bad while the
        operator runs keeps them in use: logged as a warning once per new error, and once when it is good again."""
        endpoints = self.endpoints.get()
        error = self.endpoints.error
        if error != self._endpoints_error:
            if error:
                self.logger.warning("%s; the endpoints read before stay in use (%s) until the file is fixed", error,
                                    ", ".join(sorted(endpoints)) or "none")
            else:
                self.logger.info("INFERPLAN_PROMETHEUS_CONFIG: %s read again: endpoints %s", self.endpoints.path,
                                 ", ".join(sorted(endpoints)) or "none")
            self._endpoints_error = error
        return endpoints

    async def _observe(self, plan: Plan, old: dict | None) -> dict:
        """The status after querying Prometheus for the plan (off the loop, in the observe pool)."""
        try:
            # Reading waits on Prometheus and the API: in the observe threads. Calibrating and predicting are CPU
            # work: in the planner pool, like planning.
            measured = await asyncio.get_running_loop().run_in_executor(
                self.observe_pool, measure, plan.spec, self.prometheus_endpoints(),
                kube.deployment_reader(plan.namespace), kube.config_map_reader(plan.namespace))
            now = utc_now()  # the observation's time: whether its window reaches back before a change, and its status
            outcome = await self.pool.run(assess, measured, old, now)
        except RetryLater:
            raise
        except Exception:  # never let one plan take the operator down; the status keeps what it had
            metrics.RECONCILE_ERRORS.labels("Unexpected").inc()
            self.logger.exception("observing failed: %s/%s", plan.namespace, plan.name)
            return dict(old or {})
        return observe_status(old, outcome, now=now, generation=plan.generation)

    async def _plan(self, plan: Plan, old: dict | None) -> dict:
        """The status after planning the plan against the cluster's inventory (in the planner pool)."""
        inventory = self.inventory()
        try:
            outcome = await self._outcome(plan, old, inventory)
        except RetryLater:
            raise
        except Exception as exc:  # never let one plan take the operator down
            metrics.RECONCILE_ERRORS.labels("Unexpected").inc()
            self.logger.exception("planning failed: %s/%s", plan.namespace, plan.name)
            why = str(exc) or type(exc).__name__  # KeyError() says nothing by itself
            outcome = Outcome(None, ("PlanningFailed", f"unexpected error while planning: {why}"))
        ttft_slo = ((plan.spec.get("slo") or {}).get("ttft") or {}).get("percentile", "p95")
        new = next_status(old, generation=plan.generation, now=utc_now(), planner_version=planner_version(),
                          inventory=inventory.usable(usable_gpu_types(plan.spec)), result=outcome.result,
                          error=outcome.error, ttft_percentile=ttft_slo, manifests=outcome.manifests,
                          change=outcome.change, extra_warnings=outcome.warnings, bounds=outcome.bounds,
                          observes=bool(plan.spec.get("observe")))
        if outcome.error:
            if outcome.error[0] != "PlanningFailed":  # already counted as Unexpected
                metrics.RECONCILE_ERRORS.labels(outcome.error[0]).inc()
            # One event per new problem, not per reconcile: a new reason, or the same reason with another message
            # (another field at fault after an edit), as the Ready conditions before and after state them.
            previous = {c["type"]: c for c in (old or {}).get("conditions", [])}.get("Ready", {})
            ready = {c["type"]: c for c in new.get("conditions", [])}.get("Ready", {})
            if (previous.get("reason"), previous.get("message")) != (ready.get("reason"), ready.get("message")):
                await self._warn(plan, *outcome.error)
        return new

    async def _outcome(self, plan: Plan, old: dict | None, inventory: Inventory) -> Outcome:
        """Plan in the planner pool, with a ConfigMap model's config.json and the current Deployment read (here,
        in a thread) beforehand."""
        spec: Mapping[str, Any] = plan.spec
        if (spec.get("model") or {}).get("configMapRef"):
            try:
                spec = await asyncio.get_running_loop().run_in_executor(
                    self.api, with_config_map, spec, kube.config_map_reader(plan.namespace))
            except PlanError as exc:  # no such ConfigMap or key, or not JSON: a problem of the spec
                return Outcome(None, (error_reason(exc.problems), str(exc)))
        body = await self._current_deployment(plan)
        return await self.pool.plan(spec, inventory, self.settings.verify, old, plan.name, plan.namespace, body)

    async def _current_deployment(self, plan: Plan) -> dict | None:
        """The body of spec.observe.current.deployment (None when the spec names none, it does not exist or it
        cannot be read now: the change then says so)."""
        name = current_deployment_name(plan.spec)
        if name is None:
            return None
        try:
            return await asyncio.get_running_loop().run_in_executor(self.api, kube.deployment_reader(plan.namespace),
                                                                    name)
        except CurrentError:
            return None

    async def _warn(self, plan: Plan, reason: str, message: str) -> None:
        """A Warning event for a new problem of the plan (kube.warning_event: posted twice, it is one event)."""
        event = kube.warning_event(uid=plan.uid, namespace=plan.namespace, name=plan.name,
                                   generation=plan.generation, reason=reason, message=message,
                                   host=socket.gethostname(), now=datetime.datetime.now(datetime.UTC))
        try:
            await kube.with_retries(f"posting the {reason} event of {plan.namespace}/{plan.name}",
                                    functools.partial(kube.post_event, event), self.api, self.logger, (1, 2, 4))
        except kube.ApiException as exc:
            if exc.status != 409:  # 409: posted before
                # An event is a courtesy: the status says the same, and planning goes on.
                self.logger.warning("cannot post the %s event of %s/%s: %s %s", reason, plan.namespace, plan.name,
                                    exc.status, exc.reason)

    # -- metrics -----------------------------------------------------------------------------------------

    def _record(self, plan: Plan, status: Mapping[str, Any]) -> None:
        """Export the plan's status as metrics, and count its conditions into inferplan_plans."""
        metrics.record_plan(plan.namespace, plan.name, dict(status), plan.spec)
        self.registry.recorded.add(plan.uid)
        self._set_conditions(plan.uid, {c["type"]: c["status"] for c in status.get("conditions", [])})

    def _set_conditions(self, uid: str, conditions: dict[str, str]) -> None:
        # Kept as a running count: recounting every plan on each reconcile is quadratic in the number of plans.
        registry = self.registry
        registry.condition_counts.subtract(registry.conditions.pop(uid, {}).items())
        if conditions:
            registry.conditions[uid] = conditions
            registry.condition_counts.update(conditions.items())
        metrics.record_conditions({key: count for key, count in registry.condition_counts.items() if count > 0})
