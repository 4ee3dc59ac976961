"""Placement on the cluster's nodes (`PlanRequest.node_gpus`, search/core.py `placement`): a replica's GPUs on one
node (or whole nodes), not only a total count. Two nodes of 7 H100 (a node with a failed GPU reports 7) hold 14
GPUs, but only two replicas of TP 4."""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import Sequence

import numpy as np

from inferplan.planner.request import PlanRequest, resolve_plan
from inferplan.planner.results import Candidate, PlanResult
from inferplan.planner.search.core import placement, pools_placed, replica_pods
from inferplan.planner.search.plan import plan
from inferplan.planner.spec_parsing import parse_plan
from tests.support.plans import LONG_PROMPTS_PD, spec

H100 = "H100-SXM5-80GB"


def seventy_b(rate: str, available: int, per_node: int = 7) -> PlanRequest:
    """Llama-3.1-70B in bf16 at TP 4 on H100 at `rate` requests/s, `available` H100 on nodes of `per_node` (only the
    totals known, as a plan's own availableGpus gives them)."""
    data = spec(gpuTypes=["H100"], tensorParallelSizes=[4], availableGpus={"H100": available},
                gpusPerNode={"H100": per_node})
    data["model"] = {"name": "meta-llama/Llama-3.1-70B-Instruct", "precisions": ["bf16"]}
    data["workload"]["requestsPerSecond"] = rate
    return resolve_plan(parse_plan(data))


def on_nodes(req: PlanRequest, nodes: Sequence[int], key: str = H100) -> PlanRequest:
    """`req` with the GPUs of each node of `key` known (as the operator's inventory gives them)."""
    return dataclasses.replace(req, node_gpus={key: tuple(nodes)}, available_gpus={key: sum(nodes)},
                               gpus_per_node={**req.gpus_per_node, key: max(nodes)})


def shown(result: PlanResult) -> list[Candidate]:
    return [c for c in [result.recommendation, *result.alternatives] if c is not None]


def fits(nodes: Sequence[int], pods: Sequence[int]) -> bool:
    """Whether pods of these GPU counts go on nodes of these free GPUs, each pod on one node: every assignment tried
    (largest pods first)."""
    free = list(nodes)

    def place(k: int, ordered: list[int]) -> bool:
        if k == len(ordered):
            return True
        for i in range(len(free)):
            if free[i] >= ordered[k] and free[i] not in free[:i]:  # nodes with as much free are alike
                free[i] -= ordered[k]
                if place(k + 1, ordered):
                    free[i] += ordered[k]
                    return True
                free[i] += ordered[k]
        return False

    return place(0, sorted(pods, reverse=True))


def pods_of(candidate: Candidate, per_node: int) -> list[int]:
    """The pods (their GPUs) of every replica of `candidate` (each pool's, for a disaggregated one)."""
    out: list[int] = []
    for pool in candidate.roles or [candidate]:
        count, size = (int(v[0]) for v in replica_pods(np.array([pool.gpus_per_replica]), per_node))
        out += [size] * (pool.replicas * count)
    return out


def test_two_nodes_of_seven_do_not_hold_three_replicas_of_four() -> None:
    totals = seventy_b("25", 14)
    counted = plan(totals).recommendation
    # Only the totals known: 3 x TP 4 = 12 of the 14 (what the operator recommended, and its pods stayed Pending).
    assert counted is not None and (counted.replicas, counted.gpus_per_replica) == (3, 4)
    placed = plan(on_nodes(totals, (7, 7)))
    assert not any(c.gpus_per_replica == 4 and c.replicas > 2 for c in shown(placed))
    assert all(fits((7, 7), pods_of(c, 7)) for c in shown(placed))
    miss = next(i for i in placed.infeasible if i.gate == "nodes")
    assert miss.reason == (f"needs 3 replicas of 4 x {H100}, which do not fit on the nodes: a node of 7 {H100} holds "
                           "1 of them, so they need 3 nodes, more than there are")
    assert any(line.startswith(f"limits: room for 3 x 4 {H100} on the cluster's nodes (now less)")
               for line in placed.suggestions)
    # The answer holds for two such nodes only: a third (21) is outside its range.
    assert placed.count_bounds == {H100: (14, 15)}


