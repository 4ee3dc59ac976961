"""Prediction intervals: how far a measured value falls from the model's prediction, from held-out residuals.

Every interval is a central interval of the signed log residual `log(measured / predicted)` of rows predicted by
a fit that never saw their source (`bench/leave_one_source_out.py --predictions`), grouped by what a prediction
rests on (`Evidence`): the metric, the model kind (dense, MoE, MLA), the engine's factor line, the GPU family, the
load kind, and whether that (engine line, family) pair had measured lines in the fit. `data/intervals.json` holds,
per group of at least `MIN_ROWS` rows, the split-conformal bounds at each level of `LEVELS`; a query takes the
finest group that has them (`group_keys`). `scripts/derive_intervals.py` writes the file (docs/model.md,
"Prediction intervals"; docs/calibration.md for regenerating it).

An extrapolated pair (no measured line of its engine line on its GPU family) takes the union of the interval of
the extrapolated rows' group and that of the nearest measured evidence for the same query (the same metric and
kind on the engine line's other families, else coarser): never narrower than a measured pair's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from inferplan.planner.catalog.checkpoints import resolve_served
from inferplan.planner.catalog.gpus import resolve_gpu
from inferplan.planner.names import CatalogLookupError

if TYPE_CHECKING:
    from inferplan.planner.model.factors import FactorSet

CONFIDENCES = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)
"""The confidences an interval or a plan's SLO check is stated at: the range a plan may ask for."""
LEVELS = (0.0, 0.2, 0.4, *CONFIDENCES[:-1], 0.98, 0.99)
"""The central levels whose bounds the data file stores; a level between two is interpolated linearly. The levels
below 0.5 and 0.98 serve the one-sided bounds (`upper_log_bound`): a one-sided bound at confidence c is the upper
end of the central interval at level 2c - 1."""

UNMODELLED_KINDS = frozenset({"mla"})
"""Model kinds the step model does not represent (`predict.unmodelled`). Their errors are the model's missing terms,
not the spread of the modelled rows, so a query of theirs rests on its kind's residuals alone where there are any:
their walk pools its kind's rows by quantity (the TTFT metrics, the TPOT metrics, ...) and then by metric class
before it pools them with the modelled rows (`group_keys`; a published source measures a metric of such a model
on a dozen lines, fewer than `MIN_ROWS`). Where its kind has no group in its metric class at all, a query takes the
class's widest bounds at the highest level at every level: no evidence says how far off such a prediction is, so
no confidence narrows it (`IntervalTable._unmodelled`)."""

DEFAULT_CONFIDENCE = 0.8
GROUPS_JOINED = 2
"""A query's bounds join this many groups of its walk, finest first. Held out by source (scripts/derive_intervals.py,
2026-12-04), the 80% intervals covered 75.2% of 970 rows with the finest group alone and 79.6% with it and its parent
(ttft_ms_mean 69.6% -> 74.1%, tpot_ms_mean 77.3% -> 85.3%); weighing each source alike in a group, 69.3%."""
BOUND_GROUPS_JOINED = 1
"""Groups a one-sided bound (`upper_log_bound`, the SLO checks) joins: the finest alone. Held out by source
(scripts/derive_intervals.py, 2026-12-06), the measured latency stayed within the one-sided bound at 0.8 on 82.3%
of 537 latency rows (87.7% with two groups joined), at 0.9 on 91.1% (92.6%), at 0.7 on 76.7% (83.1%); the central
intervals keep two (`GROUPS_JOINED`), whose 80% ones covered 79.7% of all rows with one, 83.3% with two."""
MIN_ROWS = 20
"""Rows a group needs for bounds of its own; a smaller one falls back to the next coarser group."""

METRIC_CLASSES = {
    "latency": ("ttft_ms_mean", "ttft_ms_p50", "ttft_ms_p99", "tpot_ms_mean", "tpot_ms_p50", "tpot_ms_p99",
                "itl_ms_mean", "e2e_ms_mean"),
    "throughput": ("decode_tps_single", "output_tps_total", "requests_per_s"),
    "memory": ("kv_cache_tokens", "max_concurrency", "weights_gib", "activation_peak_gib", "kv_cache_gib"),
}
_CLASS_OF = {metric: name for name, metrics in METRIC_CLASSES.items() for metric in metrics}

