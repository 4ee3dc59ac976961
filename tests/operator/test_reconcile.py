"""One reconcile without a cluster: which GPU types a plan considers, ConfigMap models, error reasons."""

from __future__ import annotations

import json
from typing import Any

import pytest

from inferplan.operator.inventory import NodeGpus, build_inventory
from inferplan.operator.reconcile import reconcile_plan
from tests.support.plans import SPEC, spec

CLUSTER = build_inventory([
    NodeGpus("a", "NVIDIA-H100-80GB-HBM3", 8, True, True),
    NodeGpus("b", "NVIDIA-L4", 4, True, True),
    NodeGpus("c", "NVIDIA-L4", 4, False, True),  # cordoned: does not count
])


def shown_types(outcome) -> set[str]:
    result = outcome.result
    return {c.gpu_type for c in [result.recommendation, *result.alternatives] if c is not None}


def test_without_gpu_types_the_plan_uses_the_cluster_types_and_counts() -> None:
    outcome = reconcile_plan(spec(), CLUSTER)
    assert outcome.error is None and outcome.result.recommendation is not None
    assert shown_types(outcome) <= {"H100-SXM5-80GB", "L4"}
    big = reconcile_plan({**spec(), "workload": {**SPEC["workload"], "requestsPerSecond": "400"}}, CLUSTER)
    assert any(i.gate == "inventory" for i in big.result.infeasible)


def test_gpu_types_narrow_and_absent_types_are_planned_only_when_asked() -> None:
    narrow = reconcile_plan(spec(gpuTypes=["NVIDIA-L4"]), CLUSTER)
    assert shown_types(narrow) <= {"L4"} and not narrow.warnings
    mixed = reconcile_plan(spec(gpuTypes=["NVIDIA-L4", "NVIDIA-A100-SXM4-80GB"]), CLUSTER)
    assert shown_types(mixed) <= {"L4"}
    assert any("left out A100-SXM4-80GB" in w for w in mixed.warnings)
    absent_only = reconcile_plan(spec(gpuTypes=["NVIDIA-A100-SXM4-80GB"]), CLUSTER)
    assert absent_only.error[0] == "NoGpuTypes"
    wide = reconcile_plan(spec(gpuTypes=["NVIDIA-A100-SXM4-80GB"], planAbsentGpuTypes=True), CLUSTER)
    assert shown_types(wide) == {"A100-SXM4-80GB"}
    assert any("although the cluster has no schedulable GPUs" in w for w in wide.warnings)


def test_the_order_gpu_types_are_listed_in_changes_nothing_in_the_status() -> None:
    """Two absent types listed in either order: the same warning (and plan), which the status carries."""
    listed = ["NVIDIA-B200", "NVIDIA-L4", "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"]
    for plan_absent in (False, True):
        forward, backward = (reconcile_plan(spec(gpuTypes=names, planAbsentGpuTypes=plan_absent), CLUSTER)
                             for names in (listed, listed[::-1]))
        assert forward.warnings == backward.warnings
        assert forward.result == backward.result
        assert any(("planned for" if plan_absent else "left out") + " A100-SXM4-80GB, B200" in w
                   for w in forward.warnings)


