"""Score predictions against measurements: per metric MAPE, median APE and the share within 25%.

Also per source (`Scenario.source_name`: a GitHub repository's owner, else the host), over all of a source's
metrics, so a file pooling several sources shows which of them the misses come from. `suspect` rows (flagged
unreliable by their source) are scored apart and never mixed into the headline figures (nor into a source's); so
are rows of a model kind scored apart and never fitted on (`predict.unmodelled`: MLA, whose one serving source ran
2-4x slower than its measured kernels), listed under `unmodelled` with their own figures. Rows that cannot be
predicted are counted with their reason. Given the factors that predicted them, each figure also says how many
measured values fall inside the stated 80% prediction interval of their prediction (`intervals.py`: bounds from held-out
residuals, applied here to whatever predictions are scored, in sample for `inferplan accuracy`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from inferplan.planner.calibration.calibrate import row_line
from inferplan.planner.calibration.predict import Prediction, unmodelled
from inferplan.planner.calibration.scenarios import Scenario
from inferplan.planner.model.factors import FactorSet
from inferplan.planner.model.intervals import (
    DEFAULT_CONFIDENCE,
    Evidence,
    fitted_pairs,
    gpu_family,
    load_intervals,
    model_kind,
)

WITHIN = 0.25


@dataclass(frozen=True)
class MetricScore:
    scored: int
    skipped: int
    mape: float | None
    median_ape: float | None
    within25: float | None
    interval_coverage: float | None = None  # share of measured values inside the 80% interval

    def to_json(self) -> dict[str, Any]:
        return {"scored": self.scored, "skipped": self.skipped, "mape": self.mape, "medianApe": self.median_ape,
                "within25": self.within25, "intervalCoverage": self.interval_coverage}


@dataclass(frozen=True)
class Outlier:
    """A scored row outside +-25%, with the caveat its source gives (the notes before the converter's)."""

    id: str
    metric: str
    measured: float
    predicted: float
    error: float  # signed fraction: (predicted - measured) / measured
    caveat: str

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "metric": self.metric, "measured": self.measured,
                "predicted": round(self.predicted, 6), "error": round(self.error, 4), "caveat": self.caveat}


@dataclass(frozen=True)
class AccuracyReport:
    metrics: dict[str, MetricScore]
    overall: MetricScore
    skipped_reasons: dict[str, int]
    suspect: dict[str, MetricScore]
    outliers: list[Outlier]  # every non-suspect row outside +-25%, largest error first
    unmodelled: dict[str, MetricScore] = field(default_factory=dict)  # per reason, over all its metrics
    sources: dict[str, MetricScore] = field(default_factory=dict)  # per source, over all its metrics (as `overall`)

    def to_json(self) -> dict[str, Any]:
        return {
            "metrics": {m: s.to_json() for m, s in self.metrics.items()},
            "overall": self.overall.to_json(),
            "skippedReasons": self.skipped_reasons,
            "suspect": {m: s.to_json() for m, s in self.suspect.items()},
            "outliers": [o.to_json() for o in self.outliers],
            "unmodelled": {reason: s.to_json() for reason, s in self.unmodelled.items()},
            "sources": {name: s.to_json() for name, s in self.sources.items()},
        }

    @property
    def worst(self) -> list[tuple[str, float, float, float]]:
        """(id, measured, predicted, signed error) of the ten largest errors."""
        return [(o.id, o.measured, o.predicted, o.error) for o in self.outliers[:10]]


def row_evidence(row: Scenario, measured_pairs: Iterable[tuple[str | None, str | None]]) -> Evidence:
    """The evidence of scenario `row`'s prediction; `measured_pairs`: the (engine line, family) pairs with measured
    lines in the fit that predicted it."""
    line, family = row_line(row), gpu_family(row.gpu)
    measured = (line, family) in set(measured_pairs)
    return Evidence(row.metric, model_kind(row.model), line, family, row.load.kind, measured)


UNSCORABLE_ZERO = "measured value 0 against a prediction above 0: no relative error to score"


def _score(apes: Sequence[float], skipped: int, inside: Sequence[bool] = ()) -> MetricScore:
    if not apes:
        return MetricScore(0, skipped, None, None, None)
    a = np.asarray(apes, dtype=float)
    return MetricScore(len(a), skipped, round(float(a.mean()), 4), round(float(np.median(a)), 4),
                       round(float(np.mean(a <= WITHIN + 1e-12)), 4),
                       round(float(np.mean(inside)), 4) if len(inside) == len(a) else None)


def absolute_percentage_error(predicted: float, measured: float) -> float:
    """|predicted - measured| / measured (a fraction); a zero measurement scores 0 only if matched."""
    if measured == 0:
        return 0.0 if predicted == 0 else float("inf")
    return abs(predicted - measured) / abs(measured)


