"""Rewrite docs/accuracy.md's accuracy tables and the README's summary of them.

They are what `inferplan accuracy` gives on the four published files.

Usage (from the repository root, ../shared/accuracy beside it):

    python scripts/readme_tables.py [--check]

Each table of docs/accuracy.md sits between `<!-- MARKER:begin -->` and `<!-- MARKER:end -->` (MARKER in `TABLES`);
the rows are what `inferplan accuracy --scenarios FILE` prints with the shipped factors, in the same order. The
README's summary (between `<!-- accuracy-summary:begin -->` and `<!-- accuracy-summary:end -->`) carries each file's
overall row; its held-out row comes from `bench/leave_one_source_out.py` and is left as it is. `--check` writes
nothing and exits 1 when a table differs from what the model gives now.
tests/planner/calibration/test_accuracy_regression.py holds the model to these tables (within 3 points) and the
README's summary to docs/accuracy.md.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from inferplan.planner.calibration.accuracy import AccuracyReport, score
from inferplan.planner.calibration.predict import predict_scenarios
from inferplan.planner.calibration.scenarios import read_scenarios

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "accuracy.md"
README = REPO / "README.md"
SUMMARY = "accuracy-summary"
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


def summary_row(name: str, report: AccuracyReport) -> str:
    """The README summary's row of one file: rows scored, MdAPE and share within 25% over all its metrics."""
    o = report.overall
    return f"| {name} | {o.scored} | {_pct(o.median_ape)} | {_pct(o.within25)} |"


def _between(text: str, marker: str, where: str) -> tuple[str, str, str] | None:
    begin, end = f"<!-- {marker}:begin -->", f"<!-- {marker}:end -->"
    if begin not in text or end not in text:
        print(f"{where} has no {marker} markers", file=sys.stderr)
        return None
    head, rest = text.split(begin, 1)
    inside, tail = rest.split(end, 1)
    return f"{head}{begin}", inside, f"{end}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when a table is out of date")
    args = parser.parse_args(argv)
    doc_text = DOC.read_text(encoding="utf-8")
    readme_text = README.read_text(encoding="utf-8")
    doc, readme = doc_text, readme_text
    for name, marker in TABLES.items():
        path = ACCURACY / name
        if not path.is_file():
            print(f"{path} not found", file=sys.stderr)
            return 2
        parts = _between(doc, marker, "docs/accuracy.md")
        summary = _between(readme, SUMMARY, "README.md")
        if parts is None or summary is None:
            return 2
        rows = read_scenarios(path).scenarios
        report = score(rows, predict_scenarios(rows))
        doc = f"{parts[0]}\n{table(report)}\n{parts[2]}"
        found = re.search(rf"^\| {re.escape(name)} \|.*$", summary[1], re.MULTILINE)
        if found is None:
            print(f"README.md's {SUMMARY} table has no row for {name}", file=sys.stderr)
            return 2
        inside = summary[1][:found.start()] + summary_row(name, report) + summary[1][found.end():]
        readme = f"{summary[0]}{inside}{summary[2]}"
    if args.check:
        if doc != doc_text or readme != readme_text:
            print("accuracy tables are out of date: python scripts/readme_tables.py")
            return 1
        return 0
    DOC.write_text(doc, encoding="utf-8")
    README.write_text(readme, encoding="utf-8")
    print("docs/accuracy.md tables and the README's summary rewritten")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
