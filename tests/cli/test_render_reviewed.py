"""`inferplan render` and `inferplan diff` of a plan read back from the cluster (`kubectl get icp NAME -o yaml`):
the recommendation in its reviewed status, or a refusal with exit code 2, never a new plan over the GPU catalog
(issue 36, point 9). The statuses are the operator's own: `reconcile_plan` and `next_status` on a cluster of one
node of eight H100s."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferplan.cli import main
from inferplan.operator.inventory import NodeGpus, build_inventory
from inferplan.operator.reconcile import reconcile_plan
from inferplan.operator.status import next_status

REPO = Path(__file__).resolve().parents[2]
_EXAMPLE = yaml.safe_load((REPO / "examples" / "plans" / "chat-assistant-8b.yaml").read_text())
CHAT = _EXAMPLE.get("spec", _EXAMPLE)  # a whole manifest or a bare spec
H100_NODE = build_inventory([NodeGpus("h100-a", "NVIDIA-H100-80GB-HBM3", 8, True, True)])


def read_back(name: str, spec: dict[str, Any], *, generation: int = 1) -> dict[str, Any]:
    """The plan as `kubectl get -o yaml` prints it once the operator answered it on one node of 8 H100s."""
    outcome = reconcile_plan(spec, H100_NODE, verify_default=False, name=name, namespace="serving")
    status = next_status(None, generation=generation, now="2026-01-01T00:00:00Z", planner_version="test",
                         inventory=H100_NODE, result=outcome.result, error=outcome.error,
                         manifests=outcome.manifests)
    return {"apiVersion": "inferplan.io/v1alpha1", "kind": "InferenceCapacityPlan",
            "metadata": {"name": name, "namespace": "serving", "generation": generation, "resourceVersion": "42",
                         "uid": "0b6a3c1e-0000-4000-8000-000000000001"},
            "spec": spec, "status": status}


def peak_spec() -> dict[str, Any]:
    """The chat example at 100 times its traffic and any GPU type: more than 8 H100s can serve, feasible on
    GPUs the cluster does not have."""
    spec = copy.deepcopy(CHAT)
    spec["workload"]["requestsPerSecond"] = "2000"
    del spec["constraints"]
    return spec


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def infeasible(tmp_path: Path) -> Path:
    body = read_back("chat-peak", peak_spec())
    assert "recommendation" not in body["status"]
    path = tmp_path / "chat-peak.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


@pytest.fixture
def deployment(tmp_path: Path) -> Path:
    path = tmp_path / "running.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "chat"},
                                    "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "x"}]}}}}))
    return path


def test_a_read_back_plan_without_a_recommendation_is_refused_not_planned_over_the_catalog(
        capsys: pytest.CaptureFixture[str], infeasible: Path) -> None:
    code, out, err = run(capsys, "render", str(infeasible), "--no-verify")
    assert code == 2 and out == ""
    assert "serving/chat-peak" in err and "no recommendation" in err and "Feasible=False" in err
    assert "not planning again" in err.lower()
    assert "suggestion:" in err  # the status's own suggestions
    assert "objects, sha256:" not in err  # nothing rendered


def test_diff_refuses_the_same_status(capsys: pytest.CaptureFixture[str], infeasible: Path,
                                      deployment: Path) -> None:
    code, out, err = run(capsys, "diff", str(infeasible), "--deployment", str(deployment), "--no-verify")
    assert code == 2 and out == ""
    assert "serving/chat-peak" in err and "no recommendation" in err


def test_a_plan_read_back_before_the_operator_answered_it_is_refused(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    body = read_back("chat", copy.deepcopy(CHAT))
    del body["status"]  # kubectl get -o yaml of a plan not answered yet
    path = tmp_path / "chat.yaml"
    path.write_text(yaml.safe_dump(body))
    code, out, err = run(capsys, "render", str(path), "--no-verify")
    assert code == 2 and out == "" and "not answered it yet" in err


def test_the_reviewed_status_is_rendered_and_stderr_names_it(capsys: pytest.CaptureFixture[str],
                                                             tmp_path: Path) -> None:
    body = read_back("chat", copy.deepcopy(CHAT))
    path = tmp_path / "chat.yaml"
    path.write_text(yaml.safe_dump(body))
    code, out, err = run(capsys, "render", str(path))
    assert code == 0, err
    assert "rendering the recommendation in the reviewed status of serving/chat (observedGeneration 1)" in err
    assert body["status"]["recommendation"]["manifests"]["digest"] in err
    assert "warning" not in err  # the objects the status lists
    rendered = next(o for o in yaml.safe_load_all(out) if o["kind"] == "Deployment")
    assert rendered["spec"]["replicas"] == body["status"]["recommendation"]["replicas"]


def test_a_status_an_earlier_release_wrote_renders_saying_which_objects_differ_from_its_list(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A status written by the operator of an earlier release (git 6667f79, before PodDisruptionBudgets) lists
    Deployment and Service and their digest; rendered today it is three objects of another digest. stderr said
    nothing of it, though the docs have the reviewer match the digest to the status's."""
    path = REPO / "tests" / "cli" / "data" / "chat-assistant-8b-6667f79.yaml"
    listed = yaml.safe_load(path.read_text())["status"]["recommendation"]["manifests"]
    code, out, err = run(capsys, "render", str(path))
    assert code == 0, err
    kinds = [o["kind"] for o in yaml.safe_load_all(out)]
    assert kinds == ["Deployment", "PodDisruptionBudget", "Service"]
    assert "warning: not the objects the status lists" in err
    assert listed["digest"] in err and "PodDisruptionBudget/chat-assistant-8b added" in err
    assert "another inferplan release" in err
    code, out, err = run(capsys, "render", str(path), "--namespace", "other")  # not the rendering the status lists
    assert code == 0 and "warning" not in err, err


def test_a_status_behind_the_spec_is_refused_unless_allowed(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                            deployment: Path) -> None:
    body = read_back("chat", copy.deepcopy(CHAT))
    body["metadata"]["generation"] = 2  # the spec changed; the operator has not answered it yet
    path = tmp_path / "chat.yaml"
    path.write_text(yaml.safe_dump(body))
    for command in (["render", str(path)], ["diff", str(path), "--deployment", str(deployment)]):
        code, out, err = run(capsys, *command)
        assert code == 2 and out == "", command
        assert "generation 1" in err and "generation 2" in err and "--allow-stale-status" in err
        code, out, err = run(capsys, *command, "--allow-stale-status")
        assert code in (0, 1) and out, err  # rendered, or compared (differs: exit 1)
        assert "warning" in err and "generation 1" in err


def test_a_plan_file_is_planned_and_stderr_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "render", str(REPO / "examples" / "plans" / "chat-assistant-8b.yaml"),
                         "--no-verify")
    assert code == 0 and out, err
    assert "planning" in err and "chat-assistant-8b.yaml" in err and "not read back" in err
