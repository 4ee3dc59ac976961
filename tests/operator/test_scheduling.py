"""The operator's rules (inferplan/operator/scheduling.py): when a plan is planned or observed, which replica
works. Pure functions: no cluster, no clock."""

from __future__ import annotations

import datetime

from inferplan.operator.scheduling import (
    Answer,
    Work,
    inventory_holds,
    leads,
    moved,
    planning_inputs,
    relevant_inventory,
    unanswered,
    usable_gpu_types,
    work_due,
)

H100 = {"gpuType": "H100-SXM5-80GB", "productLabel": "NVIDIA-H100-80GB-HBM3", "gpus": 8, "nodes": 1, "gpusPerNode": 8}
L4 = {"gpuType": "L4", "productLabel": "NVIDIA-L4", "gpus": 4, "nodes": 1, "gpusPerNode": 4}
# What a status records of L4 for an answer that holds from 2 to 7 L4 GPUs (`status.inventory_ranges`).
L4_HELD = {"gpuType": "L4", "productLabel": "NVIDIA-L4", "gpusPerNode": 4, "minGpus": 2, "maxGpus": 7}
H100_HELD = {"gpuType": "H100-SXM5-80GB", "productLabel": "NVIDIA-H100-80GB-HBM3", "gpusPerNode": 8, "minGpus": 1}
SPEC = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "constraints": {"gpuTypes": ["NVIDIA-L4"]}}


def _status(generation: int = 3, inventory: list | None = None, ready: str = "True", reason: str = "Planned",
            version: str = "1.0") -> dict:
    return {"observedGeneration": generation, "plannerVersion": version, "inventory": inventory or [L4_HELD],
            "conditions": [{"type": "Ready", "status": ready, "reason": reason}]}


def _due(**kw: object) -> tuple[bool, bool]:
    args: dict = dict(generation=3, status=_status(), relevant=[L4], answer=None, observes=False, now=1000.0,
                      last_planned=990.0, last_observed=-1e9, resync_s=600.0, observe_s=60.0, answer_grace_s=120.0)
    args.update(kw)
    work = work_due(**args)
    return work.replan, work.observe


def test_the_usable_inventory_is_the_plans_gpu_types() -> None:
    assert usable_gpu_types(SPEC) == frozenset({"L4"})
    assert usable_gpu_types({"constraints": {}}) is None
    assert relevant_inventory(SPEC, [H100, L4]) == [L4]
    assert relevant_inventory({}, [H100, L4]) == [H100, L4]
    # A name the catalog does not know selects nothing (the planner reports it; the inventory ignores it).
    assert relevant_inventory({"constraints": {"gpuTypes": ["no-such-gpu"]}}, [H100, L4]) == []
    # Without gpuTypes, the spec's own availableGpus names the types it considers: the cluster's others are not its
    # inventory (they were listed in its status, and rewrote it as their nodes came and went).
    quota = {"constraints": {"availableGpus": {"NVIDIA-L4": 4}}}
    assert usable_gpu_types(quota) == frozenset({"L4"}) and relevant_inventory(quota, [H100, L4]) == [L4]
    both = {"constraints": {"gpuTypes": ["H100"], "availableGpus": {"NVIDIA-L4": 4}}}
    assert usable_gpu_types(both) == frozenset({"H100-SXM5-80GB"})


def test_an_answer_holds_while_each_count_stays_in_its_range() -> None:
    assert inventory_holds([L4_HELD], [L4])
    assert inventory_holds([L4_HELD], [{**L4, "gpus": 2, "nodes": 3}])  # node counts are not compared
    assert inventory_holds([L4_HELD], [{**L4, "gpus": 7}])
    assert not inventory_holds([L4_HELD], [{**L4, "gpus": 1}])
    assert not inventory_holds([L4_HELD], [{**L4, "gpus": 8}])
    assert inventory_holds([H100_HELD, L4_HELD], [H100 | {"gpus": 4000}, L4])  # no maxGpus: any number more
    # A type that came or went, another node label or node size: planned again.
    assert not inventory_holds([L4_HELD], [H100, L4])
    assert not inventory_holds([H100_HELD, L4_HELD], [L4])
    assert not inventory_holds([L4_HELD], [{**L4, "productLabel": "NVIDIA-L4-24GB"}])
    assert not inventory_holds([L4_HELD], [{**L4, "gpusPerNode": 8}])
    # The nodes' network label set, changed or removed: planned again (the plan may price the network by it).
    assert not inventory_holds([L4_HELD], [{**L4, "networkGbps": 100.0}])
    assert not inventory_holds([{**L4_HELD, "networkGbps": 100.0}], [{**L4, "networkGbps": 200.0}])
    assert not inventory_holds([{**L4_HELD, "networkGbps": 100.0}], [{**L4, "networkGbps": None}])
    assert inventory_holds([{**L4_HELD, "networkGbps": 100.0}], [{**L4, "networkGbps": 100.0}])
    assert inventory_holds([L4_HELD], [{**L4, "networkGbps": None}])  # unlabelled as before
    # Nodes of different counts (where replicas are placed): the answer holds for the same nodes only.
    sizes = [{"gpus": 4, "nodes": 1}, {"gpus": 3, "nodes": 1}]
    assert inventory_holds([{**L4_HELD, "nodeSizes": sizes}], [{**L4, "gpus": 7, "nodeSizes": sizes}])
    assert not inventory_holds([{**L4_HELD, "nodeSizes": sizes}], [{**L4, "gpus": 7, "nodes": 2, "nodeSizes": None}])
    assert not inventory_holds([L4_HELD], [{**L4, "gpus": 7, "nodeSizes": sizes}])
    assert not inventory_holds([{**L4_HELD, "nodeSizes": sizes}],
                               [{**L4, "gpus": 6, "nodeSizes": [{"gpus": 4, "nodes": 1}, {"gpus": 2, "nodes": 1}]}])
    assert inventory_holds([L4_HELD], [{**L4, "gpus": 4, "nodeSizes": None}])  # one count, as before
    # A status written before the ranges (live counts, no minGpus) holds for nothing.
    assert not inventory_holds([L4], [L4])
    assert inventory_holds([], [])


