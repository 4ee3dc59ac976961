"""The analytic model against the simulator on every example plan's recommendation (prints a table).

Usage (from the repository root):

    python bench/analytic_vs_simulated.py [--without-spread] [--random N [--seed S]]

For each example under examples/plans/ and examples/platform/ with an aggregated recommendation (analytic, as the
search finds it before verification), the simulated TPOT p95 and TTFT p95 over the analytic ones, the simulation
judged in steady state as verification judges it (`verification.steady_requests`, `warmup_s`; seed 0), and the
median |log ratio| over the examples. Above 1 the analytic model was optimistic. `--without-spread`: the TPOT
samples without the running batch's spread (`PoissonModel._batch_spread`, added 2026-12-04), to see what it
changed. `--random N`: N random plans of `bench_plan.random_plan` (models under 80B parameters, seed S) in place of
the examples, with per engine the median and the largest simulated / analytic TPOT p95 and TTFT p95. Prints figures,
asserts nothing.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from inferplan.planner.catalog.model_configs import load_model_catalog
from inferplan.planner.model import serving
from inferplan.planner.request import resolve_plan
from inferplan.planner.search.plan import plan
from inferplan.planner.simulation.verification import VERIFY_REQUESTS, simulate_candidate, steady_requests, warmup_s
from inferplan.planner.spec_parsing import PlanError, load_plan_file, parse_plan

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--without-spread", action="store_true", help="TPOT samples without the batch's spread")
    parser.add_argument("--random", type=int, default=0, metavar="N", help="N random plans instead of the examples")
    parser.add_argument("--seed", type=int, default=11, help="seed of the random plans (default 11)")
    args = parser.parse_args()
    if args.without_spread:
        serving.PoissonModel._batch_spread = lambda self, load: 0.0  # type: ignore[method-assign]
    if args.random:
        random_plans(args.random, args.seed)
        return
    tpot, ttft = [], []
    paths = [*sorted((REPO / "examples" / "plans").glob("*.yaml")),
             *sorted((REPO / "examples" / "platform").glob("*.yaml"))]
    print(f"{'example':34s} {'shape':>6s}  {'TPOT p95 analytic':>17s}  {'sim/analytic':>12s}  "
          f"{'TTFT p95 sim/analytic':>21s}")
    for path in paths:
        req = resolve_plan(load_plan_file(path), path.parent)
        c = plan(req, confirm=False, suggest=False).recommendation
        if c is None or c.roles:
            continue
        sim = simulate_candidate(req, c, requests=steady_requests(req, c, VERIFY_REQUESTS), seed=0,
                                 warmup_s=warmup_s(c))
        r_tpot = sim.tpot.p95_s * 1e3 / c.predicted.tpot_ms.p95
        r_ttft = sim.ttft.p95_s * 1e3 / c.predicted.ttft_ms.p95
        tpot.append(r_tpot)
        ttft.append(r_ttft)
        print(f"{path.stem:34s} {c.replicas:>3d}x{c.gpus_per_replica:<2d}  {c.predicted.tpot_ms.p95:>14.1f} ms  "
              f"{r_tpot:>12.2f}  {r_ttft:>21.2f}")
    print(f"median |log(sim / analytic)| over {len(tpot)} examples: TPOT p95 "
          f"{statistics.median(abs(math.log(r)) for r in tpot):.3f}, TTFT p95 "
          f"{statistics.median(abs(math.log(r)) for r in ttft):.3f}")


def random_plans(count: int, seed: int) -> None:
    """`--random`: the analytic recommendations of `count` random plans against the simulator, per engine."""
    sys.path.insert(0, str(REPO / "bench"))
    from bench_plan import random_plan  # the bench's own module, beside this one

    models = [m.repo_id for m in load_model_catalog() if m.param_count() < 80e9]
    rng = random.Random(seed)
    ratios: dict[str, list[tuple[float, float]]] = defaultdict(list)
    while sum(len(v) for v in ratios.values()) < count:
        spec = random_plan(rng, models)
        spec["verify"] = False
        try:
            req = resolve_plan(parse_plan(spec))
        except PlanError:
            continue
        c = plan(req, confirm=False, suggest=False).recommendation
        if c is None or c.roles or c.predicted.tpot_ms is None:
            continue
        sim = simulate_candidate(req, c, requests=8000, seed=1, warmup_s=warmup_s(c))
        ratios[req.engine].append((sim.tpot.p95_s * 1e3 / c.predicted.tpot_ms.p95,
                                   sim.ttft.p95_s * 1e3 / c.predicted.ttft_ms.p95))
    print(f"{count} random plans (seed {seed}), simulated / analytic p95 of the analytic recommendation:")
    for engine, values in sorted(ratios.items()):
        tp, tt = [v[0] for v in values], [v[1] for v in values]
        print(f"  {engine:14s} {len(values):3d} plans  TPOT median {statistics.median(tp):.2f} max {max(tp):.2f}  "
              f"TTFT median {statistics.median(tt):.2f} max {max(tt):.2f}")


if __name__ == "__main__":
    main()
