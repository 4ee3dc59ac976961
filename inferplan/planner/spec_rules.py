"""The rules a plan spec's fields are checked by: the base of its models, CEL rules for the CRD, decimal bounds, names
of GPUs, models and precisions, label names and windows."""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Annotated, Any, NotRequired, TypedDict

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from inferplan.planner.catalog.architectures import ModelArchitecture
from inferplan.planner.catalog.checkpoints import resolve_served
from inferplan.planner.catalog.gpus import parse_gpu_product, resolve_gpu
from inferplan.planner.catalog.model_configs import architecture_from_inline
from inferplan.planner.catalog.precisions import weight_precision
from inferplan.planner.names import CatalogLookupError

_DECIMAL_PATTERN = r"^[0-9]+(\.[0-9]+)?$"


_MAX_RATE = "1000000"  # requests/s: far beyond any one deployment, and replica counts stay exact integers


_MIN_UTILIZATION = "0.01"  # below 1% a utilisation cap is a typo, and it multiplies the replicas by 100+


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
        resolve_served(name)
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


class _SpecModel(BaseModel):
    """camelCase keys (snake_case accepted from Python), unknown keys and loose types rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", strict=True, frozen=True
    )


_WINDOW_SECONDS = {"s": 1, "m": 60, "h": 3600}


def window_seconds(window: str) -> int:
    """Seconds in a PromQL duration of the form `5m` (validated by the spec's pattern)."""
    return int(window[:-1]) * _WINDOW_SECONDS[window[-1]]


def _check_label_name(name: str) -> str:
    # Prometheus reserves names starting with "__" (__name__ would match the metric's name, not a label).
    if name.startswith("__"):
        raise ValueError(f"label names starting with __ are reserved by Prometheus, got {name!r}")
    return name


MIN_WINDOW_S, MAX_WINDOW_S = 30, 86_400


def _check_window(window: str) -> str:
    if not MIN_WINDOW_S <= window_seconds(window) <= MAX_WINDOW_S:
        raise _rule("", f"must be between 30s and 24h, got {window}")
    return window
