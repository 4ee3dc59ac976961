"""The status of an InferenceCapacityPlan: pydantic models (the CRD's status schema is generated from
them), the pure function that builds a plan's next status from its previous one and the planner's answer
(`next_status`), and the one function that assembles and serialises every status written (`assemble_status`),
from that answer and/or an observation (the blocks and conditions `observing.observe_status` makes).

Conditions follow metav1.Condition: a list keyed by `type`, `status` True/False/Unknown, a CamelCase
`reason`, a human `message`, and a `lastTransitionTime` that changes only when `status` flips, so that a
re-plan with the same outcome writes nothing new.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from inferplan import tables
from inferplan.operator.inventory import Inventory, NodeSize, is_inventory_warning
from inferplan.planner.results import Candidate, Infeasible, PlanResult, per_hour, replica_shape

CONDITION_TYPES = ("Ready", "Feasible", "InventoryAvailable")
OBSERVATION_CONDITION_TYPES = ("MetricsAvailable", "PredictionAccurate")  # observing.observe_status's


class _Status(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class Condition(_Status):
    """One aspect of the plan's state (metav1.Condition)."""

    type: str = Field(max_length=316, description="Ready, Feasible, InventoryAvailable, ...")
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
                        description="CamelCase reason for the status.")
    message: str = Field(max_length=32768, description="Human-readable details.")
    last_transition_time: str = Field(max_length=64, json_schema_extra={"format": "date-time"},
                                      description="RFC 3339 time the status last changed.")
    observed_generation: int | None = Field(default=None, ge=0,
                                            description="The generation of the spec the condition is about.")


class LatencyQuantiles(_Status):
    """Latency at each percentile [ms]; a percentile without data is absent."""

    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None


class LatencyByMetric(_Status):
    ttft: LatencyQuantiles | None = Field(default=None, description="Time to first token [ms].")
    tpot: LatencyQuantiles | None = Field(default=None, description="Time per output token [ms].")
    e2e: LatencyQuantiles | None = Field(default=None, alias="e2e", description="End-to-end latency [ms].")


_Bounds = Annotated[list[float], Field(min_length=2, max_length=2)]


class QuantileBounds(_Status):
    """[low, high] at each percentile [ms]; a percentile without bounds is absent."""

    p50: _Bounds | None = None
    p90: _Bounds | None = None
    p95: _Bounds | None = None
    p99: _Bounds | None = None


class BoundsByMetric(_Status):
    ttft: QuantileBounds | None = Field(default=None, description="Time to first token [ms].")
    tpot: QuantileBounds | None = Field(default=None, description="Time per output token [ms].")
    e2e: QuantileBounds | None = Field(default=None, alias="e2e", description="End-to-end latency [ms].")


_Residuals = Annotated[list[float], Field(max_length=20)]


class QuantileResiduals(_Status):
    """log(observed / predicted) of the last windows judged inside their band, oldest first, per percentile."""

    p50: _Residuals | None = None
    p90: _Residuals | None = None
    p95: _Residuals | None = None
    p99: _Residuals | None = None


class ResidualsByMetric(_Status):
    ttft: QuantileResiduals | None = Field(default=None, description="Time to first token.")
    tpot: QuantileResiduals | None = Field(default=None, description="Time per output token.")
    e2e: QuantileResiduals | None = Field(default=None, alias="e2e", description="End-to-end latency.")


class ErrorQuantiles(_Status):
    """(predicted - observed) / observed at each percentile (a ratio, not ms); a percentile without data is
    absent."""

    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None


class ErrorByMetric(_Status):
    ttft: ErrorQuantiles | None = Field(default=None, description="Time to first token (a ratio).")
    tpot: ErrorQuantiles | None = Field(default=None, description="Time per output token (a ratio).")
    e2e: ErrorQuantiles | None = Field(default=None, alias="e2e", description="End-to-end latency (a ratio).")


class MeanLatency(_Status):
    ttft: float | None = Field(default=None, description="Mean time to first token [ms].")
    tpot: float | None = Field(default=None, description="Mean time per output token [ms].")
    e2e: float | None = Field(default=None, alias="e2e", description="Mean end-to-end latency [ms].")


