"""`inferplan diff PLAN --deployment FILE`: the change applying the recommendation makes in a running Deployment,
as lines and a strategic merge patch; exit 0 in sync, 1 different, 2 trouble (as diff does)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml

from inferplan.cli import main
from tests.test_render import EXAMPLES

CHAT = EXAMPLES[0]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def rendered(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """What `inferplan render` makes of the example: the Deployment as it would run once applied."""
    code, out, err = run(capsys, "render", str(CHAT), "--no-verify")
    assert code == 0, err
    path = tmp_path / "running.yaml"
    path.write_text(out)
    return path


def _edited(path: Path, replicas: int, batch: str) -> Path:
    documents = list(yaml.safe_load_all(path.read_text()))
    running = next(d for d in documents if d["kind"] == "Deployment")
    running["spec"]["replicas"] = replicas
    args = running["spec"]["template"]["spec"]["containers"][0]["args"]
    args[args.index("--max-num-seqs") + 1] = batch
    out = path.with_name("edited.yaml")
    out.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": documents}))  # as kubectl get prints
    return out


def test_a_deployment_that_runs_the_recommendation_is_in_sync(capsys: pytest.CaptureFixture[str],
                                                             rendered: Path) -> None:
    code, out, err = run(capsys, "diff", str(CHAT), "--deployment", str(rendered), "--no-verify")
    assert code == 0, err
    assert "already runs the recommendation" in out


def test_the_differences_are_lines_and_a_patch(capsys: pytest.CaptureFixture[str], rendered: Path) -> None:
    running = yaml.safe_load_all(rendered.read_text())
    want = next(d for d in running if d["kind"] == "Deployment")
    want_args = want["spec"]["template"]["spec"]["containers"][0]["args"]
    batch = want_args[want_args.index("--max-num-seqs") + 1]
    edited = _edited(rendered, want["spec"]["replicas"] + 3, "7")
    code, out, err = run(capsys, "diff", str(CHAT), "--deployment", str(edited), "--no-verify")
    assert code == 1, err
    assert f"  replicas: {want['spec']['replicas'] + 3} -> {want['spec']['replicas']}" in out.splitlines()
    assert f"  args: --max-num-seqs 7 -> {batch}" in out.splitlines()

    code, out, _ = run(capsys, "diff", str(CHAT), "--deployment", str(edited), "--no-verify", "-o", "patch")
    assert code == 1
    patch = json.loads(out)
    assert patch["spec"]["replicas"] == want["spec"]["replicas"]
    assert patch["spec"]["template"]["spec"]["containers"][0]["args"] == want_args

    code, out, _ = run(capsys, "diff", str(CHAT), "--deployment", str(edited), "--no-verify", "-o", "json")
    data = json.loads(out)
    assert code == 1 and data["inSync"] is False and data["patch"] == patch and len(data["summary"]) == 2


def test_the_deployment_can_come_from_standard_input(capsys: pytest.CaptureFixture[str], rendered: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(rendered.read_text()))
    code, _, err = run(capsys, "diff", str(CHAT), "--deployment", "-", "--no-verify")
    assert code == 0, err


def test_trouble_exits_2_with_the_reason(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    two = tmp_path / "two.yaml"
    two.write_text("kind: Deployment\nmetadata: {name: a}\n---\nkind: Deployment\nmetadata: {name: b}\n")
    code, _, err = run(capsys, "diff", str(CHAT), "--deployment", str(two), "--no-verify")
    assert code == 2 and "exactly one Deployment (found: a, b)" in err
    code, _, err = run(capsys, "diff", str(CHAT), "--deployment", str(tmp_path / "missing.yaml"), "--no-verify")
    assert code == 2 and "cannot read" in err
    code, _, err = run(capsys, "diff", "-", "--deployment", "-")
    assert code == 2 and "cannot both come from standard input" in err
    infeasible = CHAT.parents[1] / "platform" / "infeasible-ask.yaml"
    one = tmp_path / "one.yaml"
    one.write_text("kind: Deployment\nmetadata: {name: a}\nspec: {template: {spec: {containers: [{name: x}]}}}\n")
    code, _, err = run(capsys, "diff", str(infeasible), "--deployment", str(one), "--no-verify")
    assert code == 2 and "no feasible deployment" in err
