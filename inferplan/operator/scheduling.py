"""The operator's rules, as pure functions: when a plan is planned or observed, and which replica works.

Nothing here reads a clock, the API or module state: the controller (`controller.py`) passes in what it knows
and acts on the answer, so each rule is tested on its own (tests/operator/test_scheduling.py).
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from inferplan.planner.catalog.gpus import resolve_gpu
from inferplan.planner.names import CatalogLookupError

REPLAN_TOLERANCE = 0.05
"""An observed input (rate, mean lengths, calibration) that moves by more than this share re-plans."""


@dataclass(frozen=True)
class Answer:
    """What this process last planned for a plan: its generation, the inventory it holds for (the status's
    `inventory`: GPU types and count ranges, `inventory_holds`), when (monotonic seconds), and whether it was
    written: an answer that differed from the status only in its count ranges is not (`status.only_ranges_moved`),
    so the status keeps the ranges it was written with and this process the new ones."""

    generation: int
    inventory: list[dict[str, Any]]
    at: float
    written: bool = True


@dataclass(frozen=True)
class Work:
    """What a plan needs now: planning again, observing, neither or both; or, where it needs neither, only its
    warnings about the nodes rewritten (`status.with_inventory_warnings`)."""

    replan: bool
    observe: bool
    rewarn: bool = False

    def __bool__(self) -> bool:
        return self.replan or self.observe or self.rewarn


@functools.lru_cache(maxsize=4096)
def gpu_keys(names: tuple[str, ...]) -> frozenset[str]:
    """The catalog keys of the GPU names a plan's constraints.gpuTypes lists (unknown names left out)."""
    keys = set()
    for name in names:
        try:
            keys.add(resolve_gpu(name).key)
        except CatalogLookupError:
            continue
    return frozenset(keys)


def usable_gpu_types(spec: Mapping[str, Any]) -> frozenset[str] | None:
    """The catalog keys of the GPU types a plan may use: its constraints.gpuTypes, else the types its own
    availableGpus lists (the only ones it considers then); None when it names none (any type)."""
    constraints = spec.get("constraints") or {}
    available = constraints.get("availableGpus")
    wanted = constraints.get("gpuTypes") or (list(available) if isinstance(available, Mapping) else None)
    if not wanted:
        return None
    return gpu_keys(tuple(str(name) for name in wanted))


