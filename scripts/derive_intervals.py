"""Derive the prediction intervals (inferplan/planner/data/intervals.json) from held-out residuals.

Usage (from the repository root):

    python bench/leave_one_source_out.py --full inferplan/planner/data/factors.json --jobs 2 \
        --predictions /tmp/loso_pred.jsonl
    python scripts/derive_intervals.py --predictions /tmp/loso_pred.jsonl [--scenarios FILE ...] \
        [--write inferplan/planner/data/intervals.json] [--min-rows 20]

Each held-out row (not suspect, predicted, measured and predicted above 0; rows of unmodelled architectures too)
gives `log(measured / held-out prediction)`, with the evidence its prediction rested on (`accuracy.row_evidence`):
its (engine line, GPU family) pair counts as measured where the rows of the other sources (the fold's fit) had
measured lines of it. `intervals.derive` groups them and writes the split-conformal bounds. The script then prints
the held-out coverage of the 80% intervals: each source's residuals against bounds derived without that source's
residuals (leave one source out over the residuals too), overall, per metric, per path and per model kind.
Deterministic: the same files give the same data file byte for byte. The shipped file is derived from the
predictions of a run that fits its folds; a `--folds` run's (its fits read back rounded) give other bounds.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from inferplan.planner.calibration.accuracy import row_evidence
from inferplan.planner.calibration.calibrate import fittable_lines, row_line, training_rows
from inferplan.planner.calibration.scenarios import Scenario, read_scenarios
from inferplan.planner.model.intervals import (
    DEFAULT_CONFIDENCE,
    METRIC_CLASSES,
    MIN_ROWS,
    IntervalTable,
    Residual,
    derive,
    gpu_family,
)
from inferplan.progress import write_atomically

REPO = Path(__file__).resolve().parents[1]
ACCURACY = REPO.parent / "shared" / "accuracy"
PUBLISHED = tuple(ACCURACY / f"{name}.jsonl" for name in
                  ("scenarios", "latency-under-load", "offline-and-online", "large-models-under-load"))
DATA = REPO / "inferplan" / "planner" / "data" / "intervals.json"


def measured_pairs(rows: Sequence[Scenario]) -> set[tuple[str | None, str | None]]:
    """The (engine line, family) pairs a fit on `rows` cites measured lines for (as `calibrate` counts them in
    `meta.rows_by_engine_family`: rows of fitted lines only)."""
    train = training_rows(rows)
    lines = fittable_lines(train)
    return {(row_line(r), gpu_family(r.gpu)) for r in train if row_line(r) in lines and gpu_family(r.gpu)}


def residuals(predictions: Sequence[dict[str, Any]], rows: Sequence[Scenario]) -> list[Residual]:
    """The residuals of the held-out predictions, in the predictions file's order."""
    by_id = {row.id: row for row in rows}
    pairs: dict[str, set[tuple[str | None, str | None]]] = {}
    out: list[Residual] = []
    for p in predictions:
        row = by_id.get(p["id"])
        if row is None or p.get("suspect") or p["held_out"] is None or p["held_out"] <= 0 or p["measured"] <= 0:
            continue
        source = p["source"]
        if source not in pairs:
            pairs[source] = measured_pairs([r for r in rows if r.source_name != source])
        out.append(Residual(row_evidence(row, pairs[source]), source, math.log(p["measured"] / p["held_out"])))
    return out


LATENCY = frozenset(METRIC_CLASSES["latency"])


def held_out_coverage(found: Sequence[Residual], min_rows: int, confidence: float = DEFAULT_CONFIDENCE
                      ) -> dict[str, dict[str, tuple[int, int]]]:
    """Per breakdown ("overall", "metric", "path", "kind") and value: (inside, rows) of each source's residuals in
    the intervals derived without that source's residuals."""
    counts: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for source in sorted({r.source for r in found}):
        table = IntervalTable.from_json(derive([r for r in found if r.source != source], min_rows))
        for r in (r for r in found if r.source == source):
            low, high = table.log_bounds(r.evidence, confidence)
            inside = int(low <= r.log_ratio <= high)
            below = int(r.log_ratio <= table.upper_log_bound(r.evidence, confidence))
            e = r.evidence
            modelled = e.kind != "mla"  # the architectures the step model represents (`predict.unmodelled`)
            for name, value in (("overall", "all"), ("overall", "modelled" if modelled else "mla"),
                                ("metric", e.metric), ("path", "measured" if e.measured else "extrapolated"),
                                ("kind", e.kind), ("source", source)) + ((("modelled", e.metric),) if modelled else ()):
                counts[name][value][0] += inside
                counts[name][value][1] += 1
            if e.metric in LATENCY:  # the one-sided bound a plan's SLOs are judged at (`slo.confidence`)
                counts["upper"][e.metric][0] += below
                counts["upper"][e.metric][1] += 1
                counts["upper"]["latency"][0] += below
                counts["upper"]["latency"][1] += 1
    return {name: {v: (c[0], c[1]) for v, c in sorted(by.items())} for name, by in counts.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Derive the prediction intervals from held-out residuals.")
    parser.add_argument("--predictions", type=Path, required=True,
                        help="held-out predictions (bench/leave_one_source_out.py --predictions)")
    parser.add_argument("--scenarios", nargs="+", type=Path, default=list(PUBLISHED),
                        help="the scenario files the predictions were made from (default: the four published files)")
    parser.add_argument("--write", type=Path, default=None, metavar="FILE",
                        help=f"write the data file there (e.g. {DATA.relative_to(REPO)})")
    parser.add_argument("--min-rows", type=int, default=MIN_ROWS, help=f"rows per group (default {MIN_ROWS})")
    parser.add_argument("--no-coverage", action="store_true", help="skip the held-out coverage (one derive per source)")
    args = parser.parse_args(argv)
    missing = [str(p) for p in [args.predictions, *args.scenarios] if not p.is_file()]
    if missing:
        print(f"file not found: {', '.join(missing)}", file=sys.stderr)
        return 2
    rows = [row for path in args.scenarios for row in read_scenarios(path).scenarios]
    predictions = [json.loads(line) for line in args.predictions.read_text(encoding="utf-8").splitlines() if line]
    found = residuals(predictions, rows)
    data = derive(found, args.min_rows, {"sources": len({r.source for r in found})})
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    if args.write:
        write_atomically(args.write, text)
        print(f"{len(found)} residuals, {len(data['measured'])} measured and {len(data['extrapolated'])} extrapolated "
              f"groups written to {args.write}")
    else:
        sys.stdout.write(text)
    if args.no_coverage:
        return 0
    coverage = held_out_coverage(found, args.min_rows)
    out = sys.stderr if not args.write else sys.stdout
    print(f"\nheld-out coverage of the {DEFAULT_CONFIDENCE:.0%} intervals (each source against intervals derived "
          "without it):", file=out)
    for name in ("overall", "path", "kind", "metric", "modelled", "source", "upper"):
        for value, (inside, n) in coverage[name].items():
            print(f"  {name:8s} {value:22s} {n:4d} rows  {inside / n:6.1%}", file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
