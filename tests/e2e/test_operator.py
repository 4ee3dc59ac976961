"""The operator against a real API server: what a user sees after `kubectl apply`.

The operator runs in-process under kopf's KopfRunner with the real handlers (`inferplan.operator.handlers`),
logged in through $KUBECONFIG (set by conftest.py). Nodes are created with GPU Feature Discovery labels.
"""

from __future__ import annotations

import copy
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

# Before the operator starts (its startup handler reads the settings): fast checks, no ports to bind.
os.environ.update(INFERPLAN_CHECK_SECONDS="0.5", INFERPLAN_METRICS_PORT="0", INFERPLAN_HEALTH_PORT="0")

import kubernetes
import yaml
from kopf.testing import KopfRunner

from inferplan.operator.inventory import NodeGpus, build_inventory
from inferplan.operator.reconcile import reconcile_plan
from inferplan.planner.catalog.gpus import resolve_gpu
from inferplan.resource import GROUP, PLURAL, VERSION
from tests.support.plans import LONG_PROMPTS_PD, example_spec
from tests.support.plans import spec as plan_spec

from .conftest import REPO, wait_for

CHAT = example_spec(REPO / "examples" / "plans" / "chat-assistant-8b.yaml")
AGENT = example_spec(REPO / "examples" / "plans" / "bursty-agent.yaml")
NODES = {
    "h100-a": ("NVIDIA-H100-80GB-HBM3", 8),
    "h100-b": ("NVIDIA-H100-80GB-HBM3", 8),
    "l40s-a": ("NVIDIA-L40S", 4),
    "a100-a": ("NVIDIA-A100-SXM4-80GB", 8),
}


def node(name: str, product: str, gpus: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product}},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}, "capacity": {"nvidia.com/gpu": str(gpus)},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def manifest(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceCapacityPlan", "metadata": {"name": name},
            "spec": spec}


def gpu_nodes(k8s: dict[str, Any], namespace: str,
              nodes: dict[str, tuple[str, int]]) -> Iterator[dict[str, Any]]:
    """A module's cluster: `nodes` (name -> GPU product, GPUs) on the API server while its tests run, then deleted."""
    core = kubernetes.client.CoreV1Api(k8s["admin"])
    objects = kubernetes.client.CustomObjectsApi(k8s["admin"])
    for name, (product, gpus) in nodes.items():
        created = core.create_node(node(name, product, gpus))
        core.patch_node_status(name, {"status": node(name, product, gpus)["status"]})
        assert created.metadata.name == name
    yield {"core": core, "objects": objects, "namespace": namespace, **k8s}
    for name in nodes:
        try:
            core.delete_node(name)
        except kubernetes.client.ApiException as exc:
            if exc.status != 404:
                raise


@pytest.fixture(scope="module")
def cluster(k8s: dict[str, Any], namespace: str) -> Iterator[dict[str, Any]]:
    yield from gpu_nodes(k8s, namespace, NODES)


def get(cluster: dict[str, Any], name: str) -> dict[str, Any]:
    return cluster["objects"].get_namespaced_custom_object(GROUP, VERSION, cluster["namespace"], PLURAL, name)


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind), {})


def planned(cluster: dict[str, Any], name: str, generation: int | None = None) -> dict[str, Any] | None:
    obj = get(cluster, name)
    status = obj.get("status", {})
    wanted = obj["metadata"]["generation"] if generation is None else generation
    if status.get("observedGeneration") == wanted and condition(obj, "Ready").get("status") in ("True", "False"):
        return obj
    return None


def runner() -> KopfRunner:
    return KopfRunner(["run", "--standalone", "--all-namespaces", "-m", "inferplan.operator.handlers"])