class CurrentStatus(_Status):
    """The deployment serving now, as compared with the predictions."""

    deployment: str | None = Field(default=None, max_length=253, description="The Deployment read, if any.")
    gpu_type: str = Field(max_length=64)
    replicas: int = Field(ge=0)
    gpus_per_replica: int = Field(ge=1)
    max_batch: int = Field(ge=1)
    precision: str = Field(max_length=32)
    kv_cache_dtype: str = Field(max_length=32)
    sources: dict[Annotated[str, Field(max_length=32)], Literal["Deployment", "spec", "default"]] = Field(
        default_factory=dict, max_length=16, description="Where each field came from: Deployment, spec or default.")
    image: str | None = Field(default=None, max_length=512,
                              description="The engine container's image, when a Deployment was read.")
    engine_release: str | None = Field(default=None, max_length=64, description=(
        "The engine release the current deployment is taken to run: the prediction is made for it (its scheduling, "
        "factor line and CUDA graphs) and its defaults fill what is not given (maxBatch): the image's tag where the "
        "image is the engine's own published one (sources.engineRelease Deployment), else the plan's engine.version "
        "(spec), else the pinned release (default)."))
    max_num_batched_tokens: int | None = Field(default=None, ge=1, description=(
        "The token budget of one engine step (the prefill chunk) the prediction is made for: the Deployment's "
        "(vLLM --max-num-batched-tokens, SGLang --chunked-prefill-size, TGI --max-batch-prefill-tokens, TensorRT-LLM "
        "--max_num_tokens; sources.maxNumBatchedTokens Deployment), else its release's default, at least "
        "maxModelLen where prompts go whole (default); with no Deployment read, the plan's "
        "engine.maxNumBatchedTokens (spec); absent where neither states one (the engine's, as a plan takes it)."))
    chunked_prefill: bool | None = Field(default=None, description=(
        "Whether the engine chunks prompts: the Deployment's switch (vLLM --[no-]enable-chunked-prefill, "
        "TensorRT-LLM --enable_chunked_prefill, SGLang --chunked-prefill-size -1 for off; sources.chunkedPrefill "
        "Deployment), else its release's choice (default); with no Deployment read, the plan's engine.chunkedPrefill "
        "(spec); absent where neither states one."))
    memory_fraction: float | None = Field(default=None, ge=0, le=1, description=(
        "The memory share the engine sizes its KV cache from, as the planner's memory model takes the engine's (vLLM "
        "--gpu-memory-utilization of total memory, SGLang --mem-fraction-static, TGI --cuda-memory-fraction, "
        "TensorRT-LLM --kv_cache_free_gpu_memory_fraction of the memory free after loading): the Deployment's "
        "(sources.memoryFraction Deployment), else its release's default (default); with no Deployment read, the "
        "plan's engine.gpuMemoryUtilization (spec); absent where neither states one."))
    max_model_len: int | None = Field(default=None, ge=1, description=(
        "The longest sequence the engine takes (vLLM --max-model-len, SGLang --context-length, TGI "
        "--max-total-tokens, TensorRT-LLM --max_seq_len): the Deployment's (sources.maxModelLen Deployment), else "
        "the model's context (default); with no Deployment read, the plan's engine.maxModelLen (spec); absent where "
        "neither states one."))
    pipeline_parallel: int = Field(default=1, ge=1, description="Pipeline stages of a replica.")
    data_parallel: int = Field(default=1, ge=1, description=(
        "Data-parallel ranks of one instance (vLLM's with expert parallelism), each of gpusPerReplica / "
        "(this x pipelineParallel) GPUs with its own maxBatch."))
    data_parallel_attention: bool = Field(default=False, description="Attention runs data-parallel over the ranks.")
    expert_parallel: bool = Field(default=False, description="The MoE layers run expert-parallel over the ranks.")
    changed_at: str | None = Field(
        default=None, max_length=64, json_schema_extra={"format": "date-time"},
        description="When an observation first found the deployment changed (these fields or none before); "
                    "windows that reach back before it neither calibrate nor count as its own errors.")


class ObservedStatus(_Status):
    """What the deployment did over the window, read from Prometheus (kept when a later query fails)."""

    prometheus: str = Field(max_length=63, description="The endpoint's name (never its URL).")
    window: str = Field(max_length=8)
    sample_time: str = Field(max_length=64, json_schema_extra={"format": "date-time"})
    requests_per_second: float = Field(ge=0)
    requests_in_window: float = Field(ge=0)
    prompt_tokens_mean: float | None = None
    output_tokens_mean: float | None = None
    latency_ms: LatencyByMetric = Field(default_factory=LatencyByMetric,
                                        description="Percentiles from the engine's histograms.")
    mean_latency_ms: MeanLatency = Field(default_factory=MeanLatency, description="Means from _sum / _count.")
    running_requests: float | None = Field(default=None, description="Mean running requests, all replicas.")
    waiting_requests: float | None = Field(default=None, description="Mean waiting requests, all replicas.")
    kv_cache_usage: float | None = Field(default=None, description="Mean KV cache use, 0-1.")
    kv_cache_blocks: int | None = Field(default=None, description="KV blocks (vllm:cache_config_info).")
    block_size: int | None = None
    current: CurrentStatus | None = Field(default=None, description="The deployment the figures are for.")


