"""The plan status: condition transitions, next_status for each outcome, idempotence, and the patch."""

from __future__ import annotations

import copy
import datetime
import functools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplan.operator.inventory import Inventory, NodeGpus, build_inventory
from inferplan.operator.kube import warning_event
from inferplan.operator.status import (
    CONDITION_TYPES,
    PlanStatus,
    condition,
    next_status,
    only_ranges_moved,
    ranges_text,
    status_patch,
    with_inventory_warnings,
)
from inferplan.planner.request import resolve_plan
from inferplan.planner.results import PlanResult, replica_shape
from inferplan.planner.search.plan import plan
from inferplan.planner.spec_parsing import parse_plan
from tests.planner.search.test_disaggregated import _plan as disaggregated_plan
from tests.support.plans import spec

BASE = spec(gpuTypes=["H100"], tensorParallelSizes=[1])

T0, T1, T2 = "2025-01-01T00:00:00Z", "2025-01-01T00:05:00Z", "2025-01-01T00:10:00Z"
ERROR = ("InvalidModel", "unknown model 'acme/nope'; closest: meta-llama/Llama-3.1-8B-Instruct")


@functools.cache
def feasible_result() -> PlanResult:
    return plan(resolve_plan(parse_plan(BASE)))


@functools.cache
def infeasible_result() -> PlanResult:
    data = copy.deepcopy(BASE)
    data["slo"]["tpot"]["maxMs"] = 3  # below one weight read of an 8B model on an H100
    return plan(resolve_plan(parse_plan(data)))


def cluster_nodes() -> list[NodeGpus]:
    return [
        NodeGpus("a", "NVIDIA-H100-80GB-HBM3", 8, True, True),
        NodeGpus("b", "NVIDIA-H100-80GB-HBM3", 4, True, True),
        NodeGpus("c", "NVIDIA-L4", 1, True, True),
        NodeGpus("d", "Zeta-9", 2, True, True),
    ]


def cluster() -> Inventory:
    return build_inventory(cluster_nodes())


def status(old: dict[str, Any] | None = None, *, now: str = T0, generation: int = 1,
           result: PlanResult | None = None, error: tuple[str, str] | None = None,
           inventory: Inventory | None = None) -> dict[str, Any]:
    return next_status(old, generation=generation, now=now, planner_version="0.1.0",
                       inventory=cluster() if inventory is None else inventory, result=result, error=error)


def by_type(new: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in new["conditions"]}


# ----------------------------------------------------------------------------------------------------------
# condition


def test_condition_is_a_camel_case_metav1_condition() -> None:
    assert condition("Ready", "True", "Planned", "ok", 3, T0, None) == {
        "type": "Ready", "status": "True", "reason": "Planned", "message": "ok",
        "lastTransitionTime": T0, "observedGeneration": 3,
    }


def test_condition_keeps_the_time_while_the_status_holds() -> None:
    first = condition("Feasible", "True", "Feasible", "1 x 1 H100", 1, T0, None)
    again = condition("Feasible", "True", "Feasible", "2 x 1 H100", 2, T1, [first])
    assert again["lastTransitionTime"] == T0  # reason, message and generation change without a transition
    assert again["message"] == "2 x 1 H100" and again["observedGeneration"] == 2


def test_condition_takes_the_new_time_when_the_status_flips() -> None:
    first = condition("Feasible", "True", "Feasible", "1 x 1 H100", 1, T0, None)
    flipped = condition("Feasible", "False", "NoFeasibleCandidate", "too slow", 1, T1, [first])
    assert flipped["lastTransitionTime"] == T1
    back = condition("Feasible", "True", "Feasible", "1 x 1 H100", 1, T2, [flipped])
    assert back["lastTransitionTime"] == T2


def test_condition_looks_only_at_its_own_type() -> None:
    other = condition("Ready", "True", "Planned", "", 1, T0, None)
    assert condition("Feasible", "True", "Feasible", "", 1, T1, [other])["lastTransitionTime"] == T1


def test_condition_rejects_bad_status_and_reason() -> None:
    with pytest.raises(ValueError):
        condition("Ready", "Maybe", "Planned", "", 1, T0, None)
    with pytest.raises(ValueError):
        condition("Ready", "True", "not camel case!", "", 1, T0, None)