def _caveat(notes: str, limit: int = 160) -> str:
    text = notes.split("[normalization]")[0].strip() or notes.strip()
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def score(scenarios: Sequence[Scenario], predictions: Sequence[Prediction], factors: FactorSet | None = None
          ) -> AccuracyReport:
    """Score `predictions` (same order as `scenarios`); with the `factors` that made them, the coverage of the
    shipped 80% intervals as well (`MetricScore.interval_coverage`; None without)."""
    table, pairs = (load_intervals(), fitted_pairs(factors)) if factors is not None else (None, set())

    def covered(row: Scenario, predicted: float) -> list[bool]:
        if table is None:
            return []
        low, high = table.interval(row_evidence(row, pairs), predicted, DEFAULT_CONFIDENCE)
        return [low <= row.value <= high]

    inside: dict[str, list[bool]] = {}
    source_apes: dict[str, list[float]] = {}
    source_inside: dict[str, list[bool]] = {}
    source_skipped: Counter[str] = Counter()
    apart_inside: dict[str, list[bool]] = {}
    apes: dict[str, list[float]] = {}
    suspect_apes: dict[str, list[float]] = {}
    skipped: Counter[str] = Counter()
    suspect_skipped: Counter[str] = Counter()
    apart_skipped: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    outliers: list[Outlier] = []
    apart: dict[str, list[float]] = {}
    for row, pred in zip(scenarios, predictions, strict=True):
        why_not = (pred.skipped or "not predicted") if pred.predicted is None else \
            UNSCORABLE_ZERO if row.value == 0 and pred.predicted != 0 else None
        reason = None if row.suspect else unmodelled(row)
        if reason is not None:
            if why_not is not None:
                apart_skipped[reason] += 1
            else:
                apart.setdefault(reason, []).append(absolute_percentage_error(pred.predicted, row.value))
                apart_inside.setdefault(reason, []).extend(covered(row, pred.predicted))
            continue
        if why_not is not None:
            if row.suspect:  # suspect rows never enter the headline counts
                suspect_skipped[row.metric] += 1
            else:
                skipped[row.metric] += 1
                source_skipped[row.source_name] += 1
                reasons[why_not] += 1
            continue
        assert pred.predicted is not None
        ape = absolute_percentage_error(pred.predicted, row.value)
        (suspect_apes if row.suspect else apes).setdefault(row.metric, []).append(ape)
        if not row.suspect:
            hit = covered(row, pred.predicted)
            inside.setdefault(row.metric, []).extend(hit)
            source_apes.setdefault(row.source_name, []).append(ape)
            source_inside.setdefault(row.source_name, []).extend(hit)
        if not row.suspect and ape > WITHIN + 1e-12:
            signed = ape if pred.predicted >= row.value else -ape
            outliers.append(Outlier(row.id, row.metric, row.value, pred.predicted, signed, _caveat(row.notes)))
    metric_names = sorted(set(apes) | set(skipped))
    metrics = {m: _score(apes.get(m, []), skipped[m], inside.get(m, [])) for m in metric_names}
    overall = _score([a for v in apes.values() for a in v], sum(skipped.values()),
                     [b for v in inside.values() for b in v])
    outliers.sort(key=lambda o: -abs(o.error))
    return AccuracyReport(metrics, overall, dict(reasons.most_common()),
                          {m: _score(suspect_apes.get(m, []), suspect_skipped[m])
                           for m in sorted(set(suspect_apes) | set(suspect_skipped))}, outliers,
                          {r: _score(apart.get(r, []), apart_skipped[r], apart_inside.get(r, []))
                           for r in sorted(set(apart) | set(apart_skipped))},
                          {name: _score(source_apes.get(name, []), source_skipped[name], source_inside.get(name, []))
                           for name in sorted(set(source_apes) | set(source_skipped))})


def format_report(report: AccuracyReport) -> str:
    """A plain-text table of the report."""
    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f}%"

    def header(first: str) -> str:
        return (f"{first:22s} {'scored':>6s} {'skipped':>7s} {'MdAPE':>7s} {'MAPE':>8s} {'<=25%':>6s} "
                f"{'in 80%':>6s}")

    def row(name: str, s: MetricScore) -> str:
        return (f"{name:22s} {s.scored:6d} {s.skipped:7d} {pct(s.median_ape):>7s} {pct(s.mape):>8s} "
                f"{pct(s.within25):>6s} {pct(s.interval_coverage):>6s}")

    lines = [header("metric")]
    lines.extend(row(name, s) for name, s in [*report.metrics.items(), ("overall", report.overall)])
    if len(report.sources) > 1:
        lines.append("")
        lines.append("per source, all its metrics (largest median APE first):")
        lines.append(header("  source"))
        lines.extend(row(f"  {name}", s) for name, s in
                     sorted(report.sources.items(), key=lambda item: (-(item[1].median_ape or 0.0), item[0])))
    if report.suspect:
        lines.append("")
        lines.append("suspect rows (flagged by their source; not in the figures above):")
        for name, s in report.suspect.items():
            lines.append(f"  {name:20s} {s.scored:6d} {s.skipped:7d} {pct(s.median_ape):>7s} {pct(s.mape):>8s}")
    if report.unmodelled:
        lines.append("")
        lines.append("rows of a model kind scored apart and never fitted on (not in the figures above):")
        for reason, s in report.unmodelled.items():
            unscored = f" ({s.skipped} more not predicted)" if s.skipped else ""
            lines.append(f"  {s.scored:4d} rows{unscored}, median APE {pct(s.median_ape)}, "
                         f"within 25% {pct(s.within25)}, in the 80% interval {pct(s.interval_coverage)}: {reason}")
    if report.skipped_reasons:
        lines.append("")
        lines.append("skipped:")
        lines.extend(f"  {n:4d}  {reason}" for reason, n in report.skipped_reasons.items())
    if report.outliers:
        lines.append("")
        lines.append(f"rows outside +-25% ({len(report.outliers)}), largest first, with their source's caveat:")
        for o in report.outliers:
            lines.append(f"  {o.error:+8.1%}  measured {o.measured:g}  predicted {o.predicted:.4g}  {o.id}")
            if o.caveat:
                lines.append(f"            {o.caveat}")
    return "\n".join(lines)
