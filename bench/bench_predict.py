"""Timing figures for the predictor and the command line (prints a table; asserts nothing).

Usage (from the repository root):

    python bench/bench_predict.py

Figures:
  (a) in-process `predict_scenarios` on 10,000 scenarios built by cycling the published file's
      timed (non-startup) and startup rows, each with a unique id and slightly varied token counts;
      3 runs, min / median seconds and scenarios per second;
  (b) wall time of `inferplan --help` (the console script next to sys.executable), 10 runs;
  (c) wall time of `inferplan accuracy --scenarios <published file>`, 3 runs.

The published file is ../shared/accuracy/scenarios.jsonl relative to the repository root; without it
the script falls back to the bundled example file.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path

from inferplan.planner.calibration.predict import predict_scenarios
from inferplan.planner.calibration.scenarios import Scenario, read_scenarios

REPO = Path(__file__).resolve().parents[1]
PUBLISHED = REPO.parent / "shared" / "accuracy" / "scenarios.jsonl"
N_SCENARIOS = 10_000


def _source_file() -> Path:
    if PUBLISHED.is_file():
        return PUBLISHED
    print(f"note: {PUBLISHED} not found; using the bundled example file", file=sys.stderr)
    return Path(str(resources.files("inferplan.planner").joinpath("data/example-scenarios.jsonl")))


def build_scenarios(base: Sequence[Scenario], n: int) -> list[Scenario]:
    """`n` scenarios cycling the timed rows then the startup rows, unique ids, token counts varied."""
    timed = [s for s in base if s.load.kind != "startup"]
    startup = [s for s in base if s.load.kind == "startup"]
    cycle = timed + startup
    out = []
    for i in range(n):
        row = cycle[i % len(cycle)]
        lap = i // len(cycle)
        update: dict[str, object] = {"id": f"{row.id}-bench{i}"}
        if row.input_tokens is not None:
            update["input_tokens"] = row.input_tokens + (lap * 7) % 64
        if row.output_tokens is not None:
            update["output_tokens"] = max(1, row.output_tokens + (lap * 5) % 32) if row.output_tokens else 0
        out.append(row.model_copy(update=update))
    return out


def _timed(fn: Callable[[], object], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def _run(cmd: list[str]) -> None:
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> int:
    source = _source_file()
    base = list(read_scenarios(source).scenarios)
    rows = build_scenarios(base, N_SCENARIOS)
    n_startup = sum(r.load.kind == "startup" for r in rows)
    start = time.perf_counter()
    predictions = predict_scenarios(rows)  # first run: loads catalogs, fills per-config hardware caches
    cold = time.perf_counter() - start
    predicted = sum(p.predicted is not None for p in predictions)
    predict_times = _timed(lambda: predict_scenarios(rows), 3)

    script = Path(sys.executable).parent / "inferplan"
    if not script.exists():
        print(f"note: console script {script} not found; using python -m inferplan.cli", file=sys.stderr)
    cli = [str(script)] if script.exists() else [sys.executable, "-m", "inferplan.cli"]
    help_times = _timed(lambda: _run([*cli, "--help"]), 10)
    accuracy_times = _timed(lambda: _run([*cli, "accuracy", "--scenarios", str(source)]), 3)

    print(f"scenario source: {source} ({len(base)} rows)")
    print(f"predict input: {len(rows)} scenarios ({len(rows) - n_startup} timed, {n_startup} startup), "
          f"{predicted} predicted, {len(rows) - predicted} skipped")
    print()
    print(f"{'figure':44s} {'runs':>4s} {'min s':>8s} {'median s':>9s} {'rate':>16s}")
    for name, times, rate in [
        ("(a0) first predict_scenarios call (cold)", [cold], len(rows)),
        (f"(a) predict_scenarios, {len(rows)} scenarios", predict_times, len(rows)),
        ("(b) inferplan --help", help_times, None),
        ("(c) inferplan accuracy (published file)", accuracy_times, None),
    ]:
        lo, med = min(times), statistics.median(times)
        rate_text = f"{rate / med:,.0f} scen/s" if rate else ""
        print(f"{name:44s} {len(times):4d} {lo:8.3f} {med:9.3f} {rate_text:>16s}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