def test_a_message_too_long_for_the_api_server_is_cut_after_a_whole_problem_and_says_so() -> None:
    """A spec with thousands of problems: the condition fits metav1.Condition's 32768 characters, ends on a whole
    problem (never mid-word) and says how much was left out; so does the Warning event (1024 characters)."""
    problems = "\n".join(f"constraints.gpuTypes[{i}]: unknown GPU 'Acme-Accelerator-{i}'" for i in range(1500))
    message = condition("Ready", "False", "UnknownGpuType", problems, 1, T0, None)["message"]
    assert len(problems) > 32768 >= len(message)
    head, _, tail = message.rpartition(" ... (")
    assert head.endswith("'") and problems.startswith(head + "\n")
    assert tail == f"{len(problems) - len(head)} more characters cut)"
    event = warning_event(uid="u", namespace="ns", name="p", generation=1, reason="UnknownGpuType",
                          message=problems, host="h", now=datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC))
    short = event["message"]
    assert len(short) <= 1024 and problems.startswith(short.rpartition(" ... (")[0] + "\n")
    assert short.endswith("more characters cut)")
    unbroken = condition("Ready", "False", "InvalidSpec", "x" * 40000, 1, T0, None)["message"]  # no word to cut at
    kept = unbroken.split(" ")[0]
    assert len(unbroken) <= 32768 and unbroken == f"{kept} ... ({40000 - len(kept)} more characters cut)"


# ----------------------------------------------------------------------------------------------------------
# next_status


def test_feasible_result() -> None:
    result = feasible_result()
    new = status(result=result)
    c = result.recommendation
    assert c is not None and c.gpu_type == "H100-SXM5-80GB"
    assert [x["type"] for x in new["conditions"]] == list(CONDITION_TYPES)
    conditions = by_type(new)
    assert conditions["Ready"] | {"lastTransitionTime": None} == {
        "type": "Ready", "status": "True", "reason": "Planned", "message": "planned for generation 1",
        "lastTransitionTime": None, "observedGeneration": 1,
    }
    feasible = conditions["Feasible"]
    assert (feasible["status"], feasible["reason"]) == ("True", "Feasible")
    assert feasible["message"] == (
        f"{replica_shape(c.replicas, c.gpus_per_replica, 'H100-SXM5-80GB')}, ${c.cost.dollars_per_hour:.2f}/h"
    )
    assert feasible["message"].endswith("/h") and "$" in feasible["message"]
    inventory = conditions["InventoryAvailable"]
    assert (inventory["status"], inventory["reason"]) == ("True", "GpusFound")
    assert inventory["message"] == "GPUs of 2 types: H100-SXM5-80GB, L4"
    assert new["observedGeneration"] == 1 and new["plannerVersion"] == "0.1.0"
    assert new["recommendation"] == c.model_dump(by_alias=True, exclude_none=True, mode="json")
    assert len(new["alternatives"]) == len(result.alternatives)
    assert [e["gpuType"] for e in new["inventory"]] == ["H100-SXM5-80GB", "L4"]
    # No count bounds from planning: the answer holds for any count of at least one GPU (on nodes of 8 and 4, which
    # differ: their counts are recorded).
    assert new["inventory"][0] == {"gpuType": "H100-SXM5-80GB", "productLabel": "NVIDIA-H100-80GB-HBM3",
                                   "gpusPerNode": 8, "minGpus": 1,
                                   "nodeSizes": [{"gpus": 8, "nodes": 1}, {"gpus": 4, "nodes": 1}]}
    assert new["warnings"] == [*result.warnings, *cluster().warnings()]
    assert PlanStatus.model_validate(new).model_dump(by_alias=True, exclude_none=True, mode="json") == new


def test_a_disaggregated_recommendation_names_both_pools_beside_their_cost() -> None:
    # The cost is both pools': the decode pool alone beside it read as one pool costing all of it.
    _, result = disaggregated_plan(constraints={"shapes": ["disaggregated"]})
    pair = result.recommendation
    assert pair is not None and len(pair.roles) == 2
    message = by_type(status(result=result))["Feasible"]["message"]
    assert message == f"{pair.pools()}, ${pair.cost.dollars_per_hour:.2f}/h"
    assert " prefill + " in message and message.count(" decode, $") == 1