def test_a_status_answers_its_generation_inventory_and_version_only() -> None:
    assert unanswered(SPEC, _status(), 3, [L4], "1.0") is None
    assert unanswered(SPEC, _status(generation=2), 3, [L4], "1.0") == "no status for generation 3"
    assert unanswered(SPEC, _status(version="0.9"), 3, [L4], "1.0") == "planned by version 0.9"
    assert unanswered(SPEC, _status(), 3, [{**L4, "gpus": 8}], "1.0") == "the GPU inventory changed"
    assert unanswered(SPEC, _status(), 3, [{**L4, "gpus": 6}], "1.0") is None  # within the answer's range
    assert unanswered(SPEC, _status(ready="Unknown", reason="Planning"), 3, [L4], "1.0") is not None
    assert unanswered(SPEC, _status(ready="False", reason="PlanningFailed"), 3, [L4], "1.0") is not None
    assert unanswered(SPEC, _status(ready="False", reason="InvalidModel"), 3, [L4], "1.0") is None
    config_map = {**SPEC, "model": {"configMapRef": {"name": "m"}}}
    assert "ConfigMap" in (unanswered(config_map, _status(), 3, [L4], "1.0") or "")
    assert unanswered(SPEC, None, 3, [L4], "1.0") == "no status for generation 3"


def test_an_answered_plan_waits_for_its_resync() -> None:
    assert _due() == (False, False)
    assert _due(now=990.0 + 600.0) == (True, False)


def test_a_new_generation_or_inventory_is_planned_unless_this_process_answered_it() -> None:
    assert _due(generation=4) == (True, False)
    assert _due(relevant=[{**L4, "gpus": 8}]) == (True, False)
    assert _due(relevant=[{**L4, "gpus": 5}]) == (False, False)  # within the answer's range
    # Answered a moment ago: the write is on its way back as an event.
    assert _due(generation=4, answer=Answer(4, [L4_HELD], 990.0)) == (False, False)
    # Answered for another inventory, or another generation: planned again.
    assert _due(generation=4, answer=Answer(4, [H100_HELD], 990.0)) == (True, False)
    assert _due(generation=4, answer=Answer(3, [L4_HELD], 990.0)) == (True, False)


def test_warnings_that_no_longer_describe_the_nodes_are_rewritten_without_planning() -> None:
    """A node cordoned or back while the count stays within the answer's range: the status's warnings about the
    nodes are rewritten (they had said what the nodes were when it was last planned), and nothing is planned."""
    stale = dict(generation=3, status=_status(), relevant=[{**L4, "gpus": 5}], answer=None, observes=False,
                 now=1000.0, last_planned=990.0, last_observed=-1e9, resync_s=600.0, observe_s=60.0,
                 answer_grace_s=120.0, warnings_hold=False)
    assert work_due(**stale) == Work(replan=False, observe=False, rewarn=True)
    assert work_due(**{**stale, "warnings_hold": True}) == Work(replan=False, observe=False)
    assert not work_due(**{**stale, "warnings_hold": True})
    # Planned again anyway: that answer's status has the warnings of the nodes as they are.
    assert work_due(**{**stale, "generation": 4}) == Work(replan=True, observe=False)


def test_an_answer_that_never_showed_up_is_planned_again_after_the_grace() -> None:
    answer = Answer(4, [L4_HELD], 1000.0)
    assert _due(generation=4, answer=answer, now=1000.0 + 119.0, last_planned=1000.0) == (False, False)
    assert _due(generation=4, answer=answer, now=1000.0 + 120.0, last_planned=1000.0) == (True, False)