class PredictionStatus(_Status):
    """The planner's prediction for the observed workload on the current deployment, and its error."""

    latency_ms: LatencyByMetric
    mean_latency_ms: MeanLatency = Field(default_factory=MeanLatency)
    error_ratio: ErrorByMetric = Field(
        default_factory=ErrorByMetric,
        description="(predicted - observed) / observed per metric and percentile (a ratio, not ms).")
    worst: str | None = Field(default=None, max_length=1024, description="The largest error, in words.")
    utilization: float | None = Field(default=None, description="Predicted utilisation of the current replicas.")
    interval_ms: BoundsByMetric | None = Field(
        default=None, description="The band each observed percentile is judged against: the recommendation's "
                                  "prediction interval, as ratios to its own prediction, around this prediction "
                                  "[ms]. A percentile without one is judged by observe.maxErrorRatio.")
    confidence: float | None = Field(default=None, description="The probability intervalMs is stated at.")
    residuals: ResidualsByMetric | None = Field(
        default=None, description="This deployment's own errors, log(observed / predicted), of the last windows of at "
                                  "least 200 requests judged inside their band: from 9 of a percentile on, its band is "
                                  "their split-conformal interval where that is narrower than the recommendation's "
                                  "(docs/observe.md, Narrowed by what this deployment did).")
    residuals_for: str | None = Field(
        default=None, max_length=1200, description="The deployment the residuals were observed on (the Deployment's "
                                                   "name and :, GPU type, GPUs per replica, max batch, precision, KV "
                                                   "dtype, and @ the engine's image where a Deployment gives them); "
                                                   "another starts afresh.")
    residuals_at: str | None = Field(
        default=None, max_length=64, json_schema_extra={"format": "date-time"},
        description="When the last window whose errors were kept ended: a window adds its errors only once it lies "
                    "wholly after it (windows that overlap share their requests).")
    drift_since: str | None = Field(
        default=None, max_length=64, json_schema_extra={"format": "date-time"},
        description="Since when some percentile has been outside its bound (its interval, else "
                    "observe.maxErrorRatio) beyond the bucket resolution.")


MAX_OTHER_CALIBRATIONS = 8


class GpuCalibration(_Status):
    """The multipliers learnt on a GPU type the deployment ran before (observe.calibrate)."""

    gpu_type: str = Field(max_length=64)
    decode: float
    prefill: float
    samples: int = Field(ge=0)
    updates: int = Field(ge=0)
    last_update_time: str | None = Field(default=None, max_length=64, json_schema_extra={"format": "date-time"})


class CalibrationStatus(_Status):
    """The efficiency multipliers the plan is made with (observe.calibrate)."""

    gpu_type: str = Field(max_length=64, description="The GPU type they were fitted on.")
    decode: float = Field(description="Multiplier on the engine's decode (bandwidth) efficiency.")
    prefill: float = Field(description="Multiplier on the engine's prefill compute efficiency.")
    provenance: Literal["catalog", "observed"]
    samples: int = Field(ge=0, description="Requests behind the accepted updates.")
    updates: int = Field(ge=0)
    note: str = Field(max_length=1024, description="The last update's outcome.")
    last_update_time: str | None = Field(default=None, max_length=64, json_schema_extra={"format": "date-time"})
    others: list[GpuCalibration] | None = Field(
        default=None, max_length=MAX_OTHER_CALIBRATIONS,
        description="What was learnt on the GPU types the deployment ran before, most recent first: each still "
                    "plans its GPU type.")


class ManifestsRef(_Status):
    """The objects `inferplan render` makes of the recommendation, in short: enough to review and to check
    that a rendered file is this recommendation's (same digest)."""

    target: str = Field(max_length=64, description="What runs the replicas: Deployment or LeaderWorkerSet.")
    image: str = Field(max_length=256, description="The engine's container image.")
    objects: list[Annotated[str, Field(max_length=320)]] = Field(
        max_length=16, description="The rendered objects, as Kind/name.")
    digest: str = Field(max_length=80, description="sha256 of the rendered YAML, as `inferplan render` prints it.")
    render: str = Field(max_length=512, description="The command that renders them from this plan.")


class DeploymentChange(_Status):
    """What applying the recommendation changes in the Deployment that runs now (spec.observe.current)."""

    deployment: str = Field(max_length=253, description="The Deployment compared (same namespace).")
    in_sync: bool = Field(description="True when the Deployment already runs the recommendation.")
    summary: list[Annotated[str, Field(max_length=512)]] = Field(
        default_factory=list, max_length=32, description="One line per difference, e.g. 'replicas: 2 -> 3'.")
    patch: str = Field(default="", max_length=16384,
                       description="Strategic merge patch (JSON) for `kubectl patch deployment --type strategic`.")
    problem: str = Field(default="", max_length=1024, description="Why no comparison could be made, if so.")


