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

import difflib
import itertools
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from statistics import NormalDist
from typing import Annotated, Any, ClassVar, Literal, NotRequired, TypedDict

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from inferplan.planner.catalog.architectures import (
    ModelArchitecture,
    architecture_from_inline,
    load_config_json,
    resolve_model,
)
from inferplan.planner.catalog.checkpoints import native_precision
from inferplan.planner.catalog.datasets import DatasetLengths, dataset_lengths
from inferplan.planner.catalog.engines import DEFAULT_PLAN_PRECISIONS, SERVED_PRECISIONS
from inferplan.planner.catalog.gpus import load_gpu_catalog, parse_gpu_product, resolve_gpu
from inferplan.planner.catalog.precisions import weight_precision
from inferplan.planner.names import CatalogLookupError
from inferplan.planner.quantiles import QUANTILE_VALUES
from inferplan.resource import API_VERSION, KIND

ENGINE_NAMES = ("vllm", "sglang", "tgi", "tensorrt-llm")
KvCacheDtype = Literal["fp16", "bf16", "fp8", "auto"]  # what a plan may name (the CRD's enum)

DEFAULT_PRECISIONS: dict[str, tuple[str, ...]] = {
    name: SERVED_PRECISIONS[name][:DEFAULT_PLAN_PRECISIONS] for name in ENGINE_NAMES
}
"""Weight precisions searched when `model.precisions` is absent: what each engine serves well (the search
skips those a GPU cannot run)."""

BURSTINESS_ARRIVAL_CV2: dict[str, float] = {"steady": 0.25, "chatbot": 1.0, "bursty": 4.0, "agent": 8.0}
"""Squared coefficient of variation of request inter-arrival times per preset (assumed: 1.0 is Poisson)."""

DEFAULT_MIN_REPLICAS = 2
# constraints.networkGbps where neither the plan nor the nodes say: one 400 Gb/s InfiniBand or RoCE NIC per GPU
# (HGX H100/H200, DGX, most GPU clouds).
DEFAULT_NETWORK_GBPS = 400.0
NETWORK_LABEL = "inferplan.io/network-gbps"  # a node label: each GPU's network bandwidth between nodes [Gbit/s]
"""Replicas a plan asks for at least when it says nothing: one node or pod failure, or a rollout, must not stop
the service (docs/planning.md)."""

DEFAULT_LENGTH_CV = 1.0
"""CV of a token length given only as a mean (assumed: chat-like traffic, ShareGPT outputs have about 1.0)."""

_Z95 = NormalDist().inv_cdf(0.95)
MAX_P95_RATIO = math.exp(_Z95 * _Z95 / 2.0)
"""The largest p95/mean a lognormal can have (about 3.87, at sigma = z_0.95)."""

_DECIMAL_PATTERN = r"^[0-9]+(\.[0-9]+)?$"
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_CONFIG_MAP_KEY = r"^[-._a-zA-Z0-9]+$"
_MAX_TOKENS = 10_485_760  # 10 Mi tokens: beyond any model's context
_MAX_CV = 10
_MAX_CV2 = 100
MAX_ARCHITECTURE_KEYS = 64  # model.architecture (and so a ConfigMap's config.json) holds at most this many keys
_MAX_RATE = "1000000"  # requests/s: far beyond any one deployment, and replica counts stay exact integers
_MIN_UTILIZATION = "0.01"  # below 1% a utilisation cap is a typo, and it multiplies the replicas by 100+
IMAGE_REFERENCE = (
    r"^(?:(?:localhost|[a-zA-Z0-9-]+(?:\.[a-zA-Z0-9-]+)+)(?::[0-9]+)?/|[a-zA-Z0-9-]+:[0-9]+/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$"
)
"""A container image reference as the distribution grammar defines it (`[registry[:port]/]path[:tag][@digest]`,
path components lowercase; a first component is a registry when it has a dot or a port, or is localhost), the
form Kubernetes passes to the container runtime."""
_MAX_IMAGE_CHARS = 256  # the distribution limit on a name is 255; status.recommendation.manifests.image holds 256


# ----------------------------------------------------------------------------------------------------------
# Errors


class PlanError(ValueError):
    """A plan that cannot be used: `problems` holds (field path, message) pairs, paths in camelCase.

    `str()` gives one line per problem, `path: message`.
    """

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(f"{path}: {message}" if path else message for path, message in self.problems))


def _rule(subpath: str, message: str) -> PydanticCustomError:
    """A cross-field error reported at `<model path>.<subpath>` (empty subpath: the model itself)."""
    return PydanticCustomError("plan_rule", "{detail}", {"detail": message, "subpath": subpath})