def test_plans_get_answers_and_follow_spec_and_inventory(cluster: dict[str, Any]) -> None:
    objects, ns = cluster["objects"], cluster["namespace"]
    objects.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, manifest("chat", CHAT))
    bad = copy.deepcopy(CHAT)
    bad["model"] = {"name": "acme/not-a-real-model"}
    objects.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, manifest("bad-model", bad))
    with runner() as kopf_run:
        chat = wait_for(lambda: planned(cluster, "chat"), timeout_s=30)
        status = chat["status"]
        assert condition(chat, "Ready")["status"] == "True"
        assert condition(chat, "Feasible")["status"] == "True"
        assert condition(chat, "InventoryAvailable")["status"] == "True"
        rec = status["recommendation"]
        assert rec["gpuType"] in {"L40S", "H100-SXM5-80GB", "A100-SXM4-80GB"}
        label = rec["nodeSelector"]["nvidia.com/gpu.product"]
        assert label in {product for product, _ in NODES.values()}  # selects nodes that exist
        assert resolve_gpu(label).key == rec["gpuType"]
        assert {e["gpuType"] for e in status["inventory"]} >= {"L40S", "A100-SXM4-80GB", "H100-SXM5-80GB"}
        assert status["observedGeneration"] == 1 and status["plannerVersion"]
        assert status["ttftAtSloMs"] == rec["predicted"]["ttftMs"][CHAT["slo"]["ttft"]["percentile"]]
        # Each predicted latency percentile carries its interval at the stated confidence, around the prediction,
        # as the API server stored it (the CRD's schema keeps the fields).
        predicted = rec["predicted"]
        assert predicted["confidence"] == 0.8
        for metric in ("ttftMs", "tpotMs", "e2eMs"):
            for q in ("p50", "p90", "p95", "p99"):
                low, high = predicted["intervals"][metric][q]
                assert 0 < low <= predicted[metric][q] <= high, (metric, q, low, high)
        # ... and each SLO its check at that confidence (slo.confidence unset: judged on the prediction, the
        # confidence it holds with stated).
        checks = {c["metric"]: c for c in predicted["sloChecks"]}
        assert set(checks) == {m for m in ("ttft", "tpot", "e2e") if m in CHAT["slo"]}
        for metric, check in checks.items():
            assert check["percentile"] == CHAT["slo"][metric]["percentile"]
            assert check["predictedMs"] == predicted[f"{metric}Ms"][check["percentile"]] <= check["targetMs"]
            assert check["boundMs"] == pytest.approx(check["predictedMs"] * check["ratio"], rel=2e-3)
            assert 0 <= check["holdsWith"] <= 0.99

        # A semantically bad plan: Ready=False with a reason, and the good plan is unaffected.
        broken = wait_for(lambda: planned(cluster, "bad-model"), timeout_s=20)
        ready = condition(broken, "Ready")
        assert ready["status"] == "False" and ready["reason"] == "InvalidModel"
        assert "acme/not-a-real-model" in ready["message"]

        def warning_event() -> list[Any]:
            events = cluster["core"].list_namespaced_event(ns).items
            return [e for e in events if e.involved_object.name == "bad-model" and e.type == "Warning"]

        event = wait_for(warning_event, timeout_s=10)[0]
        assert event.reason == "InvalidModel" and "acme/not-a-real-model" in event.message

        # A spec change: more traffic -> generation 2 and a bigger (or dearer) deployment.
        objects.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "chat",
                                               {"spec": {"workload": {"requestsPerSecond": "120"}}})
        busier = wait_for(lambda: planned(cluster, "chat", 2), timeout_s=30)
        assert busier["status"]["recommendation"]["cost"]["dollarsPerHour"] > rec["cost"]["dollarsPerHour"]

        # Remove every node of the recommended type: the recommendation moves to another type.
        gone = busier["status"]["recommendation"]["gpuType"]
        for name, (product, _) in NODES.items():
            if busier["status"]["recommendation"]["nodeSelector"]["nvidia.com/gpu.product"] == product:
                cluster["core"].delete_node(name)

        def moved() -> dict[str, Any] | None:
            obj = get(cluster, "chat")
            rec_now = obj["status"].get("recommendation")
            feasible = condition(obj, "Feasible").get("status")
            return obj if (rec_now and rec_now["gpuType"] != gone) or feasible == "False" else None

        after = wait_for(moved, timeout_s=30)
        assert all(e["gpuType"] != gone for e in after["status"]["inventory"])
    assert kopf_run.exception is None, kopf_run.output


def settled(cluster: dict[str, Any], name: str, quiet_s: float = 2.0) -> dict[str, Any]:
    """The object once its resourceVersion has not moved for `quiet_s` (kopf's own bookkeeping included)."""
    last = get(cluster, name)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        now = get(cluster, name)
        if now["metadata"]["resourceVersion"] == last["metadata"]["resourceVersion"]:
            return now
        last = now
    raise AssertionError(f"{name} kept changing for 30 s")


