"""The controller (inferplan/operator/controller.py): what its registry keeps of a plan, and one reconcile with
fakes for what it is given. The controller's loop and reconciles also run against the real API server in
tests/e2e."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import datetime
import os
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from inferplan import __version__
from inferplan.observe.prometheus import EndpointsFile
from inferplan.operator import kube, metrics
from inferplan.operator.controller import Controller, Plan, planning_slots
from inferplan.operator.inventory import Inventory, NodeGpus, build_inventory, node_gpus
from inferplan.operator.pool import PlannerPool
from inferplan.operator.reconcile import Outcome, reconcile_plan
from inferplan.operator.retry import RetryLater
from inferplan.operator.scheduling import unanswered, usable_gpu_types, work_due
from inferplan.operator.settings import OperatorSettings
from inferplan.version import planner_version
from tests.support.plans import REPO, example_spec

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


def test_the_checks_read_the_gpu_types_a_plan_may_use_from_what_is_kept_parsed() -> None:
    """A plan with its own availableGpus and no gpuTypes may use the types it lists (`usable_gpu_types`), and its
    status records those; what the checks keep parsed must say so too. It kept gpuTypes alone, so the checks took
    every type of the cluster for such a plan, its status never held for them, and it was planned again at every
    check (5 s): the operator's planners busy on 1,000 plans at rest."""
    for constraints in ({"availableGpus": {"NVIDIA-L4": 8}}, {"gpuTypes": ["NVIDIA-L4"]},
                        {"gpuTypes": ["NVIDIA-L4"], "availableGpus": {"NVIDIA-L4": 8, "NVIDIA-L40S": 2}}, {}):
        plan = Plan("u", "ns", "p", 3, {"model": {"name": "m"}, "constraints": constraints}, None, 0.0)
        assert usable_gpu_types(plan.checked_spec) == usable_gpu_types(plan.spec), constraints


# ----------------------------------------------------------------------------------------------------------
# Controller.reconcile, with fakes for what it is given: the planner pool (planning in this process, with the
# real planner unless a test scripts its answer), the thread pools (calls run inline), the node index, and the
# API server behind kube.write_status and kube.post_event (recorded). No kopf, no API server.

CHAT = example_spec(REPO / "examples" / "plans" / "chat-assistant-8b.yaml")  # fits 4 L40S, not 1
NAMESPACE, NAME, UID = "serving", "chat", "uid-chat"


class InlineExecutor(Executor):
    """A thread pool that runs each call at once, in the caller's thread."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # as a pool would: the caller gets it from the future
            future.set_exception(exc)
        return future


Answer = Callable[[], Outcome]


class FakePool:
    """The planner pool: plans in this process with the real planner (`reconcile_plan`), or answers what a test
    scripts (an Outcome, or an exception raised); records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[dict[str, Any]] = []
        self.script: Answer | None = None

    async def plan(self, spec: Mapping[str, Any], inventory: Inventory, verify: bool,
                   status: Mapping[str, Any] | None, name: str, namespace: str,
                   current_deployment: Mapping[str, Any] | None) -> Outcome:
        self.asked.append({"spec": spec, "inventory": inventory.available(), "verify": verify, "status": status,
                           "name": name, "namespace": namespace})
        if self.script is not None:
            return self.script()
        return reconcile_plan(spec, inventory, None, verify, status, name=name, namespace=namespace,
                              current_deployment=current_deployment)

    async def run(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)


