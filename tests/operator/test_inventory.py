"""The GPU inventory: node parsing (GFD and AMD labeller labels), what counts, sums and warnings."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferplan.operator.inventory import (
    NO_PRODUCT_LABEL,
    Inventory,
    NodeGpus,
    build_inventory,
    is_inventory_warning,
    node_gpus,
)
from inferplan.operator.status import with_inventory_warnings
from tests.support.plans import REPO

READY = [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}]
NOT_READY = [{"type": "Ready", "status": "False"}]
H100 = "NVIDIA-H100-80GB-HBM3"
MI300X = "AMD_Instinct_MI300X_OAM"


def parse(labels: dict[str, str], allocatable: dict[str, Any] | None = None, *, unschedulable: bool = False,
          conditions: list[dict[str, str]] | None = None, name: str = "n1") -> NodeGpus | None:
    return node_gpus(name, labels, allocatable or {}, unschedulable, READY if conditions is None else conditions)


def parsed(labels: dict[str, str], allocatable: dict[str, Any] | None = None, **kwargs: Any) -> NodeGpus:
    result = parse(labels, allocatable, **kwargs)
    assert result is not None
    return result


def node(name: str, product: str = H100, gpus: int = 8, *, schedulable: bool = True, ready: bool = True) -> NodeGpus:
    return NodeGpus(node=name, product=product, gpus=gpus, schedulable=schedulable, ready=ready)


# ----------------------------------------------------------------------------------------------------------
# node_gpus


def test_nvidia_gfd_labels_and_allocatable() -> None:
    labels = {"nvidia.com/gpu.product": H100, "nvidia.com/gpu.count": "8", "kubernetes.io/os": "linux"}
    assert parse(labels, {"cpu": "190", "nvidia.com/gpu": "8"}) == NodeGpus("n1", H100, 8, True, True)


@pytest.mark.parametrize(("value", "gbps"), [("400", 400.0), (" 200.5 ", 200.5), ("0", None), ("-100", None),
                                              ("fast", None), ("nan", None), ("inf", None), (None, None)])
def test_the_network_label_is_a_positive_bandwidth_or_nothing(value: str | None, gbps: float | None) -> None:
    labels = {"nvidia.com/gpu.product": H100} | ({"inferplan.io/network-gbps": value} if value is not None else {})
    assert parsed(labels, {"nvidia.com/gpu": "8"}).network_gbps == gbps


def test_a_types_network_is_its_slowest_nodes_and_only_when_every_node_says() -> None:
    """The plan assumes the least bandwidth of a GPU type's nodes, and none (its own default) unless all of them
    carry the label: one unlabelled node could be the slow one."""
    labelled = [NodeGpus("a", H100, 8, True, True, 400.0), NodeGpus("b", H100, 8, True, True, 200.0),
                NodeGpus("c", "NVIDIA-L4", 4, True, True, 100.0),
                NodeGpus("d", H100, 8, False, True, 25.0)]  # cordoned: not counted, nor its network
    inventory = build_inventory(labelled)
    assert {e.gpu_type: e.network_gbps for e in inventory.entries} == {"H100-SXM5-80GB": 200.0, "L4": 100.0}
    assert inventory.network_gbps(["H100-SXM5-80GB"]) == 200.0
    assert inventory.network_gbps(["H100-SXM5-80GB", "L4"]) == 100.0
    assert inventory.network_gbps(["A100-SXM4-80GB"]) is None
    partly = build_inventory([*labelled, NodeGpus("e", H100, 8, True, True)])
    assert partly.network_gbps(["H100-SXM5-80GB"]) is None and partly.network_gbps(["L4"]) == 100.0


def test_amd_labeller_labels_and_allocatable() -> None:
    labels = {"amd.com/gpu.product-name": MI300X, "amd.com/gpu.family": "AI"}
    assert parse(labels, {"amd.com/gpu": "8", "nvidia.com/gpu": "2"}) == NodeGpus("n1", MI300X, 8, True, True)


def test_mig_and_shared_labels_are_kept_raw() -> None:
    mig = "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"
    assert parse({"nvidia.com/gpu.product": mig}, {"nvidia.com/gpu": "56"}) == NodeGpus("n1", mig, 56, True, True)
    shared = f"{H100}-SHARED"
    assert parsed({"nvidia.com/gpu.product": shared}, {"nvidia.com/gpu": "32"}).product == shared


def test_node_without_a_gpu_product_label_is_none_unless_it_has_gpus_to_name() -> None:
    assert parse({"kubernetes.io/os": "linux"}, {"cpu": "8"}) is None
    assert parse({"nvidia.com/gpu.count": "8"}, {"cpu": "8"}) is None
    for blank in ({"nvidia.com/gpu.count": "8"}, {"nvidia.com/gpu.product": "  "}):
        unlabelled = parse(blank, {"nvidia.com/gpu": "8"})
        assert unlabelled is not None and unlabelled.product == "" and unlabelled.problems == (NO_PRODUCT_LABEL,)


def test_missing_allocatable_falls_back_to_the_count_label() -> None:
    assert parsed({"nvidia.com/gpu.product": H100, "nvidia.com/gpu.count": "4"}).gpus == 4
    assert parsed({"amd.com/gpu.product-name": MI300X, "amd.com/gpu.count": "2"}).gpus == 2
    assert parsed({"nvidia.com/gpu.product": H100}).gpus == 0


@pytest.mark.parametrize(("labels", "allocatable", "resource"), [
    # time-slicing (or MPS) with renameByDefault: the plugin advertises nvidia.com/gpu.shared and GFD writes no
    # -SHARED suffix (the renamed resource says it), while gpu.count still counts the 4 physical GPUs
    ({"nvidia.com/gpu.product": "NVIDIA-L4", "nvidia.com/gpu.count": "4", "nvidia.com/gpu.replicas": "4",
      "nvidia.com/gpu.sharing-strategy": "time-slicing"}, {"nvidia.com/gpu.shared": "16"}, "nvidia.com/gpu.shared"),
    # MIG mixed strategy, every GPU partitioned: gpu.product names the whole GPU, the slices are mig-<profile>
    ({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "8",
      "nvidia.com/mig.strategy": "mixed"}, {"nvidia.com/mig-1g.10gb": "56"}, "nvidia.com/mig-1g.10gb"),
])
def test_gpus_advertised_only_as_shares_or_slices_are_not_counted_from_the_count_label(
        labels: dict[str, str], allocatable: dict[str, str], resource: str) -> None:
    """The count label had counted them as whole GPUs: a plan for 4 whole L4s (or 8 A100s) whose pods, asking
    for nvidia.com/gpu, the node can never take."""
    result = parsed(labels, {"cpu": "64", **allocatable})
    assert result.gpus == 0
    assert result.problems == (f"GPUs advertised only as {resource}: shared or MIG slices, no whole nvidia.com/gpu",)
    inventory = build_inventory([result])
    assert inventory.entries == () and [s[:2] for s in inventory.skipped] == [("n1", result.problems[0])]


def test_whole_gpus_beside_mig_slices_count() -> None:
    labels = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "8"}
    assert parsed(labels, {"nvidia.com/gpu": "4", "nvidia.com/mig-3g.40gb": "8"}).gpus == 4
    assert parsed(labels, {"nvidia.com/gpu": "0", "nvidia.com/mig-3g.40gb": "16"}).problems == (
        "0 allocatable nvidia.com/gpu",)


def test_allocatable_wins_over_the_count_label() -> None:
    # The device plugin advertises 0 (e.g. it is down): the label's 8 GPUs cannot be scheduled.
    labels = {"nvidia.com/gpu.product": H100, "nvidia.com/gpu.count": "8"}
    assert parsed(labels, {"nvidia.com/gpu": "0"}).gpus == 0


@pytest.mark.parametrize("value", ["abc", "-1", "1.5", "", "8Gi", None, True, -3])
def test_bad_quantities_count_as_zero(value: Any) -> None:
    assert parsed({"nvidia.com/gpu.product": H100}, {"nvidia.com/gpu": value}).gpus == 0
    assert parsed({"nvidia.com/gpu.product": H100, "nvidia.com/gpu.count": value}).gpus == 0


@pytest.mark.parametrize("value", ["8", " 8 ", "+8", 8])
def test_whole_quantities_parse(value: Any) -> None:
    assert parsed({"nvidia.com/gpu.product": H100}, {"nvidia.com/gpu": value}).gpus == 8


def test_unschedulable_and_not_ready() -> None:
    labels = {"nvidia.com/gpu.product": H100}
    assert parsed(labels, {"nvidia.com/gpu": "8"}, unschedulable=True).schedulable is False
    assert parsed(labels, {"nvidia.com/gpu": "8"}, conditions=NOT_READY).ready is False
    assert parsed(labels, {"nvidia.com/gpu": "8"}, conditions=[]).ready is False
    unknown = [{"type": "Ready", "status": "Unknown"}]
    assert parsed(labels, {"nvidia.com/gpu": "8"}, conditions=unknown).ready is False


def test_unknown_product_is_parsed_not_judged() -> None:
    result = parse({"nvidia.com/gpu.product": "NVIDIA-Quantum-Widget"}, {"nvidia.com/gpu": "4"})
    assert result == NodeGpus("n1", "NVIDIA-Quantum-Widget", 4, True, True)


# ----------------------------------------------------------------------------------------------------------
# build_inventory


def test_sums_per_type_and_max_per_node() -> None:
    inventory = build_inventory([
        node("a", H100, 8), node("b", H100, 4), node("c", "NVIDIA-L4", 1), node("d", MI300X, 8),
        node("e", "NVIDIA-L4", 2),
    ])
    assert inventory.available() == {"H100-SXM5-80GB": 12, "L4": 3, "MI300X": 8}
    assert inventory.per_node() == {"H100-SXM5-80GB": 8, "L4": 2, "MI300X": 8}
    assert [e.gpu_type for e in inventory.entries] == ["H100-SXM5-80GB", "L4", "MI300X"]
    h100 = inventory.entries[0]
    assert (h100.gpus, h100.nodes, h100.gpus_per_node, h100.product_label) == (12, 2, 8, H100)
    assert inventory.total_gpus == 23
    assert inventory.warnings() == []


def test_the_gpus_of_each_node_are_kept_and_recorded_where_the_nodes_differ() -> None:
    """Where replicas go (`PlanRequest.node_gpus`): each node's GPUs, and where a type's nodes differ, how many
    nodes have each count (`node_sizes`, which the status records: an answer holds only while they stay so)."""
    inventory = build_inventory([node("a", H100, 7), node("b", H100, 8), node("c", H100, 7), node("d", "NVIDIA-L4", 4),
                                 node("e", "NVIDIA-L4", 4), node("f", H100, 0)])
    assert inventory.node_gpus() == {"H100-SXM5-80GB": (8, 7, 7), "L4": (4, 4)}
    h100, l4 = inventory.entries
    assert [s.model_dump(by_alias=True) for s in h100.node_sizes or []] == [{"gpus": 8, "nodes": 1},
                                                                            {"gpus": 7, "nodes": 2}]
    assert l4.node_sizes is None and l4.model_dump(by_alias=True)["nodeSizes"] is None  # one count: gpusPerNode
    assert (h100.gpus, h100.nodes, h100.gpus_per_node) == (22, 3, 8)


def test_unschedulable_and_not_ready_nodes_do_not_count() -> None:
    inventory = build_inventory([
        node("a", H100, 8), node("b", H100, 8, schedulable=False), node("c", H100, 8, ready=False),
        node("d", "NVIDIA-Quantum-Widget", 8, ready=False), node("e", f"{H100}-SHARED", 8, schedulable=False),
    ])
    assert inventory.available() == {"H100-SXM5-80GB": 8}
    assert inventory.entries[0].nodes == 1
    assert inventory.unknown_products == () and inventory.shared_or_mig == ()


def test_unknown_products_are_reported_not_raised() -> None:
    inventory = build_inventory([node("a", "NVIDIA-Quantum-Widget"), node("b", "Zeta-9"), node("c", "Zeta-9"),
                                 node("d", "NVIDIA-L4", 1)])
    assert inventory.available() == {"L4": 1}
    assert inventory.unknown_products == ("NVIDIA-Quantum-Widget", "Zeta-9")
    assert inventory.warnings() == [
        "GPU products the catalog does not know are not counted: NVIDIA-Quantum-Widget, Zeta-9"
    ]


def test_mig_and_shared_gpus_are_reported_not_counted() -> None:
    mig = "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"
    inventory = build_inventory([node("a", mig, 56), node("b", f"{H100}-SHARED", 32), node("c", mig, 7)])
    assert inventory.available() == {} and inventory.per_node() == {} and inventory.entries == ()
    assert inventory.shared_or_mig == (mig, f"{H100}-SHARED")
    assert inventory.warnings() == [
        "MIG slices and shared GPUs are not whole GPUs for serving a model and are not counted: "
        f"{mig}, {H100}-SHARED"
    ]


def test_both_warnings_in_a_stable_order() -> None:
    inventory = build_inventory([node("a", "Zeta-9"), node("b", f"{H100}-SHARED")])
    assert [w.split(" ")[0] for w in inventory.warnings()] == ["GPU", "MIG"]


def test_nodes_with_no_allocatable_gpus_contribute_nothing() -> None:
    inventory = build_inventory([node("a", H100, 0), node("b", H100, 4)])
    assert inventory.available() == {"H100-SXM5-80GB": 4}
    assert inventory.entries[0].nodes == 1
    assert build_inventory([node("a", H100, 0)]) == Inventory((), (), (),
                                                              skipped=(("a", "no allocatable GPUs", "H100-SXM5-80GB"),))


def test_skipped_gpu_nodes_are_named_with_the_reason() -> None:
    """A GPU node whose GPUs do not count says so in the status (a warning), named with what it lacks: a node
    without a Ready condition or without allocatable GPUs used to vanish from the inventory without a word."""
    nodes = [parsed({"nvidia.com/gpu.product": H100}, {"nvidia.com/gpu": "8"}, name="fine"),
             parsed({"nvidia.com/gpu.product": H100}, {"nvidia.com/gpu": "8"}, conditions=[], name="no-ready"),
             parsed({"nvidia.com/gpu.product": H100}, None, name="no-allocatable"),
             parsed({"nvidia.com/gpu.product": H100}, {"nvidia.com/gpu": "0"}, name="zero"),
             parsed({"nvidia.com/gpu.product": H100}, {"nvidia.com/gpu": "8"}, conditions=NOT_READY,
                    unschedulable=True, name="drained")]
    inventory = build_inventory(nodes)
    assert inventory.available() == {"H100-SXM5-80GB": 8}
    assert [s[:2] for s in inventory.skipped] == [("drained", "unschedulable, Ready=False"),
                                                  ("no-allocatable", "no allocatable nvidia.com/gpu"),
                                                  ("no-ready", "no Ready condition"),
                                                  ("zero", "0 allocatable nvidia.com/gpu")]
    assert inventory.warnings() == [
        "GPU nodes not counted (4): drained (unschedulable, Ready=False), no-allocatable (no allocatable "
        "nvidia.com/gpu), no-ready (no Ready condition), zero (0 allocatable nvidia.com/gpu)"]
    assert inventory.usable(frozenset({"H100-SXM5-80GB"})).warnings() == inventory.warnings()


def test_one_plans_warnings_name_the_nodes_of_its_gpu_types_and_of_no_known_type() -> None:
    """A plan's status names the nodes and labels of the GPU types it may use, and those of no type the catalog
    knows: its warnings (which the operator rewrites as nodes change) had named every GPU node of the cluster, so an
    L40S node cordoned would have rewritten the status of a plan that may use H100 only."""
    mig = "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"
    nodes = [node("h100-ok"), node("h100-cordoned", schedulable=False), node("l40s-cordoned", "NVIDIA-L40S",
                                                                              schedulable=False),
             node("a100-mig", mig, 56), node("h100-mig", f"{H100}-SHARED", 32), node("zeta", "Zeta-9"),
             node("zeta-cordoned", "Zeta-9", schedulable=False),
             parsed({}, {"nvidia.com/gpu": "8"}, name="unlabelled")]
    inventory = build_inventory(nodes)
    assert inventory.usable(frozenset({"H100-SXM5-80GB"})).warnings() == [
        "GPU products the catalog does not know are not counted: Zeta-9",
        f"MIG slices and shared GPUs are not whole GPUs for serving a model and are not counted: {H100}-SHARED",
        f"GPU nodes not counted (3): h100-cordoned (unschedulable), unlabelled ({NO_PRODUCT_LABEL}), "
        "zeta-cordoned (unschedulable)"]
    assert inventory.usable(None).warnings() == inventory.warnings()
    assert "l40s-cordoned (unschedulable)" in inventory.warnings()[-1] and mig in inventory.warnings()[1]


def test_the_skipped_nodes_warning_is_bounded() -> None:
    many = [node(f"gpu-{i:03d}", ready=False) for i in range(25)]
    [warning] = build_inventory(many).warnings()
    assert warning.startswith("GPU nodes not counted (25): gpu-000 (not Ready), ")
    assert warning.count("(not Ready)") == 10 and warning.endswith(", and 15 more")
    long_names = [node("n" * 250 + str(i), ready=False) for i in range(10)]
    [warning] = build_inventory(long_names).warnings()
    assert len(warning) <= 1024 and warning.endswith(" more")


def test_product_label_is_the_spelling_the_nodes_carry_and_only_its_nodes_count() -> None:
    # Two spellings of one GPU (node pools of two labeller or driver versions): the label with the most GPUs is
    # the node selector, and only its nodes count. Both had counted: 5 replicas of one L4 were recommended, and the
    # fifth pod, whose node selector no node of 4 GPUs matched, stayed Pending.
    inventory = build_inventory([node("a", "NVIDIA-L4", 1), node("b", "NVIDIA_L4", 4), node("c", "NVIDIA_L4", 2)])
    assert inventory.available() == {"L4": 6} and inventory.node_gpus() == {"L4": (4, 2)}
    assert inventory.entries[0].product_label == "NVIDIA_L4"
    (warning,) = inventory.warnings()
    assert warning == ("GPU nodes not counted (1): a (labelled NVIDIA-L4, another spelling of L4: a node selector "
                       "reaches the nodes of one label value, NVIDIA_L4 (the most GPUs))")
    amd = build_inventory([node("m1", "AMD_Instinct_MI325_OAM"), node("m2", "AMD_Instinct_MI325X_OAM"),
                           node("m3", "AMD_Instinct_MI325X_OAM")])
    assert amd.available() == {"MI325X": 16} and amd.product_labels() == {"MI325X": "AMD_Instinct_MI325X_OAM"}
    # docs/operator.md quotes the warning as it is written
    pcie = build_inventory([node("a100-a", "NVIDIA-A100-80GB-PCIe"), node("a100-b", "NVIDIA-A100-PCIE-80GB", 2)])
    named = pcie.warnings()[0].split(": ", 1)[1].split(":")[0]
    assert named == "a100-b (labelled NVIDIA-A100-PCIE-80GB, another spelling of A100-PCIe-80GB"
    assert f"`{named}: ...)`" in " ".join((REPO / "docs" / "operator.md").read_text().split())


def test_empty_cluster() -> None:
    inventory = build_inventory([])
    assert inventory == Inventory((), (), ())
    assert inventory.available() == {} and inventory.warnings() == [] and inventory.total_gpus == 0


_PRODUCTS = [H100, "NVIDIA-L4", MI300X, "Zeta-9", f"{H100}-SHARED", "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"]


@given(st.lists(st.builds(NodeGpus, node=st.text(max_size=3), product=st.sampled_from(_PRODUCTS),
                          gpus=st.integers(0, 16), schedulable=st.booleans(), ready=st.booleans()), max_size=12))
def test_inventory_counts_exactly_the_whole_known_gpus_on_usable_nodes(nodes: list[NodeGpus]) -> None:
    inventory = build_inventory(nodes)
    counted = [n for n in nodes if n.schedulable and n.ready and n.product in (H100, "NVIDIA-L4", MI300X)]
    assert inventory.total_gpus == sum(n.gpus for n in counted)
    for entry in inventory.entries:
        assert 0 < entry.gpus_per_node <= entry.gpus and entry.nodes >= 1
        each = entry.node_gpus()
        assert len(each) == entry.nodes and sum(each) == entry.gpus and max(each) == entry.gpus_per_node
        assert (entry.node_sizes is None) == (min(each) == max(each))
    assert list(inventory.available()) == sorted(inventory.available())
    assert build_inventory(reversed(nodes)) == inventory  # order of the index does not matter


def test_every_warning_fits_a_status_however_many_products_the_cluster_has() -> None:
    # 33 MIG profiles and time-sliced labels, or 40 unknown products, made one warning longer than a status holds
    # (1024 characters): writing any plan's status failed and no plan was answered.
    mig = [node(f"m{i}", f"NVIDIA-A100-SXM4-80GB-MIG-{i}g.{10 * i}gb") for i in range(1, 34)]
    unknown = [node(f"u{i}", f"NVIDIA-Custom-Accelerator-Model-{i:02d}") for i in range(40)]
    warnings = build_inventory([*mig, *unknown]).warnings()
    assert len(warnings) == 2 and all(len(w) <= 1024 for w in warnings)
    assert warnings[0].startswith("GPU products the catalog does not know are not counted: ")
    assert warnings[0].endswith(" more") and warnings[1].endswith(" more")


def test_the_gpu_taint_of_gpu_node_pools_keeps_no_rendered_pod_off() -> None:
    """GKE taints every GPU node nvidia.com/gpu=present:NoSchedule (EKS and AKS guides do the same; the AMD
    equivalent is amd.com/gpu): the pods `render` makes tolerate it, so those nodes count. Any other taint, the
    same key with NoExecute, or NVIDIA's key on an AMD node still keeps them off (they were all left out before,
    and a GKE cluster had no GPUs for any plan)."""
    ready = [{"type": "Ready", "status": "True"}]

    def counted(labels: dict[str, str], resource: str, taints: list[dict[str, str]]) -> dict[str, int]:
        parsed_node = node_gpus("n", labels, {resource: "8"}, False, ready, taints)
        assert parsed_node is not None
        return build_inventory([parsed_node]).available()

    nvidia, amd = {"nvidia.com/gpu.product": H100}, {"amd.com/gpu.product-name": MI300X}
    assert counted(nvidia, "nvidia.com/gpu", [{"key": "nvidia.com/gpu", "value": "present",
                                               "effect": "NoSchedule"}]) == {"H100-SXM5-80GB": 8}
    assert counted(nvidia, "nvidia.com/gpu", [{"key": "nvidia.com/gpu", "effect": "NoSchedule"},
                                              {"key": "spot", "effect": "PreferNoSchedule"}]) == {"H100-SXM5-80GB": 8}
    assert counted(amd, "amd.com/gpu", [{"key": "amd.com/gpu", "effect": "NoSchedule"}]) == {"MI300X": 8}
    assert counted(nvidia, "nvidia.com/gpu", [{"key": "nvidia.com/gpu", "effect": "NoExecute"}]) == {}
    assert counted(amd, "amd.com/gpu", [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]) == {}
    assert counted(nvidia, "nvidia.com/gpu", [{"key": "nvidia.com/gpu", "effect": "NoSchedule"},
                                              {"key": "dedicated", "value": "training", "effect": "NoSchedule"}]) == {}


def test_a_tainted_node_and_a_gpu_node_without_a_product_label_are_named_and_not_counted() -> None:
    ready = [{"type": "Ready", "status": "True"}]
    tainted = node_gpus("h1", {"nvidia.com/gpu.product": H100}, {"nvidia.com/gpu": "8"}, False, ready,
                        [{"key": "dedicated", "value": "training", "effect": "NoSchedule"}])
    preferring = node_gpus("h2", {"nvidia.com/gpu.product": H100}, {"nvidia.com/gpu": "8"}, False, ready,
                           [{"key": "spot", "effect": "PreferNoSchedule"}])  # pods may still land there
    bare = node_gpus("g1", {}, {"nvidia.com/gpu": "8"}, False, ready)  # GPU Feature Discovery not installed
    assert node_gpus("cpu", {}, {"cpu": "64"}, False, ready) is None
    inventory = build_inventory([n for n in (tainted, preferring, bare) if n is not None])
    assert inventory.available() == {"H100-SXM5-80GB": 8}
    (warning,) = inventory.warnings()
    assert ("h1 (tainted dedicated=training:NoSchedule (rendered pods tolerate only nvidia.com/gpu:NoSchedule))"
            in warning)
    assert "g1 (GPUs but no GPU product label" in warning


def test_the_taints_kubernetes_adds_for_a_cordon_or_a_node_not_ready_are_not_named_beside_it() -> None:
    """On a real cluster `kubectl cordon` also taints the node node.kubernetes.io/unschedulable:NoSchedule, and the
    node lifecycle controller taints a NotReady node not-ready (Ready=False) or unreachable (Ready=Unknown),
    NoSchedule and NoExecute: the warning said each problem twice ("unschedulable, tainted
    node.kubernetes.io/unschedulable:NoSchedule (...)"). Said once; a taint saying something else is still named,
    and so is the not-ready taint of a node Ready again (the controller has not taken it off yet)."""
    def problems(unschedulable: bool, conditions: list[dict[str, str]], *taints: tuple[str, str]) -> tuple[str, ...]:
        node = node_gpus("h1", {"nvidia.com/gpu.product": H100}, {"nvidia.com/gpu": "8"}, unschedulable, conditions,
                         [{"key": key, "effect": effect} for key, effect in taints])
        assert node is not None and not (node.schedulable and node.ready)
        return node.problems

    cordon = ("node.kubernetes.io/unschedulable", "NoSchedule")
    not_ready = [("node.kubernetes.io/not-ready", "NoSchedule"), ("node.kubernetes.io/not-ready", "NoExecute")]
    unreachable = [("node.kubernetes.io/unreachable", "NoSchedule"), ("node.kubernetes.io/unreachable", "NoExecute")]
    assert problems(True, READY, cordon) == ("unschedulable",)
    assert problems(False, NOT_READY, *not_ready) == ("Ready=False",)
    assert problems(False, [{"type": "Ready", "status": "Unknown"}], *unreachable) == ("Ready=Unknown",)
    assert problems(False, [], *not_ready) == ("no Ready condition",)
    assert problems(True, NOT_READY, cordon, *not_ready, *unreachable) == ("unschedulable", "Ready=False")
    assert problems(True, READY, cordon, ("dedicated", "NoSchedule")) == (
        "unschedulable", "tainted dedicated:NoSchedule (rendered pods tolerate only nvidia.com/gpu:NoSchedule)")
    assert problems(False, READY, not_ready[1]) == (
        "tainted node.kubernetes.io/not-ready:NoExecute (rendered pods tolerate only nvidia.com/gpu:NoSchedule)",)
    assert problems(False, READY, cordon) == (  # tainted by hand, not cordoned: it keeps the pods off all the same
        "tainted node.kubernetes.io/unschedulable:NoSchedule (rendered pods tolerate only nvidia.com/gpu:NoSchedule)",)
    warning = build_inventory([NodeGpus("h1", H100, 8, False, True, problems=problems(True, READY, cordon))]).warnings()
    assert warning == ["GPU nodes not counted (1): h1 (unschedulable)"]


# Node warnings as earlier releases wrote them (git history of inferplan/operator/inventory.py: 29b6ca5 listed the
# unknown and MIG/shared products unbounded, 6667f79 added the skipped nodes; a cordoned node named its own
# taint too until 2026-12-06), still in the statuses they wrote.
EARLIER_NODE_WARNINGS = (
    "GPU products the catalog does not know are not counted: NVIDIA-Future-GPU",
    "MIG slices and shared GPUs are not whole GPUs for serving a model and are not counted: "
    "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb, NVIDIA-L4-SHARED",
    "GPU nodes not counted (2): drained (unschedulable, Ready=False), bare (no allocatable nvidia.com/gpu)",
    "GPU nodes not counted (1): h1 (unschedulable, tainted node.kubernetes.io/unschedulable:NoSchedule (rendered "
    "pods tolerate only nvidia.com/gpu:NoSchedule))",
)


def test_every_node_warning_the_inventory_writes_or_wrote_is_replaced_when_the_nodes_change() -> None:
    """`status.with_inventory_warnings` tells the warnings about the nodes from a plan's own by their opening text
    (`is_inventory_warning`): one it did not recognise would stay in the status beside the new one, describing nodes
    as they no longer are, after every rewrite. Every kind the inventory writes now (each list bounded, a node name
    longer than the warning holds) and as earlier releases wrote them is recognised, and the reconcile's own warnings
    about the cluster (a GPU type absent: planning, not the nodes, rewrites those) are not."""
    long = "n" * 1100
    nodes = [node("cordoned", schedulable=False), node("down", ready=False), node("empty", gpus=0),
             node(long, ready=False), node("future", "NVIDIA-Future-GPU"),
             node("slice", "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"), node("h2"),
             *(node(f"gone-{i}", ready=False) for i in range(20))]
    nodes.append(NodeGpus("bare", "", 8, True, True, problems=(NO_PRODUCT_LABEL,)))
    written = build_inventory(nodes).warnings()
    assert len(written) == 3 and "and 15 more" in written[2]
    alone = build_inventory([node(long, ready=False)]).warnings()
    assert alone == ["GPU nodes not counted (1): "]  # too long to name: the head alone, still recognised
    for warning in (*written, *alone, *EARLIER_NODE_WARNINGS):
        assert is_inventory_warning(warning), warning
        assert with_inventory_warnings(["the plan's own", warning], []) == ["the plan's own"]
    for own in ("left out L4: the cluster has no schedulable GPUs of that type (constraints.planAbsentGpuTypes plans "
                "them anyway)", "planned for L4 although the cluster has no schedulable GPUs of that type"):
        assert not is_inventory_warning(own)


def test_the_taint_a_node_is_named_by_does_not_depend_on_the_order_of_its_taints() -> None:
    # Taints are a list the node lifecycle controller and kubectl taint add to in whatever order they come; the
    # same taints in another order must not rewrite the inventory warning a plan's status carries.
    ready = [{"type": "Ready", "status": "True"}]
    taints = [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
              {"key": "dedicated", "value": "training", "effect": "NoSchedule"}]
    seen = {node_gpus("h1", {"nvidia.com/gpu.product": H100}, {"nvidia.com/gpu": "8"}, False, ready, order)
            for order in (taints, taints[::-1])}
    assert len(seen) == 1
    (node,) = seen
    assert node is not None
    assert node.problems == ("tainted dedicated=training:NoSchedule (rendered pods tolerate only "
                             "nvidia.com/gpu:NoSchedule)",)