def plan_until_ready(cluster: dict[str, Any], name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Create plan `name` of `spec`, run the operator until it has planned it, and return the object, which must
    be Ready (the operator raising nothing)."""
    cluster["objects"].create_namespaced_custom_object(GROUP, VERSION, cluster["namespace"], PLURAL,
                                                       manifest(name, spec))
    with runner() as kopf_run:
        obj = wait_for(lambda: planned(cluster, name), timeout_s=60)
    assert kopf_run.exception is None, kopf_run.output
    assert condition(obj, "Ready")["status"] == "True", obj["status"]
    return obj


def test_restart_does_not_rewrite_unchanged_status(cluster: dict[str, Any]) -> None:
    objects, ns = cluster["objects"], cluster["namespace"]
    objects.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, manifest("steady", CHAT))
    with runner():
        wait_for(lambda: planned(cluster, "steady"), timeout_s=30)
        first = settled(cluster, "steady")
    with runner():
        time.sleep(3.0)  # the restarted operator resumes the plan and checks it several times (every 0.5 s)
    again = get(cluster, "steady")
    assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    assert again["status"] == first["status"]


def test_a_gpu_count_within_the_answers_range_writes_nothing_and_one_outside_it_replans(
        cluster: dict[str, Any]) -> None:
    """The status records, per GPU type, the counts its answer holds for (what planning compared); nodes that
    keep the count within them change nothing, a count outside them is planned again."""
    core, objects, ns = cluster["core"], cluster["objects"], cluster["namespace"]
    spec = copy.deepcopy(CHAT)
    spec["workload"]["requestsPerSecond"] = "10"
    spec["constraints"] = {"gpuTypes": ["NVIDIA-L4"]}
    # What the planner says of 16 L4 on two nodes of eight: the operator must write the same range.
    low, high = reconcile_plan(spec, build_inventory([NodeGpus(n, "NVIDIA-L4", 8, True, True) for n in "ab"])
                               ).bounds["L4"]
    assert low <= 16 and high is not None and 16 < high  # (16, 17) with the shipped factors
    added = ["l4-a", "l4-b"]
    try:
        for name in added:
            core.create_node(node(name, "NVIDIA-L4", 8))
            core.patch_node_status(name, {"status": node(name, "NVIDIA-L4", 8)["status"]})
        objects.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, manifest("l4-only", spec))
        with runner() as kopf_run:
            wait_for(lambda: planned(cluster, "l4-only"), timeout_s=30)
            first = settled(cluster, "l4-only")
            assert first["status"]["inventory"] == [{"gpuType": "L4", "productLabel": "NVIDIA-L4", "gpusPerNode": 8,
                                                     "minGpus": low, "maxGpus": high}]
            assert condition(first, "InventoryAvailable")["message"] == "GPUs of 1 type: L4"
            # A node that keeps the count within the range (17 L4 with the shipped factors). Nothing is written.
            more = min(high - 16, 8)
            core.create_node(node("l4-c", "NVIDIA-L4", more))
            core.patch_node_status("l4-c", {"status": node("l4-c", "NVIDIA-L4", more)["status"]})
            added.append("l4-c")
            time.sleep(3.0)  # several checks (every 0.5 s) see the new node
            assert get(cluster, "l4-only")["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
            # 8 L4: below the range. Planned again, for a range that holds 8.
            for name in ("l4-b", "l4-c"):
                core.delete_node(name)
                added.remove(name)

            def replanned() -> dict[str, Any] | None:
                entry = (get(cluster, "l4-only")["status"].get("inventory") or [{}])[0]
                return entry if entry.get("minGpus", 99) <= 8 <= entry.get("maxGpus", 8) else None

            entry = wait_for(replanned, timeout_s=30)
            assert (entry["minGpus"], entry.get("maxGpus")) == reconcile_plan(
                spec, build_inventory([NodeGpus("a", "NVIDIA-L4", 8, True, True)])).bounds["L4"]
        assert kopf_run.exception is None, kopf_run.output
    finally:
        for name in added:
            core.delete_node(name)


class _Lines(logging.Handler):
    """The operator's log lines as they come (KopfRunner's output is there only after it stops)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_the_same_answer_for_a_count_outside_its_range_is_not_written(cluster: dict[str, Any]) -> None:
    """A count outside the status's range is planned again; when the answer comes out the same (here: the
    bundled agent plan on H200 recommends the same deployment on 16 and on 24 of them, but a candidate that 16 are
    too few for is weighed on 24, so the answer's count ranges do not overlap), only the range would move, and
    nothing is written."""
    core, objects, ns = cluster["core"], cluster["objects"], cluster["namespace"]
    product = "NVIDIA-H200"  # a type of its own: the module's other tests leave it alone
    spec = copy.deepcopy(AGENT)
    spec["constraints"]["gpuTypes"] = [product]

    def planned_with(nodes: int) -> Any:
        return reconcile_plan(spec, build_inventory([NodeGpus(f"n{i}", product, 8, True, True) for i in range(nodes)]))

    # What the planner says of 16 and of 24 H200: the same answer, ranges that do not overlap.
    sixteen, twenty_four = planned_with(2), planned_with(3)
    assert sixteen.result == twenty_four.result and sixteen.bounds != twenty_four.bounds, (
        "the test's premise, not the operator: this plan no longer gives one answer on 16 and 24 H200 with ranges "
        f"that differ ({sixteen.bounds} and {twenty_four.bounds}); pick a plan and two counts that do")
    low, high = sixteen.bounds["H200-SXM-141GB"]
    assert high is not None and high < 24  # (16, 19) with the shipped factors
    log, lines = logging.getLogger("inferplan.checker"), _Lines()
    log.addHandler(lines)
    added: list[str] = []

    def add(name: str) -> None:
        core.create_node(node(name, product, 8))
        added.append(name)
        core.patch_node_status(name, {"status": node(name, product, 8)["status"]})

    try:
        add("h200-a")
        add("h200-b")
        objects.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, manifest("same-answer", spec))
        with runner() as kopf_run:
            wait_for(lambda: planned(cluster, "same-answer"), timeout_s=30)
            first = settled(cluster, "same-answer")
            # (the status's range starts at one GPU: `status.inventory_ranges`)
            assert [(e["minGpus"], e.get("maxGpus")) for e in first["status"]["inventory"]] == [(max(low, 1), high)]
            add("h200-c")
            low24, high24 = twenty_four.bounds["H200-SXM-141GB"]
            said = f"{ns}/same-answer: planned again for the GPU inventory, the same answer: nothing written " \
                   f"(holds for H200-SXM-141GB {low24}-{high24})"
            wait_for(lambda: said in lines.lines, timeout_s=30)
            time.sleep(2.0)  # several checks (every 0.5 s) later: neither written nor planned again
            again = get(cluster, "same-answer")
            assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
            assert lines.lines.count(said) == 1
        assert kopf_run.exception is None, kopf_run.output
    finally:
        log.removeHandler(lines)
        for name in added:
            core.delete_node(name)


