"""Leave-one-source-out check of the factor fit: how stable are the fitted factors, and how well do
they predict a source the fit never saw?

Usage (from the repository root):

    python bench/leave_one_source_out.py [--scenarios FILE ...] [--sweeps N] [--jobs J]
        [--full FACTORS.json] [--predictions FILE.jsonl] [--save DIR]

It runs `calibrate(...)` (the shipped procedure) once on all rows of the scenario files (by default both
published files, ../shared/accuracy/scenarios.jsonl and latency-under-load.jsonl, pooled) and once per
source without that source's rows (sources = `Scenario.source_name`), `--jobs` fits at a time (default:
one per core). Under-load rows are predicted in the simulator, so a fit takes minutes. It prints:

  (i)   per engine factor, the largest relative change of a fold's fit versus the all-rows fit,
        over the folds where that engine still has enough training rows to be fitted (folds where
        it has too few keep the starting value and are listed separately);
  (ii)  per held-out source and metric, the median APE of its rows predicted with the fold's factors
        (held out), with the all-rows fit (in sample) and with the shipped factors;
  (iii) per source, over all its metrics: held-out median APE and share within 25%, and in-sample
        median APE. The held-out column is the honest figure for data the planner has not seen.

Every fit starts from, and is pulled towards, the neutral prior (`default_engine` for engines, 1.0 for
GPU families), exactly as `inferplan calibrate` does, so the held-out source is unseen by its fold.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

from inferplan.planner.accuracy import score
from inferplan.planner.calibrate import (
    MIN_ROWS_FOR_ENGINE,
    calibrate,
    identifiable_families,
    row_line,
    training_rows,
)
from inferplan.planner.factors import (
    ENGINE_FACTOR_NAMES,
    FAMILY_FACTOR_NAMES,
    FactorSet,
    load_factors,
    parse_factors,
)
from inferplan.planner.predict import predict_scenarios
from inferplan.planner.scenarios import Scenario, read_scenarios

REPO = Path(__file__).resolve().parents[1]
PUBLISHED = (REPO.parent / "shared" / "accuracy" / "scenarios.jsonl",
             REPO.parent / "shared" / "accuracy" / "latency-under-load.jsonl")


def _fit(rows: Sequence[Scenario], start: FactorSet, sweeps: int = 4) -> FactorSet:
    return calibrate(rows, start, sweeps=sweeps).factors


def _fit_fold(job: tuple[str, list[Scenario], FactorSet, int]) -> tuple[str, FactorSet, float]:
    source, train, start, sweeps = job
    t0 = time.perf_counter()
    return source, _fit(train, start, sweeps), time.perf_counter() - t0


def _training_engines(rows: Sequence[Scenario]) -> Counter[str]:
    return Counter(line for line in map(row_line, training_rows(rows)) if line)


def _training_families(rows: Sequence[Scenario]) -> set[str]:
    """The GPU families whose corrections a fit on `rows` fits (`calibrate.identifiable_families`)."""
    fitted = {e for e, n in _training_engines(rows).items() if n >= MIN_ROWS_FOR_ENGINE}
    return identifiable_families(training_rows(rows), fitted)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Leave-one-source-out check of the factor fit.")
    parser.add_argument("--scenarios", nargs="+", type=Path, default=list(PUBLISHED),
                        help="scenario files to pool (default: both published files)")
    parser.add_argument("--sweeps", type=int, default=4, help="coordinate-descent sweeps per fit (default 4)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="folds fitted in parallel")
    parser.add_argument("--full", type=Path, metavar="FACTORS.json",
                        help="the all-rows fit, if already made by the same procedure (e.g. the shipped factors, "
                             "fitted by `inferplan calibrate` on the same files): read when the folds are done "
                             "instead of fitted again")
    parser.add_argument("--predictions", type=Path, metavar="FILE.jsonl",
                        help="also write every held-out row's prediction (source, id, metric, measured, held-out, "
                             "in-sample) as JSON lines, for looking at where a fold goes wrong")
    parser.add_argument("--save", type=Path, metavar="DIR",
                        help="write every fit's factors to DIR (all-rows.json, <source>.json), the all-rows one in "
                             "the form `inferplan calibrate --write` gives")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.scenarios if not p.is_file()]
    if missing:
        print(f"scenario file not found: {', '.join(missing)}", file=sys.stderr)
        return 2
    rows = [row for path in args.scenarios for row in read_scenarios(path).scenarios]
    by_source: dict[str, list[Scenario]] = defaultdict(list)
    for row in rows:
        by_source[row.source_name].append(row)
    sources = sorted(by_source, key=lambda s: -len(by_source[s]))

    start = time.perf_counter()
    shipped = load_factors()
    # Every fit starts from the neutral prior alone: an engine or GPU family a fold has no rows of falls back to
    # it (default_engine, 1.0), never to factors fitted on the rows held out.
    initial = replace(shipped, engines={}, families={})
    jobs = [] if args.full else [("(all rows)", rows, initial, args.sweeps)]
    jobs += [(source, [r for r in rows if r.source_name != source], initial, args.sweeps) for source in sources]
    folds: dict[str, FactorSet] = {}
    with ProcessPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
        for source, fitted, seconds in pool.map(_fit_fold, jobs):
            folds[source] = fitted
            held = len(by_source[source]) if source in by_source else 0
            print(f"fit without {source:14s} ({held:3d} rows held out): {seconds:.1f} s", flush=True)
            if args.save:  # as each fit ends, so that a run stopped late keeps what it fitted
                args.save.mkdir(parents=True, exist_ok=True)
                name = "all-rows" if source == "(all rows)" else source
                (args.save / f"{name}.json").write_text(json.dumps(fitted.to_json(), indent=2) + "\n",
                                                        encoding="utf-8")
    if args.save:
        print(f"factors of {len(folds)} fits written to {args.save}")
    if args.full:
        full = parse_factors(json.loads(args.full.read_text(encoding="utf-8")))
        print(f"all-rows fit read from {args.full}")
    else:
        full = folds.pop("(all rows)")
    fitted_engines: dict[str, set[str]] = {}
    fitted_families: dict[str, set[str]] = {}
    for source in sources:
        train = [r for r in rows if r.source_name != source]
        fitted_engines[source] = {e for e, n in _training_engines(train).items() if n >= MIN_ROWS_FOR_ENGINE}
        fitted_families[source] = _training_families(train)
    full_engines = {e for e, n in _training_engines(rows).items() if n >= MIN_ROWS_FOR_ENGINE}

    # (i) factor stability
    print()
    print("(i) engine factors: all-rows fit and max relative change over folds that still fit the engine")
    print(f"{'engine':13s} {'factor':27s} {'all-rows':>9s} {'max |chg|':>9s}  {'worst fold':14s} "
          "folds not fitting it")
    for engine in sorted(full_engines):
        unfitted = [s for s in sources if engine not in fitted_engines[s]]
        for name in ENGINE_FACTOR_NAMES:
            ref = getattr(full.engine(engine), name)
            changes = []
            for source in sources:
                if engine not in fitted_engines[source]:
                    continue
                value = getattr(folds[source].engine(engine), name)
                rel = abs(value - ref) / abs(ref) if ref else (0.0 if value == ref else float("inf"))
                changes.append((rel, source))
            worst = max(changes) if changes and max(changes)[0] > 0 else None
            print(f"{engine:13s} {name:27s} {ref:9.4g} "
                  f"{_pct(worst[0]) if worst else _pct(0.0) if changes else '-':>9s}  "
                  f"{worst[1] if worst else '-':14s} "
                  f"{','.join(unfitted) if name == ENGINE_FACTOR_NAMES[0] else ''}")
    print()
    print("    GPU-family factors: all-rows fit and max relative change over folds that still have the family")
    print(f"{'family':13s} {'factor':27s} {'all-rows':>9s} {'max |chg|':>9s}  {'worst fold':14s} "
          "folds without it")
    for family in sorted(_training_families(rows)):
        absent = [s for s in sources if family not in fitted_families[s]]
        for name in FAMILY_FACTOR_NAMES:
            ref = getattr(full.family(family), name)
            changes = [(abs(getattr(folds[s].family(family), name) - ref) / abs(ref), s)
                       for s in sources if family in fitted_families[s] and ref]
            worst = max(changes) if changes and max(changes)[0] > 0 else None
            print(f"{family:13s} {name:27s} {ref:9.4g} "
                  f"{_pct(worst[0]) if worst else _pct(0.0) if changes else '-':>9s}  "
                  f"{worst[1] if worst else '-':14s} "
                  f"{','.join(absent) if name == FAMILY_FACTOR_NAMES[0] else ''}")

    # (ii) held-out accuracy
    print()
    print("(ii) held-out source: median APE per metric (non-suspect rows)")
    print(f"{'source':14s} {'metric':20s} {'n':>4s} {'held-out':>9s} {'in-sample':>9s} {'shipped':>9s}")
    summary: list[tuple[str, int, float | None, float | None, float | None]] = []
    dumped: list[str] = []
    for source in sources:
        held = by_source[source]
        predictions = [predict_scenarios(held, f) for f in (folds[source], full, shipped)]
        reports = [score(held, p) for p in predictions]
        dumped += [json.dumps({"source": source, "id": row.id, "metric": row.metric, "measured": row.value,
                               "held_out": out.predicted, "in_sample": ins.predicted, "suspect": row.suspect})
                   for row, out, ins in zip(held, predictions[0], predictions[1], strict=True)]
        for metric in sorted(reports[0].metrics):
            m = [r.metrics[metric] for r in reports]
            print(f"{source:14s} {metric:20s} {m[0].scored:4d} {_pct(m[0].median_ape):>9s} "
                  f"{_pct(m[1].median_ape):>9s} {_pct(m[2].median_ape):>9s}")
        o = [r.overall for r in reports]
        summary.append((source, o[0].scored, o[0].median_ape, o[0].within25, o[1].median_ape))
        print(f"{source:14s} {'(all metrics)':20s} {o[0].scored:4d} {_pct(o[0].median_ape):>9s} "
              f"{_pct(o[1].median_ape):>9s} {_pct(o[2].median_ape):>9s}")
    print()
    print("(iii) per source, all metrics: held-out median APE and share within 25%, in-sample median APE")
    print(f"{'source':14s} {'n':>4s} {'held-out':>9s} {'<=25%':>7s} {'in-sample':>9s}")
    for source, n, held_out, within, in_sample in summary:
        print(f"{source:14s} {n:4d} {_pct(held_out):>9s} {_pct(within):>7s} {_pct(in_sample):>9s}")
    if args.predictions:
        args.predictions.write_text("".join(line + "\n" for line in dumped), encoding="utf-8")
        print(f"\nheld-out predictions of {len(dumped)} rows written to {args.predictions}")
    print(f"\ntotal {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
