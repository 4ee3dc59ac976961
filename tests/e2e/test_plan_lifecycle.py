"""A plan's life under the operator, against a real API server: edits that land while a status is being written,
and what the status says afterwards.

The operator runs in-process under kopf's KopfRunner with the real handlers, as in test_operator.py, on nodes of
its own.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from inferplan.operator import kube
from inferplan.operator.controller import Controller
from inferplan.resource import GROUP, PLURAL, VERSION

from .conftest import REPO, wait_for
from .test_operator import CHAT, condition, gpu_nodes, manifest, planned, runner

NODES = {"life-h100-a": ("NVIDIA-H100-80GB-HBM3", 8), "life-l40s-a": ("NVIDIA-L40S", 4)}


@pytest.fixture(scope="module")
def cluster(k8s: dict[str, Any], namespace: str) -> Iterator[dict[str, Any]]:
    yield from gpu_nodes(k8s, namespace, NODES)


def test_a_spec_edited_while_its_status_is_written_keeps_nothing_of_the_old_answer(
        cluster: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The first answer's write is held until the spec has been edited (to a model the planner refuses) and the
    operator has seen the edit: the second generation's status must not carry the first one's recommendation.

    Before the fix the operator diffed the second status against the one its edit's event showed (none yet), so
    the merge patch named nothing of the first answer and `kubectl get icp` showed Ready False InvalidModel next to
    the recommendation of the spec before the edit. (Whether the event of the first write reaches the operator
    before the second reconcile starts is up to the watch, so the edit is made on a few plans: before the fix most
    of them kept the old recommendation.)"""
    objects, ns = cluster["objects"], cluster["namespace"]
    names = [f"edited-mid-write-{i}" for i in range(4)]
    writing = {name: threading.Event() for name in names}
    edited = {name: threading.Event() for name in names}
    real_write = kube.write_status

    def held_write(namespace: str, name: str, patch: dict[str, Any]) -> dict:
        if name in edited and not edited[name].is_set():
            writing[name].set()
            edited[name].wait(timeout=30)  # a slow API server: the write of generation 1 lands after the edit
        return real_write(namespace, name, patch)

    seen: set[tuple[str, int]] = set()
    real_seen = Controller.seen

    def noted_seen(self: Controller, uid: str, namespace: str, name: str, generation: int, *args: Any) -> None:
        real_seen(self, uid, namespace, name, generation, *args)
        seen.add((name, generation))

    monkeypatch.setattr(kube, "write_status", held_write)
    monkeypatch.setattr(Controller, "seen", noted_seen)
    answers = {}
    with runner() as kopf_run:
        for name in names:
            objects.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, manifest(name, CHAT))
            try:
                wait_for(writing[name].is_set, timeout_s=60)
                objects.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name,
                                                       {"spec": {"model": {"name": "acme/not-a-real-model"}}})
                # The edit's event reaches the operator, its status still empty, while the first write is held.
                wait_for(lambda name=name: (name, 2) in seen, timeout_s=30)
            finally:
                edited[name].set()
            answers[name] = wait_for(lambda name=name: planned(cluster, name, 2), timeout_s=60)
    assert kopf_run.exception is None, kopf_run.output
    for name, obj in answers.items():
        ready = condition(obj, "Ready")
        assert (ready["status"], ready["reason"]) == ("False", "InvalidModel"), obj["status"]
        assert condition(obj, "Feasible")["status"] == "Unknown"
        stale = {key for key in ("recommendation", "alternatives", "infeasible", "ttftAtSloMs", "gpuColumn",
                                 "replicasColumn", "batchColumn", "shapes")
                 if obj["status"].get(key)}
        assert not stale, f"{name}: generation 2's status keeps generation 1's {sorted(stale)}"


def test_a_plan_being_planned_has_the_status_operator_md_says(cluster: dict[str, Any],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """While the first answer is on its way a new plan has no status, and while an edit is planned the status
    answers the generation before: what docs/operator.md says, which listed a `Ready=Unknown Planning` condition
    of a plan not planned yet that the operator never wrote."""
    objects, ns, name = cluster["objects"], cluster["namespace"], "being-planned"
    writing, release = threading.Event(), threading.Event()
    real_write = kube.write_status

    def held_write(namespace: str, plan: str, patch: dict[str, Any]) -> dict:
        if plan == name and not release.is_set():
            writing.set()
            release.wait(timeout=30)
        return real_write(namespace, plan, patch)

    monkeypatch.setattr(kube, "write_status", held_write)
    objects.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, manifest(name, CHAT))
    with runner() as kopf_run:
        try:
            wait_for(writing.is_set, timeout_s=60)  # planned, its answer not written yet
            assert not objects.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name).get("status")
        finally:
            release.set()
        first = wait_for(lambda: planned(cluster, name, 1), timeout_s=60)
        writing.clear()
        release.clear()
        objects.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name,
                                               {"spec": {"workload": {"requestsPerSecond": "40"}}})
        try:
            wait_for(writing.is_set, timeout_s=60)
            during = objects.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
            assert during["metadata"]["generation"] == 2
            assert during["status"] == first["status"]  # generation 1's answer, saying so
        finally:
            release.set()
        wait_for(lambda: planned(cluster, name, 2), timeout_s=60)
    assert kopf_run.exception is None, kopf_run.output
    doc = (REPO / "docs" / "operator.md").read_text()
    conditions = doc.split("### Conditions", 1)[1].split("\n## ", 1)[0]
    assert "`Planning`" not in conditions and "has no status at all" in conditions
    assert "not planned yet" not in conditions.split("`NotPlanned`", 1)[1].split("\n", 1)[0]
