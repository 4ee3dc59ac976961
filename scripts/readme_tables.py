"""Rewrite the README's accuracy tables from `inferplan accuracy` on the four published files.

Usage (from the repository root, ../shared/accuracy beside it):

    python scripts/readme_tables.py [--check]

Each table sits between `<!-- MARKER:begin -->` and `<!-- MARKER:end -->` (MARKER in `TABLES`); the rows are what
`inferplan accuracy --scenarios FILE` prints with the shipped factors, in the same order. `--check` writes nothing
and exits 1 when a table differs from what the model gives now. tests/planner/test_accuracy_regression.py holds
the model to these tables (within 3 points).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from inferplan.planner.accuracy import AccuracyReport, score
from inferplan.planner.predict import predict_scenarios
from inferplan.planner.scenarios import read_scenarios

REPO = Path(__file__).resolve().parents[1]
ACCURACY = REPO.parent / "shared" / "accuracy"
TABLES = {
    "scenarios.jsonl": "accuracy-table",
    "latency-under-load.jsonl": "accuracy-table-load",
    "offline-and-online.jsonl": "accuracy-table-offline-online",
    "large-models-under-load.jsonl": "accuracy-table-large",
}
TARGETS = {
    "decode_tps_single": "<= 10%", "kv_cache_tokens": "<= 5%", "kv_cache_gib": "<= 5%", "max_concurrency": "<= 5%",
    "weights_gib": "<= 5%", "output_tps_total": "<= 15%", "e2e_ms_mean": "<= 15%",
}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def table(report: AccuracyReport) -> str:
    """The markdown table of one file's report: per metric and overall."""
    lines = ["| metric | scored | MdAPE | MAPE | within 25% | target (MdAPE) |", "|---|---|---|---|---|---|"]
    for name, s in report.metrics.items():
        if not s.scored:
            continue
        target = TARGETS.get(name, "<= 15%" if name.startswith(("ttft", "tpot")) else "-")
        lines.append(f"| {name} | {s.scored} | {_pct(s.median_ape)} | {_pct(s.mape)} | {_pct(s.within25)} | {target} |")
    o = report.overall
    lines.append(f"| overall | {o.scored} | {_pct(o.median_ape)} | {_pct(o.mape)} | {_pct(o.within25)} "
                 "| <= 12%, >= 75% within 25% |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when a table is out of date")
    args = parser.parse_args(argv)
    readme = REPO / "README.md"
    text = readme.read_text(encoding="utf-8")
    new = text
    for name, marker in TABLES.items():
        path = ACCURACY / name
        if not path.is_file():
            print(f"{path} not found", file=sys.stderr)
            return 2
        rows = read_scenarios(path).scenarios
        begin, end = f"<!-- {marker}:begin -->", f"<!-- {marker}:end -->"
        if begin not in new or end not in new:
            print(f"README.md has no {marker} markers", file=sys.stderr)
            return 2
        head, rest = new.split(begin, 1)
        _, tail = rest.split(end, 1)
        new = f"{head}{begin}\n{table(score(rows, predict_scenarios(rows)))}\n{end}{tail}"
    if args.check:
        if new != text:
            print("README accuracy tables are out of date: python scripts/readme_tables.py")
            return 1
        return 0
    readme.write_text(new, encoding="utf-8")
    print("README accuracy tables rewritten")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