def test_three_nodes_of_seven_do_not_hold_five_replicas_of_four() -> None:
    totals = seventy_b("50", 21)
    counted = plan(totals).recommendation
    assert counted is not None and (counted.replicas, counted.gpus_per_replica) == (5, 4)
    placed = plan(on_nodes(totals, (7, 7, 7)))
    assert all(c.replicas <= 3 for c in shown(placed))
    assert any(i.gate == "nodes" and "need 5 nodes" in i.reason for i in placed.infeasible)


def test_nodes_that_differ_are_named_in_the_reason() -> None:
    placed = plan(on_nodes(seventy_b("40", 22, 8), (8, 7, 7)))
    assert all(fits((8, 7, 7), pods_of(c, 8)) for c in shown(placed))
    assert any(i.gate == "nodes" and i.reason.endswith(f"only 4 fit on nodes of 8, 7 and 7 {H100} (each replica's "
                                                       "GPUs on one node)") for i in placed.infeasible)


def test_a_replica_over_nodes_needs_whole_nodes() -> None:
    """TP 8 over two nodes of 4: one whole node of 4 per pod; nodes of 3 hold none of them."""
    data = spec(gpuTypes=["H100"], tensorParallelSizes=[8], gpusPerNode={"H100": 4}, maxNodesPerReplica=2,
                availableGpus={"H100": 21})
    data["model"] = {"name": "meta-llama/Llama-3.1-70B-Instruct", "precisions": ["bf16"]}
    data["workload"]["requestsPerSecond"] = "5"
    req = resolve_plan(parse_plan(data))
    counted = plan(req).recommendation
    assert counted is not None and (counted.replicas, counted.gpus_per_replica, counted.nodes_per_replica) == (2, 8, 2)
    short = plan(on_nodes(req, (4, 4, 4, 3, 3, 3)))
    assert short.recommendation is None
    assert short.infeasible[0].gate == "nodes" and short.infeasible[0].reason == (
        f"needs 2 replicas of 8 x {H100}, which do not fit on the nodes: only 1 fit on nodes of 4, 4, 4, 3, 3 and 3 "
        f"{H100} (each replica on 2 nodes of 4 GPUs)")
    room = plan(on_nodes(req, (4, 4, 4, 4, 3, 3))).recommendation
    assert room is not None and (room.replicas, room.gpus_per_replica) == (2, 8)


def test_placement_counts_a_replicas_gpus_on_one_node_or_whole_nodes() -> None:
    req = on_nodes(seventy_b("25", 14), (8, 7, 6, 3), H100)
    ok = placement(req, H100, np.array([6, 7, 3, 4, 1, 2]), np.array([2, 2, 4, 4, 8, 8]))
    # Pods of 2: 4 + 3 + 3 + 1 = 11; of 4: 2 + 1 + 1 = 4; of 8 (a whole node): 1.
    assert ok is not None and ok.tolist() == [True, True, True, True, True, False]
    assert placement(req, H100, np.array([12, 5]), np.array([2, 4])).tolist() == [False, False]
    # Over nodes: TP 16 is two pods of 8, on two nodes of 8.
    two = on_nodes(seventy_b("25", 14), (8, 8, 7), H100)
    assert placement(two, H100, np.array([1, 2]), np.array([16, 16])).tolist() == [True, False]
    # Unknown nodes: only the totals are checked.
    assert placement(seventy_b("25", 14), H100, np.array([3]), np.array([4])) is None


