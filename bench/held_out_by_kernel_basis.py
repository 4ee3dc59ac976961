"""How far off are step times where a GPU's kernels were not measured? Held out, per kernel basis.

For each kernel basis asked (`kernels.kernel_basis`: `scaled` from a sibling's tables, `published`
microbenchmarks, `typical` efficiency), every published source with rows on such a GPU is left out of the fit, as
`bench/leave_one_source_out.py` leaves it out (a refit from the prior on the other sources' rows), and its rows on
those GPUs are predicted with that fold's factors. Only step-time metrics are scored (TPOT, ITL, end-to-end time,
throughput): TTFT carries each harness's own time. Prints, per source and over the sources (each one vote, as the
README's held-out table is summarised), the median of measured / predicted time (for a throughput, predicted /
measured): above 1 the GPU ran slower than the planner said. `search.UNMEASURED_STEP_ERROR` is this figure for
`published` (the planner's unmeasured candidates).

    python bench/held_out_by_kernel_basis.py [--basis published,typical] [--scenarios FILE.jsonl ...]

Under a minute per fold on one core (4 folds for `published`, 6 for `scaled`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from inferplan.planner.calibration.calibrate import calibrate, unmodelled
from inferplan.planner.calibration.predict import predict_scenarios
from inferplan.planner.calibration.scenarios import Scenario, read_scenarios
from inferplan.planner.catalog.gpus import resolve_gpu
from inferplan.planner.model.factors import load_factors
from inferplan.planner.model.kernels import kernel_basis

REPO = Path(__file__).resolve().parents[1]
ACCURACY = REPO.parent / "shared" / "accuracy"
PUBLISHED = tuple(ACCURACY / f"{name}.jsonl" for name in
                  ("scenarios", "latency-under-load", "offline-and-online", "large-models-under-load"))
THROUGHPUTS = frozenset({"output_tps_total", "requests_per_s", "decode_tps_single"})
STEP_METRICS = THROUGHPUTS | {"tpot_ms_mean", "tpot_ms_p50", "tpot_ms_p99", "itl_ms_mean", "e2e_ms_mean"}


def _basis(row: Scenario) -> str | None:
    try:
        return kernel_basis(resolve_gpu(row.gpu)).kind
    except (KeyError, ValueError, AttributeError):  # a row without a GPU, or one the catalog lacks
        return None


def slowdown(row: Scenario, predicted: float) -> float:
    """measured / predicted time of `row` (predicted / measured for a throughput): above 1, slower than said."""
    return predicted / row.value if row.metric in THROUGHPUTS else row.value / predicted


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--basis", default="published,typical", help="kernel bases to score, comma-separated")
    parser.add_argument("--scenarios", nargs="+", type=Path, default=list(PUBLISHED))
    args = parser.parse_args(argv)
    kinds = set(args.basis.split(","))
    rows = [r for path in args.scenarios for r in read_scenarios(path).scenarios]
    scored = [r for r in rows if not r.suspect and not unmodelled(r) and r.metric in STEP_METRICS
              and _basis(r) in kinds]
    by_source: dict[str, list[Scenario]] = defaultdict(list)
    for row in scored:
        by_source[row.source_name].append(row)
    if not by_source:
        print(f"no scored row on a GPU whose kernels are {args.basis}")
        return 1
    shipped = load_factors()
    prior = replace(shipped, engines={}, harness_ms={}, meta={})
    medians: list[float] = []
    print(f"held out, step-time metrics on GPUs whose kernels are {args.basis}: measured / predicted time")
    print(f"{'source':22s} {'rows':>4s} {'median':>7s} {'range':>15s}  GPUs")
    for source in sorted(by_source):
        fold = calibrate([r for r in rows if r.source_name != source], prior, sweeps=3).factors
        held = by_source[source]
        ratios = sorted(slowdown(r, p.predicted) for r, p in zip(held, predict_scenarios(held, fold), strict=True)
                        if p.predicted)
        if not ratios:
            continue
        medians.append(statistics.median(ratios))
        gpus = ", ".join(sorted({r.gpu or "" for r in held}))
        print(f"{source:22s} {len(ratios):4d} {medians[-1]:7.2f} {ratios[0]:7.2f}-{ratios[-1]:<7.2f}  {gpus}",
              flush=True)
    print(f"median over {len(medians)} sources: {statistics.median(medians):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