class CelRule(TypedDict):
    """One of the CRD's `x-kubernetes-validations`: a CEL rule over the object (`self`), the message the API
    server answers with, and the field it names (relative to the object)."""

    rule: str
    message: str
    fieldPath: NotRequired[str]


def _cel(rule: str, message: str, field_path: str = "") -> CelRule:
    """A CEL rule that mirrors a model validator. Each spec model with a model validator declares the rules
    that mirror it in `cel_rules`, next to the validator, so that the API server (operator/crd.py puts them in
    the CRD) rejects what the parser rejects, with the same message (tests/operator/test_crd.py checks both
    on the same bad plans)."""
    return CelRule(rule=rule, message=message, fieldPath=field_path) if field_path else CelRule(
        rule=rule, message=message)


def _count(fields: tuple[str, ...]) -> str:
    """CEL: how many of `fields` the object has."""
    return " + ".join(f"(has(self.{name}) ? 1 : 0)" for name in fields)


# ----------------------------------------------------------------------------------------------------------
# Field types


def _require_string(value: Any) -> Any:
    """Numbers where a decimal string belongs get a message that says to quote them."""
    if isinstance(value, bool):
        raise PydanticCustomError("decimal_string", "must be a quoted decimal string such as \"0.5\", got {got}",
                                  {"got": str(value).lower()})
    if isinstance(value, int | float):
        text = str(value)
        example = text if Decimal(text).is_finite() and _is_decimal_text(text) else "12.5"
        raise PydanticCustomError(
            "decimal_string",
            "must be a quoted decimal string: write \"{example}\" (unquoted, YAML reads it as a number; the "
            "spec holds no floats)",
            {"example": example},
        )
    return value


def _is_decimal_text(text: str) -> bool:
    return re.fullmatch(_DECIMAL_PATTERN, text) is not None


DECIMAL_BOUNDS_KEY = "x-inferplan-decimal-bounds"
"""JSON-schema key under which a decimal string's numeric bounds are declared ({"gt": "0", "le": "1"})."""
TP_SIZES = (1, 2, 4, 8, 16, 32, 64)


def _bounds(gt: str | None, ge: str | None, lt: str | None, le: str | None) -> AfterValidator:
    def check(value: str) -> str:
        number = Decimal(value)
        failed = (
            (gt is not None and not number > Decimal(gt))
            or (ge is not None and not number >= Decimal(ge))
            or (lt is not None and not number < Decimal(lt))
            or (le is not None and not number <= Decimal(le))
        )
        if failed:
            parts = [f"{op} {bound}" for op, bound in ((">", gt), (">=", ge), ("<", lt), ("<=", le)) if bound]
            raise ValueError(f"must be {' and '.join(parts)}, got \"{value}\"")
        return value

    return AfterValidator(check)


def decimal_type(*, gt: str | None = None, ge: str | None = None, lt: str | None = None, le: str | None = None) -> Any:
    """A decimal quantity written as a string (`"12.5"`): pattern `^[0-9]+(\\.[0-9]+)?$`, numeric bounds."""
    bounds = {name: bound for name, bound in (("gt", gt), ("ge", ge), ("lt", lt), ("le", le)) if bound is not None}
    return Annotated[
        str,
        # Before the validators, or the schema loses the pattern. The bounds are declared in the schema too
        # (DECIMAL_BOUNDS_KEY) so that the CRD generator can turn them into a CEL rule.
        Field(pattern=_DECIMAL_PATTERN, max_length=24, json_schema_extra={DECIMAL_BOUNDS_KEY: bounds}),
        BeforeValidator(_require_string),
        _bounds(gt, ge, lt, le),
    ]


def _check_gpu_name(name: str) -> str:
    label = parse_gpu_product(name)
    if label.mig_profile or label.shared:
        raise ValueError(
            f"{name!r} is a MIG slice or a shared GPU; the planner sizes whole GPUs, name the full GPU "
            f"({label.base!r})"
        )
    try:
        resolve_gpu(name)
    except CatalogLookupError as exc:
        raise ValueError(str(exc)) from None
    return name


def _check_precision(name: str) -> str:
    try:
        weight_precision(name)
    except CatalogLookupError as exc:
        raise ValueError(str(exc)) from None
    return name


def _check_model_name(name: str) -> str:
    try:
        resolve_model(name)
    except CatalogLookupError as exc:
        raise ValueError(str(exc)) from None
    return name


def _check_architecture(data: dict[str, Any]) -> dict[str, Any]:
    inline_architecture(data)
    return data


