"""`inferplan render`: multi-document YAML (or a v1 List) of the recommendation, from a plan or from a manifest
read back with its status; autoscaling objects; errors exit 1 (infeasible) or 2 (cannot render) with the
reason on stderr."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml

from inferplan.cli import main
from inferplan.deploy.manifests import manifests_digest
from inferplan.planner.results import Candidate
from tests.test_render import EXAMPLES, planned

REPO = Path(__file__).resolve().parents[1]
CHAT = EXAMPLES[0]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_render_prints_the_objects_as_multi_document_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "render", str(CHAT), "--no-verify")
    assert code == 0, err
    objects = list(yaml.safe_load_all(out))
    assert [o["kind"] for o in objects] == ["Deployment", "Service"]
    assert out.count("\n---\n") == 1
    _, candidate = planned(CHAT)
    assert objects[0]["spec"]["replicas"] == candidate.replicas
    assert objects[0]["metadata"]["name"] == "llama-3-1-8b-instruct"  # a bare spec: named after the model
    assert manifests_digest(objects) in err  # the digest the status's manifests reference carries


def test_render_names_and_places_objects_after_the_manifest(capsys: pytest.CaptureFixture[str]) -> None:
    path = next(p for p in EXAMPLES if p.stem == "trtllm-70b-fp8")
    code, out, err = run(capsys, "render", str(path), "--no-verify", "-o", "json")
    assert code == 0, err
    listed = json.loads(out)
    assert listed["kind"] == "List" and [o["kind"] for o in listed["items"]] == ["ConfigMap", "Deployment", "Service"]
    assert {o["metadata"]["name"] for o in listed["items"][1:]} == {"trtllm-70b"}
    assert {o["metadata"]["namespace"] for o in listed["items"]} == {"platform"}
    code, out, _ = run(capsys, "render", str(path), "--no-verify", "--name", "llm", "--namespace", "prod")
    assert {(o["metadata"]["name"], o["metadata"]["namespace"]) for o in yaml.safe_load_all(out)} >= {("llm", "prod")}


def test_render_from_status_renders_that_recommendation_without_planning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, candidate = planned(CHAT)
    # What the operator wrote: another answer than planning would give now (3 replicas, its own batch), with the
    # status's extra keys beside the candidate's.
    stored = candidate.model_copy(update={"replicas": 3, "gpus": 3, "max_batch": 128})
    manifest = {"apiVersion": "inferplan.io/v1alpha1", "kind": "InferenceCapacityPlan",
                "metadata": {"name": "chat", "namespace": "serving", "generation": 2},
                "spec": yaml.safe_load(CHAT.read_text()),
                "status": {"observedGeneration": 2,
                           "recommendation": {**stored.model_dump(by_alias=True, mode="json"),
                                              "manifests": {"target": "Deployment"}}}}
    path = tmp_path / "chat.yaml"
    path.write_text(yaml.safe_dump(manifest))
    code, out, err = run(capsys, "render", str(path))
    assert code == 0, err
    assert "status" in err and "not planning again" in err
    deployment = next(o for o in yaml.safe_load_all(out) if o["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 3 and deployment["metadata"]["name"] == "chat"
    assert Candidate.model_validate(stored.model_dump()).max_batch == 128

    manifest["metadata"]["generation"] = 3  # the spec moved on since the status was written
    path.write_text(yaml.safe_dump(manifest))
    code, _, err = run(capsys, "render", str(path))
    assert code == 0 and "generation 2" in err and "generation 3" in err


def test_render_reads_standard_input(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(CHAT.read_text()))
    code, out, err = run(capsys, "render", "-", "--no-verify", "--name", "chat")
    assert code == 0, err
    assert [o["metadata"]["name"] for o in yaml.safe_load_all(out)] == ["chat", "chat"]


def test_render_with_autoscaling(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "render", str(CHAT), "--no-verify", "--name", "chat", "--autoscaling", "keda")
    assert code == 0, err
    objects = {o["kind"]: o for o in yaml.safe_load_all(out)}
    assert set(objects) == {"Deployment", "Service", "ScaledObject"}
    assert "replicas" not in objects["Deployment"]["spec"]  # the autoscaler owns them
    assert "--prometheus-url" in err  # the serverAddress is a placeholder until given
    code, out, err = run(capsys, "render", str(CHAT), "--no-verify", "--autoscaling", "hpa", "--target", "kserve",
                         "--scale-on", "concurrency")
    assert code == 0, err
    hpa = next(o for o in yaml.safe_load_all(out) if o["kind"] == "HorizontalPodAutoscaler")
    assert hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] == "vllm_requests_running"


def test_an_infeasible_plan_exits_1_with_the_reasons(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "render", str(REPO / "examples" / "platform" / "infeasible-ask.yaml"), "--no-verify")
    assert code == 1 and out == ""
    assert "no feasible deployment" in err and "budget" in err


def test_an_engine_without_an_image_exits_2_and_says_how_to_give_one(capsys: pytest.CaptureFixture[str]) -> None:
    amd = str(REPO / "examples" / "platform" / "amd-only-cluster.yaml")
    code, out, err = run(capsys, "render", amd, "--no-verify")
    assert code == 2 and out == ""
    assert "--image" in err and "vllm" in err
    code, out, err = run(capsys, "render", amd, "--no-verify", "--image", "rocm/vllm:rocm6.4.1_vllm_0.10.1_20250909")
    assert code == 0, err
    assert "amd.com/gpu" in out


def test_an_unknown_autoscaling_engine_and_a_bad_name_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    tgi = str(REPO / "examples" / "platform" / "tgi-mistral-7b.yaml")
    code, _, err = run(capsys, "render", tgi, "--no-verify", "--autoscaling", "hpa")
    assert code == 2 and "sglang, vllm" in err
    code, _, err = run(capsys, "render", str(CHAT), "--no-verify", "--name", "Not_A_Name")
    assert code == 2 and "DNS-1035" in err
