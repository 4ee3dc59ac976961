"""A plan resolved to plain numbers and canonical names (`PlanRequest`, what the search reads): `resolve_plan`
turns a parsed spec into one."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any

from inferplan.planner.catalog.architectures import ModelArchitecture
from inferplan.planner.catalog.checkpoints import (
    NamedCheckpoint,
    native_precision,
    resolve_served,
    served_repository,
)
from inferplan.planner.catalog.datasets import DatasetLengths, dataset_lengths
from inferplan.planner.catalog.engine_args import (
    DEFAULT_VERSIONS,
    chunked_prefill_problem,
    disaggregation_args,
    mtp_problem,
    release_problem,
)
from inferplan.planner.catalog.engines import DEFAULT_PLAN_PRECISIONS, SERVED_PRECISIONS, mtp_tokens_per_step
from inferplan.planner.catalog.gpus import load_gpu_catalog, resolve_gpu
from inferplan.planner.catalog.model_configs import load_config_file, stated_precision
from inferplan.planner.catalog.precisions import WEIGHT_PRECISIONS, weight_precision
from inferplan.planner.quantiles import QUANTILE_VALUES
from inferplan.planner.spec import DEFAULT_NETWORK_GBPS, Constraints, ModelSource, PlanSpec, TokenDistribution
from inferplan.planner.spec_parsing import PlanError
from inferplan.planner.spec_rules import _gpu_key, inline_architecture

ENGINE_NAMES = ("vllm", "sglang", "tgi", "tensorrt-llm")


DEFAULT_PRECISIONS: dict[str, tuple[str, ...]] = {
    name: SERVED_PRECISIONS[name][:DEFAULT_PLAN_PRECISIONS] for name in ENGINE_NAMES
}
"""Weight precisions searched when `model.precisions` is absent: what each engine serves well (the search
skips those a GPU cannot run)."""


KV_DTYPE_ORDER = ("auto", "bf16", "fp16", "fp8")
"""The order the search meets the KV dtypes of `model.kvCacheDtypes` in, whatever order the plan lists them in:
candidates that tie on everything the recommendation is ordered by (KV auto and bf16 of a bf16 model take the
same bytes) go to the engine's default."""


def search_order(engine: str, precisions: Sequence[str]) -> tuple[str, ...]:
    """`precisions` in the order the search meets them, whatever order the plan lists them in: the engine's
    (`SERVED_PRECISIONS`, what it serves best first), then the catalog's. Candidates that tie on everything the
    recommendation is ordered by (bf16 and fp16 weights take the same bytes and kernels) go to the first."""
    served, catalog = SERVED_PRECISIONS[engine], list(WEIGHT_PRECISIONS)
    return tuple(sorted(precisions, key=lambda name: (served.index(name) if name in served else len(served),
                                                      catalog.index(name) if name in catalog else len(catalog))))


BURSTINESS_ARRIVAL_CV2: dict[str, float] = {"steady": 0.25, "chatbot": 1.0, "bursty": 4.0, "agent": 8.0}
"""Squared coefficient of variation of request inter-arrival times per preset (assumed: 1.0 is Poisson)."""


DEFAULT_MIN_REPLICAS = 2


DEFAULT_LENGTH_CV = 1.0
"""CV of a token length given only as a mean (assumed: chat-like traffic, ShareGPT outputs have about 1.0)."""


_Z95 = NormalDist().inv_cdf(0.95)


MAX_P95_RATIO = math.exp(_Z95 * _Z95 / 2.0)
"""The largest p95/mean a lognormal can have (about 3.87, at sigma = z_0.95)."""


@dataclass(frozen=True)
class SloTarget:
    """One latency target: the `quantile` of `metric` must stay at or below `max_s`."""

    metric: str  # "ttft" | "tpot" | "e2e"
    quantile: float  # 0.5 | 0.9 | 0.95 | 0.99
    max_s: float  # seconds