def inline_architecture(data: Mapping[str, Any]) -> ModelArchitecture:
    """`architecture_from_inline`, with any failure a ValueError: a TypeError or an arithmetic error on a value
    of an odd type is a problem of the spec, not a crash (pydantic would let it through, uncaught)."""
    try:
        return architecture_from_inline(data)  # raises ValueError naming the field
    except ValueError:
        raise
    except (TypeError, ArithmeticError, RecursionError, MemoryError) as exc:
        raise ValueError(f"unusable architecture ({type(exc).__name__}: {str(exc)[:200]})") from None


def _check_tp(size: int) -> int:
    if size & (size - 1):
        raise ValueError(f"must be a power of two (1, 2, 4, ... 64), got {size}")
    return size


PositiveDecimal = decimal_type(gt="0")
UnitFraction = decimal_type(gt="0", le="1")


# Planner-side limits beyond the schema's bounds (the CRD keeps "> 0" and "> 0 and <= 1", so the API server
# accepts these values and the operator answers Ready=False naming the field): replica counts must stay exact
# integers, and a cap below 1% utilisation is a typo.
def _check_rate_ceiling(value: str) -> str:
    if Decimal(value) > Decimal(_MAX_RATE):
        raise ValueError(f"must be <= {_MAX_RATE} requests/s, got \"{value}\"")
    return value


def _check_utilization_floor(value: str) -> str:
    if Decimal(value) < Decimal(_MIN_UTILIZATION):
        raise ValueError(f"must be >= {_MIN_UTILIZATION} (\"0.8\" is 80%), got \"{value}\"")
    return value


RequestRate = Annotated[PositiveDecimal, AfterValidator(_check_rate_ceiling)]
UtilizationCap = Annotated[UnitFraction, AfterValidator(_check_utilization_floor)]
HitRate = decimal_type(ge="0", lt="1")
Cv = decimal_type(ge="0", le=str(_MAX_CV))
Cv2 = decimal_type(ge="0", le=str(_MAX_CV2))
ErrorRatio = decimal_type(gt="0", le="10")
GpuName = Annotated[str, Field(min_length=1, max_length=64), AfterValidator(_check_gpu_name)]
PrecisionName = Annotated[str, Field(min_length=1, max_length=32), AfterValidator(_check_precision)]
Percentile = Literal["p50", "p90", "p95", "p99"]


def _gpu_key(name: str) -> str:
    return resolve_gpu(name).key


def _no_duplicate_gpus(names: Any) -> None:
    """Two spellings of one GPU (`H100`, `NVIDIA-H100-80GB-HBM3`) in one list or map are an error."""
    seen: dict[str, str] = {}
    for name in names:
        try:
            key = _gpu_key(name)
        except CatalogLookupError:
            continue  # reported on the name itself
        if key in seen:
            raise ValueError(f"{name!r} and {seen[key]!r} both name GPU {key}; give it once")
        seen[key] = name


def _no_duplicates(values: list[Any], canonical: Any = None) -> None:
    seen: dict[Any, Any] = {}
    for value in values:
        key = canonical(value) if canonical else value
        if key in seen:
            raise ValueError(f"{value!r} is listed twice")
        seen[key] = value


def _canonical_precision(name: str) -> str:
    try:
        return weight_precision(name).name
    except CatalogLookupError:
        return name


# ----------------------------------------------------------------------------------------------------------
# The spec models


