"""The plan spec: what a user asks the planner for, as the `spec` of an `InferenceCapacityPlan`.

The pydantic models here are the Kubernetes resource's schema (`inferplan.io/v1alpha1`): camelCase keys,
unknown keys rejected, no floats (decimal quantities are quoted strings such as `"12.5"`, or integers with
the unit in the name such as `maxMs`), every string, list and map bounded, and a description on every field
so the CRD generator and `kubectl explain` can reuse them. The full reference is docs/plan-spec.md.

`parse_plan` / `load_plan_file` validate a spec (bare, or inside a whole manifest) and report every problem
at once as a `PlanError` with camelCase field paths. `resolve_plan` turns a valid spec into a `PlanRequest`
of plain numbers and canonical names: the search never touches pydantic.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from decimal import Decimal
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    Field,
    field_validator,
    model_validator,
)

from inferplan.planner.quantiles import QUANTILE_VALUES
from inferplan.planner.spec_rules import (
    CelRule,
    _canonical_precision,
    _cel,
    _check_architecture,
    _check_gpu_name,
    _check_label_name,
    _check_model_name,
    _check_precision,
    _check_rate_ceiling,
    _check_tp,
    _check_utilization_floor,
    _check_window,
    _count,
    _no_duplicate_gpus,
    _no_duplicates,
    _rule,
    _SpecModel,
    decimal_type,
)

KvCacheDtype = Literal["fp16", "bf16", "fp8", "auto"]  # what a plan may name (the CRD's enum)


# constraints.networkGbps where neither the plan nor the nodes say: one 400 Gb/s InfiniBand or RoCE NIC per GPU
# (HGX H100/H200, DGX, most GPU clouds).
DEFAULT_NETWORK_GBPS = 400.0
NETWORK_LABEL = "inferplan.io/network-gbps"  # a node label: each GPU's network bandwidth between nodes [Gbit/s]
"""Replicas a plan asks for at least when it says nothing: one node or pod failure, or a rollout, must not stop
the service (docs/planning.md)."""


_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_CONFIG_MAP_KEY = r"^[-._a-zA-Z0-9]+$"
_MAX_TOKENS = 10_485_760  # 10 Mi tokens: beyond any model's context
_MAX_CV = 10
_MAX_CV2 = 100
MAX_ARCHITECTURE_KEYS = 64  # model.architecture (and so a ConfigMap's config.json) holds at most this many keys
IMAGE_REFERENCE = (
    r"^(?:(?:localhost|[a-zA-Z0-9-]+(?:\.[a-zA-Z0-9-]+)+)(?::[0-9]+)?/|[a-zA-Z0-9-]+:[0-9]+/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$"
)
"""A container image reference as the distribution grammar defines it (`[registry[:port]/]path[:tag][@digest]`,
path components lowercase; a first component is a registry when it has a dot or a port, or is localhost), the
form Kubernetes passes to the container runtime."""
ENGINE_VERSION = r"^v?[0-9]+\.[0-9]+(\.[0-9]+)?([.+-][A-Za-z0-9.]+)?$"
"""An engine release as its package or image tag numbers it: `0.11.2`, `v0.10.1.1`, `0.5.4.post1`, `1.0.0rc4`."""
_MAX_IMAGE_CHARS = 256  # the distribution limit on a name is 255; status.recommendation.manifests.image holds 256


# ----------------------------------------------------------------------------------------------------------
# Errors


# ----------------------------------------------------------------------------------------------------------
# Field types


TP_SIZES = (1, 2, 4, 8, 16, 32, 64)


PositiveDecimal = decimal_type(gt="0")
UnitFraction = decimal_type(gt="0", le="1")


RequestRate = Annotated[PositiveDecimal, AfterValidator(_check_rate_ceiling)]
UtilizationCap = Annotated[UnitFraction, AfterValidator(_check_utilization_floor)]
HitRate = decimal_type(ge="0", lt="1")
Cv = decimal_type(ge="0", le=str(_MAX_CV))
Cv2 = decimal_type(ge="0", le=str(_MAX_CV2))
ErrorRatio = decimal_type(gt="0", le="10")
Confidence = decimal_type(ge="0.5", le="0.99")
GpuName = Annotated[str, Field(min_length=1, max_length=64), AfterValidator(_check_gpu_name)]
PrecisionName = Annotated[str, Field(min_length=1, max_length=32), AfterValidator(_check_precision)]
Percentile = Literal["p50", "p90", "p95", "p99"]


# ----------------------------------------------------------------------------------------------------------
# The spec models


class ConfigMapRef(_SpecModel):
    """A ConfigMap in the plan's namespace holding a Hugging Face config.json."""

    name: str = Field(
        min_length=1, max_length=253, pattern=_DNS_SUBDOMAIN, description="Name of the ConfigMap (same namespace)."
    )
    key: str = Field(
        default="config.json", min_length=1, max_length=253, pattern=_CONFIG_MAP_KEY,
        description="Key in the ConfigMap whose value is the config.json text. Default: config.json.",
    )