def test_replicas_are_placed_on_the_nodes_not_only_counted(cluster: dict[str, Any]) -> None:
    """Two nodes of 7 H100 (a node with a failed GPU reports 7) have 14 GPUs but room for one replica of TP 4 each:
    the operator, reading the Node objects, recommends no 3 x TP 4 there (its pods would stay Pending) and says why;
    a node of 8 more makes room, and the status records the nodes' counts, which now differ, with the answer."""
    core, objects, ns = cluster["core"], cluster["objects"], cluster["namespace"]
    product, key = "NVIDIA-H100-PCIe", "H100-PCIe-80GB"  # a type of its own: the module's other tests leave it alone
    spec = plan_spec(gpuTypes=[product], tensorParallelSizes=[4])
    spec["model"] = {"name": "meta-llama/Llama-3.1-70B-Instruct", "precisions": ["bf16"]}
    spec["workload"]["requestsPerSecond"] = "15"
    sevens = [NodeGpus(name, product, 7, True, True) for name in ("p7-a", "p7-b")]
    # Only the totals known (the spec's own availableGpus), 3 x TP 4 is the answer: 12 of the 14.
    quota = copy.deepcopy(spec)
    quota["constraints"]["availableGpus"] = {product: 14}
    counted = reconcile_plan(quota, build_inventory(sevens)).result
    assert counted is not None and counted.recommendation is not None
    assert (counted.recommendation.replicas, counted.recommendation.gpus_per_replica) == (3, 4)
    on_two = reconcile_plan(spec, build_inventory(sevens))
    on_three = reconcile_plan(spec, build_inventory([*sevens, NodeGpus("p8-c", product, 8, True, True)]))
    added: list[str] = []

    def add(name: str, gpus: int) -> None:
        core.create_node(node(name, product, gpus))
        added.append(name)
        core.patch_node_status(name, {"status": node(name, product, gpus)["status"]})

    def fits(status: dict[str, Any], nodes: list[int]) -> bool:
        rec = status["recommendation"]
        return rec["replicas"] <= sum(n // rec["gpusPerReplica"] for n in nodes)

    try:
        add("p7-a", 7)
        add("p7-b", 7)
        objects.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, manifest("placed", spec))
        with runner() as kopf_run:
            first = wait_for(lambda: planned(cluster, "placed"), timeout_s=60)["status"]
            assert "recommendation" not in first, first["recommendation"]
            assert on_two.result is not None and on_two.result.recommendation is None
            nodes = next(i for i in first["infeasible"] if i["gate"] == "nodes")
            assert nodes["reason"] == (f"needs 3 replicas of 4 x {key}, which do not fit on the nodes: a node of 7 "
                                       f"{key} holds 1 of them, so they need 3 nodes, more than there are")
            low, high = on_two.bounds[key]
            # Nodes of one count: no nodeSizes, the range alone (a third node of 7 is outside it).
            assert first["inventory"] == [{"gpuType": key, "productLabel": product, "gpusPerNode": 7,
                                           "minGpus": max(low, 1), "maxGpus": high}]
            assert high is not None and high < 21
            add("p8-c", 8)

            def answered() -> dict[str, Any] | None:
                status = get(cluster, "placed").get("status", {})
                return status if status.get("recommendation") else None

            status = wait_for(answered, timeout_s=60)
            expected = on_three.result.recommendation if on_three.result else None
            assert expected is not None and (expected.replicas, expected.gpus_per_replica) == (3, 4)
            assert (status["recommendation"]["replicas"], status["recommendation"]["gpusPerReplica"]) == (3, 4)
            assert fits(status, [8, 7, 7])
            assert status["inventory"][0]["nodeSizes"] == [{"gpus": 8, "nodes": 1}, {"gpus": 7, "nodes": 2}]
        assert kopf_run.exception is None, kopf_run.output
    finally:
        for name in added:
            core.delete_node(name)


