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

from inferplan.deploy.diff import deployment_change
from inferplan.deploy.manifests import deployment, manifests_digest, render
from inferplan.operator.inventory import Inventory
from inferplan.operator.observing import recorded_calibration
from inferplan.operator.status import DeploymentChange, ManifestsRef
from inferplan.planner.factors import FactorSet, load_factors
from inferplan.planner.observed import ObservedWorkload, planning_request
from inferplan.planner.online import calibrated_factors
from inferplan.planner.results import Candidate, PlanResult
from inferplan.planner.spec import (
    MAX_ARCHITECTURE_KEYS,
    PlanError,
    PlanRequest,
    PlanSpec,
    inline_architecture,
    parse_plan,
    resolve_plan,
)
from inferplan.planner.verification import planned

MAX_PATCH_CHARS = 16384  # DeploymentChange.patch's bound in the status schema
ConfigMapReader = Callable[[str, str], str]  # (name, key) -> the value in the plan's namespace; raises KeyError


@dataclass(frozen=True)
class Outcome:
    """What one reconcile produced: a result, or an error (CamelCase reason, message) for a spec the planner
    cannot use; warnings about the inventory either way."""

    result: PlanResult | None
    error: tuple[str, str] | None
    warnings: tuple[str, ...] = ()
    manifests: ManifestsRef | None = None
    change: DeploymentChange | None = None


def error_reason(problems: list[tuple[str, str]]) -> str:
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
    except KeyError as exc:  # the reader says "... not found" for a missing ConfigMap, else the key is missing
        reason = str(exc.args[0]) if exc.args else ""
        missing = (f"ConfigMap {name!r} not found in the plan's namespace" if "not found" in reason
                   else f"ConfigMap {name!r} has no key {key!r}")
        raise PlanError([("model.configMapRef", missing)]) from None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanError([("model.configMapRef", f"key {key!r} of ConfigMap {name!r} is not JSON: {exc.msg} "
                                                f"(line {exc.lineno})")]) from None
    except (ValueError, RecursionError) as exc:  # an integer of > 4300 digits; nesting deeper than the stack
        raise PlanError([("model.configMapRef", f"key {key!r} of ConfigMap {name!r} is not usable JSON: "
                                                f"{str(exc)[:200]}")]) from None
    if not isinstance(config, dict):
        raise PlanError([("model.configMapRef", f"key {key!r} of ConfigMap {name!r} must hold a config.json "
                                                f"object, got a JSON {type(config).__name__}")])
    if not {"architectures", "num_hidden_layers", "text_config"} & set(config):
        # Not a Hugging Face config.json: say so without echoing its keys (the plan's author may not be allowed
        # to read the ConfigMap the operator reads for them).
        raise PlanError([("model.configMapRef", f"key {key!r} of ConfigMap {name!r} is not a Hugging Face "
                                                "config.json: it has neither 'architectures' nor "
                                                "'num_hidden_layers'")])
    # Its problems are the ConfigMap's, reported here: once inlined, they would read as model.architecture.
    if len(config) > MAX_ARCHITECTURE_KEYS:
        raise PlanError([("model.configMapRef", f"key {key!r} of ConfigMap {name!r}: a config.json with "
                                                f"{len(config)} top-level keys; at most {MAX_ARCHITECTURE_KEYS} are "
                                                "read (drop the ones that do not describe the architecture)")])
    try:
        inline_architecture(config)
    except ValueError as exc:
        raise PlanError([("model.configMapRef", f"ConfigMap {name!r}, key {key!r}: {exc}")]) from None
    inline = {k: v for k, v in model.items() if k != "configMapRef"} | {"architecture": config}
    return {**spec, "model": inline}


def config_map_problems(spec: Mapping, exc: PlanError) -> PlanError:
    """`exc` with the problems of the config.json a `model.configMapRef` supplied reported at model.configMapRef
    (the user never wrote model.architecture: `with_config_map` put the ConfigMap's JSON there)."""
    ref = (spec.get("model") or {}).get("configMapRef") if isinstance(spec.get("model"), Mapping) else None
    if not ref:
        return exc
    source = f"ConfigMap {ref.get('name', '')!r}, key {ref.get('key', 'config.json')!r}: "
    return PlanError([("model.configMapRef", source + message)
                      if path == "model.architecture" or path.startswith("model.architecture.") else (path, message)
                      for path, message in exc.problems])


def parse_and_resolve(spec: Mapping, read_config_map: ConfigMapReader | None) -> tuple[PlanSpec, PlanRequest]:
    """The validated spec and its resolution, a `model.configMapRef` read through `read_config_map`; raises
    PlanError (problems of the ConfigMap's config.json at model.configMapRef).

    `model.configFile` is refused before anything is read: it names a file on the machine that resolves the
    plan, which in the cluster is the operator's (its service account token, the Prometheus bearer token,
    /dev/zero): a plan author must not make the operator read its files."""
    model = spec.get("model")
    if isinstance(model, Mapping) and model.get("configFile") is not None:
        raise PlanError([("model.configFile", "a file path is read by the command line only; in the cluster give "
                                              "model.configMapRef (a ConfigMap in the plan's namespace) or "
                                              "model.name")])
    try:
        parsed = parse_plan(with_config_map(spec, read_config_map))
        return parsed, resolve_plan(parsed)
    except PlanError as exc:
        raise config_map_problems(spec, exc) from None


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
    recorded = recorded_calibration(status)
    if not (spec.get("observe") or {}).get("calibrate") or recorded is None:
        return factors
    gpu_type, calibration = recorded
    return calibrated_factors(factors, engine, gpu_type, calibration)