class ModelSource(_SpecModel):
    """The model to serve: exactly one of name, architecture, configFile, configMapRef."""

    name: Annotated[str, Field(min_length=1, max_length=256), AfterValidator(_check_model_name)] | None = Field(
        default=None,
        description="Catalog repo id or alias, e.g. meta-llama/Llama-3.1-8B-Instruct or llama-3.1-8b "
        "(case and separators ignored), or a catalogued quantised repository of one, e.g. nvidia/DeepSeek-R1-FP4, "
        "planned in its precision only.",
    )
    architecture: Annotated[dict[str, Any], Field(max_length=MAX_ARCHITECTURE_KEYS),
                            AfterValidator(_check_architecture)] | None = (
        Field(
            default=None,
            description="Inline architecture: ModelArchitecture fields (numLayers, hiddenSize, "
            "intermediateSize, numAttentionHeads, numKvHeads, vocabSize, maxPositionEmbeddings, ...) or a "
            "config.json object. At most 64 keys.",
        )
    )
    config_file: str | None = Field(
        default=None, min_length=1, max_length=4096,
        description="Path to a Hugging Face config.json; relative paths are resolved against the plan file's "
        "directory. Command line only (the operator has no files).",
    )
    config_map_ref: ConfigMapRef | None = Field(
        default=None, description="A ConfigMap holding the config.json. Operator only (the CLI cannot read it)."
    )
    precisions: list[PrecisionName] | None = Field(
        default=None, min_length=1, max_length=20,
        description="Weight precisions to consider (bf16, fp8, int8-w8a8, int4-awq, int4-gptq, ...). "
        "Default: the engine's served set.",
    )
    kv_cache_dtypes: list[KvCacheDtype] = Field(
        default_factory=lambda: ["auto"], min_length=1, max_length=4,
        description="KV-cache dtypes to consider; auto is the engine default (16-bit). Default: [auto].",
    )

    @field_validator("precisions")
    @classmethod
    def _unique_precisions(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            _no_duplicates(value, _canonical_precision)
        return value

    @field_validator("kv_cache_dtypes")
    @classmethod
    def _unique_kv_dtypes(cls, value: list[str]) -> list[str]:
        _no_duplicates(value)
        return value

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        _cel(f"{_count(('name', 'architecture', 'configFile', 'configMapRef'))} == 1",
             "give exactly one of name, architecture, configFile, configMapRef"),
    )

    @model_validator(mode="after")
    def _exactly_one_source(self) -> ModelSource:
        given = [
            alias
            for alias, value in (
                ("name", self.name),
                ("architecture", self.architecture),
                ("configFile", self.config_file),
                ("configMapRef", self.config_map_ref),
            )
            if value is not None
        ]
        if len(given) != 1:
            got = f" (got {', '.join(given)})" if given else ""
            raise _rule("", f"give exactly one of name, architecture, configFile, configMapRef{got}")
        return self


MAX_MTP_DRAFT_TOKENS = 4  # drafts a step: the engines' DeepSeek recipes use 1-3


