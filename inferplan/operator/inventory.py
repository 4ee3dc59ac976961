"""The cluster's GPU inventory: which whole GPUs of which catalog types the plan could use.

The operator keeps one small `NodeGpus` per node (built by `node_gpus` from the node's labels, allocatable
resources, `spec.unschedulable` and conditions) and folds them into an `Inventory` with `build_inventory`.
Both are pure: plain data in, plain data out.

What counts: allocatable GPUs on schedulable, ready nodes whose product label the GPU catalog knows.
MIG slices and shared (time-sliced / MPS) GPUs are not whole GPUs for serving a model, so they are reported
in the warnings but never counted; products the catalog does not know are reported the same way, never raised.
GPU nodes left out for another reason (cordoned, not Ready or without a Ready condition, no allocatable GPUs)
are named in the warnings with the reason, at most MAX_NAMED of them. One plan's warnings (`Inventory.usable`)
name only the nodes and labels of the GPU types it may use, and those of no type the catalog knows.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from inferplan.deploy.manifests import gpu_tolerations, tolerated
from inferplan.planner.catalog.gpus import AMD, NVIDIA, GpuVendor, parse_gpu_product, resolve_gpu
from inferplan.planner.names import CatalogLookupError
from inferplan.planner.spec import NETWORK_LABEL

__all__ = ["AMD", "NVIDIA", "GpuVendor", "Inventory", "InventoryEntry", "NodeGpus", "NodeSize", "build_inventory",
           "is_inventory_warning", "node_gpus"]


_VENDORS = (NVIDIA, AMD)  # a node labelled by both is read as NVIDIA

_WHOLE_NUMBER = re.compile(r"^\s*\+?(\d+)\s*$")


class NodeSize(BaseModel):
    """Nodes of one GPU type with the same number of allocatable whole GPUs."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    gpus: int = Field(ge=1, description="Allocatable GPUs of the type on each of these nodes.")
    nodes: int = Field(ge=1, description="Nodes with that many.")


class InventoryEntry(BaseModel):
    """GPUs of one type the plan could use: allocatable on schedulable, ready nodes."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    gpu_type: str = Field(max_length=64, description="Canonical GPU key of the catalog.")
    product_label: str = Field(max_length=63, description="The node label value that selects these GPUs.")
    gpus: int = Field(ge=0, description="Allocatable GPUs of this type on schedulable, ready nodes.")
    nodes: int = Field(ge=0, description="Nodes that contribute them.")
    gpus_per_node: int = Field(ge=0, description="Most GPUs of this type on one node (bounds tensor parallelism).")
    network_gbps: float | None = Field(
        default=None, ge=0, description=f"The least {NETWORK_LABEL} label of these nodes, each GPU's network "
        "bandwidth between nodes [Gbit/s]; absent unless every node of the type has the label.")
    node_sizes: list[NodeSize] | None = Field(
        default=None, description="Where the nodes of the type differ in allocatable GPUs: how many nodes have each "
        "count, most GPUs first (where replicas fit, the planner places them on these nodes); absent where every node "
        "has gpusPerNode.")

    def node_gpus(self) -> tuple[int, ...]:
        """The GPUs of each node of the type, most first (`PlanRequest.node_gpus`)."""
        if self.node_sizes is None:
            return (self.gpus_per_node,) * self.nodes
        return tuple(size.gpus for size in self.node_sizes for _ in range(size.nodes))


@dataclass(frozen=True)
class NodeGpus:
    """The small value the operator keeps per node in a kopf index (never the whole Node object)."""

    node: str
    product: str  # raw label value, e.g. "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb" or "AMD_Instinct_MI300X_OAM"
    gpus: int  # allocatable GPUs (or MIG slices / shared replicas, as the device plugin advertises them)
    schedulable: bool  # not spec.unschedulable
    ready: bool  # condition Ready == "True"
    network_gbps: float | None = None  # the NETWORK_LABEL label, where it is a positive number
    # What the node object lacks for its GPUs to count, in words ("no Ready condition", "no allocatable
    # nvidia.com/gpu"): the reasons the inventory names it with (node_gpus fills it in).
    problems: tuple[str, ...] = ()


def _count(value: object) -> int:
    """A non-negative whole quantity ("8", 8) as an int; anything else (missing, "1.5", "-1", "abc") is 0."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(value, 0)
    match = _WHOLE_NUMBER.match(value) if isinstance(value, str) else None
    return int(match.group(1)) if match else 0