def test_the_printer_columns_fields_give_each_pool_and_go_with_the_recommendation() -> None:
    # kubectl get icp's GPU, Replicas and Batch: the recommendation's own top-level fields are its decode pool's.
    _, result = disaggregated_plan(constraints={"shapes": ["disaggregated"]})
    assert result.recommendation is not None
    prefill, decode = result.recommendation.roles
    new = status(result=result)
    assert (new["gpuColumn"], new["replicasColumn"], new["batchColumn"]) == (
        f"{prefill.gpu_type} / {decode.gpu_type}", f"{prefill.replicas} / {decode.replicas}",
        f"{prefill.max_batch} / {decode.max_batch}")
    single = feasible_result().recommendation
    assert single is not None
    planned = status(result=feasible_result())
    assert (planned["gpuColumn"], planned["replicasColumn"], planned["batchColumn"]) == (
        single.gpu_type, str(single.replicas), str(single.max_batch))
    for gone in (status(planned, now=T1, generation=2, error=ERROR),
                 status(planned, now=T1, generation=2, result=infeasible_result())):
        assert not {"gpuColumn", "replicasColumn", "batchColumn"} & set(gone)


def test_infeasible_result() -> None:
    result = infeasible_result()
    assert result.recommendation is None and result.infeasible
    new = status(result=result)
    conditions = by_type(new)
    assert conditions["Ready"]["status"] == "True"
    feasible = conditions["Feasible"]
    assert (feasible["status"], feasible["reason"]) == ("False", "NoFeasibleCandidate")
    assert feasible["message"] == "; ".join(dict.fromkeys(i.reason for i in result.infeasible))
    assert "> 3 ms target" in feasible["message"]
    assert "recommendation" not in new and new["alternatives"] == []
    assert len(new["infeasible"]) == len(result.infeasible)
    assert any("no candidate meets every gate" in w for w in new["warnings"])


def test_error_clears_the_old_answer() -> None:
    planned = status(result=feasible_result())
    new = status(planned, now=T1, generation=2, error=ERROR)
    conditions = by_type(new)
    assert conditions["Ready"] == {"type": "Ready", "status": "False", "reason": "InvalidModel",
                                   "message": ERROR[1], "lastTransitionTime": T1, "observedGeneration": 2}
    assert (conditions["Feasible"]["status"], conditions["Feasible"]["reason"]) == ("Unknown", "NotPlanned")
    assert conditions["Feasible"]["lastTransitionTime"] == T1
    assert conditions["InventoryAvailable"]["lastTransitionTime"] == T0  # still True: no transition
    assert conditions["InventoryAvailable"]["observedGeneration"] == 2
    assert "recommendation" not in new and new["alternatives"] == [] and new["infeasible"] == []
    assert new["inventory"] == planned["inventory"] and new["observedGeneration"] == 2
    assert new["warnings"] == cluster().warnings()


def test_no_inventory_only_reports() -> None:
    new = status(result=feasible_result(), inventory=build_inventory([]))
    conditions = by_type(new)
    assert conditions["InventoryAvailable"] | {"lastTransitionTime": None} == {
        "type": "InventoryAvailable", "status": "False", "reason": "NoGpus",
        "message": "no schedulable node has a known GPU", "lastTransitionTime": None, "observedGeneration": 1,
    }
    assert conditions["Ready"]["status"] == "True" and conditions["Feasible"]["status"] == "True"
    assert new["inventory"] == []


def test_singular_inventory_message() -> None:
    one = build_inventory([NodeGpus("a", "NVIDIA-L4", 1, True, True)])
    assert by_type(status(inventory=one))["InventoryAvailable"]["message"] == "GPUs of 1 type: L4"


def test_first_reconcile_sets_every_condition_unknown_but_inventory() -> None:
    new = status()
    assert [(c["type"], c["status"]) for c in new["conditions"]] == [
        ("Ready", "Unknown"), ("Feasible", "Unknown"), ("InventoryAvailable", "True")
    ]
    assert all(c["lastTransitionTime"] == T0 for c in new["conditions"])


def test_result_and_error_together_is_a_bug() -> None:
    with pytest.raises(ValueError):
        status(result=feasible_result(), error=ERROR)