PLAN_METRICS = {
    "ttft": {0.5: "ttft_ms_p50", 0.9: "ttft_ms_p99", 0.95: "ttft_ms_p99", 0.99: "ttft_ms_p99"},
    "tpot": {0.5: "tpot_ms_p50", 0.9: "tpot_ms_p99", 0.95: "tpot_ms_p99", 0.99: "tpot_ms_p99"},
    "e2e": {q: "e2e_ms_mean" for q in (0.5, 0.9, 0.95, 0.99)},
}
"""The scenario metric whose held-out errors stand for each (metric, quantile) a plan predicts: the published runs
measure TTFT and TPOT at p50 and p99 (a p90 or p95 reads the p99's, the wider) and the end-to-end time as a mean
only."""


@dataclass(frozen=True)
class Evidence:
    """What one prediction rests on: the groups of residuals its interval is read from."""

    metric: str  # a scenario metric (`scenarios.METRICS`)
    kind: str  # "dense" | "moe" | "mla"
    engine_line: str | None  # `engines.factor_key`
    family: str | None  # GPU family
    load: str  # a scenario load kind; plans predict "poisson"
    measured: bool  # the (engine line, family) pair had measured lines in the fit


def group_keys(evidence: Evidence) -> tuple[str, ...]:
    """The keys of the groups `evidence` reads, finest first. The measured path narrows by engine line, GPU family
    and load; rows of an extrapolated pair are few, so theirs stops at the metric and model kind."""
    e = evidence
    metric_class = f"class:{_CLASS_OF.get(e.metric, 'other')}"
    # Tails keep AMD and NVIDIA apart before the metric pools them: one source's ROCm preemption storms (vLLM 0.6 on
    # MI300X, TPOT p99 8-150x the prediction) must not widen every CUDA plan's p99 (held out, tpot_ms_p99 covered
    # 68.6% either way before a tail took its median's spread, `TAIL_OF`). Other metrics pool both vendors: apart,
    # their held-out coverage fell from 75.5% to 71.6%.
    # The load kind narrows only the measured pair's own group: pooled levels by load (metric x kind x load, metric x
    # load) covered less held out (scripts/derive_intervals.py, 2026-12-04: 79.4% of 970 rows, not 79.9%;
    # ttft_ms_p50 72.3%, not 77.1%; the one-sided 80% bounds of the latency rows 77.2%, not 79.1%).
    def within_vendor(keys: tuple[str, ...]) -> tuple[str, ...]:
        """For a tail, every level of `keys` within the vendor first (a query joins its group's parent too)."""
        if e.metric not in TAIL_METRICS:
            return keys
        return (*(f"{key}|vendor:{_vendor(e.family)}" for key in keys), *keys)

    kind, modelled = (f"{e.metric}|{e.kind}",), (e.metric, metric_class, "*")
    if e.kind in UNMODELLED_KINDS:  # its own kind's errors, by quantity and class, before the modelled rows'
        kind += (f"{_quantity(e.metric)}|{e.kind}", f"{metric_class}|{e.kind}")
        pooled = (*within_vendor(kind), *within_vendor(modelled))
    else:
        pooled = within_vendor((*kind, *modelled))
    if not e.measured:
        return pooled
    pair = f"{e.metric}|{e.kind}|{e.engine_line}|{e.family}"
    return (f"{pair}|{e.load}", pair, f"{e.metric}|{e.kind}|{e.engine_line}", *pooled)


TAIL_METRICS = frozenset({"ttft_ms_p99", "tpot_ms_p99"})
"""The metrics whose groups split AMD from NVIDIA before pooling (`group_keys`)."""

TAIL_OF = {"ttft_ms_p99": "ttft_ms_p50", "tpot_ms_p99": "tpot_ms_p50"}
"""A tail percentile's median. A tail's prediction rests on its median's and adds the spread around it, so its
bounds spread at least as far as its median's beyond their centres (the level-0 bounds; `_at_least_the_median`).
A group of tails is small (35 tpot_ms_p99 rows against 78 at p50), and where its rows happened to fall close, its
bounds came out narrower than the median's. Held out by source (scripts/derive_intervals.py, 2026-12-04), the 80%
intervals of tpot_ms_p99 covered 82.9% of 35 rows (68.6% without the rule), ttft_ms_p99 80.0% of 55 (74.5%), all
970 rows 80.5% (79.7%); the one-sided bounds at 80% are unchanged (79.1% of the latency rows), and at 0.5 (the
tail's centre) they are its own. The plain union with the median's bounds covered 80.3% (ttft_ms_p99 76.4%) and
carried the median's bias into the tail: a TPOT p95 of 9.5 ms against a 12 ms target held with no confidence at
all. Shifting the median's bounds by the difference of the two centres covered as much but moved the tail's
centre by half the width of the median's level-0 bounds (a union of two groups' medians): an example's TPOT p95
held with 0.62, then 0.52 with this rule, and 0 with that."""