def test_an_answer_kept_unwritten_holds_for_its_own_ranges_and_is_never_lost() -> None:
    """A re-plan whose answer differs from the status only in its count ranges is not written: this process
    keeps the new ranges, and the status, behind them on purpose, is not taken for a lost write."""
    kept = Answer(3, [{**L4_HELD, "minGpus": 8, "maxGpus": 11}], 1000.0, written=False)
    grown = [{**L4, "gpus": 9}]  # outside the status's 2-7, inside the kept 8-11
    assert _due(relevant=grown, answer=kept, now=1000.0 + 500.0, last_planned=1000.0) == (False, False)
    assert _due(relevant=grown, answer=kept, now=1000.0 + 600.0, last_planned=1000.0) == (True, False)  # resync
    assert _due(relevant=[{**L4, "gpus": 12}], answer=kept, last_planned=1000.0) == (True, False)  # outside both
    assert _due(relevant=[{**L4, "gpus": 5}], answer=kept, last_planned=1000.0) == (False, False)  # the status's


def test_observing_plans_are_observed_every_interval() -> None:
    assert _due(observes=True) == (False, True)
    assert _due(observes=True, last_observed=950.0) == (False, False)
    assert _due(observes=True, last_observed=940.0) == (False, True)
    assert not work_due(generation=3, status=_status(), relevant=[L4], answer=None, observes=True, now=1000.0,
                        last_planned=990.0, last_observed=995.0, resync_s=600.0, observe_s=60.0,
                        answer_grace_s=120.0)


def test_a_spec_edit_of_an_observing_plan_is_observed_with_its_planning() -> None:
    # Observed 10 s ago (the interval is 60 s), and the spec was edited since (generation 4, status 3): planned and
    # observed in one reconcile, so the answer's one write has every condition of generation 4.
    assert _due(generation=4, observes=True, last_observed=990.0) == (True, True)
    assert _due(generation=4, observes=False, last_observed=990.0) == (True, False)
    # The answer to generation 4 is on its way (its write not back yet): neither again.
    answered = Answer(4, [L4_HELD], 995.0)
    assert _due(generation=4, observes=True, last_observed=995.0, answer=answered) == (False, False)
    # Planned again for the inventory or the resync, with the status on its generation: observed on its own interval.
    assert _due(observes=True, last_observed=990.0, relevant=[{**L4, "gpus": 12}]) == (True, False)
    assert _due(observes=True, last_observed=990.0, last_planned=100.0) == (True, False)


def test_observed_inputs_replan_when_they_move_more_than_five_percent() -> None:
    spec = {"workload": {"source": "observed"}, "observe": {"calibrate": True}}
    status = {"observed": {"requestsPerSecond": 10.0, "promptTokensMean": 500, "outputTokensMean": 200},
              "calibration": {"decode": 1.1}}
    inputs = planning_inputs(spec, status)
    assert inputs == (10.0, 500.0, 200.0, 1.1, 1.0)
    assert planning_inputs({}, status) == ()
    assert moved(None, inputs)
    assert not moved(inputs, (10.4, 500.0, 200.0, 1.1, 1.0))
    assert moved(inputs, (10.6, 500.0, 200.0, 1.1, 1.0))
    assert moved(inputs, inputs[:3])


NOW = datetime.datetime(2026, 12, 2, 12, 0, 0, tzinfo=datetime.UTC)


def _peer(priority: int, seconds_ago: float, lifetime: int = 60) -> dict:
    return {"priority": priority, "lifetime": lifetime,
            "lastseen": (NOW - datetime.timedelta(seconds=seconds_ago)).isoformat()}


def test_the_highest_priority_live_replica_leads_as_kopf_decides() -> None:
    assert leads({"me": _peer(5, 0)}, "me", 5, NOW)
    assert not leads({}, "me", 5, NOW)  # not announced yet
    assert leads({"me": _peer(5, 0), "other": _peer(3, 0)}, "me", 5, NOW)
    assert not leads({"me": _peer(5, 0), "other": _peer(7, 0)}, "me", 5, NOW)
    assert not leads({"me": _peer(5, 0), "other": _peer(5, 0)}, "me", 5, NOW)  # equal: kopf pauses both
    assert leads({"me": _peer(5, 0), "other": _peer(7, 61)}, "me", 5, NOW)  # the other's lifetime is over
    # A naive timestamp is UTC, and a malformed entry is ignored.
    naive = {"priority": 9, "lifetime": 60, "lastseen": NOW.replace(tzinfo=None).isoformat()}
    assert not leads({"me": _peer(5, 0), "other": naive}, "me", 5, NOW)
    assert leads({"me": _peer(5, 0), "other": {"priority": 9}, "third": "x"}, "me", 5, NOW)