class MultiTokenPrediction(_SpecModel):
    """Speculative decoding with the model's own multi-token-prediction modules (DeepSeek-V3/R1): each step drafts
    `draftTokens` tokens a sequence and verifies them in the next."""

    draft_tokens: int = Field(
        ge=1, le=MAX_MTP_DRAFT_TOKENS,
        description="Tokens drafted a step (vLLM num_speculative_tokens, SGLang --speculative-num-steps, "
        "TensorRT-LLM num_nextn_predict_layers), 1-4.",
    )
    accepted_per_step: decimal_type(ge="1", le=str(MAX_MTP_DRAFT_TOKENS + 1)) | None = Field(  # type: ignore[valid-type]
        default=None,
        description="Tokens a sequence emits per step on average, the engine's mean acceptance length (SGLang's "
        "'accept len', vLLM's spec-decode metrics), decimal string in [1, draftTokens + 1]. Default: each draft "
        "accepted with probability 0.85 once the one before it was (DeepSeek-V3's report: 85-90% for the first).",
    )

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        _cel("!has(self.acceptedPerStep) || double(self.acceptedPerStep) <= double(self.draftTokens) + 1.0",
             "acceptedPerStep must be at most draftTokens + 1", ".acceptedPerStep"),
    )

    @model_validator(mode="after")
    def _accepted_within_drafts(self) -> MultiTokenPrediction:
        if self.accepted_per_step is not None and float(self.accepted_per_step) > self.draft_tokens + 1:
            raise _rule("acceptedPerStep", f"at most draftTokens + 1 = {self.draft_tokens + 1} tokens a step, "
                        f"got {self.accepted_per_step}")
        return self


class EngineSpec(_SpecModel):
    """The serving engine and the settings it will run with; absent settings take the engine's defaults."""

    name: Literal["vllm", "sglang", "tgi", "tensorrt-llm"] = Field(
        description="Serving engine: vllm, sglang, tgi or tensorrt-llm."
    )
    version: str | None = Field(
        default=None, min_length=1, max_length=32, pattern=ENGINE_VERSION,
        description="Engine release the deployment runs, e.g. 0.11.0: its defaults and its flags are used. "
        "Default: the engine's current pinned release (docs/engines.md).",
    )
    gpu_memory_utilization: UnitFraction | None = Field(
        default=None,
        description="Fraction of GPU memory the engine may use (vLLM --gpu-memory-utilization or the engine's "
        "equivalent), decimal string in (0, 1]. Default: the engine's.",
    )
    max_model_len: int | None = Field(
        default=None, ge=1, le=_MAX_TOKENS,
        description="Longest sequence (prompt + output) in tokens, at most the model's context length. Default: the "
        "shortest power of two holding 99.9% of requests of the workload, at most the model's context length.",
    )
    chunked_prefill: bool | None = Field(default=None, description="Chunked prefill on or off. Default: engine's.")
    prefix_caching: bool | None = Field(default=None, description="Prefix caching on or off. Default: engine's.")
    max_num_batched_tokens: int | None = Field(
        default=None, ge=1, le=_MAX_TOKENS,
        description="Token budget of one scheduler step (the prefill chunk). Default: the engine's.",
    )
    multi_token_prediction: MultiTokenPrediction | None = Field(
        default=None,
        description="Draft tokens with the model's multi-token-prediction modules (vllm, sglang, tensorrt-llm; "
        "models that ship them, such as DeepSeek-V3/R1). Default: off.",
    )
    image: str | None = Field(
        default=None, min_length=1, max_length=_MAX_IMAGE_CHARS, pattern=IMAGE_REFERENCE,
        description="Container image `inferplan render` and the status's manifests use for the engine, e.g. "
        "registry.example.com/vllm/vllm-openai:v0.11.2 (a mirror, or a build with your patches). Default: the "
        "engine's published image for its version and the GPU's vendor (docs/deploy.md).",
    )


class PercentileLengths(_SpecModel):
    """Measured percentiles of a token length; at least two, non-decreasing."""

    p50: int | None = Field(default=None, ge=1, le=_MAX_TOKENS, description="Median length [tokens].")
    p90: int | None = Field(default=None, ge=1, le=_MAX_TOKENS, description="90th percentile [tokens].")
    p95: int | None = Field(default=None, ge=1, le=_MAX_TOKENS, description="95th percentile [tokens].")
    p99: int | None = Field(default=None, ge=1, le=_MAX_TOKENS, description="99th percentile [tokens].")

    def given(self) -> dict[str, int]:
        """The stated percentiles, by name, in increasing order."""
        return {name: value for name in QUANTILE_VALUES if (value := getattr(self, name)) is not None}

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        _cel(f"{_count(tuple(QUANTILE_VALUES))} >= 2",
             "give at least two of p50, p90, p95, p99 to fit a spread (or use p95 beside mean)"),
        *(_cel(" && ".join(f"(!has(self.{lower}) || !has(self.{upper}) || self.{upper} >= self.{lower})"
                           for lower in list(QUANTILE_VALUES)[:i]),
               f"{upper} must be >= {' and '.join(reversed(list(QUANTILE_VALUES)[:i]))} (percentiles are "
               "non-decreasing)", f".{upper}")
          for i, upper in enumerate(list(QUANTILE_VALUES)[1:], start=1)),
    )

    @model_validator(mode="after")
    def _fit_needs_two_rising(self) -> PercentileLengths:
        given = self.given()
        if len(given) < 2:
            raise _rule("", "give at least two of p50, p90, p95, p99 to fit a spread (or use p95 beside mean)")
        names = list(given)
        for lower, upper in itertools.pairwise(names):
            if given[upper] < given[lower]:
                raise _rule(upper, f"must be >= {lower} ({given[lower]})")
        return self


