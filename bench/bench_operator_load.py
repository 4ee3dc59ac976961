"""The operator under load on a real API server (prints figures; asserts nothing).

Usage (from the repository root; needs etcd, as the e2e tests do):

    python bench/bench_operator_load.py [--plans 1000] [--namespaces 20] [--nodes N] [--churn SECONDS] [--seed 8]
                                        [--profile FILE] [--log FILE]

    # the scale of issue 15: 10,000 plans in 200 namespaces, 2,000 nodes of 8 types, a minute of node churn
    python bench/bench_operator_load.py --plans 10000 --namespaces 200 --nodes 2000 --churn 60

What it does:
  1. starts ../shared/k8s-testenv in its own run folder, applies the CRD, creates GPU nodes (by default 18 nodes
     of six types; `--nodes N`: N nodes spread evenly over eight types);
  2. starts `inferplan operator` as a process, as deployed: all namespaces, /metrics on, default settings;
  3. applies N plans (default 1,000) across the namespaces at once: the example plans of examples/plans/
     varied (rates, prompt lengths, gpuTypes restricted to a subset as users do, a few whole-cluster plans),
     plus 2% with an unknown model (must be Ready=False InvalidModel) and 2% that allow only a GPU type the
     cluster lacks (must be Ready=False NoGpuTypes);
  4. reports the time until every plan has a status for its generation with the expected Ready, the p50/p99
     time from apply to status, the operator's CPU seconds (/proc/PID/stat, its process tree: the operator,
     its planner workers) and memory: the operator process's peak RSS (VmHWM of /proc/PID/status) and the
     process tree's peak PSS (sampled every 0.5 s; summed RSS would count shared libraries once per process);
  5. adds one node of one GPU type (L40S) and reports the time until every plan that can use that type and
     whose answer's L40S range (`minGpus`-`maxGpus`: the counts its answer holds for) the new count leaves has
     been re-planned for a range that holds it, how many of those were written (their answer changed) and how
     many came out the same and were not written, and whether any other plan was written to (resourceVersion)
     meanwhile or in the following quiet period; then the CPU used at rest;
  6. with `--churn S`: for S seconds, every second one node joins and another leaves (random types, the L40S
     count kept); reports the status writes meanwhile, how many of them changed no plan's answer (the
     recommendation, alternatives, predictions and Ready/Feasible: a write that only moves an inventory range),
     the re-plans that wrote nothing, and the time from the last change until every plan's answer holds the
     final inventory.

What each answer holds for is read from the operator's log, one ordered source: a status write names the ranges
written ("status written ... holds for L40S 20-27, ..."), and a re-plan whose answer came out the same names the
ranges the operator keeps without writing ("the same answer: nothing written (holds for ...)").

Targets (issue 8): all 1,000 within 60 s on a 2-core machine, operator memory under 300 MiB, the inventory
change within 30 s. Targets at the scale of issue 15 (10,000 plans, 2,000 nodes, a minute of churn): every plan
answered within 120 s of the first apply, the operator's process tree at most 400 MiB, no status write to a plan
whose answer did not change, the churn answered within 30 s. Other load on the machine inflates the figures:
check `uptime` first.

`--profile FILE` runs the operator under cProfile (its main thread: the event loop) and writes the stats to
FILE (read them with `python -m pstats FILE`). `--log FILE` keeps the operator's log. The operator's settings
are read from the environment as usual (e.g. INFERPLAN_PLANNER_PROCESSES=0 to compare with threads).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Self

import yaml

from inferplan.resource import API_VERSION, GROUP, KIND, PLURAL, VERSION

REPO = Path(__file__).resolve().parents[1]
TESTENV = Path(os.environ.get("K8S_TESTENV") or REPO.parent / "shared" / "k8s-testenv")

# GPU product label -> (nodes, GPUs per node). L40S is the type whose node count changes in step 5.
NODES = {
    "NVIDIA-H100-80GB-HBM3": (3, 8),
    "NVIDIA-A100-SXM4-80GB": (3, 8),
    "NVIDIA-L40S": (4, 4),
    "NVIDIA-L4": (4, 8),
    "NVIDIA-H200": (2, 8),
    "AMD_Instinct_MI300X_OAM": (2, 8),
}
# `--nodes N`: N nodes spread evenly over these eight types (GPUs per node).
NODE_TYPES = {
    "NVIDIA-H100-80GB-HBM3": 8, "NVIDIA-A100-SXM4-80GB": 8, "NVIDIA-L40S": 4, "NVIDIA-L4": 8, "NVIDIA-H200": 8,
    "AMD_Instinct_MI300X_OAM": 8, "NVIDIA-A10G": 4, "NVIDIA-A100-SXM4-40GB": 8,
}
CHANGED_PRODUCT, CHANGED_KEY = "NVIDIA-L40S", "L40S"
ABSENT_PRODUCT = "NVIDIA-B200"  # in the catalog, not in the cluster


def node_layout(count: int | None) -> dict[str, tuple[int, int]]:
    """GPU product label -> (nodes, GPUs per node): the default table, or `count` nodes over NODE_TYPES."""
    if count is None:
        return dict(NODES)
    per_type, extra = divmod(count, len(NODE_TYPES))
    return {product: (per_type + (1 if i < extra else 0), gpus) for i, (product, gpus) in enumerate(NODE_TYPES.items())}


def node_name(product: str, n: int | str) -> str:
    return f"{product.lower().replace('_', '-')}-{n}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_body(name: str, product: str, gpus: int) -> dict[str, Any]:
    resource = "amd.com/gpu" if product.startswith("AMD") else "nvidia.com/gpu"
    label = "amd.com/gpu.product-name" if product.startswith("AMD") else "nvidia.com/gpu.product"
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {label: product}},
            "status": {"allocatable": {resource: str(gpus)}, "capacity": {resource: str(gpus)},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


# ----------------------------------------------------------------------------------------------------------
# The plans


def example_specs() -> list[dict[str, Any]]:
    specs = []
    for path in sorted((REPO / "examples" / "plans").glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        specs.append(data["spec"] if data.get("kind") == KIND else data)
    return specs


def _scaled(dist: dict[str, Any], factor: float) -> dict[str, Any]:
    """A token-length distribution scaled by `factor` (mean and p95 together, so p95 >= mean holds)."""
    return {k: (max(1, round(v * factor)) if k in ("mean", "p95") else v) for k, v in dist.items()}


def make_plans(count: int, namespaces: list[str], seed: int) -> list[dict[str, Any]]:
    """`count` plans with `expected` (None: Ready=True; else the Ready=False reason) and `l40s` (can use L40S)."""
    from inferplan.planner.catalog.gpus import resolve_gpu

    rng = random.Random(seed)
    bases = example_specs()
    plans = []
    for i in range(count):
        spec = copy.deepcopy(bases[i % len(bases)])
        workload = spec["workload"]
        workload["requestsPerSecond"] = f"{float(workload['requestsPerSecond']) * rng.uniform(0.25, 3.0):.2f}"
        workload["promptTokens"] = _scaled(workload["promptTokens"], rng.choice([0.5, 0.75, 1.0, 1.5, 2.0]))
        constraints = spec.setdefault("constraints", {})
        listed = constraints.get("gpuTypes")
        roll = rng.random()
        if listed and roll < 0.6:  # most users narrow the types down to a couple they are allowed to use
            constraints["gpuTypes"] = rng.sample(listed, rng.randint(1, min(2, len(listed))))
        elif listed and roll < 0.75:  # some plan for the whole cluster
            del constraints["gpuTypes"]
        expected = None
        if i % 50 == 7:
            spec["model"] = {"name": f"acme/not-a-model-{i}"}
            expected = "InvalidModel"
        elif i % 50 == 33:
            constraints.pop("availableGpus", None)
            constraints.pop("gpusPerNode", None)
            constraints.pop("prices", None)
            constraints["gpuTypes"] = [ABSENT_PRODUCT]
            expected = "NoGpuTypes"
        if not constraints:
            del spec["constraints"]
        types = (spec.get("constraints") or {}).get("gpuTypes")
        can_use = not types or CHANGED_KEY in {resolve_gpu(t).key for t in types}
        plans.append({"namespace": namespaces[i % len(namespaces)], "name": f"plan-{i:04d}", "spec": spec,
                      "expected": expected, "l40s": can_use})
    return plans


# ----------------------------------------------------------------------------------------------------------
# Watching the plans


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions", []) if c.get("type") == kind), {})


class _Background:
    """`_run` in a daemon thread from `start()`, until it sees `stopped` set by `stop()`."""

    def __init__(self) -> None:
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Self:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()

    def _run(self) -> None:
        raise NotImplementedError


class PlanWatch(_Background):
    """Watches every plan (one watch stream, reconnected on errors) and calls `on_event(obj, t)` per event."""

    def __init__(self, objects: Any, on_event: Callable[[dict[str, Any], float], None]) -> None:
        super().__init__()
        self.objects, self.on_event = objects, on_event

    def _run(self) -> None:
        import kubernetes

        version = None
        while not self.stopped.is_set():
            try:
                if version is None:
                    listed = self.objects.list_cluster_custom_object(GROUP, VERSION, PLURAL)
                    now = time.monotonic()
                    for obj in listed["items"]:
                        self.on_event(obj, now)
                    version = listed["metadata"]["resourceVersion"]
                watch = kubernetes.watch.Watch()
                for event in watch.stream(self.objects.list_cluster_custom_object, GROUP, VERSION, PLURAL,
                                          resource_version=version, timeout_seconds=60):
                    obj = event["object"]
                    version = obj["metadata"]["resourceVersion"]
                    self.on_event(obj, time.monotonic())
                    if self.stopped.is_set():
                        watch.stop()
                        break
            except Exception:  # an expired version or a dropped stream: list again
                version = None
                time.sleep(0.2)


# The operator's log: what each plan's answer holds for. A status write says it ("status written ... holds for
# L40S 20-27, ..."), and so does a re-plan whose answer came out the same, which writes nothing ("the same answer:
# nothing written (holds for ...)"): the operator keeps those ranges to itself. One ordered source for both.
_HELD = re.compile(r"(?P<ns>[^\s/]+)/(?P<name>\S+): (?:status written for generation \d+ \(.*; holds for "
                   r"(?P<written>.*)\)|planned again for the GPU inventory, the same answer: nothing written "
                   r"\(holds for (?P<kept>.*)\))$")


def parse_ranges(text: str) -> dict[str, tuple[int, int | None]]:
    """"L40S 20-27, H100-SXM5-80GB 16-" -> {"L40S": (20, 27), "H100-SXM5-80GB": (16, None)}."""
    ranges: dict[str, tuple[int, int | None]] = {}
    for item in text.split(", ") if text != "no GPU type" else []:
        key, span = item.rsplit(" ", 1)
        low, high = span.split("-")
        ranges[key] = (int(low), int(high) if high else None)
    return ranges


class OperatorLog(_Background):
    """Tails the operator's log file: per plan, the ranges of its written status and of the answer the operator
    keeps without writing (a later re-plan with the same answer), and when the latest of them came."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        # plan -> (when, written ranges, kept ranges since that write or None, whether the latest line was a write)
        self.held: dict[tuple[str, str], tuple[float, dict[str, tuple[int, int | None]],
                                               dict[str, tuple[int, int | None]] | None, bool]] = {}
        self.kept = self.written = 0  # lines of each kind so far
        self.lock = threading.Lock()

    def _run(self) -> None:
        with open(self.path, errors="replace") as log:
            partial = ""
            while not self.stopped.is_set():
                chunk = log.readline()
                if not chunk:
                    time.sleep(0.1)
                    continue
                partial += chunk
                if not partial.endswith("\n"):
                    continue
                line, partial = partial.rstrip("\n"), ""
                if line.startswith("{"):  # the operator logs JSON when not on a terminal
                    try:
                        line = str(json.loads(line).get("message", ""))
                    except ValueError:
                        continue
                match = _HELD.search(line)
                if match is None:
                    continue
                key, now = (match["ns"], match["name"]), time.monotonic()
                with self.lock:
                    if match["kept"] is not None:
                        written = self.held.get(key, (0.0, {}, None, True))[1]
                        self.held[key] = (now, written, parse_ranges(match["kept"]), False)
                        self.kept += 1
                    else:
                        self.held[key] = (now, parse_ranges(match["written"]), None, True)
                        self.written += 1

    def holds(self, key: tuple[str, str], counts: dict[str, int]) -> bool:
        """Whether the plan's answer holds for `counts` (GPU key -> count) in each type it lists, as the operator
        decides: by its written status's ranges, or by those it keeps from a later re-plan with the same answer."""
        with self.lock:
            held = self.held.get(key)
        if held is None:
            return False

        def within(ranges: dict[str, tuple[int, int | None]]) -> bool:
            return all(low <= counts[gpu] and (high is None or counts[gpu] <= high)
                       for gpu, (low, high) in ranges.items() if gpu in counts)

        return within(held[1]) or (held[2] is not None and within(held[2]))

    def when(self, key: tuple[str, str]) -> tuple[float, bool] | None:
        """(when, written) of the plan's latest answer line."""
        with self.lock:
            held = self.held.get(key)
        return None if held is None else (held[0], held[3])