def reconcile_plan(spec: Mapping, inventory: Inventory, read_config_map: ConfigMapReader | None = None,
                   verify_default: bool = True, status: Mapping | None = None, *, name: str = "plan",
                   namespace: str = "default", current_deployment: Mapping | None = None) -> Outcome:
    """Plan `spec` against `inventory`; never raises for a bad spec (it becomes the outcome's error).
    The candidates are verified in the simulator as `verification.should_verify` decides. `status` (the
    plan's current status) supplies what spec.observe found: the observed workload for `workload.source:
    observed`, and the calibration for `observe.calibrate`. `name` and `namespace` are the plan's (the rendered
    objects are named after it); `current_deployment` is the body of spec.observe.current.deployment, read by
    the caller (None when the spec names none or it does not exist)."""
    try:
        _, request = parse_and_resolve(spec, read_config_map)
    except PlanError as exc:
        return Outcome(None, (error_reason(exc.problems), str(exc)))
    request, note = planning_request(request, observed_workload(status))
    spec_has_available = bool((spec.get("constraints") or {}).get("availableGpus"))
    request, warnings = request_for_cluster(request, inventory, spec_has_available)
    if request.gpu_types == ():
        return Outcome(None, ("NoGpuTypes", "no GPU type to plan for: the cluster has no schedulable node with a "
                                            "known GPU of the types the plan allows"), tuple(warnings))
    result = planned(request, plan_factors(spec, status, request.engine), verify_default=verify_default)
    manifests = change = None
    if result.recommendation is not None:
        manifests = manifests_ref(request, result.recommendation, name=name, namespace=namespace)
        if deployment_name := current_deployment_name(spec):
            change = change_status(request, result.recommendation, name=name, namespace=namespace,
                                   deployment_name=deployment_name, body=current_deployment)
    return Outcome(result, None, tuple([*warnings, *([note] if note else [])]), manifests, change)


def current_deployment_name(spec: Mapping) -> str | None:
    """spec.observe.current.deployment, the Deployment the recommendation is compared with, if any."""
    name = (((spec.get("observe") or {}).get("current") or {}).get("deployment"))
    return name if isinstance(name, str) and name else None


def manifests_ref(request: PlanRequest, recommendation: Candidate, *, name: str,
                  namespace: str) -> ManifestsRef | None:
    """The status's short reference to what `inferplan render` makes of the recommendation; None for an engine
    that has no server image to render."""
    try:
        objects = render(request, recommendation, name=name, namespace=namespace)
    except ValueError:
        return None
    workload = next(o for o in objects if o["kind"] in ("Deployment", "LeaderWorkerSet"))
    image = _first_image(workload)
    return ManifestsRef(
        target=workload["kind"], image=image,
        objects=[f"{o['kind']}/{o['metadata']['name']}" for o in objects],
        digest=manifests_digest(objects),
        render=f"kubectl get inferencecapacityplan {name} -n {namespace} -o yaml | inferplan render -",
    )


def _first_image(workload: Mapping) -> str:
    spec = workload.get("spec") or {}
    template = spec.get("template") or (spec.get("leaderWorkerTemplate") or {}).get("leaderTemplate") or {}
    containers = (template.get("spec") or {}).get("containers") or [{}]
    return str(containers[0].get("image", ""))


def change_status(request: PlanRequest, recommendation: Candidate, *, name: str, namespace: str,
                  deployment_name: str, body: Mapping | None) -> DeploymentChange:
    """What applying the recommendation changes in the Deployment `body` (None: it does not exist)."""
    if body is None:
        return DeploymentChange(deployment=deployment_name, in_sync=False,
                                problem=f"Deployment {deployment_name!r} not found in the plan's namespace")
    try:
        desired = deployment(request, recommendation, name=name, namespace=namespace)
        change = deployment_change(body, desired)
    except ValueError as exc:  # an engine without an image, a Deployment without a container
        return DeploymentChange(deployment=deployment_name, in_sync=False, problem=str(exc))
    patch = change.patch_json() if not change.in_sync else ""
    if len(patch) > MAX_PATCH_CHARS:
        return DeploymentChange(deployment=deployment_name, in_sync=False, summary=list(change.summary[:32]),
                                problem=f"the patch is longer than the status holds ({len(patch)} characters): "
                                        "print it with `inferplan diff`")
    return DeploymentChange(deployment=deployment_name, in_sync=change.in_sync, summary=list(change.summary[:32]),
                            patch=patch)


def with_current_change(spec: Mapping, status: Mapping, *, name: str, namespace: str, body: Mapping | None,
                        read_config_map: ConfigMapReader | None = None) -> dict:
    """`status` with its recommendation's change recomputed against `body` (the Deployment as it is now), so
    that the status shows an applied recommendation as in sync without planning again. Unchanged when the
    status has no recommendation or the spec names no current Deployment."""
    recommendation = status.get("recommendation")
    deployment_name = current_deployment_name(spec)
    if not recommendation or deployment_name is None:
        return dict(status)
    try:
        _, request = parse_and_resolve(spec, read_config_map)
    except PlanError:
        return dict(status)  # planning says what is wrong with the spec
    fields = {k: v for k, v in recommendation.items() if k not in ("manifests", "change")}
    candidate = Candidate.model_validate(fields)
    change = change_status(request, candidate, name=name, namespace=namespace, deployment_name=deployment_name,
                           body=body)
    return {**status, "recommendation": {**recommendation,
                                         "change": change.model_dump(by_alias=True, exclude_none=True, mode="json")}}