@dataclass(frozen=True)
class PlanRequest:
    """A resolved plan: plain numbers and canonical names, what the search reads.

    Lengths are lognormal with the given mean [tokens] and CV; rates are requests/s; prices USD per
    GPU-hour. GPU maps are keyed by canonical GPU key (`GpuSpec.key`). `notes` lists the assumptions the
    resolution made (defaults filled in, spreads capped), one sentence each, for the plan's warnings.
    """

    arch: ModelArchitecture
    served_model: str                 # what the engine loads: served_repository(model.name), else the arch's id
    engine: str
    engine_version: str | None
    precisions: tuple[str, ...]
    kv_dtypes: tuple[str, ...]
    precisions_listed: bool           # the plan lists them (model.precisions): its repository holds them
    memory_fraction: float | None
    max_model_len: int | None
    chunked_prefill: bool | None
    max_num_batched_tokens: int | None
    prefix_caching: bool | None
    rate_rps: float
    prompt_mean: float
    prompt_cv: float
    output_mean: float
    output_cv: float
    arrival_cv2: float
    service_cv2: float | None
    prefix_hit_rate: float
    slos: tuple[SloTarget, ...]
    gpu_types: tuple[str, ...] | None
    plan_absent_gpu_types: bool       # operator: plan the listed types the cluster lacks (else leave them out)
    tp_sizes: tuple[int, ...]
    max_gpus: int | None
    max_gpus_per_type: dict[str, int]
    max_replicas: int | None
    min_replicas: int
    min_headroom: float
    budget_usd_per_hour: float | None
    max_utilization: float
    prices: dict[str, float]
    available_gpus: dict[str, int] | None
    gpus_per_node: dict[str, int]
    alternatives: int
    verify: bool | None               # None: the caller's default (CLI: on; operator: INFERPLAN_VERIFY)
    notes: tuple[str, ...] = ()
    workload_source: str = "declared"   # "observed": the operator replaces rate and mean lengths (observed.py)
    observed_floor: float = 0.5         # ... never planning below this share of the declared rate
    engine_image: str | None = None     # engine.image: the container image to render (None: the published one)
    shapes: tuple[str, ...] = ("aggregated",)  # constraints.shapes: aggregated and/or disaggregated
    network_gbps: float = DEFAULT_NETWORK_GBPS  # each GPU's network bandwidth between nodes [Gbit/s]
    network_from: str = "default"       # where network_gbps comes from: "plan", "nodes" (their label), "default"
    max_nodes_per_replica: int = 1      # constraints.maxNodesPerReplica: TP over nodes up to this many
    named_by_label: frozenset[str] = frozenset()  # keys of the GPUs the constraints name by node label (text uses it)
    confidence: float | None = None     # slo.confidence: each SLO must hold at the one-sided bound at this probability
    mtp_draft_tokens: int = 0           # engine.multiTokenPrediction.draftTokens (0: no drafting)
    mtp_tokens_per_step: float = 1.0    # ... the tokens a sequence emits per step on average (acceptedPerStep)
    mtp_accepted_stated: bool = False   # ... the plan stated them (else MTP_ACCEPTANCE's chain)
    product_labels: tuple[tuple[str, str], ...] = ()  # (GPU key, node label value) the cluster's nodes carry
    # GPU key -> the whole GPUs each schedulable node of that type offers (the operator's inventory, one count per
    # node, any order): a deployment of the type is accepted only where its replicas can be placed on these nodes
    # (`search.core.placement`). None, or a type it leaves out: only the totals (`available_gpus`) are known, as for
    # a plan's own constraints.availableGpus, and only they are checked.
    node_gpus: dict[str, tuple[int, ...]] | None = None

    @property
    def engine_release(self) -> str | None:
        """The release the deployment runs: `engine_version`, else the pinned one `inferplan render` writes the image
        of (`engine_args.DEFAULT_VERSIONS`). Where a release's behaviour depends on the version (SGLang's CUDA graphs:
        160 sequences in 0.5.2, 256 on an H100 from 0.5.3), a plan that names none is priced as that release."""
        return self.engine_version or DEFAULT_VERSIONS.get(self.engine)


def cv_from_sigma(sigma: float) -> float:
    """CV of a lognormal whose log has standard deviation `sigma`: sqrt(exp(sigma^2) - 1)."""
    return math.sqrt(math.expm1(sigma * sigma))


def sigma_from_p95_ratio(ratio: float) -> tuple[float, bool]:
    """The lognormal sigma whose p95/mean is `ratio` (>= 1), and whether it was capped.

    p95/mean = exp(z sigma - sigma^2 / 2) with z = z_0.95; the smaller root sigma = z - sqrt(z^2 - 2 ln ratio).
    No lognormal has p95/mean above exp(z^2 / 2) (about 3.87): beyond it sigma is capped at z.
    """
    if ratio < 1.0:
        raise ValueError(f"p95/mean must be >= 1, got {ratio}")
    discriminant = _Z95 * _Z95 - 2.0 * math.log(ratio)
    if discriminant <= 0.0:
        return _Z95, discriminant < 0.0
    return _Z95 - math.sqrt(discriminant), False


