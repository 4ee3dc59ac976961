"""The controller's inventory path with many nodes, in process (prints figures; asserts nothing).

Usage (from the repository root):

    python bench/bench_controller_inventory.py [--nodes 1000 5000] [--calls 200]

For each node count it fills one of kopf's own indexes (`OperatorIndexer`, as `handlers.gpu_nodes` feeds it) with
that many GPU nodes of six types, makes a `Controller` reading it as the operator does (`handlers.configure`:
the index's values and its count), and times what every plan event and every wake of the checker asks for:
`Controller.inventory()` with the nodes unchanged, `Controller.seen()` of a new plan (which asks for it), and
`Controller.inventory()` after one node event (a node cordoned: `nodes_changed`, then the index read again and
the inventory built again). No API server: the operator's whole cost under load is bench_operator_load.py's.
"""

from __future__ import annotations

import argparse
import sys
import timeit
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from kopf._core.engines.indexing import OperatorIndexer

from inferplan.observe.prometheus import EndpointsFile
from inferplan.operator.controller import Controller
from inferplan.operator.inventory import NodeGpus, node_gpus
from inferplan.operator.pool import PlannerPool
from inferplan.operator.settings import OperatorSettings

TYPES = ("NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "NVIDIA-L40S", "NVIDIA-L4", "NVIDIA-H200", "NVIDIA-A10G")
READY = [{"type": "Ready", "status": "True"}]


def gpu_node(i: int, cordoned: bool = False) -> NodeGpus:
    name = f"node-{i}"
    node = node_gpus(name, {"nvidia.com/gpu.product": TYPES[i % len(TYPES)]}, {"nvidia.com/gpu": "8"}, cordoned,
                     READY)
    assert node is not None
    return node


def index(indexer: OperatorIndexer, i: int, node: NodeGpus) -> None:
    indexer.replace((None, node.node, f"uid-{i}"), {node.node: node})


def measure(count: int, calls: int) -> str:
    indexer = OperatorIndexer()
    for i in range(count):
        index(indexer, i, gpu_node(i))
    nodes_index: Any = indexer.index
    threads = ThreadPoolExecutor(1)
    controller = Controller(OperatorSettings(verify=False), pool=cast(PlannerPool, None), api=threads,
                            observe=threads, endpoints=EndpointsFile(None), identity="bench", priority=0,
                            nodes=lambda: [value for store in nodes_index.values() for value in store],
                            node_count=lambda: len(nodes_index))
    controller.inventory()
    unchanged = timeit.timeit(controller.inventory, number=calls) / calls
    spec = {"model": {"name": "m"}, "constraints": {"gpuTypes": ["NVIDIA-L4"]}}
    made = iter(range(calls))

    def seen() -> None:
        n = next(made)
        controller.seen(f"uid-{n}", "bench", f"plan-{n}", 1, spec, None)

    new_plan = timeit.timeit(seen, number=calls) / calls
    cordoned = iter(range(calls))

    def node_event() -> None:
        i = next(cordoned) % count
        index(indexer, i, gpu_node(i, cordoned=True))
        controller.nodes_changed()
        controller.inventory()

    changed = timeit.timeit(node_event, number=calls) / calls
    threads.shutdown()
    return (f"{count} nodes: inventory() unchanged {unchanged * 1e6:.1f} us/call; seen(new plan) "
            f"{new_plan * 1e6:.1f} us/call; a node event then inventory() {changed * 1e3:.2f} ms/call")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    for count in args.nodes:
        print(measure(count, args.calls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