def test_kubectl_get_shows_the_printer_columns(cluster: dict[str, Any]) -> None:
    kubectl = Path(sys.executable).with_name("kubectl")
    out = subprocess.run([str(kubectl), "--kubeconfig", str(cluster["kubeconfig"]), "get", "icp", "-n",
                          cluster["namespace"], "steady"], capture_output=True, text=True, check=True).stdout
    header, row = out.splitlines()[:2]
    for column in ("GPU", "GPUS", "REPLICAS", "BATCH", "TTFT-MS", "USD/H", "FEASIBLE", "READY", "AGE"):
        assert column in header
    assert "True" in row


EXAMPLES = sorted((REPO / "examples" / "plans").glob("*.yaml"))


def as_manifest(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    body = data if data.get("kind") == "InferenceCapacityPlan" else manifest(path.stem, data)
    body["metadata"] = {"name": f"example-{path.stem}"}
    return body


def test_every_example_plan_gets_an_answer_and_metrics(cluster: dict[str, Any]) -> None:
    from inferplan.operator import metrics

    objects, ns = cluster["objects"], cluster["namespace"]
    for path in EXAMPLES:
        objects.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, as_manifest(path))
    with runner() as kopf_run:
        for path in EXAMPLES:
            obj = wait_for(lambda p=path: planned(cluster, f"example-{p.stem}"), timeout_s=30)
            assert condition(obj, "Ready")["status"] == "True", (path.name, obj["status"])
            feasible = condition(obj, "Feasible")
            assert feasible["status"] in ("True", "False") and feasible["message"]
            assert (obj["status"].get("recommendation") is not None) == (feasible["status"] == "True")
        name = f"example-{EXAMPLES[0].stem}"
        rec = get(cluster, name)["status"].get("recommendation")
        feasible_value = metrics.REGISTRY.get_sample_value("inferplan_plan_feasible", {"namespace": ns, "plan": name})
        assert feasible_value == (1.0 if rec else 0.0)
        if rec:
            labels = {"namespace": ns, "plan": name, "gpu_type": rec["gpuType"]}
            assert metrics.REGISTRY.get_sample_value("inferplan_recommended_gpus", labels) == rec["gpus"]
        assert metrics.REGISTRY.get_sample_value("inferplan_reconcile_duration_seconds_count") >= len(EXAMPLES)
        assert metrics.REGISTRY.get_sample_value("inferplan_cluster_gpus", {"gpu_type": "L40S"}) == 4
    assert kopf_run.exception is None, kopf_run.output


LONG_PROMPTS_8B = {**LONG_PROMPTS_PD, "engine": {"name": "vllm"}, "verify": False,
                   "constraints": {**LONG_PROMPTS_PD["constraints"], "shapes": ["aggregated", "disaggregated"]}}


@contextmanager
def own_nodes(core: Any, product: str, labels: dict[str, dict[str, str]]) -> Iterator[None]:
    """Nodes of 8 `product` GPUs named as the keys of `labels`, each with those extra labels, for one test (the
    module's other tests add and remove theirs); removed afterwards."""
    added = []
    try:
        for name, extra in labels.items():
            body = node(name, product, 8)
            body["metadata"]["labels"].update(extra)
            core.create_node(body)
            added.append(name)
            core.patch_node_status(name, {"status": body["status"]})
        yield
    finally:
        for name in added:
            core.delete_node(name)


def test_a_disaggregated_recommendation_carries_its_roles_in_the_status(cluster: dict[str, Any]) -> None:
    """Long prompts and a 10 ms TPOT target on H100 nodes: the status names both pools, each with its GPU type,
    count, node selector and engine arguments, as the API server stored them (the CRD's schema keeps them: a
    field it did not know would be pruned), and the shapes compared."""
    core, objects, ns = cluster["core"], cluster["objects"], cluster["namespace"]
    product = "NVIDIA-H100-80GB-HBM3"
    with own_nodes(core, product, {"pd-a": {}, "pd-b": {}}):
        obj = plan_until_ready(cluster, "pd-split", LONG_PROMPTS_8B)
        rec = obj["status"]["recommendation"]
        assert rec["shape"] == "disaggregated", rec
        roles = {r["role"]: r for r in rec["roles"]}
        assert set(roles) == {"prefill", "decode"}
        for role in roles.values():
            assert role["gpuType"] == "H100-SXM5-80GB"
            assert role["nodeSelector"] == {"nvidia.com/gpu.product": product}
            assert role["gpus"] == role["replicas"] * role["gpusPerReplica"]
            assert "--kv-transfer-config" in role["engineArgs"]
        assert rec["gpus"] == sum(r["gpus"] for r in roles.values())
        shapes = obj["status"]["shapes"]
        assert [line.split(":")[0] for line in shapes] == ["aggregated, a replica within a node", "disaggregated"]
        assert shapes[1].endswith("the recommendation")
        objects.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "pd-split")


