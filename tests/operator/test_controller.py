"""The controller's registry (inferplan/operator/controller.py): what it keeps of a plan. The controller's loop
and reconciles run against the real API server in tests/e2e."""

from __future__ import annotations

from inferplan.operator.controller import Plan
from inferplan.operator.scheduling import unanswered, work_due

STATUS = {
    "observedGeneration": 3, "plannerVersion": "1.0",
    "inventory": [{"gpuType": "L4", "productLabel": "NVIDIA-L4", "gpusPerNode": 4, "minGpus": 2, "maxGpus": 7}],
    "conditions": [{"type": "Ready", "status": "True", "reason": "Planned"},
                   {"type": "Feasible", "status": "True", "reason": "Feasible", "message": "2 x 1 L4"}],
    "recommendation": {"gpuType": "L4", "replicas": 2, "predicted": {"ttftMs": {"p95": 120.5}}},
    "alternatives": [{"gpuType": "L4", "replicas": n} for n in range(3, 20)],
}
LIVE = [{"gpuType": "L4", "productLabel": "NVIDIA-L4", "gpus": 4, "nodes": 1, "gpusPerNode": 4}]


def test_a_plan_keeps_its_status_whole_and_what_the_checks_read_parsed() -> None:
    plan = Plan("u", "ns", "p", 3, {"model": {"name": "m"}}, STATUS, 0.0)
    assert plan.status == STATUS
    assert plan.status is not plan.status  # unpacked afresh: a reconcile's changes never reach the registry
    assert plan.checked == {"observedGeneration": 3, "plannerVersion": "1.0", "inventory": STATUS["inventory"],
                            "conditions": [STATUS["conditions"][0]]}
    # The checks answer the same from what is kept parsed as from the whole status.
    for status in (plan.status, plan.checked):
        assert unanswered({}, status, 3, LIVE, "1.0") is None
        assert unanswered({}, status, 3, [{**LIVE[0], "gpus": 8}], "1.0") == "the GPU inventory changed"
        assert not work_due(generation=3, status=status, relevant=LIVE, answer=None, observes=False, now=10.0,
                            last_planned=9.0, last_observed=0.0, resync_s=600.0, observe_s=60.0, answer_grace_s=120.0)
    plan.status = None
    assert plan.status is None and plan.checked is None
    assert unanswered({}, plan.checked, 3, LIVE, "1.0") == "no status for generation 3"