def sigma_from_percentiles(percentiles: Mapping[float, float]) -> float:
    """Least-squares sigma of log(length) = mu + z_q sigma over the given quantiles (>= 2) -> lengths."""
    if len(percentiles) < 2:
        raise ValueError("need at least two percentiles")
    zs = [NormalDist().inv_cdf(q) for q in percentiles]
    logs = [math.log(v) for v in percentiles.values()]
    z_mean = sum(zs) / len(zs)
    log_mean = sum(logs) / len(logs)
    covariance = sum((z - z_mean) * (y - log_mean) for z, y in zip(zs, logs, strict=True))
    variance = sum((z - z_mean) ** 2 for z in zs)
    return max(0.0, covariance / variance)


def _length(dist: TokenDistribution | None, path: str, notes: list[str], preset: DatasetLengths | None = None,
            which: str = "prompt") -> tuple[float, float]:
    """(mean, cv) of a token distribution; a dataset preset gives what it leaves out (all of it when None)."""
    preset_mean, preset_cv = ((preset.prompt_mean, preset.prompt_cv) if which == "prompt"
                              else (preset.output_mean, preset.output_cv)) if preset else (0.0, 0.0)
    if dist is None:
        assert preset is not None  # the spec's validator requires one of the two
        notes.append(f"{path}: from the {preset.name} preset (mean {preset_mean:g}, CV {preset_cv:g})")
        return preset_mean, preset_cv
    mean = float(dist.mean)
    if dist.cv is None and dist.p95 is None and dist.percentiles is None and preset is not None:
        return mean, preset_cv
    if dist.cv is not None:
        return mean, float(dist.cv)
    if dist.p95 is not None:
        sigma, capped = sigma_from_p95_ratio(dist.p95 / dist.mean)
        if capped:
            notes.append(
                f"{path}.p95: p95/mean {dist.p95 / dist.mean:.2f} is above the lognormal maximum "
                f"{MAX_P95_RATIO:.2f}; the spread is capped at CV {cv_from_sigma(sigma):.2f}"
            )
        return mean, cv_from_sigma(sigma)
    if dist.percentiles is not None:
        given = {QUANTILE_VALUES[name]: float(value) for name, value in dist.percentiles.given().items()}
        return mean, cv_from_sigma(sigma_from_percentiles(given))
    notes.append(f"{path}: no spread given; assumed lognormal with CV {DEFAULT_LENGTH_CV}")
    return mean, DEFAULT_LENGTH_CV


def _architecture(source: ModelSource, base_dir: Path | None
                  ) -> tuple[ModelArchitecture, NamedCheckpoint | None, str | None]:
    """The model's architecture, the catalogued quantised repository `model.name` names (else None), and the weight
    precision a config.json's `quantization_config` states (else None)."""
    listed = source.precisions is not None
    if source.name is not None:
        return (*resolve_served(source.name), None)
    if source.architecture is not None:  # the operator passes a ConfigMap's config.json here too
        return inline_architecture(source.architecture), None, stated_precision(source.architecture, listed)
    if source.config_file is not None:
        path = Path(source.config_file).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = Path(base_dir) / path
        arch, stated = load_config_file(path, listed)
        return arch, None, stated
    raise ValueError(
        "a ConfigMap can only be read by the operator in the cluster; from the command line give the "
        "config.json with model.configFile (or the model by model.name)"
    )


def _source_path(source: ModelSource) -> str:
    for alias, value in (("name", source.name), ("architecture", source.architecture),
                         ("configFile", source.config_file)):
        if value is not None:
            return f"model.{alias}"
    return "model.configMapRef"


def _by_key(mapping: Mapping[str, Any], convert: Any) -> dict[str, Any]:
    return {_gpu_key(name): convert(value) for name, value in mapping.items()}