LLAMA_405B_TWO_NODES = {
    "model": {"name": "meta-llama/Llama-3.1-405B-Instruct", "precisions": ["bf16"]},
    "engine": {"name": "vllm"},
    "workload": {"requestsPerSecond": "0.5", "promptTokens": {"mean": 1000, "p95": 3000},
                 "outputTokens": {"mean": 300, "p95": 900}},
    "slo": {"ttft": {"maxMs": 3000, "percentile": "p95"}, "tpot": {"maxMs": 60, "percentile": "p95"}},
    "constraints": {"gpuTypes": ["NVIDIA-H100-NVL"], "tensorParallelSizes": [8, 16], "maxNodesPerReplica": 2,
                    "minReplicas": 1},
    "verify": False,
}


def test_a_pipelined_recommendation_carries_its_stages_in_the_status(cluster: dict[str, Any]) -> None:
    """405B in bf16 on two nodes of 8 H100 NVL (752 GB: one holds no replica): the status says the replica is
    two pipeline stages over two nodes (what a LeaderWorkerSet needs), with both sizes in its arguments, as the
    API server stored it. The nodes' inferplan.io/network-gbps label gives the network the plan assumes (the
    slower of the two)."""
    core, objects, ns = cluster["core"], cluster["objects"], cluster["namespace"]
    product = "NVIDIA-H100-NVL"  # a type of its own: every node of it is labelled
    with own_nodes(core, product, {"pp-a": {"inferplan.io/network-gbps": "200"},
                                   "pp-b": {"inferplan.io/network-gbps": "100"}}):
        obj = plan_until_ready(cluster, "pp-405b", LLAMA_405B_TWO_NODES)
        rec = obj["status"]["recommendation"]
        assert (rec["pipelineParallel"], rec["gpusPerReplica"], rec["nodesPerReplica"]) == (2, 16, 2), rec
        args = rec["engineArgs"]
        assert args[args.index("--pipeline-parallel-size") + 1] == "2"
        assert args[args.index("--tensor-parallel-size") + 1] == "8"
        shapes = dict(line.split(": ", 1) for line in obj["status"]["shapes"])
        assert shapes["aggregated, pipeline stages over nodes"].endswith("the recommendation")
        assert [(e["gpuType"], e["networkGbps"]) for e in obj["status"]["inventory"]] == [("H100-NVL-94GB", 100)]
        assert any(a.startswith("network between nodes: 100 Gb/s per GPU") for a in obj["status"]["assumptions"])
        objects.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "pp-405b")


def _fits(pod: dict[str, Any], node_obj: Any) -> str | None:
    """Why the kube-scheduler would not put `pod` (a rendered pod template's spec) on `node_obj` (a V1Node read
    from the API server), or None where it would: its node selector, cordon, NoSchedule/NoExecute taints against
    the pod's tolerations (Kubernetes' matching rules) and the extended resources it asks for."""
    labels = node_obj.metadata.labels or {}
    if any(labels.get(key) != value for key, value in (pod.get("nodeSelector") or {}).items()):
        return "node selector"
    if node_obj.spec.unschedulable:
        return "cordoned"
    for taint in node_obj.spec.taints or []:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any((t.get("key") in (None, "", taint.key)) and t.get("effect") in (None, "", taint.effect)
                   and (t.get("operator") == "Exists" or t.get("value", "") == (taint.value or ""))
                   for t in pod.get("tolerations") or []):
            return f"taint {taint.key}:{taint.effect}"
    allocatable = node_obj.status.allocatable or {}
    for container in pod["containers"]:
        for resource, quantity in container["resources"].get("limits", {}).items():
            if "/" in resource and int(quantity) > int(allocatable.get(resource, "0")):
                return f"{resource} {quantity} > {allocatable.get(resource, '0')}"
    return None


def test_gpu_nodes_tainted_for_gpu_pods_count_and_the_rendered_pods_land_there(cluster: dict[str, Any]) -> None:
    """GPU nodes carry the taint nvidia.com/gpu=present:NoSchedule (GKE sets it on every GPU node pool, EKS and
    AKS guides recommend it) to keep pods that ask for no GPU off them. The operator counts them, and the pods that
    `render` makes from the status tolerate it, so that the scheduler places every replica on those nodes; a node
    tainted for another workload stays out of the count and is named."""
    core, ns = cluster["core"], cluster["namespace"]
    product = "NVIDIA-A10G"  # a type of its own in this module
    gpu_taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    nodes = {"a10g-a": [gpu_taint], "a10g-b": [gpu_taint],
             "a10g-training": [gpu_taint, {"key": "dedicated", "value": "training", "effect": "NoSchedule"}]}
    added = []
    try:
        for name, taints in nodes.items():
            body = node(name, product, 8)
            body["spec"] = {"taints": taints}
            core.create_node(body)
            added.append(name)
            core.patch_node_status(name, {"status": body["status"]})
        spec = copy.deepcopy(CHAT)
        spec["constraints"] = {"gpuTypes": [product]}
        obj = plan_until_ready(cluster, "tainted-gpus", spec)
        status = obj["status"]
        assert condition(obj, "InventoryAvailable")["status"] == "True", status
        assert status["inventory"][0]["gpuType"] == "A10G" and status["inventory"][0]["gpusPerNode"] == 8
        assert any("a10g-training (tainted dedicated=training:NoSchedule" in w for w in status["warnings"]), status
        rec = status["recommendation"]
        assert rec["gpuType"] == "A10G", rec
        rendered = subprocess.run([str(Path(sys.executable).with_name("inferplan")), "render", "-"],
                                  input=yaml.safe_dump(obj), capture_output=True, text=True, check=True)
        [deployment] = [d for d in yaml.safe_load_all(rendered.stdout) if d["kind"] == "Deployment"]
        pod = deployment["spec"]["template"]["spec"]
        live = [core.read_node(name) for name in nodes]
        why = {n.metadata.name: _fits(pod, n) for n in live}
        assert why["a10g-training"] == "taint dedicated:NoSchedule", why
        room = sum(int(n.status.allocatable["nvidia.com/gpu"]) // rec["gpusPerReplica"]
                   for n in live if why[n.metadata.name] is None)
        assert room >= deployment["spec"]["replicas"] == rec["replicas"], (why, rec)
        cluster["objects"].delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "tainted-gpus")
    finally:
        for name in added:
            core.delete_node(name)