_CORDON_TAINTS = ("node.kubernetes.io/unschedulable",)
_NOT_READY_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
NO_PRODUCT_LABEL = "GPUs but no GPU product label (GPU Feature Discovery or the AMD node labeller not running?)"


def node_gpus(
    name: str,
    labels: Mapping[str, str],
    allocatable: Mapping[str, str],
    unschedulable: bool,
    conditions: Sequence[Mapping[str, str]],
    taints: Sequence[Mapping[str, str]] = (),
) -> NodeGpus | None:
    """The GPU facts of one node, or None when it has neither a GPU product label nor allocatable GPUs.

    `labels` and `allocatable` are the node's `metadata.labels` and `status.allocatable` (quantities are
    strings such as "8"); `conditions` is `status.conditions` and `taints` `spec.taints`. The GPU count is the
    vendor's allocatable resource (`nvidia.com/gpu`, `amd.com/gpu`) and, only where the node does not advertise
    it, the vendor's `gpu.count` label, unless it advertises them as another resource of the vendor
    (`nvidia.com/gpu.shared`, `nvidia.com/mig-<profile>`: shared GPUs or MIG slices, which count 0 and are named
    in the node's problems); a quantity that is not a non-negative whole number counts as 0. A node
    with allocatable GPUs and no product label is kept (product "") so that the inventory can name it; a
    NoSchedule or NoExecute taint keeps the pods the operator renders off the node, so its GPUs do not count either,
    unless they tolerate it: the vendor's resource as the key with NoSchedule (`nvidia.com/gpu=present:NoSchedule`,
    what GPU node pools carry; `manifests.gpu_tolerations`). The taints Kubernetes puts on a cordoned node
    (`node.kubernetes.io/unschedulable`) and on one not Ready (`node.kubernetes.io/not-ready`, `unreachable`) are
    not named beside the problem they say ("unschedulable", "Ready=False"): a cordoned node read
    "unschedulable, tainted node.kubernetes.io/unschedulable:NoSchedule (...)".
    """
    for vendor in _VENDORS:
        product = (labels.get(vendor.product_label) or "").strip()
        if product:
            break
    else:
        unlabelled = sum(_count(allocatable.get(v.resource)) for v in _VENDORS)
        if unlabelled <= 0:
            return None
        return NodeGpus(node=name, product="", gpus=unlabelled, schedulable=not unschedulable, ready=True,
                        problems=(NO_PRODUCT_LABEL,))
    problems = []
    # The vendor's other resources: what the device plugin advertises the GPUs as where they are not whole
    # (time-slicing or MPS renamed to nvidia.com/gpu.shared, MIG mixed strategy nvidia.com/mig-<profile>). The
    # gpu.count label still counts the physical GPUs, but a pod that asks for nvidia.com/gpu never lands there.
    domain = vendor.resource.split("/")[0] + "/"
    sliced = sorted(r for r in allocatable if r.startswith(domain) and r != vendor.resource and _count(allocatable[r]))
    if vendor.resource in allocatable:
        gpus = _count(allocatable[vendor.resource])
        sliced = []
    elif sliced:
        gpus = 0
        problems.append(f"GPUs advertised only as {', '.join(sliced[:3])}{' ...' if len(sliced) > 3 else ''}: "
                        f"shared or MIG slices, no whole {vendor.resource}")
    else:
        gpus = _count(labels.get(vendor.count_label))
    if unschedulable:
        problems.append("unschedulable")
    ready_condition = next((c for c in conditions if c.get("type") == "Ready"), None)
    ready = ready_condition is not None and ready_condition.get("status") == "True"
    # Kubernetes taints a cordoned node node.kubernetes.io/unschedulable and a node not Ready not-ready or
    # unreachable: the problem named already ("unschedulable", "Ready=False"), said once.
    said = {*(_CORDON_TAINTS if unschedulable else ()), *(_NOT_READY_TAINTS if not ready else ())}
    keeping_off = [t for t in taints if isinstance(t, Mapping) and t.get("effect") in ("NoSchedule", "NoExecute")
                   and t.get("key") not in said and not tolerated(t, gpu_tolerations(vendor.resource))]
    if keeping_off:  # named by the first by key, not by list order: the same taints reordered change nothing
        taint = min(keeping_off, key=lambda t: (str(t.get("key")), str(t.get("effect")), str(t.get("value") or "")))
        value = f"={taint.get('value')}" if taint.get("value") else ""
        problems.append(f"tainted {taint.get('key')}{value}:{taint.get('effect')} (rendered pods tolerate only "
                        f"{vendor.resource}:NoSchedule)")
        unschedulable = True
    if ready_condition is None:
        problems.append("no Ready condition")
    elif not ready:
        problems.append(f"Ready={ready_condition.get('status') or 'unset'}")
    if gpus <= 0 and not sliced:
        problems.append(f"no allocatable {vendor.resource}" if vendor.resource not in allocatable
                        and vendor.count_label not in labels else f"0 allocatable {vendor.resource}")
    return NodeGpus(node=name, product=product, gpus=gpus, schedulable=not unschedulable, ready=ready,
                    network_gbps=_gbps(labels.get(NETWORK_LABEL)), problems=tuple(problems))