class TokenDistribution(_SpecModel):
    """A token length: its mean and at most one description of its spread (lognormal)."""

    mean: int = Field(ge=1, le=_MAX_TOKENS, description="Mean length [tokens].")
    p95: int | None = Field(
        default=None, ge=1, le=_MAX_TOKENS, description="95th percentile [tokens], >= mean; sets the spread."
    )
    cv: Cv | None = Field(
        default=None, description="Coefficient of variation (std / mean), decimal string in [0, 10]; 0 = fixed."
    )
    percentiles: PercentileLengths | None = Field(
        default=None, description="Measured percentiles (p50, p90, p95, p99); the spread is fitted to them."
    )

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        _cel(f"{_count(('p95', 'cv', 'percentiles'))} <= 1", "give at most one of p95, cv, percentiles"),
        _cel("!has(self.p95) || self.p95 >= self.mean", "p95 must be >= mean", ".p95"),
        *(_cel(f"!has(self.percentiles) || !has(self.percentiles.{name}) || self.percentiles.{name} >= self.mean",
               f"percentiles.{name} must be >= mean", f".percentiles.{name}") for name in ("p95", "p99")),
    )

    def always_one(self) -> bool:
        """Whether every length it describes is exactly one token: mean 1 with no spread (CV 0, p95 1, or every
        percentile given 1). As outputs, no token follows the first."""
        if self.mean != 1:
            return False
        if self.cv is not None:
            return Decimal(self.cv) == 0
        if self.p95 is not None:
            return self.p95 == 1
        return self.percentiles is not None and set(self.percentiles.given().values()) == {1}

    @model_validator(mode="after")
    def _one_spread(self) -> TokenDistribution:
        given = [name for name in ("p95", "cv", "percentiles") if getattr(self, name) is not None]
        if len(given) > 1:
            raise _rule("", f"give at most one of p95, cv, percentiles (got {', '.join(given)})")
        if self.p95 is not None and self.p95 < self.mean:
            raise _rule("p95", f"must be >= mean ({self.mean})")
        if self.percentiles is not None:  # as p95 itself: no lognormal with CV <= 10 has p95 or p99 below its mean
            for name in ("p95", "p99"):
                value = getattr(self.percentiles, name)
                if value is not None and value < self.mean:
                    raise _rule(f"percentiles.{name}", f"must be >= mean ({self.mean})")
        return self


class Burstiness(_SpecModel):
    """How variable the traffic is: a preset, or explicit squared coefficients of variation.

    An object (not a string-or-object union) so that the CRD schema stays structural.
    """

    preset: Literal["steady", "chatbot", "bursty", "agent"] | None = Field(
        default=None,
        description="steady (arrival CV^2 0.25), chatbot (1, Poisson), bursty (4) or agent (8). "
        "Default chatbot when arrivalCV2 is not given.",
    )
    arrival_cv2: Cv2 | None = Field(
        default=None, alias="arrivalCV2",
        description="Squared CV of inter-arrival times, decimal string in [0, 100]: 1 = Poisson, 0 = evenly "
        "spaced, > 1 bursty. Exclusive with preset.",
    )
    service_cv2: Cv2 | None = Field(
        default=None, alias="serviceCV2",
        description="Squared CV of service times, decimal string in [0, 100]. Default: derived from the "
        "token-length distributions.",
    )

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        _cel("!(has(self.preset) && has(self.arrivalCV2))", "give either preset or arrivalCV2, not both",
             ".arrivalCV2"),
    )

    @model_validator(mode="after")
    def _preset_or_arrival(self) -> Burstiness:
        if self.preset is not None and self.arrival_cv2 is not None:
            raise _rule("arrivalCV2", "give either preset or arrivalCV2, not both")
        return self


