"""The analytic model against the simulator on every example plan's recommendation (prints a table).

Usage (from the repository root):

    python bench/analytic_vs_simulated.py [--without-spread]

For each example under examples/plans/ and examples/platform/ with an aggregated recommendation (analytic, as the
search finds it before verification), the simulated TPOT p95 and TTFT p95 over the analytic ones, the simulation
judged in steady state as verification judges it (`verification.steady_requests`, `warmup_s`; seed 0), and the
median |log ratio| over the examples. Above 1 the analytic model was optimistic. `--without-spread`: the TPOT
samples without the running batch's spread (`PoissonModel._batch_spread`, added 2026-12-04), to see what it
changed. Prints figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path

from inferplan.planner.model import serving
from inferplan.planner.request import resolve_plan
from inferplan.planner.search.plan import plan
from inferplan.planner.simulation.verification import VERIFY_REQUESTS, simulate_candidate, steady_requests, warmup_s
from inferplan.planner.spec_parsing import load_plan_file

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--without-spread", action="store_true", help="TPOT samples without the batch's spread")
    if parser.parse_args().without_spread:
        serving.PoissonModel._batch_spread = lambda self, load: 0.0  # type: ignore[method-assign]
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


if __name__ == "__main__":
    main()