def _gbps(value: object) -> float | None:
    """A positive bandwidth label ("400", "200.5") as a float; anything else (missing, "0", "fast") is None."""
    try:
        gbps = float(str(value).strip()) if value is not None else math.nan
    except ValueError:
        return None
    return gbps if math.isfinite(gbps) and gbps > 0 else None


MAX_NAMED = 10
"""Skipped nodes named in the warnings (the rest are counted: "and N more")."""
_MAX_WARNING = 1024  # characters of one status warning (PlanStatus.warnings)


@dataclass(frozen=True)
class Inventory:
    """Whole GPUs per catalog type on schedulable, ready nodes, and the labels and nodes that were not counted."""

    entries: tuple[InventoryEntry, ...]  # per canonical GPU type, sorted by key
    unknown_products: tuple[str, ...]  # product labels the catalog does not know (sorted, unique)
    shared_or_mig: tuple[str, ...]  # product labels with -MIG-<profile> / -SHARED suffixes (sorted, unique)
    restricted: bool = False  # entries limited to the GPU types one plan may use (`usable`)
    # GPU nodes left out, as (node, why, catalog GPU key or None where the catalog knows no type of its label),
    # sorted: cordoned, not ready, no allocatable GPUs, another spelling
    skipped: tuple[tuple[str, str, str | None], ...] = ()

    def usable(self, gpu_types: frozenset[str] | None) -> Inventory:
        """What one plan's status reports, whose constraints.gpuTypes are the catalog GPU types `gpu_types` (None:
        every type): their entries, and the warnings about their nodes and labels and those of no type the catalog
        knows (unknown products, nodes without a product label), so that a node of a type the plan cannot use
        changes nothing in its status: not its inventory, nor its warnings."""
        if gpu_types is None:
            return self
        return replace(self, entries=tuple(e for e in self.entries if e.gpu_type in gpu_types), restricted=True,
                       shared_or_mig=tuple(p for p in self.shared_or_mig if _gpu_key(p) in gpu_types | {None}),
                       skipped=tuple(s for s in self.skipped if s[2] is None or s[2] in gpu_types))

    def available(self) -> dict[str, int]:
        """Canonical GPU key -> allocatable GPUs (types with none are left out); PlanRequest.available_gpus."""
        return {entry.gpu_type: entry.gpus for entry in self.entries if entry.gpus > 0}

    def per_node(self) -> dict[str, int]:
        """Canonical GPU key -> most GPUs of that type on one node; PlanRequest.gpus_per_node."""
        return {entry.gpu_type: entry.gpus_per_node for entry in self.entries if entry.gpus > 0}

    def node_gpus(self) -> dict[str, tuple[int, ...]]:
        """Canonical GPU key -> the allocatable GPUs of each of its nodes, most first; PlanRequest.node_gpus (where
        the planner places the replicas)."""
        return {entry.gpu_type: entry.node_gpus() for entry in self.entries if entry.gpus > 0}

    def product_labels(self) -> dict[str, str]:
        """Canonical GPU key -> the node label value its nodes carry (`InventoryEntry.product_label`); what a
        recommendation's node selector must say to reach them (PlanRequest.product_labels)."""
        return {entry.gpu_type: entry.product_label for entry in self.entries if entry.gpus > 0}

    def network_gbps(self, gpu_types: Iterable[str]) -> float | None:
        """The least network bandwidth [Gbit/s per GPU] of the nodes of `gpu_types` (those the inventory has),
        None unless every one of their nodes is labelled (`InventoryEntry.network_gbps`)."""
        wanted = set(gpu_types)
        figures = [entry.network_gbps for entry in self.entries if entry.gpu_type in wanted and entry.gpus > 0]
        if not figures or any(f is None for f in figures):
            return None
        return min(f for f in figures if f is not None)

    @property
    def total_gpus(self) -> int:
        """Whole GPUs of every known type."""
        return sum(entry.gpus for entry in self.entries)

    def warnings(self) -> list[str]:
        """One sentence per kind of GPU that nodes carry but the inventory does not count."""
        warnings: list[str] = []
        if self.unknown_products:
            warnings.append(_listed(_UNKNOWN_HEAD, self.unknown_products))
        if self.shared_or_mig:
            warnings.append(_listed(_SHARED_HEAD, self.shared_or_mig))
        if self.skipped:
            warnings.append(_listed(f"{_SKIPPED_HEAD}({len(self.skipped)}): ",
                                    [f"{node} ({why})" for node, why, _ in self.skipped]))
        return warnings