# ----------------------------------------------------------------------------------------------------------
# The operator's process tree


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants (a process pool's workers count as the operator)."""
    pids, todo = [], [pid]
    while todo:
        current = todo.pop()
        pids.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                todo += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
    return pids


def cpu_seconds(pid: int) -> float:
    """User + system CPU of the process tree (its live processes; ended children add theirs to cutime)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for p in _tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / ticks
    return total


def _status_kib(pid: int, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _pss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class MemorySampler:
    """The operator's memory, sampled every 0.5 s: the main process's peak RSS (VmHWM, as the kernel keeps it)
    and the process tree's (operator, planner workers, multiprocessing's resource tracker) summed PSS, whose
    peak is what a container memory limit sees (summed RSS would count shared library pages once per process)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_pss_kib = 0
        self.stopped = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self.stopped.wait(0.5):
            self.peak_pss_kib = max(self.peak_pss_kib, sum(_pss_kib(p) for p in _tree(self.pid)))

    def report(self) -> str:
        tree = _tree(self.pid)
        hwm = [_status_kib(p, "VmHWM") / 1024 for p in tree]
        pss_now = sum(_pss_kib(p) for p in tree) / 1024
        return (f"operator process peak RSS {hwm[0]:.0f} MiB; process tree ({len(tree)} processes): peak PSS "
                f"{self.peak_pss_kib / 1024:.0f} MiB, PSS now {pss_now:.0f} MiB, summed peak RSS {sum(hwm):.0f} MiB "
                f"({' + '.join(f'{m:.0f}' for m in hwm)})")


