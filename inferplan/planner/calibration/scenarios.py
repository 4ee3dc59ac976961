"""Scenario files: published measurements of LLM serving, one measured value per JSON line.

The format is specified in docs/scenarios.md (the shared `SCENARIOS.md` format). Reading a file never
crashes on a bad line: each bad line becomes a `ScenarioError` naming the line and the field, and the
good lines are returned beside the errors.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import date
from pathlib import Path
from typing import Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from inferplan.planner.names import normalize_name

METRIC_UNITS: dict[str, str] = {
    "decode_tps_single": "tokens/s/stream",
    "output_tps_total": "output tokens/s",
    "requests_per_s": "requests/s",
    "ttft_ms_mean": "ms",
    "ttft_ms_p50": "ms",
    "ttft_ms_p99": "ms",
    "tpot_ms_mean": "ms",
    "tpot_ms_p50": "ms",
    "tpot_ms_p99": "ms",
    "itl_ms_mean": "ms",
    "e2e_ms_mean": "ms",
    "kv_cache_tokens": "tokens",
    "max_concurrency": "x (requests of max_model_len)",
    "weights_gib": "GiB/GPU",
    "activation_peak_gib": "GiB/GPU",
    "kv_cache_gib": "GiB/GPU",
}
METRICS = tuple(METRIC_UNITS)
ENGINES = ("vllm", "sglang", "tensorrt-llm", "llama.cpp", "lmdeploy", "mlc-llm", "exllama", "tgi")

Metric = Literal[
    "decode_tps_single", "output_tps_total", "requests_per_s", "ttft_ms_mean", "ttft_ms_p50", "ttft_ms_p99",
    "tpot_ms_mean", "tpot_ms_p50", "tpot_ms_p99", "itl_ms_mean", "e2e_ms_mean", "kv_cache_tokens",
    "max_concurrency", "weights_gib", "activation_peak_gib", "kv_cache_gib",
]
# Bounds far above any measured run, so that a typo (a count of 1e19) is a bad line, not an allocation.
MAX_COUNT = 10**6  # requests, clients, prompts, sequences, GPUs
MAX_TOKENS = 10**8  # tokens of a request, a context or a step
PositiveInt = Annotated[int, Field(ge=1, le=MAX_COUNT)]
TokenCount = Annotated[int, Field(ge=1, le=MAX_TOKENS)]
NonNegativeTokens = Annotated[int, Field(ge=0, le=MAX_TOKENS)]

KvCache = Literal["fp16", "bf16", "fp8", "auto"]
# Common spellings of a `kv_cache` value, each of one meaning, read as that value (case and separators ignored), as
# `predict.WEIGHT_SPELLINGS` reads the weights': vLLM's and SGLang's --kv-cache-dtype name the FP8 element format
# (`fp8_e4m3`, `fp8_e5m2`), torch names the 16-bit dtypes. Each is a byte or two a KV element, as its value's.
KV_SPELLINGS: dict[str, str] = {
    "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "float8_e4m3fn": "fp8", "float8_e5m2": "fp8",
    "bfloat16": "bf16", "float16": "fp16", "half": "fp16",
}
_KV_KEYS = {normalize_name(spelt): value for spelt, value in
            {**{value: value for value in get_args(KvCache)}, **KV_SPELLINGS}.items()}


class _Strict(BaseModel):
    # Strict types: the format gives each key's JSON type, and a quoted number or boolean ("2", "yes") is a bad
    # line, not a value pydantic guesses.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class SingleLoad(_Strict):
    kind: Literal["single"]


class StaticBatchLoad(_Strict):
    kind: Literal["static_batch"]
    value: PositiveInt


class ConcurrencyLoad(_Strict):
    kind: Literal["concurrency"]
    value: PositiveInt


class BurstLoad(_Strict):
    kind: Literal["burst"]
    value: PositiveInt


class PoissonLoad(_Strict):
    kind: Literal["poisson"]
    rate: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None
    # The key is part of the shape, null where not stated ("`num_prompts` may be null"): a load without it is a bad
    # line, as a line without one of its keys is.
    num_prompts: PositiveInt | None

    @field_validator("rate", mode="before")
    @classmethod
    def _finite_rate(cls, rate: object) -> object:
        if isinstance(rate, float) and rate == float("inf"):
            raise ValueError('an infinite rate sends every request at once: write {"kind": "burst", "value": N}')
        return rate


class OfflineLoad(_Strict):
    kind: Literal["offline"]
    num_prompts: PositiveInt | None  # always present, may be null (as PoissonLoad's)


class StartupLoad(_Strict):
    kind: Literal["startup"]


Load = Annotated[
    SingleLoad | StaticBatchLoad | ConcurrencyLoad | BurstLoad | PoissonLoad | OfflineLoad | StartupLoad,
    Field(discriminator="kind"),
]


class Scenario(_Strict):
    """One measured value and the conditions it was measured under (all 29 keys of the format)."""

    id: Annotated[str, Field(min_length=1, max_length=300, pattern=r"^[a-z0-9._-]+$")]
    source: str
    detail: str
    model: Annotated[str, Field(min_length=1)]
    gpu: str | None
    gpu_variant_assumed: bool
    gpus: PositiveInt
    tensor_parallel: PositiveInt | None
    pipeline_parallel: PositiveInt
    replicas: PositiveInt | None
    engine: Literal["vllm", "sglang", "tensorrt-llm", "llama.cpp", "lmdeploy", "mlc-llm", "exllama", "tgi"] | None
    engine_version: str | None
    weights: str
    kv_cache: KvCache
    input_tokens: NonNegativeTokens | None
    output_tokens: NonNegativeTokens | None
    dataset: str | None
    load: Load
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] | None
    max_model_len: TokenCount | None
    max_num_seqs: PositiveInt | None
    max_num_batched_tokens: TokenCount | None
    prefix_caching: bool | None
    metric: Metric
    value: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    unit: str
    includes_prefill: bool | None
    notes: str
    suspect: bool

    @field_validator("unit")
    @classmethod
    def _unit_matches_metric(cls, unit: str, info: object) -> str:
        metric = getattr(info, "data", {}).get("metric")
        if metric is not None and METRIC_UNITS[metric] != unit:
            raise ValueError(f"unit {unit!r} does not match metric {metric!r} (expected {METRIC_UNITS[metric]!r})")
        return unit

    @field_validator("kv_cache", mode="before")
    @classmethod
    def _kv_spelling(cls, kv_cache: object) -> object:
        # A spelling of one value is that value (`KV_SPELLINGS`); anything else is left to the enum to refuse.
        return _KV_KEYS.get(normalize_name(kv_cache), kv_cache) if isinstance(kv_cache, str) else kv_cache

    @field_validator("includes_prefill")
    @classmethod
    def _prefill_only_of_a_decode_speed(cls, includes_prefill: bool | None, info: object) -> bool | None:
        # The format states it for `decode_tps_single` only, null elsewhere: a TPOT or throughput "with the prefill
        # included" would be another definition of its metric, which no prediction follows.
        metric = getattr(info, "data", {}).get("metric")
        if includes_prefill is not None and metric is not None and metric != "decode_tps_single":
            raise ValueError(f"includes_prefill is stated for decode_tps_single only (null elsewhere), not for "
                             f"metric {metric!r}")
        return includes_prefill

    # The date another line of the same file and source revision gives, for a line whose notes give none
    # (`read_scenarios`); not part of the format.
    _revision_published: date | None = PrivateAttr(default=None)

    @property
    def published(self) -> date | None:
        """When the source was published, a bound on when the measurement was made: where the notes date it by
        an arXiv identifier (`arXiv:2411.00136`: November 2024, taken as its first day), else where another
        line of its file from the same source revision does (`source_revision`; a figure's lines often say
        only "same paper as above")."""
        return notes_date(self.notes) or self._revision_published

    @property
    def version(self) -> str | None:
        """The engine version the line ran: `engine_version`, else an approximate release the notes give in
        parentheses where the field is null (`vLLM V0 (~0.6.4, version not stated)`)."""
        if self.engine_version:
            return self.engine_version
        match = re.search(r"\(~(\d+\.\d+(?:\.\d+)?)[,;)]", self.notes)
        return f"~{match.group(1)}" if match else None

    @property
    def source_revision(self) -> str:
        """The document the line was read from, at its revision: a GitHub file's repository and commit
        (`github.com/owner/repo@commit`), any other URL without its fragment."""
        match = re.match(r"https?://(?:www\.)?github\.com/([^/]+)/([^/]+)/(?:blob|tree|raw)/([^/#?]+)", self.source)
        if match:
            return f"github.com/{match.group(1)}/{match.group(2)}@{match.group(3)}"
        return self.source.split("#", 1)[0]

    @property
    def source_name(self) -> str:
        """A short name for the source: the repository owner for GitHub URLs, else the host; for a source without
        one (a local file, `file:///home/me/lab-a/results.md`, or a name) its text without the scheme, its slashes
        as dashes (`home-me-lab-a-results.md`), so that two such sources stay two, and the name is a file name
        (`leave_one_source_out.py --save`)."""
        parts = self.source.split("/")
        if len(parts) > 3 and parts[2].endswith("github.com"):
            return parts[3]
        if len(parts) > 2 and parts[0].endswith(":") and parts[1] == "" and parts[2]:
            return parts[2]
        text = re.sub(r"^[A-Za-z][A-Za-z0-9+.-]*:", "", self.source.strip())
        return "-".join(part for part in text.split("/") if part) or "unnamed-source"


def notes_date(notes: str) -> date | None:
    """The publication date an arXiv identifier in `notes` gives (`arXiv:2411.00136`: 2024-11-01), or None."""
    match = re.search(r"arXiv:\s*(\d{2})(\d{2})\.\d{4,5}", notes)
    if not match or not 1 <= int(match.group(2)) <= 12:
        return None
    return date(2000 + int(match.group(1)), int(match.group(2)), 1)


def _date_by_revision(scenarios: list[Scenario]) -> None:
    """Give each undated line the date that its file's other lines from the same source revision state (the
    latest, should they differ)."""
    dates: dict[str, date] = {}
    for row in scenarios:
        when = notes_date(row.notes)
        if when is not None and when > dates.get(row.source_revision, date.min):
            dates[row.source_revision] = when
    for row in scenarios:
        if notes_date(row.notes) is None and row.source_revision in dates:
            row._revision_published = dates[row.source_revision]


@dataclass(frozen=True)
class ScenarioError:
    """A line of a scenario file that could not be read; `field` is the offending key (or None)."""

    line: int
    field: str | None
    message: str

    def __str__(self) -> str:
        where = f"line {self.line}" + (f", field {self.field!r}" if self.field else "")
        return f"{where}: {self.message}"


@dataclass(frozen=True)
class ScenarioFile:
    scenarios: tuple[Scenario, ...]
    errors: tuple[ScenarioError, ...]
    lines: tuple[int, ...]  # the line number of each scenario, same order


def parse_scenario_line(text: str, line: int) -> Scenario | ScenarioError:
    """Parse one JSON line; a bad line gives a `ScenarioError` naming the line and the first bad field."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return ScenarioError(line, None, f"not valid JSON ({exc.msg} at column {exc.colno})")
    except RecursionError:
        return ScenarioError(line, None, "not valid JSON (nested too deeply)")
    if not isinstance(data, dict):
        return ScenarioError(line, None, "expected a JSON object")
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = [str(p) for p in first["loc"] if not str(p).startswith(("SingleLoad", "function-"))]
        field = ".".join(loc) or None
        extra = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        return ScenarioError(line, field, f"{first['msg']}{extra}")