class _SpecModel(BaseModel):
    """camelCase keys (snake_case accepted from Python), unknown keys and loose types rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", strict=True, frozen=True
    )


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
        "(case and separators ignored).",
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


class EngineSpec(_SpecModel):
    """The serving engine and the settings it will run with; absent settings take the engine's defaults."""

    name: Literal["vllm", "sglang", "tgi", "tensorrt-llm"] = Field(
        description="Serving engine: vllm, sglang, tgi or tensorrt-llm."
    )
    version: str | None = Field(
        default=None, min_length=1, max_length=32, pattern=r"^v?[0-9]+\.[0-9]+(\.[0-9]+)?([.+-][A-Za-z0-9.]+)?$",
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
        description="Longest sequence (prompt + output) in tokens. Default: the model's context length.",
    )
    chunked_prefill: bool | None = Field(default=None, description="Chunked prefill on or off. Default: engine's.")
    prefix_caching: bool | None = Field(default=None, description="Prefix caching on or off. Default: engine's.")
    max_num_batched_tokens: int | None = Field(
        default=None, ge=1, le=_MAX_TOKENS,
        description="Token budget of one scheduler step (the prefill chunk). Default: the engine's.",
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
        description="GPU types allowed. Default: every catalog GPU (operator: every type found in the cluster). "
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
        "catalog's common chassis (HGX and OAM boards 8, GH200 1, consumer cards 4); the operator reads nodes.",
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
_WINDOW_SECONDS = {"s": 1, "m": 60, "h": 3600}
MIN_WINDOW_S, MAX_WINDOW_S = 30, 86_400


def window_seconds(window: str) -> int:
    """Seconds in a PromQL duration of the form `5m` (validated by the spec's pattern)."""
    return int(window[:-1]) * _WINDOW_SECONDS[window[-1]]


def _check_label_name(name: str) -> str:
    # Prometheus reserves names starting with "__" (__name__ would match the metric's name, not a label).
    if name.startswith("__"):
        raise ValueError(f"label names starting with __ are reserved by Prometheus, got {name!r}")
    return name


def _check_window(window: str) -> str:
    if not MIN_WINDOW_S <= window_seconds(window) <= MAX_WINDOW_S:
        raise _rule("", f"must be between 30s and 24h, got {window}")
    return window


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
    )

    @model_validator(mode="after")
    def _observed_needs_observe(self) -> PlanSpec:
        if self.workload.source == "observed" and self.observe is None:
            raise _rule("workload.source", "observed needs spec.observe (where to observe)")
        return self


# ----------------------------------------------------------------------------------------------------------
# Validation errors -> (camelCase path, message)

SPEC_MODELS: tuple[type[BaseModel], ...] = (
    PlanSpec, ModelSource, ConfigMapRef, EngineSpec, Workload, TokenDistribution, PercentileLengths,
    Burstiness, Slo, SloBound, Constraints, Observe, CurrentDeployment,
)
_ALIAS_OF: dict[str, str] = {}
for _model in SPEC_MODELS:
    for _name, _field in _model.model_fields.items():
        _ALIAS_OF[_name] = _field.alias or _name
_ALIASES = sorted(set(_ALIAS_OF.values()))


def _path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part == "[key]":
            pass
        else:
            name = _ALIAS_OF.get(part, part)
            path = f"{path}.{name}" if path else name
    return path


def _message(error: Mapping[str, Any]) -> str:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    value = error.get("input")
    if kind == "extra_forbidden":
        name = str(error["loc"][-1]) if error["loc"] else ""
        close = difflib.get_close_matches(name, _ALIASES, n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(close)}?" if close else " (keys are camelCase)"
        return f"unknown field{hint}"
    if kind == "missing":
        return "required"
    if kind == "string_pattern_mismatch" and ctx.get("pattern") == _DECIMAL_PATTERN:
        return f"must be a decimal number in a string, such as \"12.5\" (digits, optional fraction), got {value!r}"
    if kind == "string_pattern_mismatch" and ctx.get("pattern") == IMAGE_REFERENCE:
        return ("must be a container image reference such as vllm/vllm-openai:v0.11.2 ([registry[:port]/]path[:tag]"
                f"[@sha256:digest], path in lowercase), got {value!r}")
    got = f", got {value!r}" if isinstance(value, str | int | float | bool) else ""
    if kind in _BOUND_WORDS:
        op, key = _BOUND_WORDS[kind]
        return f"must be {op} {ctx.get(key)}{got}"
    if kind == "literal_error":
        return f"must be {ctx.get('expected')}{got}"
    if kind in {"model_type", "model_attributes_type", "dict_type"}:
        return f"must be a mapping, got {type(value).__name__}"
    if kind == "list_type":
        return f"must be a list, got {type(value).__name__}"
    message = str(error["msg"])
    if kind == "value_error":
        return message.removeprefix("Value error, ")
    if kind in {"int_type", "bool_type", "string_type", "int_from_float", "string_too_long", "string_too_short",
                "string_pattern_mismatch"}:
        message += got
    return message


_BOUND_WORDS = {
    "greater_than": (">", "gt"),
    "greater_than_equal": (">=", "ge"),
    "less_than": ("<", "lt"),
    "less_than_equal": ("<=", "le"),
}


def _problems(exc: ValidationError) -> list[tuple[str, str]]:
    problems = []
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        subpath = (error.get("ctx") or {}).get("subpath")
        if error["type"] == "plan_rule" and subpath:
            loc = (*loc, subpath)
        problems.append((_path(loc), _message(error)))
    return problems


# ----------------------------------------------------------------------------------------------------------
# Parsing