def _quantity(metric: str) -> str:
    """What a scenario metric measures, without its statistic: "ttft" of "ttft_ms_p99", "output" of
    "output_tps_total"."""
    return metric.split("_")[0]


def _vendor(family: str | None) -> str:
    """"amd" for a CDNA family, "nvidia" for the others, "unknown" without one."""
    return "unknown" if family is None else "amd" if family.startswith("cdna") else "nvidia"


def model_kind(model: str) -> str:
    """"mla", "moe" or "dense" (a model the catalog does not know counts as dense)."""
    try:
        arch = resolve_served(model, variants=True)[0]
    except CatalogLookupError:
        return "dense"
    return "mla" if arch.is_mla else "moe" if arch.is_moe else "dense"


def gpu_family(gpu: str | None) -> str | None:
    try:
        return resolve_gpu(gpu).family if gpu else None
    except CatalogLookupError:
        return None


def fitted_pairs(factors: FactorSet) -> set[tuple[str | None, str | None]]:
    """The (engine line, family) pairs `factors` were fitted on measured lines of (`meta.rows_by_engine_family`)."""
    counts = factors.meta.get("rows_by_engine_family", {})
    return {(line, family) for line, by_family in counts.items() for family, n in by_family.items() if n}


# --- deriving the bounds --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Residual:
    """One held-out row: its evidence, its source and `log(measured / predicted)`."""

    evidence: Evidence
    source: str
    log_ratio: float


def conformal_bounds(log_ratios: Sequence[float], confidence: float) -> tuple[float, float]:
    """Split-conformal central bounds of a sample at `confidence`: the floor((n + 1) a/2)-th smallest and the
    ceil((n + 1)(1 - a/2))-th smallest value (a = 1 - confidence), clipped to the sample's range."""
    values = sorted(log_ratios)
    n, alpha = len(values), 1.0 - confidence
    k_low = math.floor((n + 1) * alpha / 2)
    k_high = math.ceil((n + 1) * (1 - alpha / 2))
    return values[max(k_low, 1) - 1], values[min(k_high, n) - 1]


def derive(residuals: Sequence[Residual], min_rows: int = MIN_ROWS, meta: Mapping[str, Any] | None = None
           ) -> dict[str, Any]:
    """The data file's content: per path ("measured", "extrapolated") and group of at least `min_rows` residuals,
    its row count and bounds at each of `LEVELS`, log ratios rounded to 4 decimals. Deterministic."""
    groups: dict[str, dict[str, list[float]]] = {"measured": {}, "extrapolated": {}}
    for r in residuals:
        path = groups["measured" if r.evidence.measured else "extrapolated"]
        for key in group_keys(r.evidence):
            path.setdefault(key, []).append(r.log_ratio)
    out: dict[str, Any] = {"meta": {"method": "split-conformal central bounds of log(measured / predicted)",
                                    "levels": list(LEVELS), "minRows": min_rows, "rows": len(residuals),
                                    **(meta or {})}}
    for path, by_key in groups.items():
        out[path] = {key: {"n": len(values),
                           "bounds": [[round(b, 4) for b in conformal_bounds(values, c)] for c in LEVELS]}
                     for key, values in sorted(by_key.items()) if len(values) >= min_rows}
    return out