class Recommendation(Candidate):
    """The recommended deployment, with its rendered manifests and the change against what runs."""

    manifests: ManifestsRef | None = Field(default=None, description="What `inferplan render` makes of it.")
    change: DeploymentChange | None = Field(
        default=None, description="spec.observe.current.deployment: the change that applying it makes.")


class InventoryRange(_Status):
    """A GPU type the plan may use, and the allocatable counts of it within which the plan's answer holds: a
    count that stays between minGpus and maxGpus changes nothing the planner compares, so the operator neither
    plans again nor writes (live counts are the inferplan_cluster_gpus metric's). Where the type's nodes differ in
    their counts, the answer (where replicas fit on them) holds only while they stay as `nodeSizes` records them;
    where every node has gpusPerNode, the range alone says it (the planner compares what a placement needs in
    whole nodes of gpusPerNode)."""

    gpu_type: str = Field(max_length=64, description="Canonical GPU key of the catalog.")
    product_label: str = Field(max_length=63, description="The node label value that selects these GPUs.")
    gpus_per_node: int = Field(ge=0, description="Most GPUs of this type on one node (bounds tensor parallelism).")
    network_gbps: float | None = Field(
        default=None, ge=0, description="The least inferplan.io/network-gbps label of these nodes [Gbit/s per GPU], "
        "where every one has it: the network between nodes the plan assumes unless constraints.networkGbps says.")
    min_gpus: int = Field(ge=0, description="The answer holds down to this many allocatable GPUs of the type.")
    max_gpus: int | None = Field(default=None, ge=0,
                                 description="The answer holds up to this many (absent: any number more).")
    node_sizes: list[NodeSize] | None = Field(
        default=None, max_length=128, description="Where the nodes of the type differ in allocatable GPUs: how "
        "many nodes have each count, most GPUs first; the answer holds only while they stay so. Absent where every "
        "node has gpusPerNode.")


def inventory_ranges(inventory: Inventory, bounds: Mapping[str, tuple[int, int | None]]) -> list[InventoryRange]:
    """The status's `inventory`: each entry of `inventory` with the counts of its type within which the plan's
    answer holds (`bounds`, from `PlanResult.count_bounds`; a type planning compared no need with: any count of at
    least one GPU), and its nodes' counts where they differ (`InventoryEntry.node_sizes`)."""
    ranges = []
    for entry in inventory.entries:
        low, high = bounds.get(entry.gpu_type, (1, None))
        ranges.append(InventoryRange(gpu_type=entry.gpu_type, product_label=entry.product_label,
                                     gpus_per_node=entry.gpus_per_node, network_gbps=entry.network_gbps,
                                     min_gpus=min(max(low, 1), entry.gpus),
                                     max_gpus=None if high is None else max(high, entry.gpus),
                                     node_sizes=entry.node_sizes))
    return ranges


class PlanStatus(_Status):
    """What the operator writes into `.status`."""

    observed_generation: int | None = Field(default=None, ge=0,
                                            description="The spec generation this status answers.")
    conditions: list[Condition] = Field(default_factory=list, max_length=16)
    recommendation: Recommendation | None = Field(default=None, description="The cheapest feasible deployment.")
    ttft_at_slo_ms: float | None = Field(
        default=None, alias="ttftAtSloMs",
        description="The recommendation's predicted TTFT at the plan's TTFT SLO percentile (p95 without a "
        "TTFT SLO) [ms]: the printer column.",
    )
    gpu_column: str | None = Field(
        default=None, max_length=160,
        description="The recommendation's GPU type; a disaggregated one's prefill and decode pools' "
        "(H100-SXM5-80GB / H200-SXM-141GB): the GPU printer column.")
    replicas_column: str | None = Field(
        default=None, max_length=32,
        description="The recommendation's replicas; a disaggregated one's prefill and decode pools' (10 / 3): the "
        "Replicas printer column.")
    batch_column: str | None = Field(
        default=None, max_length=32,
        description="The recommendation's engine cap on running sequences per replica; a disaggregated one's "
        "prefill and decode pools' (256 / 32): the Batch printer column.")
    alternatives: list[Candidate] = Field(default_factory=list, max_length=20,
                                          description="The Pareto frontier beside the recommendation.")
    infeasible: list[Infeasible] = Field(default_factory=list, max_length=20,
                                         description="The nearest infeasible candidates and why.")
    inventory: list[InventoryRange] = Field(
        default_factory=list, max_length=64,
        description="The GPU types the plan may use, with the counts of each within which its answer holds.")
    planner_version: str | None = Field(default=None, max_length=64)
    warnings: list[Annotated[str, Field(max_length=1024)]] = Field(default_factory=list, max_length=32)
    assumptions: list[Annotated[str, Field(max_length=1024)]] = Field(
        default_factory=list, max_length=16, description="What the plan left open and the planner assumed.")
    suggestions: list[Annotated[str, Field(max_length=1024)]] = Field(
        default_factory=list, max_length=12,
        description="Without a feasible candidate: the smallest changes that make the plan feasible.")
    shapes: list[Annotated[str, Field(max_length=1024)]] = Field(
        default_factory=list, max_length=4,
        description="Each deployment shape the plan allows (aggregated within a node, over nodes, disaggregated): "
        "its cheapest feasible candidate, or why it has none, against the recommendation.")
    observed: ObservedStatus | None = Field(default=None, description="spec.observe: what the deployment did.")
    prediction: PredictionStatus | None = Field(
        default=None, description="spec.observe: the prediction for the observed workload, and its error.")
    calibration: CalibrationStatus | None = Field(default=None,
                                                  description="spec.observe.calibrate: the factors in use.")