def parse_plan(data: Mapping[str, Any]) -> PlanSpec:
    """Validate a decoded plan: the bare spec, or a whole `InferenceCapacityPlan` manifest.

    A mapping with `apiVersion`, `kind` or `spec` is read as a manifest. Every problem found is raised at
    once as a PlanError; paths are relative to the spec (`workload.promptTokens.p95`), manifest-level
    problems are named by their key (`apiVersion`).
    """
    if not isinstance(data, Mapping):
        raise PlanError([("", f"a plan must be a mapping, got {type(data).__name__}")])
    problems: list[tuple[str, str]] = []
    spec_data: Any = data
    if {"apiVersion", "kind", "spec"} & set(data):
        spec_data, problems = _unwrap_manifest(data)
    if isinstance(spec_data, Mapping):
        try:
            spec = PlanSpec.model_validate(dict(spec_data))
        except ValidationError as exc:
            problems += _problems(exc)
        else:
            if not problems:
                return spec
    raise PlanError(problems)


def _unwrap_manifest(data: Mapping[str, Any]) -> tuple[Any, list[tuple[str, str]]]:
    problems = []
    if data.get("apiVersion") != API_VERSION:
        problems.append(("apiVersion", f"must be {API_VERSION}, got {data.get('apiVersion')!r}"))
    if data.get("kind") != KIND:
        problems.append(("kind", f"must be {KIND}, got {data.get('kind')!r}"))
    metadata = data.get("metadata")
    if metadata is not None and not isinstance(metadata, Mapping):
        problems.append(("metadata", f"must be a mapping, got {type(metadata).__name__}"))
    for key in data:
        if key not in {"apiVersion", "kind", "metadata", "spec", "status"}:
            problems.append((str(key), "unknown field; a manifest has apiVersion, kind, metadata, spec (status)"))
    spec = data.get("spec")
    if spec is None:
        problems.append(("spec", "required"))
    elif not isinstance(spec, Mapping):
        problems.append(("spec", f"must be a mapping, got {type(spec).__name__}"))
    return spec, problems


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects a key given twice in one mapping (YAML would silently keep the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is given twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_plan_file(path: str | Path) -> PlanSpec:
    """Read and validate a plan file, YAML or JSON (`.json`), bare spec or whole manifest.

    Unreadable files and syntax errors become a PlanError naming the file (and line); validation problems
    are all collected into one PlanError. Resolve relative `model.configFile` paths by passing the file's
    directory to `resolve_plan`.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanError([(str(path), f"cannot read the file: {exc}")]) from None
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PlanError(
                [(str(path), f"malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}")]
            ) from None
    else:
        try:
            data = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass: no arbitrary objects
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = getattr(exc, "problem", None) or str(exc)
            raise PlanError([(str(path), f"malformed YAML{where}: {problem}")]) from None
    if not isinstance(data, Mapping):
        raise PlanError([(str(path), f"expected a mapping at the top level, got {type(data).__name__}")])
    return parse_plan(data)


# ----------------------------------------------------------------------------------------------------------
# Resolution to plain numbers


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
    served_model: str                 # what the engine loads: model.name as written, else the architecture's id
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


def _architecture(source: ModelSource, base_dir: Path | None) -> ModelArchitecture:
    if source.name is not None:
        return resolve_model(source.name)
    if source.architecture is not None:
        return inline_architecture(source.architecture)
    if source.config_file is not None:
        path = Path(source.config_file).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = Path(base_dir) / path
        return load_config_json(path)
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
        arch = _architecture(spec.model, base_dir)
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
    limits = spec.constraints
    if limits.available_gpus and limits.gpu_types is None and not any(limits.available_gpus.values()):
        problems.append(("constraints.availableGpus", "no GPU type has a count > 0 and constraints.gpuTypes is not "
                                                      "given: there is no GPU to plan for"))
    if problems:
        raise PlanError(problems)

    if spec.model.precisions is None:
        precisions = DEFAULT_PRECISIONS[engine.name]
        # A model published only in a format outside the engine's defaults (gpt-oss: MXFP4) is planned in it too.
        native = native_precision(spec.model.name or arch.repo_id)
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
        served_model=spec.model.name or arch.repo_id,
        engine=engine.name,
        engine_version=engine.version,
        precisions=tuple(precisions),
        precisions_listed=spec.model.precisions is not None,
        kv_dtypes=tuple(spec.model.kv_cache_dtypes),
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


__all__ = [
    "BURSTINESS_ARRIVAL_CV2",
    "DEFAULT_PRECISIONS",
    "PlanError",
    "PlanRequest",
    "PlanSpec",
    "SloTarget",
    "load_plan_file",
    "parse_plan",
    "resolve_plan",
]
