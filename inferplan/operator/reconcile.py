"""One reconcile without Kubernetes: a plan's spec and the cluster's GPU inventory in, a plan result (or the
reason it could not be planned) out. The kopf handlers call this off the event loop.

Which GPU types a plan considers:
- no `constraints.gpuTypes`: the types the cluster has, limited to their counts and GPUs per node;
- `gpuTypes` given: those the cluster has, limited to their counts (narrowing); with
  `planAbsentGpuTypes: true` also the ones it lacks, without an inventory limit and with a warning
  (widening: "plan for these even if absent");
- `availableGpus` given in the spec: it replaces the inventory (the user knows better, e.g. a quota).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from inferplan.operator.inventory import Inventory
from inferplan.planner.factors import FactorSet, load_factors
from inferplan.planner.observed import ObservedWorkload, planning_request
from inferplan.planner.online import Calibration, calibrated_factors
from inferplan.planner.results import PlanResult
from inferplan.planner.search import plan
from inferplan.planner.spec import PlanError, PlanRequest, parse_plan, resolve_plan
from inferplan.planner.verification import should_verify, verify_plan

ConfigMapReader = Callable[[str, str], str]  # (name, key) -> the value in the plan's namespace; raises KeyError


@dataclass(frozen=True)
class Outcome:
    """What one reconcile produced: a result, or an error (CamelCase reason, message) for a spec the planner
    cannot use; warnings about the inventory either way."""

    result: PlanResult | None
    error: tuple[str, str] | None
    warnings: tuple[str, ...] = ()


def _error_reason(problems: list[tuple[str, str]]) -> str:
    paths = [path for path, _ in problems]
    if any(p.startswith("model") for p in paths):
        return "InvalidModel"
    if any(p.startswith("constraints.gpuTypes") for p in paths):
        return "UnknownGpuType"
    return "InvalidSpec"


def with_config_map(spec: Mapping, read_config_map: ConfigMapReader | None) -> Mapping:
    """The spec with `model.configMapRef` replaced by the config.json it points to (inline architecture)."""
    model = spec.get("model") or {}
    ref = model.get("configMapRef")
    if not ref:
        return spec
    name, key = ref.get("name", ""), ref.get("key", "config.json")
    if read_config_map is None:
        raise PlanError([("model.configMapRef", "reading ConfigMaps is not available here")])
    try:
        text = read_config_map(name, key)
    except KeyError as exc:
        raise PlanError([("model.configMapRef", f"ConfigMap {name!r} has no key {key!r} ({exc})")]) from None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanError([("model.configMapRef", f"key {key!r} of ConfigMap {name!r} is not JSON: {exc.msg} "
                                                f"(line {exc.lineno})")]) from None
    inline = {k: v for k, v in model.items() if k != "configMapRef"} | {"architecture": config}
    return {**spec, "model": inline}


def request_for_cluster(request: PlanRequest, inventory: Inventory, spec_has_available: bool) -> tuple[PlanRequest,
                                                                                                       list[str]]:
    """The request with the cluster's GPU types, counts and node sizes filled in (see the module doc)."""
    if spec_has_available:
        return request, []
    available = inventory.available()
    per_node = request.gpus_per_node | inventory.per_node()
    warnings = []
    if request.gpu_types is None:
        gpu_types: tuple[str, ...] | None = tuple(sorted(available))
    else:
        absent = [key for key in request.gpu_types if key not in available]
        if request.plan_absent_gpu_types:
            gpu_types = request.gpu_types
            if absent:
                warnings.append(f"planned for {', '.join(absent)} although the cluster has no schedulable GPUs of "
                                f"{'that type' if len(absent) == 1 else 'those types'}")
        else:
            gpu_types = tuple(key for key in request.gpu_types if key in available)
            if absent:
                warnings.append(f"left out {', '.join(absent)}: the cluster has no schedulable GPUs of "
                                f"{'that type' if len(absent) == 1 else 'those types'} "
                                "(constraints.planAbsentGpuTypes plans them anyway)")
    return dataclasses.replace(request, gpu_types=gpu_types, available_gpus=available, gpus_per_node=per_node), warnings


def observed_workload(status: Mapping | None) -> ObservedWorkload | None:
    """The workload recorded in `status.observed` (spec.observe), if any."""
    observed = (status or {}).get("observed") or {}
    rate = observed.get("requestsPerSecond")
    if not isinstance(rate, int | float):
        return None
    return ObservedWorkload(float(rate), observed.get("promptTokensMean"), observed.get("outputTokensMean"))


def plan_factors(spec: Mapping, status: Mapping | None, engine: str) -> FactorSet:
    """The shipped factors, with the calibration recorded in `status` when spec.observe.calibrate is on."""
    factors = load_factors()
    recorded = (status or {}).get("calibration") or {}
    if not ((spec.get("observe") or {}).get("calibrate") and recorded.get("gpuType")):
        return factors
    try:
        calibration = Calibration(decode=float(recorded["decode"]), prefill=float(recorded["prefill"]))
    except (KeyError, TypeError, ValueError):
        return factors
    return calibrated_factors(factors, engine, str(recorded["gpuType"]), calibration)


def reconcile_plan(spec: Mapping, inventory: Inventory, read_config_map: ConfigMapReader | None = None,
                   verify_default: bool = False, status: Mapping | None = None) -> Outcome:
    """Plan `spec` against `inventory`; never raises for a bad spec (it becomes the outcome's error).
    The candidates are verified in the simulator as `verification.should_verify` decides. `status` (the
    plan's current status) supplies what spec.observe found: the observed workload for `workload.source:
    observed`, and the calibration for `observe.calibrate`."""
    try:
        request = resolve_plan(parse_plan(with_config_map(spec, read_config_map)))
    except PlanError as exc:
        return Outcome(None, (_error_reason(exc.problems), str(exc)))
    request, note = planning_request(request, observed_workload(status))
    spec_has_available = bool((spec.get("constraints") or {}).get("availableGpus"))
    request, warnings = request_for_cluster(request, inventory, spec_has_available)
    if request.gpu_types == ():
        return Outcome(None, ("NoGpuTypes", "no GPU type to plan for: the cluster has no schedulable node with a "
                                            "known GPU of the types the plan allows"), tuple(warnings))
    result = plan(request, plan_factors(spec, status, request.engine))
    if should_verify(request, verify_default):
        result = verify_plan(request, result)
    return Outcome(result, None, tuple([*warnings, *([note] if note else [])]))
