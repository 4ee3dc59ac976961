"""How much a software-stack line (`vllm-v0-rocm`, docs/engines.md#factor-lines-factor_key) differs from its
engine's CUDA line: every measured row of a stack line predicted with the shipped factors as they are, and with
the stack lines taken out (so the rows get their CUDA line on the GPU's catalog figures, as a plan on that GPU
does when no current-release line covers it). Prints the median and range of measured / predicted per line.

    python bench/stack_lines.py [--scenarios FILE.jsonl ...] [--factors FACTORS.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from inferplan.planner.calibration.calibrate import row_line
from inferplan.planner.calibration.predict import predict_scenarios
from inferplan.planner.calibration.scenarios import read_scenarios
from inferplan.planner.catalog.engines import base_line
from inferplan.planner.model.factors import load_factors, parse_factors

REPO = Path(__file__).resolve().parents[1]
PUBLISHED = (REPO.parent / "shared" / "accuracy" / "scenarios.jsonl",
             REPO.parent / "shared" / "accuracy" / "latency-under-load.jsonl")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", nargs="+", type=Path, default=list(PUBLISHED))
    parser.add_argument("--factors", type=Path, default=None)
    args = parser.parse_args(argv)
    factors = parse_factors(json.loads(args.factors.read_text(encoding="utf-8"))) if args.factors else load_factors()
    rows = [r for path in args.scenarios for r in read_scenarios(path).scenarios if not r.suspect and r.engine]
    rows = [r for r in rows if (line := row_line(r)) is not None and base_line(line) != line]
    if not rows:
        print("no measured row is on a stack line")
        return 0
    cuda = replace(factors, engines={k: v for k, v in factors.engines.items() if base_line(k) == k})
    ratios: dict[tuple[str, str], list[float]] = defaultdict(list)
    for name, fs in (("own line", factors), ("CUDA line", cuda)):
        for row, p in zip(rows, predict_scenarios(rows, fs), strict=True):
            if p.predicted:
                ratios[(str(row_line(row)), name)].append(row.value / p.predicted)
    print(f"{'line':16s} {'predicted with':14s} {'rows':>5s} {'measured/predicted: median':>27s} "
          f"{'min':>6s} {'max':>6s}")
    for (line, name), values in sorted(ratios.items()):
        print(f"{line:16s} {name:14s} {len(values):5d} {statistics.median(values):27.2f} {min(values):6.2f} "
              f"{max(values):6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
