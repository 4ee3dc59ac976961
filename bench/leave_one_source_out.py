"""Leave-one-source-out check of the fit: how well is a source predicted that the fit never saw, and how far do
the fitted engine terms move when one source is left out?

Usage (from the repository root):

    python bench/leave_one_source_out.py [--scenarios FILE ...] [--sweeps N] [--jobs J]
        [--full FACTORS.json] [--predictions FILE.jsonl] [--save DIR | --folds DIR] [--compare FILE.jsonl]

It runs `calibrate(...)` (the shipped procedure) once on all rows of the scenario files (by default the four
published files in ../shared/accuracy, pooled) and once per source without that source's rows (sources =
`Scenario.source_name`), `--jobs` fits at a time (default: one per core), showing the fits done and the time left
on stderr (`inferplan.progress`; Ctrl-C stops it with exit status 130 and ends the pool's workers). Every fit starts
from the neutral prior alone, so an engine line or a harness seen only in the held-out source is unknown to its fold
(a held-out source's harness is the fold's typical one for its engine line, at most its typical one of all,
`FactorSet.harness_for`). Step times
come from measured kernels and are the same in every fold: only engine terms and harness times are fitted. With
`--folds DIR` it fits nothing and reads every fit from DIR, as an earlier run's `--save DIR` wrote them: a change
to how rows are predicted that the fit would not answer (a held-out pair's default harness time, a simulator
setting the fit has no term for) is then scored in seconds (8 s on 2 cores), not ten to fifteen minutes; a change
the fit would answer still needs the fits run again before it is chosen. It prints:

  (i)   per engine term, the all-rows value and its largest relative change over the folds that still fit it;
  (ii)  per held-out source and metric, the median APE of its rows predicted with the fold's factors (held out),
        with the all-rows fit (in sample) and with the shipped factors;
  (iii) per source over all its metrics: held-out median APE and share within 25%, in-sample median APE; then the
        median and the worst source. Rows of a model kind scored apart and never fitted on (`predict.unmodelled`:
        MLA, DeepSeek-V3/R1) are not in these figures.
  (iv)  with `--compare FILE.jsonl` (an earlier run's `--predictions`, e.g. of the code before a change): per source,
        its held-out median APE there and here and the difference, its mean |ln(predicted / measured)| there and
        here and the difference (a median can flip between two rows; the mean moves with every row), then the
        median and the worst source of each, the figures a model or fit variant is chosen by (docs/calibration.md).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import signal
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from inferplan.planner.calibration.accuracy import absolute_percentage_error, score
from inferplan.planner.calibration.calibrate import calibrate, engine_targets, fittable_lines, training_rows, unmodelled
from inferplan.planner.calibration.predict import predict_scenarios
from inferplan.planner.calibration.scenarios import Scenario, read_pooled
from inferplan.planner.model.factors import FactorSet, load_factors, parse_factors
from inferplan.progress import ProgressLine, write_atomically

REPO = Path(__file__).resolve().parents[1]
ACCURACY = REPO.parent / "shared" / "accuracy"
PUBLISHED = tuple(ACCURACY / f"{name}.jsonl" for name in
                  ("scenarios", "latency-under-load", "offline-and-online", "large-models-under-load"))


def _ignore_interrupts() -> None:
    """A pool worker leaves Ctrl-C to the parent: the terminal sends SIGINT to the whole process group, and the
    parent ends the workers (Pool.terminate) instead of each printing a traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _fit_fold(job: tuple[str, list[Scenario], FactorSet, int]) -> tuple[str, FactorSet, float]:
    source, train, start, sweeps = job
    t0 = time.perf_counter()
    return source, calibrate(train, start, sweeps=sweeps).factors, time.perf_counter() - t0