def reconciles(metrics_url: str) -> tuple[float, float]:
    """(count, sum of seconds) of inferplan_reconcile_duration_seconds from /metrics."""
    try:
        with urllib.request.urlopen(metrics_url, timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return math.nan, math.nan
    values = {}
    for line in text.splitlines():
        for key in ("inferplan_reconcile_duration_seconds_count", "inferplan_reconcile_duration_seconds_sum"):
            if line.startswith(key + " "):
                values[key] = float(line.split()[1])
    return (values.get("inferplan_reconcile_duration_seconds_count", math.nan),
            values.get("inferplan_reconcile_duration_seconds_sum", math.nan))


# ----------------------------------------------------------------------------------------------------------
# The run


def _answer(status: dict[str, Any] | None) -> str:
    """A status without what only records the inventory: the inventory entries and the InventoryAvailable
    condition. Two statuses with the same answer make the same recommendation, alternatives, predictions,
    Ready and Feasible."""
    status = dict(status or {})
    status.pop("inventory", None)
    status["conditions"] = [c for c in status.get("conditions", []) if c.get("type") != "InventoryAvailable"]
    return json.dumps(status, sort_keys=True)


def churn(seconds: float, core: Any, layout: dict[str, tuple[int, int]], by_key: dict[tuple[str, str], Any],
          writes: list[tuple[float, tuple[str, str], bool]], lock: threading.Lock, oplog: OperatorLog, pid: int,
          metrics_url: str, sampler: MemorySampler, seed: int, timeout: float) -> None:
    """Step 6: a node joins and another leaves every second for `seconds` (never L40S, whose count step 5 set),
    then wait until every plan's answer holds the final inventory (the operator's log); print the writes, how
    many changed no answer, and the re-plans that wrote nothing."""
    from inferplan.planner.catalog.gpus import resolve_gpu

    rng = random.Random(seed + 1)
    live = {product: [node_name(product, n) for n in range(count)] for product, (count, _) in layout.items()
            if product != CHANGED_PRODUCT}
    cpu0, (count0, _) = cpu_seconds(pid), reconciles(metrics_url)
    kept0 = oplog.kept
    t0 = time.monotonic()
    joined = 0
    while time.monotonic() - t0 < seconds:
        tick = time.monotonic()
        product = rng.choice(sorted(live))
        name = node_name(product, f"churn-{joined}")
        core.create_node(node_body(name, product, layout[product][1]))
        live[product].append(name)
        joined += 1
        leaving = rng.choice(sorted(p for p in live if live[p]))
        core.delete_node(live[leaving].pop(rng.randrange(len(live[leaving]))))
        time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
    t_last = time.monotonic()
    final = {resolve_gpu(product).key: len(names) * layout[product][1] for product, names in live.items()}
    final[CHANGED_KEY] = (layout[CHANGED_PRODUCT][0] + 1) * layout[CHANGED_PRODUCT][1]

    def current(key: tuple[str, str]) -> bool:
        return oplog.holds(key, final)

    deadline = t_last + timeout
    while time.monotonic() < deadline:
        if all(current(k) for k in by_key):
            break
        time.sleep(0.2)
    latest_answer = [oplog.when(k) for k in by_key]
    t_settled = max([t_last, *(w[0] for w in latest_answer if w is not None)])
    stale = sum(1 for k in by_key if not current(k))
    time.sleep(2.0)  # the last writes' watch events
    cpu1, (count1, _) = cpu_seconds(pid), reconciles(metrics_url)
    with lock:
        during = [(key, same) for t, key, same in writes if t >= t0]
    same_answer = sum(1 for _, same in during if same)
    print(f"churn: {joined} nodes joined and {joined} left over {t_last - t0:.0f} s; status writes {len(during)} to "
          f"{len({key for key, _ in during})} plans ({same_answer} of them with the same answer: only an inventory "
          f"range moved); re-planned with the same answer and not written: {oplog.kept - kept0}; reconciles "
          f"{count1 - count0:.0f}; operator CPU {cpu1 - cpu0:.1f} s")
    print(f"churn answered: every plan's answer holds the final inventory {t_settled - t_last:.1f} s after the "
          "last change"
          + (f" ({stale} still stale at the timeout)" if stale else ""))
    print(f"operator memory after the churn: {sampler.report()}")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else math.nan


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plans", type=int, default=1000)
    parser.add_argument("--namespaces", type=int, default=20)
    parser.add_argument("--nodes", type=int, help="this many GPU nodes over eight types (default: 18 of six types)")
    parser.add_argument("--churn", type=float, default=0.0,
                        help="seconds of node churn (one node joins and one leaves every second) at the end")
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=600.0, help="give up waiting after this many seconds")
    parser.add_argument("--profile", help="run the operator under cProfile, stats to this file")
    parser.add_argument("--log", help="keep the operator's log in this file")
    args = parser.parse_args()

    run = Path(tempfile.mkdtemp(prefix="inferplan-bench-"))
    env = dict(os.environ, TESTENV_PORTS="auto")
    env.setdefault("TESTENV_CACHE_DIR", str(Path.home() / ".cache" / "k8s-testenv"))
    started = subprocess.run([str(TESTENV / "start.sh"), str(run)], env=env, capture_output=True, text=True)
    if started.returncode != 0:
        print(started.stdout, started.stderr, file=sys.stderr)
        return 1
    kubeconfig = run / "admin.kubeconfig"
    os.environ["KUBECONFIG"] = str(kubeconfig)
    import kubernetes

    admin = kubernetes.config.new_client_from_config(str(kubeconfig))
    operator: subprocess.Popen[bytes] | None = None
    watch: PlanWatch | None = None
    oplog: OperatorLog | None = None
    try:
        core = kubernetes.client.CoreV1Api(admin)
        objects = kubernetes.client.CustomObjectsApi(admin)
        crds = kubernetes.client.ApiextensionsV1Api(admin)
        crds.create_custom_resource_definition(
            yaml.safe_load((REPO / "crds" / "inferplan.io_inferencecapacityplans.yaml").read_text()))
        while not any(c.type == "Established" and c.status == "True"
                      for c in crds.read_custom_resource_definition(f"{PLURAL}.{GROUP}").status.conditions or []):
            time.sleep(0.1)
        layout = node_layout(args.nodes)
        bodies = [node_body(node_name(product, n), product, gpus)
                  for product, (count, gpus) in layout.items() for n in range(count)]
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(core.create_node, bodies))
        namespaces = [f"bench-{i:02d}" for i in range(args.namespaces)]
        for ns in [*namespaces, "bench-canary"]:
            core.create_namespace({"metadata": {"name": ns}})

        metrics_port = free_port()
        op_env = dict(os.environ, KUBECONFIG=str(kubeconfig), INFERPLAN_METRICS_PORT=str(metrics_port),
                      INFERPLAN_HEALTH_PORT=str(free_port()))
        op_env.pop("INFERPLAN_NAMESPACES", None)
        command = [sys.executable, "-c", "import sys; from inferplan.cli import main; sys.exit(main())", "operator"]
        if args.profile:
            command = [sys.executable, "-m", "cProfile", "-o", args.profile, "-m", "inferplan.cli", "operator"]
        log = open(run / "operator.log", "wb")
        operator = subprocess.Popen(command, env=op_env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        oplog = OperatorLog(run / "operator.log").start()

        # Ready when a canary plan has its status: watches running, planner imported.
        canary = example_specs()[1]
        objects.create_namespaced_custom_object(GROUP, VERSION, "bench-canary", PLURAL, {
            "apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "canary"},
            "spec": canary})
        deadline = time.monotonic() + 120
        while not (objects.get_namespaced_custom_object(GROUP, VERSION, "bench-canary", PLURAL, "canary")
                   .get("status") or {}).get("observedGeneration"):
            if time.monotonic() > deadline or operator.poll() is not None:
                print("the operator did not answer the canary plan; log:", (run / "operator.log").read_text()[-3000:])
                return 1
            time.sleep(0.2)
        cpu_idle_start = cpu_seconds(operator.pid)
        time.sleep(5)
        idle_cpu = cpu_seconds(operator.pid) - cpu_idle_start
        sampler = MemorySampler(operator.pid)
        time.sleep(1.0)
        idle_memory = sampler.report()

        plans = make_plans(args.plans, namespaces, args.seed)
        by_key = {(p["namespace"], p["name"]): p for p in plans}
        applied: dict[tuple[str, str], float] = {}
        answered: dict[tuple[str, str], float] = {}
        latest: dict[tuple[str, str], dict[str, Any]] = {}
        writes: list[tuple[float, tuple[str, str], bool]] = []  # (when, plan, whether its answer stayed the same)
        lock = threading.Lock()

        def on_event(obj: dict[str, Any], t: float) -> None:
            key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
            if key not in by_key:
                return
            status = obj.get("status") or {}
            with lock:
                previous = latest.get(key)
                version = obj["metadata"]["resourceVersion"]
                if previous is not None and previous["metadata"]["resourceVersion"] != version:
                    # One status write (or spec change): did it change the answer the plan had?
                    writes.append((t, key, _answer(previous.get("status")) == _answer(status)))
                latest[key] = obj
                ready = _condition(obj, "Ready").get("status")
                if (key not in answered and status.get("observedGeneration") == obj["metadata"]["generation"]
                        and ready in ("True", "False")):
                    answered[key] = t

        watch = PlanWatch(objects, on_event).start()
        time.sleep(1.0)
        cpu0 = cpu_seconds(operator.pid)
        count0, sum0 = reconciles(metrics_url)
        uptime0 = Path("/proc/loadavg").read_text().split()[:3]

        def apply(plan: dict[str, Any]) -> None:
            body = {"apiVersion": API_VERSION, "kind": KIND,
                    "metadata": {"name": plan["name"]}, "spec": plan["spec"]}
            client = kubernetes.client.CustomObjectsApi(admin)
            for attempt in range(5):
                try:
                    client.create_namespaced_custom_object(GROUP, VERSION, plan["namespace"], PLURAL, body)
                    break
                except kubernetes.client.ApiException as exc:
                    if exc.status == 409 or attempt == 4:
                        raise
                    time.sleep(0.5)
            with lock:
                applied[(plan["namespace"], plan["name"])] = time.monotonic()

        t_start = time.monotonic()
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(apply, plans))
        t_applied = time.monotonic()
        deadline = t_start + args.timeout
        while time.monotonic() < deadline:
            with lock:
                if len(answered) >= len(plans):
                    break
            time.sleep(0.2)
        t_all = max(answered.values()) if len(answered) == len(plans) else math.nan
        cpu1 = cpu_seconds(operator.pid)
        memory1 = sampler.report()
        count1, sum1 = reconciles(metrics_url)
        with lock:
            latencies = [answered[k] - applied[k] for k in answered if k in applied]
            wrong = []
            for key, plan in by_key.items():
                obj = latest.get(key) or {}
                ready = _condition(obj, "Ready")
                want = ("True", None) if plan["expected"] is None else ("False", plan["expected"])
                got = (ready.get("status"), ready.get("reason") if plan["expected"] else None)
                if got != want:
                    wrong.append((key, got, want))
            feasible = sum(1 for obj in latest.values() if _condition(obj, "Feasible").get("status") == "True")

        print(f"machine: {os.cpu_count()} CPUs, load average before {' '.join(uptime0)}, "
              f"after {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
        print(f"plans: {len(plans)} in {len(namespaces)} namespaces; expected Ready=False: "
              f"{sum(1 for p in plans if p['expected'])}; can use {CHANGED_KEY}: {sum(p['l40s'] for p in plans)}")
        print(f"operator idle (canary only, 5 s): {idle_cpu:.2f} CPU s; memory: {idle_memory}")
        print(f"applied all in {t_applied - t_start:.1f} s")
        print(f"answered: {len(answered)}/{len(plans)}; all answered {t_all - t_start:.1f} s after the first apply")
        print(f"apply -> status: p50 {percentile(latencies, 0.5):.1f} s, p99 {percentile(latencies, 0.99):.1f} s, "
              f"max {max(latencies, default=math.nan):.1f} s")
        print(f"Ready as expected: {len(plans) - len(wrong)}/{len(plans)}; Feasible=True: {feasible}")
        for key, got, want in wrong[:10]:
            print(f"  unexpected: {key[0]}/{key[1]} Ready={got} expected {want}")
        print(f"operator CPU during the load: {cpu1 - cpu0:.1f} s; reconciles {count1 - count0:.0f} "
              f"(their durations, queueing for a planner included, sum to {sum1 - sum0:.0f} s)")
        print(f"operator memory: {memory1}")

        # Step 5: one more L40S node. Who is re-planned, and who is left alone?
        time.sleep(3.0)
        with lock:
            before = {k: (o["metadata"]["resourceVersion"], json.dumps(o.get("status"), sort_keys=True))
                      for k, o in latest.items()}
        gpus_now = layout[CHANGED_PRODUCT][1] * layout[CHANGED_PRODUCT][0]
        cpu2 = cpu_seconds(operator.pid)
        count2, _ = reconciles(metrics_url)
        target = gpus_now + layout[CHANGED_PRODUCT][1]
        capable = {k for k, p in by_key.items() if p["l40s"]}
        # The plans whose answer the new count leaves: planned again, for a range that holds it (written when the
        # answer changed, else only logged). The others that can use L40S already hold it: nothing to do.
        capable = {k for k in capable if not oplog.holds(k, {CHANGED_KEY: target})}
        kept0, written0 = oplog.kept, oplog.written
        t_change = time.monotonic()
        core.create_node(node_body("nvidia-l40s-extra", CHANGED_PRODUCT, layout[CHANGED_PRODUCT][1]))
        deadline = t_change + args.timeout
        while time.monotonic() < deadline:
            if all(oplog.holds(k, {CHANGED_KEY: target}) for k in capable):
                break
            time.sleep(0.2)
        done = {k for k in capable if oplog.holds(k, {CHANGED_KEY: target})}
        answers = [oplog.when(k) for k in done]
        t_replanned = max((w[0] for w in answers if w is not None), default=math.nan)
        time.sleep(15.0)  # a quiet period: three inventory checks (INFERPLAN_CHECK_SECONDS=5) more
        with lock:
            after = {k: (o["metadata"]["resourceVersion"], json.dumps(o.get("status"), sort_keys=True))
                     for k, o in latest.items()}
        cpu3 = cpu_seconds(operator.pid)
        count3, _ = reconciles(metrics_url)
        memory3 = sampler.report()
        others = set(by_key) - capable
        touched = [k for k in others if after.get(k) != before.get(k)]
        changed_capable = sum(1 for k in capable if after.get(k, ("",))[0] != before.get(k, ("",))[0])
        when = (f"the last {t_replanned - t_change:.1f} s after the change" if done
                else "none to re-plan" if not capable else "none within the timeout")
        print(f"inventory change (+1 {CHANGED_KEY} node): {len(done)}/{len(capable)} plans whose {CHANGED_KEY} "
              f"range it left re-planned, {when}: {sum(1 for w in answers if w and w[1])} written (their answer "
              f"changed), {sum(1 for w in answers if w and not w[1])} with the same answer not written (log lines "
              f"meanwhile: {oplog.written - written0} writes, {oplog.kept - kept0} same answers)")
        print(f"other plans (cannot use {CHANGED_KEY}, or their range holds the new count): {len(others)}, written "
              f"to: {len(touched)} (resourceVersion or status changed); re-planned plans written: {changed_capable}")
        print(f"operator CPU for the change and 15 s quiet: {cpu3 - cpu2:.1f} s; reconciles {count3 - count2:.0f}")
        cpu4 = cpu_seconds(operator.pid)
        time.sleep(10.0)
        rest = cpu_seconds(operator.pid) - cpu4
        print(f"operator CPU at rest with {len(plans)} plans (10 s, nothing changing): {rest:.2f} s")
        print(f"operator memory at the end: {memory3}")
        if args.churn > 0:
            churn(args.churn, core, layout, by_key, writes, lock, oplog, operator.pid, metrics_url,
                  sampler, args.seed, args.timeout)
        return 0
    finally:
        if watch is not None:
            watch.stop()
        if oplog is not None:
            oplog.stop()
        if operator is not None:
            os.killpg(operator.pid, signal.SIGTERM)  # its own session: the operator and any workers
            try:
                operator.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(operator.pid, signal.SIGKILL)
                operator.wait()
        if args.log and (run / "operator.log").is_file():
            shutil.copyfile(run / "operator.log", args.log)
        subprocess.run([str(TESTENV / "stop.sh"), str(run), "--rm"], capture_output=True, check=False)


if __name__ == "__main__":
    sys.exit(main())