# ----------------------------------------------------------------------------------------------------------
# The next status: a pure function of the previous one, the plan's outcome and the inventory

_MAX_MESSAGE = 32768
_MAX_WARNINGS = 32
_MAX_CANDIDATES = 20
_MAX_CONDITIONS = 16


def serialised(model: BaseModel) -> dict[str, Any]:
    """A status model as it is written: camelCase (by alias), without the fields that are None, JSON types."""
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


def clipped(text: str, limit: int) -> str:
    """`text`, or where it is longer than `limit` characters, its start cut after a whole problem, item or word
    (at a line end, "; ", ", " or a space) and followed by how much was left out: never more than `limit`."""
    if len(text) <= limit:
        return text
    room = limit - len(f" ... ({len(text)} more characters cut)")
    head = text[:room]
    for separator in ("\n", "; ", ", ", " "):
        at = head.rfind(separator)
        if at >= room // 2:
            head = head[:at].rstrip(";, ")
            break
    return f"{head} ... ({len(text) - len(head)} more characters cut)"


def make_condition(
    type_: str,
    status: str,
    reason: str,
    message: str,
    generation: int,
    now: str,
    previous: Sequence[Mapping[str, Any]] | None,
) -> Condition:
    """One condition (metav1.Condition).

    `lastTransitionTime` is that of the condition of the same type in `previous` (the old `conditions` list)
    when its status is unchanged, else `now` (an RFC 3339 time); `observedGeneration` is always `generation`.
    A message longer than the schema allows is cut after a whole word, saying so (`clipped`).
    """
    last_transition = now
    for old in previous or ():
        if isinstance(old, Mapping) and old.get("type") == type_:
            if old.get("status") == status and old.get("lastTransitionTime"):
                last_transition = str(old["lastTransitionTime"])
            break
    message = clipped(message, _MAX_MESSAGE)
    return Condition(
        type=type_,
        status=status,  # type: ignore[arg-type]  # validated by the model
        reason=reason,
        message=message,
        last_transition_time=last_transition,
        observed_generation=generation,
    )


def condition(
    type_: str,
    status: str,
    reason: str,
    message: str,
    generation: int,
    now: str,
    previous: Sequence[Mapping[str, Any]] | None,
) -> dict[str, Any]:
    """One condition as a camelCase dict (metav1.Condition): `make_condition`, serialised."""
    return serialised(make_condition(type_, status, reason, message, generation, now, previous))


def _recommendation_text(candidate: Candidate) -> str:
    """`2 x H100-SXM5-80GB, $5.90/h` (`3 x 2 H100-SXM5-80GB` for two GPUs a replica): replicas, GPU type, cost; a
    disaggregated one's pools, both, beside the cost of both (`8 x 4 H100-SXM5-80GB prefill + 3 x 8 H200-SXM-141GB
    decode, $178.40/h`); for one that rests on no measurement (`measured` false), that first, with its cost range
    (`upperCost`)."""
    shape = candidate.pools() or replica_shape(candidate.replicas, candidate.gpus_per_replica, candidate.gpu_type)
    text = f"{shape}, {per_hour(candidate.cost.dollars_per_hour)}"
    if candidate.measured:
        return text
    upper = candidate.upper_cost
    return f"unmeasured: {text}" + (f", {upper.words()}" if upper is not None else "")


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _other_conditions(old: Mapping[str, Any] | None) -> list[Condition]:
    """Valid conditions of types this module does not own, in their old order, first of each type."""
    kept: list[Condition] = []
    seen = set(CONDITION_TYPES)
    for item in (old or {}).get("conditions") or ():
        if not isinstance(item, Mapping) or item.get("type") in seen:
            continue
        try:
            kept.append(Condition.model_validate(item))
        except ValidationError:
            continue  # a hand-edited condition the schema would reject must not make every reconcile fail
        seen.add(item["type"])
    return kept