class Workload(_SpecModel):
    """The traffic to serve."""

    requests_per_second: RequestRate = Field(
        description="Mean request rate the whole deployment must sustain, decimal string > 0, at most "
        "1000000, e.g. \"12.5\"."
    )
    dataset: Literal["sharegpt", "openorca", "sonnet", "random"] | None = Field(
        default=None,
        description="Named length distribution of a benchmark dataset (docs/model.md#datasets): its means and "
        "spread stand in for promptTokens and outputTokens where they are not given, and its spread where they "
        "give a mean only. sharegpt as vLLM's benchmark samples it, openorca as MLPerf uses it, sonnet, random.",
    )
    prompt_tokens: TokenDistribution | None = Field(
        default=None, description="Prompt (input) length distribution. Required unless dataset is given."
    )
    output_tokens: TokenDistribution | None = Field(
        default=None, description="Output (generated) length distribution. Required unless dataset is given."
    )
    burstiness: Burstiness = Field(
        default_factory=Burstiness,
        description="Arrival variability: {preset: steady|chatbot|bursty|agent} or {arrivalCV2, serviceCV2}. "
        "Default: the chatbot preset (Poisson).",
    )
    prefix_cache_hit_rate: HitRate = Field(
        default="0",
        description="Fraction of prompt tokens served from the prefix cache, decimal string in [0, 1). Default 0.",
    )
    source: Literal["declared", "observed"] = Field(
        default="declared",
        description="declared: plan for this workload. observed: plan for the workload spec.observe measures "
        "(rate and mean lengths; the declared distributions' shapes and burstiness are kept), never below "
        "observedFloor x the declared rate; until a measurement exists, the declared workload. Default declared.",
    )
    observed_floor: UnitFraction = Field(
        default="0.5",
        description="With source observed: the rate planned for is at least this fraction of requestsPerSecond, "
        "so that a quiet night does not shrink the fleet to nothing. Decimal string in (0, 1]. Default 0.5.",
    )

    cel_rules: ClassVar[tuple[CelRule, ...]] = tuple(
        _cel(f"has(self.dataset) || has(self.{name})",
             f"{name} is required unless workload.dataset names a dataset preset", f".{name}")
        for name in ("promptTokens", "outputTokens"))

    @model_validator(mode="after")
    def _lengths_or_dataset(self) -> Workload:
        if self.dataset is None:
            for name, value in (("promptTokens", self.prompt_tokens), ("outputTokens", self.output_tokens)):
                if value is None:
                    raise _rule(name, "required unless workload.dataset names a dataset preset")
        return self


class SloBound(_SpecModel):
    """One latency target: the given percentile must stay at or below maxMs."""

    max_ms: int = Field(ge=1, le=86_400_000, description="Largest allowed latency at the percentile [ms].")
    percentile: Percentile = Field(default="p95", description="Percentile the target applies to. Default p95.")