_UNKNOWN_HEAD = "GPU products the catalog does not know are not counted: "
_SHARED_HEAD = "MIG slices and shared GPUs are not whole GPUs for serving a model and are not counted: "
_SKIPPED_HEAD = "GPU nodes not counted "


def is_inventory_warning(warning: str) -> bool:
    """Whether a status warning is one of `Inventory.warnings` (about the nodes as they were when it was written):
    those a status's warnings replace when the nodes change (`status.with_inventory_warnings`)."""
    return warning.startswith((_UNKNOWN_HEAD, _SHARED_HEAD, _SKIPPED_HEAD))


def _gpu_key(product: str) -> str | None:
    """The catalog key of a product label, its MIG or sharing suffix left out; None where the catalog knows none."""
    try:
        return resolve_gpu(parse_gpu_product(product).base).key
    except CatalogLookupError:
        return None


def _listed(head: str, items: Sequence[str]) -> str:
    """`head` and the items, comma separated: at most MAX_NAMED, within a status warning's length, then "and N
    more" ("GPU nodes not counted (2): a (no Ready condition), b (unschedulable)"). A cluster of many MIG
    profiles or unknown products had made one warning longer than a status holds, and no plan was answered."""
    text = head
    for count in range(1, min(len(items), MAX_NAMED) + 1):
        more = len(items) - count
        longer = head + ", ".join(items[:count]) + (f", and {more} more" if more else "")
        if len(longer) > _MAX_WARNING:
            break
        text = longer
    return text


def _why_skipped(node: NodeGpus) -> str:
    """Why a node's GPUs do not count, in words (from what node_gpus found, else from its flags)."""
    if node.problems:
        return ", ".join(node.problems)
    reasons = [*(["unschedulable"] if not node.schedulable else []), *(["not Ready"] if not node.ready else []),
               *(["no allocatable GPUs"] if node.gpus <= 0 else [])]
    return ", ".join(reasons)


