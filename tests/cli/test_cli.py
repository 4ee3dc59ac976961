"""The `inferplan` command line, run in-process: predict, accuracy, calibrate, errors and help."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from inferplan.cli import main
from inferplan.planner.factors import parse_factors

REPO = Path(__file__).resolve().parents[1]
PUBLISHED = REPO.parent / "shared" / "accuracy" / "scenarios.jsonl"
METRIC_KEYS = {"scored", "skipped", "mape", "medianApe", "within25"}

needs_published = pytest.mark.skipif(
    not PUBLISHED.is_file(), reason=f"published scenario file not found at {PUBLISHED}"
)


def _example_path() -> Path:
    return Path(str(resources.files("inferplan.planner").joinpath("data/example-scenarios.jsonl")))


def _example_lines() -> list[str]:
    return [line for line in _example_path().read_text(encoding="utf-8").splitlines() if line.strip()]


def _example_ids() -> list[str]:
    return [json.loads(line)["id"] for line in _example_lines()]


def test_predict_without_arguments_prints_the_bundled_example_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("# bundled example")
    assert lines[1].split()[:4] == ["metric", "measured", "predicted", "error"]
    for rid in _example_ids():
        assert rid in out
    assert len(lines) == 2 + len(_example_ids())


def test_predict_json_lists_every_row(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--scenarios", str(_example_path()), "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert isinstance(data, list)
    assert [d["id"] for d in data] == _example_ids()
    for entry in data:
        assert set(entry) == {"id", "metric", "measured", "predicted", "skipped"}
        assert (entry["predicted"] is None) == (entry["skipped"] is not None)
    assert any(entry["predicted"] is not None for entry in data)


@needs_published
def test_predict_json_on_published_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--scenarios", str(PUBLISHED), "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data) == 304
    assert all(isinstance(d["measured"], float) for d in data)


def _check_accuracy_json(data: dict) -> None:
    assert set(data) == {"metrics", "overall", "skippedReasons", "suspect", "outliers", "badLines"}
    assert set(data["overall"]) == METRIC_KEYS
    for entry in [*data["metrics"].values(), *data["suspect"].values()]:
        assert set(entry) == METRIC_KEYS
    assert data["overall"]["scored"] > 0


@needs_published
def test_accuracy_json_on_published_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["accuracy", "--scenarios", str(PUBLISHED), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    _check_accuracy_json(data)
    assert data["badLines"] == 0
    assert data["overall"]["scored"] > 250
    assert 0 <= data["overall"]["medianApe"] < 1  # a fraction, not a percent


def test_accuracy_json_on_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["accuracy", "--scenarios", str(_example_path()), "--json"]) == 0
    _check_accuracy_json(json.loads(capsys.readouterr().out))


def test_accuracy_table_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["accuracy"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:3] == ["metric", "scored", "skipped"]
    assert "overall" in out


@pytest.fixture
def one_bad_line(tmp_path: Path) -> Path:
    lines = _example_lines()
    bad = json.loads(lines[2])
    bad["input_tokens"] = -1
    path = tmp_path / "one-bad.jsonl"
    path.write_text("\n".join([lines[0], lines[1], json.dumps(bad), *lines[3:]]) + "\n", encoding="utf-8")
    return path


def test_accuracy_reports_bad_line_on_stderr_and_scores_the_rest(
    one_bad_line: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["accuracy", "--scenarios", str(one_bad_line), "--json"]) == 0
    captured = capsys.readouterr()
    assert "line 3" in captured.err
    assert "input_tokens" in captured.err
    assert str(one_bad_line) in captured.err
    data = json.loads(captured.out)
    _check_accuracy_json(data)
    assert data["badLines"] == 1
    # The bundled example has no suspect rows: every good line is scored or skipped.
    assert data["overall"]["scored"] + data["overall"]["skipped"] == len(_example_lines()) - 1


def test_accuracy_table_mentions_bad_lines(one_bad_line: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["accuracy", "--scenarios", str(one_bad_line)]) == 0
    captured = capsys.readouterr()
    assert "1 bad line(s) skipped" in captured.out
    assert "line 3" in captured.err


def test_predict_reports_bad_line_and_predicts_the_rest(
    one_bad_line: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["predict", "--scenarios", str(one_bad_line), "-o", "json"]) == 0
    captured = capsys.readouterr()
    assert "line 3" in captured.err
    ids = [d["id"] for d in json.loads(captured.out)]
    expected = _example_ids()
    assert ids == expected[:2] + expected[3:]


@pytest.mark.parametrize("command", ["predict", "accuracy", "calibrate"])
def test_missing_scenario_file_exits_2_naming_the_file(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-file.jsonl"
    assert main([command, "--scenarios", str(missing)]) == 2
    err = capsys.readouterr().err
    assert str(missing) in err
    assert "not found" in err


def test_missing_factors_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "factors.json"
    assert main(["predict", "--factors", str(missing)]) == 2
    assert str(missing) in capsys.readouterr().err


def test_help_exits_0_and_lists_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for command in ("predict", "accuracy", "calibrate"):
        assert command in out


@pytest.mark.parametrize("command", ["predict", "accuracy", "calibrate"])
def test_subcommand_help_exits_0(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    assert "--scenarios" in capsys.readouterr().out


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage" in capsys.readouterr().out.lower()


def test_version_prints_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    from inferplan import __version__

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == __version__


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["frobnicate"])
    assert exc.value.code == 2


def test_calibrate_writes_factors_that_predict_accepts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "factors.json"
    assert main(["calibrate", "--scenarios", str(_example_path()), "--write", str(out)]) == 0
    assert "fitted on" in capsys.readouterr().out
    parse_factors(json.loads(out.read_text(encoding="utf-8")))
    assert main(["predict", "--factors", str(out), "-o", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == len(_example_ids())


def test_module_help_runs_in_a_subprocess() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "inferplan.cli", "--help"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "usage: inferplan" in result.stdout