def relevant_inventory(spec: Mapping[str, Any], entries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The inventory entries (as the status records them) of the GPU types a plan can use; shared dicts, copy
    before changing one."""
    keys = usable_gpu_types(spec)
    return list(entries) if keys is None else [e for e in entries if e["gpuType"] in keys]


def inventory_holds(ranges: Sequence[Mapping[str, Any]], live: Sequence[Mapping[str, Any]]) -> bool:
    """Whether an answer made for the inventory `ranges` (a status's `inventory`: per GPU type, the counts
    within which the answer holds) still holds for the `live` entries (`relevant_inventory`): the same GPU types,
    each with the same product label, GPUs per node and network between nodes, nodes of the same counts where they
    differ (`nodeSizes`, absent where every node has gpusPerNode: replicas are placed on them), and a count within
    its range."""
    if len(ranges) != len(live):
        return False
    by_type = {r.get("gpuType"): r for r in ranges}
    for entry in live:
        held = by_type.get(entry["gpuType"])
        if (held is None or "minGpus" not in held or held.get("productLabel") != entry["productLabel"]
                or held.get("gpusPerNode") != entry["gpusPerNode"]
                or held.get("networkGbps") != entry.get("networkGbps")
                or held.get("nodeSizes") != entry.get("nodeSizes")):
            return False
        high = held.get("maxGpus")
        if not (held["minGpus"] <= entry["gpus"] and (high is None or entry["gpus"] <= high)):
            return False
    return True


def planning_inputs(spec: Mapping[str, Any], status: Mapping[str, Any] | None) -> tuple[float, ...]:
    """What an observation contributes to planning: the observed workload (workload.source: observed) and
    the calibration (observe.calibrate). A re-plan follows when one of them moves (`moved`)."""
    observed = (status or {}).get("observed") or {}
    calibration = (status or {}).get("calibration") or {}
    inputs: list[float] = []
    if (spec.get("workload") or {}).get("source") == "observed":
        inputs += [float(observed.get(k) or 0.0) for k in ("requestsPerSecond", "promptTokensMean",
                                                            "outputTokensMean")]
    if (spec.get("observe") or {}).get("calibrate"):
        inputs += [float(calibration.get(k) or 1.0) for k in ("decode", "prefill")]
    return tuple(inputs)


def moved(old: tuple[float, ...] | None, new: tuple[float, ...]) -> bool:
    """Whether planning inputs moved by more than REPLAN_TOLERANCE (or were never planned with)."""
    if old is None or len(old) != len(new):
        return True
    return any(abs(a - b) > REPLAN_TOLERANCE * max(abs(a), abs(b), 1e-9) for a, b in zip(old, new, strict=True))


def unanswered(spec: Mapping[str, Any], status: Mapping[str, Any] | None, generation: int,
               relevant: list[dict[str, Any]], planner_version: str) -> str | None:
    """Why `status` does not answer the plan as it is, or None when it does: it was made for this generation,
    this inventory and this planner version, with an outcome (Ready True, or False for a problem of the spec).
    A ConfigMap model may have changed unseen, and an unexpected failure deserves another try: those are
    planned again."""
    status = status or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
    if status.get("observedGeneration") != generation:
        return f"no status for generation {generation}"
    if status.get("plannerVersion") != planner_version:
        return f"planned by version {status.get('plannerVersion')}"
    if not inventory_holds(status.get("inventory", []), relevant):
        return "the GPU inventory changed"
    if ready.get("status") not in ("True", "False") or ready.get("reason") == "PlanningFailed":
        return f"Ready is {ready.get('status')} ({ready.get('reason')})"
    if (spec.get("model") or {}).get("configMapRef"):
        return "its model is a ConfigMap's, which may have changed"
    return None


def work_due(*, generation: int, status: Mapping[str, Any] | None, relevant: list[dict[str, Any]],
             answer: Answer | None, observes: bool, now: float, last_planned: float, last_observed: float,
             resync_s: float, observe_s: float, answer_grace_s: float, warnings_hold: bool = True) -> Work:
    """What a plan needs at `now` (monotonic seconds).

    Planned again when its status is behind its generation or its usable inventory (a GPU type came or went, or
    a count left the range its answer holds in: `inventory_holds`) and this process has not
    answered them, or answered them longer than `answer_grace_s` ago and the answer never showed up (the
    write was lost: our write comes back as a watch event later, so while it is on the way the status is behind
    but answered; an answer not written, `Answer.written`, cannot be lost); and when `resync_s` passed since it
    was last planned. Observed (a plan with spec.observe) every `observe_s`, and with the planning of a generation
    its status does not answer yet: the one write of that answer then carries the observation conditions of the
    same generation (else they stay at the generation before until the next observation, a second write of every
    spec edit). Neither, but its warnings about the nodes no longer describe them (`warnings_hold` False: a node
    of its types cordoned, tainted, relabelled or back, the count within its range): those warnings are rewritten,
    and nothing is planned."""
    status = status or {}
    new_generation = status.get("observedGeneration") != generation
    behind = new_generation or not inventory_holds(status.get("inventory", []), relevant)
    answered = answer is not None and answer.generation == generation and inventory_holds(answer.inventory, relevant)
    lost = behind and answered and answer is not None and answer.written and now - answer.at >= answer_grace_s
    replan = (behind and (not answered or lost)) or now - last_planned >= resync_s
    observe = observes and (now - last_observed >= observe_s or (replan and new_generation))
    return Work(replan=replan, observe=observe, rewarn=not (replan or warnings_hold))


def leads(peers: Mapping[str, Any], identity: str, priority: int, now: datetime.datetime) -> bool:
    """kopf's peering rule from a peering object's status ({identity: {priority, lifetime, lastseen}}): this
    replica (`identity`) has announced itself, and no other live replica has the same or a higher priority."""
    if identity not in peers:
        return False
    for other, info in peers.items():
        if other == identity or not isinstance(info, Mapping):
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