def read_scenarios(path: str | Path) -> ScenarioFile:
    """Read a scenario file; bad lines are collected as errors and skipped, blank lines ignored."""
    scenarios: list[Scenario] = []
    errors: list[ScenarioError] = []
    lines: list[int] = []
    seen: dict[str, int] = {}
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8-sig" if number == 1 else "utf-8")  # a BOM may open the file
            except UnicodeDecodeError as exc:
                errors.append(ScenarioError(number, None, f"not valid UTF-8 (byte {exc.start})"))
                continue
            if not text.strip():
                continue
            parsed = parse_scenario_line(text, number)
            if isinstance(parsed, ScenarioError):
                errors.append(parsed)
            elif parsed.id in seen:
                message = f"duplicate id {parsed.id!r} (first on line {seen[parsed.id]})"
                errors.append(ScenarioError(number, "id", message))
            else:
                seen[parsed.id] = number
                scenarios.append(parsed)
                lines.append(number)
    _date_by_revision(scenarios)
    return ScenarioFile(tuple(scenarios), tuple(errors), tuple(lines))


def read_scenario_files(paths: Sequence[str | Path]) -> list[tuple[Path, ScenarioFile]]:
    """Read files whose rows are pooled (a fit on several files): each as `read_scenarios` reads it, and a line whose
    id an earlier file gave is an error of its own file and left out, as a repeated id within one file is. Ids key
    the rows (SCENARIOS.md), so a file given twice, or a subset of one beside it, would otherwise count each of
    those rows twice."""
    out: list[tuple[Path, ScenarioFile]] = []
    seen: dict[str, tuple[Path, int]] = {}
    for given in paths:
        path = Path(given)
        parsed = read_scenarios(path)
        kept: list[Scenario] = []
        lines: list[int] = []
        errors = list(parsed.errors)
        for row, number in zip(parsed.scenarios, parsed.lines, strict=True):
            if row.id in seen:
                first, line = seen[row.id]
                errors.append(ScenarioError(number, "id", f"duplicate id {row.id!r} (first in {first}, line {line})"))
                continue
            seen[row.id] = (path, number)
            kept.append(row)
            lines.append(number)
        errors.sort(key=lambda e: e.line)
        out.append((path, replace(parsed, scenarios=tuple(kept), errors=tuple(errors), lines=tuple(lines))))
    return out


def read_pooled(paths: Sequence[str | Path]) -> tuple[list[Scenario], list[str]]:
    """The rows of `paths` pooled as `read_scenario_files` reads them, and one message per bad line, naming its file
    (`FILE: line N: ...`), for the caller to print."""
    rows: list[Scenario] = []
    bad: list[str] = []
    for path, parsed in read_scenario_files(paths):
        bad += [f"{path}: {error}" for error in parsed.errors]
        rows += parsed.scenarios
    return rows, bad