def test_pools_that_share_a_type_are_placed_together_never_where_they_do_not_fit() -> None:
    """`pools_placed` against every assignment of pods to nodes: never accepts pools that do not fit; exact where
    the pod sizes divide each other (the TP sizes are powers of two)."""
    base = seventy_b("25", 14)
    for nodes in itertools.combinations_with_replacement(range(1, 9), 3):
        req = on_nodes(base, nodes)
        for a, b in itertools.combinations_with_replacement((1, 2, 3, 4, 8), 2):
            for ra, rb in itertools.product(range(4), repeat=2):
                pods = [a] * ra + [b] * rb
                accepted = pools_placed(req, H100, [(ra, a), (rb, b)])
                if max(a, b) > max(nodes):
                    continue  # a replica over nodes: whole nodes (below)
                assert not accepted or fits(nodes, pods), (nodes, a, ra, b, rb)
                if max(a, b) % min(a, b) == 0:
                    assert accepted == fits(nodes, pods), (nodes, a, ra, b, rb)
    # Each pool fits on its own, not both together: nodes of 3, 3 and 2 hold three pods of 2, not four.
    assert pools_placed(on_nodes(base, (3, 3, 2)), H100, [(2, 2)])
    assert not pools_placed(on_nodes(base, (3, 3, 2)), H100, [(2, 2), (2, 2)])


def test_a_disaggregated_pair_is_placed_with_both_pools_on_the_nodes() -> None:
    data = copy.deepcopy(LONG_PROMPTS_PD)
    data["constraints"]["availableGpus"] = {"H100": 6}
    req = resolve_plan(parse_plan(data))
    counted = plan(req).recommendation
    assert counted is not None and [(r.replicas, r.gpus_per_replica) for r in counted.roles] == [(2, 1), (2, 2)]
    # Six GPUs, but only one node with two: one replica of TP 2, never two.
    nodes = (3, 1, 1, 1)
    assert not fits(nodes, pods_of(counted, 3))
    placed = plan(on_nodes(req, nodes))
    assert placed.recommendation is not None and all(fits(nodes, pods_of(c, 3)) for c in shown(placed))


def test_on_nodes_of_one_count_the_answer_is_the_same_for_every_count_within_its_range() -> None:
    """The count range a placement records (`count_bounds`) on nodes of one count: planning with any number of such
    nodes whose GPUs are within it gives the same answer."""
    base = seventy_b("25", 8, 8)
    results = {}
    for n in range(1, 7):
        results[n] = plan(on_nodes(base, (8,) * n))
    for n, result in results.items():
        low, high = result.count_bounds.get(H100, (0, None))
        for m, other in results.items():
            if low <= 8 * m and (high is None or 8 * m <= high):
                assert other == result, (n, m)
    assert len({str(r.recommendation) for r in results.values()}) > 1  # the counts do change the answer


def test_the_most_replicas_placed_is_where_placement_stops_accepting() -> None:
    """`most_replicas_placed` (what an autoscaler's maxReplicas is held to, deploy/bounds.py) is the planner's own
    rule: `placement` accepts every count up to it and none above, on nodes that differ and that do not, for replicas
    within a node and over nodes; it records no comparison in the count ranges."""
    from inferplan.planner.search.core import most_replicas_placed, recording

    base = seventy_b("25", 8, 8)
    assert most_replicas_placed(base, H100, 4) is None  # only the totals known
    assert most_replicas_placed(on_nodes(base, (7, 7)), H100, 4) == 2  # 14 GPUs, two replicas of TP 4
    for nodes in [(7, 7), (8,), (8, 8, 8), (8, 7, 3), (3, 1, 1, 1), (6, 6, 6, 2)]:
        req = on_nodes(base, nodes)
        for gpus in (1, 2, 3, 4, 8, 16):
            most = most_replicas_placed(req, H100, gpus)
            assert most is not None
            counts = np.arange(0, most + 3)
            with recording() as recorder:
                accepted = placement(req, H100, counts, np.full(len(counts), gpus))
                assert accepted is not None
                noted = len(recorder.needs)
                most_replicas_placed(req, H100, gpus)
                assert len(recorder.needs) == noted  # it notes nothing
            assert list(accepted) == [int(c) <= most for c in counts], (nodes, gpus, most)
