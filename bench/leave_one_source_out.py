"""Leave-one-source-out check of the factor fit: how stable are the fitted factors, and how well do
they predict a source the fit never saw?

Usage (from the repository root):

    python bench/leave_one_source_out.py

It runs `calibrate(...)` (the shipped procedure, 6 sweeps) once on all rows of the published file
(../shared/accuracy/scenarios.jsonl relative to the repository root) and once per source without
that source's rows (sources = `Scenario.source_name`), so it takes a few minutes (about 30 s per
fit on a 2-core machine; 7 fits in all). It prints:

  (i)  per engine factor, the largest relative change of a fold's fit versus the all-rows fit,
       over the folds where that engine still has enough training rows to be fitted (folds where
       it has too few keep the starting value and are listed separately);
  (ii) per held-out source and metric, the median APE of its rows predicted with the fold's factors
       (held out), with the all-rows fit (in sample) and with the shipped factors.

Every fit starts from, and is pulled towards, the neutral prior (`default_engine` for engines, 1.0 for
GPU families), exactly as `inferplan calibrate` does, so the held-out source is unseen by its fold.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

from inferplan.planner.accuracy import score
from inferplan.planner.calibrate import MIN_ROWS_FOR_ENGINE, calibrate
from inferplan.planner.factors import (
    ENGINE_FACTOR_NAMES,
    FAMILY_FACTOR_NAMES,
    FactorSet,
    load_factors,
)
from inferplan.planner.gpus import resolve_gpu
from inferplan.planner.names import CatalogLookupError
from inferplan.planner.predict import predict_scenarios
from inferplan.planner.scenarios import Scenario, read_scenarios

REPO = Path(__file__).resolve().parents[1]
PUBLISHED = REPO.parent / "shared" / "accuracy" / "scenarios.jsonl"


def _fit(rows: Sequence[Scenario], start: FactorSet) -> FactorSet:
    return calibrate(rows, start).factors


def _training_engines(rows: Sequence[Scenario]) -> Counter[str]:
    return Counter(r.engine for r in rows if not r.suspect and r.engine and r.gpu and r.value > 0)


def _training_families(rows: Sequence[Scenario]) -> set[str]:
    families = set()
    for r in rows:
        if r.suspect or not r.engine or not r.gpu or r.value <= 0:
            continue
        try:
            families.add(resolve_gpu(r.gpu).family)
        except CatalogLookupError:
            pass
    return families


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Leave-one-source-out check of the factor fit.")
    parser.parse_args(argv)
    if not PUBLISHED.is_file():
        print(f"published scenario file not found: {PUBLISHED}", file=sys.stderr)
        return 2
    rows = list(read_scenarios(PUBLISHED).scenarios)
    by_source: dict[str, list[Scenario]] = defaultdict(list)
    for row in rows:
        by_source[row.source_name].append(row)
    sources = sorted(by_source, key=lambda s: -len(by_source[s]))

    start = time.perf_counter()
    shipped = load_factors()
    initial = shipped
    full = _fit(rows, initial)
    print(f"all-rows fit: {len(rows)} rows, {time.perf_counter() - start:.1f} s")
    folds: dict[str, FactorSet] = {}
    fitted_engines: dict[str, set[str]] = {}
    fitted_families: dict[str, set[str]] = {}
    for source in sources:
        t0 = time.perf_counter()
        train = [r for r in rows if r.source_name != source]
        folds[source] = _fit(train, initial)
        fitted_engines[source] = {e for e, n in _training_engines(train).items() if n >= MIN_ROWS_FOR_ENGINE}
        fitted_families[source] = _training_families(train)
        print(f"fold without {source:14s} ({len(by_source[source]):3d} rows held out): "
              f"{time.perf_counter() - t0:.1f} s")
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
    for source in sources:
        held = by_source[source]
        reports = [score(held, predict_scenarios(held, f)) for f in (folds[source], full, shipped)]
        for metric in sorted(reports[0].metrics):
            m = [r.metrics[metric] for r in reports]
            print(f"{source:14s} {metric:20s} {m[0].scored:4d} {_pct(m[0].median_ape):>9s} "
                  f"{_pct(m[1].median_ape):>9s} {_pct(m[2].median_ape):>9s}")
        o = [r.overall for r in reports]
        print(f"{source:14s} {'(all metrics)':20s} {o[0].scored:4d} {_pct(o[0].median_ape):>9s} "
              f"{_pct(o[1].median_ape):>9s} {_pct(o[2].median_ape):>9s}")
    print(f"\ntotal {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