def next_status(
    old: Mapping[str, Any] | None,
    *,
    generation: int,
    now: str,
    planner_version: str,
    inventory: Inventory,
    result: PlanResult | None,
    error: tuple[str, str] | None,
    ttft_percentile: str = "p95",
    manifests: ManifestsRef | None = None,
    change: DeploymentChange | None = None,
    extra_warnings: Sequence[str] = (),
    bounds: Mapping[str, tuple[int, int | None]] | None = None,
    observes: bool = True,
) -> dict[str, Any]:
    """The complete new `.status` as a camelCase dict, built from the old one (pure).

    - `result`: the plan was made. Ready=True (Planned); Feasible=True (Feasible, the message names the
      recommendation) or False (NoFeasibleCandidate, the nearest infeasible reasons); the recommendation,
      alternatives and infeasible candidates are the result's.
    - `error` = (reason, message): the spec could not be planned (e.g. ("InvalidModel", "...")). Ready=False
      with that reason, Feasible=Unknown (NotPlanned). The old recommendation is cleared: it answers another
      spec, and keeping it would show an answer to a question no longer asked.
    - neither: not planned yet. Ready=Unknown (Planning), Feasible=Unknown (NotPlanned). The operator never writes
      it: its reconcile always has a result or an error, and a plan has no status until its first answer
      (docs/operator.md).

    `ttftAtSloMs` is the recommendation's TTFT at `ttft_percentile` (p50/p90/p95/p99), the plan's SLO one;
    `gpuColumn`, `replicasColumn` and `batchColumn` its GPU type, replicas and batch cap as the printer columns show
    them (each pool's, prefill / decode, for a disaggregated one: `tables.gpu_column`, `tables.role_column`).
    `manifests` and `change` (reconcile.deployment_fields) go into the recommendation, when there is one.
    `inventory` is what the plan may use (`Inventory.usable` of its constraints.gpuTypes): its types are the
    status's `inventory`, each with the counts within which the answer holds (`bounds`, `inventory_ranges`), and
    InventoryAvailable names them, so a node of a type the plan cannot use, or a count that moves within its
    range, changes nothing in its status. InventoryAvailable only reports (GpusFound or NoGpus): a plan that may
    widen its GPU types can be feasible without inventory. Warnings are `extra_warnings` (the reconcile's, about the
    inventory it planned with), the result's, then the inventory's, deduplicated in that order and capped.
    Conditions come in CONDITION_TYPES order, followed by conditions of other types found in `old`, unchanged.
    `observes` False (a spec without spec.observe): what an earlier observation left (OBSERVATION_CONDITION_TYPES,
    the observed, prediction and calibration blocks) is dropped, so that no drift is reported for ever about a
    deployment no longer watched.
    With the same inputs and `old` = the previous output, the output is equal whatever `now` is: nothing
    changes unless the outcome does, so the operator writes nothing and GitOps diffs stay clean.
    """
    if result is not None and error is not None:
        raise ValueError("next_status takes a result or an error, not both")
    if not observes and old:
        old = {key: value for key, value in old.items() if key not in _OBSERVATION_FIELDS} | {
            "conditions": [c for c in old.get("conditions") or ()
                           if not (isinstance(c, Mapping) and c.get("type") in OBSERVATION_CONDITION_TYPES)]}
    previous = (old or {}).get("conditions") or ()

    def make(type_: str, status: str, reason: str, message: str) -> Condition:
        return make_condition(type_, status, reason, message, generation, now, previous)

    if error is not None:
        reason, message = error
        ready = make("Ready", "False", reason, message)
        feasible = make("Feasible", "Unknown", "NotPlanned", "the spec could not be planned; see the Ready condition")
    elif result is None:
        ready = make("Ready", "Unknown", "Planning", "the plan has not been made yet")
        feasible = make("Feasible", "Unknown", "NotPlanned", "the plan has not been made yet")
    else:
        ready = make("Ready", "True", "Planned", f"planned for generation {generation}")
        if result.recommendation is not None:
            feasible = make("Feasible", "True", "Feasible", _recommendation_text(result.recommendation))
        else:
            reasons = list(dict.fromkeys(item.reason for item in result.infeasible))
            feasible = make("Feasible", "False", "NoFeasibleCandidate",
                            "; ".join(reasons) or "no candidate deployment to evaluate")
    if inventory.total_gpus > 0:
        types = sorted(inventory.available())
        available = make("InventoryAvailable", "True", "GpusFound",
                         f"GPUs of {_plural(len(types), 'type')}: {', '.join(types)}")
    elif inventory.restricted:
        available = make("InventoryAvailable", "False", "NoGpus",
                         "no schedulable node has a GPU of a type in constraints.gpuTypes")
    else:
        available = make("InventoryAvailable", "False", "NoGpus", "no schedulable node has a known GPU")
    conditions = [ready, feasible, available, *_other_conditions(old)][:_MAX_CONDITIONS]

    warnings = with_inventory_warnings([*extra_warnings, *(result.warnings if result else ())], inventory.warnings())
    recommended = result.recommendation if result else None
    planned = PlanStatus(
        observed_generation=generation,
        conditions=conditions,
        recommendation=Recommendation(**dict(recommended), manifests=manifests, change=change)
        if recommended else None,
        ttft_at_slo_ms=getattr(recommended.predicted.ttft_ms, ttft_percentile) if recommended else None,
        # A column's JSONPath reads one field: a disaggregated recommendation's top-level gpuType, replicas and
        # maxBatch are its decode pool's, so its columns read these, each pool's as the CLI's table writes them.
        gpu_column=tables.gpu_column(recommended) if recommended else None,
        replicas_column=tables.role_column(recommended, "replicas") if recommended else None,
        batch_column=tables.role_column(recommended, "max_batch") if recommended else None,
        alternatives=list(result.alternatives[:_MAX_CANDIDATES]) if result else [],
        infeasible=list(result.infeasible[:_MAX_CANDIDATES]) if result else [],
        inventory=inventory_ranges(inventory, bounds or {}),
        planner_version=planner_version,
        warnings=warnings,
        assumptions=list(result.assumptions[:16]) if result else [],
        suggestions=list(result.suggestions[:12]) if result else [],
        shapes=list(result.shapes[:4]) if result else [],
    )
    return assemble_status(old, planned=planned)