def test_nodes_spelling_one_gpu_type_differently_count_only_where_the_node_selector_reaches(
        cluster: dict[str, Any]) -> None:
    """Node pools of two GPU Feature Discovery or driver versions spell one product two ways. A recommendation's node
    selector names one label value, so only the nodes of that spelling count: 8 + 2 A100 PCIe had counted as 10,
    and the plan at 110 requests/s got 9 replicas of one GPU, the ninth Pending. The status names the other node;
    relabelled, it counts, the plan is planned again, and the pods `render` makes fit the nodes they select."""
    core, ns = cluster["core"], cluster["namespace"]
    chosen, other = "NVIDIA-A100-80GB-PCIe", "NVIDIA-A100-PCIE-80GB"  # a type of its own in this module
    added = []
    try:
        for name, product, gpus in (("a100p-a", chosen, 8), ("a100p-b", other, 2)):
            body = node(name, product, gpus)
            core.create_node(body)
            added.append(name)
            core.patch_node_status(name, {"status": body["status"]})
        spec = copy.deepcopy(CHAT)
        spec["constraints"] = {"gpuTypes": [chosen]}
        spec["workload"]["requestsPerSecond"] = "110"
        spec["verify"] = False
        cluster["objects"].create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, manifest("spellings", spec))
        with runner() as kopf_run:
            first = wait_for(lambda: planned(cluster, "spellings"), timeout_s=60)
            status = first["status"]
            assert status["inventory"][0]["productLabel"] == chosen
            assert any(f"a100p-b (labelled {other}, another spelling of A100-PCIe-80GB" in w
                       for w in status["warnings"]), status["warnings"]
            assert "recommendation" not in status, status["recommendation"]
            core.patch_node("a100p-b", {"metadata": {"labels": {"nvidia.com/gpu.product": chosen}}})
            obj = wait_for(lambda: (o := get(cluster, "spellings"))["status"].get("recommendation") and o,
                           timeout_s=60)
        assert kopf_run.exception is None, kopf_run.output
        rec = obj["status"]["recommendation"]
        assert rec["nodeSelector"] == {"nvidia.com/gpu.product": chosen} and rec["gpus"] > 8, rec
        rendered = subprocess.run([str(Path(sys.executable).with_name("inferplan")), "render", "-"],
                                  input=yaml.safe_dump(obj), capture_output=True, text=True, check=True)
        [deployment] = [d for d in yaml.safe_load_all(rendered.stdout) if d["kind"] == "Deployment"]
        pod = deployment["spec"]["template"]["spec"]
        live = [core.read_node(name) for name in added]
        room = sum(int(n.status.allocatable["nvidia.com/gpu"]) // rec["gpusPerReplica"]
                   for n in live if _fits(pod, n) is None)
        assert room >= deployment["spec"]["replicas"] == rec["replicas"], rec
        cluster["objects"].delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "spellings")
    finally:
        for name in added:
            core.delete_node(name)


def _not_counted(status: dict[str, Any]) -> str:
    """The status's warning that names the GPU nodes the inventory does not count ("" where there is none)."""
    return next((w for w in status.get("warnings") or () if w.startswith("GPU nodes not counted")), "")