def _node_sizes(counts: Sequence[int]) -> list[NodeSize] | None:
    """The nodes by their GPU counts, most first (`InventoryEntry.node_sizes`); None where they are all the same."""
    if min(counts) == max(counts):
        return None
    return [NodeSize(gpus=gpus, nodes=counts.count(gpus)) for gpus in sorted(set(counts), reverse=True)]


def build_inventory(nodes: Iterable[NodeGpus]) -> Inventory:
    """Fold per-node GPU facts into the inventory.

    Unschedulable or not-ready nodes do not count (nor do their product labels appear in the warnings: they are
    not part of what the plan could use); they are listed in `skipped` with the reason. A node with 0 allocatable
    GPUs contributes nothing and is listed the same way. Each type's
    `product_label` is the label value its nodes carry, so it is the value that selects them in this cluster (a
    recommendation's node selector); where nodes spell one type's product differently (two driver or labeller
    versions), it is the spelling with the most GPUs, and the nodes of the other spellings are listed in `skipped`
    and not counted: the node selector would not reach them, and replicas planned on their GPUs stayed Pending. Its
    `node_sizes` say how many nodes have each count where they differ (`Inventory.node_gpus`: where the planner
    places replicas).
    """
    unknown: set[str] = set()
    shared_or_mig: set[str] = set()
    skipped: set[tuple[str, str, str | None]] = set()
    typed: list[tuple[str, NodeGpus]] = []
    label_gpus: dict[str, dict[str, int]] = {}
    # Each product label read once: thousands of nodes carry a few labels, and reading one was most of the time
    # (bench/bench_controller_inventory.py).
    read: dict[str, tuple[bool, str | None]] = {}  # label -> (a MIG slice or shared GPU, its catalog key or None)
    for node in nodes:
        if node.product and node.product not in read:
            label = parse_gpu_product(node.product)
            read[node.product] = (bool(label.mig_profile or label.shared), _gpu_key(node.product))
        if not (node.schedulable and node.ready) or not node.product:
            skipped.add((node.node, _why_skipped(node), read[node.product][1] if node.product else None))
            continue
        sliced, key = read[node.product]
        if sliced:
            shared_or_mig.add(node.product)
            continue
        if key is None:
            unknown.add(node.product)
            continue
        if node.gpus <= 0:
            skipped.add((node.node, _why_skipped(node), key))
            continue
        typed.append((key, node))
        by_label = label_gpus.setdefault(key, {})
        by_label[node.product] = by_label.get(node.product, 0) + node.gpus
    chosen = {key: min(by_label, key=lambda value: (-by_label[value], value)) for key, by_label in label_gpus.items()}
    gpus: dict[str, int] = {}
    node_count: dict[str, int] = {}
    most_on_node: dict[str, int] = {}
    per_node: dict[str, list[int]] = {}
    network: dict[str, list[float | None]] = {}
    for key, node in typed:
        if node.product != chosen[key]:
            skipped.add((node.node, f"labelled {node.product}, another spelling of {key}: a node selector reaches "
                                    f"the nodes of one label value, {chosen[key]} (the most GPUs)", key))
            continue
        gpus[key] = gpus.get(key, 0) + node.gpus
        node_count[key] = node_count.get(key, 0) + 1
        most_on_node[key] = max(most_on_node.get(key, 0), node.gpus)
        per_node.setdefault(key, []).append(node.gpus)
        network.setdefault(key, []).append(node.network_gbps)
    entries = tuple(
        InventoryEntry(
            gpu_type=key,
            product_label=chosen[key],
            gpus=gpus[key],
            nodes=node_count[key],
            gpus_per_node=most_on_node[key],
            network_gbps=None if None in network[key] else min(f for f in network[key] if f is not None),
            node_sizes=_node_sizes(per_node[key]),
        )
        for key in sorted(gpus)
    )
    return Inventory(entries=entries, unknown_products=tuple(sorted(unknown)),
                     shared_or_mig=tuple(sorted(shared_or_mig)),
                     skipped=tuple(sorted(skipped, key=lambda s: (s[0], s[1], s[2] or ""))))
