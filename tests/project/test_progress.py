"""Progress of long runs and files written whole (inferplan/progress.py), and their use by
bench/leave_one_source_out.py: a redrawn bar on a terminal, plain rate-limited lines elsewhere, the time left from
the share done; a file written through a temporary file, so that an error or an interrupt leaves the old one; the
leave-one-source-out run reporting fits as they end and stopping on Ctrl-C with its workers ended."""

from __future__ import annotations

import io
import json
import math
import multiprocessing
import os
import stat
import statistics
from importlib import resources
from pathlib import Path

import pytest

from inferplan.planner.calibration.scenarios import read_scenarios
from inferplan.progress import ProgressLine, format_duration, write_atomically

EXAMPLE = Path(str(resources.files("inferplan.planner").joinpath("data/example-scenarios.jsonl")))


class Stream(io.StringIO):
    def __init__(self, terminal: bool) -> None:
        super().__init__()
        self.terminal = terminal

    def isatty(self) -> bool:
        return self.terminal


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_terminal_gets_one_line_redrawn_with_a_bar_and_the_time_left() -> None:
    stream, clock = Stream(terminal=True), Clock()
    with ProgressLine(stream, clock=clock, columns=200) as bar:
        clock.now += 10
        bar.update(1, 4, "sweep 1/3 term 10/55  loss 12.50")
        clock.now += 10
        bar.update(2, 4, "sweep 2/3")
    drawn = stream.getvalue()
    first = "\r[#####...............] sweep 1/3 term 10/55  loss 12.50  ~30 s left"
    second = "\r[##########..........] sweep 2/3  ~20 s left"
    assert drawn == first + second.ljust(len(first)) + "\n"  # the longer line before is blanked out
    assert "\n" not in drawn[:-1]


def test_a_terminal_line_is_cut_to_the_width_and_redrawn_at_most_every_tenth_of_a_second() -> None:
    stream, clock = Stream(terminal=True), Clock()
    bar = ProgressLine(stream, clock=clock, columns=50)  # 49 characters: the last column would wrap
    bar.update(0, 10, "x" * 100)
    bar.update(2, 10, "not drawn: too soon")
    assert stream.getvalue() == "\r[....................] " + "x" * 23 + "..."
    clock.now += 1
    bar.update(1, 10, "x" * 100)  # the text is cut, not the time left
    assert stream.getvalue().endswith("\r[##..................] " + "x" * 12 + "...  ~9 s left")
    bar.update(10, 10, "done")  # the end is always drawn, however soon
    assert stream.getvalue().endswith("\r" + "[####################] done  done in 1 s".ljust(49))
    bar.clear()
    assert stream.getvalue().endswith("\r" + " " * 40 + "\r")
    bar.close()
    assert not stream.getvalue().endswith("\n")  # nothing left on the line to end


def test_elsewhere_plain_lines_at_most_every_few_seconds_and_always_the_last() -> None:
    stream, clock = Stream(terminal=False), Clock()
    with ProgressLine(stream, every_s=5.0, clock=clock) as bar:
        for step in range(1, 11):
            clock.now += 2
            bar.update(step, 10, f"fold {step}/10 (sourc\u00e9)")
    lines = stream.getvalue().splitlines()
    assert lines == [
        " 10% fold 1/10 (sourc?)  ~18 s left",
        " 40% fold 4/10 (sourc?)  ~12 s left",
        " 70% fold 7/10 (sourc?)  ~6 s left",
        "100% fold 10/10 (sourc?)  done in 20 s",
    ]
    assert "\r" not in stream.getvalue()


def test_nothing_done_yet_has_no_estimate_and_no_total_no_share() -> None:
    bar = ProgressLine(Stream(terminal=False), clock=Clock())
    assert bar.line(0, 10, "starting") == "  0% starting"
    assert bar.line(3, 0, "nothing to do") == "  0% nothing to do"


@pytest.mark.parametrize(("seconds", "text"), [(0.4, "0 s"), (40, "40 s"), (89, "89 s"), (420, "7 min"),
                                               (3900, "1 h 05 min"), (-3, "0 s")])