def test_node_events_keep_the_warnings_true_and_replan_only_what_they_change(cluster: dict[str, Any]) -> None:
    """A platform team cordons, taints, relabels and drains GPU nodes. The count of the plan's type stays inside the
    range its answer holds for (five nodes of 8 A40, the answer holds from 32): the answer is not planned again, but
    the warnings name the nodes not counted as they are now, each event as it comes and as it is undone (they had
    kept what they said when the plan was last planned: a node uncordoned was still "not counted"). A heartbeat, or
    a cordon of a type the plan may not use, writes nothing; the type's nodes all cordoned re-plan it."""
    core, objects, ns = cluster["core"], cluster["objects"], cluster["namespace"]
    product = "NVIDIA-A40"  # a type of its own in this module
    spec = copy.deepcopy(CHAT)
    spec["constraints"] = {"gpuTypes": [product]}
    names = ["a40-a", "a40-b", "a40-c", "a40-d", "a40-e"]
    low, high = reconcile_plan(spec, build_inventory([NodeGpus(n, product, 8, True, True) for n in names])
                               ).bounds["A40"]
    assert low <= 32 and high is None  # (32, None) with the shipped factors: one node out keeps it in range
    added: list[str] = []
    try:
        for name in names:
            core.create_node(node(name, product, 8))
            added.append(name)
            core.patch_node_status(name, {"status": node(name, product, 8)["status"]})
        objects.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, manifest("node-events", spec))
        with runner() as kopf_run:
            wait_for(lambda: planned(cluster, "node-events"), timeout_s=60)
            first = settled(cluster, "node-events")
            answer = {k: first["status"].get(k) for k in ("recommendation", "inventory", "observedGeneration")}
            assert answer["recommendation"]["gpuType"] == "A40" and _not_counted(first["status"]) == ""

            def says(text: str) -> dict[str, Any] | None:
                status = get(cluster, "node-events")["status"]
                return status if _not_counted(status) == text else None

            events = [  # (what the team does, the warning after it, the patch that undoes it)
                ({"spec": {"unschedulable": True}}, "a40-d (unschedulable)", {"spec": {"unschedulable": None}}),
                ({"spec": {"taints": [{"key": "maintenance", "value": "true", "effect": "NoExecute"}]}},
                 "a40-d (tainted maintenance=true:NoExecute (rendered pods tolerate only nvidia.com/gpu:NoSchedule))",
                 {"spec": {"taints": None}}),
                ({"metadata": {"labels": {"nvidia.com/gpu.product": "NVIDIA-A40-48GB"}}},
                 "a40-d (labelled NVIDIA-A40-48GB, another spelling of A40: a node selector reaches the nodes of one "
                 "label value, NVIDIA-A40 (the most GPUs))",
                 {"metadata": {"labels": {"nvidia.com/gpu.product": product}}}),
            ]
            for change, named, undo in events:
                core.patch_node("a40-d", change)
                status = wait_for(lambda named=named: says(f"GPU nodes not counted (1): {named}"), timeout_s=30)
                assert {k: status.get(k) for k in answer} == answer  # the same answer, not planned again
                core.patch_node("a40-d", undo)
                status = wait_for(lambda: says(""), timeout_s=30)
                assert {k: status.get(k) for k in answer} == answer
            status_events = [  # the same through the node's status: NotReady for a while, no GPUs allocatable
                ({"conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]}, "Ready=False",
                 {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}),
                ({"allocatable": {"nvidia.com/gpu": "0"}}, "0 allocatable nvidia.com/gpu",
                 {"allocatable": {"nvidia.com/gpu": "8"}}),
            ]
            for change, named, undo in status_events:
                core.patch_node_status("a40-d", {"status": change})
                status = wait_for(lambda named=named: says(f"GPU nodes not counted (1): a40-d ({named})"),
                                  timeout_s=30)
                assert {k: status.get(k) for k in answer} == answer
                core.patch_node_status("a40-d", {"status": undo})
                wait_for(lambda: says(""), timeout_s=30)
            # Nothing relevant changes: a heartbeat, a cordon of a type the plan may not use. Nothing is written.
            quiet = settled(cluster, "node-events")
            core.patch_node_status("a40-d", {"status": {"conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady",
                 "lastHeartbeatTime": "2030-01-01T00:00:00Z"}]}})
            core.patch_node("l40s-a", {"spec": {"unschedulable": True}})
            try:
                time.sleep(2.0)  # several checks (every 0.5 s) see both
                assert get(cluster, "node-events")["metadata"]["resourceVersion"] == quiet["metadata"][
                    "resourceVersion"]
            finally:
                core.patch_node("l40s-a", {"spec": {"unschedulable": None}})
            # Every A40 node cordoned: the recommendation could not be scheduled. Planned again, and said why.
            for name in names:
                core.patch_node(name, {"spec": {"unschedulable": True}})
            status = wait_for(lambda: (s := get(cluster, "node-events")["status"]).get("inventory") == [] and s,
                              timeout_s=30)
            assert "recommendation" not in status, status["recommendation"]
            assert condition({"status": status}, "InventoryAvailable")["reason"] == "NoGpus"
            assert _not_counted(status).startswith("GPU nodes not counted (5): a40-a (unschedulable)"), status
        assert kopf_run.exception is None, kopf_run.output
        objects.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "node-events")
    finally:
        for name in added:
            core.delete_node(name)
