"""The controller's registry (inferplan/operator/controller.py): what it keeps of a plan. The controller's loop
and reconciles run against the real API server in tests/e2e."""

from __future__ import annotations

from inferplan.operator.controller import Plan
from inferplan.operator.scheduling import unanswered, usable_gpu_types, work_due

STATUS = {
    "observedGeneration": 3, "plannerVersion": "1.0",
    "inventory": [{"gpuType": "L4", "productLabel": "NVIDIA-L4", "gpusPerNode": 4, "minGpus": 2, "maxGpus": 7}],
    "conditions": [{"type": "Ready", "status": "True", "reason": "Planned"},
                   {"type": "Feasible", "status": "True", "reason": "Feasible", "message": "2 x 1 L4"}],
    "recommendation": {"gpuType": "L4", "replicas": 2, "predicted": {"ttftMs": {"p95": 120.5}}},
    "alternatives": [{"gpuType": "L4", "replicas": n} for n in range(3, 20)],
}
LIVE = [{"gpuType": "L4", "productLabel": "NVIDIA-L4", "gpus": 4, "nodes": 1, "gpusPerNode": 4}]


SPEC = {"model": {"name": "m", "configMapRef": {"name": "cm"}}, "workload": {"requestsPerSecond": "10"},
        "constraints": {"gpuTypes": ["NVIDIA-L4"], "maxReplicas": 4}, "observe": {"prometheus": {"url": "http://p"}}}


def test_a_plan_keeps_its_spec_and_status_whole_and_what_the_checks_read_parsed() -> None:
    plan = Plan("u", "ns", "p", 3, SPEC, STATUS, 0.0)
    assert plan.spec == SPEC and plan.spec is not plan.spec
    assert plan.checked_spec == {"model": {"configMapRef": {"name": "cm"}}, "constraints": {"gpuTypes": ["NVIDIA-L4"]},
                                 "observe": SPEC["observe"]}
    assert Plan("u", "ns", "p", 3, {"model": {"name": "m"}}, None, 0.0).checked_spec == {"model": {},
                                                                                         "constraints": {}}
    assert plan.status == STATUS
    assert plan.status is not plan.status  # unpacked afresh: a reconcile's changes never reach the registry
    assert plan.checked == {"observedGeneration": 3, "plannerVersion": "1.0", "inventory": STATUS["inventory"],
                            "conditions": [STATUS["conditions"][0]]}
    # The checks answer the same from what is kept parsed as from the whole status.
    plain = {**SPEC, "model": {"name": "m"}}
    for status in (plan.status, plan.checked):
        assert unanswered(plain, status, 3, LIVE, "1.0") is None
        assert unanswered(plain, status, 3, [{**LIVE[0], "gpus": 8}], "1.0") == "the GPU inventory changed"
    for spec in (plan.spec, plan.checked_spec):
        assert usable_gpu_types(spec) == frozenset({"L4"})
        assert "ConfigMap" in (unanswered(spec, plan.checked, 3, LIVE, "1.0") or "")
        assert not work_due(generation=3, status=status, relevant=LIVE, answer=None, observes=False, now=10.0,
                            last_planned=9.0, last_observed=0.0, resync_s=600.0, observe_s=60.0, answer_grace_s=120.0)
    plan.status = None
    assert plan.status is None and plan.checked is None
    assert unanswered({}, plan.checked, 3, LIVE, "1.0") == "no status for generation 3"