def _fit_name(source: str) -> str:
    return "all rows" if source == "(all rows)" else f"without {source}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _log(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _fitted_lines(rows: Sequence[Scenario]) -> set[str]:
    return fittable_lines(training_rows(rows))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Leave-one-source-out check of the fit.")
    parser.add_argument("--scenarios", nargs="+", type=Path, default=list(PUBLISHED),
                        help="scenario files to pool (default: the four published files)")
    parser.add_argument("--sweeps", type=int, default=3, help="coordinate-descent sweeps per fit (default 3)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="folds fitted in parallel")
    parser.add_argument("--full", type=Path, metavar="FACTORS.json",
                        help="the all-rows fit, if already made by the same procedure (e.g. the shipped factors, "
                             "fitted by `inferplan calibrate` on the same files): read instead of fitted again")
    parser.add_argument("--predictions", type=Path, metavar="FILE.jsonl",
                        help="also write every held-out row's prediction (source, id, metric, measured, held-out, "
                             "in-sample; rows of unmodelled architectures marked `unmodelled`) as JSON lines")
    parser.add_argument("--save", type=Path, metavar="DIR",
                        help="write every fit's factors to DIR (all-rows.json, <source>.json)")
    parser.add_argument("--folds", type=Path, metavar="DIR",
                        help="read every fit's factors from DIR, as --save wrote them, instead of fitting: a change "
                             "to how rows are predicted that leaves the fit alone is scored in seconds (a change "
                             "the fit would answer needs the fits run again)")
    parser.add_argument("--compare", type=Path, metavar="FILE.jsonl",
                        help="an earlier run's --predictions file: print each source's held-out median APE there "
                             "and here, and the median and worst source of both")
    args = parser.parse_args(argv)
    if args.folds is not None and args.save is not None:
        parser.error("--save with --folds: nothing is fitted to save")
    reference = None
    if args.compare is not None:
        try:
            reference = held_out_by_source(args.compare)
        except (OSError, ValueError) as exc:
            parser.error(f"--compare {args.compare}: {exc}")
    try:
        return _leave_one_source_out(args, reference)
    except KeyboardInterrupt:
        print("leave_one_source_out: interrupted", file=sys.stderr)
        return 130


def held_out_by_source(path: Path) -> dict[str, tuple[float, float]]:
    """Each source's held-out errors in a `--predictions` file (`held_out_errors`)."""
    return held_out_errors(path.read_text(encoding="utf-8").splitlines())


def held_out_errors(lines: Sequence[str]) -> dict[str, tuple[float, float]]:
    """Each source's held-out (median APE, mean |ln(predicted / measured)|) over `--predictions` lines, scored as
    table (iii) scores them: rows that are not suspect, of modelled architectures, with a prediction. The median is
    what variants are chosen by; the mean log error moves with every row, where a median can flip between two rows
    (a source's median can get worse while most of its rows get better), so table (iv) prints both."""
    apes: dict[str, list[float]] = defaultdict(list)
    logs: dict[str, list[float]] = defaultdict(list)
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if row.get("suspect") or row.get("unmodelled") or row["held_out"] is None:
                continue
            predicted, measured = float(row["held_out"]), float(row["measured"])
            apes[row["source"]].append(absolute_percentage_error(predicted, measured))
            logs[row["source"]].append(abs(math.log(predicted / measured)))
        except (json.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
            raise ValueError(f"line {number} is not a held-out prediction ({exc!r})") from exc
    if not apes:
        raise ValueError("no held-out predictions in it")
    # Rounded as `accuracy.score` rounds its medians, so the two tables agree to the digit.
    return {source: (round(statistics.median(values), 4), round(statistics.fmean(logs[source]), 4))
            for source, values in apes.items()}


def compare_sources(here: dict[str, tuple[float, float]], there: dict[str, tuple[float, float]]) -> list[str]:
    """Table (iv): each source's held-out median APE in the reference run and in this one with the change (largest
    change first), its mean |log error| in both with the change, then each run's median over its sources and its
    worst source."""
    lines = [f"{'source':22s} {'reference':>9s} {'this run':>9s} {'change':>8s} {'mean|log|':>10s} {'this run':>9s} "
             f"{'change':>7s}"]

    def median_of(figures: dict[str, tuple[float, float]], source: str) -> float:
        return figures[source][0] if source in figures else 0.0

    for source in sorted(set(here) | set(there),
                         key=lambda s: (-abs(median_of(here, s) - median_of(there, s)), s)):
        a, b = there.get(source), here.get(source)
        change = "-" if a is None or b is None else f"{100 * (b[0] - a[0]):+.1f}"
        log_change = "-" if a is None or b is None else f"{b[1] - a[1]:+.3f}"
        lines.append(f"{source:22s} {_pct(a[0] if a else None):>9s} {_pct(b[0] if b else None):>9s} {change:>8s} "
                     f"{_log(a[1] if a else None):>10s} {_log(b[1] if b else None):>9s} {log_change:>7s}")
    for name, figures in (("reference", there), ("this run", here)):
        if not figures:
            lines.append(f"{name}: no source held out")
            continue
        worst = max(figures, key=lambda s: figures[s][0])
        lines.append(f"{name}: median {_pct(statistics.median(v[0] for v in figures.values()))} over "
                     f"{len(figures)} sources, worst {_pct(figures[worst][0])} ({worst})")
    return lines


def _fit_folds(args: argparse.Namespace, rows: list[Scenario], by_source: dict[str, list[Scenario]],
               sources: list[str], shipped: FactorSet) -> dict[str, FactorSet]:
    """Every fit of the run: all rows (unless `--full` gives it) and each source left out, keyed by the source
    left out ("(all rows)" for the first); written to `--save` as they end."""
    initial = replace(shipped, engines={}, harness_ms={}, meta={})
    jobs = [] if args.full else [("(all rows)", rows, initial, args.sweeps)]
    jobs += [(source, [r for r in rows if r.source_name != source], initial, args.sweeps) for source in sources]
    folds: dict[str, FactorSet] = {}
    # The fits are reported as they end; a fit's time grows with its rows, so rows measure the share done.
    work = {job[0]: len(job[1]) for job in jobs}
    workers = max(args.jobs, 1)
    # Leaving the pool's block terminates its workers, on an interrupt too.
    with multiprocessing.Pool(workers, initializer=_ignore_interrupts) as pool, \
            ProgressLine(sys.stderr, every_s=0.0) as bar:
        bar.update(0, sum(work.values()), f"0/{len(jobs)} fits, {workers} at a time")
        for source, fitted, seconds in pool.imap_unordered(_fit_fold, jobs):
            folds[source] = fitted
            held = len(by_source.get(source, ()))
            bar.clear()
            print(f"fit without {source:22s} ({held:3d} rows held out): {seconds:6.1f} s", flush=True)
            # Workers take the fits in order: those running are the first unfinished ones.
            running = [_fit_name(job[0]) for job in jobs[:len(folds) + workers] if job[0] not in folds]
            bar.update(sum(work[s] for s in folds), sum(work.values()),
                       f"{len(folds)}/{len(jobs)} fits, last {_fit_name(source)}"
                       + (f"; running: {', '.join(running)}" if running else ""))
            if args.save:
                args.save.mkdir(parents=True, exist_ok=True)
                name = "all-rows" if source == "(all rows)" else source
                write_atomically(args.save / f"{name}.json", json.dumps(fitted.to_json(), indent=2) + "\n")
    return folds


def _read_folds(folder: Path, sources: Sequence[str], *, with_all_rows: bool) -> dict[str, FactorSet]:
    """The fits a `--save` run wrote to `folder`, keyed as `_fit_folds` keys them; a missing one is an error, not a
    fit made here."""
    names = (["(all rows)"] if with_all_rows else []) + list(sources)
    folds: dict[str, FactorSet] = {}
    for name in names:
        path = folder / f"{'all-rows' if name == '(all rows)' else name}.json"
        if not path.is_file():
            raise ValueError(f"no {path.name} (a fold of these scenarios that a --save run writes)")
        try:
            folds[name] = parse_factors(json.loads(path.read_text(encoding="utf-8")))
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"{path.name} is not a fit's factors ({exc!r})") from exc
    return folds


def _leave_one_source_out(args: argparse.Namespace, reference: dict[str, tuple[float, float]] | None) -> int:
    missing = [str(p) for p in args.scenarios if not p.is_file()]
    if missing:
        print(f"scenario file not found: {', '.join(missing)}", file=sys.stderr)
        return 2
    rows, bad = read_pooled(args.scenarios)  # as `inferplan calibrate` reads them
    for message in bad:
        print(f"{message} (line skipped)", file=sys.stderr)
    if not rows:
        print("no scenario line to fit (the files hold no valid line)", file=sys.stderr)
        return 2
    given_full = None
    if args.full is not None:  # read before the fits, which take minutes
        try:
            given_full = parse_factors(json.loads(args.full.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:  # JSONDecodeError is a ValueError
            why = "not found" if isinstance(exc, FileNotFoundError) else f"not a fit's factors ({exc})"
            print(f"--full {args.full}: {why}", file=sys.stderr)
            return 2
    by_source: dict[str, list[Scenario]] = defaultdict(list)
    for row in rows:
        by_source[row.source_name].append(row)
    sources = sorted(by_source, key=lambda s: (-len(by_source[s]), s))

    start = time.perf_counter()
    shipped = load_factors()
    if args.folds is not None:
        try:
            folds = _read_folds(args.folds, sources, with_all_rows=args.full is None)
        except (OSError, ValueError) as exc:
            print(f"--folds {args.folds}: {exc}", file=sys.stderr)
            return 2
    else:
        folds = _fit_folds(args, rows, by_source, sources, shipped)
    full = given_full if given_full is not None else folds.pop("(all rows)")

    # (i) stability of the engine terms
    print()
    print("(i) engine terms: all-rows value and max relative change over the folds that still fit the line")
    print(f"{'line':16s} {'term':22s} {'all-rows':>9s} {'max |chg|':>9s}  worst fold")
    full_lines = _fitted_lines(rows)
    fold_lines = {s: _fitted_lines([r for r in rows if r.source_name != s]) for s in sources}
    for line in sorted(full_lines):
        for name in engine_targets(line):
            ref = getattr(full.engine(line), name)
            changes = [(abs(getattr(folds[s].engine(line), name) - ref) / abs(ref), s)
                       for s in sources if line in fold_lines[s] and ref]
            worst = max(changes) if changes else None
            print(f"{line:16s} {name:22s} {ref:9.4g} {_pct(worst[0]) if worst else '-':>9s}  "
                  f"{worst[1] if worst else '-'}")

    # (ii) held-out accuracy per metric
    print()
    print("(ii) held-out source: median APE per metric (non-suspect rows of modelled architectures)")
    print(f"{'source':22s} {'metric':20s} {'n':>4s} {'held-out':>9s} {'in-sample':>9s} {'shipped':>9s}")
    summary: list[tuple[str, int, float | None, float | None, float | None]] = []
    apart: list[tuple[str, int, float | None]] = []
    dumped: list[str] = []
    for source in sources:
        held_all = by_source[source]
        held = [r for r in held_all if not unmodelled(r)]
        aside = [r for r in held_all if unmodelled(r)]
        if aside:
            aside_out = predict_scenarios(aside, folds[source])
            for reason, figures in score(aside, aside_out).unmodelled.items():
                apart.append((f"{source} ({reason})", figures.scored, figures.median_ape))
            # Written too (marked `unmodelled`): prediction intervals cover these rows as well.
            dumped += [json.dumps({"source": source, "id": row.id, "metric": row.metric, "measured": row.value,
                                   "held_out": out.predicted, "in_sample": ins.predicted, "suspect": row.suspect,
                                   "unmodelled": True})
                       for row, out, ins in zip(aside, aside_out, predict_scenarios(aside, full), strict=True)]
        if not held:
            continue
        predictions = [predict_scenarios(held, f) for f in (folds[source], full, shipped)]
        reports = [score(held, p) for p in predictions]
        dumped += [json.dumps({"source": source, "id": row.id, "metric": row.metric, "measured": row.value,
                               "held_out": out.predicted, "in_sample": ins.predicted, "suspect": row.suspect})
                   for row, out, ins in zip(held, predictions[0], predictions[1], strict=True)]
        for metric in sorted(reports[0].metrics):
            m = [r.metrics[metric] for r in reports]
            print(f"{source:22s} {metric:20s} {m[0].scored:4d} {_pct(m[0].median_ape):>9s} "
                  f"{_pct(m[1].median_ape):>9s} {_pct(m[2].median_ape):>9s}")
        o = [r.overall for r in reports]
        if o[0].scored:
            summary.append((source, o[0].scored, o[0].median_ape, o[0].within25, o[1].median_ape))

    print()
    print("(iii) per source, all metrics: held-out median APE and share within 25%, in-sample median APE")
    print(f"{'source':22s} {'n':>4s} {'held-out':>9s} {'<=25%':>7s} {'in-sample':>9s}")
    for source, n, held_out, within, in_sample in summary:
        print(f"{source:22s} {n:4d} {_pct(held_out):>9s} {_pct(within):>7s} {_pct(in_sample):>9s}")
    values = [h for _, _, h, _, _ in summary if h is not None]
    if values:
        worst = max(summary, key=lambda s: s[2] or 0.0)
        print(f"\nheld out over {len(values)} sources: median {_pct(statistics.median(values))}, "
              f"worst {_pct(worst[2])} ({worst[0]})")
    for source, n, median in apart:
        print(f"scored apart: {source}, {n} rows, held-out median APE {_pct(median)}")
    if reference is not None:
        print()
        print(f"(iv) held-out median APE per source against {args.compare}")
        try:
            here = held_out_errors(dumped)
        except ValueError:  # no held-out row of a modelled architecture was predicted
            here = {}
        print("\n".join(compare_sources(here, reference)))
    if args.predictions:
        write_atomically(args.predictions, "".join(line + "\n" for line in dumped))
        print(f"\nheld-out predictions of {len(dumped)} rows written to {args.predictions}")
    print(f"\ntotal {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
