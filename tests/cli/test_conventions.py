"""The Unix conventions every `inferplan` command keeps (inferplan/cli.py): Ctrl-C ends it with exit status 130 and
a short message, no traceback; unreadable inputs, options given twice and unknown options are usage errors (exit 2)
that say what is wrong."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from inferplan.cli import CliError, main

REPO = Path(__file__).resolve().parents[2]
PLAN = REPO / "examples" / "plans" / "chat-assistant-8b.yaml"
EXAMPLE_ROWS = str(Path(str(resources.files("inferplan.planner").joinpath("data/example-scenarios.jsonl"))))


def _interrupt(*_: object, **__: object) -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize("command", [
    ["plan", str(PLAN)], ["simulate", str(PLAN)], ["render", str(PLAN)], ["report", str(PLAN)],
    ["diff", str(PLAN), "--deployment", str(PLAN)],
])
def test_ctrl_c_exits_130_without_a_traceback(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    # Every command but calibrate ended in KeyboardInterrupt's traceback (exit status 1 from a console script).
    monkeypatch.setattr("inferplan.cli._read_manifest", _interrupt)
    monkeypatch.setattr("inferplan.cli._read_deployment", lambda _: {"kind": "Deployment"})
    assert main(command) == 130
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines()[-1] == f"inferplan {command[0]}: interrupted"


@pytest.mark.parametrize("command", ["predict", "accuracy"])
def test_ctrl_c_while_scenarios_are_read_exits_130(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                          command: str) -> None:
    monkeypatch.setattr("inferplan.cli._read_some", _interrupt)
    assert main([command]) == 130
    assert capsys.readouterr().err == f"inferplan {command}: interrupted\n"


def test_ctrl_c_while_a_report_is_made_leaves_its_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.html"
    out.write_text("the report before\n", encoding="ascii")
    monkeypatch.setattr("inferplan.cli._read_manifest", _interrupt)
    assert main(["report", str(PLAN), "-o", str(out)]) == 130
    assert capsys.readouterr().err == f"inferplan report: interrupted; {out} left as it was\n"
    assert out.read_text(encoding="ascii") == "the report before\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]


def test_sigint_ends_a_long_simulation_with_130(tmp_path: Path) -> None:
    # A trace long enough to simulate for seconds; the first stderr line comes before the simulation.
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(f'{{"t": {i * 0.0005:.4f}, "prompt": 200, "output": 100}}\n' for i in range(400_000)),
                     encoding="utf-8")
    # SIGINT as a terminal delivers it: a test run started in the background (`.ci/run &`) has it ignored, and the
    # child would inherit that (Python installs no KeyboardInterrupt for a signal ignored at its start).
    process = subprocess.Popen([sys.executable, "-m", "inferplan.cli", "simulate", str(PLAN), "--no-verify",
                                "--trace", str(trace)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env=os.environ | {"PYTHONPATH": str(REPO)}, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert process.stderr is not None
    first = process.stderr.readline()
    assert first.startswith("inferplan: the trace's 400000 requests arrive")
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    assert out == ""
    assert "Traceback" not in err and err.endswith("inferplan simulate: interrupted\n")


@pytest.mark.parametrize("command", [["predict"], ["accuracy"], ["calibrate"]])
def test_an_unreadable_scenario_file_is_an_error_that_names_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        command: list[str]) -> None:
    # A file without read permission (chmod 000; root reads it anyway, hence open() refusing) was a traceback.
    unreadable = tmp_path / "rows.jsonl"
    unreadable.write_text(Path(EXAMPLE_ROWS).read_text(encoding="utf-8"), encoding="utf-8")

    def refuse(path: str, *args: Any, **kwargs: Any) -> Any:
        if Path(path) == unreadable:
            raise PermissionError(13, "Permission denied", str(path))
        return open(path, *args, **kwargs)

    monkeypatch.setattr("inferplan.planner.calibration.scenarios.open", refuse, raising=False)
    assert main([*command, "--scenarios", EXAMPLE_ROWS, str(unreadable)]) == 2
    assert capsys.readouterr().err == f"inferplan: error: cannot read scenario file {unreadable}: Permission denied\n"


@pytest.mark.parametrize("command", ["predict", "accuracy", "calibrate"])
def test_scenarios_given_twice_pool_both_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               command: str) -> None:
    # `--scenarios a.jsonl --scenarios b.jsonl` read b alone, without a word: a's rows were not scored or fitted.
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.touch()
    second.touch()
    read: list[list[str]] = []

    def refused(paths: list[str], verb: str) -> None:
        read.append(paths)
        raise CliError("stop here")

    monkeypatch.setattr("inferplan.cli._read_some", refused)
    assert main([command, "--scenarios", str(first), "--scenarios", str(second)]) == 2
    assert read == [[str(first), str(second)]]


@pytest.mark.parametrize(("command", "says"), [
    (["plan", "--no-verfy"], "inferplan plan: error: unrecognized arguments: --no-verfy (did you mean --no-verify?)"),
    (["render", "--autoscale=hpa"],
     "inferplan render: error: unrecognized arguments: --autoscale=hpa (did you mean --autoscaling?)"),
    (["catalog", "gpus", "--wide"], "inferplan catalog: error: unrecognized arguments: --wide"),
    (["plan", "a.yaml", "b.yaml"], "inferplan plan: error: unrecognized arguments: b.yaml"),
    (["--verison"], "inferplan: error: unrecognized arguments: --verison (did you mean --version?)"),
])
def test_an_unknown_option_is_the_commands_usage_error_with_the_closest_option(
        capsys: pytest.CaptureFixture[str], command: list[str], says: str) -> None:
    # It was the top-level usage (`inferplan [-h] [--version] COMMAND ...`), naming neither the command nor an option.
    with pytest.raises(SystemExit) as exc:
        main(command)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: {says.split(':')[0]} ")
    assert err.endswith(says + "\n")


@pytest.mark.parametrize("command", ["plan", "simulate", "render", "diff", "report"])
def test_every_command_that_reads_a_plan_says_it_reads_standard_input(
        capsys: pytest.CaptureFixture[str], command: str) -> None:
    # plan and simulate read `-` as render, diff and report do, but their help did not say so.
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert "or - for standard input" in " ".join(capsys.readouterr().out.split())


def test_simulate_reads_a_plan_from_standard_input(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(PLAN.read_text(encoding="utf-8")))
    assert main(["simulate", "-", "--no-verify", "--requests", "200", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["requests"] == 200