@pytest.mark.parametrize("outcome", ["feasible", "infeasible", "error", "none"])
def test_same_inputs_later_give_an_equal_status(outcome: str) -> None:
    kwargs: dict[str, Any] = {
        "feasible": {"result": feasible_result()}, "infeasible": {"result": infeasible_result()},
        "error": {"error": ERROR}, "none": {},
    }[outcome]
    first = status(**kwargs)
    second = status(first, now=T1, **kwargs)
    assert second == first
    assert status_patch(first, second) == {}


def test_other_condition_types_are_kept_after_ours() -> None:
    metrics = {"type": "MetricsAvailable", "status": "True", "reason": "Scraped", "message": "ok",
               "lastTransitionTime": "2024-12-31T00:00:00Z", "observedGeneration": 1}
    accurate = {"type": "PredictionAccurate", "status": "False", "reason": "Drift", "message": "ttft +40%",
                "lastTransitionTime": "2024-12-30T00:00:00Z"}
    old = status(result=feasible_result())
    old["conditions"] = [accurate, *old["conditions"], metrics]
    new = status(old, now=T1, generation=2, result=feasible_result())
    assert [c["type"] for c in new["conditions"]] == [*CONDITION_TYPES, "PredictionAccurate", "MetricsAvailable"]
    assert new["conditions"][3:] == [accurate, metrics]  # unchanged, generation included


def test_malformed_foreign_conditions_are_dropped() -> None:
    old = {"conditions": [{"type": "MetricsAvailable", "status": "Perhaps"}, "junk",
                          {"type": "Ready", "status": "True", "reason": "Planned", "message": "",
                           "lastTransitionTime": T0}]}
    new = status(old, now=T1, result=feasible_result())
    assert [c["type"] for c in new["conditions"]] == list(CONDITION_TYPES)
    assert by_type(new)["Ready"]["lastTransitionTime"] == T0


def test_warnings_are_deduplicated_in_order() -> None:
    result = feasible_result().model_copy(update={"warnings": ["b", "a", "b"]})
    inventory = build_inventory([NodeGpus("a", "Zeta-9", 1, True, True)])
    assert status(result=result, inventory=inventory)["warnings"] == ["b", "a", *inventory.warnings()]


def test_the_warnings_about_the_nodes_are_replaced_by_those_of_the_nodes_now() -> None:
    """What the operator writes when nodes change within the answer's range: the plan's own warnings stay, those
    about the nodes are the nodes' as they are now, and the status is what planning again would have written."""
    cordoned = build_inventory([NodeGpus("a", "NVIDIA-H100-80GB-HBM3", 8, True, True),
                                NodeGpus("b", "NVIDIA-H100-80GB-HBM3", 8, False, True)])
    back = build_inventory([NodeGpus(n, "NVIDIA-H100-80GB-HBM3", 8, True, True) for n in "ab"])
    result = feasible_result().model_copy(update={"warnings": ["the plan's own"]})
    old = status(result=result, inventory=cordoned)
    assert old["warnings"] == ["the plan's own", "GPU nodes not counted (1): b (unschedulable)"]
    assert with_inventory_warnings(old["warnings"], back.warnings()) == ["the plan's own"]
    assert with_inventory_warnings(["the plan's own"], cordoned.warnings()) == old["warnings"]
    assert with_inventory_warnings(old["warnings"], cordoned.warnings()) == old["warnings"]  # nothing to rewrite


# ----------------------------------------------------------------------------------------------------------
# status_patch


def test_status_patch() -> None:
    planned = status(result=feasible_result())
    assert status_patch(None, planned) == planned
    failed = status(planned, now=T1, generation=2, error=ERROR)
    patch = status_patch(planned, failed)
    assert patch["recommendation"] is None  # a merge patch must name what it clears
    assert "inventory" not in patch and "plannerVersion" not in patch
    assert patch["observedGeneration"] == 2 and patch["conditions"] == failed["conditions"]
    assert "recommendation" not in status_patch({**failed, "recommendation": None}, failed)


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 as the API server applies a merge patch: mappings merged key by key, None removes, else replaced."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


