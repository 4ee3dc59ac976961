"""Which recommendation render and diff use (inferplan/deploy/reviewed.py): a plan file is planned (None), a plan
read back from the cluster is rendered from its status or refused."""

from __future__ import annotations

from typing import Any

import pytest

from inferplan.deploy.reviewed import StatusRefused, is_read_back, plan_name, reviewed_recommendation
from tests.support.plans import EXAMPLES, planned


def manifest(status: dict[str, Any] | None = None, **metadata: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "inferplan.io/v1alpha1", "kind": "InferenceCapacityPlan",
                            "metadata": {"name": "chat", **metadata}, "spec": {}}
    if status is not None:
        body["status"] = status
    return body


def recommendation() -> dict[str, Any]:
    return planned(EXAMPLES[0])[1].model_dump(by_alias=True, mode="json")


def feasible_false(message: str = "needs 88 H100-SXM5-80GB, more than are available") -> list[dict[str, str]]:
    return [{"type": "Ready", "status": "True", "reason": "Planned", "message": "planned for generation 1"},
            {"type": "Feasible", "status": "False", "reason": "NoFeasibleCandidate", "message": message}]


@pytest.mark.parametrize(("body", "read"), [
    (manifest(), False),  # a plan file
    ({"model": {"name": "x"}}, False),  # a bare spec
    ([1, 2], False),
    (manifest({}), True),  # kubectl get -o yaml with an empty status
    (manifest(uid="u-1"), True),  # not answered yet: server-set metadata, no status
    (manifest(resourceVersion="7"), True),
    (manifest(creationTimestamp="2026-01-01T00:00:00Z"), True),
])
def test_what_counts_as_read_back(body: Any, read: bool) -> None:
    assert is_read_back(body) is read


def test_a_plan_file_is_left_to_planning() -> None:
    assert reviewed_recommendation(manifest()) is None


def test_the_status_recommendation_is_the_answer() -> None:
    status = {"observedGeneration": 3, "recommendation": {**recommendation(), "manifests": {"target": "Deployment"}}}
    reviewed = reviewed_recommendation(manifest(status, namespace="serving", generation=3))
    assert reviewed is not None and not reviewed.stale
    assert reviewed.candidate == planned(EXAMPLES[0])[1]
    assert reviewed.describe() == "the reviewed status of serving/chat (observedGeneration 3)"


def test_an_infeasible_status_is_refused_with_its_reason_and_suggestions() -> None:
    status = {"observedGeneration": 1, "conditions": feasible_false("x" * 5000), "suggestions": ["add GPUs"]}
    with pytest.raises(StatusRefused) as refused:
        reviewed_recommendation(manifest(status, namespace="serving", generation=1))
    text = str(refused.value)
    assert text.startswith("serving/chat: the status has no recommendation") and "Feasible=False" in text
    assert len(text) < 1200  # the condition's message is quoted, cut short
    assert refused.value.suggestions == ("add GPUs",)


def test_a_spec_the_operator_could_not_plan_is_refused_with_the_ready_reason() -> None:
    ready = {"type": "Ready", "status": "False", "reason": "InvalidModel", "message": "unknown model 'acme/x'"}
    with pytest.raises(StatusRefused, match="Ready=False, InvalidModel: unknown model 'acme/x'"):
        reviewed_recommendation(manifest({"observedGeneration": 1, "conditions": [ready]}, generation=1))


def test_an_unanswered_plan_is_refused() -> None:
    with pytest.raises(StatusRefused, match="not answered it yet"):
        reviewed_recommendation(manifest(uid="u-1", generation=1))


def test_a_status_behind_its_spec_is_refused_unless_allowed() -> None:
    body = manifest({"observedGeneration": 1, "recommendation": recommendation()}, generation=2)
    with pytest.raises(StatusRefused, match="generation 1 of the spec, which is at generation 2"):
        reviewed_recommendation(body)
    reviewed = reviewed_recommendation(body, allow_stale=True)
    assert reviewed is not None and reviewed.stale


def test_a_malformed_recommendation_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"status\.recommendation is not a recommendation"):
        reviewed_recommendation(manifest({"recommendation": {"replicas": "many"}}))


def test_plan_names() -> None:
    assert plan_name(manifest(namespace="serving")) == "serving/chat"
    assert plan_name(manifest()) == "chat"
    assert plan_name({}) == "(unnamed)"