def _h100(count: int) -> list[NodeGpus]:
    """`count` schedulable H100 GPUs on nodes of eight (the last one smaller)."""
    return [NodeGpus(f"h{i}", "NVIDIA-H100-80GB-HBM3", min(8, count - 8 * i), True, True)
            for i in range((count + 7) // 8)]


def test_the_answer_is_the_same_for_every_count_within_its_bounds() -> None:
    """The operator neither plans again nor writes while each count stays within the bounds the outcome gives
    (scheduling.inventory_holds): planning at either end must give the same answer."""
    busy = {**spec(gpuTypes=["NVIDIA-H100-80GB-HBM3"]), "workload": {**SPEC["workload"], "requestsPerSecond": "150"}}
    outcome = reconcile_plan(busy, build_inventory(_h100(24)))
    assert outcome.result is not None and outcome.result.recommendation is not None
    low, high = outcome.bounds["H100-SXM5-80GB"]
    assert high is not None and 8 <= low <= 24 <= high  # some candidate needed more than 24: the bound is real
    for count in (low, high):
        again = reconcile_plan(busy, build_inventory(_h100(count)))
        assert again.result == outcome.result and again.bounds == outcome.bounds
    # The plan's own availableGpus are not the cluster's: no bounds on the inventory.
    assert reconcile_plan(spec(availableGpus={"NVIDIA-H100-80GB-HBM3": 24}), CLUSTER).bounds == {}


def test_the_replicas_are_placed_on_the_clusters_nodes() -> None:
    """Two nodes of 7 H100 (a failed GPU each): 14 GPUs, but one replica of TP 4 a node. Only the totals known (the
    spec's own availableGpus) it recommends 3 x TP 4; from the nodes, never more than it can place."""
    seventy = {**spec(gpuTypes=["NVIDIA-H100-80GB-HBM3"], tensorParallelSizes=[4]),
               "model": {"name": "meta-llama/Llama-3.1-70B-Instruct", "precisions": ["bf16"]},
               "workload": {**SPEC["workload"], "requestsPerSecond": "25"}, "verify": False}
    sevens = build_inventory(sevens_nodes())
    quota = {**seventy, "constraints": {**seventy["constraints"], "availableGpus": {"NVIDIA-H100-80GB-HBM3": 14}}}
    counted = reconcile_plan(quota, sevens).result.recommendation
    assert counted is not None and (counted.replicas, counted.gpus_per_replica) == (3, 4)
    placed = reconcile_plan(seventy, sevens)
    assert all(c.replicas * c.gpus_per_replica <= 8 for c in [placed.result.recommendation,
                                                              *placed.result.alternatives] if c is not None)
    assert any(i.gate == "nodes" and "3 replicas of 4 x H100-SXM5-80GB" in i.reason for i in placed.result.infeasible)
    assert placed.bounds == {"H100-SXM5-80GB": (14, 15)}  # a third node of 7 (21) is planned again
    # A node of 8 more holds the third replica.
    eight = NodeGpus("c", "NVIDIA-H100-80GB-HBM3", 8, True, True)
    grown = reconcile_plan(seventy, build_inventory([*sevens_nodes(), eight]))
    rec = grown.result.recommendation
    assert rec is not None and (rec.replicas, rec.gpus_per_replica) == (3, 4)


def sevens_nodes() -> list[NodeGpus]:
    return [NodeGpus(n, "NVIDIA-H100-80GB-HBM3", 7, True, True) for n in "ab"]


def test_the_nodes_network_label_prices_the_network_unless_the_plan_gives_it() -> None:
    """A plan whose replicas may span nodes takes its network from the GPU nodes' inferplan.io/network-gbps label
    (the slowest), says so in its assumptions, and prices TP over the nodes by it; the plan's own networkGbps wins."""
    def answer(network: float | None, constraints: dict[str, Any]) -> Any:
        nodes = [NodeGpus(f"n{i}", "NVIDIA-H100-80GB-HBM3", 4, True, True, network) for i in range(32)]
        base = {"tensorParallelSizes": [8], "maxNodesPerReplica": 2, "gpusPerNode": {"H100": 4}}
        outcome = reconcile_plan(spec(**base, **constraints), build_inventory(nodes))
        assert outcome.error is None and outcome.result.recommendation is not None
        return outcome.result

    slow, fast = answer(25.0, {}), answer(None, {})
    assert any("25 Gb/s per GPU, the least inferplan.io/network-gbps label" in a for a in slow.assumptions)
    assert any("400 Gb/s per GPU, one 400G NIC" in a for a in fast.assumptions)
    assert slow.recommendation.predicted.ttft_ms.p50 > fast.recommendation.predicted.ttft_ms.p50
    given = answer(25.0, {"networkGbps": 400})
    assert given.recommendation.predicted == fast.recommendation.predicted
    assert not any("network between nodes" in a for a in given.assumptions)


def test_spec_available_gpus_replace_the_inventory() -> None:
    outcome = reconcile_plan(spec(availableGpus={"NVIDIA-A100-SXM4-80GB": 2}), CLUSTER)
    assert shown_types(outcome) == {"A100-SXM4-80GB"}


def test_an_empty_cluster_without_gpu_types_is_a_clear_error() -> None:
    outcome = reconcile_plan(spec(), build_inventory([]))
    assert outcome.result is None and outcome.error[0] == "NoGpuTypes"


@pytest.mark.parametrize(("change", "reason"), [
    ({"model": {"name": "acme/unknown-model"}}, "InvalidModel"),
    ({"constraints": {"gpuTypes": ["H1000"]}}, "UnknownGpuType"),
    ({"slo": {}}, "InvalidSpec"),
])
def test_a_spec_the_planner_cannot_use_gives_a_reason(change: dict[str, Any], reason: str) -> None:
    outcome = reconcile_plan({**spec(), **change}, CLUSTER)
    assert outcome.result is None and outcome.error[0] == reason and outcome.error[1]


def test_config_map_models_are_read_through_the_reader() -> None:
    config = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32, "hidden_size": 4096,
              "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
              "vocab_size": 128256, "max_position_embeddings": 8192, "tie_word_embeddings": False}
    data = {**spec(), "model": {"configMapRef": {"name": "llama", "key": "config.json"}, "precisions": ["bf16"]}}
    seen = []

    def reader(name: str, key: str) -> str:
        seen.append((name, key))
        return json.dumps(config)

    outcome = reconcile_plan(data, CLUSTER, reader)
    assert seen == [("llama", "config.json")] and outcome.error is None
    assert outcome.result.recommendation is not None

    def missing(name: str, key: str) -> str:
        raise KeyError(key)

    assert reconcile_plan(data, CLUSTER, missing).error[0] == "InvalidModel"
    assert reconcile_plan(data, CLUSTER, lambda n, k: "{not json").error[0] == "InvalidModel"


def _observing(deployment: str = "chat") -> dict[str, Any]:
    data = spec()
    data["observe"] = {"prometheus": "main", "selector": {"model_name": "llama"}, "current": {"deployment": deployment}}
    return data


def test_the_outcome_carries_the_manifests_reference_and_the_change_against_the_running_deployment() -> None:
    from inferplan.deploy.manifests import deployment, manifests_digest, render
    from inferplan.operator.cluster_spec import parse_and_resolve

    plain = reconcile_plan(spec(), CLUSTER, verify_default=False, name="chat", namespace="llm")
    assert plain.change is None  # no current Deployment named
    assert plain.manifests is not None and plain.result is not None and plain.result.recommendation is not None
    _, request = parse_and_resolve(spec(), None)
    recommendation = plain.result.recommendation
    objects = render(request, recommendation, name="chat", namespace="llm")
    assert plain.manifests.digest == manifests_digest(objects)
    assert plain.manifests.objects == [f"{o['kind']}/chat" for o in objects]
    assert "inferplan render -" in plain.manifests.render

    running = deployment(request, recommendation, name="chat", namespace="llm")
    same = reconcile_plan(_observing(), CLUSTER, verify_default=False, name="chat", namespace="llm",
                          current_deployment=running)
    assert same.change is not None and same.change.in_sync and same.change.patch == ""
    running["spec"]["replicas"] = recommendation.replicas + 1
    more = reconcile_plan(_observing(), CLUSTER, verify_default=False, name="chat", namespace="llm",
                          current_deployment=running)
    assert more.change is not None and not more.change.in_sync
    assert more.change.summary == [f"replicas: {recommendation.replicas + 1} -> {recommendation.replicas}"]
    assert json.loads(more.change.patch) == {"spec": {"replicas": recommendation.replicas}}
    missing = reconcile_plan(_observing("gone"), CLUSTER, verify_default=False, name="chat", namespace="llm")
    assert missing.change is not None and missing.change.deployment == "gone"
    assert "not found" in missing.change.problem and not missing.change.in_sync


def test_an_observation_recomputes_the_change_of_the_recommendation_in_the_status() -> None:
    from inferplan.deploy.manifests import deployment
    from inferplan.operator.cluster_spec import parse_and_resolve
    from inferplan.operator.reconcile import with_current_change
    from inferplan.operator.status import next_status

    outcome = reconcile_plan(_observing(), CLUSTER, verify_default=False, name="chat", namespace="llm")
    status = next_status(None, generation=1, now="2026-01-01T00:00:00Z", planner_version="t", inventory=CLUSTER,
                         result=outcome.result, error=None, manifests=outcome.manifests, change=outcome.change)
    assert status["recommendation"]["change"]["inSync"] is False  # "chat" did not exist when planned
    _, request = parse_and_resolve(_observing(), None)
    assert outcome.result is not None and outcome.result.recommendation is not None
    applied = deployment(request, outcome.result.recommendation, name="chat", namespace="llm")
    after = with_current_change(_observing(), status, name="chat", namespace="llm", body=applied)
    assert after["recommendation"]["change"] == {"deployment": "chat", "inSync": True, "summary": [], "patch": "",
                                                 "problem": ""}
    assert {k: v for k, v in after.items() if k != "recommendation"} == {
        k: v for k, v in status.items() if k != "recommendation"}
    assert with_current_change(spec(), status, name="chat", namespace="llm", body=applied) == status


def test_the_node_selector_is_the_label_value_the_clusters_nodes_carry() -> None:
    # The AMD labeller spells one product two ways; the recommendation named the catalog's spelling, which no node
    # of this cluster carries, and its pods stayed Pending.
    amd = build_inventory([NodeGpus("m1", "AMD_Instinct_MI300X", 8, True, True),
                           NodeGpus("m2", "AMD_Instinct_MI300X", 8, True, True)])
    outcome = reconcile_plan(spec(gpuTypes=["MI300X"]), amd)
    assert outcome.result.recommendation is not None
    for c in [outcome.result.recommendation, *outcome.result.alternatives]:
        assert c.node_selector == {"amd.com/gpu.product-name": "AMD_Instinct_MI300X"}


def test_with_the_specs_available_gpus_the_node_sizes_are_still_the_clusters() -> None:
    # availableGpus is a quota: a replica of more GPUs than the cluster's nodes hold cannot be scheduled.
    l4 = build_inventory([NodeGpus("l", "NVIDIA-L4", 4, True, True)])
    big = {**spec(gpuTypes=["NVIDIA-L4"], availableGpus={"NVIDIA-L4": 64}),
           "model": {"name": "meta-llama/Llama-3.1-70B-Instruct", "precisions": ["bf16"]},
           "workload": {**SPEC["workload"], "requestsPerSecond": "0.5"}}
    outcome = reconcile_plan(big, l4)
    # 70B in bf16 needs 8 L4 a replica: on 4-GPU nodes no single-node replica holds it (it had recommended TP 8)
    assert outcome.result.recommendation is None
    assert any(i.gate == "placement" and "nodes have 4" in i.reason for i in outcome.result.infeasible)


def test_the_change_of_a_disaggregated_recommendation_is_read_against_the_pool_it_runs() -> None:
    """A pool's Deployment is compared with the pool of its role (`desired_deployment`): the status of a plan whose
    current Deployment is the prefill pool says it is in sync, and does not tell it to become the decode pool."""
    import copy

    from inferplan.deploy.manifests import pool_deployment
    from inferplan.operator.reconcile import change_status
    from tests.support.plans import disaggregated

    request, candidate = disaggregated()
    for role in ("prefill", "decode"):
        running = pool_deployment(request, candidate, name="pd", role=role, namespace="llm")
        change = change_status(request, candidate, name="pd", namespace="llm", deployment_name=f"pd-{role}",
                               body=running)
        assert change.in_sync and not change.problem, change
        moved = copy.deepcopy(running)
        moved["spec"]["replicas"] += 1
        change = change_status(request, candidate, name="pd", namespace="llm", deployment_name=f"pd-{role}",
                               body=moved)
        assert not change.in_sync and not change.problem
        assert change.summary == [f"replicas: {moved['spec']['replicas']} -> {running['spec']['replicas']}"]
    # A Deployment that is neither pool's gets the reason, not a patch.
    neither = copy.deepcopy(running)
    for meta in (neither["metadata"], neither["spec"]["template"]["metadata"]):
        meta["labels"].pop("inferplan.io/role")
    args = neither["spec"]["template"]["spec"]["containers"][0]["args"]
    at = args.index("--disaggregation-mode")
    del args[at:at + 2]
    change = change_status(request, candidate, name="pd", namespace="llm", deployment_name="pd-decode", body=neither)
    assert not change.in_sync and not change.patch and "prefill and decode pools" in change.problem


def test_the_manifests_reference_lists_every_object_render_makes_disruption_budgets_included() -> None:
    """A disaggregated recommendation renders ten objects (two pools, the router with its RBAC, the Service, and a
    PodDisruptionBudget for each pool of 2 or more replicas and for the router): the status's reference names them
    all, and its schema holds them."""
    from inferplan.deploy.manifests import manifests_digest, render
    from inferplan.operator.reconcile import manifests_ref
    from inferplan.operator.status import ManifestsRef
    from tests.support.plans import disaggregated

    request, candidate = disaggregated()
    objects = render(request, candidate, name="pd", namespace="llm")
    ref = manifests_ref(request, candidate, name="pd", namespace="llm")
    assert ref is not None and ref.digest == manifests_digest(objects)
    assert ref.objects == [f"{o['kind']}/{o['metadata']['name']}" for o in objects]
    assert {"PodDisruptionBudget/pd-prefill", "PodDisruptionBudget/pd-decode",
            "PodDisruptionBudget/pd-router"} <= set(ref.objects)
    assert len(ref.objects) <= ManifestsRef.model_fields["objects"].metadata[0].max_length


def _cluster_request(data: dict[str, Any], inventory: Any) -> Any:
    """The request the operator plans `data` with on `inventory` (the cluster's counts and nodes filled in)."""
    from inferplan.operator.cluster_spec import parse_and_resolve
    from inferplan.operator.reconcile import request_for_cluster

    _, request = parse_and_resolve(data, None)
    return request_for_cluster(request, inventory, False)[0]


def test_the_autoscaling_maximum_on_the_clusters_nodes_is_what_they_hold() -> None:
    """On two nodes of 7 H100 the operator recommends at most two replicas of TP 4; the autoscaling maximum of that
    answer, from the same request, is what the nodes hold (2), not what their 14 GPUs add up to (3)."""
    from inferplan.deploy.bounds import replica_bounds

    seventy = {**spec(gpuTypes=["NVIDIA-H100-80GB-HBM3"], tensorParallelSizes=[4]),
               "model": {"name": "meta-llama/Llama-3.1-70B-Instruct", "precisions": ["bf16"]},
               "workload": {**SPEC["workload"], "requestsPerSecond": "12"}, "verify": False}
    sevens = build_inventory(sevens_nodes())
    outcome = reconcile_plan(seventy, sevens)
    rec = outcome.result.recommendation
    assert rec is not None and rec.gpus_per_replica == 4 and rec.replicas <= 2
    bounds = replica_bounds(_cluster_request(seventy, sevens), rec)
    assert bounds.max == 2 and "nodes of 7 and 7 H100-SXM5-80GB" in bounds.basis


def test_nothing_the_status_carries_reads_a_count_within_the_answers_range() -> None:
    """The operator writes nothing for a count within an answer's range (`PlanResult.count_bounds`), so what it would
    write must be the same for every such count. The autoscaling bounds do read the counts (availableGpus, the
    replicas the nodes hold) and differ within the range; the status carries none of them: its manifests reference
    and digest are the default rendering (no autoscaler, no KServe), and the whole status written for 24 GPUs is the
    one written for 32."""
    from inferplan.deploy.bounds import replica_bounds
    from inferplan.operator.status import next_status

    data = {**spec(gpuTypes=["NVIDIA-H100-80GB-HBM3"]), "workload": {**SPEC["workload"], "requestsPerSecond": "2"},
            "verify": False}

    def nodes(n: int) -> Any:
        return build_inventory([NodeGpus(f"h{i}", "NVIDIA-H100-80GB-HBM3", 8, True, True) for i in range(n)])

    three, four = nodes(3), nodes(4)
    low, high = reconcile_plan(data, three, name="chat", namespace="llm").bounds["H100-SXM5-80GB"]
    assert low <= 24 and (high is None or 32 <= high)  # both counts within one range ((24, 42) today)
    statuses, maxima = [], []
    for inventory in (three, four):
        outcome = reconcile_plan(data, inventory, name="chat", namespace="llm")
        assert outcome.manifests is not None and outcome.result is not None
        statuses.append(next_status(None, generation=1, now="2026-01-01T00:00:00Z", planner_version="t",
                                    inventory=inventory, result=outcome.result, error=None,
                                    manifests=outcome.manifests, change=outcome.change, bounds=outcome.bounds))
        maxima.append(replica_bounds(_cluster_request(data, inventory), outcome.result.recommendation).max)
    assert statuses[0] == statuses[1]
    assert maxima[0] != maxima[1]  # the count does reach the autoscaling bound: it must stay out of the status