# ----------------------------------------------------------------------------------------------------------
# The observing step's part, and the whole status assembled


class Keep(enum.Enum):
    """The value of an `ObservationUpdate` block that leaves the old one as it is."""

    KEEP = "keep"


KEEP = Keep.KEEP


@dataclass(frozen=True)
class ObservationUpdate:
    """What one observation sets in the status (`observing.observe_status` makes it): the conditions it made
    (MetricsAvailable, PredictionAccurate), and each block it owns: a new value, None to remove it, or `KEEP` to
    leave the old one (a failed query keeps the last good figures)."""

    conditions: Sequence[Condition]
    observed: ObservedStatus | Literal[Keep.KEEP] = KEEP
    prediction: PredictionStatus | Literal[Keep.KEEP] | None = KEEP
    calibration: CalibrationStatus | Literal[Keep.KEEP] | None = KEEP


_OBSERVATION_FIELDS = {"observed": ObservedStatus, "prediction": PredictionStatus, "calibration": CalibrationStatus}


def _observation_fields(old: Mapping[str, Any] | None) -> dict[str, Any]:
    """The fields the observing step owns, carried over from `old` (dropped if the schema rejects them)."""
    kept: dict[str, Any] = {}
    for key, model in _OBSERVATION_FIELDS.items():
        value = (old or {}).get(key)
        if value is None:
            continue
        try:
            kept[key] = model.model_validate(value)
        except ValidationError:
            continue
    return kept