def test_status_patch_clears_what_a_later_answer_leaves_out_at_any_depth() -> None:
    """A later recommendation without a field the earlier one had (a KV-bound concurrency's interval, which a
    batch-cap-bound answer does not state) must not keep the earlier value: a merge patch keeps every key it does
    not name, nested ones too, so the patch names it as None. The status the server then holds is the new one."""
    planned = status(result=feasible_result())
    earlier = json.loads(json.dumps(planned))
    earlier["recommendation"]["predicted"]["intervals"]["maxConcurrency"] = [216.8, 1078.0]
    earlier["recommendation"]["retired"] = {"note": "a key the new answer does not have"}
    patch = status_patch(earlier, planned)
    assert patch["recommendation"]["predicted"]["intervals"] == {"maxConcurrency": None}
    assert patch["recommendation"]["retired"] is None
    assert set(patch) == {"recommendation"}  # nothing else differs, nothing else is written
    assert _merge(earlier, patch) == planned
    assert status_patch(planned, planned) == {}


def test_status_patch_leaves_other_writers_keys_alone() -> None:
    planned = status(result=feasible_result())
    assert status_patch({**planned, "metrics": {"ttftP95Ms": 120}}, planned) == {}


# ----------------------------------------------------------------------------------------------------------
# Properties

_OUTCOMES = st.sampled_from(["feasible", "infeasible", "error", "none", "other-error"])
_INVENTORIES = st.sampled_from(["cluster", "empty"])


def _inputs(outcome: str) -> dict[str, Any]:
    return {
        "feasible": {"result": feasible_result()},
        "infeasible": {"result": infeasible_result()},
        "error": {"error": ERROR},
        "other-error": {"error": ("InvalidSpec", "workload.requestsPerSecond: must be > 0")},
        "none": {},
    }[outcome]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_OUTCOMES, _INVENTORIES, st.integers(1, 3)), min_size=1, max_size=8))
def test_any_sequence_keeps_one_condition_per_type_and_moves_time_only_on_flips(
    steps: list[tuple[str, str, int]],
) -> None:
    old: dict[str, Any] | None = None
    for minute, (outcome, inventory_name, generation) in enumerate(steps):
        now = f"2025-01-01T00:{minute:02d}:00Z"
        inventory = cluster() if inventory_name == "cluster" else build_inventory([])
        new = status(old, now=now, generation=generation, inventory=inventory, **_inputs(outcome))
        types = [c["type"] for c in new["conditions"]]
        assert types == list(CONDITION_TYPES)
        assert all(c["observedGeneration"] == generation for c in new["conditions"])
        if old is not None:
            before = by_type(old)
            for c in new["conditions"]:
                flipped = before[c["type"]]["status"] != c["status"]
                assert (c["lastTransitionTime"] == now) == flipped
                if not flipped:
                    assert c["lastTransitionTime"] == before[c["type"]]["lastTransitionTime"]
        assert (status_patch(old, new) != {}) == (old != new)
        old = new


# ----------------------------------------------------------------------------------------------------------
# the usable inventory


def test_a_node_of_a_type_the_plan_cannot_use_changes_nothing_in_its_status() -> None:
    h100 = frozenset({"H100-SXM5-80GB"})
    first = status(result=feasible_result(), inventory=cluster().usable(h100))
    grown = build_inventory([*cluster_nodes(), NodeGpus("e", "NVIDIA-L4", 4, True, True),
                             NodeGpus("f", "NVIDIA-A100-SXM4-80GB", 8, True, True)])
    again = status(first, now=T1, result=feasible_result(), inventory=grown.usable(h100))
    assert status_patch(first, again) == {}
    assert [e["gpuType"] for e in again["inventory"]] == ["H100-SXM5-80GB"]
    assert by_type(again)["InventoryAvailable"]["message"] == "GPUs of 1 type: H100-SXM5-80GB"
    # The whole cluster's inventory, as a plan without gpuTypes sees it, does change.
    everything = status(first, now=T1, result=feasible_result(), inventory=grown)
    assert status_patch(first, everything).keys() >= {"inventory", "conditions"}