# --- reading them -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IntervalTable:
    """The bounds of a data file (`derive`'s output)."""

    measured: Mapping[str, Sequence[Sequence[float]]]
    extrapolated: Mapping[str, Sequence[Sequence[float]]]
    # Each query's bounds, read once: a plan asks the same few (one per SLO and GPU type, per shown candidate).
    _grids: dict[tuple[Evidence, int], Sequence[Sequence[float]]] = field(default_factory=dict, init=False, repr=False,
                                                             compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> IntervalTable:
        levels = tuple(data["meta"].get("levels", ()))
        if levels != LEVELS:
            raise ValueError(f"intervals: levels {levels} differ from {LEVELS}; regenerate the file "
                             "(scripts/derive_intervals.py)")
        return cls({k: v["bounds"] for k, v in data["measured"].items()},
                   {k: v["bounds"] for k, v in data["extrapolated"].items()})

    def _has_kind(self, evidence: Evidence) -> bool:
        """Whether the table has a group of `evidence`'s model kind alone in its walk (`group_keys`)."""
        tables = (self.measured, self.extrapolated)
        return any(key in table for key in group_keys(evidence) if evidence.kind in key.split("|")
                   for table in tables)

    def _unmodelled(self, metric: str, grid: Sequence[Sequence[float]]) -> list[list[float]]:
        """`grid` for a query of an unmodelled kind without a group of its kind (`UNMODELLED_KINDS`): the widest
        bounds of `metric`'s class (its metrics' groups and the class's own) at the highest level, at every level."""
        metric_class = _CLASS_OF.get(metric, "other")
        names = {*METRIC_CLASSES.get(metric_class, (metric,)), f"class:{metric_class}"}
        grids = [grid, *(g for table in (self.measured, self.extrapolated) for key, g in table.items()
                         if key.split("|")[0] in names)]
        top = [min(g[-1][0] for g in grids), max(g[-1][1] for g in grids)]
        return [list(top) for _ in LEVELS]

    @staticmethod
    def _grid(table: Mapping[str, Sequence[Sequence[float]]], keys: Sequence[str], joined: int = GROUPS_JOINED
              ) -> Sequence[Sequence[float]] | None:
        """The bounds of the finest group of `keys` in `table`, widened to its parents' up to `joined` groups in all
        (the next groups found): a group's own bounds rest on few sources, and a held-out source is often unlike
        them (`GROUPS_JOINED`, `BOUND_GROUPS_JOINED`)."""
        found = [table[key] for key in keys if key in table][:joined]
        if not found:
            return None
        return [[min(g[i][0] for g in found), max(g[i][1] for g in found)] for i in range(len(found[0]))]

    def _evidence_grid(self, evidence: Evidence, joined: int = GROUPS_JOINED) -> Sequence[Sequence[float]]:
        """The bounds (per level of `LEVELS`) that `evidence` reads: its measured groups, or for an extrapolated
        pair the union of its own groups and the nearest measured evidence's; for an unmodelled kind without a
        group of its own, as `_unmodelled` widens it. A tail's bounds spread at least as far as its median's
        (`TAIL_OF`); an extrapolated pair's contain the nearest measured evidence's, tail rule included. `joined`:
        how many groups of each walk join (`_grid`)."""
        grid = self._grids.get((evidence, joined))
        if grid is None:
            grid = self._grids[(evidence, joined)] = self._read_grid(evidence, joined)
        return grid

    def _read_grid(self, evidence: Evidence, joined: int) -> Sequence[Sequence[float]]:
        grid = self._at_least_the_median(evidence, joined)
        nearest = _as_measured(evidence)
        if evidence.measured or evidence.metric not in TAIL_OF or \
                self._grid(self.measured, group_keys(nearest)) is None:
            return grid  # (for an extrapolated pair `_own_grid` joined the nearest measured evidence already)
        return _union(grid, self._at_least_the_median(nearest, joined))

    def _at_least_the_median(self, evidence: Evidence, joined: int) -> Sequence[Sequence[float]]:
        """`evidence`'s own bounds; for a tail, widened at each level to its median's spread beyond the median's
        level-0 bounds, measured from the tail's own level-0 bounds: the median's errors, not its bias."""
        grid = self._own_grid(evidence, joined)
        median = TAIL_OF.get(evidence.metric)
        if median is None:
            return grid
        inner = self._own_grid(replace(evidence, metric=median), joined)
        (t_low, t_high), (m_low, m_high) = grid[0], inner[0]
        return _union(grid, [[t_low + low - m_low, t_high + high - m_high] for low, high in inner])

    def _own_grid(self, evidence: Evidence, joined: int) -> Sequence[Sequence[float]]:
        """The bounds of `evidence`'s groups: its measured walk's, joined for an extrapolated pair with its own
        groups'; for an unmodelled kind without a group of its own, as `_unmodelled` widens it."""
        grid = self._grid(self.measured, group_keys(evidence if evidence.measured else _as_measured(evidence)), joined)
        other = None if evidence.measured else self._grid(self.extrapolated, group_keys(evidence), joined)
        if grid is not None and other is not None:
            grid = _union(grid, other)
        grid = grid or other
        if grid is not None and evidence.kind in UNMODELLED_KINDS and not self._has_kind(evidence):
            grid = self._unmodelled(evidence.metric, grid)
        if grid is None:
            raise ValueError(f"intervals: no group of {'measured' if evidence.measured else 'any'} rows for "
                             f"{evidence.metric}")
        return grid

    def log_bounds(self, evidence: Evidence, confidence: float = DEFAULT_CONFIDENCE) -> tuple[float, float]:
        """Bounds of `log(measured / predicted)` at `confidence` (0.5-0.99), a central interval; they always
        contain 0 (the prediction)."""
        _check(confidence)
        low, high = _interpolate(self._evidence_grid(evidence), confidence)
        return min(low, 0.0), max(high, 0.0)

    def upper_log_bound(self, evidence: Evidence, confidence: float = DEFAULT_CONFIDENCE) -> float:
        """The one-sided bound of `log(measured / predicted)` at `confidence` (0.5-0.99): the measured value stays
        at or below `prediction x exp(bound)` with probability `confidence` (the upper end of the central interval
        at level 2 x confidence - 1). Never below 0: a plan is never judged looser than its prediction."""
        _check(confidence)
        return max(_interpolate(self._evidence_grid(evidence, BOUND_GROUPS_JOINED), 2.0 * confidence - 1.0)[1], 0.0)

    def confidence_within(self, evidence: Evidence, log_ratio: float) -> float:
        """The largest confidence (0.5-0.99, floored to 0.01) at which `upper_log_bound` stays within `log_ratio`
        (log of a target over its prediction): the probability, by the held-out errors, that the measured value
        stays within the target. 0.0 where even the bound at 0.5 exceeds it."""
        uppers = [high for (_, high) in self._evidence_grid(evidence, BOUND_GROUPS_JOINED)]
        top = LEVELS.index(2 * CONFIDENCES[-1] - 1)  # the level of the highest confidence (0.98)
        if max(uppers[0], 0.0) > log_ratio:
            return 0.0
        if uppers[top] <= log_ratio:
            return CONFIDENCES[-1]
        for i in range(top):
            if uppers[i + 1] > log_ratio:
                step = uppers[i + 1] - uppers[i]
                level = LEVELS[i] + (LEVELS[i + 1] - LEVELS[i]) * ((log_ratio - uppers[i]) / step if step > 0 else 0)
                return math.floor((1.0 + level) / 2.0 * 100 + 1e-9) / 100
        return CONFIDENCES[-1]

    def interval(self, evidence: Evidence, value: float, confidence: float = DEFAULT_CONFIDENCE
                 ) -> tuple[float, float]:
        """The interval in which the measured value of a prediction `value` falls with probability `confidence`."""
        low, high = self.log_bounds(evidence, confidence)
        return value * math.exp(low), value * math.exp(high)


def _as_measured(evidence: Evidence) -> Evidence:
    """The nearest measured evidence of an extrapolated query: the same query on the measured path, where its pair
    has no group and the walk reaches the engine line's other families (or coarser)."""
    return Evidence(evidence.metric, evidence.kind, evidence.engine_line, evidence.family, evidence.load, True)


def _union(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]) -> list[list[float]]:
    """Two grids of bounds joined level by level."""
    return [[min(x[0], y[0]), max(x[1], y[1])] for x, y in zip(a, b, strict=True)]