class Slo(_SpecModel):
    """Latency targets; at least one."""

    ttft: SloBound | None = Field(default=None, description="Time to first token.")
    tpot: SloBound | None = Field(
        default=None,
        description="Time per output token after the first (inter-token latency); `itl` is accepted as the same.",
    )
    e2e: SloBound | None = Field(default=None, alias="e2e", description="End-to-end request latency.")
    confidence: Confidence | None = Field(
        default=None,
        description="The probability with which a planned deployment must meet each target: a candidate is feasible "
                    "only if each target holds at the one-sided bound of its prediction at this confidence (the "
                    "prediction times the planner's held-out error at that level, docs/planning.md#slo-confidence). "
                    "Decimal string in [0.5, 0.99], e.g. \"0.8\". Unset: candidates are judged on the predictions "
                    "themselves, and each SLO of the recommendation states the confidence it holds with.",
    )

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        _cel("has(self.ttft) || has(self.tpot) || has(self.itl) || has(self.e2e)",
             "give at least one of ttft, tpot (or itl), e2e"),
        _cel("!(has(self.tpot) && has(self.itl))", "itl and tpot are the same target; give one", ".itl"),
    )

    @model_validator(mode="before")
    @classmethod
    def _itl_is_tpot(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "itl" in data:
            if "tpot" in data:
                raise _rule("itl", "itl and tpot are the same target; give one")
            data = {("tpot" if key == "itl" else key): value for key, value in data.items()}
        return data

    @model_validator(mode="after")
    def _at_least_one(self) -> Slo:
        if self.ttft is None and self.tpot is None and self.e2e is None:
            raise _rule("", "give at least one of ttft, tpot (or itl), e2e")
        return self


class Constraints(_SpecModel):
    """Limits on the deployments the planner may recommend. GPU names are anything the GPU resolver accepts
    (catalog keys, marketing names, node labels such as NVIDIA-H100-80GB-HBM3)."""

    gpu_types: list[GpuName] | None = Field(
        default=None, min_length=1, max_length=64,
        description="GPU types allowed. Default: every datacenter and workstation GPU of the catalog, no consumer "
        "(GeForce) cards; with availableGpus, the types it counts > 0 (operator: every type found in the cluster). "
        "In the cluster, listed types the cluster lacks are left out unless planAbsentGpuTypes is true.",
    )
    plan_absent_gpu_types: bool = Field(
        default=False,
        description="Operator: also plan for the gpuTypes the cluster has no schedulable GPUs of (without an "
        "inventory limit), e.g. to see what buying them would give. Default false.",
    )
    tensor_parallel_sizes: list[Annotated[int, Field(ge=1, le=64, json_schema_extra={"enum": list(TP_SIZES)}),
                                          AfterValidator(_check_tp)]] = Field(
        default_factory=lambda: [1, 2, 4, 8], min_length=1, max_length=7,
        description="Tensor-parallel sizes to consider, powers of two up to 64. Default [1, 2, 4, 8].",
    )
    max_gpus: int | None = Field(default=None, ge=1, le=100_000, description="Most GPUs in total, all replicas.")
    max_gpus_per_type: dict[GpuName, Annotated[int, Field(ge=1, le=100_000)]] = Field(
        default_factory=dict, max_length=64, description="Most GPUs of one type, all replicas (GPU name -> count)."
    )
    max_replicas: int | None = Field(default=None, ge=1, le=10_000, description="Most replicas.")
    min_replicas: int | None = Field(
        default=None, ge=1, le=10_000,
        description="Fewest replicas, for availability through a node or pod failure; 1 is allowed and warned "
        "about. Default 2 (1 when maxReplicas is 1).",
    )
    min_headroom: HitRate = Field(
        default="0.05",
        description="Least share of a deployment's SLO-compliant capacity the planned rate must leave unused, "
        "decimal string in [0, 1). Default 0.05.",
    )
    budget_dollars_per_hour: PositiveDecimal | None = Field(
        default=None, description="Most the whole deployment may cost, USD per hour, decimal string > 0."
    )
    max_utilization: UtilizationCap = Field(
        default="0.8",
        description="Highest utilisation a replica may run at (headroom for bursts), decimal string in (0, 1], "
        "at least 0.01. Default 0.8.",
    )
    prices: dict[GpuName, PositiveDecimal] = Field(
        default_factory=dict, max_length=64,
        description="Your prices, GPU name -> USD per GPU-hour (decimal string); others use the catalog's.",
    )
    available_gpus: dict[GpuName, Annotated[int, Field(ge=0, le=1_000_000)]] | None = Field(
        default=None, max_length=64,
        description="GPUs free to use, GPU name -> count. The operator fills it from the cluster; absent = no "
        "inventory limit.",
    )
    gpus_per_node: dict[GpuName, Annotated[int, Field(ge=1, le=128)]] = Field(
        default_factory=dict, max_length=64,
        description="GPUs per node, GPU name -> count; tensor parallelism stays within a node. Default: the "
        "catalog's common chassis (HGX and OAM boards and PCIe servers 8, GB200 trays and A10 4, GH200 1, "
        "workstation and consumer cards 4); the operator reads nodes.",
    )
    shapes: list[Literal["aggregated", "disaggregated"]] = Field(
        default_factory=lambda: ["aggregated"], min_length=1, max_length=2,
        description="Deployment shapes to plan: aggregated (every replica prefills and decodes its requests) and "
        "disaggregated (a prefill pool and a decode pool, the prompt's KV cache sent between them over the "
        "network; needs an engine with a KV connector and RDMA between the pods). Default [aggregated].",
    )
    max_nodes_per_replica: int = Field(
        default=1, ge=1, le=16,
        description="Most nodes one replica may span: tensor (or expert) parallelism over nodes (a listed TP size "
        "that is a multiple of the node's GPUs), its all-reduces over the network (networkGbps), and on vLLM, "
        "SGLang and TensorRT-LLM up to this many pipeline stages of a whole node each; rendered as a "
        "LeaderWorkerSet. Default 1: a replica stays within a node.",
    )
    network_gbps: int | None = Field(
        default=None, ge=1, le=100_000,
        description="Each GPU's network bandwidth between nodes [Gbit/s]: KV transfers between disaggregated "
        "pools, all-reduces of a replica over nodes, sends between pipeline stages. E.g. 400 for one 400G "
        "InfiniBand or RoCE NIC per GPU, 100 for shared Ethernet. Default: the operator takes the least "
        f"{NETWORK_LABEL} label of the plan's GPU nodes where every one has it, else {DEFAULT_NETWORK_GBPS:g}.",
    )

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        _cel("!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",
             "minReplicas must be <= maxReplicas", ".minReplicas"),
    )

    @model_validator(mode="after")
    def _replica_bounds(self) -> Constraints:
        if self.max_replicas is not None and self.min_replicas is not None and self.max_replicas < self.min_replicas:
            raise _rule("minReplicas", f"must be <= maxReplicas ({self.max_replicas}), got {self.min_replicas}")
        return self

    @field_validator("tensor_parallel_sizes", "shapes")
    @classmethod
    def _unique_entries(cls, value: list[Any]) -> list[Any]:
        _no_duplicates(value)
        return value

    @field_validator("gpu_types", "max_gpus_per_type", "prices", "available_gpus", "gpus_per_node")
    @classmethod
    def _one_name_per_gpu(cls, value: Any) -> Any:
        if value is not None:
            _no_duplicate_gpus(value)
        return value