def test_durations_read_as_a_person_would_say_them(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def _left_behind(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_a_file_written_whole_replaces_the_old_one_and_keeps_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "factors.json"
    write_atomically(target, "new\n")
    assert target.read_text(encoding="utf-8") == "new\n"
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask  # as open() makes it, not mkstemp's 0600
    target.chmod(0o640)
    write_atomically(str(target), "newer\n")
    assert target.read_text(encoding="utf-8") == "newer\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert _left_behind(tmp_path) == []


def test_a_write_that_fails_halfway_leaves_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "factors.json"
    target.write_text("old\n", encoding="utf-8")
    with pytest.raises(UnicodeEncodeError):
        write_atomically(target, "half" * 10_000 + "\u00e9", encoding="ascii")
    assert target.read_text(encoding="utf-8") == "old\n"
    assert _left_behind(tmp_path) == []


def test_an_interrupt_before_the_rename_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "factors.json"
    target.write_text("old\n", encoding="utf-8")

    def interrupted(*_: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_atomically(target, "new\n")
    assert target.read_text(encoding="utf-8") == "old\n"
    assert _left_behind(tmp_path) == []


# ----------------------------------------------------------------------------------------------------------
# bench/leave_one_source_out.py


def test_leave_one_source_out_reports_each_fit_as_it_ends(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bench.leave_one_source_out import main

    assert main(["--scenarios", str(EXAMPLE), "--sweeps", "1", "--jobs", "2", "--save", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    lines = captured.err.splitlines()  # not a terminal: a line per fit
    fits = 1 + len({row.source_name for row in read_scenarios(EXAMPLE).scenarios})  # all rows, then each left out
    assert fits >= 3
    assert lines[0] == f"  0% 0/{fits} fits, 2 at a time"
    assert [line.split("% ")[1].split(",")[0] for line in lines[1:]] == [f"{n}/{fits} fits" for n in
                                                                          range(1, fits + 1)]
    assert lines[-1].startswith("100% ") and "done in" in lines[-1] and "running" not in lines[-1]
    assert captured.out.count("fit without") == fits  # the report on stdout is unchanged
    assert _left_behind(tmp_path) == [] and len(list(tmp_path.glob("*.json"))) == fits


def test_leave_one_source_out_reports_the_lines_it_leaves_out_and_refuses_nothing_to_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad line, and a line whose id an earlier file gave, are named on stderr as `inferplan calibrate` names them
    (they were dropped silently, and the same file given twice was fitted twice); files without a valid line and a
    `--full` file that is missing or not factors are refused with exit status 2 before any fit (a traceback after
    all the fits, for `--full`)."""
    from bench.leave_one_source_out import main

    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    one_bad = tmp_path / "one-bad.jsonl"
    one_bad.write_text("\n".join([*lines, "not json"]) + "\n", encoding="utf-8")
    assert main(["--scenarios", str(one_bad), str(EXAMPLE), "--sweeps", "1", "--jobs", "1"]) == 0
    captured = capsys.readouterr()
    reported = [line for line in captured.err.splitlines() if line.endswith("(line skipped)")]
    assert reported[0] == f"{one_bad}: line {len(lines) + 1}: not valid JSON (Expecting value at column 1) " \
        "(line skipped)"
    assert len(reported) == 1 + len([line for line in lines if line.strip()])  # the bad line, then every duplicate
    assert all("duplicate id" in line and line.startswith(f"{EXAMPLE}: ") for line in reported[1:])
    held = {row.source_name: 0 for row in read_scenarios(EXAMPLE).scenarios}
    for row in read_scenarios(EXAMPLE).scenarios:
        held[row.source_name] += 1
    for source, n in held.items():  # each source's rows held out once, not twice
        assert f"fit without {source:22s} ({n:3d} rows held out)" in captured.out

    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    bad_factors = tmp_path / "factors.json"
    bad_factors.write_text("{}", encoding="utf-8")
    for argv, says in ((["--scenarios", str(empty)], "no scenario line to fit"),
                       (["--scenarios", str(EXAMPLE), "--full", str(tmp_path / "missing.json")], "not found"),
                       (["--scenarios", str(EXAMPLE), "--full", str(bad_factors)], "not a fit's factors")):
        assert main([*argv, "--jobs", "1"]) == 2
        captured = capsys.readouterr()
        assert says in captured.err and "Traceback" not in captured.err and "fit without" not in captured.out


def test_leave_one_source_out_stops_on_ctrl_c_and_ends_its_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench.leave_one_source_out import main

    def interrupted(self: ProgressLine, done: float, total: float, text: str) -> None:
        if done:  # after the first fit ends, while the others run
            raise KeyboardInterrupt

    monkeypatch.setattr(ProgressLine, "update", interrupted)
    assert main(["--scenarios", str(EXAMPLE), "--sweeps", "1", "--jobs", "2", "--save", str(tmp_path)]) == 130
    assert multiprocessing.active_children() == []
    err = capsys.readouterr().err
    assert "interrupted" in err and "Traceback" not in err
    assert _left_behind(tmp_path) == []


def test_leave_one_source_out_compares_each_source_with_an_earlier_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--compare` reads an earlier run's `--predictions` and prints each source's held-out median APE there and
    here with the change, its mean |log error| there and here with the change, and both runs' median and worst
    source, as table (iii) scores them; a file that is not such a run is refused before any fit."""
    from bench.leave_one_source_out import main

    before = tmp_path / "before.jsonl"
    assert main(["--scenarios", str(EXAMPLE), "--sweeps", "1", "--jobs", "2", "--predictions", str(before)]) == 0
    first = capsys.readouterr().out
    assert "(iv)" not in first
    assert main(["--scenarios", str(EXAMPLE), "--sweeps", "1", "--jobs", "2", "--compare", str(before)]) == 0
    out = capsys.readouterr().out
    table = out.split("(iv) held-out median APE per source against")[1]
    rows = [line.split() for line in table.splitlines()[2:] if line and not line.startswith(("reference", "this"))]
    sources = {row.source_name for row in read_scenarios(EXAMPLE).scenarios}
    per_source = {row[0]: row[1:] for row in rows if row[0] in sources}
    assert per_source and set(per_source) <= sources
    # The same code: the same figures, and the mean log error that of the rows themselves.
    assert all(there == here and change == "+0.0" and log_there == log_here and log_change == "+0.000"
               for there, here, change, log_there, log_here, log_change in per_source.values())
    predicted = [json.loads(line) for line in before.read_text(encoding="utf-8").splitlines()]
    for source, figures in per_source.items():
        logs = [abs(math.log(p["held_out"] / p["measured"])) for p in predicted
                if p["source"] == source and p["held_out"] is not None and not p["suspect"]
                and not p.get("unmodelled")]
        assert figures[3] == f"{statistics.fmean(logs):.3f}", source
    summary = next(line for line in out.splitlines() if line.startswith("held out over"))
    median = summary.split("median ")[1].split(",")[0]
    assert f"reference: median {median} over {len(per_source)} sources" in table
    assert f"this run: median {median} over {len(per_source)} sources" in table

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x"}\n', encoding="utf-8")
    with pytest.raises(SystemExit) as refused:
        main(["--scenarios", str(EXAMPLE), "--compare", str(bad)])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "--compare" in err and "line 1 is not a held-out prediction" in err


def test_leave_one_source_out_scores_the_fits_a_saved_run_wrote_without_fitting_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--folds DIR` reads every fit from DIR as `--save DIR` wrote them and fits nothing: each held-out row is
    predicted with its source's saved fold, the in-sample column with the saved all-rows fit. A fold that is
    missing is refused (exit 2, naming the file), and `--save` with `--folds` is refused."""
    from bench.leave_one_source_out import main
    from inferplan.planner.calibration.calibrate import unmodelled
    from inferplan.planner.calibration.predict import predict_scenarios
    from inferplan.planner.model.factors import parse_factors

    folds = tmp_path / "folds"
    assert main(["--scenarios", str(EXAMPLE), "--sweeps", "1", "--jobs", "2", "--save", str(folds)]) == 0
    capsys.readouterr()
    predictions = tmp_path / "read.jsonl"
    assert main(["--scenarios", str(EXAMPLE), "--folds", str(folds), "--predictions", str(predictions)]) == 0
    captured = capsys.readouterr()
    assert "fit without" not in captured.out and "fits" not in captured.err  # nothing fitted, no progress bar
    written = [json.loads(line) for line in predictions.read_text(encoding="utf-8").splitlines()]
    rows = [row for row in read_scenarios(EXAMPLE).scenarios if not unmodelled(row)]
    assert {w["id"] for w in written} == {row.id for row in rows}

    def saved(name: str) -> object:
        return parse_factors(json.loads((folds / f"{name}.json").read_text(encoding="utf-8")))

    by_id = {w["id"]: w for w in written}
    full = saved("all-rows")
    for source in {row.source_name for row in rows}:
        held = [row for row in rows if row.source_name == source]
        for row, out, ins in zip(held, predict_scenarios(held, saved(source)), predict_scenarios(held, full),
                                 strict=True):
            assert (by_id[row.id]["held_out"], by_id[row.id]["in_sample"]) == (out.predicted, ins.predicted)

    victim = next(p for p in folds.glob("*.json") if p.name != "all-rows.json")
    victim.unlink()
    assert main(["--scenarios", str(EXAMPLE), "--folds", str(folds)]) == 2
    assert f"no {victim.name}" in capsys.readouterr().err
    with pytest.raises(SystemExit) as refused:
        main(["--scenarios", str(EXAMPLE), "--folds", str(folds), "--save", str(tmp_path / "again")])
    assert refused.value.code == 2
    assert "--save with --folds" in capsys.readouterr().err