def _check(confidence: float) -> None:
    if not CONFIDENCES[0] <= confidence <= CONFIDENCES[-1]:
        raise ValueError(f"confidence {confidence} outside {CONFIDENCES[0]}-{CONFIDENCES[-1]}")


def _interpolate(grid: Sequence[Sequence[float]], level: float) -> tuple[float, float]:
    """The bounds of the central interval at `level`, linear between the stored levels."""
    for i in range(len(LEVELS) - 1):
        c0, c1 = LEVELS[i], LEVELS[i + 1]
        if level <= c1:
            t = (level - c0) / (c1 - c0)
            return (grid[i][0] + t * (grid[i + 1][0] - grid[i][0]), grid[i][1] + t * (grid[i + 1][1] - grid[i][1]))
    return grid[-1][0], grid[-1][1]


@lru_cache(maxsize=1)
def load_intervals() -> IntervalTable:
    """The shipped table (`data/intervals.json`)."""
    text = resources.files("inferplan.planner").joinpath("data/intervals.json").read_text(encoding="utf-8")
    return IntervalTable.from_json(json.loads(text))


def interval(metric: str, value: float, *, engine_line: str | None, family: str | None, measured: bool,
             kind: str = "dense", load: str = "poisson", confidence: float = DEFAULT_CONFIDENCE
             ) -> tuple[float, float]:
    """(low, high) around the prediction `value` of scenario metric `metric` from the shipped table."""
    return load_intervals().interval(Evidence(metric, kind, engine_line, family, load, measured), value, confidence)
