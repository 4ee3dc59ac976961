"""One reconcile without Kubernetes: a plan's spec and the cluster's GPU inventory in, a plan result (or the
reason it could not be planned) out. The kopf handlers call this off the event loop.

Which GPU types a plan considers:
- no `constraints.gpuTypes`: the types the cluster has, limited to their counts and GPUs per node, and to the
  replicas their nodes hold (`PlanRequest.node_gpus`: a replica's GPUs on one node, or whole nodes);
- `gpuTypes` given: those the cluster has, limited to their counts and nodes (narrowing); with
  `planAbsentGpuTypes: true` also the ones it lacks, without an inventory limit and with a warning
  (widening: "plan for these even if absent");
- `availableGpus` given in the spec: it replaces the inventory (the user knows better, e.g. a quota), nodes
  included: only its totals are checked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from inferplan.deploy.diff import deployment_change, desired_deployment
from inferplan.deploy.manifests import manifests_digest, render
from inferplan.operator.cluster_spec import ConfigMapReader, error_reason, parse_and_resolve
from inferplan.operator.inventory import Inventory
from inferplan.operator.observing import recorded_calibrations
from inferplan.operator.status import DeploymentChange, ManifestsRef
from inferplan.planner.calibration.observed import ObservedWorkload, planning_request
from inferplan.planner.calibration.online import calibrated_factors
from inferplan.planner.model.factors import FactorSet, load_factors
from inferplan.planner.request import PlanRequest
from inferplan.planner.results import Candidate, PlanResult
from inferplan.planner.simulation.verification import planned
from inferplan.planner.spec_parsing import PlanError

MAX_PATCH_CHARS = 16384  # DeploymentChange.patch's bound in the status schema


@dataclass(frozen=True)
class Outcome:
    """What one reconcile produced: a result, or an error (CamelCase reason, message) for a spec the planner
    cannot use; warnings about the inventory either way."""

    result: PlanResult | None
    error: tuple[str, str] | None
    warnings: tuple[str, ...] = ()
    manifests: ManifestsRef | None = None
    change: DeploymentChange | None = None
    # GPU key -> the inventory counts within which planning gives the same result (`PlanResult.count_bounds`); empty
    # when the inventory's counts were not planned with (an error, the spec's own availableGpus)
    bounds: Mapping[str, tuple[int, int | None]] = field(default_factory=dict)


def request_for_cluster(request: PlanRequest, inventory: Inventory, spec_has_available: bool) -> tuple[PlanRequest,
                                                                                                       list[str]]:
    """The request with the cluster's GPU types, counts, node sizes and the GPUs of each node (where replicas are
    placed) filled in (see the module doc). With the spec's own `availableGpus` (a quota), only the node sizes and
    the label values the nodes carry are the cluster's."""
    per_node = request.gpus_per_node | inventory.per_node()
    labels = tuple(sorted(inventory.product_labels().items()))
    if spec_has_available:
        return dataclasses.replace(request, gpus_per_node=per_node, product_labels=labels), []
    available = inventory.available()
    warnings = []
    if request.gpu_types is None:
        gpu_types: tuple[str, ...] | None = tuple(sorted(available))
    else:
        absent = sorted(key for key in request.gpu_types if key not in available)  # not in the plan's order
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
    cluster = dataclasses.replace(request, gpu_types=gpu_types, available_gpus=available, gpus_per_node=per_node,
                                  product_labels=labels, node_gpus=inventory.node_gpus())
    network = inventory.network_gbps(gpu_types if gpu_types is not None else available)
    if request.network_from != "plan" and network is not None:
        cluster = dataclasses.replace(cluster, network_gbps=network, network_from="nodes")
    return cluster, warnings


def observed_workload(status: Mapping | None) -> ObservedWorkload | None:
    """The workload recorded in `status.observed` (spec.observe), if any."""
    observed = (status or {}).get("observed") or {}
    rate = observed.get("requestsPerSecond")
    if not isinstance(rate, int | float):
        return None
    return ObservedWorkload(float(rate), observed.get("promptTokensMean"), observed.get("outputTokensMean"))


def plan_factors(spec: Mapping, status: Mapping | None, engine: str) -> FactorSet:
    """The shipped factors, with the calibrations recorded in `status` when spec.observe.calibrate is on: the
    current GPU type's and those of the GPU types the deployment ran before, each on its GPU type."""
    factors = load_factors()
    if not (spec.get("observe") or {}).get("calibrate"):
        return factors
    for gpu_type, calibration in recorded_calibrations(status).items():
        factors = calibrated_factors(factors, engine, gpu_type, calibration)
    return factors


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
    bounds = {} if spec_has_available else result.count_bounds
    manifests = change = None
    if result.recommendation is not None:
        manifests = manifests_ref(request, result.recommendation, name=name, namespace=namespace)
        if deployment_name := current_deployment_name(spec):
            change = change_status(request, result.recommendation, name=name, namespace=namespace,
                                   deployment_name=deployment_name, body=current_deployment)
    return Outcome(result, None, tuple([*warnings, *([note] if note else [])]), manifests, change, bounds)


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
    """What applying the recommendation changes in the Deployment `body` (None: it does not exist); for a
    disaggregated recommendation, in the pool `body` is (`desired_deployment`)."""
    if body is None:
        return DeploymentChange(deployment=deployment_name, in_sync=False,
                                problem=f"Deployment {deployment_name!r} not found in the plan's namespace")
    try:
        desired = desired_deployment(request, recommendation, body, name=name, namespace=namespace)
        change = deployment_change(body, desired)
    except ValueError as exc:  # an engine without an image, a Deployment without a container, neither pool's
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
