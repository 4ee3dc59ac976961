"""`inferplan calibrate` on a long fit (inferplan/cli.py): its progress on stderr (stdout keeps the table), and
Ctrl-C ending it with exit status 130, a short message and no traceback, with `--write`'s file as it was."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

import pytest

from inferplan.cli import main
from inferplan.progress import ProgressLine

EXAMPLE = str(Path(str(resources.files("inferplan.planner").joinpath("data/example-scenarios.jsonl"))))


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def test_calibrate_shows_its_progress_on_stderr_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "factors.json"
    assert main(["calibrate", "--scenarios", EXAMPLE, "--write", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("fitted on ") and captured.out.endswith(f"wrote {out}\n")
    lines = captured.err.splitlines()  # not a terminal: plain lines, the first and the last at least
    assert lines and all(" sweep " in line and "  loss " in line for line in lines)
    assert lines[-1].startswith("100% sweep 3/3 ") and "done in" in lines[-1]
    assert captured.err.isascii() and "\r" not in captured.err


def test_ctrl_c_during_the_fit_exits_130_and_leaves_the_factors_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "factors.json"
    out.write_text("the factors before\n", encoding="utf-8")
    monkeypatch.setattr(ProgressLine, "update", _interrupt)  # Ctrl-C as the fit reports its first term
    assert main(["calibrate", "--scenarios", EXAMPLE, "--write", str(out)]) == 130
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"inferplan calibrate: interrupted; {out} left as it was\n"
    assert out.read_text(encoding="utf-8") == "the factors before\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["factors.json"]


def test_ctrl_c_while_the_factors_are_written_leaves_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "factors.json"
    out.write_text("the factors before\n", encoding="utf-8")
    monkeypatch.setattr(os, "replace", _interrupt)  # the new file is whole, not yet in place
    assert main(["calibrate", "--scenarios", EXAMPLE, "--write", str(out)]) == 130
    assert "left as it was" in capsys.readouterr().err
    assert out.read_text(encoding="utf-8") == "the factors before\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["factors.json"]


def test_ctrl_c_without_write_says_only_that_it_stopped(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(ProgressLine, "update", _interrupt)
    assert main(["calibrate", "--scenarios", EXAMPLE]) == 130
    assert capsys.readouterr().err == "inferplan calibrate: interrupted\n"