def resolve_plan(spec: PlanSpec, base_dir: Path | None = None) -> PlanRequest:
    """Turn a validated spec into a PlanRequest of plain numbers and canonical names.

    `base_dir` is the plan file's directory, against which a relative `model.configFile` is read (the
    working directory when None). A `model.configMapRef` cannot be read here: the operator reads the
    ConfigMap and passes its config.json as `model.architecture`. Problems raise PlanError.
    """
    problems: list[tuple[str, str]] = []
    notes: list[str] = []
    try:
        arch, named, stated = _architecture(spec.model, base_dir)
    except ValueError as exc:
        raise PlanError([(_source_path(spec.model), str(exc))]) from None
    engine = spec.engine
    if engine.max_model_len is not None and engine.max_model_len > arch.max_position_embeddings:
        problems.append(("engine.maxModelLen", f"must be <= the model's context length "
                                               f"({arch.max_position_embeddings} tokens), got {engine.max_model_len}"))
    context, context_name = ((engine.max_model_len, "engine.maxModelLen") if engine.max_model_len is not None
                             else (arch.max_position_embeddings, "the model's context length"))
    preset = dataset_lengths(spec.workload.dataset) if spec.workload.dataset else None
    prompt_mean, prompt_cv = _length(spec.workload.prompt_tokens, "workload.promptTokens", notes, preset, "prompt")
    output_mean, output_cv = _length(spec.workload.output_tokens, "workload.outputTokens", notes, preset, "output")
    prompt, output = round(prompt_mean), round(output_mean)
    if prompt + output > context:  # the mean request would not fit: a plan for it would be a plan for errors
        problems.append(("workload.promptTokens.mean", f"the mean request ({prompt} prompt + {output} output "
                                                       f"tokens) does not fit in {context_name} ({context} tokens)"))
    if (problem := release_problem(engine.name, engine.version)) is not None:
        problems.append(("engine.version", problem))
    mtp = engine.multi_token_prediction
    if mtp is not None and not arch.mtp_layers:
        problems.append(("engine.multiTokenPrediction", f"{arch.repo_id} ships no multi-token-prediction modules "
                                                        "(num_nextn_predict_layers) to draft with"))
    if mtp is not None and (problem := mtp_problem(engine.name, engine.version)) is not None:
        problems.append(("engine.multiTokenPrediction", problem))
    if engine.prefix_caching is False and float(spec.workload.prefix_cache_hit_rate) > 0:
        problems.append(("workload.prefixCacheHitRate", f"{spec.workload.prefix_cache_hit_rate} of the prompt tokens "
                                                        "from the prefix cache, but engine.prefixCaching is false: "
                                                        "turn it on or leave the hit rate at 0"))
    if engine.chunked_prefill is not None and (
            problem := chunked_prefill_problem(engine.name, engine.version, engine.chunked_prefill)) is not None:
        problems.append(("engine.chunkedPrefill", problem))
    if named is not None and spec.model.precisions is not None and [
            weight_precision(name).name for name in spec.model.precisions] != [named.checkpoint.precision]:
        problems.append(("model.precisions", f"{named.checkpoint.repo} holds {named.checkpoint.precision} weights: "
                                             f"list only {named.checkpoint.precision}, or leave model.precisions out"))
    if stated is not None and spec.model.precisions is not None and [
            weight_precision(name).name for name in spec.model.precisions] != [stated]:
        problems.append(("model.precisions", f"{_source_path(spec.model)} holds {stated} weights (its config.json's "
                                             f"quantization_config): list only {stated}, or leave model.precisions "
                                             "out"))
    limits = spec.constraints
    if "aggregated" not in limits.shapes and disaggregation_args(engine.name, engine.version, "prefill") is None:
        # Nothing could be planned: no aggregated candidate is asked for, and no disaggregated one can be configured.
        problems.append(("constraints.shapes", f"{engine.name} {engine.version or ''}".rstrip()
                         + " has no disaggregated serving inferplan can configure (vLLM 0.9 and later, SGLang 0.4.6 "
                           "and later): add aggregated, or plan one of those"))
    if limits.available_gpus and limits.gpu_types is None and not any(limits.available_gpus.values()):
        problems.append(("constraints.availableGpus", "no GPU type has a count > 0 and constraints.gpuTypes is not "
                                                      "given: there is no GPU to plan for"))
    if problems:
        raise PlanError(problems)

    if named is not None:  # a quantised repository holds its one precision
        precisions = (named.checkpoint.precision,)
    elif stated is not None:  # so does a repository whose config.json states its quantisation
        precisions = (stated,)
        if spec.model.precisions is None:
            notes.append(f"model.precisions: {stated}, the weights {_source_path(spec.model)} states in its "
                         "quantization_config")
    elif spec.model.precisions is None:
        precisions = DEFAULT_PRECISIONS[engine.name]
        # A model published only in a format outside the engine's defaults (gpt-oss: MXFP4) is planned in it too.
        native = native_precision(served_repository(spec.model.name) if spec.model.name else arch.repo_id)
        if native and native not in precisions and native in SERVED_PRECISIONS[engine.name]:
            precisions = (*precisions, native)
    else:
        precisions = tuple(weight_precision(name).name for name in spec.model.precisions)
    workload = spec.workload
    burst = workload.burstiness
    if burst.arrival_cv2 is not None:
        arrival_cv2 = float(burst.arrival_cv2)
    else:
        arrival_cv2 = BURSTINESS_ARRIVAL_CV2[burst.preset or "chatbot"]
    service_cv2 = None if burst.service_cv2 is None else float(burst.service_cv2)
    slos = tuple(
        SloTarget(metric, QUANTILE_VALUES[bound.percentile], bound.max_ms / 1000.0)
        for metric, bound in (("ttft", spec.slo.ttft), ("tpot", spec.slo.tpot), ("e2e", spec.slo.e2e))
        if bound is not None
    )
    gpus_per_node = {gpu.key: gpu.gpus_per_node for gpu in load_gpu_catalog()}
    gpus_per_node.update(_by_key(limits.gpus_per_node, int))
    return PlanRequest(
        arch=arch,
        served_model=served_repository(spec.model.name) if spec.model.name else arch.repo_id,
        engine=engine.name,
        engine_version=engine.version,
        precisions=search_order(engine.name, precisions),
        precisions_listed=spec.model.precisions is not None or stated is not None,
        kv_dtypes=tuple(sorted(spec.model.kv_cache_dtypes, key=KV_DTYPE_ORDER.index)),
        memory_fraction=None if engine.gpu_memory_utilization is None else float(engine.gpu_memory_utilization),
        max_model_len=engine.max_model_len,
        chunked_prefill=engine.chunked_prefill,
        max_num_batched_tokens=engine.max_num_batched_tokens,
        prefix_caching=engine.prefix_caching,
        rate_rps=float(workload.requests_per_second),
        prompt_mean=prompt_mean,
        prompt_cv=prompt_cv,
        output_mean=output_mean,
        output_cv=output_cv,
        arrival_cv2=arrival_cv2,
        service_cv2=service_cv2,
        prefix_hit_rate=float(workload.prefix_cache_hit_rate),
        slos=slos,
        confidence=None if spec.slo.confidence is None else float(spec.slo.confidence),
        mtp_draft_tokens=0 if mtp is None else mtp.draft_tokens,
        mtp_tokens_per_step=1.0 if mtp is None else (
            float(mtp.accepted_per_step) if mtp.accepted_per_step is not None
            else mtp_tokens_per_step(mtp.draft_tokens)),
        mtp_accepted_stated=mtp is not None and mtp.accepted_per_step is not None,
        gpu_types=None if limits.gpu_types is None else tuple(_gpu_key(name) for name in limits.gpu_types),
        plan_absent_gpu_types=limits.plan_absent_gpu_types,
        tp_sizes=tuple(limits.tensor_parallel_sizes),
        max_gpus=limits.max_gpus,
        max_gpus_per_type=_by_key(limits.max_gpus_per_type, int),
        max_replicas=limits.max_replicas,
        min_replicas=(limits.min_replicas if limits.min_replicas is not None
                      else min(DEFAULT_MIN_REPLICAS, limits.max_replicas or DEFAULT_MIN_REPLICAS)),
        min_headroom=float(limits.min_headroom),
        budget_usd_per_hour=None if limits.budget_dollars_per_hour is None else float(limits.budget_dollars_per_hour),
        max_utilization=float(limits.max_utilization),
        prices=_by_key(limits.prices, float),
        # {} limits nothing, as the operator reads it (it plans against the cluster's inventory then).
        available_gpus=_by_key(limits.available_gpus, int) if limits.available_gpus else None,
        gpus_per_node=gpus_per_node,
        alternatives=spec.alternatives,
        verify=spec.verify,
        notes=tuple(notes),
        workload_source=workload.source,
        observed_floor=float(workload.observed_floor),
        engine_image=engine.image,
        shapes=tuple(limits.shapes),
        network_gbps=float(limits.network_gbps or DEFAULT_NETWORK_GBPS),
        network_from="default" if limits.network_gbps is None else "plan",
        max_nodes_per_replica=limits.max_nodes_per_replica,
        named_by_label=_named_by_label(limits),
    )


def _named_by_label(limits: Constraints) -> frozenset[str]:
    """Catalog keys of the GPUs `limits` names by their node label (NVIDIA-H100-80GB-HBM3 for H100-SXM5-80GB):
    the names a user wrote, which text about the answer uses for them."""
    names = [*(limits.gpu_types or ()), *(limits.available_gpus or {}), *limits.gpus_per_node,
             *limits.max_gpus_per_type, *limits.prices]
    return frozenset(gpu.key for name, gpu in zip(names, map(resolve_gpu, names), strict=True)
                     if name == gpu.product_label)