_PROMETHEUS_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_LABEL_NAME = r"^[a-zA-Z_][a-zA-Z0-9_]*$"
_WINDOW = r"^[1-9][0-9]{0,4}(s|m|h)$"


class CurrentDeployment(_SpecModel):
    """The deployment serving the traffic now, which the predictions are compared with. Fields read from the
    Deployment are overridden by the ones given here."""

    deployment: str | None = Field(
        default=None, min_length=1, max_length=253, pattern=_DNS_SUBDOMAIN,
        description="Name of the Deployment (same namespace) running the engine: replicas from it (ready "
        "replicas when it has a status), GPU type from its node selector, tensor-parallel size, max batch, "
        "precision and KV dtype from the engine's arguments.",
    )
    gpu_type: GpuName | None = Field(default=None, description="GPU type of the replicas.")
    replicas: int | None = Field(default=None, ge=1, le=10_000, description="Replicas serving now.")
    gpus_per_replica: int | None = Field(default=None, ge=1, le=64, description="Tensor-parallel size.")
    max_batch: int | None = Field(default=None, ge=1, le=65_536,
                                  description="Engine cap on running sequences (vLLM --max-num-seqs).")
    precision: PrecisionName | None = Field(default=None, description="Weight precision served.")
    kv_cache_dtype: KvCacheDtype | None = Field(default=None, description="KV dtype.")

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        _cel("has(self.deployment) || (has(self.gpuType) && has(self.replicas))",
             "give deployment, or gpuType and replicas"),
    )

    @model_validator(mode="after")
    def _something_to_compare(self) -> CurrentDeployment:
        if self.deployment is None and (self.gpu_type is None or self.replicas is None):
            raise _rule("", "give deployment, or gpuType and replicas")
        return self


class Observe(_SpecModel):
    """Where the deployment's engine metrics are, and how predictions are checked against them."""

    prometheus: str = Field(
        min_length=1, max_length=63, pattern=_PROMETHEUS_NAME,
        description="Name of a Prometheus endpoint in the operator's INFERPLAN_PROMETHEUS_CONFIG (a plan never "
        "gives a URL).",
    )
    selector: dict[Annotated[str, Field(min_length=1, max_length=128, pattern=_LABEL_NAME),
                             AfterValidator(_check_label_name)],
                   Annotated[str, Field(max_length=256)]] = Field(
        min_length=1, max_length=16,
        description="Label matchers (label -> exact value) that select the deployment's engine series, e.g. "
        "{namespace: serving, model_name: llama-3-8b}. Values are escaped in PromQL.",
    )
    window: Annotated[str, Field(min_length=2, max_length=6, pattern=_WINDOW), AfterValidator(_check_window)] = (
        Field(default="5m", description="Range of the rate() and histogram queries, 30s to 24h, e.g. 5m.")
    )
    current: CurrentDeployment = Field(description="The deployment whose predictions are compared with what "
                                                   "it does.")
    max_error_ratio: ErrorRatio = Field(
        default="0.25",
        description="For a latency percentile without a prediction interval in the status's recommendation: "
        "PredictionAccurate turns False when |predicted - observed| / observed exceeds this (beyond the histogram's "
        "bucket resolution) for driftSeconds; a percentile with an interval is judged against it instead. "
        "Default 0.25.",
    )
    drift_seconds: int = Field(
        default=900, ge=0, le=604_800,
        description="How long an observed percentile must lie outside its prediction interval (or exceed "
        "maxErrorRatio) before PredictionAccurate is False [s]. Default 900.",
    )
    min_requests: int = Field(
        default=50, ge=1, le=1_000_000,
        description="Fewest completed requests in the window for the figures to be used (else "
        "InsufficientTraffic). Default 50.",
    )
    calibrate: bool = Field(
        default=False,
        description="Fit this engine's decode and prefill efficiency on this GPU type from the observed "
        "latencies (bounded, smoothed) and plan with them. Default false.",
    )