@dataclass
class FakeApi:
    """The API server as the controller's requests reach it: status patches and events, recorded."""

    writes: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    write_error: Exception | None = None

    def write_status(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        if self.write_error is not None:
            raise self.write_error
        self.writes.append((namespace, name, copy.deepcopy(patch)))
        return {"status": patch}

    def post_event(self, event: dict[str, Any]) -> dict[str, Any]:
        self.events.append(event)
        return event


@dataclass
class Cluster:
    controller: Controller
    pool: FakePool
    api: FakeApi
    nodes: list[NodeGpus]

    def l40s(self, count: int) -> None:
        """The cluster's GPU nodes: `count` nodes of one L40S each."""
        self.nodes[:] = [node for node in (
            node_gpus(f"l40s-{i}", {"nvidia.com/gpu.product": "NVIDIA-L40S"}, {"nvidia.com/gpu": "1"}, False,
                      [{"type": "Ready", "status": "True"}]) for i in range(count)) if node is not None]

    def add(self, spec: Mapping[str, Any], generation: int = 1, status: Mapping[str, Any] | None = None) -> Plan:
        """The plan as an event shows it (kopf's handler calls `seen`), as the registry keeps it."""
        self.controller.seen(UID, NAMESPACE, NAME, generation, spec, status)
        return self.controller.registry.plans[UID]

    def reconcile(self, replan: bool = True) -> None:
        """One reconcile of the plan as the registry has it now."""
        asyncio.run(self.controller.reconcile(self.controller.registry.plans[UID], replan, False))


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    api, pool, nodes = FakeApi(), FakePool(), []
    monkeypatch.setattr(kube, "write_status", api.write_status)
    monkeypatch.setattr(kube, "post_event", api.post_event)
    inline = InlineExecutor()
    controller = Controller(OperatorSettings(verify=False), pool=cast(PlannerPool, pool), api=inline,
                            observe=inline, endpoints=EndpointsFile(None), identity="test", priority=0,
                            nodes=lambda: nodes)
    made = Cluster(controller, pool, api, nodes)
    made.l40s(4)
    yield made
    controller.forget(UID, NAMESPACE, NAME)  # its metric series go: the registry is the process's


def condition(status: Mapping[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == kind)


def errors(reason: str) -> float:
    return metrics.REGISTRY.get_sample_value("inferplan_reconcile_errors_total", {"reason": reason}) or 0.0


def test_a_new_plan_is_planned_against_the_cluster_and_its_status_written(cluster: Cluster) -> None:
    plan = cluster.add(CHAT)
    cluster.reconcile()
    # Planned once, with the cluster's GPUs and the operator's verify setting.
    (asked,) = cluster.pool.asked
    assert asked["inventory"] == {"L40S": 4} and asked["verify"] is False
    assert (asked["name"], asked["namespace"], asked["spec"]) == (NAME, NAMESPACE, CHAT)
    # One status write, to the plan, answering its generation.
    ((namespace, name, patch),) = cluster.api.writes
    assert (namespace, name) == (NAMESPACE, NAME)
    assert patch["observedGeneration"] == 1
    assert condition(patch, "Ready")["status"] == "True"
    assert condition(patch, "Feasible")["status"] == "True"
    recommendation = patch["recommendation"]
    assert recommendation["gpuType"] == "L40S" and recommendation["gpus"] <= 4  # what the cluster has
    assert [entry["gpuType"] for entry in patch["inventory"]] == ["L40S"]
    # The registry holds what the server has now, and the answer; the metrics show the plan.
    assert plan.status == patch
    assert cluster.controller.registry.answered[UID].generation == 1
    sample = metrics.REGISTRY.get_sample_value
    assert sample("inferplan_recommended_replicas",
                  {"namespace": NAMESPACE, "plan": NAME, "gpu_type": "L40S"}) == recommendation["replicas"]
    assert sample("inferplan_plans", {"condition": "Ready", "status": "True"}) == 1


def test_the_same_answer_is_not_written_again_and_a_new_one_is(cluster: Cluster) -> None:
    cluster.add(CHAT)
    cluster.reconcile()
    assert len(cluster.api.writes) == 1
    written = cluster.api.writes[0][2]
    cluster.reconcile()  # a resync: planned again, the same status
    assert len(cluster.pool.asked) == 2 and len(cluster.api.writes) == 1
    # The same answer for a GPU count outside the range the status records (planned again for the inventory):
    # not written; the controller keeps the new range to itself.
    first = reconcile_plan(CHAT, build_inventory(cluster.nodes), None, False, None, name=NAME, namespace=NAMESPACE,
                           current_deployment=None)
    ((gpu, (low, high)),) = first.bounds.items()
    assert high is not None
    cluster.pool.script = lambda: dataclasses.replace(first, bounds={gpu: (low, high + 4)})
    cluster.reconcile()
    assert len(cluster.pool.asked) == 3 and len(cluster.api.writes) == 1
    answer = cluster.controller.registry.answered[UID]
    assert not answer.written and [e["maxGpus"] for e in answer.inventory] == [high + 4]
    assert [e["maxGpus"] for e in written["inventory"]] == [high]
    assert cluster.controller.registry.plans[UID].status == written  # what the server still has
    # One GPU: no deployment fits any more: a new answer, written.
    cluster.pool.script = None
    cluster.l40s(1)
    cluster.reconcile()
    assert len(cluster.api.writes) == 2
    patch = cluster.api.writes[1][2]
    assert patch["recommendation"] is None
    assert condition(patch, "Feasible")["status"] == "False"
    assert cluster.controller.registry.answered[UID].written


def test_a_spec_the_planner_cannot_use_is_a_condition_and_one_warning_event(cluster: Cluster) -> None:
    before = errors("InvalidModel")
    cluster.add({**CHAT, "model": {"name": "acme/not-a-real-model"}})
    cluster.reconcile()
    ((_, _, patch),) = cluster.api.writes
    ready = condition(patch, "Ready")
    assert ready["status"] == "False" and ready["reason"] == "InvalidModel"
    assert "acme/not-a-real-model" in ready["message"]
    assert patch["observedGeneration"] == 1 and "recommendation" not in patch
    (event,) = cluster.api.events
    assert event["type"] == "Warning" and event["reason"] == "InvalidModel"
    assert event["involvedObject"]["name"] == NAME and event["metadata"]["namespace"] == NAMESPACE
    assert errors("InvalidModel") == before + 1
    # Planned again (a resync): the same problem is neither written nor announced again.
    cluster.reconcile()
    assert len(cluster.api.writes) == 1 and len(cluster.api.events) == 1


def test_an_unexpected_planning_error_is_ready_false_planning_failed(cluster: Cluster) -> None:
    def fails() -> Outcome:
        raise RuntimeError("the planner broke")

    cluster.pool.script = fails
    before = errors("Unexpected")
    cluster.add(CHAT)
    cluster.reconcile()  # one plan's failure never escapes the reconcile
    ((_, _, patch),) = cluster.api.writes
    ready = condition(patch, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "PlanningFailed")
    assert "the planner broke" in ready["message"]
    assert errors("Unexpected") == before + 1
    assert [event["reason"] for event in cluster.api.events] == ["PlanningFailed"]


def test_a_passing_failure_is_raised_to_be_retried_and_nothing_is_written(cluster: Cluster) -> None:
    def dies() -> Outcome:
        raise RetryLater("a planner process died; planning again", delay=1)

    cluster.pool.script = dies
    cluster.add(CHAT)
    with pytest.raises(RetryLater):
        cluster.reconcile()
    assert cluster.api.writes == [] and cluster.api.events == []
    assert UID not in cluster.controller.registry.answered


def test_a_spec_changed_while_it_is_planned_is_not_answered_with_the_old_plan(cluster: Cluster) -> None:
    def edited_meanwhile() -> Outcome:
        cluster.add({**CHAT, "workload": {**CHAT["workload"], "requestsPerSecond": "40"}}, generation=2)
        return reconcile_plan(CHAT, build_inventory(cluster.nodes), None, False, None, name=NAME,
                              namespace=NAMESPACE, current_deployment=None)

    cluster.pool.script = edited_meanwhile
    cluster.add(CHAT)
    cluster.reconcile()
    assert cluster.api.writes == []  # generation 2's reconcile writes
    assert UID not in cluster.controller.registry.answered


def test_a_plan_deleted_while_its_status_is_written_is_let_go(cluster: Cluster) -> None:
    cluster.api.write_error = kube.ApiException(status=404, reason="Not Found")
    cluster.add(CHAT)
    cluster.reconcile()  # no error: its DELETED event cleans up
    assert UID not in cluster.controller.registry.answered
    cluster.api.write_error = kube.ApiException(status=403, reason="Forbidden")
    with pytest.raises(kube.ApiException):  # anything else is the reconcile's failure (logged, retried)
        cluster.reconcile()



def test_a_plan_deleted_while_its_status_write_succeeds_leaves_no_series(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """The DELETED event can be handled while the write is in flight (the loop runs it meanwhile) and the write
    still succeed: the reconcile then recorded the plan's series again after `forget` removed them, and they
    stayed in /metrics (and in inferplan_plans) until the operator restarted."""
    def deleted_meanwhile(namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        cluster.controller.forget(UID, NAMESPACE, NAME)
        return {"status": patch}

    monkeypatch.setattr(kube, "write_status", deleted_meanwhile)
    before = metrics.REGISTRY.get_sample_value("inferplan_plans", {"condition": "Ready", "status": "True"})
    cluster.add(CHAT)
    cluster.reconcile()
    assert metrics.REGISTRY.get_sample_value("inferplan_plan_feasible", {"namespace": NAMESPACE, "plan": NAME}) is None
    assert metrics.REGISTRY.get_sample_value("inferplan_plans", {"condition": "Ready", "status": "True"}) == before
    assert UID not in cluster.controller.registry.answered and UID not in cluster.controller.registry.recorded

# -- beginning to work beside a peer ---------------------------------------------------------------------


def test_a_replica_that_begins_to_work_reads_a_plan_again_before_planning_it(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """With peering, a replica can see a plan before its status is written and be paused by kopf in favour of a
    peer that then answers it. When the replica begins to work, kopf lists the plans again, but not all at once:
    a plan it last saw before then is read from the API server before any work, and the peer's answer is taken,
    not planned and written again (the e2e handover test caught replica-b writing such a plan after it took over)."""
    cluster.add(CHAT)
    cluster.reconcile()  # the peer's answer, as the peer wrote it
    ((_, _, answer),) = cluster.api.writes
    cluster.api.writes.clear()
    cluster.pool.asked.clear()
    stored: dict[str, Any] = {"metadata": {"uid": UID, "generation": 1}, "spec": CHAT, "status": answer}
    monkeypatch.setattr(kube, "read_plan", lambda namespace, name: copy.deepcopy(stored))
    lead = {"b": {"priority": 1, "lifetime": 60, "lastseen": datetime.datetime.now(datetime.UTC).isoformat()}}
    monkeypatch.setattr(kube, "peering_statuses", lambda peering, namespaces: [("KopfPeering x/inferplan", lead)])

    def replica_b() -> Controller:
        inline = InlineExecutor()
        return Controller(OperatorSettings(verify=False, peering="inferplan"), pool=cast(PlannerPool, cluster.pool),
                          api=inline, observe=inline, endpoints=EndpointsFile(None), identity="b", priority=1,
                          nodes=lambda: cluster.nodes)

    async def begins_to_work(replica: Controller) -> None:
        replica.seen(UID, NAMESPACE, NAME, 1, CHAT, None)  # seen before the pause: no status yet
        await asyncio.sleep(0.01)
        assert await replica._works()  # the peer is gone: this replica leads
        for _ in range(3):  # what the checker does: look at the plan, and again after each task
            replica._check(UID, replica.inventory(), time.monotonic())
            await asyncio.gather(*replica._tasks.values())

    b = replica_b()
    asyncio.run(begins_to_work(b))
    assert cluster.api.writes == [] and cluster.pool.asked == []
    assert b.registry.answered[UID].generation == 1 and b.registry.plans[UID].status == answer
    b.forget(UID, NAMESPACE, NAME)
    # Where the peer had not answered it, the replica plans it, once, with what it read.
    stored["status"] = None
    b = replica_b()
    asyncio.run(begins_to_work(b))
    assert len(cluster.pool.asked) == 1 and len(cluster.api.writes) == 1
    b.forget(UID, NAMESPACE, NAME)
    # Deleted while kopf's watch was paused (no event says so): let go, not planned.

    def deleted(namespace: str, name: str) -> dict[str, Any]:
        raise kube.ApiException(status=404, reason="Not Found")

    monkeypatch.setattr(kube, "read_plan", deleted)
    b = replica_b()
    asyncio.run(begins_to_work(b))
    assert UID not in b.registry.plans and len(cluster.pool.asked) == 1 and len(cluster.api.writes) == 1


def test_a_replica_that_waits_for_a_peer_exports_no_series_of_the_plans(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """kopf pauses the watches of a replica that waits: what it saw stays as it was when it last worked. It
    exported those series beside the working replica's, and the alerts and the dashboard take the max over the
    operator's pods: a plan deleted meanwhile stayed in /metrics and inferplan_plans counted it twice (seen with two
    `inferplan operator` processes on the test API server). A waiting replica exports none of them; its own
    metrics (reconciles, errors) stay."""
    cluster.add(CHAT)
    cluster.reconcile()
    ((_, _, answer),) = cluster.api.writes
    now = datetime.datetime.now(datetime.UTC).isoformat()
    peers: dict[str, Any] = {"b": {"priority": 1, "lifetime": 60, "lastseen": now}}
    monkeypatch.setattr(kube, "peering_statuses", lambda peering, namespaces: [("KopfPeering x/inferplan", peers)])
    inline = InlineExecutor()
    b = Controller(OperatorSettings(verify=False, peering="inferplan"), pool=cast(PlannerPool, cluster.pool),
                   api=inline, observe=inline, endpoints=EndpointsFile(None), identity="b", priority=1,
                   nodes=lambda: cluster.nodes)

    def works() -> bool:
        b._peering_checked = -float("inf")  # asked of the peering object now, not once a second
        return asyncio.run(b._works())

    def exported() -> dict[str, float | None]:
        return {name: metrics.REGISTRY.get_sample_value(name, labels) for name, labels in (
            ("inferplan_plan_feasible", {"namespace": NAMESPACE, "plan": NAME}),
            ("inferplan_plans", {"condition": "Ready", "status": "True"}),
            ("inferplan_cluster_gpus", {"gpu_type": "L40S"}))}

    try:
        assert works()
        b.seen(UID, NAMESPACE, NAME, 1, CHAT, answer)
        b.inventory()
        assert exported() == {"inferplan_plan_feasible": 1.0, "inferplan_plans": 1.0, "inferplan_cluster_gpus": 4.0}
        peers["a"] = {"priority": 2, "lifetime": 60, "lastseen": now}  # a peer of a higher priority: b waits
        assert not works()
        assert exported() == {"inferplan_plan_feasible": None, "inferplan_plans": None, "inferplan_cluster_gpus": None}
        assert metrics.REGISTRY.get_sample_value("inferplan_reconcile_duration_seconds_count") is not None
        del peers["a"]  # gone: b works again, and exports what it holds
        assert works()
        assert exported()["inferplan_plan_feasible"] == 1.0
    finally:
        b.forget(UID, NAMESPACE, NAME)
        metrics.VIEW.working = True


def test_a_plan_with_its_own_available_gpus_is_not_planned_again_at_every_check(cluster: Cluster) -> None:
    """Answered once, a plan whose availableGpus (no gpuTypes) lists L40S on a cluster that also has L4 nodes has
    no work due at the next check: its status holds for the types it may use."""
    cluster.nodes.append(node_gpus("l4-0", {"nvidia.com/gpu.product": "NVIDIA-L4"}, {"nvidia.com/gpu": "4"}, False,
                                   [{"type": "Ready", "status": "True"}]))
    spec = {**CHAT, "constraints": {**(CHAT.get("constraints") or {}), "availableGpus": {"L40S": 4}}}
    spec["constraints"].pop("gpuTypes", None)
    cluster.add(spec)
    cluster.reconcile()
    ((_, _, patch),) = cluster.api.writes
    assert [entry["gpuType"] for entry in patch["inventory"]] == ["L40S"]
    cluster.controller.registry.plans[UID].status = patch  # as its watch event brings it back

    async def due() -> bool:
        controller = cluster.controller
        controller._check(UID, controller.inventory(), time.monotonic())
        task = controller._tasks.pop(UID, None)
        if task is not None:
            task.cancel()
        return task is not None

    assert not asyncio.run(due())


def test_a_plan_whose_status_does_not_answer_it_is_planned_when_first_seen(cluster: Cluster) -> None:
    """After a restart or an upgrade, a plan is planned when first seen unless its status answers its generation,
    GPU inventory and planner version (docs/operator.md, "When a plan is re-planned"). A status of another planner
    version (an upgrade), one Ready=False PlanningFailed (an unexpected error, worth another try) and a ConfigMap
    model's (the ConfigMap may have changed unseen) were found unanswered and logged "to plan", but nothing was due
    until the resync, up to INFERPLAN_RESYNC_SECONDS (600 s) later; only the warnings were rewritten."""
    cluster.add(CHAT)
    cluster.reconcile()
    ((_, _, answer),) = cluster.api.writes
    failed = {**answer, "conditions": [{**c, "status": "False", "reason": "PlanningFailed"} if c["type"] == "Ready"
                                       else c for c in answer["conditions"]]}
    configmap = {**CHAT, "model": {"configMapRef": {"name": "cm", "key": "config.json"}}}
    cluster.controller.forget(UID, NAMESPACE, NAME)

    def due_at_first_check(spec: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
        inline = InlineExecutor()
        restarted = Controller(OperatorSettings(verify=False), pool=cast(PlannerPool, cluster.pool), api=inline,
                               observe=inline, endpoints=EndpointsFile(None), identity="test", priority=0,
                               nodes=lambda: cluster.nodes)
        restarted.seen(UID, NAMESPACE, NAME, 1, spec, status)

        async def check() -> bool:
            restarted._check(UID, restarted.inventory(), time.monotonic())
            task = restarted._tasks.pop(UID, None)
            if task is not None:
                task.cancel()
            return task is not None

        try:
            return asyncio.run(check())
        finally:
            restarted.forget(UID, NAMESPACE, NAME)

    assert answer["plannerVersion"] == planner_version()
    assert not due_at_first_check(CHAT, answer)  # answered: nothing planned (its resync later)
    assert due_at_first_check(CHAT, {**answer, "plannerVersion": "0.0.1"})
    # The release alone, which every build before the model's digest wrote whatever model answered.
    assert due_at_first_check(CHAT, {**answer, "plannerVersion": __version__})
    assert due_at_first_check(CHAT, failed)
    assert due_at_first_check(configmap, answer)


def test_plans_queued_for_a_planner_wait_before_unpacking_their_spec_and_status(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """Thousands of plans due at once (created together, an inventory change, an upgrade) each unpacked their spec
    and status (74 KiB parsed for a status of 18 KB) and then waited for a planner: 700 MiB of the operator at
    10,000 plans. Only `planning_slots` reconciles that plan run at once; the others wait unpacked nothing, and
    every plan is still answered."""
    controller = cluster.controller
    slots = planning_slots(controller.settings)
    plans = 3 * slots
    for i in range(plans):
        controller.seen(f"uid-{i}", NAMESPACE, f"chat-{i}", 1, CHAT, None)
    unpacked = 0
    status_of = cast(property, Plan.status)

    def counting(plan: Plan) -> Any:
        nonlocal unpacked
        unpacked += 1
        return status_of.fget(plan)

    async def load() -> tuple[int, int]:
        gate = asyncio.Event()
        planning = cluster.pool.plan

        async def held(*args: Any) -> Outcome:
            await gate.wait()
            return await planning(*args)

        monkeypatch.setattr(cluster.pool, "plan", held)
        now, inventory = time.monotonic(), controller.inventory()
        for i in range(plans):
            controller._check(f"uid-{i}", inventory, now)
        for _ in range(10):
            await asyncio.sleep(0)
        waiting = unpacked
        gate.set()
        await asyncio.gather(*controller._tasks.values())
        return waiting, len(cluster.pool.asked)

    monkeypatch.setattr(Plan, "status", property(counting, status_of.fset))
    try:
        waiting, asked = asyncio.run(load())
    finally:
        for i in range(plans):
            controller.forget(f"uid-{i}", NAMESPACE, f"chat-{i}")
    assert waiting == slots  # all `plans` unpacked theirs before
    assert asked == plans and len(cluster.api.writes) == plans


def test_the_answer_a_reconcile_keeps_shares_the_inventory_entries_of_the_status(cluster: Cluster) -> None:
    """What the registry keeps of a plan's last answer (the inventory its ranges hold for) was the status's own
    parsed list, one copy per plan kept until it was planned again; it shares the entries the checks keep instead."""
    cluster.add(CHAT)
    cluster.reconcile()
    ((_, _, patch),) = cluster.api.writes
    registry = cluster.controller.registry
    answer, checked = registry.answered[UID], cast(dict, registry.plans[UID].checked)
    assert answer.inventory == patch["inventory"] == checked["inventory"]
    assert all(a is b for a, b in zip(answer.inventory, checked["inventory"], strict=True))


def test_plans_whose_statuses_record_the_same_inventory_keep_one_copy_of_it() -> None:
    # Each event of a plan brings its status parsed afresh; the inventory entries the checks keep parsed were 5-7
    # KiB of every plan (50-70 MiB of the operator at 10,000 plans), the same entries on one cluster over and over.
    import gc
    import json
    import tracemalloc

    inventory = [{"gpuType": t, "productLabel": f"NVIDIA-{t}", "gpusPerNode": 8, "minGpus": 1, "maxGpus": 64,
                  "nodeSizes": [{"gpus": 8, "nodes": 3}, {"gpus": 4, "nodes": 1}]}
                 for t in ("H100-SXM5-80GB", "A100-SXM4-80GB", "L40S", "L4", "H200-SXM-141GB", "MI300X")]
    status = {"observedGeneration": 1, "plannerVersion": "9.9", "inventory": inventory,
              "conditions": [{"type": "Ready", "status": "True", "reason": "Planned", "message": "m" * 300,
                              "lastTransitionTime": "2026-12-06T00:00:00Z"}]}
    text = json.dumps(status)
    spec = {"model": {"name": "m"}, "constraints": {"gpuTypes": ["H100"]}}
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        plans = [Plan(f"u{i}", "ns", f"p{i}", 1, spec, json.loads(text), 0.0) for i in range(200)]
        gc.collect()
        per_plan = (tracemalloc.get_traced_memory()[0] - before) / len(plans)
    finally:
        tracemalloc.stop()
    first, other = (cast(dict, p.checked)["inventory"] for p in plans[:2])
    assert all(a is b for a, b in zip(first, other, strict=True))
    assert per_plan < 4096, per_plan  # 8.4 KiB each while every plan kept its own parsed copy
    # What the checks read is as before: the status answers its plan, and the Ready condition's outcome.
    relevant = [{**{k: v for k, v in e.items() if k not in ("minGpus", "maxGpus")}, "gpus": 32} for e in inventory]
    assert unanswered(spec, plans[1].checked, 1, relevant, "9.9") is None
    assert cast(dict, plans[1].checked)["conditions"] == [{"type": "Ready", "status": "True", "reason": "Planned"}]
    assert plans[1].status == status  # the whole status, message included, is kept packed


def test_the_node_index_is_read_again_only_after_a_node_event_or_a_node_added_or_deleted() -> None:
    """Every plan event and every wake of the checker asks for the inventory; it read every node of kopf's index
    each time (about 2 ms at 5,000 nodes: bench/bench_controller_inventory.py). It reads them again only when the index
    may have changed: after a node event (kopf calls `nodes_changed` once the index has it), or where the index
    holds more or fewer nodes (a node added or deleted, whose event may come after a plan's). Every change shows."""
    index = {f"l40s-{i}": [node_gpus(f"l40s-{i}", {"nvidia.com/gpu.product": "NVIDIA-L40S"}, {"nvidia.com/gpu": "1"},
                                     False, [{"type": "Ready", "status": "True"}])] for i in range(3)}
    reads = 0

    def nodes() -> list[NodeGpus]:
        nonlocal reads
        reads += 1
        return [value for store in index.values() for value in store]

    inline = InlineExecutor()
    controller = Controller(OperatorSettings(verify=False), pool=cast(PlannerPool, FakePool()), api=inline,
                            observe=inline, endpoints=EndpointsFile(None), identity="test", priority=0, nodes=nodes,
                            node_count=lambda: len(index))
    first = controller.inventory()
    for i in range(50):  # plan events: the nodes are not read again
        controller.seen(f"uid-{i}", NAMESPACE, f"p-{i}", 1, CHAT, None)
        assert controller.inventory() is first
    assert reads == 1 and first.available() == {"L40S": 3}
    index["l40s-2"] = [dataclasses.replace(index["l40s-2"][0], schedulable=False, problems=("unschedulable",))]
    controller.nodes_changed()  # the cordon's event
    assert controller.inventory().available() == {"L40S": 2} and reads == 2
    del index["l40s-0"]  # deleted: the index has fewer nodes before kopf calls the node's event handler
    assert controller.inventory().available() == {"L40S": 1} and reads == 3
    controller.nodes_changed()  # a heartbeat: read again, the same nodes, the same inventory
    again = controller.inventory()
    assert reads == 4 and again.available() == {"L40S": 1} and controller.inventory() is again and reads == 4
    for i in range(50):
        controller.forget(f"uid-{i}", NAMESPACE, f"p-{i}")


def test_another_problem_under_the_same_reason_is_announced_again(cluster: Cluster) -> None:
    # The docs promise one Warning event per new problem; an edit that moved the problem to another model (another
    # message, the same reason InvalidModel) was announced only by the condition.
    cluster.add({**CHAT, "model": {"name": "acme/not-a-real-model"}})
    cluster.reconcile()
    ((_, _, first),) = cluster.api.writes
    cluster.add({**CHAT, "model": {"name": "acme/another-unknown-model"}}, generation=2, status=first)
    cluster.reconcile()
    assert [e["reason"] for e in cluster.api.events] == ["InvalidModel", "InvalidModel"]
    assert "acme/another-unknown-model" in cluster.api.events[1]["message"]
    # Planned again with nothing changed: neither written nor announced again.
    second = cluster.api.writes[-1][2]
    cluster.add({**CHAT, "model": {"name": "acme/another-unknown-model"}}, generation=2, status=second)
    cluster.reconcile()
    assert len(cluster.api.events) == 2


def test_an_unexpected_error_without_text_names_its_type(cluster: Cluster) -> None:
    def fails() -> Outcome:
        raise KeyError()

    cluster.pool.script = fails
    cluster.add(CHAT)
    cluster.reconcile()
    ((_, _, patch),) = cluster.api.writes
    assert condition(patch, "Ready")["message"] == "unexpected error while planning: KeyError"


def test_an_endpoints_file_turned_bad_while_running_is_logged_once_and_its_last_endpoints_kept(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # A file that went bad kept the last good endpoints in use and nothing said so: EndpointsFile.error was never read.
    path = tmp_path / "prometheus.yaml"
    stamp = 1_700_000_000

    def write(text: str) -> None:
        nonlocal stamp
        path.write_text(text, encoding="utf-8")
        stamp += 10
        os.utime(path, (stamp, stamp))  # a new modification time, as a ConfigMap's update gives

    write("- name: main\n  url: http://prometheus:9090\n")
    controller = Controller(OperatorSettings(verify=False), pool=cast(PlannerPool, FakePool()), api=InlineExecutor(),
                            observe=InlineExecutor(), endpoints=EndpointsFile(str(path)), identity="test",
                            priority=0)
    caplog.set_level("INFO", logger="inferplan.checker")
    assert list(controller.prometheus_endpoints()) == ["main"] and not caplog.records
    write("- name: main\n  url: ftp://prometheus\n")
    for _ in range(3):
        assert list(controller.prometheus_endpoints()) == ["main"]
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "INFERPLAN_PROMETHEUS_CONFIG[0].url: must be an http(s) URL" in warnings[0].message
    assert "the endpoints read before stay in use (main)" in warnings[0].message
    path.unlink()  # another problem: said again
    assert list(controller.prometheus_endpoints()) == ["main"]
    assert "cannot read" in caplog.records[-1].message and caplog.records[-1].levelname == "WARNING"
    write("- name: other\n  url: http://prometheus:9090\n")
    assert list(controller.prometheus_endpoints()) == ["other"] and controller.endpoints.error is None
    assert caplog.records[-1].levelname == "INFO" and "read again: endpoints other" in caplog.records[-1].message
    assert len(caplog.records) == 3