def test_the_status_records_the_counts_its_answer_holds_in_not_the_live_ones() -> None:
    bounds = {"H100-SXM5-80GB": (4, 15)}
    first = next_status(None, generation=1, now=T0, planner_version="0.1.0", inventory=cluster(),
                        result=feasible_result(), error=None, bounds=bounds)
    assert first["inventory"][0] == {"gpuType": "H100-SXM5-80GB", "productLabel": "NVIDIA-H100-80GB-HBM3",
                                     "gpusPerNode": 8, "minGpus": 4, "maxGpus": 15,
                                     "nodeSizes": [{"gpus": 8, "nodes": 1}, {"gpus": 4, "nodes": 1}]}
    assert first["inventory"][1]["minGpus"] == 1 and "maxGpus" not in first["inventory"][1]
    # Two more H100 (14, within 4-15) on a node of 2: the nodes differ from those recorded (their counts, where replicas
    # are placed), so the answer is planned again; the same answer moves only the ranges and is not written.
    grown = build_inventory([*cluster_nodes(), NodeGpus("e", "NVIDIA-H100-80GB-HBM3", 2, True, True)])
    again = next_status(first, generation=1, now=T1, planner_version="0.1.0", inventory=grown,
                        result=feasible_result(), error=None, bounds=bounds)
    assert again["inventory"][0]["nodeSizes"] == [{"gpus": 8, "nodes": 1}, {"gpus": 4, "nodes": 1},
                                                  {"gpus": 2, "nodes": 1}]
    assert status_patch(first, again).keys() == {"inventory"} and only_ranges_moved(first, again)
    # On nodes of one count no node counts are recorded: another such node within the range writes nothing.
    uniform = [NodeGpus(name, "NVIDIA-H100-80GB-HBM3", 8, True, True) for name in "ab"]
    two = next_status(None, generation=1, now=T0, planner_version="0.1.0", inventory=build_inventory(uniform),
                      result=feasible_result(), error=None, bounds={"H100-SXM5-80GB": (8, 31)})
    assert two["inventory"][0] == {"gpuType": "H100-SXM5-80GB", "productLabel": "NVIDIA-H100-80GB-HBM3",
                                   "gpusPerNode": 8, "minGpus": 8, "maxGpus": 31}
    three = build_inventory([*uniform, NodeGpus("c", "NVIDIA-H100-80GB-HBM3", 8, True, True)])
    assert status_patch(two, next_status(two, generation=1, now=T1, planner_version="0.1.0", inventory=three,
                                         result=feasible_result(), error=None,
                                         bounds={"H100-SXM5-80GB": (8, 31)})) == {}


def test_a_status_that_moves_only_its_count_ranges_is_told_apart_from_a_new_answer() -> None:
    """The operator writes no status whose answer is the same as the one written (`only_ranges_moved`)."""
    def answer(bounds: dict, inventory: Inventory | None = None, result: PlanResult | None = None) -> dict:
        return next_status(None, generation=1, now=T0, planner_version="0.1.0", inventory=inventory or cluster(),
                           result=result or feasible_result(), error=None, bounds=bounds)

    first = answer({"H100-SXM5-80GB": (4, 15), "L4": (1, None)})
    assert only_ranges_moved(first, answer({"H100-SXM5-80GB": (8, 23), "L4": (1, None)}))
    assert ranges_text(answer({"H100-SXM5-80GB": (8, 23), "L4": (1, None)})["inventory"]) == \
        "H100-SXM5-80GB 8-23 on 1 node of 8 and 1 of 4, L4 1-"
    assert not only_ranges_moved(first, first)  # nothing moved: nothing to write either way
    assert not only_ranges_moved(None, first)  # the first answer is written
    # Another answer, another GPU type, another node size: written.
    assert not only_ranges_moved(first, answer({"H100-SXM5-80GB": (16, 23), "L4": (1, None)},
                                               result=infeasible_result()))
    assert not only_ranges_moved(first, answer({"H100-SXM5-80GB": (4, 15)},
                                               inventory=cluster().usable(frozenset({"H100-SXM5-80GB"}))))
    bigger = build_inventory([NodeGpus("a", "NVIDIA-H100-80GB-HBM3", 16, True, True),
                              NodeGpus("c", "NVIDIA-L4", 1, True, True)])
    assert not only_ranges_moved(first, answer({"H100-SXM5-80GB": (16, 23), "L4": (1, None)}, inventory=bigger))
    # A status of an earlier build (counts, no ranges) is rewritten in the new form.
    earlier = {**first, "inventory": [{"gpuType": "H100-SXM5-80GB", "productLabel": "NVIDIA-H100-80GB-HBM3",
                                       "gpusPerNode": 8, "gpus": 12, "nodes": 2}, first["inventory"][1]]}
    assert not only_ranges_moved(earlier, first)