_NO_SECOND_TOKEN = ("every output is one token (workload.outputTokens: mean 1, no spread), so no token follows the "
                    "first and TPOT is undefined: give no tpot (or itl) target, or the outputs' real lengths")
# CEL: a TokenDistribution `o` is `TokenDistribution.always_one` (its cv a decimal string).
_CEL_ALWAYS_ONE = (
    "{o}.mean == 1 && (has({o}.cv) ? double({o}.cv) == 0.0 : has({o}.p95) ? {o}.p95 == 1 : "
    "has({o}.percentiles) && " + " && ".join(f"(!has({{o}}.percentiles.{q}) || {{o}}.percentiles.{q} == 1)"
                                            for q in QUANTILE_VALUES) + ")")


class PlanSpec(_SpecModel):
    """The spec of an InferenceCapacityPlan: the model, engine, traffic and targets to plan capacity for."""

    model: ModelSource = Field(description="The model to serve and the precisions to consider.")
    engine: EngineSpec = Field(description="The serving engine and its settings.")
    workload: Workload = Field(description="The traffic to serve.")
    slo: Slo = Field(description="Latency targets (at least one).")
    constraints: Constraints = Field(
        default_factory=Constraints, description="Limits on GPU types, sizes, counts and cost."
    )
    alternatives: int = Field(
        default=5, ge=1, le=20, description="How many alternatives to list beside the recommendation (1-20)."
    )
    verify: bool | None = Field(
        default=None,
        description="Simulate the leading candidates and recommend the cheapest whose simulated percentiles "
        "meet every SLO (their numbers are then marked simulated). Default: on (inferplan plan --no-verify "
        "and INFERPLAN_VERIFY=false in the operator turn the default off).",
    )
    observe: Observe | None = Field(
        default=None,
        description="Operator: read the deployment's engine metrics from Prometheus, compare them with the "
        "predictions for the observed workload, and optionally calibrate. Ignored by the command line.",
    )

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        _cel("!has(self.workload.source) || self.workload.source != 'observed' || has(self.observe)",
             "workload.source observed needs spec.observe (where to observe)", ".workload.source"),
        _cel(f"!(has(self.slo.tpot) || has(self.slo.itl)) || !has(self.workload.outputTokens) || "
             f"!({_CEL_ALWAYS_ONE.format(o='self.workload.outputTokens')})", _NO_SECOND_TOKEN, ".slo.tpot"),
    )

    @model_validator(mode="after")
    def _observed_needs_observe(self) -> PlanSpec:
        if self.workload.source == "observed" and self.observe is None:
            raise _rule("workload.source", "observed needs spec.observe (where to observe)")
        return self

    @model_validator(mode="after")
    def _tpot_needs_a_second_token(self) -> PlanSpec:
        outputs = self.workload.output_tokens
        if self.slo.tpot is not None and outputs is not None and outputs.always_one():
            raise _rule("slo.tpot", _NO_SECOND_TOKEN)
        return self


# ----------------------------------------------------------------------------------------------------------
# Validation errors -> (camelCase path, message)

SPEC_MODELS: tuple[type[BaseModel], ...] = (
    PlanSpec, ModelSource, ConfigMapRef, EngineSpec, Workload, TokenDistribution, PercentileLengths,
    Burstiness, Slo, SloBound, Constraints, Observe, CurrentDeployment,
)


# ----------------------------------------------------------------------------------------------------------
# Parsing


# ----------------------------------------------------------------------------------------------------------
# Resolution to plain numbers


__all__ = [
    "PlanSpec",
]