def _replace_conditions(old: Sequence[Any], new: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """`old` with the conditions of `new`'s types replaced in place (or appended); entries that are no mapping
    dropped."""
    by_type = {c["type"]: c for c in new}
    out = [by_type.pop(c.get("type"), None) or dict(c) for c in old if isinstance(c, Mapping)]
    return out + list(by_type.values())


def assemble_status(
    old: Mapping[str, Any] | None,
    *,
    planned: PlanStatus | None = None,
    observation: ObservationUpdate | None = None,
) -> dict[str, Any]:
    """The whole new `.status` as it is written (a camelCase dict; pure, `old` is not modified), from the planner's
    answer and/or an observation, serialised by `serialised`: `next_status` and `observing.observe_status` both
    return what it makes.

    - `planned` (`next_status` makes it): the status is that model alone, with the blocks the observing step owns
      (observed, prediction, calibration) that it leaves unset carried over from `old`, each dropped if the schema
      rejects it; keys of `old` that PlanStatus does not know are not written.
    - `observation` alone: `old` as it is, with the observation's blocks set or removed (`ObservationUpdate`) and
      its conditions replacing those of the same types where they stand (appended when new).
    - both: the observation on top of the planned status.
    """
    if planned is None and observation is None:
        raise ValueError("assemble_status takes a planned status, an observation or both")
    if planned is not None:
        carried = {key: value for key, value in _observation_fields(old).items() if getattr(planned, key) is None}
        status = serialised(planned.model_copy(update=carried))
    else:
        status = dict(old or {})
    if observation is not None:
        for key, block in (("observed", observation.observed), ("prediction", observation.prediction),
                           ("calibration", observation.calibration)):
            if block is KEEP:
                continue
            if block is None:
                status.pop(key, None)
            else:
                status[key] = serialised(block)
        status["conditions"] = _replace_conditions(status.get("conditions") or [],
                                                   [serialised(c) for c in observation.conditions])
    return status


_OWNED_KEYS = tuple(field.alias or name for name, field in PlanStatus.model_fields.items())


def status_patch(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that turns `old` into `new` for the fields `next_status` owns (empty: write nothing).

    A merge patch (RFC 7386) keeps keys it does not mention, at every depth: a field `new` leaves out (a cleared
    recommendation, or an interval the new recommendation does not state) is patched to None, and a mapping in
    both is patched with the difference of the two, so that nothing of an earlier answer stays behind in a later
    one; lists are replaced whole. Keys of `old` that PlanStatus does not know (other writers') are left alone.
    """
    old = old or {}
    cleared = {key: None for key in _OWNED_KEYS if key not in new and old.get(key) is not None}
    return {**_merge_patch(old, new, remove=False), **cleared}


def _merge_patch(old: Mapping[str, Any], new: Mapping[str, Any], *, remove: bool = True) -> dict[str, Any]:
    """RFC 7386's patch from `old` to `new`: new and changed keys; None for a key of `old` that `new` holds as
    None, and (with `remove`) for one `new` lacks; a mapping in both by its own patch."""
    patch: dict[str, Any] = {}
    for key, value in new.items():
        before = old.get(key)
        if value is None:
            if before is not None:
                patch[key] = None
        elif isinstance(value, Mapping) and isinstance(before, Mapping):
            inner = _merge_patch(before, value)
            if inner:
                patch[key] = inner
        elif key not in old or before != value:
            patch[key] = value
    if remove:
        patch.update({key: None for key, value in old.items() if key not in new and value is not None})
    return patch


_RANGE_KEYS = ("minGpus", "maxGpus", "nodeSizes")


def with_inventory_warnings(warnings: Sequence[str], inventory_warnings: Sequence[str]) -> list[str]:
    """A status's `warnings` with those about the nodes (`inventory.is_inventory_warning`) replaced by
    `inventory_warnings` (`Inventory.warnings` of the inventory the plan may use, as it is now), deduplicated in
    that order and capped as the status holds them. The operator rewrites a status's warnings with it when nodes
    change without changing the answer (a node cordoned or uncordoned while the count stays within its range):
    the answer is not planned again for that, but the warnings describe the nodes as they are."""
    kept = [w for w in warnings if not is_inventory_warning(w)]
    return list(dict.fromkeys([*kept, *inventory_warnings]))[:_MAX_WARNINGS]


def only_ranges_moved(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """Whether `new` differs from `old` only in its inventory's count ranges (`minGpus`, `maxGpus`, and the
    nodes' counts `nodeSizes`): the same answer, planned again for a count outside the range `old` recorded. The
    operator writes no such status (a write whose answer did not change is churn for whoever watches or reviews the
    plan) and keeps the new ranges to itself (docs/operator.md, "When a plan is re-planned")."""
    if not old or set(status_patch(old, new)) != {"inventory"}:
        return False
    before, after = old.get("inventory") or [], new.get("inventory") or []

    def rest(entries: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in entry.items() if k not in _RANGE_KEYS} for entry in entries]

    return rest(before) == rest(after)  # an earlier build's entries (gpus, nodes) differ here too


def ranges_text(inventory: Sequence[Mapping[str, Any]]) -> str:
    """A status inventory's count ranges as a log line gives them: "L40S 20-27, H100-SXM5-80GB 16-", with the nodes'
    counts where they differ: "L4 17-17 on 2 nodes of 8 and 1 of 1"."""
    def sizes(entry: Mapping[str, Any]) -> str:
        groups = [f"{g.get('nodes')} {('node of' if g.get('nodes') == 1 else 'nodes of') if i == 0 else 'of'} "
                  f"{g.get('gpus')}" for i, g in enumerate(entry.get("nodeSizes") or [])]
        return f" on {', '.join(groups[:-1])} and {groups[-1]}" if len(groups) > 1 else ""

    return ", ".join(f"{e.get('gpuType')} {e.get('minGpus')}-{'' if e.get('maxGpus') is None else e['maxGpus']}"
                     f"{sizes(e)}" for e in inventory)