def test_no_gpu_of_the_plans_types_says_so() -> None:
    new = status(result=feasible_result(), inventory=cluster().usable(frozenset({"B200"})))
    available = by_type(new)["InventoryAvailable"]
    assert (available["status"], available["reason"]) == ("False", "NoGpus")
    assert "constraints.gpuTypes" in available["message"]
    assert new["inventory"] == []
    # The cluster's warnings (a product the catalog does not know) stay.
    assert any("Zeta-9" in w for w in new["warnings"])


def test_the_reconciles_warnings_come_first_and_the_list_stays_capped() -> None:
    extra = [f"warning {i}" for i in range(40)]
    new = next_status(None, generation=1, now=T0, planner_version="0.1.0", inventory=cluster(),
                      result=feasible_result(), error=None, extra_warnings=extra)
    assert new["warnings"][:3] == ["warning 0", "warning 1", "warning 2"]
    assert len(new["warnings"]) == 32
    PlanStatus.model_validate(new)


def test_every_suggestion_the_planner_makes_reaches_the_status() -> None:
    # The planner tries the context, each limit, GPU types, precision, TP and each SLO: up to 9 suggestions
    # (the bursty 72B example gets 4); the status kept 8, dropping the last SLO relaxation.
    suggestions = [f"change {i}: gives 2 x 8 H100-SXM5-80GB at $59/h" for i in range(10)]
    result = PlanResult(recommendation=None, alternatives=[], infeasible=[], warnings=[], suggestions=suggestions)
    new = status(result=result)
    assert new["suggestions"] == suggestions
    PlanStatus.model_validate(new)  # within the schema the CRD is generated from


def test_a_spec_without_observe_drops_what_the_last_observation_left() -> None:
    """Removing spec.observe must not leave PredictionAccurate=False (and the drift alert it feeds) behind for
    ever, nor the observed figures of a deployment no longer watched; other writers' conditions stay."""
    drift = {"type": "PredictionAccurate", "status": "False", "reason": "PredictionDrift", "message": "ttft p95 +40%",
             "lastTransitionTime": T0, "observedGeneration": 1}
    metrics = {"type": "MetricsAvailable", "status": "True", "reason": "SeriesFound", "message": "120 requests",
               "lastTransitionTime": T0, "observedGeneration": 1}
    foreign = {"type": "Approved", "status": "True", "reason": "Reviewed", "message": "ok",
               "lastTransitionTime": T0, "observedGeneration": 1}
    old = status(result=feasible_result())
    old["conditions"] = [*old["conditions"], drift, metrics, foreign]
    old["observed"] = {"prometheus": "main", "requestsPerSecond": 2.0, "window": "5m", "requestsInWindow": 600.0,
                       "sampleTime": T0}
    kept = next_status(old, generation=2, now=T1, planner_version="0.1.0", inventory=cluster(),
                       result=feasible_result(), error=None)
    assert {"PredictionAccurate", "MetricsAvailable"} <= {c["type"] for c in kept["conditions"]}
    assert "observed" in kept
    new = next_status(old, generation=2, now=T1, planner_version="0.1.0", inventory=cluster(),
                      result=feasible_result(), error=None, observes=False)
    assert [c["type"] for c in new["conditions"]] == [*CONDITION_TYPES, "Approved"]
    assert "observed" not in new and "prediction" not in new
    assert status_patch(old, new)["observed"] is None


def test_every_reason_the_status_writes_is_documented_for_the_on_call_engineer() -> None:
    """Each reason the operator writes through next_status is named in docs/operator.md (in backquotes), with what
    to do. Not the Planning of a status built without a result or an error: the operator never builds one (a plan
    has no status until its first answer, as the page says)."""
    from pathlib import Path

    docs = (Path(__file__).parents[2] / "docs" / "operator.md").read_text(encoding="utf-8")
    written = {(c["type"], c["reason"]) for old in (
        status(result=feasible_result()),
        status(result=infeasible_result()),
        status(error=ERROR),
        status(error=ERROR, inventory=build_inventory([])),
        status(result=feasible_result(), inventory=cluster().usable(frozenset({"A100-SXM4-80GB"}))),
    ) for c in old["conditions"]}
    missing = sorted(f"{kind} {reason}" for kind, reason in written if f"`{reason}`" not in docs)
    assert not missing, missing
